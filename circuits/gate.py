"""A gate: a unitary matrix and the qubits it acts on.

Matrix convention (as Qiskit): the first listed qubit is the least significant bit of the
matrix index, so ``qiskit.quantum_info.Operator(instruction).data`` is directly the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuits.errors import CircuitError

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
        qs = _check_qubits(qubits)
        m = np.array(matrix, dtype=np.complex128, copy=True)
        dim = 1 << len(qs)
        if m.shape != (dim, dim):
            raise CircuitError(
                f"matrix of gate {name!r} has shape {m.shape}; {len(qs)} qubit(s) {qs} need ({dim}, {dim})"
            )
        if not np.isfinite(m).all():
            raise CircuitError(f"matrix of gate {name!r} holds NaN or Inf")
        if check_unitary:
            err = float(np.abs(m.conj().T @ m - np.eye(dim)).max())
            if err > atol:
                raise CircuitError(
                    f"matrix of gate {name!r} on qubits {qs} is not unitary: max |U^dagger U - I| = {err:.3g} "
                    f"> atol={atol:g} (pass check_unitary=False to apply it anyway)"
                )
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


def _check_qubits(qubits) -> tuple[int, ...]:
    if isinstance(qubits, (int, np.integer)):
        qubits = (qubits,)
    try:
        qs = tuple(qubits)
    except TypeError:
        raise TypeError(f"qubits must be a sequence of ints, got {type(qubits).__name__}") from None
    if not qs:
        raise CircuitError("qubits is empty; a gate acts on at least one qubit")
    for q in qs:
        if isinstance(q, bool) or not isinstance(q, (int, np.integer)):
            raise TypeError(f"qubits must be ints, got {q!r} ({type(q).__name__}) in {qs}")
    qs = tuple(int(q) for q in qs)
    if min(qs) < 0:
        raise CircuitError(f"qubits must be >= 0, got {qs}")
    if len(set(qs)) != len(qs):
        raise CircuitError(f"qubits {qs} repeat a qubit; each target must be distinct")
    return qs
