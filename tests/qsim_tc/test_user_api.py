"""The API Aer and qsim users reach for: run a QuantumCircuit, marginal probabilities, Pauli expectations."""

import itertools

import numpy as np
import pytest

from qsim_tc import Simulator, StateVector

qiskit = pytest.importorskip("qiskit")
from qiskit.quantum_info import Pauli, SparsePauliOp, Statevector, random_statevector  # noqa: E402


def _bell_ghz():
    qc = qiskit.QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(0.4, 2)
    qc.cx(1, 2)
    return qc


def test_run_takes_a_qiskit_circuit():
    qc = _bell_ghz()
    state = Simulator("native", device="cpu").run(qc).state
    np.testing.assert_allclose(state.to_numpy(), Statevector(qc).data, atol=1e-14)


def test_run_rejects_other_types_naming_the_argument():
    with pytest.raises(TypeError, match="circuit must be a circuits.Circuit or a qiskit.QuantumCircuit, got str"):
        Simulator(device="cpu").run("h q[0];")


def test_run_of_a_qiskit_circuit_with_unbound_parameters_says_so():
    qc = qiskit.QuantumCircuit(1)
    qc.rx(qiskit.circuit.Parameter("theta"), 0)
    with pytest.raises(ValueError, match="unbound parameter"):
        Simulator(device="cpu").run(qc)


@pytest.mark.parametrize("qubits", [[0], [2], [1, 0], [3, 1], [4, 0, 2], [0, 1, 2, 3, 4], [2, 4, 1, 0, 3]])
def test_marginal_probabilities_match_qiskit(qubits):
    sv = random_statevector(2**5, seed=11)
    st = StateVector.from_array(sv.data, device="cpu")
    got = st.probabilities(qubits=qubits)
    assert got.shape == (2 ** len(qubits),)
    np.testing.assert_allclose(got, sv.probabilities(qubits), atol=1e-15)


def test_probabilities_without_qubits_is_the_full_distribution():
    sv = random_statevector(2**4, seed=2)
    st = StateVector.from_array(sv.data, device="cpu")
    np.testing.assert_allclose(st.probabilities(), sv.probabilities(), atol=1e-15)


def test_marginal_probabilities_reject_repeated_qubits():
    st = StateVector(3, device="cpu")
    with pytest.raises(ValueError, match="qubit"):
        st.probabilities(qubits=[1, 1])


def test_expectation_of_every_3_qubit_pauli_matches_qiskit():
    sv = random_statevector(2**3, seed=5)
    st = StateVector.from_array(sv.data, device="cpu")
    for letters in itertools.product("IXYZ", repeat=3):
        label = "".join(letters)
        want = sv.expectation_value(Pauli(label))
        assert abs(st.expectation_value(label) - want) < 1e-14, label
        assert abs(st.expectation_value(Pauli(label)) - want) < 1e-14, label


def test_expectation_of_a_sparse_pauli_op_and_phases_match_qiskit():
    sv = random_statevector(2**4, seed=9)
    st = StateVector.from_array(sv.data, device="cpu")
    op = SparsePauliOp(["XYZI", "IIYX", "ZZZZ", "IIII"], [0.5, -1.2, 0.3j, 2.0])
    assert abs(st.expectation_value(op) - sv.expectation_value(op)) < 1e-13
    for label in ("-iXYZI", "iZZXY", "-YIXZ"):
        assert abs(st.expectation_value(label) - sv.expectation_value(Pauli(label))) < 1e-14
    pairs = [("XYZI", 0.5), ("ZZZZ", -1.0)]
    assert abs(st.expectation_value(pairs) - sv.expectation_value(SparsePauliOp.from_list(pairs))) < 1e-14


def test_expectation_on_a_complex64_state():
    qc = _bell_ghz()
    st = Simulator("native32", device="cpu").run(qc).state
    op = SparsePauliOp(["ZZI", "XXX", "IYY"], [1.0, 0.5, -0.25])
    assert abs(st.expectation_value(op) - Statevector(qc).expectation_value(op)) < 1e-6


def test_expectation_rejects_bad_operators():
    st = StateVector(2, device="cpu")
    with pytest.raises(ValueError, match="acts on 3 qubits"):
        st.expectation_value("XYZ")
    with pytest.raises(ValueError, match="letters I, X, Y, Z"):
        st.expectation_value("XA")
    with pytest.raises(TypeError, match="operator must be a Pauli label"):
        st.expectation_value(np.eye(4))


@pytest.mark.gpu
def test_marginals_and_expectations_on_the_gpu(cp):
    sv = random_statevector(2**5, seed=4)
    st = StateVector.from_array(sv.data, device="gpu")
    got = st.probabilities(qubits=[3, 0])
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(got), sv.probabilities([3, 0]), atol=1e-15)
    op = SparsePauliOp(["XYZII", "IIYYX", "ZIZIZ"], [0.5, -1.2, 0.7])
    assert abs(st.expectation_value(op) - sv.expectation_value(op)) < 1e-13


@pytest.mark.gpu
def test_run_takes_a_qiskit_circuit_on_the_gpu(cp):
    qc = _bell_ghz()
    state = Simulator("native", device="gpu").run(qc).state
    np.testing.assert_allclose(state.to_numpy(), Statevector(qc).data, atol=1e-14)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_in_place_run_on_an_adopted_array_changes_that_state_only(device):
    from circuits import brickwork
    from qsim_tc import Simulator, StateVector

    xp = __import__("cupy") if device == "gpu" else np
    c = brickwork(12, 4, 4, 5)
    want = Simulator("native", device=device).run(c).state.to_numpy()
    a = xp.zeros(1 << 12, dtype=np.complex128)
    a[0] = 1
    s = StateVector.from_array(a, copy=False, device=device)
    r = Simulator("native", device=device).run(c, initial_state=s, in_place=True)
    assert r.state is s
    np.testing.assert_allclose(s.to_numpy(), want, atol=1e-13)
    # without in_place the start state is left as it was
    t = StateVector(12, device=device)
    Simulator("native", device=device).run(c, initial_state=t)
    assert t.amplitude(0) == 1


def test_adopting_an_array_checks_it():
    from qsim_tc import Simulator, StateVector

    with pytest.raises(ValueError, match="complex128"):
        StateVector.from_array(np.zeros(8, dtype=np.complex64), dtype=np.complex128, copy=False, device="cpu")
    with pytest.raises(ValueError, match="contiguous"):
        StateVector.from_array(np.zeros(16, dtype=np.complex128)[::2], copy=False, device="cpu")
    with pytest.raises(ValueError, match="in_place=True needs an initial_state"):
        Simulator("native", device="cpu").run(__import__("circuits").brickwork(4, 2, 1, 0), in_place=True)
