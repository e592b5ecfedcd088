"""The distributed plan: fewer data-moving exchanges than the stage planner's plan (free relabels of
qubits still |0>, the initial layout chosen, exchanges widened), no exchange for diagonal gates on
global qubits, bytes per exchange as theory, and the state equal to one process's on thread ranks."""

import numpy as np
import pytest
from test_distributed_ranks import on_ranks

from circuits import Circuit, Gate
from qsim_tc import Simulator
from qsim_tc.distributed.plan import _account, plan_distributed
from qsim_tc.distributed.run import run_distributed
from qsim_tc.distributed.selfcheck import random_circuit
from qsim_tc.stages.structure import classify

H = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
SWAP = np.eye(4, dtype=complex)[[0, 2, 1, 3]]


def qft(n: int, *, hadamards: bool) -> Circuit:
    """QFT as Qiskit writes it (H, controlled phases from the top qubit down, swaps), after an H
    on every qubit when ``hadamards``."""
    c = Circuit(n)
    if hadamards:
        for q in range(n):
            c.append(Gate(H, (q,), "h"))
    for j in reversed(range(n)):
        c.append(Gate(H, (j,), "h"))
        for k in reversed(range(j)):
            c.append(Gate(np.diag([1, 1, 1, np.exp(1j * np.pi / 2 ** (j - k))]), (j, k), "cp"))
    for k in range(n // 2):
        c.append(Gate(SWAP, (k, n - 1 - k), "swap"))
    return c


@pytest.mark.parametrize("hadamards", [False, True])
@pytest.mark.parametrize("g", [1, 2, 3])
def test_qft_20_needs_one_exchange_where_the_stage_plan_takes_two(g, hadamards):
    c = qft(20, hadamards=hadamards)
    before = plan_distributed(c, 20 - g, search=False)
    after = plan_distributed(c, 20 - g)
    assert (before.exchanges, before.swapped_bits) == (2, 2 * g)
    assert (after.exchanges, after.swapped_bits, len(after.stages)) == (1, g, 2)
    assert after.slices_sent == 1 - 2.0 ** -g
    if hadamards:  # the low qubits start global (without the H layer, swapping them in is free)
        assert set(after.initial_layout[20 - g:]) == set(range(g))


@pytest.mark.parametrize("hadamards", [True, False])
@pytest.mark.parametrize("size", [2, 4, 8])
def test_qft_on_thread_ranks_exchanges_once_and_equals_one_process(size, hadamards):
    """QFT-12 (after H, or from |0...0> where the stage plan's first swaps become relabels) on 2,
    4 and 8 ranks: one exchange of all g bits where the stage plan takes two; the bytes sent are
    (2^g - 1)/2^g of a slice; the state equals one process's to 1e-13."""
    n = 12
    c = qft(n, hadamards=hadamards)
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state.to_numpy()

    def body(comm):
        out = []
        for how in ("stages", "fewest"):
            st = run_distributed(c, comm, backend="native", device="cpu", exchange_plan=how, plan=None, fuse=None)
            out.append((st.gather(root=0), st.exchanges, st.bytes_sent))
        return out

    per_rank = on_ranks(size, body)
    g = size.bit_length() - 1
    slice_bytes = (1 << (n - g)) * 16
    (old, old_ex, _), (new, new_ex, _) = per_rank[0]
    np.testing.assert_allclose(old, ref, atol=1e-13)
    np.testing.assert_allclose(new, ref, atol=1e-13)
    assert (old_ex, new_ex) == (2, 1)
    for r in range(size):
        assert per_rank[r][1][2] == slice_bytes - slice_bytes // size  # one all-to-all of g bits


def test_a_swap_of_two_qubits_still_zero_is_a_relabel():
    """QFT without the H layer from the identity layout: the stage plan swaps the low qubits in
    before any gate touched them; those swaps are relabels (free), the other exchange moves."""
    c = qft(10, hadamards=False)
    stages = plan_distributed(c, 8, search=False)
    assert [bool(m) for m in stages.moves] == [True, True] and not any(stages.relabels)
    free = _account(c, [classify(gt.matrix) for gt in c.gates], 8, stages.initial_layout, stages.stages)
    assert free.exchanges == 1 and sum(map(len, free.relabels)) == 2


@pytest.mark.parametrize("size", [2, 4, 8])
def test_diagonal_gates_on_global_qubits_need_no_exchange(size):
    """H on every qubit, then CZ, controlled phases, RZ and a 3-qubit diagonal on all qubits,
    global ones included: one exchange (for the H layer), none for the diagonals."""
    n = 7
    rng = np.random.default_rng(size)
    c = Circuit(n)
    for q in range(n):
        c.append(Gate(H, (q,), "h"))
    for _ in range(30):
        kind = rng.integers(4)
        if kind == 0:
            c.append(Gate(np.diag([1, 1, 1, -1]).astype(complex), tuple(int(q) for q in rng.choice(n, 2, False)), "cz"))
        elif kind == 1:
            pair = tuple(int(q) for q in rng.choice(n, 2, False))
            c.append(Gate(np.diag([1, 1, 1, np.exp(1j * rng.uniform(0, 6))]), pair, "cp"))
        elif kind == 2:
            t = rng.uniform(0, 6)
            c.append(Gate(np.diag([np.exp(-0.5j * t), np.exp(0.5j * t)]), (int(rng.integers(n)),), "rz"))
        else:
            c.append(Gate(np.diag(np.exp(1j * rng.uniform(0, 6, 8))), tuple(int(q) for q in rng.choice(n, 3, False)),
                          "diag"))
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state.to_numpy()

    def body(comm):
        st = run_distributed(c, comm, backend="native", device="cpu", plan=None, fuse=None)
        return st.gather(root=0), st.exchanges

    per_rank = on_ranks(size, body)
    np.testing.assert_allclose(per_rank[0][0], ref, atol=1e-13)
    assert all(ex == 1 for _, ex in per_rank)


@pytest.mark.parametrize(("size", "n", "seed"), [(2, 7, 11), (4, 8, 12), (8, 8, 13)])
def test_random_circuits_of_every_gate_kind_equal_one_process_with_either_plan(size, n, seed):
    """Dense, controlled, diagonal, permutation and SWAP gates: the chosen plan never exchanges
    more than the stage plan, and both states equal one process's to 1e-13."""
    c = random_circuit(n, 80, seed)
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state.to_numpy()

    def body(comm):
        out = []
        for how in ("stages", "fewest"):
            st = run_distributed(c, comm, backend="native", device="cpu", exchange_plan=how, plan=None, fuse=None)
            out.append((st.gather(root=0), st.exchanges))
        return out

    (old, old_ex), (new, new_ex) = on_ranks(size, body)[0]
    np.testing.assert_allclose(old, ref, atol=1e-13)
    np.testing.assert_allclose(new, ref, atol=1e-13)
    assert new_ex <= old_ex


def test_plan_names_its_bad_arguments():
    c = qft(4, hadamards=False)
    with pytest.raises(TypeError, match="circuit must be a circuits.Circuit"):
        plan_distributed("qft", 3)
    for bad in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="local_qubits must be an int in 1..4"):
            plan_distributed(c, bad)
    with pytest.raises(ValueError, match="exchange_plan must be 'fewest' or 'stages', got 'best'"):
        on_ranks(2, lambda comm: run_distributed(c, comm, exchange_plan="best"))
