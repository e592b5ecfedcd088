"""Checks of a circuit's own fields (global phase, counts, measured pairs), shared by the
constructor and the file reader; a gate's checks live beside :class:`~circuits.Gate`."""

from __future__ import annotations

import math
import numbers

import numpy as np

from circuits.errors import CircuitError


def check_phase(value, what: str) -> float:
    """``value`` as a finite float (an angle in radians).

    Raises:
        TypeError: not a real number.
        CircuitError: NaN or infinite (it would turn every amplitude into NaN).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number (radians), got {value!r} ({type(value).__name__})")
    phase = float(value)
    if not math.isfinite(phase):
        raise CircuitError(f"{what} must be a finite number of radians, got {phase!r}")
    return phase


def check_count(value, what: str) -> int:
    """``value`` as a non-negative int (TypeError for another type, CircuitError below 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise CircuitError(f"{what} must be >= 0, got {value}")
    return int(value)


def check_measured(measured, n_qubits: int) -> list[tuple[int, int]]:
    """(qubit, clbit) pairs as ints, each qubit in range(n_qubits), each clbit >= 0."""
    pairs = []
    for pair in measured:
        try:
            q, c = pair
        except (TypeError, ValueError):
            raise CircuitError(f"measured must hold (qubit, clbit) pairs, got {pair!r}") from None
        q = check_count(q, "a measured qubit")
        c = check_count(c, "a measured clbit")
        if q >= n_qubits:
            raise CircuitError(f"measured qubit {q} is outside range(0, {n_qubits})")
        pairs.append((q, c))
    return pairs
