"""circuits: the circuit model, brickwork generator, imports and fusion. Knows nothing of backends."""

from circuits.brickwork import brickwork
from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.gate import Gate
from circuits.haar import haar_unitary

__all__ = ["Circuit", "CircuitError", "Gate", "brickwork", "haar_unitary"]
