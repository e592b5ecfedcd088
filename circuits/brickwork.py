"""Brickwork random circuits of Haar-random d-qubit gates."""

from __future__ import annotations

import numpy as np

from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.gate import Gate
from circuits.haar import haar_unitary


def brickwork(n_qubits: int, gate_qubits: int, depth: int, seed: int | None = None,
              periodic: bool = False) -> Circuit:
    """Layers of Haar-random ``gate_qubits``-qubit unitaries on blocks [k, k+d).

    Even layers start at qubit 0, odd layers are offset by d // 2. Blocks that would cross
    the last qubit are dropped, unless ``periodic``: then each layer has n // d disjoint blocks
    and those past the last qubit wrap around to qubit 0.

    Args:
        n_qubits: width (>= gate_qubits).
        gate_qubits: d, qubits per gate (>= 1).
        depth: number of layers (>= 1).
        seed: seed of numpy's default generator (None: fresh entropy).
        periodic: wrap blocks around the end.

    Raises:
        CircuitError: ``gate_qubits`` outside 1..n_qubits or ``depth`` < 1.
    """
    for name, v in (("n_qubits", n_qubits), ("gate_qubits", gate_qubits), ("depth", depth)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if n_qubits < 1:
        raise CircuitError(f"n_qubits must be >= 1, got {n_qubits}")
    if not 1 <= gate_qubits <= n_qubits:
        raise CircuitError(f"gate_qubits must be in 1..n_qubits={n_qubits}, got {gate_qubits}")
    if depth < 1:
        raise CircuitError(f"depth must be >= 1, got {depth}")
    rng = np.random.default_rng(seed)
    d = int(gate_qubits)
    circ = Circuit(n_qubits, name=f"brickwork_n{n_qubits}_d{d}_L{depth}_s{seed}")
    dim = 1 << d
    for layer in range(depth):
        offset = (d // 2) if layer % 2 else 0
        if periodic:
            # n // d disjoint blocks, the last ones wrapping past qubit n-1 to qubit 0
            blocks = [tuple((offset + j * d + i) % n_qubits for i in range(d)) for j in range(n_qubits // d)]
        else:
            blocks = [tuple(range(k, k + d)) for k in range(offset, n_qubits - d + 1, d)]
        for qubits in blocks:
            circ.append(Gate(haar_unitary(dim, rng), qubits, f"haar{d}_L{layer}", check_unitary=False))
    return circ
