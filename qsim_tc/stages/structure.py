"""The structure of a gate, read from its matrix: diagonal, controlled-U, permutation or dense.

A stage of the planner (:mod:`qsim_tc.stages.plan`) needs, for each gate, the qubits whose
amplitudes the gate mixes; only those must be local. A diagonal gate mixes none (it multiplies
each amplitude by a phase), a controlled-U gate mixes only its targets (a control qubit merely
selects which amplitudes change), a dense gate mixes all of its qubits.

Every test here is exact: an off-diagonal entry counts as zero only when it is exactly 0.0, and
a control's "identity when the control is 0" block must hold exact ones and zeros. An entry of
1e-17 left by a synthesis routine therefore makes the gate dense (or not controlled). This is on
purpose: a structured application then computes the very same numbers the dense product would
(multiplying by an exact zero adds nothing), so classifying a gate never changes a result.

Matrix convention (as ``circuits.Gate``): bit i of the matrix index is the gate's i-th qubit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DIAGONAL = "diagonal"
CONTROLLED = "controlled"
PERMUTATION = "permutation"
DENSE = "dense"
KINDS = (DIAGONAL, CONTROLLED, PERMUTATION, DENSE)


@dataclass(frozen=True, eq=False)
class GateStructure:
    """What a gate's matrix is, in the gate's own bit order.

    Attributes:
        kind: ``"diagonal"``, ``"controlled"``, ``"permutation"`` or ``"dense"``.
        n_bits: d, the number of the gate's qubits.
        diagonal: for ``"diagonal"``: the 2^d diagonal entries; else None.
        controls: for ``"controlled"``: the matrix bits (indices into the gate's qubit list)
            that are controls; the gate acts as ``target_matrix`` when all of them are 1 and as
            the identity otherwise. Empty for the other kinds.
        targets: the matrix bits the gate mixes (ascending): all bits for ``"dense"`` and
            ``"permutation"``, the non-control bits for ``"controlled"``, none for ``"diagonal"``.
        target_matrix: for ``"controlled"``: the 2^t x 2^t matrix on ``targets`` (bit j of its
            index is ``targets[j]``); for ``"dense"`` and ``"permutation"``: the full matrix.
        permutation: for ``"permutation"``: ``perm[c]`` is the row of the one nonzero entry of
            column c (basis state c goes to ``perm[c]``), with ``phases[c]`` that entry.
        phases: see ``permutation``.
        qubit_swap: for a permutation that exchanges two of the gate's qubits with unit phases
            (SWAP), the pair of matrix bits; None otherwise. Such a gate can be applied by
            relabelling the two qubits in the layout, without touching the amplitudes.
    """

    kind: str
    n_bits: int
    diagonal: np.ndarray | None = None
    controls: tuple[int, ...] = ()
    targets: tuple[int, ...] = ()
    target_matrix: np.ndarray | None = None
    permutation: np.ndarray | None = None
    phases: np.ndarray | None = None
    qubit_swap: tuple[int, int] | None = None


def classify(matrix) -> GateStructure:
    """The structure of a gate matrix, by exact tests (see the module docstring).

    Tried in order: diagonal, controlled-U (one or more control bits), permutation (one nonzero
    per row and column), dense. A controlled gate whose ``target_matrix`` is itself a
    permutation (CX, Toffoli) stays ``"controlled"``: the controls are what lets a planner
    leave them outside the local qubits.

    Args:
        matrix: a square (2^d, 2^d) array, d >= 1 (any numeric dtype; read as complex128).

    Returns:
        The :class:`GateStructure`.

    Raises:
        ValueError: ``matrix`` is not square with a power-of-two side >= 2.
    """
    m = np.asarray(matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 2 or m.shape[0] & (m.shape[0] - 1):
        raise ValueError(f"matrix must be (2^d, 2^d) with d >= 1, got shape {m.shape}")
    m = m.astype(np.complex128, copy=False)
    dim = m.shape[0]
    d = dim.bit_length() - 1
    nonzero = m != 0
    diag = np.diagonal(m).copy()
    if np.count_nonzero(nonzero) == np.count_nonzero(diag):  # every nonzero lies on the diagonal
        return GateStructure(DIAGONAL, d, diagonal=diag)
    controls = tuple(b for b in range(d) if _is_control(m, nonzero, b))
    if controls:
        targets = tuple(b for b in range(d) if b not in controls)
        cmask = sum(1 << b for b in controls)
        # indices with every control bit 1, ordered by their target bits (low target = low bit)
        sub = np.array([_spread(j, targets) | cmask for j in range(1 << len(targets))])
        return GateStructure(CONTROLLED, d, controls=controls, targets=targets,
                             target_matrix=m[np.ix_(sub, sub)].copy())
    all_bits = tuple(range(d))
    if (nonzero.sum(axis=0) == 1).all() and (nonzero.sum(axis=1) == 1).all():
        perm = nonzero.argmax(axis=0)
        phases = m[perm, np.arange(dim)]
        return GateStructure(PERMUTATION, d, targets=all_bits, target_matrix=m.copy(), permutation=perm,
                             phases=phases, qubit_swap=_qubit_swap(perm, phases, d))
    return GateStructure(DENSE, d, targets=all_bits, target_matrix=m.copy())


def _is_control(m: np.ndarray, nonzero: np.ndarray, b: int) -> bool:
    """Whether matrix bit ``b`` is a control: the matrix never flips bit b, and is the identity
    on the indices where bit b is 0 (exact zeros and ones)."""
    idx = np.arange(m.shape[0])
    bit = (idx >> b) & 1
    if nonzero[bit[:, None] != bit[None, :]].any():
        return False
    zero = idx[bit == 0]
    return bool((m[np.ix_(zero, zero)] == np.eye(zero.size)).all())


def _spread(j: int, bits: tuple[int, ...]) -> int:
    """The index whose bit ``bits[i]`` is bit i of j (other bits 0)."""
    return sum(((j >> i) & 1) << b for i, b in enumerate(bits))


def _qubit_swap(perm: np.ndarray, phases: np.ndarray, d: int) -> tuple[int, int] | None:
    """The two bits a permutation exchanges, if it is exactly such an exchange with unit phases."""
    if not (phases == 1).all():
        return None
    idx = np.arange(perm.size)
    for a in range(d):
        for b in range(a + 1, d):
            ba, bb = (idx >> a) & 1, (idx >> b) & 1
            swapped = idx & ~((1 << a) | (1 << b)) | (ba << b) | (bb << a)
            if (perm == swapped).all():
                return (a, b)
    return None


def controlled_matrix(s: GateStructure, bits) -> np.ndarray:
    """A controlled gate's matrix on ``bits`` (its matrix bits: every target and some controls),
    the controls left out taken as 1; bit i of the result's index is ``bits[i]``.

    With ``bits = range(n_bits)`` this is the gate's full matrix; with fewer controls it is the gate
    as seen where the omitted controls are known to be 1 (a fixed bit of a chunk or of a rank).

    Raises:
        ValueError: ``s`` is not controlled, or ``bits`` misses a target or names a bit twice.
    """
    bits = [int(b) for b in bits]
    if s.kind != CONTROLLED:
        raise ValueError(f"controlled_matrix needs a controlled gate, got {s.kind!r}")
    if len(set(bits)) != len(bits) or not set(s.targets) <= set(bits) or not set(bits) <= set(range(s.n_bits)):
        raise ValueError(f"bits must hold every target {list(s.targets)} once, and only the gate's bits; got {bits}")
    d = len(bits)
    ctl = [i for i, b in enumerate(bits) if b in s.controls]
    tgt = [bits.index(t) for t in s.targets]
    out = np.eye(1 << d, dtype=np.complex128)
    on = [i for i in range(1 << d) if all((i >> c) & 1 for c in ctl)]
    sub = [sum(((i >> p) & 1) << m for m, p in enumerate(tgt)) for i in on]
    out[np.ix_(on, on)] = np.asarray(s.target_matrix)[np.ix_(sub, sub)]
    return out
