"""Checks and bit reordering of gate matrices (small, host-side)."""

from __future__ import annotations

import numpy as np

from circuits.gate import check_matrix, check_qubits

__all__ = ["check_matrix", "check_targets", "reorder_bits"]


def check_targets(qubits, n_qubits: int) -> tuple[int, ...]:
    """Validate target qubits against a state of ``n_qubits``; return them as a tuple of ints."""
    return check_qubits(qubits, n_qubits)


def reorder_bits(matrix: np.ndarray, order) -> np.ndarray:
    """Re-index a gate matrix so that new index bit j is old index bit ``order[j]``.

    A gate listed on qubits (q0, q1, ...) and the same gate listed in another order differ only
    by this permutation of the matrix's index bits.
    """
    d = len(order)
    if list(order) == list(range(d)):
        return matrix
    t = matrix.reshape([2] * (2 * d))
    # C order: axis i of a d-bit index is bit d-1-i
    rows = [d - 1 - order[d - 1 - i] for i in range(d)]
    cols = [2 * d - 1 - order[d - 1 - i] for i in range(d)]
    return np.ascontiguousarray(t.transpose(rows + cols)).reshape(1 << d, 1 << d)
