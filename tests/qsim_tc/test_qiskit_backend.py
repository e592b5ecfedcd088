"""QsimTcBackend side by side with AerSimulator(method="statevector"): the same calls, the same results."""

import numpy as np
import pytest

pytest.importorskip("qiskit")
aer = pytest.importorskip("qiskit_aer")

from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister, transpile  # noqa: E402
from qiskit.circuit import Parameter  # noqa: E402
from qiskit.circuit.library import efficient_su2, quantum_volume  # noqa: E402
from qiskit.quantum_info import SparsePauliOp, Statevector  # noqa: E402
from scipy.stats import chi2_contingency, chisquare  # noqa: E402

from circuits import CircuitError  # noqa: E402
from qsim_tc.qiskit import QsimTcBackend  # noqa: E402


@pytest.fixture(scope="module")
def backend():
    return QsimTcBackend(device="cpu")


@pytest.fixture(scope="module")
def aer_backend():
    return aer.AerSimulator(method="statevector")


def bell_with_saves():
    qc = QuantumCircuit(3, 3)
    qc.h(0)
    qc.cx(0, 1)
    qc.rx(0.3, 2)
    qc.save_statevector()
    qc.save_probabilities([0, 2], label="p")
    qc.save_probabilities_dict([2], label="pd")
    qc.save_amplitudes([0, 3, 4], label="amps")
    qc.save_expectation_value(SparsePauliOp(["ZZ", "XY"], [0.5, 0.25]), [0, 2], label="ev")
    qc.measure([0, 1, 2], [0, 1, 2])
    return qc


def test_transpile_run_and_saves_match_aer(backend, aer_backend):
    qc = bell_with_saves()
    ours_t, aers_t = transpile(qc, backend), transpile(qc, aer_backend)
    assert ours_t.num_qubits == 3  # transpiling keeps the width and the save instructions
    assert [i.operation.name for i in ours_t.data] == [i.operation.name for i in qc.data]
    ours = backend.run(ours_t, shots=300, memory=True, seed_simulator=5).result()
    ref = aer_backend.run(aers_t, shots=300, memory=True, seed_simulator=5).result()
    np.testing.assert_allclose(ours.get_statevector().data, ref.get_statevector().data, atol=1e-12)
    for key in ("p", "amps"):
        np.testing.assert_allclose(ours.data(0)[key], ref.data(0)[key], atol=1e-12)
    assert ours.data(0)["pd"].keys() == ref.data(0)["pd"].keys()
    assert ours.data(0)["ev"] == pytest.approx(ref.data(0)["ev"], abs=1e-12)
    counts, memory = ours.get_counts(), ours.get_memory()
    assert set(counts) <= {"000", "011", "100", "111"} and sum(counts.values()) == 300
    assert len(memory) == 300 and {m: memory.count(m) for m in set(memory)} == counts
    assert set(ref.get_counts()) <= {"000", "011", "100", "111"}


def test_counts_agree_with_exact_distribution(backend):
    qc = quantum_volume(4, seed=3)
    probs = Statevector(qc).probabilities()
    qc.measure_all()
    shots = 8000
    counts = backend.run(qc, shots=shots, seed_simulator=11).result().get_counts()
    observed = np.array([counts.get(format(k, "04b"), 0) for k in range(16)])
    assert chisquare(observed, probs * shots).pvalue > 0.01
    assert chisquare(observed, np.full(16, shots / 16)).pvalue < 1e-6  # the test can tell


def test_registers_format_as_aer(backend, aer_backend):
    q = QuantumRegister(3, "q")
    alpha, beta = ClassicalRegister(2, "alpha"), ClassicalRegister(3, "beta")
    qc = QuantumCircuit(q, alpha, beta)
    qc.x([0, 2])
    qc.measure(0, alpha[1])
    qc.measure(2, beta[0])
    qc.measure(1, beta[2])
    ours = backend.run(qc, shots=10, memory=True).result()
    ref = aer_backend.run(qc, shots=10, memory=True).result()
    assert ours.get_counts() == ref.get_counts() == {"001 10": 10}
    assert ours.get_memory() == ref.get_memory()


def test_seed_repeats_and_differs(backend):
    qc = quantum_volume(3, seed=1)
    qc.measure_all()
    a = backend.run(qc, shots=50, memory=True, seed_simulator=7).result().get_memory()
    b = backend.run(qc, shots=50, memory=True, seed_simulator=7).result().get_memory()
    c = backend.run(qc, shots=50, memory=True, seed_simulator=8).result().get_memory()
    assert a == b and a != c


def test_parameter_binds_as_aer(backend, aer_backend):
    theta, phi = Parameter("theta"), Parameter("phi")
    qc = QuantumCircuit(2)
    qc.ry(theta, 0)
    qc.cx(0, 1)
    qc.rz(phi, 1)
    qc.save_statevector()
    binds = [{theta: [0.1, 0.7, 1.3], phi: [0.0, 0.5, -2.0]}]
    ours = backend.run([qc], parameter_binds=binds).result()
    ref = aer_backend.run([qc], parameter_binds=binds).result()
    assert len(ours.results) == len(ref.results) == 3
    for i in range(3):
        np.testing.assert_allclose(ours.get_statevector(i).data, ref.get_statevector(i).data, atol=1e-12)
    with pytest.raises(ValueError, match="different lengths"):
        backend.run([qc], parameter_binds=[{theta: [0.1, 0.2], phi: [0.3]}])
    with pytest.raises(CircuitError, match="unbound parameter"):
        backend.run(qc)


def test_save_state_option_and_many_circuits(backend):
    circuits = [efficient_su2(4, reps=1).assign_parameters(np.full(16, 0.1 * k)) for k in range(3)]
    res = backend.run(circuits, save_state=True).result()
    for k, qc in enumerate(circuits):
        np.testing.assert_allclose(res.get_statevector(k).data, Statevector(qc).data, atol=1e-12)
    assert "counts" not in res.data(0)  # no measurement: no counts, as Aer


def test_options_mirror_the_simulator():
    b = QsimTcBackend(device="CPU", precision="single", fuse=None, plan=None)
    sim = b.simulator()
    assert (sim.device.name, sim.precision, sim.fuse, sim.plan) == ("cpu", "single", None, None)
    qc = QuantumCircuit(2)
    qc.h(0)
    qc.cx(0, 1)
    qc.save_statevector()
    sv = b.run(qc).result().get_statevector().data
    np.testing.assert_allclose(sv, [2**-0.5, 0, 0, 2**-0.5], atol=1e-6)
    assert b.run(qc, backend="native").result().results[0].metadata["backend"] == "native"
    with pytest.raises(ValueError, match="unknown option.*nonsense"):
        b.run(qc, nonsense=1)
    with pytest.raises(ValueError, match="shots must be a positive int, got 0"):
        b.run(qc, shots=0)
    with pytest.raises(ValueError, match="method must be 'statevector'"):
        QsimTcBackend(method="stabilizer")
    with pytest.raises(TypeError, match=r"run_input\[1\] must be a qiskit.QuantumCircuit"):
        b.run([qc, "x"])


def test_target_takes_any_unitary_and_the_standard_gates(backend):
    names = set(backend.target.operation_names)
    assert {"unitary", "measure", "reset", "if_else", "while_loop", "cx", "u", "rzz", "save_statevector"} <= names
    assert backend.target.num_qubits == 30
    assert backend.max_circuits is None


def test_break_loop_is_rejected_with_its_name(backend):
    qc = QuantumCircuit(1, 1)
    with qc.while_loop((qc.clbits[0], 0)):
        qc.h(0)
        qc.measure(0, 0)
        qc.break_loop()
    with pytest.raises(CircuitError, match="break and continue"):
        backend.run(qc)


def test_classical_variables_are_rejected_with_their_instruction(backend):
    """A ``store`` into a classical variable (and a condition that reads one) gets a clear error
    naming the instruction, before anything runs (Qiskit's own error would name a missing
    variable)."""
    from qiskit.circuit.classical import expr, types

    qc = QuantumCircuit(1, 1)
    v = qc.add_var("v", expr.lift(False))
    qc.h(0)
    qc.measure(0, 0)
    qc.store(v, qc.clbits[0])
    with pytest.raises(CircuitError, match=r"instruction \d+ \('store'.*classical variables are not supported"):
        backend.run(qc)
    qc = QuantumCircuit(1, 1)
    v = qc.add_input("flag", types.Bool())
    with qc.if_test(v):
        qc.x(0)
    qc.measure(0, 0)
    with pytest.raises(CircuitError, match="classical variables"):
        backend.run(qc)


# --- dynamic circuits -------------------------------------------------------------------------


def teleport():
    q = QuantumRegister(3, "q")
    a, b, c = ClassicalRegister(1, "a"), ClassicalRegister(1, "b"), ClassicalRegister(1, "c")
    qc = QuantumCircuit(q, a, b, c)
    qc.ry(1.1, 0)
    qc.h(1)
    qc.cx(1, 2)
    qc.cx(0, 1)
    qc.h(0)
    qc.measure(0, a[0])
    qc.measure(1, b[0])
    with qc.if_test((b, 1)):
        qc.x(2)
    with qc.if_test((a[0], True)):
        qc.z(2)
    qc.measure(2, c[0])
    return qc


def reset_reuse():
    qc = QuantumCircuit(2, 3)
    qc.h(0)
    qc.cx(0, 1)
    qc.measure(0, 0)
    qc.reset(0)
    qc.ry(0.8, 0)
    qc.measure([0, 1], [1, 2])
    return qc


def repeat_until_success():
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.measure(0, 0)
    with qc.while_loop((qc.clbits[0], 1)):
        qc.reset(0)
        qc.ry(1.9, 0)
        qc.measure(0, 0)
    qc.ry(0.6, 1)
    qc.measure(1, 1)
    return qc


def if_else_branches():
    qc = QuantumCircuit(3, 3)
    qc.ry(1.2, 0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)) as else_:
        qc.h(1)
        qc.cx(1, 2)
    with else_:
        qc.rx(0.7, 2)
    qc.measure([1, 2], [1, 2])
    return qc


def switch_on_register():
    qr = QuantumRegister(3)
    cr = ClassicalRegister(2, "sel")
    out = ClassicalRegister(1, "out")
    qc = QuantumCircuit(qr, cr, out)
    qc.h([0, 1])
    qc.measure([0, 1], cr)
    with qc.switch(cr) as case:
        with case(0):
            qc.ry(0.3, 2)
        with case(1, 2):
            qc.ry(1.5, 2)
        with case(case.DEFAULT):
            qc.x(2)
    qc.measure(2, out[0])
    return qc


def for_loop_rotations():
    qc = QuantumCircuit(2, 3)
    theta = Parameter("t")
    with qc.for_loop(range(3), theta):
        qc.rx(0.4 * theta + 0.2, 0)
        qc.cx(0, 1)
    qc.measure(1, 0)
    with qc.if_test((qc.clbits[0], 0)):
        qc.h(0)
    qc.measure([0, 1], [1, 2])
    return qc


def expr_condition():
    from qiskit.circuit.classical import expr

    qc = QuantumCircuit(3, 3)
    qc.h([0, 1])
    qc.measure([0, 1], [0, 1])
    with qc.if_test(expr.logic_and(expr.equal(qc.clbits[0], True), expr.logic_not(qc.clbits[1]))):
        qc.x(2)
    with qc.if_test(expr.bit_xor(qc.clbits[0], qc.clbits[1])):
        qc.ry(0.5, 2)
    qc.measure(2, 2)
    return qc


def random_dynamic(seed: int, n: int = 3):
    """Random gates with mid-circuit measurements, resets and conditioned gates."""
    rng = np.random.default_rng(seed)
    qc = QuantumCircuit(n, n)
    for _ in range(8):
        kind = rng.choice(["u", "cx", "measure", "reset", "cond"], p=[0.35, 0.2, 0.2, 0.1, 0.15])
        q = int(rng.integers(n))
        if kind == "u":
            qc.u(*rng.uniform(0, np.pi, 3), q)
        elif kind == "cx":
            a, b = rng.choice(n, 2, replace=False)
            qc.cx(int(a), int(b))
        elif kind == "measure":
            qc.measure(q, int(rng.integers(n)))
        elif kind == "reset":
            qc.reset(q)
        else:
            with qc.if_test((qc.clbits[int(rng.integers(n))], int(rng.integers(2)))):
                qc.u(*rng.uniform(0, np.pi, 3), q)
    qc.measure(range(n), range(n))
    return qc


DYNAMIC = ([teleport, reset_reuse, repeat_until_success, if_else_branches, switch_on_register, for_loop_rotations,
            expr_condition] + [lambda s=s: random_dynamic(s) for s in range(14)])


@pytest.mark.parametrize("make", DYNAMIC, ids=[f"dyn{i}" for i in range(len(DYNAMIC))])
def test_dynamic_counts_agree_with_aer(make, backend, aer_backend):
    qc = make()
    shots = 3000
    ours = backend.run(qc, shots=shots, seed_simulator=21).result().get_counts()
    ref = aer_backend.run(qc, shots=shots, seed_simulator=22).result().get_counts()
    keys = sorted(set(ours) | set(ref))
    table = np.array([[ours.get(k, 0) for k in keys], [ref.get(k, 0) for k in keys]])
    assert table[0].sum() == shots
    if len(keys) > 1:
        assert chi2_contingency(table).pvalue > 0.01, (ours, ref)
    else:
        assert ours == ref


def test_shot_branching_holds_few_states(backend):
    qc = QuantumCircuit(3, 3)
    qc.h([0, 1, 2])
    for q in range(3):
        qc.measure(q, q)
        qc.h(q)
    qc.measure(range(3), range(3))
    res = backend.run(qc, shots=2000, seed_simulator=3).result()
    assert res.results[0].metadata["branches"] <= 8  # 2^3 outcome histories, not 2000 states
    one = backend.run(qc, shots=1, memory=True, seed_simulator=4).result()
    assert len(one.get_memory()) == 1 and one.results[0].metadata["branches"] == 1


def test_branches_in_the_same_state_share_it(backend):
    """Repeat until success: shots leave the loop at different iterations, each in the same state
    (up to rounding), so after the loop they share one; the outcomes still follow the exact
    distribution of the gate after the loop."""
    shots = 4000
    res = backend.run(repeat_until_success(), shots=shots, seed_simulator=7).result()
    assert res.results[0].metadata["branches"] <= 2  # the loop's live and finished shots; ~12 unmerged
    counts = res.get_counts()
    assert set(counts) <= {"00", "10"}  # the loop ends when bit 0 reads 0
    p1 = np.sin(0.3) ** 2  # ry(0.6) on qubit 1
    assert chisquare([counts.get("00", 0), counts.get("10", 0)], [shots * (1 - p1), shots * p1]).pvalue > 1e-3


def test_a_reset_of_an_unentangled_qubit_keeps_one_state(backend):
    """Both outcomes of resetting |+> (a product state) leave the same state: one branch; a reset
    of half a Bell pair leaves two different states: two branches, and the partner reads 0 or 1
    at random."""
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.x(1)
    qc.reset(0)
    qc.measure([0, 1], [0, 1])
    res = backend.run(qc, shots=500, seed_simulator=1).result()
    assert res.get_counts() == {"10": 500} and res.results[0].metadata["branches"] == 1
    bell = QuantumCircuit(2, 2)
    bell.h(0)
    bell.cx(0, 1)
    bell.reset(0)
    bell.measure([0, 1], [0, 1])
    res = backend.run(bell, shots=2000, seed_simulator=2).result()
    counts = res.get_counts()
    assert set(counts) == {"00", "10"} and res.results[0].metadata["branches"] == 2
    assert chisquare([counts["00"], counts["10"]]).pvalue > 1e-3


@pytest.mark.gpu
def test_gpu_dynamic_circuit_matches_cpu_distribution(cupy):
    qc = teleport()
    gpu = QsimTcBackend(device="gpu").run(qc, shots=3000, seed_simulator=5).result().get_counts()
    cpu = QsimTcBackend(device="cpu").run(qc, shots=3000, seed_simulator=6).result().get_counts()
    keys = sorted(set(gpu) | set(cpu))
    assert chi2_contingency([[gpu.get(k, 0) for k in keys], [cpu.get(k, 0) for k in keys]]).pvalue > 0.01


def test_parameter_binds_of_a_measured_ansatz_run_through_one_plan(backend, monkeypatch):
    import qsim_tc.qiskit_backend as qb

    qc = efficient_su2(3, reps=1)
    qc.measure_all()
    values = np.random.default_rng(3).uniform(0, 6, (4, qc.num_parameters))
    binds = [{p: values[:, k] for k, p in enumerate(qc.parameters)}]
    swept = backend.run(qc, parameter_binds=binds, shots=200, memory=True, seed_simulator=4, save_state=True).result()
    for j in range(4):
        want = Statevector(qc.remove_final_measurements(inplace=False).assign_parameters(values[j])).data
        np.testing.assert_allclose(swept.get_statevector(j).data, want, atol=1e-12)

    def refuse(circuit):
        raise CircuitError("no plan")

    monkeypatch.setattr(qb, "BatchedCircuit", refuse)  # each bound circuit compiled and run apart
    apart = backend.run(qc, parameter_binds=binds, shots=200, memory=True, seed_simulator=4).result()
    assert len(swept.results) == len(apart.results) == 4
    for j in range(4):
        assert swept.get_memory(j) == apart.get_memory(j)


def _dd_error(state: np.ndarray, qc) -> float:
    from circuits import from_qiskit  # noqa: PLC0415
    from qsim_tc.reference import simulate_dd  # noqa: PLC0415

    hi, lo = simulate_dd(from_qiskit(qc), device="cpu").to_numpy()
    return float(np.linalg.norm((state.astype(np.complex128) - hi) - lo))


@pytest.mark.parametrize("precision", ["double", "single"])
def test_experiment_metadata_carries_the_error_bound_of_its_segments(precision):
    # a save splits the circuit into two runs on one state: the bound covers both
    qc = quantum_volume(6, seed=4)
    unitary = qc.copy()
    qc.save_statevector(label="half")
    qc.compose(quantum_volume(6, seed=5), inplace=True)
    unitary.compose(quantum_volume(6, seed=5), inplace=True)
    qc.global_phase = unitary.global_phase = 0.7
    qc.measure_all()
    b = QsimTcBackend(device="cpu", precision=precision)
    res = b.run(qc, shots=50, seed_simulator=1, save_state=True).result()
    err = res.results[0].metadata["error"]
    assert isinstance(err, dict) and err["no_bound"] is None
    measured = _dd_error(res.get_statevector().data, unitary)
    assert 0 < measured <= err["l2_bound"] and err["max_abs_bound"] == err["l2_bound"]
    assert err["l2_estimate"] < err["l2_bound"] and 0 <= err["infidelity_bound"] < 1e-6
    # the two segments (and the global phase) each reported steps: all are counted
    one = QsimTcBackend(device="cpu", precision=precision).run(quantum_volume(6, seed=4), shots=1).result()
    assert err["n_steps"] > one.results[0].metadata["error"]["n_steps"] >= 1
    assert err["l2_bound"] > one.results[0].metadata["error"]["l2_bound"]


def test_dynamic_and_batched_experiments_report_no_bound_with_the_reason(backend):
    qc = teleport()
    err = backend.run(qc, shots=20, seed_simulator=2).result().results[0].metadata["error"]
    assert err["l2_bound"] is None and "mid-circuit measurements" in err["no_bound"]
    ansatz = efficient_su2(3, reps=1)
    ansatz.measure_all()
    binds = [{p: [0.1, 0.2] for p in ansatz.parameters}]
    res = backend.run(ansatz, parameter_binds=binds, shots=20, seed_simulator=2).result()
    for exp in res.results:
        assert exp.metadata["error"]["l2_bound"] is None and "batched" in exp.metadata["error"]["no_bound"]


def test_circuit_of_measurements_only_is_exact(backend):
    qc = QuantumCircuit(2, 2)
    qc.measure([0, 1], [0, 1])
    err = backend.run(qc, shots=5).result().results[0].metadata["error"]
    assert err["l2_bound"] == 0.0 and err["no_bound"] is None
