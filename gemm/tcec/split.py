"""Bit-exact splitting of the error-corrected TF32/FP16 methods, in numpy (no cupy here).

* :func:`split`: the hi/lo split, bit for bit what the GPU kernel ``tcec_split`` writes.
  TF32: ``hi = RNA_tf32(x)``, ``lo = RNA_tf32((x - hi) * 2^11)``. FP16: ``x`` is first scaled by a
  power of two ``2^e`` (into a copy), then ``hi = RN_fp16(x)``, ``lo = RN_fp16((x - hi) * 2^11)``.
  ``x - hi`` is exact in FP32 in both cases, and ``lo = 0`` where ``hi`` is not finite. FP32
  subnormal inputs (below 2^-126) are flushed to zero, as the GPU kernel does.
* :func:`plan_fp16`: the power-of-two scaling of one operand from its exponent range, and whether
  every element then fits FP16 (normal range, so that ``hi`` and ``lo`` keep 11 bits each).
* :func:`real_form`: complex operands as the real product ``[Ar Ai] @ [[Br Bi], [-Bi Br]]``:
  ``A`` interleaved as it lies in memory (k' = 2k), ``B`` expanded to 2x2 blocks, the product
  interleaved again, the same inner order as the GPU kernel.
"""

from __future__ import annotations

import math

import numpy as np

FORMATS = ("tf32", "fp16")
SCHEMES = ("ec", "plain", "markidis")
LO_SHIFT = 11  # lo is scaled by 2^11
FP16_TOP = 14  # FP16 scaling puts the largest magnitude in [2^14, 2^15)
FP16_MIN_EXP = -14  # smallest normal FP16 exponent


def tf32_rna(x: np.ndarray) -> np.ndarray:
    """Round float32 ``x`` to TF32 (10 fraction bits), to nearest with ties away from zero.

    Same result as ``cvt.rna.tf32.f32`` on an H200: overflow goes to Inf, NaN and Inf are kept,
    FP32 subnormals are flushed to (signed) zero. In the split, a subnormal element then lives
    in lo, which is scaled by 2^11 and so normal again down to 2^-137.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    exp = u & np.uint32(0x7F800000)
    finite = exp != np.uint32(0x7F800000)
    r = np.where(finite, (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000), u)
    r = np.where(exp == 0, u & np.uint32(0x80000000), r)
    return r.astype(np.uint32).view(np.float32)


def round_fp16(x: np.ndarray) -> np.ndarray:
    """Round float32 ``x`` to FP16 (to nearest even, subnormals kept), returned as float32."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def split(x: np.ndarray, fmt: str, scale_exp: int = 0, lo_shift: int = LO_SHIFT) -> tuple[np.ndarray, np.ndarray]:
    """hi and lo parts of float32 ``x`` (float32 arrays holding TF32 or FP16 values).

    Args:
        x: float32 array (not modified).
        fmt: ``"tf32"`` or ``"fp16"``.
        scale_exp: ``x`` is multiplied by ``2^scale_exp`` first (FP16 scaling; 0 for TF32).
        lo_shift: lo holds ``(x - hi) * 2^lo_shift`` (11 for the error-corrected methods, 0 for
            Markidis).
    """
    rnd = tf32_rna if fmt == "tf32" else round_fp16
    xs = flush_subnormals(np.asarray(x, np.float32))
    if scale_exp:
        xs = mul_pow2(xs, scale_exp)
    hi = rnd(xs)
    with np.errstate(invalid="ignore", over="ignore"):
        res = np.where(np.isfinite(hi), (xs - hi) * np.float32(2.0**lo_shift), np.float32(0))
    return hi, rnd(res.astype(np.float32))


def flush_subnormals(x: np.ndarray) -> np.ndarray:
    """FP32 subnormals replaced by signed zeros: the split kernel, compiled by NVRTC, flushes them
    on input (FTZ), so the CPU path does too (a copy; ``x`` is not modified)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return np.where((u & np.uint32(0x7F800000)) == 0, u & np.uint32(0x80000000), u).astype(np.uint32).view(np.float32)


def mul_pow2(x: np.ndarray, e: int) -> np.ndarray:
    """``x * 2^e`` in float32, as the GPU does it (one multiply by a float32 power of two)."""
    with np.errstate(over="ignore", under="ignore"):
        return (x * np.float32(2.0**e)).astype(np.float32)


# ------------------------------------------------------------------ FP16 range planning


def exponent_range(x: np.ndarray) -> tuple[int, int, int, int]:
    """``(emax, emin, nonfinite, nonzero)`` of float32 data: biased exponents of the finite nonzero
    elements (FP32 subnormals count as 0), as the GPU kernel ``tcec_range`` computes them."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).ravel() & np.uint32(0x7FFFFFFF)
    e = u >> np.uint32(23)
    bad = int(np.count_nonzero(e == 255))
    ok = (u != 0) & (e != 255)
    nz = int(np.count_nonzero(ok))
    if nz == 0:
        return 0, 0xFFFFFFFF, bad, 0
    return int(e[ok].max()), int(e[ok].min()), bad, nz


def plan_fp16(emax: int, emin: int, nonzero: int) -> tuple[int, bool]:
    """``(scale_exp, fits)`` for one operand from its exponent range (see :func:`exponent_range`).

    The scaling puts the largest magnitude in [2^14, 2^15) (no overflow, even after rounding);
    the operand fits when its smallest nonzero magnitude then stays at or above 2^-14, FP16's
    smallest normal number, so that hi and lo keep their 11 bits (relative split error <= 2^-22).
    """
    if nonzero == 0:
        return 0, True
    top = emax - 127  # |x| < 2^(top + 1)
    e = max(-126, min(126, FP16_TOP - top))
    low = (emin - 127) if emin > 0 else -149
    fits = top + 1 + e <= FP16_TOP + 1 and low + e >= FP16_MIN_EXP
    return e, fits


# The largest magnitude of an operand below which TF32 splits no longer keep FP32 accuracy
# relative to it: the lo part of an element is 2^-11 of it, and one whose lo part falls below FP32's
# normal range (2^-126) loses it on the tensor core; with the operand's top at 2^-90 or above such
# elements are below 2^-115, under 2^-25 of the top, so the normwise error stays below FP32's.
TF32_MIN_TOP = -90


def tf32_fits(range_a, range_b, k: int) -> bool:
    """Whether error-corrected TF32 keeps FP32 accuracy (normwise) on these operands.

    Args:
        range_a, range_b: the operands' ``(emax, emin, nonfinite, nonzero)`` (:func:`exponent_range`).
        k: the inner dimension of the real product (twice the complex one).

    Returns:
        False when an operand's largest magnitude is below 2^TF32_MIN_TOP, or when the products'
        sums could overflow FP32 (2^(top_a + top_b + 1) k); True otherwise, and for a zero operand
        or non-finite data (NaN and Inf propagate as in IEEE arithmetic, as with native products).
    """
    if int(range_a[3]) == 0 or int(range_b[3]) == 0 or int(range_a[2]) or int(range_b[2]):
        return True
    top_a, top_b = int(range_a[0]) - 127, int(range_b[0]) - 127
    if min(top_a, top_b) < TF32_MIN_TOP:
        return False
    return top_a + top_b + 2 + math.ceil(math.log2(max(k, 1))) <= 127


def count_below(x: np.ndarray, scale_exp: int) -> int:
    """Number of nonzero elements (real and imaginary parts counted apart) below FP16's normal range
    once scaled by ``2^scale_exp`` (numpy; ``gemm.tcec.gpu.count_below`` on the GPU)."""
    thr = 2.0 ** (FP16_MIN_EXP - scale_exp)
    total = 0
    for p in ((x.real, x.imag) if x.dtype.kind == "c" else (x,)):
        ap = np.abs(p)
        total += int(np.count_nonzero((ap < thr) & (ap != 0)))
    return total


# ------------------------------------------------------------------ real form (CPU)


def real_form(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float32 operands of the real product: (…, m, k') and (…, k', n'). Complex: k' = 2k, n' = 2n."""
    if a.dtype.kind != "c":
        return np.asarray(a, np.float32), np.asarray(b, np.float32)
    ar = np.stack([a.real, a.imag], axis=-1).astype(np.float32)
    ar = ar.reshape(*a.shape[:-1], 2 * a.shape[-1])
    br, bi = b.real.astype(np.float32), b.imag.astype(np.float32)
    w = np.empty((*b.shape[:-2], b.shape[-2], 2, b.shape[-1], 2), np.float32)
    w[..., :, 0, :, 0] = br
    w[..., :, 0, :, 1] = bi
    w[..., :, 1, :, 0] = -bi
    w[..., :, 1, :, 1] = br
    return ar, w.reshape(*b.shape[:-2], 2 * b.shape[-2], 2 * b.shape[-1])


def from_real_form(c: np.ndarray, complex_: bool) -> np.ndarray:
    """Undo :func:`real_form` on the product (interleaved re/im back to complex64)."""
    if not complex_:
        return c
    return np.ascontiguousarray(c).view(np.complex64)


def pow2(e: int) -> float:
    """``2^e`` as a Python float."""
    return math.ldexp(1.0, e)
