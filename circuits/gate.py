"""A gate: a unitary matrix and the qubits it acts on.

Matrix convention (as Qiskit): the first listed qubit is the least significant bit of the
matrix index, so ``qiskit.quantum_info.Operator(instruction).data`` is directly the matrix.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from circuits.errors import CircuitError, QubitError

UNITARY_TOL = 1e-10


@dataclass(frozen=True, eq=False)
class Gate:
    """A d-qubit gate. ``matrix`` is a read-only (2^d, 2^d) complex128 array."""

    matrix: np.ndarray
    qubits: tuple[int, ...]
    name: str = "unitary"

    def __init__(self, matrix, qubits, name: str = "unitary", *, check_unitary: bool = True, atol: float = UNITARY_TOL):
        """Validate and freeze a gate.

        Args:
            matrix: (2^d, 2^d) array-like, d = len(qubits).
            qubits: distinct non-negative ints.
            name: a label for reports.
            check_unitary: verify ``U^dagger U = I`` to ``atol`` (opt out for speed or on purpose).

        Raises:
            CircuitError: repeated or negative qubits, wrong shape, NaN/Inf, or not unitary.
            TypeError: qubits that are not integers.
        """
        qs = check_qubits(qubits)
        m = check_matrix(matrix, len(qs), label=f"matrix of gate {name!r} on qubits {qs}",
                         check_unitary=check_unitary, atol=atol, copy=True)
        m.setflags(write=False)
        object.__setattr__(self, "matrix", m)
        object.__setattr__(self, "qubits", qs)
        object.__setattr__(self, "name", str(name))

    @property
    def num_qubits(self) -> int:
        return len(self.qubits)

    def inverse(self) -> Gate:
        return Gate(self.matrix.conj().T, self.qubits, self.name + "_dg", check_unitary=False)

    def __repr__(self) -> str:
        return f"Gate({self.name!r}, qubits={self.qubits})"


def check_qubits(qubits, n_qubits: int | None = None) -> tuple[int, ...]:
    """Validate target qubits (and their range when ``n_qubits`` is given); return a tuple of ints.

    Raises:
        TypeError: not a sequence of ints.
        QubitError: empty, negative, out of range or repeated.
    """
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
            raise TypeError(f"qubits must be ints, got {q!r} ({type(q).__name__}) in {qs}")
    qs = tuple(int(q) for q in qs)
    if n_qubits is not None:
        bad = [q for q in qs if not 0 <= q < n_qubits]
        if bad:
            raise QubitError(f"qubits {bad} out of range for a {n_qubits}-qubit state (valid: 0..{n_qubits - 1})")
    elif min(qs) < 0:
        raise QubitError(f"qubits must be >= 0, got {qs}")
    if len(set(qs)) != len(qs):
        raise QubitError(f"qubits {qs} repeat a qubit; each target must be distinct")
    return qs


def check_atol(atol) -> None:
    """Refuse a unitarity tolerance that is not a finite real number >= 0.

    Raises:
        TypeError: not a real number. ValueError: negative, NaN or infinite (a NaN tolerance
            would pass any matrix).
    """
    if isinstance(atol, bool) or not isinstance(atol, numbers.Real):
        raise TypeError(f"atol must be a real number, got {atol!r} ({type(atol).__name__})")
    if not 0 <= atol < math.inf:
        raise ValueError(f"atol must be a finite number >= 0, got {atol!r}")


def check_matrix(matrix, n_targets: int, *, label: str = "matrix", check_unitary: bool = True,
                 atol: float = UNITARY_TOL, copy: bool = False) -> np.ndarray:
    """``matrix`` as a host complex128 (2^d, 2^d) array, after shape, finiteness and unitarity checks.

    Raises:
        TypeError: not numeric; ``atol`` not a real number.
        ValueError: ``atol`` negative, NaN or infinite (a NaN tolerance would pass any matrix).
        QubitError: the shape does not match ``n_targets`` qubits.
        CircuitError: NaN/Inf, or not unitary to ``atol`` (``check_unitary=False`` skips that).
    """
    if check_unitary:
        check_atol(atol)
    if hasattr(matrix, "get") and not isinstance(matrix, np.ndarray):  # a cupy array
        matrix = matrix.get()
    m = np.array(matrix, copy=True) if copy else np.asarray(matrix)
    if m.dtype.kind not in "fciu":
        raise TypeError(f"{label} must be numeric, got dtype {m.dtype}")
    m = m.astype(np.complex128, copy=False)
    dim = 1 << n_targets
    if m.shape != (dim, dim):
        raise QubitError(f"{label} has shape {m.shape}, but {n_targets} target qubit(s) need ({dim}, {dim})")
    if not np.isfinite(m).all():
        raise CircuitError(f"{label} holds NaN or Inf")
    if check_unitary:
        err = float(np.abs(m.conj().T @ m - np.eye(dim)).max())
        if err > atol:
            raise CircuitError(
                f"{label} is not unitary: max |U^dagger U - I| = {err:.3g} > atol={atol:g} "
                "(pass check_unitary=False to apply it anyway)"
            )
    return m


def reorder_bits(matrix: np.ndarray, order) -> np.ndarray:
    """Re-index a gate matrix so that new index bit j is old index bit ``order[j]``.

    A gate listed on qubits (q0, q1, ...) and the same gate listed in another order differ only
    by this permutation of the matrix's index bits.

    Args:
        matrix: a (2^d, 2^d) array.
        order: a permutation of 0..d-1.

    Returns:
        ``matrix`` itself when ``order`` is the identity, else a new C-contiguous array.
    """
    d = len(order)
    if list(order) == list(range(d)):
        return matrix
    t = matrix.reshape([2] * (2 * d))
    # C order: axis i of a d-bit index is bit d-1-i
    rows = [d - 1 - order[d - 1 - i] for i in range(d)]
    cols = [2 * d - 1 - order[d - 1 - i] for i in range(d)]
    return np.ascontiguousarray(t.transpose(rows + cols)).reshape(1 << d, 1 << d)
