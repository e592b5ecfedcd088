"""The stage planner and its CPU executor: equal to the gate-at-a-time path on random circuits."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gemm
from circuits import Circuit, Gate, brickwork, from_qiskit, haar_unitary
from qsim_tc import Simulator, StateVector
from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages.cpu import run_stages
from qsim_tc.stages.plan import RELABEL, cpu_local_qubits, plan_stages
from qsim_tc.stages.structure import classify

qiskit = pytest.importorskip("qiskit")
lib = qiskit.circuit.library


def _qiskit(gate) -> np.ndarray:
    return np.asarray(gate.to_matrix(), dtype=np.complex128)


def _mcx(n_controls: int) -> np.ndarray:
    dim = 1 << (n_controls + 1)
    perm = np.arange(dim)
    ones = (1 << n_controls) - 1
    perm[[ones, ones | 1 << n_controls]] = perm[[ones | 1 << n_controls, ones]]
    return np.eye(dim, dtype=complex)[perm]


# (name, width, matrix maker): every structure the planner distinguishes
KINDS = [
    ("haar1", 1, lambda r: haar_unitary(2, r)),
    ("haar2", 2, lambda r: haar_unitary(4, r)),
    ("haar3", 3, lambda r: haar_unitary(8, r)),
    ("haar4", 4, lambda r: haar_unitary(16, r)),
    ("cz", 2, lambda r: _qiskit(lib.CZGate())),
    ("cp", 2, lambda r: _qiskit(lib.CPhaseGate(r.uniform(0, 6)))),
    ("rz", 1, lambda r: _qiskit(lib.RZGate(r.uniform(0, 6)))),
    ("crx", 2, lambda r: _qiskit(lib.CRXGate(r.uniform(0, 6)))),
    ("ccx", 3, lambda r: _qiskit(lib.CCXGate())),
    ("mcx", 4, lambda r: _mcx(3)),
    ("swap", 2, lambda r: _qiskit(lib.SwapGate())),
    ("iswap", 2, lambda r: _qiskit(lib.iSwapGate())),
    ("h", 1, lambda r: _qiskit(lib.HGate())),
]


def random_circuit(n: int, n_gates: int, seed: int, max_width: int = 4) -> Circuit:
    """Random gates of every kind on random (scattered, repeating) qubits."""
    rng = np.random.default_rng(seed)
    kinds = [k for k in KINDS if k[1] <= min(n, max_width)]
    c = Circuit(n, name=f"random_n{n}_s{seed}")
    for _ in range(n_gates):
        name, width, make = kinds[rng.integers(len(kinds))]
        qubits = tuple(int(q) for q in rng.choice(n, size=width, replace=False))
        c.append(Gate(make(rng), qubits, name, check_unitary=False))
    c.global_phase = float(rng.uniform(0, 6))
    return c


def random_pairs(n: int, depth: int, seed: int) -> Circuit:
    """QuantumVolume's shape: per layer, a Haar 2-qubit gate on each pair of a random pairing."""
    rng = np.random.default_rng(seed)
    c = Circuit(n, name=f"pairs_n{n}_d{depth}_s{seed}")
    for _ in range(depth):
        perm = rng.permutation(n)
        for a, b in zip(perm[0::2], perm[1::2]):
            c.append(Gate(haar_unitary(4, rng), (int(a), int(b)), "u2"))
    return c


def random_state(n: int, seed: int, dtype=np.complex128) -> np.ndarray:
    rng = np.random.default_rng(seed + 1000)
    v = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    return (v / np.linalg.norm(v)).astype(dtype)


def gate_at_a_time(c: Circuit, psi: np.ndarray) -> np.ndarray:
    backend = "native" if psi.dtype == np.complex128 else "native32"
    # fuse=None, plan=None: one gate at a time (the default plan="auto" would run the CPU stage
    # executor on the very plan under test)
    sim = Simulator(backend, device="cpu", fuse=None, plan=None)
    return sim.run(c, initial_state=StateVector.from_array(psi, device="cpu")).state.to_numpy()


def check_plan(c: Circuit, plan) -> None:
    """Every gate once, in dependency order, with its needed qubits local; swaps local<->global
    (kept low bits untouched), after a kept low bit's exchanges with local bits (rotate_low), whose
    new qubits were local in the stage before; each stage's layout is the last one's, swapped."""
    seen = [op.gate for s in plan.stages for op in s.ops]
    assert sorted(seen) == list(range(len(c)))
    big_l, keep = plan.local_qubits, plan.keep_low
    before = plan.initial_layout
    for k, s in enumerate(plan.stages):
        ex = s.low_exchanges(big_l)
        assert s.swaps[:len(ex)] == ex and (k > 0 or not ex)
        assert all(p < keep <= g < big_l for p, g in ex)
        assert all(keep <= p < big_l <= g for p, g in s.swaps[len(ex):])
        phys = list(before)
        for p, g in s.swaps:
            phys[p], phys[g] = phys[g], phys[p]
        assert tuple(phys) == s.layout
        assert set(s.layout[:keep]) <= set(before[:big_l])
        before = s.end_layout
        phys = list(s.layout)
        for op in s.ops:
            g = c.gates[op.gate]
            assert [phys.index(q) for q in g.qubits] == list(op.positions)
            if op.kind == RELABEL:
                a, b = op.positions
                phys[a], phys[b] = phys[b], phys[a]
                continue
            targets = op.structure.targets if op.kind != "diagonal" else ()
            assert all(op.positions[t] < big_l for t in targets)
    # gates on a common qubit keep their order unless both act diagonally on every qubit they
    # share (a diagonal gate on all of its qubits, a controlled gate on its controls)
    order = {gi: k for k, gi in enumerate(seen)}
    diagonal_on = [diagonal_qubits(g) for g in c.gates]
    for i, gi in enumerate(c.gates):
        for j in range(i + 1, len(c)):
            shared = set(gi.qubits) & set(c.gates[j].qubits)
            if shared and not shared <= diagonal_on[i] & diagonal_on[j]:
                assert order[i] < order[j]


def diagonal_qubits(g: Gate) -> set:
    """The qubits ``g`` never flips, read from its matrix: every qubit of a diagonal gate, the
    controls of a controlled one."""
    s = classify(g.matrix)
    if s.kind == "diagonal":
        return set(g.qubits)
    return {g.qubits[b] for b in s.controls} if s.kind == "controlled" else set()


@settings(derandomize=True, max_examples=60, deadline=None)
@given(n=st.integers(1, 9), n_gates=st.integers(0, 40), seed=st.integers(0, 10**6),
       local=st.integers(1, 11), block_bytes=st.sampled_from([32, 256, 4096, 1 << 20]),
       threads=st.sampled_from([1, 2]), seeds=st.sampled_from([0, 1, 16]))
def test_random_circuits_equal_gate_at_a_time_complex128(n, n_gates, seed, local, block_bytes, threads, seeds):
    c = random_circuit(n, n_gates, seed, max_width=local)
    psi = random_state(n, seed)
    plan = plan_stages(c, local, seeds=seeds)
    check_plan(c, plan)
    out = run_stages(psi.copy(), plan, block_bytes=block_bytes, threads=threads)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


@settings(derandomize=True, max_examples=25, deadline=None)
@given(n=st.integers(2, 10), n_gates=st.integers(1, 40), seed=st.integers(0, 10**6), local=st.integers(4, 8))
def test_random_circuits_equal_gate_at_a_time_complex64(n, n_gates, seed, local):
    c = random_circuit(n, n_gates, seed)
    psi = random_state(n, seed, np.complex64)
    out = run_stages(psi.copy(), plan_stages(c, local), block_bytes=512)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=2e-6)


@pytest.mark.parametrize(("n", "local", "n_gates"), [(14, 6, 120), (16, 10, 150), (20, 12, 60)])
def test_wide_random_circuits(n, local, n_gates):
    c = random_circuit(n, n_gates, seed=n)
    psi = random_state(n, n)
    plan = plan_stages(c, local)
    check_plan(c, plan)
    out = run_stages(psi.copy(), plan, block_bytes=1 << 16)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_qft_and_qv_from_qiskit():
    for qc in (qiskit.synthesis.synth_qft_full(12), lib.quantum_volume(12, seed=7)):
        c = from_qiskit(qc)
        psi = random_state(12, 3)
        plan = plan_stages(c, 7)
        check_plan(c, plan)
        np.testing.assert_allclose(run_stages(psi.copy(), plan, block_bytes=2048), gate_at_a_time(c, psi),
                                   rtol=0, atol=1e-13)


def test_physical_state_with_a_permuted_layout_stays_lazy():
    n = 8
    c = random_circuit(n, 30, seed=5)
    psi = random_state(n, 5)
    perm = [3, 0, 7, 1, 6, 2, 5, 4]  # the state stored under another layout first
    phys = PhysicalState(permute_bits(psi.copy(), n, perm, list(range(n)), np), gemm.resolve_device("cpu"))
    phys.layout.set(perm)
    plan = plan_stages(c, 4)  # planned from the identity: the executor permutes first
    run_stages(phys, plan)
    # left as the last stage stored it, not canonicalized: the state is one chunk, its top L bits
    # hold the last stage's local qubits (above the N - L lanes)
    big_l = plan.local_qubits
    assert set(phys.layout.phys[n - big_l:]) == set(plan.final_layout[:big_l])
    phys.canonicalize()
    np.testing.assert_allclose(phys.data, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_swaps_are_relabels_and_move_nothing():
    c = Circuit(4)
    sw = _qiskit(lib.SwapGate())
    c.add(sw, (0, 3), "swap", check_unitary=False)
    c.add(sw, (1, 2), "swap", check_unitary=False)
    plan = plan_stages(c, 2)
    assert plan.n_stages == 1 and plan.stages[0].n_gates == 0 and not plan.stages[0].swaps
    assert plan.final_layout == (3, 2, 1, 0)
    psi = random_state(4, 1)
    np.testing.assert_array_equal(run_stages(psi.copy(), plan), gate_at_a_time(c, psi))


def test_global_controls_and_diagonals_need_no_local_qubits():
    n = 10
    c = Circuit(n)
    c.add(_qiskit(lib.CRXGate(0.3)), (9, 0), "crx")  # control 9, target 0
    c.add(_qiskit(lib.CPhaseGate(0.2)), (8, 9), "cp")
    c.add(_mcx(3), (7, 8, 9, 1), "mcx")
    plan = plan_stages(c, 2)
    assert plan.n_stages == 1 and not plan.stages[0].swaps
    psi = random_state(n, 2)
    np.testing.assert_allclose(run_stages(psi.copy(), plan, block_bytes=64), gate_at_a_time(c, psi),
                               rtol=0, atol=1e-14)


def test_stage_counts_are_small_for_brickwork():
    c = brickwork(16, 2, 12, seed=1)
    plan = plan_stages(c, 10)
    check_plan(c, plan)
    assert plan.n_stages <= 4  # 12 layers of 2-qubit bricks, light cone 6 qubits a side per stage


def test_grown_local_sets_cut_the_stages_of_brickwork_and_random_pairs():
    """Step 2's candidates grown from blocked gates (seeds) against the circuit-order walk alone,
    with and without kept low bits (which no swap may touch)."""
    bw = brickwork(28, 2, 20, seed=1)
    walk, grown = plan_stages(bw, 12, seeds=0), plan_stages(bw, 12)
    check_plan(bw, grown)
    assert walk.n_stages == 21 and grown.n_stages <= 10
    qv = random_pairs(20, 20, seed=7)
    for keep in (0, 3):
        walk, grown = plan_stages(qv, 10, seeds=0, keep_low=keep), plan_stages(qv, 10, keep_low=keep)
        check_plan(qv, grown)
        assert grown.n_stages < 0.85 * walk.n_stages, (keep, grown.n_stages, walk.n_stages)
        assert all(p >= keep for s in grown.stages for p, _ in s.swaps)


def test_rotating_the_kept_low_bits_needs_fewer_stages():
    """Kept low bits fixed hold their qubits local for the whole circuit; rotated (each time to a
    qubit local on both sides of the boundary) they cost about what no kept bits cost."""
    bw = brickwork(28, 2, 20, seed=1)
    counts = {}
    for keep, rotate in ((3, False), (3, True), (0, False)):
        plan = plan_stages(bw, 12, keep_low=keep, rotate_low=rotate)
        check_plan(bw, plan)
        counts[keep, rotate] = plan.n_stages
    assert counts[3, True] <= counts[0, False] + 1 < counts[3, False], counts
    rotated = plan_stages(bw, 12, keep_low=3, rotate_low=True)
    assert any(s.low_exchanges(12) for s in rotated.stages)


def test_errors_name_the_argument():
    c = random_circuit(6, 5, seed=1)
    c.add(haar_unitary(8, np.random.default_rng(0)), (0, 1, 2), "wide", check_unitary=False)
    with pytest.raises(ValueError, match="needs 3 local qubits"):
        plan_stages(c, 2)
    with pytest.raises(ValueError, match="local_qubits must be an int >= 1"):
        plan_stages(c, 0)
    with pytest.raises(TypeError, match="circuit must be"):
        plan_stages([], 3)
    with pytest.raises(ValueError, match="the plan is for 6 qubits"):
        run_stages(np.zeros(8, complex), plan_stages(c, 4))
    with pytest.raises(TypeError, match="state must be"):
        run_stages([1, 0], plan_stages(c, 4))


def test_cpu_local_qubits_from_bytes():
    assert cpu_local_qubits(np.complex128, 1 << 20) == 16
    assert cpu_local_qubits(np.complex64, 1 << 20) == 17
    with pytest.raises(ValueError, match="chunk_bytes"):
        cpu_local_qubits(np.complex128, 16)
