"""circuits.controlled (exact multi-controlled gates, random circuits of them) and from_qiskit's
exact matrices of Qiskit's controlled gates."""

import numpy as np
import pytest

from circuits import CircuitError, controlled_random, from_qiskit
from circuits.controlled import KINDS, controlled
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL, classify


def test_controlled_is_exact_and_reads_as_controlled():
    u = np.array([[0, 1], [1, 0]])
    m = controlled(u, 2)  # a Toffoli: controls on bits 0 and 1, target bit 2
    want = np.eye(8)
    want[[3, 7]] = want[[7, 3]]
    np.testing.assert_array_equal(m, want)
    s = classify(m)
    assert (s.kind, s.controls, s.targets) == (CONTROLLED, (0, 1), (2,))
    np.testing.assert_array_equal(controlled(u, 0), u)


def test_controlled_rejects_bad_arguments():
    with pytest.raises(ValueError, match="u must be"):
        controlled(np.eye(3), 1)
    with pytest.raises(ValueError, match="n_controls must be"):
        controlled(np.eye(2), -1)


def test_controlled_random_layers_cover_every_qubit_once_and_repeat_by_seed():
    c = controlled_random(11, 6, seed=3)
    assert [g.name for g in c.gates] == [g.name for g in controlled_random(11, 6, seed=3).gates]
    for layer in range(6):
        qubits = [q for g in c.gates if g.name.endswith(f"_L{layer}") for q in g.qubits]
        assert sorted(qubits) == list(range(11))
    assert {g.name.split("_")[0] for g in c.gates} == {k[0] for k in KINDS}


def test_controlled_random_gates_have_their_structure():
    """Toffoli, Fredkin and the doubly controlled U read as controlled gates on their first
    qubits, CCZ and T as diagonals: the structure the stage planner needs."""
    c = controlled_random(9, 5, seed=1)
    want = {"ccx": (2, 1), "cswap": (1, 2), "ccu": (2, 1), "cx": (1, 1)}
    for g in c.gates:
        kind = g.name.split("_")[0]
        s = classify(g.matrix)
        if kind in want:
            assert s.kind == CONTROLLED and (len(s.controls), len(s.targets)) == want[kind]
            assert s.controls == tuple(range(want[kind][0]))
        elif kind in ("ccz", "t"):
            assert s.kind == DIAGONAL
        np.testing.assert_allclose(g.matrix @ g.matrix.conj().T, np.eye(1 << len(g.qubits)), atol=1e-14)


def test_controlled_random_checks_its_arguments():
    with pytest.raises(TypeError, match="depth must be an int"):
        controlled_random(5, 2.0)
    with pytest.raises(CircuitError, match="n_qubits must be >= 3"):
        controlled_random(2, 1)
    with pytest.raises(CircuitError, match="depth must be >= 1"):
        controlled_random(5, 0)


def test_qiskit_controlled_gates_without_a_matrix_are_built_exactly():
    """Qiskit multiplies such gates out of synthesized definitions (rounding of up to ~3e-14
    between control values); from_qiskit builds them from the base gate, so they read as
    controlled: a doubly controlled 2-qubit U mixes 2 qubits, not 4."""
    qiskit = pytest.importorskip("qiskit")
    from qiskit.circuit.library import HGate, MCXGate, SwapGate, UnitaryGate
    from qiskit.quantum_info import Operator, random_unitary

    qc = qiskit.QuantumCircuit(5)
    qc.append(HGate().control(2, annotated=False), [0, 1, 2])
    qc.append(UnitaryGate(random_unitary(4, seed=2)).control(2, annotated=False), [4, 0, 3, 1])
    qc.append(MCXGate(3), [2, 0, 4, 1])
    qc.append(SwapGate().control(2, annotated=False), [1, 2, 0, 3])
    # ctrl_state 2: control 3 open (acts where it is 0), so it mixes like a target
    qc.append(UnitaryGate(random_unitary(2, seed=3)).control(2, ctrl_state=2, annotated=False), [3, 1, 0])
    c = from_qiskit(qc)
    want = [((0, 1), (2,)), ((0, 1), (2, 3)), ((0, 1, 2), (3,)), ((0, 1), (2, 3)), ((1,), (0, 2))]
    for inst, g, (controls, targets) in zip(qc.data, c.gates, want):
        s = classify(g.matrix)
        assert (s.kind, s.controls, s.targets) == (CONTROLLED, controls, targets), inst.operation.name
        np.testing.assert_allclose(g.matrix, Operator(inst.operation).data, rtol=0, atol=1e-13)
