"""Lazy qubit layout: which logical qubit each physical bit of the state index holds.

The engine may leave the state permuted after a gate (a transpose is a full pass over memory,
so it is done only when a gate needs it); the layout remembers the permutation and is undone
when the state is read in logical order (the permutation itself: :mod:`qsim_tc.engine.permute`).
"""

from __future__ import annotations

import numpy as np


class Layout:
    """``phys[p]`` is the logical qubit stored at physical bit ``p``; ``pos[q]`` is its inverse."""

    def __init__(self, n_qubits: int):
        self.phys = list(range(n_qubits))
        self.pos = list(range(n_qubits))

    @property
    def is_identity(self) -> bool:
        return all(p == q for p, q in enumerate(self.phys))

    def set(self, phys: list[int]) -> None:
        self.phys = list(phys)
        self.pos = [0] * len(phys)
        for p, q in enumerate(self.phys):
            self.pos[q] = p

    def copy(self) -> Layout:
        other = Layout(len(self.phys))
        other.set(self.phys)
        return other

    def physical_index(self, logical_index: int) -> int:
        """The position in the physical array of the amplitude with logical index ``logical_index``."""
        return int(self.physical_indices(logical_index))

    def physical_indices(self, logical):
        """Physical positions of logical amplitude indices (int or int64 array)."""
        return _move_bits(logical, self.phys, range(len(self.phys)))

    def logical_indices(self, physical):
        """Logical indices of the amplitudes at physical positions (int or int64 array)."""
        return _move_bits(physical, range(len(self.phys)), self.phys)


def _move_bits(x, src, dst):
    """Bit ``src[i]`` of x becomes bit ``dst[i]`` of the result."""
    x = np.asarray(x, dtype=np.int64)
    out = np.zeros_like(x)
    for s, d in zip(src, dst):
        out |= ((x >> s) & 1) << d
    return out
