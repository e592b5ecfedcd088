"""The CPU path of the error-corrected TF32/FP16 methods: the products of the split parts emulated
as the mma.sync fused GPU kernel computes them, in numpy.

Products of the split parts in float64 by k-blocks of the tensor-core instruction (8 TF32 or 16
FP16 values of the real inner dimension), each block exact and rounded toward zero to FP32 (the
tensor core's rounding, see ``qsim-tc probe``), then accumulated as the scheme says:

- ``ec`` (error-corrected): each instruction's hi*hi product computed from zero (truncated by the
  tensor core); two of them added together and then to an FP32 accumulator with round-to-nearest
  (pairing halves the number of additions into the accumulator; :data:`gemm.tcec.debias.HH_CHAIN`
  = 2 sums the pair inside the tensor core instead); with ``debias``, the expected truncation loss
  is added back (:mod:`gemm.tcec.debias`). lo*hi and hi*lo are accumulated on the tensor core in
  a second FP32 accumulator, added at the end times 2^-11; lo*lo is dropped.
- ``plain``: hi*hi only, accumulated with round-toward-zero (the tensor core's accumulator).
- ``markidis``: hi*hi, lo*hi, hi*lo and lo*lo (lo unscaled) all accumulated with
  round-toward-zero in one accumulator.

Each instruction is emulated as the probes measure the tensor core (:func:`tc_mma`): exact
products, aligned to the largest exponent sum (or the accumulator's exponent) and cut toward zero
two bits below its last bit, summed, truncated to FP32: bit for bit what an H100's instructions
give. The kernels and the emulation take the same debias constants (:mod:`gemm.tcec.debias`).
"""

from __future__ import annotations

import numpy as np

from gemm.tcec import debias as db
from gemm.tcec.split import LO_SHIFT, from_real_form, mul_pow2, real_form, split

CHUNK_BYTES = 64 << 20  # one block's float64 products stay under this


def _rz(s: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded toward zero."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.array(s, dtype=np.float32)  # an array also for one value (0-d)
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


def tc_mma(c: np.ndarray, a: np.ndarray, b: np.ndarray, extra_bits: int | None = None,
           group: int | None = None) -> np.ndarray:
    """One tensor-core instruction ``c + sum_j a_j b_j`` as the probes measure it (after Fasi et al.).

    Args:
        c: float32 accumulator input, shape (...).
        a, b: the operands (FP16 or TF32 values, as float32 or float64), broadcasting to
            (..., kb): the k-block's products are ``a * b`` along the last axis, exact in float64.
        extra_bits: bits kept below the alignment's last significand bit (default
            ``TC_EXTRA_BITS``; other values let ``qsim-tc probe`` find the one that reproduces a
            GPU).
        group: products summed per step (default all of them): a step of ``group`` products is
            added to the last step's truncated result as described below, so an instruction
            that sums its k products in blocks (two of 8 for k = 16, say) can be modelled.

    The alignment exponent is the largest of the products' exponent sums (``e(a_j) + e(b_j)``,
    whatever the product of the significands, which may be 2 or more) and of c's exponent; every
    term is cut toward zero ``extra_bits`` bits below the 24th significand bit of that exponent, the
    cut terms are added exactly and the sum is truncated (RZ) to FP32. Intermediate sums are not
    renormalised, so ``1 - 1 + tiny`` gives 0. Taking the products' exponents from their values
    instead (one more where the significands' product is 2 or more) reproduced an H100's
    ``mma.sync`` in 92% (TF32, m16n8k8) and 89% (FP16, m16n8k16) of 8,192 random instructions;
    the exponent sums, in all of them (``qsim-tc probe --cases``; docs/results.md).
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    k = np.broadcast_shapes(a.shape, b.shape)[-1]
    if group is not None and group < k:
        for g0 in range(0, k, group):
            c = tc_mma(c, a[..., g0:g0 + group], b[..., g0:g0 + group], extra_bits)
        return c
    with np.errstate(invalid="ignore", over="ignore"):
        p = a * b
    c64 = np.asarray(c).astype(np.float64)
    none = -100000
    _, ea = np.frexp(np.where(np.isfinite(a), a, 0.0))
    _, eb = np.frexp(np.where(np.isfinite(b), b, 0.0))
    p_exp = np.where((p != 0) & np.isfinite(p), (ea - 1) + (eb - 1), none)
    _, ec = np.frexp(np.where(np.isfinite(c64), c64, 0.0))
    c_exp = np.where((c64 != 0) & np.isfinite(c64), ec - 1, none)
    lead = np.maximum(p_exp.max(axis=-1), c_exp)[..., None]
    extra = db.TC_EXTRA_BITS if extra_bits is None else extra_bits
    q = np.ldexp(1.0, np.maximum(lead - 23 - extra, -1074))
    terms = np.concatenate([p, np.broadcast_to(c64[..., None], p.shape[:-1] + (1,))], axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):
        cut = np.where(np.isfinite(terms), np.trunc(terms / q) * q, terms)
        return _rz(cut.sum(axis=-1))


def _products(x: np.ndarray, y: np.ndarray, k0: int, kb: int) -> tuple[np.ndarray, np.ndarray]:
    """The operands of one k-block as :func:`tc_mma` takes them, broadcasting to (batch, m, n, kb):
    from x (bx, m, K) and y (by, K, n)."""
    xs = x[:, :, k0:k0 + kb].astype(np.float64)
    ys = y[:, k0:k0 + kb, :].astype(np.float64)
    return xs[:, :, None, :], np.swapaxes(ys, 1, 2)[:, None, :, :]


def _accumulate(scheme: str, fmt: str, ah, al, bh, bl, debias: bool) -> np.ndarray:
    kb = db.BLOCK_K[fmt]
    k = ah.shape[-1]
    nblk = -(-k // kb)
    shape = (max(ah.shape[0], bh.shape[0]), ah.shape[1], bh.shape[2])
    acc = np.zeros(shape, np.float32)
    if scheme == "plain":
        for i in range(nblk):
            acc = tc_mma(acc, *_products(ah, bh, i * kb, kb))
        return acc
    if scheme == "markidis":
        for i in range(nblk):
            for x, y in ((ah, bh), (al, bh), (ah, bl), (al, bl)):
                acc = tc_mma(acc, *_products(x, y, i * kb, kb))
        return acc
    cor = np.zeros(shape, np.float32)
    zero = np.zeros(shape, np.float32)
    per_product = debias and db.debias_mode(k) == "product"
    scale = db.product_debias_scale(fmt, k)
    for i in range(0, nblk, 2):  # the two instructions of a kernel stage
        if db.HH_CHAIN == 2:  # summed inside the tensor core (the first from zero), then added with RN
            p = tc_mma(zero, *_products(ah, bh, i * kb, kb))
            if i + 1 < nblk:
                p = tc_mma(p, *_products(ah, bh, (i + 1) * kb, kb))
            with np.errstate(invalid="ignore", over="ignore"):
                acc = acc + p
        else:  # each from zero, added together and then to the accumulator with RN
            ps = [tc_mma(zero, *_products(ah, bh, j * kb, kb)) if j < nblk else zero for j in (i, i + 1)]
            with np.errstate(invalid="ignore", over="ignore"):
                acc = acc + (ps[0] + ps[1])  # float32 additions: round to nearest
                if per_product:  # the expected losses, scaled by 2^11, into the correction accumulator (FMA, RN)
                    for p in ps:
                        cor = (cor.astype(np.float64) + _expected_loss(p, scale)).astype(np.float32)
        for j in (i, i + 1):
            if j < nblk:
                cor = tc_mma(cor, *_products(al, bh, j * kb, kb))
                cor = tc_mma(cor, *_products(ah, bl, j * kb, kb))
    with np.errstate(invalid="ignore", over="ignore"):
        acc64 = acc.astype(np.float64)
        if debias and not per_product:  # into the correction, 2^11 larger there: fma(acc, beta 2^11, cor)
            cor = (acc64 * float(np.float32(db.debias_beta() * 2.0**LO_SHIFT)) + cor.astype(np.float64)).astype(np.float32)
        fixed = (acc64 + cor.astype(np.float64) * 2.0**-LO_SHIFT).astype(np.float32)
    return np.where(np.isfinite(acc), fixed, acc)


def emulate(a: np.ndarray, b: np.ndarray, fmt: str, scheme: str, scale_a: int = 0, scale_b: int = 0,
            debias: bool = db.DEBIAS) -> np.ndarray:
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
    # chunk rows and columns so that one block's products stay under CHUNK_BYTES
    per = 8 * db.BLOCK_K[fmt] * batch
    rows = max(1, min(m, CHUNK_BYTES // max(per * min(n, 4096), 1)))
    cols = max(1, min(n, CHUNK_BYTES // max(per * rows, 1)))
    for i in range(0, m, rows):
        for j in range(0, n, cols):
            out[:, i:i + rows, j:j + cols] = _accumulate(
                scheme, fmt, ah[:, i:i + rows], al[:, i:i + rows], bh[:, :, j:j + cols], bl[:, :, j:j + cols],
                debias)
    if scale_a or scale_b:
        out = mul_pow2(mul_pow2(out, -scale_a), -scale_b)
    if out_batch is None:
        out = out[0]
    return from_real_form(out, complex_)
