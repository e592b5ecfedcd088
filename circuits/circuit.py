"""A circuit: a qubit count, a list of gates, a global phase and the measured qubits."""

from __future__ import annotations

import cmath
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from circuits._atomic import atomic_path
from circuits.circuit_file import MAX_LOAD_BYTES, load_circuit
from circuits.errors import CircuitError
from circuits.gate import Gate
from circuits.validate import check_count, check_measured, check_phase


class Circuit:
    """An ordered list of :class:`Gate` on ``n_qubits`` qubits (qubit 0 = least significant bit).

    Attributes:
        n_qubits: number of qubits.
        gates: the gates, applied in order.
        global_phase: radians; the state is multiplied by ``exp(i * global_phase)``.
        measured: (qubit, clbit) pairs of final measurements, for sampling.
        n_clbits: number of classical bits.
    """

    def __init__(self, n_qubits: int, gates: Iterable[Gate] = (), *, global_phase: float = 0.0,
                 measured: Iterable[tuple[int, int]] = (), n_clbits: int = 0, name: str = "circuit"):
        if isinstance(n_qubits, bool) or not isinstance(n_qubits, (int, np.integer)) or n_qubits < 1:
            raise CircuitError(f"n_qubits must be a positive int, got {n_qubits!r}")
        self.n_qubits = int(n_qubits)
        self.gates: list[Gate] = []
        self.global_phase = global_phase  # checked by the property's setter
        self.measured = check_measured(measured, self.n_qubits)
        n_clbits = check_count(n_clbits, "n_clbits")
        self.n_clbits = max([n_clbits] + [c + 1 for _, c in self.measured])
        self.name = name
        for g in gates:
            self.append(g)

    def append(self, gate: Gate) -> Circuit:
        """Add a gate; its qubits must lie in ``range(n_qubits)``."""
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be a circuits.Gate, got {type(gate).__name__}")
        bad = [q for q in gate.qubits if q >= self.n_qubits]
        if bad:
            raise CircuitError(f"gate {gate.name!r} acts on qubit(s) {bad}, outside range(0, {self.n_qubits})")
        self.gates.append(gate)
        return self

    def add(self, matrix, qubits, name: str = "unitary", **kw) -> Circuit:
        """Build a :class:`Gate` and append it."""
        return self.append(Gate(matrix, qubits, name, **kw))

    def __iter__(self) -> Iterator[Gate]:
        return iter(self.gates)

    def __len__(self) -> int:
        return len(self.gates)

    @property
    def max_gate_qubits(self) -> int:
        return max((g.num_qubits for g in self.gates), default=0)

    def inverse(self) -> Circuit:
        """The adjoint circuit (gates reversed and conjugate-transposed, phase negated)."""
        return Circuit(self.n_qubits, [g.inverse() for g in reversed(self.gates)],
                       global_phase=-self.global_phase, name=self.name + "_dg")

    def then(self, other: Circuit) -> Circuit:
        """This circuit followed by ``other`` (same width)."""
        if other.n_qubits != self.n_qubits:
            raise CircuitError(f"cannot compose circuits of {self.n_qubits} and {other.n_qubits} qubits")
        return Circuit(self.n_qubits, [*self.gates, *other.gates],
                       global_phase=self.global_phase + other.global_phase, name=f"{self.name}+{other.name}")

    @property
    def global_phase(self) -> float:
        """The global phase in radians (a finite float)."""
        return self._global_phase

    @global_phase.setter
    def global_phase(self, value) -> None:
        self._global_phase = check_phase(value, "global_phase")

    @property
    def phase_factor(self) -> complex:
        return cmath.exp(1j * self.global_phase)

    def __repr__(self) -> str:
        return f"Circuit({self.name!r}, n_qubits={self.n_qubits}, gates={len(self.gates)})"

    # --- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the circuit to an ``.npz`` file (matrices, qubits, names, phase, measurements).

        ``.npz`` is appended to a name without it (as numpy does). The file is written whole or
        not at all: a failed write leaves an existing file as it was.

        Raises:
            OSError: the folder is missing or not writable, or the write failed.
        """
        path = os.fspath(path)
        if not path.endswith(".npz"):
            path += ".npz"
        arrays = {f"m{i}": g.matrix for i, g in enumerate(self.gates)}
        arrays.update({f"q{i}": np.array(g.qubits, dtype=np.int64) for i, g in enumerate(self.gates)})
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez_compressed(
                f,
                n_qubits=np.int64(self.n_qubits),
                n_gates=np.int64(len(self.gates)),
                names=np.array([g.name for g in self.gates], dtype=str),
                global_phase=np.float64(self.global_phase),
                measured=np.array(self.measured, dtype=np.int64).reshape(-1, 2),
                n_clbits=np.int64(self.n_clbits),
                circuit_name=np.array(self.name),
                **arrays,
            )

    @classmethod
    def load(cls, path: str | Path, *, check_unitary: bool = True, max_bytes: int = MAX_LOAD_BYTES) -> Circuit:
        """Read a circuit written by :meth:`save`, with the checks a built circuit gets.

        Args:
            path: the ``.npz`` file.
            check_unitary: check every gate matrix is unitary (as :class:`Gate` does).
            max_bytes: the most memory the file's arrays may declare (checked from the archive's
                headers before any array is read).

        Raises:
            CircuitError: a malformed file, or a field that fails the checks of :class:`Gate` or
                :class:`Circuit`; the message names the file and the field.
            FileNotFoundError / OSError: the file cannot be opened.
        """
        return load_circuit(cls, path, check_unitary=check_unitary, max_bytes=max_bytes)
