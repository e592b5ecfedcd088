"""circuits: the circuit model, brickwork and controlled-gate generators, imports and fusion. Knows nothing
of backends."""

from circuits.brickwork import brickwork
from circuits.circuit import Circuit
from circuits.controlled import controlled_random
from circuits.errors import CircuitError
from circuits.gate import Gate
from circuits.haar import haar_unitary
from circuits.qasm import from_qasm  # qiskit is imported only when called
from circuits.qiskit_import import from_qiskit  # qiskit is imported only when called

__all__ = ["Circuit", "CircuitError", "Gate", "brickwork", "controlled_random", "from_qasm", "from_qiskit",
           "haar_unitary"]
