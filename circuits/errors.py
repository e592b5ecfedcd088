"""Exceptions raised while building or importing circuits."""


class CircuitError(ValueError):
    """A circuit or gate is malformed (bad qubits, bad matrix, unsupported instruction)."""
