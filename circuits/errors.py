"""Exceptions raised while building or importing circuits."""


class CircuitError(ValueError):
    """A circuit or gate is malformed (bad qubits, bad matrix, unsupported instruction)."""


class QubitError(CircuitError):
    """Qubit indices out of range, repeated, or not matching the matrix."""
