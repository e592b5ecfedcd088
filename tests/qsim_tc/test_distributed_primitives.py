"""Qiskit's Sampler and Estimator over a distributed state, on 2, 4 and 8 thread ranks: the
values of Qiskit's statevector primitives, the same result on every rank, and no gather (each
rank's readouts go through its slice only)."""

import numpy as np
import pytest
from test_distributed_ranks import _Solo, on_ranks

pytest.importorskip("qiskit")

from qiskit import QuantumCircuit  # noqa: E402
from qiskit.circuit import Parameter  # noqa: E402
from qiskit.primitives import StatevectorEstimator  # noqa: E402
from qiskit.quantum_info import SparsePauliOp, Statevector  # noqa: E402

from qsim_tc.distributed.primitives import DistributedEstimator, DistributedSampler  # noqa: E402
from qsim_tc.distributed.state import DistributedState  # noqa: E402


def _circuit(n: int, measure: bool = False) -> QuantumCircuit:
    theta = Parameter("t")
    qc = QuantumCircuit(n)
    for q in range(n):
        qc.h(q)
        qc.ry(0.3 * (q + 1), q)
    for q in range(n - 1):
        qc.cx(q, q + 1)
        qc.rz(theta, q + 1)
    qc.cp(0.7, 0, n - 1)
    qc.swap(1, n - 2)
    qc.rx(theta * 0.5, n - 1)
    if measure:
        qc.measure_all()
    return qc


@pytest.mark.parametrize("size", [2, 4, 8])
def test_estimator_over_ranks_equals_qiskit_statevector_estimator(size, monkeypatch):
    n = 6
    qc = _circuit(n)
    rng = np.random.default_rng(size)
    labels = ["".join(rng.choice(list("IXYZ"), n)) for _ in range(12)]
    obs = [SparsePauliOp(labels[:6], rng.standard_normal(6)), SparsePauliOp(labels[6:], rng.standard_normal(6)),
           SparsePauliOp("Z" * n)]
    params = [[0.2], [1.1]]
    want = StatevectorEstimator().run([(qc, [[o] for o in obs], params)]).result()[0].data.evs
    calls = []
    values = DistributedState.expectation_values

    def spy(self, operators, what="expectation_values"):
        calls.append(len(operators))
        return values(self, operators, what)

    monkeypatch.setattr(DistributedState, "expectation_values", spy)
    gather = DistributedState.gather
    monkeypatch.setattr(DistributedState, "gather", lambda *a, **k: pytest.fail("the state was gathered"))

    def body(comm):
        est = DistributedEstimator(comm, backend="native", fuse=None, plan=None)
        res = est.run([(qc, [[o] for o in obs], params)]).result()[0]
        return res.data.evs, res.metadata

    per_rank = on_ranks(size, body)
    monkeypatch.setattr(DistributedState, "gather", gather)
    evs, meta = per_rank[0]
    np.testing.assert_allclose(evs, want, atol=1e-12)
    assert all(np.array_equal(r[0], evs) for r in per_rank)
    assert calls == [len(obs)] * (2 * size)  # every observable of a binding in one call a rank
    assert meta["error"]["l2_bound"] is not None


@pytest.mark.parametrize("size", [2, 4, 8])
def test_sampler_over_ranks_draws_the_distribution_the_same_on_every_rank(size):
    n = 6
    qc = _circuit(n, measure=True)
    bound = qc.assign_parameters([0.4])
    probs = Statevector(bound.remove_final_measurements(inplace=False)).probabilities()
    shots = 4000

    def body(comm):
        res = DistributedSampler(comm, backend="native", fuse=None, plan=None, seed=11).run([(qc, [0.4])],
                                                                                           shots=shots).result()
        again = DistributedSampler(comm, backend="native", fuse=None, plan=None, seed=11).run([(qc, [0.4])],
                                                                                             shots=shots).result()
        return res[0].data.meas.get_int_counts(), res[0].data.meas.get_bitstrings()[:50], \
            again[0].data.meas.get_bitstrings()[:50]

    per_rank = on_ranks(size, body)
    counts, first, repeat = per_rank[0]
    assert first == repeat  # the seed fixes the draws
    assert all(r[1] == first for r in per_rank)  # every rank has the same draws
    assert sum(counts.values()) == shots
    freq = np.zeros(1 << n)
    for k, v in counts.items():
        freq[k] = v / shots
    assert np.all(np.abs(freq - probs) <= 5 * np.sqrt(probs * (1 - probs) / shots) + 2e-3)


def test_estimator_precision_noise_is_the_same_on_every_rank():
    """A PUB's target precision draws normal noise on the values: without a seed, every rank's
    values are still the same (the generator's entropy comes from rank 0), and differ from run
    to run; with a seed, as before, they follow it."""
    qc = _circuit(4).assign_parameters([0.3])
    obs = [SparsePauliOp("ZIIZ"), SparsePauliOp("XXII")]

    def body(comm):
        runs = [DistributedEstimator(comm, backend="native", fuse=None, plan=None, seed=seed)
                .run([(qc, obs)], precision=0.5).result()[0].data.evs for seed in (None, None, 7)]
        return runs

    per_rank = on_ranks(2, body)
    for k in range(3):
        assert all(np.array_equal(r[k], per_rank[0][k]) for r in per_rank), k
    assert not np.array_equal(per_rank[0][0], per_rank[0][1])
    exact = StatevectorEstimator().run([(qc, obs)]).result()[0].data.evs
    np.testing.assert_allclose(per_rank[0][2], np.random.default_rng(7).normal(exact, 0.5), atol=1e-9)


def test_distributed_primitives_name_a_bad_communicator():
    with pytest.raises(TypeError, match="comm must be an mpi4py communicator, got str"):
        DistributedEstimator("world")
    with pytest.raises(TypeError, match="comm must be an mpi4py communicator, got NoneType"):
        DistributedSampler(None)

    # values a run would refuse are refused here, on every rank alike, not inside the run's
    # abort guard (which ends every rank of the job)
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu' or 'gpu' for a distributed run, got 'cuda'"):
        DistributedEstimator(_Solo(2, 0), device="cuda")
    with pytest.raises(ValueError, match="exchange_plan must be 'fewest' or 'stages', got 'best'"):
        DistributedSampler(_Solo(2, 0), exchange_plan="best")


def test_sampler_draws_come_in_random_order_not_rank_by_rank():
    """The ranks draw from their own slices; the joined draws are shuffled (the same way on every
    rank), so a run's first shots are not all from rank 0's slice."""
    from qsim_tc.distributed.primitives import _Sampling

    n, size = 6, 4

    def body(comm):
        st = DistributedState(comm, n, data=np.full(1 << (n - 2), 1 / 8, dtype=np.complex128))  # uniform
        return _Sampling(st).sample(400, seed=3, qubits=list(range(n)))

    per_rank = on_ranks(size, body)
    draws = per_rank[0]
    assert all(np.array_equal(d, draws) for d in per_rank)
    owners = draws >> (n - 2)  # identity layout: the top two bits are the rank
    assert sorted(set(owners.tolist())) == [0, 1, 2, 3] and np.any(np.diff(owners) < 0)
