"""Gate fusion: fused and unfused runs agree, blocks are valid, the cost-based choice, bad input."""

import numpy as np
import pytest

from circuits import Circuit, CircuitError, Gate, brickwork, haar_unitary
from circuits.fusion import block_matrix, check_fuse_option, choose_size, fuse, plan
from qsim_tc import Simulator


def random_gate_circuit(n, n_gates, max_width, seed):
    rng = np.random.default_rng(seed)
    c = Circuit(n, name=f"rand{seed}", global_phase=0.25)
    for _ in range(n_gates):
        w = int(rng.integers(1, max_width + 1))
        qs = tuple(int(q) for q in rng.choice(n, w, replace=False))
        c.append(Gate(haar_unitary(1 << w, rng), qs, f"g{w}", check_unitary=False))
    return c


def state(circ, **kw):
    return Simulator("native", device="cpu", **kw).run(circ).state.to_numpy()


def dense(circ):
    """The circuit's unitary by explicit Kronecker expansion (independent of the engine)."""
    n = circ.n_qubits
    u = np.eye(1 << n, dtype=complex)
    for g in circ.gates:
        full = np.zeros((1 << n, 1 << n), dtype=complex)
        others = (1 << n) - 1 - sum(1 << q for q in g.qubits)
        for col in range(1 << n):
            sub = sum(((col >> q) & 1) << j for j, q in enumerate(g.qubits))
            rest = col & ~sum(1 << q for q in g.qubits)
            for row_sub in range(1 << g.num_qubits):
                row = rest | sum(((row_sub >> j) & 1) << q for j, q in enumerate(g.qubits))
                full[row, col] = g.matrix[row_sub, sub]
        # the expansion acts on the gate's qubits only: every nonzero entry keeps the other bits,
        # and it is unitary like the gate
        rows, cols = np.nonzero(full)
        assert np.all((rows & others) == (cols & others))
        assert np.abs(full.conj().T @ full - np.eye(1 << n)).max() <= 1e-12
        u = full @ u
    return u * np.exp(1j * circ.global_phase)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 7])
def test_fused_equals_unfused(seed, d):
    c = random_gate_circuit(9, 60, 3, seed)
    ref = state(c)
    f = fuse(c, d)
    assert all(g.num_qubits <= max(d, 3) for g in f.gates)
    assert np.abs(state(f) - ref).max() <= 1e-12
    assert f.global_phase == c.global_phase


@pytest.mark.parametrize("seed", [30, 31])
def test_fused_equals_unfused_long_mixed_circuits(seed):
    c = random_gate_circuit(10, 250, 4, seed)
    ref = state(c)
    for d in (4, 6, 8):
        assert np.abs(state(fuse(c, d)) - ref).max() <= 1e-12, d


@pytest.mark.parametrize("min_qubits", [2, 4])
def test_padding_to_min_qubits(min_qubits):
    c = random_gate_circuit(8, 40, 2, 11)
    f = fuse(c, 5, min_qubits=min_qubits)
    assert min(g.num_qubits for g in f.gates) >= min_qubits
    assert np.abs(state(f) - state(c)).max() <= 1e-12


def test_block_matrix_matches_dense_expansion():
    c = random_gate_circuit(4, 12, 3, 5)
    m = block_matrix(c.gates, (0, 1, 2, 3))
    assert np.abs(m - dense(Circuit(4, c.gates))).max() <= 1e-12
    # scattered, unsorted block qubits: the matrix is in the listed order (first = low bit)
    sub = [Gate(g.matrix, tuple({0: 7, 1: 2, 2: 5, 3: 0}[q] for q in g.qubits), check_unitary=False) for g in c.gates]
    m2 = block_matrix(sub, (7, 2, 5, 0))
    assert np.abs(m2 - m).max() <= 1e-12


def test_plan_covers_each_gate_once_in_valid_order():
    c = random_gate_circuit(10, 200, 3, 2)
    for d in (2, 4, 6):
        blocks = plan(c, d)
        seen = sorted(i for b in blocks for i in b.gates)
        assert seen == list(range(len(c)))
        for b in blocks:
            assert b.gates == sorted(b.gates)
            assert len(b.qubits) <= d or len(b.gates) == 1
            assert set().union(*(c.gates[i].qubits for i in b.gates)) == b.qubits


def test_wide_gates_stay_unfused():
    c = random_gate_circuit(8, 30, 4, 9)
    f = fuse(c, 2)
    assert np.abs(state(f) - state(c)).max() <= 1e-12
    assert sum(g.num_qubits == 4 for g in f.gates) == sum(g.num_qubits == 4 for g in c.gates)


def test_measurements_and_phase_kept():
    c = Circuit(3, [Gate(np.eye(2), (0,)), Gate(np.eye(4), (1, 0))], global_phase=0.5, measured=[(0, 1), (2, 0)])
    f = fuse(c, 2)
    assert f.measured == c.measured and f.n_clbits == 2 and f.global_phase == 0.5 and len(f) == 1


def test_fusion_work_grows_linearly_with_the_circuit(monkeypatch):
    """The planner's work per gate is bounded: convexity checks per gate <= 1 + its dependencies,
    blocks visited per check <= _SEARCH_LIMIT, so doubling the depth doubles the work (a quadratic
    planner would quadruple it). Counted, not timed: speed belongs in the benchmarks."""
    from circuits import fusion

    visits = {"checks": 0, "blocks": 0}
    real_convex = fusion._convex

    class Counting(dict):
        def __getitem__(self, key):
            visits["blocks"] += 1
            return dict.__getitem__(self, key)

    def convex(blocks, members, deps):
        visits["checks"] += 1
        return real_convex(Counting(blocks), members, deps)

    monkeypatch.setattr(fusion, "_convex", convex)
    work = {}
    for depth in (150, 300):
        c = brickwork(20, 2, depth, seed=1)  # 1425 and 2850 two-qubit gates
        visits.update(checks=0, blocks=0)
        f = fuse(c, 5)
        assert len(f) < len(c) / 2
        assert visits["checks"] <= 3 * len(c)  # a 2-qubit gate has at most 2 dependencies
        work[depth] = (len(c), visits["checks"] + visits["blocks"])
    (n1, w1), (n2, w2) = work[150], work[300]
    assert n2 == 2 * n1 and 1.7 <= w2 / w1 <= 2.3, work


def test_simulator_fuse_options_agree_with_native():
    c = random_gate_circuit(10, 80, 2, 4)
    ref = state(c)
    for opt in (3, 6, "auto"):
        assert np.abs(state(c, fuse=opt) - ref).max() <= 1e-12


def test_choose_size_prices_blocks_with_the_given_cost():
    """Fusion needs only a cost per gate width: fusing pays when wide gates cost little more than
    narrow ones, and not when every width costs the same per qubit of work."""
    c = brickwork(12, 2, 10, seed=3)
    flat = choose_size(c, lambda k: 1.0)  # any block costs one gate: fuse as wide as it pays
    assert flat.max_qubits is not None and flat.estimated_ms < flat.unfused_ms == len(c)
    assert flat.n_blocks < len(c)
    steep = choose_size(c, lambda k: 16.0 ** k)  # wide gates far dearer: keep the circuit as it is
    assert steep.max_qubits is None and steep.estimated_ms == steep.unfused_ms == len(c) * 256.0
    assert choose_size(c, lambda k: 1.0, max_candidate=3).max_qubits <= 3


def test_bad_fuse_arguments():
    c = random_gate_circuit(4, 5, 2, 0)
    with pytest.raises(CircuitError, match=r"max_qubits must be in 1..14, got 0"):
        fuse(c, 0)
    with pytest.raises(TypeError, match=r"max_qubits must be an int in 1..14, got 2.5"):
        fuse(c, 2.5)
    with pytest.raises(CircuitError, match=r"min_qubits must be in 1..max_qubits=3, got 4"):
        fuse(c, 3, min_qubits=4)
    with pytest.raises(TypeError, match="circuit must be a circuits.Circuit, got list"):
        fuse([], 3)
    with pytest.raises(TypeError, match=r"fuse must be None, 'auto' or an int in 1..14, got 'fast'"):
        check_fuse_option("fast")
    with pytest.raises(TypeError, match=r"fuse must be None, 'auto' or an int"):
        Simulator("native", device="cpu", fuse="fast")
    with pytest.raises(ValueError, match=r"fuse must be None, 'auto' or an int in 1..14, got 20"):
        Simulator("native", device="cpu", fuse=20)


@pytest.mark.parametrize("backend,bound", [("int8", 1e-12), ("dd", 1e-12), ("tf32tf32", 1e-5), ("native32", 1e-5)])
def test_fused_and_unfused_agree_within_the_backends_bound(backend, bound):
    import gemm

    if backend not in gemm.methods():
        pytest.skip(f"{backend} is not registered")
    c = random_gate_circuit(8, 40, 2, 21)
    ref = state(c)
    for f in (None, 4):
        got = Simulator(backend, device="cpu", fuse=f).run(c).state.to_numpy()
        assert np.abs(got - ref).max() <= bound, (backend, f)


@pytest.mark.gpu
def test_gpu_fused_runs_agree_with_cpu(cp):
    c = random_gate_circuit(12, 60, 3, 8)
    ref = state(c)
    for opt in (None, 5, "auto"):
        got = Simulator("native", device="gpu", fuse=opt).run(c).state.to_numpy()
        assert np.abs(got - ref).max() <= 1e-12, opt
