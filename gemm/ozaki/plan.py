"""The arithmetic of the INT8 Ozaki scheme, shared by both devices: bits per slice, slice-pair
groups, the int8-auto choice of the number of slices, and the sizes of one product (:class:`Plan`).

Pure arithmetic on Python ints and small numpy arrays; no operand is touched here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SPLITS_RANGE = (3, 20)  # the option range of `splits` and `max_splits`
SMAX = SPLITS_RANGE[1]
KP_ALIGN = 16  # slice rows are padded to a multiple of this many bytes (cuBLAS needs 4)
# Workspace (slices + INT32 products) of one block of the larger operand's lines.
BLOCK_BYTES = {"cpu": 256 << 20, "gpu": 2 << 30}
_DCAP = 53 + SMAX * 7 + 1  # an element this far below its line's maximum loses all its bits


def bits_per_slice(kk: int) -> int:
    """Bits per slice for INT8 dot products of length ``kk``: every one is exact in INT32.

    Raises:
        ValueError: ``kk`` so long that not even one bit per slice keeps INT32 exact.
    """
    b = min(7, (31 - math.ceil(math.log2(max(kk, 1)))) // 2)
    if b < 1:
        raise ValueError(f"inner dimension too long for exact INT32 accumulation: k'={kk} (at most 2^29)")
    return b


def group_capacity(kk: int, b: int) -> int:
    """How many slice products of length ``kk`` can be summed in INT32 without overflow."""
    return max(1, (2**31 - 1) // (kk * (2**b - 1) ** 2))


def slice_groups(s: int, cap: int) -> list[tuple[int, int, int]]:
    """The INT8 GEMMs of ``s`` slices: ``(w, i0, i1)`` sums the pairs (i, w - i), i0 <= i <= i1.

    Ordered as they are accumulated: weight w = s + 1 down to 2 (smallest terms first), each
    weight cut into chunks of at most ``cap`` pairs.
    """
    out = []
    for w in range(s + 1, 1, -1):
        for i0 in range(1, w, cap):
            out.append((w, i0, min(w - 1, i0 + cap - 1)))
    return out


def mantissa_bits(dtype) -> int:
    """Significant bits of the real dtype under ``dtype`` (24 for float32/complex64, else 53)."""
    return 24 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else 53


def loss_sums_from_deltas(delta: np.ndarray, b: int, p: int) -> np.ndarray:
    """``out[s - 1]`` = total bits lost by elements ``delta`` below their line maximum, s = 1..SMAX."""
    hist = np.bincount(np.minimum(delta, _DCAP).astype(np.int64), minlength=_DCAP + 1).astype(np.int64)
    d = np.arange(_DCAP + 1)
    out = np.zeros(SMAX, dtype=np.int64)
    for s in range(1, SMAX + 1):
        out[s - 1] = int((hist * np.clip(p + d - s * b, 0, p)).sum())
    return out


def choose_splits(stats: list[tuple[int, np.ndarray]], threshold: float, max_splits: int):
    """Smallest s in 3..max_splits whose mean loss is <= threshold for every operand.

    Args:
        stats: per operand ``(nonzero count, loss sums for s = 1..SMAX)``.

    Returns:
        ``(s or None, mean losses at s (or at max_splits when None))``.
    """
    def means(s):
        return [float(ls[s - 1]) / nz if nz else 0.0 for nz, ls in stats]

    for s in range(SPLITS_RANGE[0], max_splits + 1):
        if all(float(ls[s - 1]) <= threshold * nz for nz, ls in stats):
            return s, means(s)
    return None, means(max_splits)


def round_up(x: int, a: int) -> int:
    """``x`` rounded up to a multiple of ``a``."""
    return (x + a - 1) // a * a


@dataclass(frozen=True)
class Plan:
    """Sizes of one 2-D emulated product: R lines of A, NC lines (columns) of B, inner K."""

    R: int
    NC: int
    K: int
    cplx: bool
    s: int
    device: str  # "cpu" or "gpu"

    @property
    def kk(self) -> int:  # length of the INT8 dot products
        return 2 * self.K if self.cplx else self.K

    @property
    def Kp(self) -> int:
        return round_up(self.kk, KP_ALIGN)

    @property
    def b(self) -> int:
        return bits_per_slice(self.kk)

    @property
    def cap(self) -> int:
        return group_capacity(self.kk, self.b)

    @property
    def groups(self) -> list[tuple[int, int, int]]:
        return slice_groups(self.s, self.cap)

    @property
    def big_is_a(self) -> bool:
        return self.R >= self.NC

    @property
    def slice_item(self) -> int:  # bytes per slice value: int8 on the GPU, float64 BLAS operands on the CPU
        return 1 if self.device == "gpu" else 8

    @property
    def p_item(self) -> int:
        return 4 if self.device == "gpu" else 8

    def lines_out(self, role: str, n: int) -> int:
        """Slice lines written for ``n`` lines of operand ``role`` (B's complex lines double)."""
        return 2 * n if (role == "b" and self.cplx) else n

    def block_lines(self) -> int:
        """Lines of the larger operand handled per block (the workspace bound)."""
        g = len(self.groups)
        if self.big_is_a:
            small_w = self.lines_out("b", self.NC)
            per = self.s * self.Kp * self.slice_item + g * round_up(small_w, 4) * self.p_item
            total = self.R
        else:
            f = 2 if self.cplx else 1
            per = f * self.s * self.Kp * self.slice_item + g * self.R * f * self.p_item
            total = self.NC
        nb = max(32, BLOCK_BYTES[self.device] // max(per, 1))
        nb = nb // 32 * 32
        return int(min(total, nb))

    def workspace(self) -> tuple[int, int]:
        """(slice bytes, total workspace bytes) of one call."""
        nb = self.block_lines()
        g = len(self.groups)
        if self.big_is_a:
            big = nb * self.s * self.Kp
            small = self.lines_out("b", self.NC) * self.s * self.Kp
            prod = g * nb * round_up(self.lines_out("b", self.NC), 4)
        else:
            big = self.lines_out("b", nb) * self.s * self.Kp
            small = self.R * self.s * self.Kp
            prod = g * self.R * round_up(self.lines_out("b", nb), 4)
        slices = (big + small) * self.slice_item
        return slices, slices + prod * self.p_item

