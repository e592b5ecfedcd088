"""Side by side with Qiskit Aer's statevector method on the same circuits."""

import numpy as np
import pytest

from circuits import Circuit, brickwork, haar_unitary
from qsim_tc import Simulator

qiskit = pytest.importorskip("qiskit")
aer = pytest.importorskip("qiskit_aer")
from qiskit.circuit.library import UnitaryGate  # noqa: E402


def aer_state(circ: Circuit) -> np.ndarray:
    qc = qiskit.QuantumCircuit(circ.n_qubits)
    for g in circ:
        # a writable copy: qiskit-aer misreads read-only matrices (Gate.matrix is frozen)
        qc.append(UnitaryGate(np.array(g.matrix), check_input=False), list(g.qubits))
    qc.save_statevector()
    return np.asarray(aer.AerSimulator(method="statevector").run(qc).result().get_statevector())


@pytest.mark.parametrize("circ", [brickwork(14, 4, 6, seed=2), brickwork(13, 3, 5, seed=3, periodic=True)],
                         ids=["brickwork-d4", "brickwork-d3-periodic"])
@pytest.mark.parametrize("backend,tol", [("native", 1e-12), ("int8-auto", 1e-12), ("native32", 2e-5)])
def test_same_state_as_aer(circ, backend, tol):
    ours = Simulator(backend, device="cpu").run(circ).state.to_numpy()
    assert np.abs(ours - aer_state(circ)).max() < tol


def test_scattered_gates_as_aer():
    rng = np.random.default_rng(11)
    circ = Circuit(12)
    for _ in range(30):
        d = int(rng.integers(1, 6))
        circ.add(haar_unitary(1 << d, rng), [int(q) for q in rng.choice(12, d, replace=False)])
    ours = Simulator(device="cpu", fuse="auto").run(circ).state.to_numpy()
    assert np.abs(ours - aer_state(circ)).max() < 1e-12
