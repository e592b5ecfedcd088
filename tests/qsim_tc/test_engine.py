"""The engine against qiskit.quantum_info.Statevector, and every apply path against each other."""

import numpy as np
import pytest

import gemm
from circuits import Circuit, brickwork, haar_unitary
from qsim_tc import Simulator, StateVector
from qsim_tc.engine.apply import plan_targets
from qsim_tc.layout import Layout

scipy_stats = pytest.importorskip("scipy.stats")

qiskit = pytest.importorskip("qiskit")
from qiskit.circuit.library import UnitaryGate  # noqa: E402
from qiskit.quantum_info import Statevector  # noqa: E402


def to_qiskit(circ: Circuit):
    qc = qiskit.QuantumCircuit(circ.n_qubits)
    for g in circ:
        qc.append(UnitaryGate(g.matrix, check_input=False), list(g.qubits))
    return qc


def random_circuit(n, n_gates, max_d, rng):
    circ = Circuit(n)
    for _ in range(n_gates):
        d = int(rng.integers(1, max_d + 1))
        qs = [int(q) for q in rng.choice(n, d, replace=False)]  # random, unordered, scattered
        circ.add(haar_unitary(1 << d, rng), qs)
    return circ


@pytest.mark.parametrize("seed", range(6))
def test_random_scattered_gates_match_qiskit(seed):
    rng = np.random.default_rng(seed)
    n = 10
    circ = random_circuit(n, 25, 6, rng)
    ours = Simulator(device="cpu").run(circ).state.to_numpy()
    ref = Statevector(to_qiskit(circ)).data
    assert np.abs(ours - ref).max() < 1e-12


@pytest.mark.parametrize("n,d", [(12, 4), (11, 3), (9, 2), (13, 5), (8, 1)])
def test_brickwork_matches_qiskit(n, d):
    circ = brickwork(n, d, 6, seed=n + d, periodic=(d == 3))
    ours = Simulator(device="cpu").run(circ).state.to_numpy()
    assert np.abs(ours - Statevector(to_qiskit(circ)).data).max() < 1e-12


def test_every_path_gives_the_same_state(rng):
    """Force each path (bottom, top, batched, permute) on the same gate and compare."""
    n, d = 9, 3
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    psi /= np.linalg.norm(psi)
    u = haar_unitary(1 << d, rng)
    expected = Statevector(psi).evolve(qiskit.quantum_info.Operator(u), qargs=[2, 3, 4]).data
    seen = set()
    for phys in ([2, 3, 4, 0, 1, 5, 6, 7, 8],   # targets at the bottom
                 [0, 1, 5, 6, 7, 8, 2, 3, 4],   # at the top
                 [0, 1, 5, 6, 2, 3, 4, 7, 8],   # middle, L = 16: batched
                 [0, 2, 1, 3, 5, 4, 6, 7, 8],   # scattered: permute first
                 [0, 4, 3, 2, 1, 5, 6, 7, 8]):  # contiguous but reversed, L = 2
        st = StateVector(n, device="cpu", data=psi)
        lay = Layout(n)
        lay.set(phys)
        st._data = st._data[lay.logical_indices(np.arange(1 << n))].copy()  # store permuted
        st._layout = lay
        info = st.apply(u, [2, 3, 4])
        seen.add(info.path)
        assert np.abs(st.to_numpy() - expected).max() < 1e-13, info.path
    assert {"bottom", "top", "batched", "permute+bottom"} <= seen


def test_lookahead_puts_next_gate_on_top():
    lay = Layout(8)
    plan = plan_targets(lay, (2, 4), 8, "cpu", False, next_qubits=(5, 6))
    assert plan.path == "permute+bottom"
    assert plan.permute_to[:2] == [2, 4] and plan.permute_to[-2:] == [5, 6]


def test_methods_without_fast_batched_products_move_middle_targets_down():
    """Contiguous middle targets take one batched product, except for a method that declares its
    batched products slow (the tensor-core methods): their targets go to the bottom first."""
    assert plan_targets(Layout(12), (5, 6, 7, 8, 9), 12, "cpu", False).path == "batched"
    assert not gemm.get_method("tc-auto").batched_products and gemm.get_method("native").batched_products
    plan = plan_targets(Layout(12), (5, 6, 7, 8, 9), 12, "cpu", False, batched=False)
    assert plan.path.startswith("permute+") and plan.permute_to[:5] == [5, 6, 7, 8, 9]
    rng = np.random.default_rng(2)
    amps = rng.normal(size=1 << 12) + 1j * rng.normal(size=1 << 12)
    amps /= np.linalg.norm(amps)
    st = StateVector(12, dtype=np.complex64, device="cpu", data=amps.astype(np.complex64))
    want = st.to_numpy().astype(np.complex128)
    u = haar_unitary(32, np.random.default_rng(3))
    info = st.apply(u, [5, 6, 7, 8, 9], method="tc-auto")
    assert info.path == plan.path
    ref = StateVector(12, device="cpu", data=want)
    ref.apply(u, [5, 6, 7, 8, 9])
    assert np.abs(st.to_numpy() - ref.to_numpy()).max() < 1e-5


def test_lookahead_with_rotation_puts_next_gate_at_bottom(monkeypatch):
    import qsim_tc.engine.apply as apply_mod

    monkeypatch.setitem(apply_mod.ROTATE_D, "cpu", frozenset({2}))
    plan = plan_targets(Layout(8), (2, 4), 8, "cpu", False, next_qubits=(5, 6))
    assert plan.path == "permute+rotate" and plan.rotate
    assert plan.permute_to[:2] == [2, 4] and plan.final[:2] == [5, 6] and plan.final[-2:] == [2, 4]


def test_qubit_order_of_matrix_is_qiskits():
    """The first listed qubit is the low bit of the matrix index (CX with control 0, target 1)."""
    cx = np.array([[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0]])
    st = StateVector(3, device="cpu", data=np.eye(8)[1])  # |001>: qubit 0 set
    st.apply(cx, [0, 1])
    assert abs(st.amplitude(0b011) - 1) < 1e-15


def test_complex64_state_with_native32(rng):
    circ = brickwork(10, 3, 4, seed=3)
    r32 = Simulator("native32", device="cpu").run(circ)
    r64 = Simulator("native", device="cpu").run(circ)
    assert r32.state.dtype == np.complex64
    assert np.abs(r32.state.to_numpy() - r64.state.to_numpy()).max() < 1e-5


def test_global_phase_applied():
    c = Circuit(2, global_phase=np.pi / 2)
    c.add(np.eye(2), [0])
    st = Simulator(device="cpu").run(c).state
    assert abs(st.amplitude(0) - 1j) < 1e-15


def test_stats_and_json_shape():
    circ = brickwork(8, 2, 3, seed=0)
    res = Simulator(device="cpu", plan=None).run(circ)  # gate by gate (fused blocks): per-gate stats
    d = res.to_dict()
    # n_gates counts the circuit's gates; each applied block is a step covering some of them
    assert d["n_gates"] == len(circ) and d["step_kind"] == "gate"
    assert d["n_steps"] == len(res.stats) == len(d["steps"]) > 0
    assert sorted(i for s in d["steps"] for i in s["gates"]) == list(range(len(circ)))
    assert d["gate_time_ms"] == pytest.approx(sum(s["time_ms"] for s in d["steps"]))
    g = d["gates"][0]
    assert g["method"] == "native" and g["report"]["method"] == "native" and g["time_ms"] >= 0


def test_state_accessors(rng):
    psi = rng.standard_normal(16) + 1j * rng.standard_normal(16)
    psi /= np.linalg.norm(psi)
    st = StateVector.from_array(psi, device="cpu")
    assert st.n_qubits == 4
    assert abs(st.amplitude(5) - psi[5]) < 1e-15
    assert abs(st.norm() - 1) < 1e-14
    assert np.allclose(st.probabilities(), np.abs(psi) ** 2)
    assert np.array_equal(st.to_numpy(), psi)


def test_sampling_matches_probabilities():
    rng = np.random.default_rng(7)
    psi = rng.standard_normal(8) + 1j * rng.standard_normal(8)
    psi /= np.linalg.norm(psi)
    st = StateVector.from_array(psi, device="cpu")
    shots = 200_000
    counts = np.bincount(st.sample(shots, seed=1), minlength=8)
    p = np.abs(psi) ** 2
    chi2 = float((((counts - shots * p) ** 2) / (shots * p)).sum())
    assert chi2 < scipy_stats.chi2.ppf(0.999, df=7)
    assert np.array_equal(st.sample(50, seed=3), st.sample(50, seed=3))


def test_sampling_sees_logical_order_after_permutation():
    """After a permuting gate the stored layout differs; samples must still be logical indices."""
    st = StateVector(4, device="cpu")
    x = np.array([[0, 1], [1, 0]])
    st.apply(np.kron(x, x), [3, 1])  # scattered: the engine permutes
    assert not st._layout.is_identity
    assert set(st.sample(100, seed=0)) == {0b1010}
    assert set(st.sample(100, seed=0, qubits=[3, 1])) == {0b11}


def run_on_state(circ, **state_kw):
    """The gates of ``circ`` applied one by one to a fresh StateVector (with next-gate hints)."""
    st = StateVector(circ.n_qubits, device="cpu", **state_kw)
    gates = circ.gates
    paths = set()
    for i, g in enumerate(gates):
        nxt = gates[i + 1].qubits if i + 1 < len(gates) else None
        paths.add(st.apply(g.matrix, g.qubits, next_qubits=nxt).path)
    return st, paths


def test_bottom_rotate_path_matches_qiskit(monkeypatch):
    """U @ S^T leaves the targets on top (double buffer) or above the row bits of each block
    (bounded workspace); the lazy layout must account for it."""
    import qsim_tc.engine.apply as apply_mod
    import qsim_tc.engine.bounded as bounded_mod

    monkeypatch.setitem(apply_mod.ROTATE_D, "cpu", frozenset(range(1, 40)))
    monkeypatch.setitem(bounded_mod.BLOCK_ROTATE_D, "cpu", frozenset(range(1, 40)))
    circ = brickwork(11, 3, 5, seed=4)
    rnd = random_circuit(9, 30, 5, np.random.default_rng(8))
    # double buffer; bounded with one block; bounded with blocks of 2^9 or fewer amplitudes
    for kw in ({"double_buffer": True}, {}, {"workspace_bytes": 16384}):
        st, paths = run_on_state(circ, **kw)
        assert "bottom-rotate" in paths, kw
        assert np.abs(st.to_numpy() - Statevector(to_qiskit(circ)).data).max() < 1e-12
        st, paths = run_on_state(rnd, **kw)
        assert "permute+rotate" in paths, kw
        assert np.abs(st.to_numpy() - Statevector(to_qiskit(rnd)).data).max() < 1e-12


def test_global_phase_multiplies_every_amplitude(rng):
    psi = rng.standard_normal(16) + 1j * rng.standard_normal(16)
    psi /= np.linalg.norm(psi)
    st = StateVector.from_array(psi, device="cpu")
    st.apply(haar_unitary(4, rng), [0, 2])  # leaves the layout permuted: the phase must not care
    before = st.to_numpy()
    st.apply_global_phase(0.7)
    assert np.allclose(st.to_numpy(), before * np.exp(0.7j), rtol=0, atol=1e-15)


def test_physical_state_copy_and_canonicalize(rng):
    """The engine's storage: a copy is independent, canonicalize undoes the layout in one pass."""
    from qsim_tc.engine import PhysicalState

    n = 5
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    lay = Layout(n)
    lay.set([3, 0, 4, 1, 2])
    phys = PhysicalState(psi[lay.logical_indices(np.arange(1 << n))].copy(), gemm.resolve_device("cpu"), lay)
    other = phys.copy()
    phys.canonicalize()
    assert phys.layout.is_identity and np.array_equal(phys.data, psi)
    assert not other.layout.is_identity and other.spare is None
    other.canonicalize()
    assert np.array_equal(other.data, psi)


@pytest.mark.parametrize("backend", ["native", "int8"])
def test_run_from_an_initial_state(backend):
    """run(c2, initial_state=psi) continues from psi: it equals the state of c1 followed by c2
    (psi = the state after c1, whatever its physical layout), matches Qiskit from the same start,
    and leaves psi unchanged."""
    rng = np.random.default_rng(21)
    first = random_circuit(7, 12, 3, rng)
    second = random_circuit(7, 12, 3, rng)
    sim = Simulator(backend, device="cpu")
    psi = sim.run(first).state
    before = psi.to_numpy().copy()
    got = sim.run(second, initial_state=psi).state.to_numpy()
    both = Circuit(7, list(first.gates) + list(second.gates))
    assert np.abs(got - sim.run(both).state.to_numpy()).max() <= 1e-13
    ref = Statevector(before).evolve(to_qiskit(second)).data
    assert np.abs(got - ref).max() <= 1e-12
    assert np.array_equal(psi.to_numpy(), before)
    # a start state that is not |0...0> and not reachable by the empty circuit
    start = rng.standard_normal(1 << 7) + 1j * rng.standard_normal(1 << 7)
    start /= np.linalg.norm(start)
    got = sim.run(second, initial_state=StateVector.from_array(start, device="cpu")).state.to_numpy()
    assert np.abs(got - Statevector(start).evolve(to_qiskit(second)).data).max() <= 1e-12
    with pytest.raises(ValueError, match="initial_state has 7 qubits, the circuit 6"):
        sim.run(Circuit(6), initial_state=psi)
