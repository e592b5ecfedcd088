"""Numerics of the error-corrected TF32/FP16 methods, in numpy (no cupy here).

* :func:`split`: the hi/lo split, bit for bit what the GPU kernel ``tcec_split`` writes.
  TF32: ``hi = RNA_tf32(x)``, ``lo = RNA_tf32((x - hi) * 2^11)``. FP16: ``x`` is first scaled by a
  power of two ``2^e`` (into a copy), then ``hi = RN_fp16(x)``, ``lo = RN_fp16((x - hi) * 2^11)``.
  ``x - hi`` is exact in FP32 in both cases, and ``lo = 0`` where ``hi`` is not finite.
* :func:`plan_fp16`: the power-of-two scaling of one operand from its exponent range, and whether
  every element then fits FP16 (normal range, so that ``hi`` and ``lo`` keep 11 bits each).
* :func:`emulate`: the CPU path. Products of the split parts in float64 by k-blocks of the
  tensor-core instruction (8 TF32 or 16 FP16 values of the real inner dimension), each block
  exact and rounded toward zero to FP32 (the tensor core's rounding, see ``qsim-tc probe``),
  then accumulated as the scheme says:

  - ``ec`` (error-corrected): hi*hi summed on the tensor core over a k-block of ``kblock``
    instructions (default 1: 8 TF32 / 16 FP16 values), starting from zero; each k-block
    result, truncated by the tensor core, is added to an FP32 accumulator with
    round-to-nearest, and (``midpoint``) half its ulp, ``sign(x) ulp(x)/2``, goes to the
    correction accumulator, which moves the k-block to the middle of its truncation interval
    (error at most half an ulp, no bias toward zero) without rounding the half ulp away.
    Results whose three lowest bits are zero are taken as exact and left alone (an exact
    product of two 11-bit significands always is; a truncated result is with probability 1/8,
    leaving a bias of 1/16 ulp). On a brickwork circuit this brings the norm drift from
    ~1e-6 to ~1e-8 (native CGEMM: ~1e-9); lo*hi and hi*lo
    accumulated with round-toward-zero in a second FP32 accumulator (as the tensor core
    does), added at the end times 2^-11; lo*lo dropped. Without the midpoint step every
    k-block loses on average half an ulp toward zero, a bias that a circuit of many gates
    turns into a steady loss of norm.
  - ``plain``: hi*hi only, accumulated with round-toward-zero (the tensor core's accumulator).
  - ``markidis``: hi*hi, lo*hi, hi*lo and lo*lo (lo unscaled) all accumulated with
    round-toward-zero in one accumulator.

  The tensor core truncates the aligned products inside one instruction as well; the
  emulation treats a block sum as exact before its single rounding, which is the only place it
  may differ from the GPU in the last bit.

Complex operands use the real form ``[Ar Ai] @ [[Br Bi], [-Bi Br]]``: ``A`` interleaved as it
lies in memory (k' = 2k), ``B`` expanded to 2x2 blocks, the product interleaved again, the same
inner order as the GPU kernel.
"""

from __future__ import annotations

import math

import numpy as np

FORMATS = ("tf32", "fp16")
SCHEMES = ("ec", "plain", "markidis")
BLOCK_K = {"tf32": 8, "fp16": 16}  # real inner values per mma instruction
HI_KSTEPS = 1  # default k-block of hi*hi, in mma instructions (8 TF32 / 16 FP16 values)
SKIP_MASK = 7  # k-block results whose 3 lowest bits are zero are taken as exact (no midpoint)
MIDPOINT = True  # default: move truncated k-block results to the middle of their interval
LO_SHIFT = 11  # lo is scaled by 2^11
FP16_TOP = 14  # FP16 scaling puts the largest magnitude in [2^14, 2^15)
FP16_MIN_EXP = -14  # smallest normal FP16 exponent
_CHUNK_BYTES = 64 << 20


def tf32_rna(x: np.ndarray) -> np.ndarray:
    """Round float32 ``x`` to TF32 (10 fraction bits), to nearest with ties away from zero.

    Same result as ``cvt.rna.tf32.f32``: overflow goes to Inf, NaN and Inf are kept.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    r = np.where(finite, (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000), u)
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
    xs = np.asarray(x, np.float32)
    if scale_exp:
        xs = _mul_pow2(xs, scale_exp)
    hi = rnd(xs)
    with np.errstate(invalid="ignore", over="ignore"):
        res = np.where(np.isfinite(hi), (xs - hi) * np.float32(2.0**lo_shift), np.float32(0))
    return hi, rnd(res.astype(np.float32))


def _mul_pow2(x: np.ndarray, e: int) -> np.ndarray:
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


def count_below(x, scale_exp: int, xp=np) -> int:
    """Number of nonzero elements (real and imaginary parts counted apart) below FP16's normal range
    once scaled by ``2^scale_exp``."""
    thr = 2.0 ** (FP16_MIN_EXP - scale_exp)
    parts = (x.real, x.imag) if x.dtype.kind == "c" else (x,)
    total = 0
    for p in parts:
        ap = xp.abs(p)
        total += int(xp.count_nonzero((ap < thr) & (ap != 0)))
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


# ------------------------------------------------------------------ emulated product (CPU)


def _rz(s: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded toward zero."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = s.astype(np.float32)
        fix = np.abs(r.astype(np.float64)) > np.abs(s)
    if fix.any():
        r[fix] = np.nextafter(r[fix], np.float32(0))
    return r


def _half_ulp(x: np.ndarray) -> np.ndarray:
    """``sign(x) * 2^(e-24)`` as float64 (x = m 2^e): half an ulp of float32 ``x``, away from zero."""
    bits = x.view(np.uint32)
    h = (bits & np.uint32(0xFF800000)).view(np.float32).astype(np.float64) * 2.0**-24
    if SKIP_MASK:
        h = np.where((bits & np.uint32(SKIP_MASK)) == 0, 0.0, h)
    return h


def _blocks(x: np.ndarray, y: np.ndarray, kb: int) -> np.ndarray:
    """Exact-ish block products: (nblk, batch, m, n) float64 of 3-D x (bx, m, K), y (by, K, n)."""
    k = x.shape[-1]
    nblk = -(-k // kb)
    pad = nblk * kb - k
    if pad:
        x = np.concatenate([x, np.zeros((*x.shape[:-1], pad), x.dtype)], axis=-1)
        y = np.concatenate([y, np.zeros((y.shape[0], pad, y.shape[-1]), y.dtype)], axis=-2)
    xb = x.reshape(x.shape[0], x.shape[1], nblk, kb).transpose(2, 0, 1, 3).astype(np.float64)
    yb = y.reshape(y.shape[0], nblk, kb, y.shape[-1]).transpose(1, 0, 2, 3).astype(np.float64)
    return np.matmul(xb, yb)


def _accumulate(scheme: str, fmt: str, ah, al, bh, bl, kblock: int, midpoint: bool) -> np.ndarray:
    kb = BLOCK_K[fmt]
    with np.errstate(invalid="ignore", over="ignore"):
        hh = _blocks(ah, bh, kb)
        acc = np.zeros(hh.shape[1:], np.float32)
        if scheme == "plain":
            for p in hh:
                acc = _rz(acc.astype(np.float64) + p)
            return acc
        lh = _blocks(al, bh, kb)
        hl = _blocks(ah, bl, kb)
        if scheme == "markidis":
            ll = _blocks(al, bl, kb)
            for i in range(hh.shape[0]):
                for p in (hh[i], lh[i], hl[i], ll[i]):
                    acc = _rz(acc.astype(np.float64) + p)
            return acc
        cor = np.zeros_like(acc)
        blk = np.zeros_like(acc)
        last = hh.shape[0] - 1
        for i in range(hh.shape[0]):
            blk = _rz(blk.astype(np.float64) + hh[i])
            cor = _rz(cor.astype(np.float64) + lh[i])
            cor = _rz(cor.astype(np.float64) + hl[i])
            if (i + 1) % kblock == 0 or i == last:
                acc = acc + blk  # float32 + float32: round to nearest
                if midpoint:  # the half ulp, scaled by 2^11, into the correction accumulator (FMA, RN)
                    cor = (cor.astype(np.float64) + _half_ulp(blk) * 2.0**LO_SHIFT).astype(np.float32)
                blk = np.zeros_like(acc)
        fixed = (acc.astype(np.float64) + cor.astype(np.float64) * 2.0**-LO_SHIFT).astype(np.float32)
        return np.where(np.isfinite(acc), fixed, acc)


def emulate(a: np.ndarray, b: np.ndarray, fmt: str, scheme: str, scale_a: int = 0, scale_b: int = 0,
            kblock: int = HI_KSTEPS, midpoint: bool = MIDPOINT) -> np.ndarray:
    """The product ``a @ b`` (numpy float32/complex64, 2-D or 3-D) as the GPU kernel computes it.

    Args:
        a, b: operands (not modified).
        fmt: ``"tf32"`` or ``"fp16"``; scheme: ``"ec"``, ``"plain"`` or ``"markidis"``.
        scale_a, scale_b: FP16 power-of-two scalings (exponents); the result is scaled back.
        kblock, midpoint: ``ec`` only: instructions per hi*hi k-block, and whether each truncated
            k-block result is moved to the middle of its truncation interval.
    """
    complex_ = a.dtype.kind == "c"
    ar, br = real_form(a, b)
    shift = 0 if scheme == "markidis" else LO_SHIFT
    ah, al = split(ar, fmt, scale_a, shift)
    bh, bl = split(br, fmt, scale_b, shift)
    out_batch = None if (a.ndim == 2 and b.ndim == 2) else max(a.shape[0] if a.ndim == 3 else 1,
                                                               b.shape[0] if b.ndim == 3 else 1)
    ah, al = (x if x.ndim == 3 else x[None] for x in (ah, al))
    bh, bl = (x if x.ndim == 3 else x[None] for x in (bh, bl))
    m, n = ah.shape[1], bh.shape[2]
    batch = max(ah.shape[0], bh.shape[0])
    out = np.empty((batch, m, n), np.float32)
    nblk = -(-ah.shape[2] // BLOCK_K[fmt])
    # chunk rows and columns so that the block products stay under _CHUNK_BYTES
    per = 8 * 4 * nblk * max(ah.shape[0], bh.shape[0])
    rows = max(1, min(m, _CHUNK_BYTES // max(per * min(n, 4096), 1)))
    cols = max(1, min(n, _CHUNK_BYTES // max(per * rows, 1)))
    for i in range(0, m, rows):
        for j in range(0, n, cols):
            out[:, i:i + rows, j:j + cols] = _accumulate(
                scheme, fmt, ah[:, i:i + rows], al[:, i:i + rows], bh[:, :, j:j + cols], bl[:, :, j:j + cols],
                kblock, midpoint)
    if scale_a or scale_b:
        out = _mul_pow2(_mul_pow2(out, -scale_a), -scale_b)
    if out_batch is None:
        out = out[0]
    return from_real_form(out, complex_)


def pow2(e: int) -> float:
    """``2^e`` as a Python float."""
    return math.ldexp(1.0, e)
