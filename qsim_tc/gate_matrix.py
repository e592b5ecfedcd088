"""Checks and bit reordering of gate matrices (small, host-side)."""

from __future__ import annotations

import numpy as np

from circuits.gate import UNITARY_TOL
from qsim_tc.errors import QubitError


def check_targets(qubits, n_qubits: int) -> tuple[int, ...]:
    """Validate target qubits against a state of ``n_qubits``; return them as a tuple of ints."""
    if isinstance(qubits, (int, np.integer)) and not isinstance(qubits, bool):
        qubits = (qubits,)
    try:
        qs = tuple(qubits)
    except TypeError:
        raise TypeError(f"qubits must be a sequence of ints, got {type(qubits).__name__}") from None
    if not qs:
        raise QubitError("qubits is empty; a gate acts on at least one qubit")
    for q in qs:
        if isinstance(q, bool) or not isinstance(q, (int, np.integer)):
            raise TypeError(f"qubits must be ints, got {q!r} in {qs}")
    qs = tuple(int(q) for q in qs)
    bad = [q for q in qs if not 0 <= q < n_qubits]
    if bad:
        raise QubitError(f"qubits {bad} out of range for a {n_qubits}-qubit state (valid: 0..{n_qubits - 1})")
    if len(set(qs)) != len(qs):
        raise QubitError(f"qubits {qs} repeat a qubit; each target must be distinct")
    return qs


def check_matrix(matrix, n_targets: int, *, check_unitary: bool = True, atol: float = UNITARY_TOL) -> np.ndarray:
    """Return ``matrix`` as a host complex128 (2^d, 2^d) array after shape/finite/unitary checks."""
    if hasattr(matrix, "get") and not isinstance(matrix, np.ndarray):  # cupy array
        matrix = matrix.get()
    m = np.asarray(matrix)
    if m.dtype.kind not in "fciu":
        raise TypeError(f"matrix must be numeric, got dtype {m.dtype}")
    m = m.astype(np.complex128, copy=False)
    dim = 1 << n_targets
    if m.shape != (dim, dim):
        raise QubitError(f"matrix has shape {m.shape}, but {n_targets} target qubit(s) need ({dim}, {dim})")
    if not np.isfinite(m).all():
        raise ValueError("matrix holds NaN or Inf")
    if check_unitary:
        err = float(np.abs(m.conj().T @ m - np.eye(dim)).max())
        if err > atol:
            raise ValueError(
                f"matrix is not unitary: max |U^dagger U - I| = {err:.3g} > atol={atol:g} "
                "(pass check_unitary=False to apply it anyway)"
            )
    return m


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
