"""Random circuits of multi-controlled gates (Toffoli, Fredkin, doubly controlled U) among one- and
two-qubit gates: the reversible-logic and arithmetic shape, which neither a brickwork nor quantum
volume has (most of their gates leave some qubits unmixed: a control only selects)."""

from __future__ import annotations

import numpy as np

from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.gate import Gate
from circuits.haar import haar_unitary

_X = np.array([[0, 1], [1, 0]], dtype=np.complex128)
_Z = np.diag([1, -1]).astype(np.complex128)
_SWAP = np.eye(4, dtype=np.complex128)[[0, 2, 1, 3]]
_T = np.diag([1, np.exp(0.25j * np.pi)])
# (name, controls, targets) of each gate kind, drawn with equal weight; a Haar target stands for
# a controlled rotation of arbitrary angles
KINDS = (("ccx", 2, 1), ("cswap", 1, 2), ("ccz", 2, 1), ("ccu", 2, 1), ("cx", 1, 1), ("u2", 0, 2), ("u1", 0, 1),
         ("t", 0, 1))


def controlled(u, n_controls: int) -> np.ndarray:
    """``u`` controlled by ``n_controls`` qubits listed first (the low bits of the matrix index):
    the identity where any control is 0, ``u`` where all are 1, exactly (no rounding).

    Args:
        u: a (2^t, 2^t) matrix.
        n_controls: >= 0.

    Raises:
        ValueError: ``u`` is not square with a power-of-two side, or ``n_controls`` < 0.
    """
    u = np.asarray(u, dtype=np.complex128)
    if u.ndim != 2 or u.shape[0] != u.shape[1] or u.shape[0] < 2 or u.shape[0] & (u.shape[0] - 1):
        raise ValueError(f"u must be (2^t, 2^t) with t >= 1, got shape {u.shape}")
    if isinstance(n_controls, bool) or not isinstance(n_controls, (int, np.integer)) or n_controls < 0:
        raise ValueError(f"n_controls must be an int >= 0, got {n_controls!r}")
    out = np.eye(u.shape[0] << n_controls, dtype=np.complex128)
    on = (np.arange(u.shape[0]) << n_controls) + (1 << n_controls) - 1  # every control bit 1
    out[np.ix_(on, on)] = u
    return out


def controlled_random(n_qubits: int, depth: int, seed: int | None = None) -> Circuit:
    """``depth`` layers of gates on a random partition of the qubits: each layer draws kinds from
    :data:`KINDS` (Toffoli ``ccx``, Fredkin ``cswap``, ``ccz``, ``ccu`` a doubly controlled Haar
    1-qubit gate, ``cx``, Haar 2- and 1-qubit gates, ``t``; equal weights among the kinds that
    fit the qubits left) until every qubit has a gate, each on qubits not yet used in the layer
    (controls listed first). Matrices are exact: a control's identity block holds exact ones and
    zeros.

    Args:
        n_qubits: width (>= 3).
        depth: number of layers (>= 1).
        seed: seed of numpy's default generator (None: fresh entropy).

    Raises:
        TypeError: a size that is not an int.
        CircuitError: ``n_qubits`` < 3 or ``depth`` < 1.
    """
    for name, v in (("n_qubits", n_qubits), ("depth", depth)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if n_qubits < 3:
        raise CircuitError(f"n_qubits must be >= 3 (a Toffoli's width), got {n_qubits}")
    if depth < 1:
        raise CircuitError(f"depth must be >= 1, got {depth}")
    rng = np.random.default_rng(seed)
    circ = Circuit(n_qubits, name=f"controlled_n{n_qubits}_L{depth}_s{seed}")
    for layer in range(depth):
        free = [int(q) for q in rng.permutation(n_qubits)]
        while free:  # (1-qubit kinds always fit: every qubit gets a gate)
            fits = [k for k in KINDS if k[1] + k[2] <= len(free)]
            name, n_controls, n_targets = fits[rng.integers(len(fits))]
            width = n_controls + n_targets
            qubits, free = tuple(free[:width]), free[width:]
            circ.append(Gate(controlled(_target(name, rng), n_controls), qubits, f"{name}_L{layer}",
                             check_unitary=False))
    return circ


def _target(name: str, rng: np.random.Generator) -> np.ndarray:
    """The matrix a gate kind applies where its controls are all 1."""
    if name in ("ccx", "cx"):
        return _X
    if name == "ccz":
        return _Z
    if name == "cswap":
        return _SWAP
    if name == "t":
        return _T
    if name == "u2":
        return haar_unitary(4, rng)
    return haar_unitary(2, rng)  # ccu, u1
