"""The ``dd`` method: a double-double (~106-bit) GEMM, the accuracy reference of the project.

Algorithm ("split", CPU and GPU, the default). Every operand is cut into fixed-point pieces few
enough bits wide that a float64 GEMM of two pieces is EXACT, so the library GEMM (BLAS dgemm on
the CPU, cuBLAS on the GPU) does all the multiplications at full speed and commits no rounding:

1. split: each row of A (each column of B) is scaled by the power of two 2^e just above its
   largest magnitude and cut into ``n`` signed integer pieces of ``b`` bits,
   ``a = 2^e * sum_p A_p 2^(-b(p+1))``, taking the DD input ``hi + lo`` apart error-free
   (TwoSum keeps the remainder exact).
2. product: for every level ``L = p + q <= n - 1`` the integer matrix ``C_L = sum A_p B_q`` is
   one float64 GEMM per level (the pieces of A side by side against the matching pieces of B
   stacked), exact because ``n * k' * 2^(2b) <= 2^53``.
3. accumulate: the exact levels are added most significant first into a DD accumulator
   (TwoSum), then scaled back by the row and column powers of two (exact).

Complex products run as one real product ``[Ar Ai] @ [[Br Bi], [-Bi Br]]`` (k' = 2k). The pieces
keep ``bits`` bits (default 116) below each row's and column's largest element, so the
truncation error is below ``2^-116 * max|a_i.| * max|b_.j| * n * k'`` per element: below the
DD rounding for inputs whose rows do not span many binades. Results on the CPU and the GPU are
identical bit for bit (exact integer GEMMs, then the same IEEE operations in the same order).

Algorithm "fma" (GPU only): a tiled CUDA kernel (``dd.cu``, :mod:`gemm.dd.gpu`) doing the classic DD
multiply-accumulate with FMA-based TwoProd and TwoSum for every term; kept as a cross-check of
the split algorithm and for comparison of speed.
"""

from __future__ import annotations

import math

import numpy as np

from gemm import error_model as em
from gemm.dd import arith as dd_arith
from gemm.dd import gpu
from gemm.device import same_module
from gemm.method import Method
from gemm.operands import COMPLEX, REAL, check_finite
from gemm.options import Option, array_or_none, choice, integer

OUTPUTS = ("rounded", "pair")
ALGORITHMS = ("split", "fma")
DEFAULT_BITS = 116
MAX_PIECES = 24


def plan_pieces(kprime: int, bits: int = DEFAULT_BITS) -> tuple[int, int]:
    """``(b, n)``: bits per piece and number of pieces for an inner size ``kprime`` (real form).

    The level GEMMs sum at most ``n * kprime`` products of two b-bit integers (magnitude at most
    2^b each), exact in float64 when ``n * kprime * 2^(2b) <= 2^53``; the kept bits ``b * n``
    must cover ``bits`` plus ``log2(n * kprime)`` for the dropped pairs. Of the feasible plans
    the one with the fewest pieces wins (then the widest pieces).
    """
    best = None
    for b in range(26, 0, -1):
        n = 1
        while n <= MAX_PIECES:
            if b * n >= bits + math.ceil(math.log2(n * kprime)):
                break
            n += 1
        if n > MAX_PIECES:
            continue
        if n * kprime * 2.0 ** (2 * b) > 2.0**53:
            continue
        if best is None or n < best[1]:
            best = (b, n)
    if best is None:
        raise ValueError(f"inner size k'={kprime} is too large for an exact split with bits={bits}")
    return best


def _pow2(e, xp):
    """2.0 ** e for an integer array ``e`` (exact), clipped to the normal range."""
    e = xp.clip(e, -1022, 1023)
    return xp.ldexp(xp.ones(e.shape, dtype=np.float64), e.astype(np.int32))


def split_rows(hi, lo, n: int, b: int, xp, out=None):
    """Cut the rows of the real DD matrix ``hi + lo`` (R x K) into ``n`` integer pieces.

    Returns ``(e, P)`` with ``P`` of shape ``(n, R, K)`` (or written into ``out``, any array
    whose ``[p]`` is an (R, K) view), such that
    ``hi + lo = 2^e[:, None] * sum_p P[p] * 2^(-b (p + 1)) + r``, ``|r| <= 2^(e - b n)``.
    Every piece is an integer of magnitude at most ``2^b``.

    The pair is first renormalised (TwoSum), so ``|lo| <= 2^-53 |hi|``; then ``hi`` and ``lo``
    are cut separately on the same fixed-point grid (their digits add up exactly), and ``lo``
    only from the first piece it can reach.
    """
    hi, lo = dd_arith.two_sum(hi, lo)
    amax = xp.abs(hi).max(axis=1)
    _, e = xp.frexp(amax)  # amax < 2^e; 0 for an all-zero row
    e = e.astype(np.int64)
    scale = _pow2(-e, xp)[:, None]
    x = hi * scale  # |x| <= 1
    y = lo * scale  # |y| <= 2^-53
    if out is None:
        out = xp.empty((n,) + tuple(hi.shape), dtype=np.float64)
    t = float(2**b)
    for p in range(n):
        xp.multiply(x, t, out=x)
        q = out[p]
        xp.rint(x, out=q)
        xp.subtract(x, q, out=x)  # exact: q is x rounded to an integer; now |x| <= 1/2
    # lo's digits are zero while b (p + 1) <= 51 (|y| 2^(b (p + 1)) < 1/2)
    p0 = min(n, 51 // b)
    if p0 < n:
        xp.multiply(y, float(2.0 ** (b * p0)), out=y)
        q = xp.empty_like(y)
        for p in range(p0, n):
            xp.multiply(y, t, out=y)
            xp.rint(y, out=q)
            xp.subtract(y, q, out=y)
            xp.add(out[p], q, out=out[p])  # |hi digit| + |lo digit| <= 2^(b-1) + 2^(b-1) for p >= 1
    return e, out


def _level_products_cpu(pa, pb, n, kp):
    """numpy: pa (R, n*kp) pieces side by side, pb (n, kp, N'); one dgemm per level."""
    for level in range(n):
        stacked = np.concatenate([pb[level - p] for p in range(level + 1)], axis=0)
        yield level, np.matmul(pa[:, : (level + 1) * kp], stacked)


def _level_products_gpu(pa, pb, n, xp):
    """cupy: pa (n, R, kp); one cuBLAS call per piece pair, summed exactly in float64."""
    for level in range(n):
        c = xp.matmul(pa[0], pb[level])
        for p in range(1, level + 1):
            c += xp.matmul(pa[p], pb[level - p])
        yield level, c


def _real_form(a, alo, b, blo, xp):
    """Complex operands -> real-form DD operands [Ar Ai] (R x 2K), [[Br Bi], [-Bi Br]] (2K x 2N)."""
    ah = xp.concatenate([a.real, a.imag], axis=1)
    al = xp.concatenate([alo.real, alo.imag], axis=1)
    bh = xp.concatenate([xp.concatenate([b.real, b.imag], axis=1),
                         xp.concatenate([-b.imag, b.real], axis=1)], axis=0)
    bl = xp.concatenate([xp.concatenate([blo.real, blo.imag], axis=1),
                         xp.concatenate([-blo.imag, blo.real], axis=1)], axis=0)
    return ah, al, bh, bl


class _Split2D:
    """One 2-D DD product by the split algorithm: B is split once, A chunk by chunk."""

    def __init__(self, b, blo, is_complex: bool, bits: int, xp, timer):
        self.xp = xp
        self.cplx = is_complex
        self.kp = b.shape[0] * (2 if is_complex else 1)
        self.nout = b.shape[1]
        self.bits_per_piece, self.n = plan_pieces(self.kp, bits)
        self.timer = timer
        with timer.stage("split"):
            if is_complex:
                zero = xp.zeros((1, b.shape[0]), dtype=np.complex128)
                _, _, bh, bl = _real_form(zero, zero, b, blo, xp)
            else:
                bh, bl = b, blo
            # columns of B are rows of B^T
            self.eb, pbt = split_rows(xp.ascontiguousarray(bh.T), xp.ascontiguousarray(bl.T),
                                      self.n, self.bits_per_piece, xp)
            self.pb = xp.ascontiguousarray(pbt.transpose(0, 2, 1))  # (n, K', N')

    def run_chunk(self, a, alo, out_hi, out_lo):
        """DD product of the rows ``a + alo`` with B into ``out_hi``/``out_lo`` (same rows)."""
        xp, n, bp, kp = self.xp, self.n, self.bits_per_piece, self.kp
        timer = self.timer
        with timer.stage("split"):
            if self.cplx:
                ah = xp.concatenate([a.real, a.imag], axis=1)
                al = xp.concatenate([alo.real, alo.imag], axis=1)
            else:
                ah, al = a, alo
            rows = ah.shape[0]
            if xp is np:
                buf = np.empty((rows, n, kp), dtype=np.float64)
                ea, _ = split_rows(ah, al, n, bp, xp, out=buf.transpose(1, 0, 2))
                pa = buf.reshape(rows, n * kp)
            else:
                ea, pa = split_rows(ah, al, n, bp, xp)
        products = (_level_products_cpu(pa, self.pb, n, kp) if xp is np
                    else _level_products_gpu(pa, self.pb, n, xp))
        levels = dict(_timed(products, timer, "product"))
        with timer.stage("accumulate"):
            acc_hi, acc_lo = accumulate_levels(levels, n, bp, xp)
        with timer.stage("rescale"):
            sa = _pow2(ea - bp, xp)[:, None]
            sb = _pow2(self.eb - bp, xp)[None, :]
            acc_hi = (acc_hi * sa) * sb
            acc_lo = (acc_lo * sa) * sb
            if self.cplx:
                nn = self.nout
                ohv = out_hi.view(np.float64)
                olv = out_lo.view(np.float64)
                ohv[:, 0::2] = acc_hi[:, :nn]
                ohv[:, 1::2] = acc_hi[:, nn:]
                olv[:, 0::2] = acc_lo[:, :nn]
                olv[:, 1::2] = acc_lo[:, nn:]
            else:
                out_hi[...] = acc_hi
                out_lo[...] = acc_lo


def accumulate_levels(levels: dict, n: int, b: int, xp):
    """DD value of ``sum_L levels[L] * 2^(-b L)``, each level an exact float64 matrix.

    Levels of weight 2^(-b L) <= 2^-66 (``L >= ceil(66 / b)``) are summed in plain float64,
    smallest first: their rounding is below 2^-119 of level 0's scale. The others are added
    into a DD accumulator by TwoSum, least significant first, so that each step adds a larger
    number to a smaller accumulator and the low part keeps every bit that matters.
    """
    plain_from = min(n, -(-66 // b))
    tail = None
    for level in range(n - 1, plain_from - 1, -1):
        v = levels[level] * float(2.0 ** (-b * level))
        tail = v if tail is None else xp.add(tail, v, out=tail)
    top = plain_from - 1
    acc_hi = levels[top] * float(2.0 ** (-b * top)) if top > 0 else levels[0]
    if tail is None:
        acc_lo = xp.zeros_like(acc_hi)
    else:
        acc_hi, acc_lo = dd_arith.two_sum(acc_hi, tail)
    for level in range(top - 1, -1, -1):
        v = levels[level] * float(2.0 ** (-b * level)) if level else levels[0]
        acc_hi, acc_lo = dd_arith.dd_add_d(acc_hi, acc_lo, v)
    return acc_hi, acc_lo


def _timed(iterable, timer, name):
    it = iter(iterable)
    while True:
        with timer.stage(name):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


def _default_chunk_rows(xp, kp: int) -> int:
    # CPU: keep a chunk's pieces in cache-sized blocks; GPU: ~2^27 elements of A' per chunk
    target = (1 << 15) if xp is np else (1 << 27)
    return max(1, target // kp)


class DoubleDouble(Method):
    """``a @ b`` in double-double (~106 bits): the reference every other method is measured by.

    Options:
        output: ``"rounded"`` (default) returns the product rounded to float64/complex128;
            ``"pair"`` returns ``(hi, lo)``.
        a_lo, b_lo: low parts when ``a`` and ``b`` are the high parts of DD operands (same shape
            and kind; None means zero).
        bits: bits kept below each row's/column's largest element by the split (default 116).
        chunk_rows: rows of A per chunk (None: chosen for the device).
        algorithm: ``"split"`` (default, CPU and GPU) or ``"fma"`` (GPU kernel).
    """

    name = "dd"
    precision = "dd"
    dtypes = REAL + COMPLEX
    option_specs = {
        "output": Option("rounded", choice(*OUTPUTS), "the product rounded, or the (hi, lo) pair"),
        "a_lo": Option(None, array_or_none(), "low part of a double-double a"),
        "b_lo": Option(None, array_or_none(), "low part of a double-double b"),
        "bits": Option(DEFAULT_BITS, integer(53, 200), "bits kept by the split below each line's maximum"),
        "chunk_rows": Option(None, integer(1, none=True), "rows of A per chunk (None: chosen per device)"),
        "algorithm": Option("split", choice(*ALGORITHMS), "split (CPU and GPU) or fma (GPU kernel)"),
    }
    description = "double-double (~106-bit) GEMM: exact split products + DD accumulation (reference)"

    def workspace_bytes(self, m: int, k: int, n: int, dtype, *, device: str = "gpu", **options) -> int:
        """The output pair, the pieces of one chunk of A and of B, real-form copies and accumulator
        temporaries (the same count on both devices)."""
        opts = self.check_options(options)
        chunk_rows, bits = opts["chunk_rows"], opts["bits"]
        cplx = np.dtype(dtype).kind == "c"
        kp = k * (2 if cplx else 1)
        nn = n * (2 if cplx else 1)
        _, npieces = plan_pieces(kp, bits)
        rows = min(m, chunk_rows or (1 << 27) // kp)
        # output pair + pieces of a chunk + real-form copies and ~6 accumulator temporaries; B's
        # pieces twice (split, then transposed) and its real-form hi/lo with their transposed
        # copies; the zero low parts made for operands given without one (A and B sized)
        item = 16 if cplx else 8
        out = 2 * m * n * item
        lows = (m * k + k * n) * item
        b_side = 8 * kp * nn * (2 * npieces + 4)
        return int(out + lows + 8 * rows * (kp * (npieces + 4) + 8 * nn) + b_side)

    def error_model(self, ctx):
        """The product rounded to the state's precision (``output="rounded"``, as a simulator
        backend uses it). Split algorithm: the pieces keep ``bits`` bits below each line's frame
        ``2^e <= 2 max|line|``, so the truncation is below ``4 n k' 2^-bits ||a_i|| ||b_j||`` per
        output part (``n`` pieces, ``k' = 2k``); the exact levels are summed in double-double,
        ``(n + 2) 2^-104`` of the absolute sum; the FMA kernel's DD multiply-accumulate commits
        ``4 k' 2^-104`` of it. Then one rounding to float64 (and to float32 for a complex64 state).
        """
        ch = ctx.choices
        kk = 2 * ctx.k
        bits = int(ch.get("bits", DEFAULT_BITS))
        if ch.get("algorithm", "split") == "fma":
            dd_rel = 4.0 * kk * 2.0 ** -104
            trunc = 0.0
        else:
            npieces = int(ch.get("pieces") or plan_pieces(kk, bits)[1])
            dd_rel = (npieces + 2) * 2.0 ** -104
            trunc = math.sqrt(2.0) * 4.0 * npieces * kk * 2.0 ** -bits * ctx.frob_norm * ctx.x_norm
        acc = math.sqrt(2.0) * dd_rel * ctx.abs_norm * ctx.x_norm
        gb, ge = em.rounded_gate(ctx)
        rb, re_ = em.final_rounding(ctx, em.U64, trunc + acc + gb)
        nb, ne = em.final_rounding(ctx, ctx.u, trunc + acc + gb + rb) if ctx.narrow else (0.0, 0.0)
        bound = trunc + acc + gb + rb + nb
        return em.ProductError(bound, math.sqrt(ge ** 2 + re_ ** 2 + ne ** 2),
                               {"truncation": trunc + acc, "gate_rounding": gb, "rounding": rb + nb})

    def _run(self, ops, report, timer, *, output, a_lo, b_lo, bits, chunk_rows, algorithm):
        xp = ops.xp
        cplx = ops.is_complex
        odt = np.dtype(np.complex128 if cplx else np.float64)
        a, b = ops.a, ops.b
        a_lo = _check_lo(a_lo, a, "a", xp)
        b_lo = _check_lo(b_lo, b, "b", xp)
        for name, x in (("a", a), ("b", b), ("a_lo", a_lo), ("b_lo", b_lo)):
            if x is not None:
                check_finite(x, name, xp)
        a = a.astype(odt, copy=False)
        b = b.astype(odt, copy=False)
        a_lo = xp.zeros(a.shape, odt) if a_lo is None else a_lo.astype(odt, copy=False)
        b_lo = xp.zeros(b.shape, odt) if b_lo is None else b_lo.astype(odt, copy=False)
        if algorithm == "fma" and xp is np:
            raise ValueError("algorithm='fma' runs on the GPU only (cupy operands); use algorithm='split' on the CPU")
        out_hi = xp.empty(ops.out_shape, dtype=odt)
        out_lo = xp.empty(ops.out_shape, dtype=odt)
        if ops.batch is None:
            jobs = [(a, a_lo, b, b_lo, out_hi, out_lo)]
        elif a.ndim == 3 and b.ndim == 2:  # stacked A against one B: one tall product
            jobs = [(a.reshape(-1, ops.k), a_lo.reshape(-1, ops.k), b, b_lo,
                     out_hi.reshape(-1, ops.n), out_lo.reshape(-1, ops.n))]
        else:
            jobs = []
            for i in range(ops.batch):
                ai, ali = (a[i], a_lo[i]) if a.ndim == 3 else (a, a_lo)
                bi, bli = (b[i], b_lo[i]) if b.ndim == 3 else (b, b_lo)
                jobs.append((ai, ali, bi, bli, out_hi[i], out_lo[i]))
        if algorithm == "fma":
            for ai, ali, bi, bli, oh, ol in jobs:
                with timer.stage("kernel"):
                    gpu.gemm_fma(ai, ali, bi, bli, oh, ol)
            report.choices.update({"algorithm": "fma"})
        else:
            plan = None
            for ai, ali, bi, bli, oh, ol in jobs:
                plan = _Split2D(bi, bli, cplx, int(bits), xp, timer)
                rows = ai.shape[0]
                step = chunk_rows or _default_chunk_rows(xp, plan.kp)
                for r0 in range(0, rows, step):
                    r1 = min(rows, r0 + step)
                    plan.run_chunk(ai[r0:r1], ali[r0:r1], oh[r0:r1], ol[r0:r1])
            report.choices.update({"algorithm": "split", "bits_per_piece": plan.bits_per_piece,
                                   "pieces": plan.n, "level_gemms": plan.n,
                                   "piece_products": plan.n * (plan.n + 1) // 2, "bits": int(bits)})
        report.choices["output"] = output
        report.workspace_bytes = self.workspace_bytes(ops.m, ops.k, ops.n, odt, device=report.device,
                                                      chunk_rows=chunk_rows, bits=bits)
        if output == "pair":
            return out_hi, out_lo
        return out_hi


def _check_lo(lo, hi, name, xp):
    if lo is None:
        return None
    if not hasattr(lo, "shape") or not hasattr(lo, "dtype"):
        raise TypeError(f"{name}_lo must be an array like {name}, got {type(lo).__name__}")
    if not same_module(lo, hi):
        raise TypeError(f"{name}_lo must live on the same device as {name} (numpy vs cupy)")
    if tuple(lo.shape) != tuple(hi.shape):
        raise ValueError(f"{name}_lo has shape {tuple(lo.shape)}; expected the shape of {name}, {tuple(hi.shape)}")
    if np.dtype(lo.dtype) not in REAL + COMPLEX:
        raise TypeError(f"{name}_lo has dtype {lo.dtype}; expected a float or complex dtype")
    if np.dtype(lo.dtype).kind == "c" and np.dtype(hi.dtype).kind != "c":
        raise TypeError(f"{name}_lo is complex ({lo.dtype}) but {name} is real ({hi.dtype})")
    return lo


_DD = DoubleDouble()  # the instance matmul_pair calls (the method holds no state)


def matmul_pair(a, b, **options):
    """DD product of DD operands given as ``(hi, lo)`` pairs (or plain arrays); returns ``(hi, lo)``.

    Example::

        chi, clo = gemm.dd.matmul_pair((ahi, alo), (bhi, blo))

    Args:
        a, b: ``(hi, lo)`` pairs of arrays, or plain arrays (a zero low part).
        **options: options of the ``dd`` method other than ``a_lo``, ``b_lo`` and ``output``.

    Returns:
        ``(hi, lo)`` of the product.

    Raises:
        As :func:`gemm.matmul` with ``method="dd"``.
    """
    ahi, alo = a if isinstance(a, tuple) else (a, None)
    bhi, blo = b if isinstance(b, tuple) else (b, None)
    c, _ = _DD(ahi, bhi, a_lo=alo, b_lo=blo, output="pair", **options)
    return c
