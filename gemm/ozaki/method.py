"""The Ozaki scheme on INT8: FP64-accurate products from exact INT8 x INT8 -> INT32 GEMMs.

Methods ``int8`` (a fixed number of slices) and ``int8-auto`` (the number of slices chosen from
the operands). The pipeline reads top to bottom as stages, each timed in the report:

1. **split**: scale every line (row of A, column of B) by the power of two of its largest
   element, then cut each element, in that fixed-point frame, into ``s`` signed INT8 slices of
   ``b`` bits (truncation; every step is exact in FP64). ``b = min(7, floor((31 - ceil(log2 k'))
   / 2))`` with ``k'`` the length of the INT8 dot products, so each one is exact in INT32.
2. **int8_gemm**: the slice pairs (i, j) with ``i + j <= s + 1``. Pairs of equal weight
   ``w = i + j`` are one GEMM with the slices stacked along k (A's slices in order, B's in
   reverse), in chunks of at most ``cap`` pairs so the INT32 sums stay exact.
3. **accumulate**: ``C = sum_w P_w 2^(-b w)`` (each term exact in FP64) summed with TwoSum into
   a double-double, smallest weight first, rounded once, then times ``2^(e_row + e_col)``; one
   fused pass that writes the caller's output layout.

Complex operands: A's lines hold ``[Re | Im]`` (k' = 2k), each complex column j of B becomes two
lines ``[Re | -Im]`` and ``[Im | Re]``; one real product then gives Re and Im of ``A @ B``
directly (the real-stacked formulation ``[Ar Ai] @ [[Br, Bi], [-Bi, Br]]``, interleaved), and
its INT32 output is the size of the complex result, half that of ``[Ar; Ai] @ [Br Bi]``.

``int8-auto``: an element whose frexp exponent lies ``delta`` below its line's keeps
``s*b - delta`` of its ``p`` significant bits (p = 53 for float64, 24 for float32), so it loses
``clamp(p + delta - s*b, 0, p)`` bits. For each operand the mean loss over its nonzero elements
is computed for every ``s``; the method takes the smallest ``s`` in ``3..max_splits`` at which
both means are ``<= threshold`` (T = 0: no element loses a bit), else falls back to ``native``.

The CPU path computes the INT8 products as float64 BLAS GEMMs of the slice values (exact:
every partial sum is an integer below 2^31; :mod:`gemm.ozaki.cpu`); the GPU path
(:mod:`gemm.ozaki.gpu`) uses cuBLAS ``gemmEx`` in INT8. The two modules implement one stage
interface and the method picks one per call. Both run the same operations in the same order, so their results are
bit-identical. The operand with fewer lines (the gate, in the simulator) has its slices cached
(up to :data:`gemm.ozaki.cache.CACHE_BYTES`): a later call whose operand is equal element by element, on the
same device, reuses them (``gemm.ozaki.CACHE.clear()`` frees them).

The larger operand (the state) is processed in blocks of lines so that slices and INT32 products
stay within :data:`gemm.ozaki.plan.BLOCK_BYTES` (2 GiB on the GPU). Grouping the pairs of one weight along k
keeps the INT8 GEMMs long: on an H200 a 28-qubit d = 10 gate runs its INT8 products at
1.4-1.47 POPS (the INT8 TN peak is ~1.49), so the time is about ``s(s+1)/2`` INT8 products plus
one split pass and one accumulation pass over the output (benchmarks/results/ozaki_h200.json).
"""

from __future__ import annotations

import math

import numpy as np

from gemm import error_model as em
from gemm.errors import NonFiniteError
from gemm.method import Method
from gemm.operands import matmul_shape
from gemm.options import Option, integer, number
from gemm.ozaki import cpu, gpu
from gemm.ozaki.cache import CACHE, CACHE_MAX_ELEMENTS, SliceCache
from gemm.ozaki.plan import BLOCK_BYTES, SMAX, SPLITS_RANGE, Plan, choose_splits, mantissa_bits

_SPLITS = integer(*SPLITS_RANGE)


def _as_lines(x, role: str):
    """The 3-D line view ``(outer, inner, K)`` of a 2-D/3-D operand (a view, never a copy)."""
    if role == "a":
        return x[None] if x.ndim == 2 else x
    # B: lines are columns
    return x.T[None] if x.ndim == 2 else x.transpose(0, 2, 1)


class _Ozaki(Method):
    """Common part of ``int8`` and ``int8-auto``."""

    precision = "fp64"

    def _splits_for(self, opts) -> int:
        raise NotImplementedError

    def workspace_bytes(self, m: int, k: int, n: int, dtype, *, device: str = "gpu", **options) -> int:
        """Bytes of workspace (slices + products) for ``(m, k) @ (k, n)`` on ``device`` ("cpu"/"gpu")."""
        opts = self.check_options(options)
        s = self._splits_for(opts)
        cplx = np.dtype(dtype).kind == "c"
        # the larger operand may come as A or as B (the engine's rotating orientation)
        work = max(Plan(int(m), int(n), int(k), cplx, s, device).workspace()[1],
                   Plan(int(n), int(m), int(k), cplx, s, device).workspace()[1])
        if device == "cpu":
            # the double-double accumulation holds ~8 float64 arrays of one block's output
            out = int(m) * int(n) * (16 if cplx else 8)
            work += 8 * min(out, BLOCK_BYTES["cpu"])
        return work

    def error_model(self, ctx):
        """Ozaki scheme I with the slices the report names (``splits`` s, ``bits_per_slice`` b).

        In a line's frame (scaled by ``2^e > max |line|``) an element is ``sum_q v_q 2^(-bq) + r``
        with digits ``|v_q| < 2^b`` and ``|r| < 2^(-bs)``. The kept slice pairs are ``i + j <= s +
        1``; what is dropped (the pairs ``i + j > s + 1`` and both remainders) is below
        ``2 s 2^(-bs)`` per term in the two frames, so an output part errs by at most
        ``2 s 2^(-bs) k' 2^(e_a + e_b) <= 8 s k' 2^(-bs) ||a_i|| ||b_j||`` (``2^e <= 2 max``,
        ``k' = 2k``), and over the whole product ``8 sqrt(2) s k' 2^(-bs) ||U||_F ||X||_F``. The
        INT32 sums are exact; the double-double accumulation adds ``2^-100`` relative at most, and
        the one rounding to float64 ``u |Y|``. A fallback runs native (its model). Estimate: the
        final rounding, and the truncation's leading terms with random signs.
        """
        ch = ctx.choices
        if ch.get("fallback"):
            return em.fp_gemm(ctx)
        s, b = ch.get("splits"), ch.get("bits_per_slice")
        if s is None or b is None:
            return None
        kk = 2 * ctx.k
        trunc = 8.0 * math.sqrt(2.0) * s * kk * 2.0 ** (-b * s) * ctx.frob_norm * ctx.x_norm
        gb, ge = em.rounded_gate(ctx)
        rb, re_ = em.final_rounding(ctx, em.U64 * (1.0 + 2.0 ** -100), trunc + gb)
        nb, ne = em.final_rounding(ctx, ctx.u, trunc + gb + rb) if ctx.narrow else (0.0, 0.0)
        bound = trunc + gb + rb + nb
        # typical: the s - 1 dropped pairs of weight s + 2 (digits of rms 2^b / sqrt 3) and the two
        # remainders (rms 2^(-bs) / sqrt 3) per term, random over the k' terms, frames 1.5x a line's norm
        trunc_e = (1.5 ** 2 * math.sqrt(2.0 * kk) * 2.0 ** (-b * s) * math.sqrt((s - 1) / 9.0 + 2.0 / 3.0)
                   * ctx.frob_norm * ctx.x_norm)
        est = math.sqrt(trunc_e ** 2 + ge ** 2 + re_ ** 2 + ne ** 2)
        return em.ProductError(bound, est, {"truncation": trunc, "gate_rounding": gb, "rounding": rb + nb})

    def _run(self, ops, report, timer, **opts):
        xp = ops.xp
        if ops.batch is not None and ops.a.ndim == 3 and ops.b.ndim == 3:
            out = xp.empty(ops.out_shape, dtype=ops.dtype)
            splits = []
            for i in range(ops.batch):
                out[i] = self._product(xp, ops.a[i], ops.b[i], ops.dtype, report, timer, opts)
                splits.append(report.choices.get("splits"))
            report.choices["splits_per_batch"] = splits
            return out
        return self._product(xp, ops.a, ops.b, ops.dtype, report, timer, opts)

    def _product(self, xp, a, b, dtype, report, timer, opts):
        auto = "threshold" in opts
        stages = cpu if xp is np else gpu
        device = "cpu" if xp is np else "gpu"
        cplx = np.dtype(dtype).kind == "c"
        work = np.dtype(np.complex128 if cplx else np.float64)
        pa, pb = mantissa_bits(a.dtype), mantissa_bits(b.dtype)
        with timer.stage("split"):
            aw = a.astype(work, copy=False)
            bw = b.astype(work, copy=False)
            XA, XB = _as_lines(aw, "a"), _as_lines(bw, "b")
            R = XA.shape[0] * XA.shape[1]
            NC = XB.shape[0] * XB.shape[1]
            K = XA.shape[2]
            probe = Plan(R, NC, K, cplx, SMAX, device)
            bb = probe.b
            small_role = "b" if probe.big_is_a else "a"
            Xs = XB if small_role == "b" else XA
            cache_key = None
            entry = None
            if Xs.size <= CACHE_MAX_ELEMENTS:
                cache_key = SliceCache.key(xp, small_role, Xs, probe)
                entry = CACHE.candidate(cache_key)
            eA, eB, host = stages.line_stats(xp, XA, XB, cplx, auto, bb, pa, pb,
                                             entry["copy"] if entry else None, Xs)
            bad_a, bad_b, stats_a, stats_b, equal = host
        for name, bad in (("a", bad_a), ("b", bad_b)):
            if bad:
                raise NonFiniteError(f"{name} holds {bad} NaN/Inf element(s); this method needs finite operands")
        if auto:
            max_s = opts["max_splits"]
            s, means = choose_splits([stats_a, stats_b], opts["threshold"], max_s)
            report.choices["mean_loss_bits"] = {"a": means[0], "b": means[1]}
            if s is None:
                report.choices.update({"fallback": True, "splits": None, "bits_per_slice": bb, "int8_gemms": 0})
                report.notes.append(
                    f"int8-auto fell back to native: mean mantissa loss at max_splits={max_s} is "
                    f"{max(means):.3g} bits (a: {means[0]:.3g}, b: {means[1]:.3g}) > threshold {opts['threshold']:g}; "
                    "the operands' exponents spread too wide for the slices"
                )
                with timer.stage("native"):
                    return xp.matmul(a, b)
        else:
            s = opts["splits"]
        plan = Plan(R, NC, K, cplx, s, device)
        with timer.stage("split"):
            if entry is not None and equal and entry["s"] >= s:
                small = entry["slices"]
                s_small = entry["s"]
                CACHE.touch(cache_key)
                hit = True
            else:
                nsm = XB.shape[0] * XB.shape[1] if small_role == "b" else R
                e_sm = eB if small_role == "b" else eA
                small = stages.split(xp, Xs, e_sm, 0, nsm, plan, small_role)
                s_small = s
                hit = False
                if cache_key is not None:
                    CACHE.store(cache_key, Xs.copy(), small, s)
        out_shape = matmul_shape(a.shape, b.shape)
        out = self._blocks(xp, stages, plan, XA, XB, eA, eB, small, s_small, small_role, dtype, out_shape, timer)
        slice_bytes, ws = plan.workspace()
        nblocks = -(-(R if plan.big_is_a else NC) // plan.block_lines())
        report.choices.update({
            "splits": s,
            "bits_per_slice": plan.b,
            "slice_pairs": s * (s + 1) // 2,
            "int8_gemms": len(plan.groups) * nblocks,
            "groups": len(plan.groups),
            "blocks": nblocks,
            "fallback": False,
            "cache_hit": hit,
            "slice_bytes": slice_bytes,
        })
        report.workspace_bytes = ws
        return out

    def _blocks(self, xp, stages, plan, XA, XB, eA, eB, small, s_small, small_role, dtype, out_shape, timer):
        R, NC = plan.R, plan.NC
        nb = plan.block_lines()
        big_role = "a" if small_role == "b" else "b"
        Xbig = XA if big_role == "a" else XB
        ebig = eA if big_role == "a" else eB
        total = R if big_role == "a" else NC
        out = stages.new_output(xp, plan, out_shape)
        for l0 in range(0, total, nb):
            n = min(nb, total - l0)
            with timer.stage("split"):
                big = stages.split(xp, Xbig, ebig, l0, n, plan, big_role)
            SA, sA, SB, sB = (big, plan.s, small, s_small) if big_role == "a" else (small, s_small, big, plan.s)
            with timer.stage("int8_gemm"):
                P = stages.products(xp, SA, sA, SB, sB, plan)
            with timer.stage("accumulate"):
                r0, c0 = (l0, 0) if big_role == "a" else (0, l0)
                stages.accumulate(xp, P, plan, eA, eB, r0, c0, SA.shape[0], SB.shape[0], out)
            del P, big
        with timer.stage("accumulate"):
            res = stages.to_layout(xp, out, plan, out_shape)
            if res.dtype != dtype:
                res = res.astype(dtype)
        return res


class Int8(_Ozaki):
    """Ozaki scheme I on INT8 with a fixed number of slices ``splits`` (3..20)."""

    name = "int8"
    option_specs = {"splits": Option(13, _SPLITS, "number of INT8 slices per element")}
    description = "Ozaki scheme on INT8 tensor cores, fixed slices (FP64 accuracy at splits >= ~9)"

    def _splits_for(self, opts) -> int:
        return opts["splits"]


class Int8Auto(_Ozaki):
    """Ozaki scheme on INT8 with the slice count chosen per call from the operands' exponents.

    Options:
        threshold: mean mantissa loss (bits) allowed over the nonzero elements of each operand;
            0 keeps every bit of every element.
        max_splits: the most slices (3..20) before falling back to ``native``.
    """

    name = "int8-auto"
    option_specs = {
        "threshold": Option(0.0, number(0.0, what="bits of mean mantissa loss"),
                            "mean mantissa loss allowed per operand"),
        "max_splits": Option(16, _SPLITS, "the most slices before falling back to native"),
    }
    description = "Ozaki scheme on INT8 tensor cores, slices chosen from the data (falls back to native)"

    def _splits_for(self, opts) -> int:
        return opts["max_splits"]

