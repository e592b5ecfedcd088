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
every partial sum is an integer below 2^31); the GPU path (:mod:`gemm.ozaki_gpu`) uses cuBLAS
``gemmEx`` in INT8. Both run the same operations in the same order, so their results are
bit-identical. The operand with fewer lines (the gate, in the simulator) has its slices cached
(up to :data:`CACHE_BYTES`): a later call whose operand is equal element by element, on the
same device, reuses them (``gemm.ozaki.CACHE.clear()`` frees them).

The larger operand (the state) is processed in blocks of lines so that slices and INT32 products
stay within :data:`BLOCK_BYTES` (2 GiB on the GPU). Grouping the pairs of one weight along k
keeps the INT8 GEMMs long: on an H200 a 28-qubit d = 10 gate runs its INT8 products at
1.4-1.47 POPS (the INT8 TN peak is ~1.49), so the time is about ``s(s+1)/2`` INT8 products plus
one split pass and one accumulation pass over the output (benchmarks/results/ozaki_h200.json).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import numpy as np

from gemm.errors import NonFiniteError
from gemm.method import Method
from gemm.operands import check_finite

SPLITS_RANGE = (3, 20)  # the option range of `splits` and `max_splits`
SMAX = SPLITS_RANGE[1]
KP_ALIGN = 16  # slice rows are padded to a multiple of this many bytes (cuBLAS needs 4)
# Workspace (slices + INT32 products) of one block of the larger operand's lines.
BLOCK_BYTES = {"cpu": 256 << 20, "gpu": 2 << 30}
CACHE_BYTES = 1 << 30  # slices kept for operands used again (both devices together)
CACHE_MAX_ELEMENTS = 4096 * 4096  # larger operands are never cached
_DCAP = 53 + SMAX * 7 + 1  # an element this far below its line's maximum loses all its bits

# --------------------------------------------------------------------------------------------
# the numerics shared by both devices


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


def _round_up(x: int, a: int) -> int:
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
        return _round_up(self.kk, KP_ALIGN)

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
            per = self.s * self.Kp * self.slice_item + g * _round_up(small_w, 4) * self.p_item
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
            prod = g * nb * _round_up(self.lines_out("b", self.NC), 4)
        else:
            big = self.lines_out("b", nb) * self.s * self.Kp
            small = self.R * self.s * self.Kp
            prod = g * self.R * _round_up(self.lines_out("b", nb), 4)
        slices = (big + small) * self.slice_item
        return slices, slices + prod * self.p_item


# --------------------------------------------------------------------------------------------
# operands as lines


def _as_lines(x, role: str):
    """The 3-D line view ``(outer, inner, K)`` of a 2-D/3-D operand (a view, never a copy)."""
    if role == "a":
        return x[None] if x.ndim == 2 else x
    # B: lines are columns
    return x.T[None] if x.ndim == 2 else x.transpose(0, 2, 1)


class _SliceCache:
    """Slices of operands used again, keyed by device and shape, validated by exact comparison."""

    def __init__(self, limit: int):
        self.limit = limit
        self.entries: collections.OrderedDict = collections.OrderedDict()

    @staticmethod
    def key(xp, role, X, plan: Plan):
        dev = -1 if xp is np else xp.cuda.Device().id
        return (plan.device, dev, role, tuple(X.shape), str(X.dtype), plan.kk, plan.Kp, plan.b)

    def candidate(self, key):
        return self.entries.get(key)

    def store(self, key, copy, slices, s):
        nbytes = int(copy.nbytes) + int(slices.nbytes)
        self.entries.pop(key, None)
        if nbytes > self.limit:
            return
        while self.entries and sum(e["bytes"] for e in self.entries.values()) + nbytes > self.limit:
            self.entries.popitem(last=False)
        self.entries[key] = {"copy": copy, "slices": slices, "s": s, "bytes": nbytes}

    def touch(self, key):
        self.entries.move_to_end(key)

    def clear(self):
        self.entries.clear()


CACHE = _SliceCache(CACHE_BYTES)

# --------------------------------------------------------------------------------------------
# CPU stages (the reference of the GPU ones)


def _cpu_parts(X, cplx):
    X2 = X.reshape(-1, X.shape[-1])
    return (X2.real, X2.imag) if cplx else (X2,)


def _cpu_line_stats(X, cplx, want_loss, b, p):
    """Line exponents and (nonzero count, loss sums) of one operand on the CPU."""
    parts = _cpu_parts(X, cplx)
    amax = np.max(np.abs(parts[0]), axis=1)
    for q in parts[1:]:
        amax = np.maximum(amax, np.max(np.abs(q), axis=1))
    e = np.frexp(amax)[1].astype(np.int64)
    if not want_loss:
        return e, None
    nz = 0
    deltas = []
    for q in parts:
        mask = q != 0
        ex = np.frexp(q)[1]
        deltas.append((e[:, None] - ex)[mask])
        nz += int(mask.sum())
    delta = np.concatenate(deltas) if deltas else np.zeros(0, np.int64)
    return e, (nz, loss_sums_from_deltas(delta, b, p))


def _cpu_split(X, e, line0, nlines, plan: Plan, role: str):
    """Slices of lines [line0, line0 + nlines) as float64 ``(lines_out, s * Kp)``."""
    s, b, K, Kp, cplx = plan.s, plan.b, plan.K, plan.Kp, plan.cplx
    parts = [q[line0:line0 + nlines] for q in _cpu_parts(X, cplx)]
    ee = -e[line0:line0 + nlines, None]
    ts = [np.ldexp(q, ee) for q in parts]
    scale = float(2**b)
    nout = plan.lines_out(role, nlines)
    out = np.zeros((nout, s, Kp), dtype=np.float64)
    if role == "b" and cplx:
        view = out.reshape(nlines, 2, s, Kp)
    for q in range(s):
        qs = []
        for i, t in enumerate(ts):
            t *= scale
            v = np.trunc(t)
            t -= v
            qs.append(v)
        if role == "a":
            out[:, q, :K] = qs[0]
            if cplx:
                out[:, q, K:2 * K] = qs[1]
        else:
            slot = s - 1 - q
            if cplx:
                view[:, 0, slot, :K] = qs[0]
                view[:, 0, slot, K:2 * K] = -qs[1]
                view[:, 1, slot, :K] = qs[1]
                view[:, 1, slot, K:2 * K] = qs[0]
            else:
                out[:, slot, :K] = qs[0]
    return out.reshape(nout, s * Kp)


def _cpu_products(SA, sA, SB, sB, plan: Plan):
    """The grouped slice products, float64 ``(G, rows, cols)`` (exact integers)."""
    Kp = plan.Kp
    groups = plan.groups
    P = np.empty((len(groups), SA.shape[0], SB.shape[0]), dtype=np.float64)
    for g, (w, i0, i1) in enumerate(groups):
        L = (i1 - i0 + 1) * Kp
        oa = (i0 - 1) * Kp
        ob = (sB - w + i0) * Kp
        np.matmul(SA[:, oa:oa + L], SB[:, ob:ob + L].T, out=P[g])
    return P


def _cpu_accumulate(P, plan: Plan, eA, eB):
    """sum_g P_g 2^(-b w_g) (smallest first, double-double, rounded once), times 2^(eA + eB):
    float64 ``(rows, cols')``."""
    hi = np.zeros(P.shape[1:], dtype=np.float64)
    lo = np.zeros_like(hi)
    for g, (w, _i0, _i1) in enumerate(plan.groups):
        x = P[g] * math.ldexp(1.0, -plan.b * w)  # exact
        t = hi + x  # TwoSum(hi, x): t + err == hi + x exactly
        bv = t - hi
        err = (hi - (t - bv)) + (x - bv)
        lo += err
        hi = t
    ec = np.repeat(eB, 2) if plan.cplx else eB
    return np.ldexp(hi + lo, eA[:, None] + ec[None, :])


# --------------------------------------------------------------------------------------------
# the driver


def _validate_splits(name: str, value, lo: int = SPLITS_RANGE[0], hi: int = SPLITS_RANGE[1]) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int in {lo}..{hi}, got {type(value).__name__} {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {value}")
    return int(value)


def _validate_threshold(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"threshold must be a number >= 0 (bits of mean mantissa loss), got {type(value).__name__} {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"threshold must be a finite number >= 0 (bits of mean mantissa loss), got {value}")
    return v


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
        gpu = xp is not np
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
            probe = Plan(R, NC, K, cplx, SMAX, "gpu" if gpu else "cpu")
            bb = probe.b
            small_role = "b" if probe.big_is_a else "a"
            Xs = XB if small_role == "b" else XA
            cache_key = None
            entry = None
            if Xs.size <= CACHE_MAX_ELEMENTS:
                cache_key = _SliceCache.key(xp, small_role, Xs, probe)
                entry = CACHE.candidate(cache_key)
            if gpu:
                from gemm import ozaki_gpu  # noqa: PLC0415

                eA, eB, host = ozaki_gpu.line_stats(xp, XA, XB, cplx, auto, bb, pa, pb,
                                                   entry["copy"] if entry else None, Xs)
                bad_a, bad_b, stats_a, stats_b, equal = host
            else:
                check_finite(aw, "a", np)
                check_finite(bw, "b", np)
                bad_a = bad_b = 0
                eA, stats_a = _cpu_line_stats(XA, cplx, auto, bb, pa)
                eB, stats_b = _cpu_line_stats(XB, cplx, auto, bb, pb)
                equal = entry is not None and np.array_equal(entry["copy"], Xs)
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
        plan = Plan(R, NC, K, cplx, s, "gpu" if gpu else "cpu")
        with timer.stage("split"):
            if entry is not None and equal and entry["s"] >= s:
                small = entry["slices"]
                s_small = entry["s"]
                CACHE.touch(cache_key)
                hit = True
            else:
                nsm = XB.shape[0] * XB.shape[1] if small_role == "b" else R
                e_sm = eB if small_role == "b" else eA
                if gpu:
                    small = ozaki_gpu.split(xp, Xs, e_sm, 0, nsm, plan, small_role)
                else:
                    small = _cpu_split(Xs, e_sm, 0, nsm, plan, small_role)
                s_small = s
                hit = False
                if cache_key is not None:
                    CACHE.store(cache_key, Xs.copy(), small, s)
        if a.ndim == 3:
            out_shape = (a.shape[0], a.shape[1], b.shape[-1])
        elif b.ndim == 3:
            out_shape = (b.shape[0], a.shape[0], b.shape[2])
        else:
            out_shape = (a.shape[0], b.shape[1])
        out = self._blocks(xp, plan, XA, XB, eA, eB, small, s_small, small_role, dtype, out_shape, timer)
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

    def _blocks(self, xp, plan, XA, XB, eA, eB, small, s_small, small_role, dtype, out_shape, timer):
        gpu = xp is not np
        R, NC = plan.R, plan.NC
        nb = plan.block_lines()
        big_role = "a" if small_role == "b" else "b"
        Xbig = XA if big_role == "a" else XB
        ebig = eA if big_role == "a" else eB
        total = R if big_role == "a" else NC
        if gpu:
            from gemm import ozaki_gpu  # noqa: PLC0415

            out = xp.empty(out_shape, dtype=np.complex128 if plan.cplx else np.float64)
        else:
            acc_full = np.empty((R, plan.lines_out("b", NC)), dtype=np.float64)
        for l0 in range(0, total, nb):
            n = min(nb, total - l0)
            with timer.stage("split"):
                if gpu:
                    big = ozaki_gpu.split(xp, Xbig, ebig, l0, n, plan, big_role)
                else:
                    big = _cpu_split(Xbig, ebig, l0, n, plan, big_role)
            SA, sA, SB, sB = (big, plan.s, small, s_small) if big_role == "a" else (small, s_small, big, plan.s)
            with timer.stage("int8_gemm"):
                if gpu:
                    P = ozaki_gpu.products(xp, SA, sA, SB, sB, plan)
                else:
                    P = _cpu_products(SA, sA, SB, sB, plan)
            with timer.stage("accumulate"):
                r0, c0 = (l0, 0) if big_role == "a" else (0, l0)
                if gpu:
                    ozaki_gpu.accumulate(xp, P, plan, eA, eB, r0, c0, SA.shape[0], SB.shape[0], out)
                else:
                    blk = _cpu_accumulate(P, plan, eA[r0:r0 + SA.shape[0]], eB[c0:c0 + (n if big_role == "b" else NC)])
                    if big_role == "a":
                        acc_full[l0:l0 + n] = blk
                    else:
                        f = 2 if plan.cplx else 1
                        acc_full[:, f * l0:f * (l0 + n)] = blk
            del P, big
        with timer.stage("accumulate"):
            if gpu:
                res = out
            else:
                res = _cpu_to_layout(acc_full, plan, out_shape)
            if res.dtype != dtype:
                res = res.astype(dtype)
        return res


def _cpu_to_layout(acc_full, plan: Plan, out_shape):
    """(R, cols') float64 product -> the matmul result layout ``out_shape``."""
    C = acc_full.view(np.complex128) if plan.cplx else acc_full  # (R, NC)
    if len(out_shape) == 3 and out_shape[1] == plan.R and out_shape[0] * out_shape[2] == plan.NC:
        # B was stacked: columns c = h * L + l of the product -> out[h, r, l]
        H, _, L = out_shape
        return np.ascontiguousarray(C.reshape(plan.R, H, L).transpose(1, 0, 2))
    return C.reshape(out_shape)


class Int8(_Ozaki):
    """Ozaki scheme I on INT8 with a fixed number of slices ``splits`` (3..20)."""

    name = "int8"
    options = {"splits": 13}
    description = "Ozaki scheme on INT8 tensor cores, fixed slices (FP64 accuracy at splits >= ~9)"

    def _splits_for(self, opts) -> int:
        return opts["splits"]

    def check_options(self, options):
        opts = super().check_options(options)
        opts["splits"] = _validate_splits("splits", opts["splits"])
        return opts


class Int8Auto(_Ozaki):
    """Ozaki scheme on INT8 with the slice count chosen per call from the operands' exponents.

    Options:
        threshold: mean mantissa loss (bits) allowed over the nonzero elements of each operand;
            0 keeps every bit of every element.
        max_splits: the most slices (3..20) before falling back to ``native``.
    """

    name = "int8-auto"
    options = {"threshold": 0.0, "max_splits": 16}
    description = "Ozaki scheme on INT8 tensor cores, slices chosen from the data (falls back to native)"

    def _splits_for(self, opts) -> int:
        return opts["max_splits"]

    def check_options(self, options):
        opts = super().check_options(options)
        opts["threshold"] = _validate_threshold(opts["threshold"])
        opts["max_splits"] = _validate_splits("max_splits", opts["max_splits"])
        return opts
