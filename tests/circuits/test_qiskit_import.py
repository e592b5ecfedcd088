"""circuits.from_qiskit against qiskit.quantum_info.Statevector, and every rejected construct."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

qiskit = pytest.importorskip("qiskit")

from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister  # noqa: E402
from qiskit.circuit import Parameter  # noqa: E402
from qiskit.circuit.library import (  # noqa: E402
    GlobalPhaseGate,
    Initialize,
    MCXGate,
    QFTGate,
    SGate,
    UnitaryGate,
    efficient_su2,
    quantum_volume,
)
from qiskit.circuit.random import random_circuit  # noqa: E402
from qiskit.quantum_info import Statevector, random_unitary  # noqa: E402

import gemm  # noqa: E402
from circuits import CircuitError, from_qiskit  # noqa: E402
from qsim_tc import Simulator  # noqa: E402

# max |amplitude error| against Qiskit's Statevector allowed per backend precision class on the
# small circuits below (8 qubits, tens of gates): FP64-class backends as native, the
# error-corrected FP32 ones a few FP32 ulps per gate, plain TF32/FP16 products their 10-11 bits
BOUNDS = {"native": 1e-12, "native3m": 1e-12, "dd": 1e-12, "int8": 1e-12, "int8-auto": 1e-12, "int8-crt": 1e-12,
          "native32": 1e-5,
          "tf32tf32": 1e-5, "halfhalf": 1e-5, "tc-auto": 1e-5, "markidis": 1e-5, "tf32": 5e-3, "fp16": 5e-3}


def simulate(qc, backend="native", fuse=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # halfhalf/fp16 range warnings are not under test here
        return Simulator(backend, device="cpu", fuse=fuse).run(from_qiskit(qc)).state.to_numpy()


def assert_matches(qc, tol=1e-12, backend="native"):
    ref = Statevector(qc.remove_final_measurements(inplace=False)).data
    got = simulate(qc, backend)
    err = float(np.abs(got - ref).max())
    assert err <= tol, f"{backend}: max |error| {err:.3g} > {tol:g}"


def ghz(n):
    qc = QuantumCircuit(n)
    qc.h(0)
    for q in range(n - 1):
        qc.cx(q, q + 1)
    return qc


def test_qft_decomposed_and_as_one_gate():
    qc = QuantumCircuit(7)
    qc.h(range(7))
    qc.t(2)
    qc.append(QFTGate(7), range(7))
    assert_matches(qc)  # QFTGate as one 7-qubit matrix
    assert_matches(qc.decompose(reps=3))


def test_ghz():
    qc = ghz(10)
    got = simulate(qc)
    expect = np.zeros(1 << 10, complex)
    expect[0] = expect[-1] = 2**-0.5
    assert np.abs(got - expect).max() <= 1e-12
    assert_matches(qc)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantum_volume(seed):
    assert_matches(quantum_volume(9, seed=seed))


@pytest.mark.parametrize("seed", range(6))
def test_random_circuit(seed):
    assert_matches(random_circuit(7, 10, max_operands=4, seed=seed))


def test_efficient_su2_bound():
    qc = efficient_su2(8, reps=3, entanglement="circular")
    values = np.random.default_rng(3).uniform(-np.pi, np.pi, qc.num_parameters)
    assert_matches(qc.assign_parameters(values))


def test_multi_controlled_gates():
    qc = QuantumCircuit(8)
    qc.h(range(8))
    qc.append(MCXGate(4, ctrl_state="0110"), [6, 0, 3, 5, 1])
    qc.mcp(0.7, [2, 4, 7], 0)
    qc.append(UnitaryGate(random_unitary(4, seed=5)).control(2, ctrl_state=1), [3, 7, 1, 6])
    qc.ccz(5, 2, 0)
    qc.append(MCXGate(7), list(range(8)))  # 8 qubits: wider than nothing, still one matrix
    assert_matches(qc)


def test_wide_gate_is_inlined_beyond_max_matrix_qubits():
    qc = QuantumCircuit(8)
    qc.h(range(8))
    qc.append(MCXGate(6), [7, 0, 5, 1, 4, 2, 3])
    c = from_qiskit(qc, max_matrix_qubits=3)
    assert c.max_gate_qubits <= 3
    got = Simulator("native", device="cpu").run(c).state.to_numpy()
    assert np.abs(got - Statevector(qc).data).max() <= 1e-12


def test_inlined_wide_definition_keeps_its_global_phase():
    """A 4-qubit sub-circuit with global phase 0.7 is inlined under max_matrix_qubits=3: the phase
    of its definition must reach the state (dropping it is off by |1 - e^0.7i| = 0.69 times the
    amplitudes)."""
    sub = QuantumCircuit(4, global_phase=0.7, name="sub")
    sub.h(0)
    sub.cx(0, 1)
    sub.ry(0.4, 2)
    sub.ccx(0, 2, 3)
    sub.rz(0.3, 3)
    qc = QuantumCircuit(6)
    qc.h([1, 4])
    qc.append(sub.to_gate(), [5, 1, 3, 0])
    qc.cx(4, 2)
    c = from_qiskit(qc, max_matrix_qubits=3)
    assert c.max_gate_qubits <= 3
    assert c.global_phase == pytest.approx(0.7)
    got = Simulator("native", device="cpu").run(c).state.to_numpy()
    assert np.abs(got - Statevector(qc).data).max() <= 1e-12


def test_unitary_on_scattered_qubits_keeps_qubit_order():
    qc = QuantumCircuit(9)
    qc.h(range(9))
    qc.unitary(random_unitary(8, seed=11), [7, 1, 4])
    qc.unitary(random_unitary(4, seed=12), [8, 0])
    qc.unitary(random_unitary(16, seed=13), [2, 6, 3, 5])
    assert_matches(qc)
    c = from_qiskit(qc)
    assert [g.qubits for g in c.gates[-3:]] == [(7, 1, 4), (8, 0), (2, 6, 3, 5)]


def test_global_phase_kept_barrier_and_delay_ignored():
    qc = QuantumCircuit(3, global_phase=0.4)
    qc.h(0)
    qc.barrier()
    qc.delay(100, 1)
    qc.rz(0.3, 1)  # rz carries a phase relative to p
    sub = QuantumCircuit(2, global_phase=-1.1)
    sub.cx(0, 1)
    qc.append(sub.to_gate(), [2, 0])
    qc.append(GlobalPhaseGate(0.2), [])  # a zero-qubit gate: only a phase
    qc.append(SGate().power(0.3), [1])  # annotated / derived gates through their matrix
    c = from_qiskit(qc)
    assert len(c.gates) == 4
    assert c.global_phase == pytest.approx(0.6)
    assert_matches(qc)


def test_final_measurements_recorded():
    q = QuantumRegister(4)
    a, b = ClassicalRegister(2, "a"), ClassicalRegister(3, "b")
    qc = QuantumCircuit(q, a, b)
    qc.h(0)
    qc.cx(0, 2)
    qc.measure(2, b[1])
    qc.x(3)  # a gate on another qubit after a measurement is still final for qubit 2
    qc.barrier()
    qc.measure(0, a[0])
    qc.measure(3, b[2])
    c = from_qiskit(qc)
    assert c.measured == [(0, 0), (2, 3), (3, 4)]
    assert c.n_clbits == 5
    assert_matches(qc)


def test_box_is_inlined():
    qc = QuantumCircuit(3)
    qc.h(0)
    with qc.box():
        qc.cx(0, 1)
        qc.ry(0.3, 2)
    plain = QuantumCircuit(3)
    plain.h(0)
    plain.cx(0, 1)
    plain.ry(0.3, 2)
    assert np.abs(simulate(qc) - Statevector(plain).data).max() <= 1e-12


def test_bounds_cover_every_registered_method():
    # a method without a bound here would not be checked below: a new method must get one
    assert set(BOUNDS) == set(gemm.methods())


@pytest.mark.parametrize("backend", gemm.methods())
def test_every_backend_within_its_bound(backend):
    qc = quantum_volume(8, seed=7)
    assert_matches(qc, BOUNDS[backend], backend)


# --- rejected constructs -----------------------------------------------------------------


def test_unbound_parameters_are_named():
    qc = QuantumCircuit(2)
    qc.rx(Parameter("theta"), 0)
    qc.rz(Parameter("phi") * 2, 1)
    with pytest.raises(CircuitError, match=r"2 unbound parameter\(s\): phi, theta; bind them first"):
        from_qiskit(qc)


def test_mid_circuit_measurement_names_both_instructions():
    qc = QuantumCircuit(2, 1)
    qc.h(0)
    qc.measure(0, 0)
    qc.x(0)
    with pytest.raises(CircuitError, match=r"mid-circuit measurement: qubit 0 is measured by instruction 1 "
                                           r"\('measure'\) and used again by instruction 2 "
                                           r"\('x' on qubit\(s\) \[0\]\)"):
        from_qiskit(qc)


def test_reset_is_rejected():
    qc = QuantumCircuit(2)
    qc.h(1)
    qc.reset(1)
    with pytest.raises(CircuitError, match=r"instruction 1 \('reset' on qubit\(s\) \[1\]\) is a reset"):
        from_qiskit(qc)


def test_if_else_is_rejected():
    qc = QuantumCircuit(2, 1)
    qc.h(0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    with pytest.raises(CircuitError, match=r"instruction 2 \('if_else' on qubit\(s\) \[1\]\) is classical control "
                                           r"flow \(IfElseOp\)"):
        from_qiskit(qc)


def test_for_loop_is_rejected():
    qc = QuantumCircuit(1)
    with qc.for_loop(range(3)):
        qc.x(0)
    with pytest.raises(CircuitError, match=r"instruction 0 \('for_loop'.*classical control flow"):
        from_qiskit(qc)


def test_non_unitary_instruction_is_rejected():
    qc = QuantumCircuit(2)
    qc.h(0)
    qc.append(Initialize([0, 1, 0, 0]), [0, 1])
    with pytest.raises(CircuitError, match=r"instruction 1 \('initialize' on qubit\(s\) \[0, 1\]\) has no unitary "
                                           r"matrix"):
        from_qiskit(qc)


def test_wrong_type():
    with pytest.raises(TypeError, match="qc must be a qiskit.QuantumCircuit, got str"):
        from_qiskit("h q[0];")


def test_non_unitary_matrix_is_checked():
    qc = QuantumCircuit(1)
    qc.append(UnitaryGate(np.diag([1, np.exp(0.1j)]), check_input=False), [0])
    assert from_qiskit(qc).gates[0].name == "unitary"
    qc2 = QuantumCircuit(1)
    qc2.append(UnitaryGate(np.diag([1.0, 1.001]), check_input=False), [0])
    with pytest.raises(CircuitError, match="is not unitary"):
        from_qiskit(qc2)


def test_without_qiskit_import_circuits_works_and_from_qiskit_says_what_to_install():
    code = (
        "import sys; sys.modules['qiskit'] = None\n"
        "import circuits, qsim_tc\n"
        "try:\n"
        "    circuits.from_qiskit(None)\n"
        "except ImportError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert "ERR from_qiskit needs qiskit, which is not installed: pip install qsim-tc[qiskit]" in out.stdout


def test_memory_error_of_the_engine_for_a_too_wide_circuit():
    from qsim_tc import InsufficientMemoryError

    qc = QuantumCircuit(40)
    qc.h(0)
    with pytest.raises(InsufficientMemoryError, match="simulating 40 qubits"):
        Simulator("native", device="cpu").run(from_qiskit(qc))
