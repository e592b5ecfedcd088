"""qsim_tc.qiskit Sampler / Estimator against Qiskit's StatevectorSampler / StatevectorEstimator."""

import numpy as np
import pytest

pytest.importorskip("qiskit")

from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister  # noqa: E402
from qiskit.circuit import Parameter  # noqa: E402
from qiskit.circuit.library import efficient_su2, quantum_volume  # noqa: E402
from qiskit.primitives import StatevectorEstimator, StatevectorSampler  # noqa: E402
from qiskit.quantum_info import SparsePauliOp, Statevector, random_pauli_list  # noqa: E402
from scipy.stats import chisquare  # noqa: E402

import qsim_tc.qiskit as qq  # noqa: E402
from qsim_tc import StateVector  # noqa: E402
from qsim_tc.qiskit import Estimator, Sampler, pauli_expectation_values  # noqa: E402


def counts_vector(bitarray, n_bits, index=()):
    counts = bitarray.get_int_counts(*index) if index else bitarray.get_int_counts()
    return np.array([counts.get(k, 0) for k in range(1 << n_bits)])


# --- Sampler ---------------------------------------------------------------------------------


def test_sampling_matches_exact_probabilities_chi_square():
    qc = quantum_volume(4, seed=9)
    probs = Statevector(qc).probabilities()
    qc.measure_all()
    shots = 20000
    res = Sampler(device="cpu", seed=1234).run([qc], shots=shots).result()[0]
    observed = counts_vector(res.data.meas, 4)
    assert observed.sum() == shots
    assert chisquare(observed, probs * shots).pvalue > 1e-3
    # the test has power: the same counts are far from a uniform distribution
    assert chisquare(observed, np.full(16, shots / 16)).pvalue < 1e-6
    # and Qiskit's own sampler agrees with the same exact probabilities
    ref = StatevectorSampler(seed=1234).run([qc], shots=shots).result()[0]
    assert chisquare(counts_vector(ref.data.meas, 4), probs * shots).pvalue > 1e-3


def registers_circuit():
    q = QuantumRegister(5, "q")
    alpha, beta = ClassicalRegister(3, "alpha"), ClassicalRegister(10, "beta")
    qc = QuantumCircuit(q, alpha, beta)
    qc.x([0, 3, 4])
    qc.ry(Parameter("t"), 1)
    qc.measure(4, alpha[0])
    qc.measure(0, alpha[2])
    qc.measure(3, beta[9])
    qc.measure(1, beta[4])
    qc.measure(3, beta[0])  # one qubit into two bits
    return qc


def test_registers_and_bits_match_qiskit_exactly_on_deterministic_outcomes():
    qc = registers_circuit()
    params = np.array([[0.0], [np.pi]])  # outcomes are certain for both values
    ours = Sampler(device="cpu", seed=0).run([(qc, params)], shots=7).result()
    ref = StatevectorSampler(seed=0).run([(qc, params)], shots=7).result()
    for name in ("alpha", "beta"):
        a, b = ours[0].data[name], ref[0].data[name]
        assert a.shape == b.shape == (2,) and a.num_bits == b.num_bits and a.num_shots == b.num_shots == 7
        assert a.array.dtype == b.array.dtype == np.uint8
        np.testing.assert_array_equal(a.array, b.array)
    assert ours[0].data.beta.get_bitstrings(1)[0] == "1000010001"
    # Qiskit's keys, and the run's error bound (here "no bound": the two bindings ran batched)
    assert {k: v for k, v in ours[0].metadata.items() if k != "error"} == ref[0].metadata == \
        {"shots": 7, "circuit_metadata": {}}
    assert ours[0].metadata["error"]["l2_bound"] is None and "batched" in ours[0].metadata["error"]["no_bound"]
    assert ours.metadata["version"] == 2 and ours.metadata["simulator"]["backend"] == "auto"


def test_parameter_broadcasting_shots_and_default_shots():
    qc = QuantumCircuit(2)
    qc.rx(Parameter("a"), 0)
    qc.ry(Parameter("b"), 1)
    qc.measure_all()
    vals = np.random.default_rng(0).uniform(0, np.pi, (2, 3, 2))
    s = Sampler(device="cpu", default_shots=33, seed=5)
    r = s.run([(qc, vals), (qc, vals[0, 0], 50)]).result()
    ref = StatevectorSampler(default_shots=33, seed=5).run([(qc, vals), (qc, vals[0, 0], 50)]).result()
    assert r[0].data.meas.shape == ref[0].data.meas.shape == (2, 3)
    assert r[0].data.meas.num_shots == 33 and r[1].data.meas.num_shots == 50
    assert r[1].data.meas.shape == ref[1].data.meas.shape == ()
    assert s.default_shots == 33 and s.seed == 5


def test_broadcast_samples_follow_each_points_distribution():
    """Every point of a (2, 3) parameter array is sampled from its own circuit: chi-square of each
    point's counts against its exact probabilities (seeded, so the same samples every run), and
    against the neighbouring point's probabilities, which must be rejected (the values, not
    only the shapes, are checked)."""
    qc = QuantumCircuit(2)
    qc.rx(Parameter("a"), 0)
    qc.ry(Parameter("b"), 1)
    qc.cx(0, 1)
    vals = np.array([[[0.3, 2.8], [1.1, 0.2], [2.5, 1.6]], [[0.9, 0.5], [2.9, 2.2], [1.7, 3.0]]])
    shots = 4000
    res = Sampler(device="cpu", seed=17).run([(qc.measure_all(inplace=False), vals, shots)]).result()[0]
    meas = res.data.meas
    assert meas.shape == (2, 3) and meas.num_shots == shots
    exact = {idx: Statevector(qc.assign_parameters(vals[idx])).probabilities() for idx in np.ndindex(2, 3)}
    for idx in np.ndindex(2, 3):
        observed = counts_vector(meas, 2, (idx,))
        assert observed.sum() == shots
        p = exact[idx]
        keep = p > 0  # outcomes of probability 0 must not occur at all
        assert observed[~keep].sum() == 0
        assert chisquare(observed[keep], p[keep] * shots).pvalue > 1e-4, idx
        other = exact[(idx[0], (idx[1] + 1) % 3)]
        assert np.any(observed[other == 0]) or chisquare(observed, other * shots).pvalue < 1e-6, idx


@pytest.mark.parametrize("backend, options", [("int8", {"splits": 5}), ("tf32tf32", {})])
def test_sampler_on_an_emulated_backend(backend, options):
    """The Sampler runs the circuit through an emulated GEMM (5 INT8 slices: ~30 bits; tf32tf32:
    FP32 class) and samples its state: chi-square against the exact probabilities, whose error
    (< 1e-6) is far below what 20000 shots resolve."""
    qc = quantum_volume(4, seed=9)
    probs = Statevector(qc).probabilities()
    qc.measure_all()
    shots = 20000
    res = Sampler(backend=backend, device="cpu", seed=99, **options).run([qc], shots=shots).result()
    observed = counts_vector(res[0].data.meas, 4)
    assert observed.sum() == shots
    assert chisquare(observed, probs * shots).pvalue > 1e-3
    assert res.metadata["simulator"]["backend"] == backend


def test_seed_reproduces_samples():
    qc = quantum_volume(3, seed=1)
    qc.measure_all()
    a = Sampler(device="cpu", seed=11).run([qc], shots=100).result()[0].data.meas.array
    b = Sampler(device="cpu", seed=11).run([qc], shots=100).result()[0].data.meas.array
    c = Sampler(device="cpu", seed=12).run([qc], shots=100).result()[0].data.meas.array
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_no_classical_registers_warns_and_returns_empty():
    qc = QuantumCircuit(2)
    qc.h(0)
    with pytest.warns(UserWarning, match="no output classical registers"):
        res = Sampler(device="cpu").run([qc], shots=10).result()[0]
    assert len(res.data) == 0


def test_sampler_runs_mid_circuit_measurement():
    """A qubit measured, then changed and measured again (what a unitary circuit cannot hold)
    runs with shot branching: the second reading is a fair coin, the first always 0."""
    qc = QuantumCircuit(1, 2)
    qc.measure(0, 0)
    qc.h(0)
    qc.measure(0, 1)
    shots = 4000
    counts = Sampler(device="cpu", seed=3).run([qc], shots=shots).result()[0].data.c.get_counts()
    assert set(counts) <= {"00", "10"} and sum(counts.values()) == shots
    assert chisquare([counts.get("00", 0), counts.get("10", 0)], [shots / 2, shots / 2]).pvalue > 1e-3


def test_sampler_runs_dynamic_circuits_per_binding():
    """Mid-circuit measurement, a condition on its bit, a reset, with an array of bindings and two
    registers: each binding's outcomes follow its exact probability, the conditioned copy always
    agrees with the measured bit, and the reset qubit always reads 0; the metadata say why no
    error bound is given."""
    t = Parameter("t")
    m, out = ClassicalRegister(1, "m"), ClassicalRegister(2, "out")
    qc = QuantumCircuit(QuantumRegister(2, "q"), m, out)
    qc.rx(t, 0)
    qc.measure(0, m[0])  # 1 with probability sin^2(t / 2)
    with qc.if_test((m, 1)):
        qc.x(1)  # copies the outcome
    qc.reset(0)
    qc.measure(0, out[0])
    qc.measure(1, out[1])
    thetas = np.array([0.4, 1.9, np.pi])
    shots = 4000
    res = Sampler(device="cpu", seed=5).run([(qc, thetas)], shots=shots).result()[0]
    assert res.data.m.shape == res.data.out.shape == (3,)
    for i, theta in enumerate(thetas):
        first = res.data.m[i].get_counts()
        assert set(res.data.out[i].get_counts()) <= {"00", "10"}  # out[0] (reset) 0, out[1] the copy
        np.testing.assert_array_equal(res.data.m[i].array[:, 0], res.data.out[i].array[:, 0] >> 1)
        p1 = np.sin(theta / 2) ** 2
        assert sum(first.values()) == shots
        assert abs(first.get("1", 0) - shots * p1) <= 5 * np.sqrt(shots * p1 * (1 - p1)) + 1
    assert "mid-circuit" in res.metadata["error"]["no_bound"]
    again = Sampler(device="cpu", seed=5).run([(qc, thetas)], shots=shots).result()[0]
    np.testing.assert_array_equal(again.data.out.array, res.data.out.array)  # the seed fixes the outcomes


# --- Estimator -------------------------------------------------------------------------------


def estimator_pub():
    qc = efficient_su2(5, reps=2)
    params = np.random.default_rng(1).uniform(-np.pi, np.pi, (3, qc.num_parameters))
    p = random_pauli_list(5, 7, seed=3, phase=False)
    obs = [[SparsePauliOp(p[:3], [0.5, -1.0, 2.0])], [SparsePauliOp(p[3:])], [SparsePauliOp("ZZIII")],
           [SparsePauliOp("YIIXY")]]
    return qc, obs, params


def test_estimator_matches_statevector_estimator():
    pub = estimator_pub()
    ours = Estimator(device="cpu").run([pub]).result()
    ref = StatevectorEstimator().run([pub]).result()
    assert ours[0].data.evs.shape == ref[0].data.evs.shape == (4, 3)
    assert np.abs(ours[0].data.evs - ref[0].data.evs).max() <= 1e-12
    np.testing.assert_array_equal(ours[0].data.stds, ref[0].data.stds)
    assert {k: v for k, v in ours[0].metadata.items() if k != "error"} == ref[0].metadata
    assert "error" in ours[0].metadata


def test_estimator_precision_noise_is_qiskits_for_the_same_seed():
    pub = estimator_pub()
    ours = Estimator(device="cpu", seed=42).run([pub], precision=0.05).result()[0]
    ref = StatevectorEstimator(seed=42).run([pub], precision=0.05).result()[0]
    assert np.abs(ours.data.evs - ref.data.evs).max() <= 1e-12
    assert ours.metadata["target_precision"] == 0.05
    exact = Estimator(device="cpu").run([pub]).result()[0].data.evs
    assert np.abs(ours.data.evs - exact).max() > 1e-4  # the noise is there


def test_estimator_on_emulated_backends_within_their_bound():
    pub = estimator_pub()
    ref = StatevectorEstimator().run([pub]).result()[0].data.evs
    for backend, bound in (("dd", 1e-12), ("int8", 1e-12), ("tf32tf32", 1e-5)):
        got = Estimator(backend=backend, device="cpu").run([pub]).result()[0].data.evs
        assert np.abs(got - ref).max() <= bound, backend


def test_pauli_expectations_across_chunks(monkeypatch):
    n = 14  # above the 12 low bits: several rows, high-bit signs and row flips are exercised
    qc = quantum_volume(n, seed=5, depth=3)
    sv = Statevector(qc)
    st = StateVector(n, device="cpu", data=sv.data)
    labels = random_pauli_list(n, 12, seed=8, phase=False).to_labels()
    labels += ["Z" * n, "I" * n, "X" + "I" * (n - 1), "Y" * n]
    ops = [SparsePauliOp(lb) for lb in labels]
    expect = np.array([sv.expectation_value(o).real for o in ops])
    monkeypatch.setitem(qq._CHUNK, "cpu", 1 << 12)  # one row of 4096 per chunk: four chunks
    got = pauli_expectation_values(st, [{lb: 1.0} for lb in labels])
    assert np.abs(got - expect).max() <= 1e-12
    combo = pauli_expectation_values(st, [SparsePauliOp(labels[:4], [1.0, -2.0, 0.5, 3.0])])
    assert combo[0] == pytest.approx(expect[0] - 2 * expect[1] + 0.5 * expect[2] + 3 * expect[3], abs=1e-12)


def test_bad_input():
    st = StateVector(2, device="cpu")
    with pytest.raises(ValueError, match=r"Pauli label 'XQ' holds 'Q'; expected only I, X, Y, Z"):
        pauli_expectation_values(st, [{"XQ": 1.0}])
    with pytest.raises(ValueError, match=r"Pauli label 'XXX' has 3 letters; the state has 2 qubits"):
        pauli_expectation_values(st, [{"XXX": 1.0}])
    with pytest.raises(ValueError, match="default_shots must be a positive int, got 0"):
        Sampler(default_shots=0)
    with pytest.raises(ValueError, match=r"default_precision must be a finite float >= 0, got -1"):
        Estimator(default_precision=-1.0)
    with pytest.raises(ValueError, match="unknown GEMM method 'fast'"):
        Sampler(backend="fast")


# --- GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_sampler_runs_dynamic_circuits(cp):
    """The Sampler's dynamic path on a GPU state: a mid-circuit measurement, a reset and a
    condition give the outcome frequencies of the exact probability, as on the CPU."""
    t = Parameter("t")
    qc = QuantumCircuit(2, 2)
    qc.rx(t, 0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    qc.reset(0)
    qc.measure(1, 1)
    shots = 4000
    res = Sampler(device="gpu", seed=9).run([(qc, [1.1])], shots=shots).result()[0]
    counts = res.data.c.get_counts()
    assert set(counts) <= {"00", "11"} and sum(counts.values()) == shots
    p1 = np.sin(0.55) ** 2
    assert abs(counts.get("11", 0) - shots * p1) <= 5 * np.sqrt(shots * p1 * (1 - p1))


@pytest.mark.gpu
def test_gpu_estimator_and_sampler_match_qiskit(cp):
    pub = estimator_pub()
    ref = StatevectorEstimator().run([pub]).result()[0].data.evs
    got = Estimator(device="gpu").run([pub]).result()[0].data.evs
    assert np.abs(got - ref).max() <= 1e-12
    qc = quantum_volume(4, seed=9)
    probs = Statevector(qc).probabilities()
    qc.measure_all()
    res = Sampler(device="gpu", seed=1234).run([qc], shots=20000).result()[0]
    assert chisquare(counts_vector(res.data.meas, 4), probs * 20000).pvalue > 1e-3


@pytest.mark.gpu
def test_gpu_pauli_expectations_across_chunks(cp, monkeypatch):
    n = 14
    sv = Statevector(quantum_volume(n, seed=5, depth=3))
    st = StateVector(n, device="gpu", data=cp.asarray(sv.data))
    labels = random_pauli_list(n, 10, seed=8, phase=False).to_labels() + ["Y" * n]
    expect = np.array([sv.expectation_value(SparsePauliOp(lb)).real for lb in labels])
    monkeypatch.setitem(qq._CHUNK, "gpu", 1 << 12)
    got = pauli_expectation_values(st, [{lb: 1.0} for lb in labels])
    assert np.abs(got - expect).max() <= 1e-12
