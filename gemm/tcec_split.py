"""Numerics of the error-corrected TF32/FP16 methods, in numpy (no cupy here).

* :func:`split`: the hi/lo split, bit for bit what the GPU kernel ``tcec_split`` writes.
  TF32: ``hi = RNA_tf32(x)``, ``lo = RNA_tf32((x - hi) * 2^11)``. FP16: ``x`` is first scaled by a
  power of two ``2^e`` (into a copy), then ``hi = RN_fp16(x)``, ``lo = RN_fp16((x - hi) * 2^11)``.
  ``x - hi`` is exact in FP32 in both cases, and ``lo = 0`` where ``hi`` is not finite. FP32
  subnormal inputs (below 2^-126) are flushed to zero, as the GPU kernel does.
* :func:`plan_fp16`: the power-of-two scaling of one operand from its exponent range, and whether
  every element then fits FP16 (normal range, so that ``hi`` and ``lo`` keep 11 bits each).
* :func:`emulate`: the CPU path. Products of the split parts in float64 by k-blocks of the
  tensor-core instruction (8 TF32 or 16 FP16 values of the real inner dimension), each block
  exact and rounded toward zero to FP32 (the tensor core's rounding, see ``qsim-tc probe``),
  then accumulated as the scheme says:

  - ``ec`` (error-corrected): each instruction's hi*hi product computed from zero (truncated
    by the tensor core); two of them added together and then to an FP32 accumulator with
    round-to-nearest (pairing halves the number of additions into the accumulator;
    :data:`HH_CHAIN` = 2 sums the pair inside the tensor core instead); with ``debias``, the
    expected truncation loss goes to the correction accumulator, scaled by 2^11 there, so that it
    is not rounded away: by default per result, ``sign(x) F ulp(x)`` for the results that are not
    exact (:data:`DEBIAS_MODE` "product", :data:`PRODUCT_DEBIAS_FRACTION`), or once at the end as
    ``debias_beta() * acc`` ("epilogue", the 3/8-ulp model of :data:`DEBIAS_FRACTION`). Without
    that step every product loses on average 3/8 of an
    ulp toward zero, a bias that a circuit of many gates turns into a steady loss of norm
    (measured on brickwork circuits: norm drift ~1e-7..1e-6 without, ~1e-9 with, as native
    CGEMM). lo*hi and hi*lo are accumulated on the tensor core in a second FP32 accumulator,
    added at the end times 2^-11; lo*lo is dropped.
  - ``plain``: hi*hi only, accumulated with round-toward-zero (the tensor core's accumulator).
  - ``markidis``: hi*hi, lo*hi, hi*lo and lo*lo (lo unscaled) all accumulated with
    round-toward-zero in one accumulator.

  Each instruction is emulated as the probes measure the tensor core (:func:`tc_mma`): exact
  products, aligned to the largest term and cut toward zero two bits below its last bit, summed,
  truncated to FP32. The GPU and the emulation then agree to a few ulps.

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
DEBIAS = True  # default: add back the expected truncation loss of each k-block result
LO_SHIFT = 11  # lo is scaled by 2^11
FP16_TOP = 14  # FP16 scaling puts the largest magnitude in [2^14, 2^15)
FP16_MIN_EXP = -14  # smallest normal FP16 exponent
_CHUNK_BYTES = 64 << 20


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
        xs = _mul_pow2(xs, scale_exp)
    hi = rnd(xs)
    with np.errstate(invalid="ignore", over="ignore"):
        res = np.where(np.isfinite(hi), (xs - hi) * np.float32(2.0**lo_shift), np.float32(0))
    return hi, rnd(res.astype(np.float32))


def flush_subnormals(x: np.ndarray) -> np.ndarray:
    """FP32 subnormals replaced by signed zeros: the split kernel, compiled by NVRTC, flushes them
    on input (FTZ), so the CPU path does too (a copy; ``x`` is not modified)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return np.where((u & np.uint32(0x7F800000)) == 0, u & np.uint32(0x80000000), u).astype(np.uint32).view(np.float32)


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


def count_below(x: np.ndarray, scale_exp: int) -> int:
    """Number of nonzero elements (real and imaginary parts counted apart) below FP16's normal range
    once scaled by ``2^scale_exp`` (numpy; ``gemm.tcec_gpu.count_below`` on the GPU)."""
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


# ------------------------------------------------------------------ emulated product (CPU)


def _rz(s: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded toward zero."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = s.astype(np.float32)
        fix = np.abs(r.astype(np.float64)) > np.abs(s)
    if fix.any():
        r[fix] = np.nextafter(r[fix], np.float32(0))
    return r


def _expected_loss(x: np.ndarray, scale: np.float32) -> np.ndarray:
    """The per-product debias of a tensor-core result ``x`` as float64, in the correction's units
    (2^11): ``sign(x) 2^e(x) * scale`` where the lowest two of its 24 significand bits are not both
    zero, else 0 (see :data:`PRODUCT_DEBIAS_FRACTION`); ``scale`` is float32, as the kernel's FMA
    takes it."""
    bits = x.view(np.uint32)
    inexact = (bits & np.uint32(3)) != 0
    lead = (bits & np.uint32(0xFF800000)).view(np.float32).astype(np.float64)
    return np.where(inexact, lead * float(scale), 0.0)


TC_EXTRA_BITS = 2  # bits kept below the largest term's last bit (``qsim-tc probe`` on an H200)
# The cut terms are multiples of q = ulp / 2^TC_EXTRA_BITS; truncating their sum to FP32 loses
# 0, q, 2q or 3q with equal chance when the sum stays in the largest term's binade: on average
# (1 - 2^-b) / 2 = 3/8 ulp. Adding that back removes the bias toward zero.
DEBIAS_FRACTION = (1.0 - 2.0**-TC_EXTRA_BITS) / 2.0


HH_CHAIN = 1  # hi*hi k-steps summed inside the tensor core before the RN addition (1: each from zero)
# How the mma.sync fused product (and its emulation here) adds the loss back: "product", each hi*hi
# result's own, per k-step (PRODUCT_DEBIAS_FRACTION), or "epilogue", beta * sum. The wgmma fused
# product and the hybrid always use the epilogue (hybrid_debias_beta).
DEBIAS_MODE = "product"

# The per-product debias: an instruction that summed one nonzero product returns it exactly (two
# 11-bit significands make at most 22 bits, so the lowest two bits of the FP32 result are zero); one
# that summed more lost, on average, a fraction of its result's ulp that grows with the number of
# products t it summed. Results whose lowest two bits are zero get nothing (a quarter of the inexact
# ones are among them, which the fraction allows for); the others get sign(x) F ulp(x), F by
# t = min(k, BLOCK_K[fmt]) as if the operands were dense. Calibrated on this emulation
# (benchmarks/calibrate_debias.py --gates; debias_gates_cpu.json, entry "product"): Haar gates of
# d = 1..5 on dense states then change the norm by at most about two standard errors (a few 1e-10
# per gate), where the plain 3/8-ulp epilogue left TF32 gates losing 3e-9 and FP16 gates 9e-9 of
# norm^2 each and over-corrected a circuit's first layer (one nonzero product per instruction,
# exact). Instructions of 2 to t - 1 nonzero products (the first layer's complex amplitudes: two
# real products) are still over-corrected.
PRODUCT_DEBIAS_FRACTION = {1: 0.0, 2: 0.26, 4: 0.375, 8: 0.524, 16: 0.572}
# Products up to this real inner dimension (gates of up to 5 complex qubits) take the per-product
# debias; longer ones keep the epilogue's model, as the hybrid and wgmma products beside them, whose
# constants were fitted on whole circuits in which such products took the model
# (hybrid_debias_beta).
PRODUCT_DEBIAS_MAX_K = 64


def debias_mode(k: int) -> str:
    """How the mma.sync fused product (and its emulation) debiases a product of real inner
    dimension ``k``: "product" or "epilogue" (see DEBIAS_MODE, PRODUCT_DEBIAS_MAX_K)."""
    per_product = DEBIAS_MODE == "product" and HH_CHAIN == 1 and int(k) <= PRODUCT_DEBIAS_MAX_K
    return "product" if per_product else "epilogue"  # a chain of two has no per-product form


# The H200's tensor cores lose more than this module's model of them (tc_mma) on the same products:
# with the fractions above, which leave the emulation unbiased, Haar gates of d = 2..5 on dense states
# lost 1.9-3.6e-9 (TF32) and 2.4-3.3e-9 (FP16) of norm^2 each on the GPU, d = 1 2.6-6.2e-9
# (benchmarks/results/debias_gates_gpu_h200.json, run "product"; the 3/8-ulp epilogue lost 5-7e-9
# and 5-13e-9 there from d = 2 on). The GPU kernel adds this much to F (about 2.7e-9 / 1.26e-7 per
# unit of F, the emulation's slope). Measured on an H200; other GPUs take it unmeasured.
HARDWARE_EXTRA_FRACTION = {"tf32": 0.022, "fp16": 0.022}


def product_debias_fraction(fmt: str, k: int, hardware: bool = False) -> float:
    """F of the per-product debias for a real inner dimension ``k`` (see PRODUCT_DEBIAS_FRACTION; a
    k between two table sizes takes the smaller); ``hardware``: for the GPU kernel, plus
    HARDWARE_EXTRA_FRACTION."""
    t = min(max(int(k), 1), BLOCK_K[fmt])
    f = PRODUCT_DEBIAS_FRACTION[max(size for size in PRODUCT_DEBIAS_FRACTION if size <= t)]
    return f + (HARDWARE_EXTRA_FRACTION[fmt] if hardware else 0.0)


def product_debias_scale(fmt: str, k: int, hardware: bool = False) -> np.float32:
    """The kernel's per-product scale, F 2^-23 in the correction's units (2^11), as float32."""
    return np.float32(product_debias_fraction(fmt, k, hardware) * 2.0**(LO_SHIFT - 23))
CHAIN_LOSS = {1: 1.0, 2: 1.4}  # expected loss of a chain's results, relative to one result of its sum
MEAN_INV_MANTISSA = 1.0 / (2.0 * math.log(2.0))  # E[2^e / |x|] for log-uniform (Benford) significands


def debias_beta(chain: int | None = None) -> float:
    """Relative expected truncation loss of the hi*hi sum, added back in the epilogue as ``beta * acc``.

    A tensor-core result ``x`` loses ``sign(x) 3/8 ulp(x) = 3/8 2^-23 x 2^e/|x|`` on average; with
    significands spread as in generic data, ``E[2^e/|x|] = 1/(2 ln 2)``, so the loss of a sum of
    results is ``3/8 2^-23 / (2 ln 2)`` times the sum. In a chain of two instructions the first
    result (on average half of the pair's sum) is truncated twice: up to 1.5 times that; measured
    1.38 on a brickwork circuit, 1.52 on Gaussian data; 1.4 is used (:data:`CHAIN_LOSS`).
    """
    chain = HH_CHAIN if chain is None else chain
    return DEBIAS_FRACTION * MEAN_INV_MANTISSA * 2.0**-23 * CHAIN_LOSS[chain]


# The hi*hi products of the wgmma kernel, each added to the accumulator on its own (the hybrid
# product, corrections by cuBLAS; the fused wgmma product, corrections in the kernel) lose more on
# whole circuits than debias_beta() puts back, growing with k. Before this calibration both drifted
# alike on the same circuits: TF32 -2.5e-8 / -2.6e-8, FP16 -7.8e-8 / -8.1e-8 per circuit. Fitted to the mean norm drift of 20-qubit complex64
# brickworks on an H200 whose gates take the hybrid (d = 6, 8: k = 128, 512 real; three seed sets
# of 4-6; the 20-qubit engine test's circuits; benchmarks/results/tcec_circuits20_accuracy_h200.json):
# beyond the model's 3.2e-8, FP16 lost 3.6-3.9e-9 per gate at both sizes (its instructions sum
# 16 products; the CPU model of the tensor core gives 1.14x the model, benchmarks/
# calibrate_debias.py); TF32 lost nothing significant at k = 128 (circuit-to-circuit scatter
# +-1.5e-9 per gate) and about 1.1e-9 at k = 512. The mma.sync fused kernel (the CPU emulation's
# model, pairs of k-steps added together first) keeps debias_beta() where k > PRODUCT_DEBIAS_MAX_K.
HYBRID_K0 = 128
HYBRID_EXTRA_LOSS = {"tf32": 0.0, "fp16": 3.6e-9}  # at k = HYBRID_K0 (held below it: not measured)
HYBRID_EXTRA_LOSS_PER_DOUBLING = {"tf32": 5.5e-10, "fp16": 1.5e-10}


def hybrid_debias_beta(fmt: str, k: int, chain: int = 1) -> float:
    """``beta`` of the hybrid and the fused wgmma products for a real inner dimension ``k`` (see
    HYBRID_EXTRA_LOSS)."""
    doublings = max(0.0, math.log2(max(int(k), 1) / HYBRID_K0))
    return debias_beta(chain) + HYBRID_EXTRA_LOSS[fmt] + HYBRID_EXTRA_LOSS_PER_DOUBLING[fmt] * doublings


def tc_mma(c: np.ndarray, p: np.ndarray) -> np.ndarray:
    """One tensor-core instruction ``c + sum_j p_j`` as the probes measure it (Fasi et al.).

    Args:
        c: float32 accumulator input, shape (...).
        p: exact products, float64, shape (..., kb).

    Every term is aligned to the largest one and cut toward zero ``TC_EXTRA_BITS`` bits below
    its last significand bit; the cut terms are added exactly and the sum is truncated (RZ) to
    FP32. Intermediate sums are not renormalised, so ``1 - 1 + tiny`` gives 0.
    """
    terms = np.concatenate([p, c.astype(np.float64)[..., None]], axis=-1)
    _, e = np.frexp(np.where(np.isfinite(terms), terms, 0.0))
    lead = np.where(terms != 0, e - 1, -100000).max(axis=-1, keepdims=True)
    q = np.ldexp(1.0, np.maximum(lead - 23 - TC_EXTRA_BITS, -1074))
    with np.errstate(invalid="ignore", over="ignore"):
        cut = np.where(np.isfinite(terms), np.trunc(terms / q) * q, terms)
        return _rz(cut.sum(axis=-1))


def _products(x: np.ndarray, y: np.ndarray, k0: int, kb: int) -> np.ndarray:
    """Exact products of one k-block: (batch, m, n, kb) float64 from x (bx, m, K), y (by, K, n)."""
    xs = x[:, :, k0:k0 + kb].astype(np.float64)
    ys = y[:, k0:k0 + kb, :].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return xs[:, :, None, :] * np.swapaxes(ys, 1, 2)[:, None, :, :]


def _accumulate(scheme: str, fmt: str, ah, al, bh, bl, debias: bool) -> np.ndarray:
    kb = BLOCK_K[fmt]
    k = ah.shape[-1]
    nblk = -(-k // kb)
    shape = (max(ah.shape[0], bh.shape[0]), ah.shape[1], bh.shape[2])
    acc = np.zeros(shape, np.float32)
    if scheme == "plain":
        for i in range(nblk):
            acc = tc_mma(acc, _products(ah, bh, i * kb, kb))
        return acc
    if scheme == "markidis":
        for i in range(nblk):
            for x, y in ((ah, bh), (al, bh), (ah, bl), (al, bl)):
                acc = tc_mma(acc, _products(x, y, i * kb, kb))
        return acc
    cor = np.zeros(shape, np.float32)
    zero = np.zeros(shape, np.float32)
    per_product = debias and debias_mode(k) == "product"
    scale = product_debias_scale(fmt, k)
    for i in range(0, nblk, 2):  # the two instructions of a kernel stage
        if HH_CHAIN == 2:  # summed inside the tensor core (the first from zero), then added with RN
            p = tc_mma(zero, _products(ah, bh, i * kb, kb))
            if i + 1 < nblk:
                p = tc_mma(p, _products(ah, bh, (i + 1) * kb, kb))
            with np.errstate(invalid="ignore", over="ignore"):
                acc = acc + p
        else:  # each from zero, added together and then to the accumulator with RN
            ps = [tc_mma(zero, _products(ah, bh, j * kb, kb)) if j < nblk else zero for j in (i, i + 1)]
            with np.errstate(invalid="ignore", over="ignore"):
                acc = acc + (ps[0] + ps[1])  # float32 additions: round to nearest
                if per_product:  # the expected losses, scaled by 2^11, into the correction accumulator (FMA, RN)
                    for p in ps:
                        cor = (cor.astype(np.float64) + _expected_loss(p, scale)).astype(np.float32)
        for j in (i, i + 1):
            if j < nblk:
                cor = tc_mma(cor, _products(al, bh, j * kb, kb))
                cor = tc_mma(cor, _products(ah, bl, j * kb, kb))
    with np.errstate(invalid="ignore", over="ignore"):
        acc64 = acc.astype(np.float64)
        if debias and not per_product:  # into the correction, 2^11 larger there: fma(acc, beta 2^11, cor)
            cor = (acc64 * float(np.float32(debias_beta() * 2.0**LO_SHIFT)) + cor.astype(np.float64)).astype(np.float32)
        fixed = (acc64 + cor.astype(np.float64) * 2.0**-LO_SHIFT).astype(np.float32)
    return np.where(np.isfinite(acc), fixed, acc)


def emulate(a: np.ndarray, b: np.ndarray, fmt: str, scheme: str, scale_a: int = 0, scale_b: int = 0,
            debias: bool = DEBIAS) -> np.ndarray:
    """The product ``a @ b`` (numpy float32/complex64, 2-D or 3-D) as the GPU kernel computes it.

    Args:
        a, b: operands (not modified).
        fmt: ``"tf32"`` or ``"fp16"``; scheme: ``"ec"``, ``"plain"`` or ``"markidis"``.
        scale_a, scale_b: FP16 power-of-two scalings (exponents); the result is scaled back.
        debias: ``ec`` only: add back the expected truncation loss of each hi*hi result.
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
    # chunk rows and columns so that one block's products stay under _CHUNK_BYTES
    per = 8 * BLOCK_K[fmt] * batch
    rows = max(1, min(m, _CHUNK_BYTES // max(per * min(n, 4096), 1)))
    cols = max(1, min(n, _CHUNK_BYTES // max(per * rows, 1)))
    for i in range(0, m, rows):
        for j in range(0, n, cols):
            out[:, i:i + rows, j:j + cols] = _accumulate(
                scheme, fmt, ah[:, i:i + rows], al[:, i:i + rows], bh[:, :, j:j + cols], bl[:, :, j:j + cols],
                debias)
    if scale_a or scale_b:
        out = _mul_pow2(_mul_pow2(out, -scale_a), -scale_b)
    if out_batch is None:
        out = out[0]
    return from_real_form(out, complex_)


def pow2(e: int) -> float:
    """``2^e`` as a Python float."""
    return math.ldexp(1.0, e)
