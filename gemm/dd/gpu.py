"""GPU side of the ``dd`` method: the FMA-based double-double GEMM kernel of ``dd.cu``.

The kernel source lives beside this module and is compiled once per process and device
(:func:`gemm.cuda.compile.raw_module`). cupy is imported inside functions only.
"""

from __future__ import annotations

import numpy as np

from gemm.cuda.compile import raw_module

BM = BN = 32
THREADS = (16, 16, 1)
OPTIONS = ("--fmad=false",)  # TwoSum needs additions rounded on their own


def _kernel(device_id: int):
    return raw_module(__package__, "dd.cu", OPTIONS, device_id).get_function("dd_zgemm_fma")


def gemm_fma(a, a_lo, b, b_lo, out_hi, out_lo) -> None:
    """``out_hi + out_lo = (a + a_lo) @ (b + b_lo)`` in DD, 2-D cupy operands, by the FMA kernel.

    Real operands are computed as complex with a zero imaginary part. The outputs may be any
    2-D views of the right shape; the operands are not modified.
    """
    import cupy  # noqa: PLC0415

    m, k = a.shape
    n = b.shape[1]
    cplx = np.dtype(out_hi.dtype).kind == "c"

    def prep(x):
        return cupy.ascontiguousarray(x.astype(np.complex128, copy=False))

    ah, al, bh, bl = prep(a), prep(a_lo), prep(b), prep(b_lo)
    ch = cupy.empty((m, n), dtype=np.complex128)
    cl = cupy.empty((m, n), dtype=np.complex128)
    grid = ((m + BM - 1) // BM, (n + BN - 1) // BN, 1)
    if grid[1] > 65535:
        raise ValueError(f"algorithm='fma' supports at most {65535 * BN} output columns, got {n}")
    _kernel(cupy.cuda.Device().id)(grid, THREADS, (ah, al, bh, bl, ch, cl, np.int32(m), np.int32(n), np.int32(k)))
    if cplx:
        out_hi[...] = ch
        out_lo[...] = cl
    else:
        out_hi[...] = ch.real
        out_lo[...] = cl.real
