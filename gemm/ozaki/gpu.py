"""GPU stages of the INT8 Ozaki scheme: kernels from ``ozaki.cu`` and the INT8 GEMM through
cuBLAS ``gemmEx`` (CUDA_R_8I in, CUDA_R_32I out, CUBLAS_COMPUTE_32I, TN; :func:`gemm.cuda.cublas.gemm_s8`).

The same stage interface as :mod:`gemm.ozaki.cpu` (the array module, cupy here, first), and every
function mirrors the CPU stage operation by operation. cupy comes from the caller; nothing here
imports it at module level.

Two kernel sets compute the same bits: "fast" (default: char4 slice stores, row-blocked
accumulation with paired loads) and "basic" (one element per thread, the first version, kept as
a cross-check); the environment variable ``QSIM_TC_OZAKI_KERNELS=basic`` selects the latter.
"""

from __future__ import annotations

import os

import numpy as np

from gemm.cuda import cublas
from gemm.cuda.compile import raw_module
from gemm.device import sm_count
from gemm.ozaki.plan import SMAX

NSTAT = SMAX + 2  # per operand: [non-finite, nonzero, loss sums s = 1..SMAX]
_i32, _i64 = np.int32, np.int64
FAST = os.environ.get("QSIM_TC_OZAKI_KERNELS", "fast") != "basic"


def _fn(cp, name):
    """Kernel ``name`` of ``ozaki.cu``, compiled once per process and device."""
    return raw_module(__package__, "ozaki.cu", ("-std=c++17",), cp.cuda.Device().id).get_function(name)


def line_view(X):
    """(s_out, s_in, s_k, n_in) in elements of the 3-D line view X = (outer, inner, K)."""
    item = X.dtype.itemsize
    so, si, sk = (st // item for st in X.strides)
    return _i64(so), _i64(si), _i64(sk), _i64(X.shape[1])


def kmajor(X) -> bool:
    """True when a line's elements are closer together than adjacent lines (read along k)."""
    so, si, sk, n_in = (int(v) for v in line_view(X))
    line_stride = si if X.shape[1] > 1 else so
    return abs(sk) <= abs(line_stride) or X.shape[0] * X.shape[1] == 1


def line_stats(cp, XA, XB, cplx, want_loss, b, pa, pb, cached_copy, Xsmall):
    """Line exponents of both operands, non-finite counts, int8-auto loss sums and the cache
    check, with one small host read.

    Returns:
        (eA, eB, (bad_a, bad_b, stats_a, stats_b, equal)) with eA/eB int32 device arrays and
        stats as ``(nonzero count, loss sums)`` (None when not wanted).
    """
    stats = cp.zeros(2 * NSTAT + 1, dtype=cp.uint64)
    es = []
    for i, (X, p) in enumerate(((XA, pa), (XB, pb))):
        nlines = X.shape[0] * X.shape[1]
        K = X.shape[2]
        e = cp.empty(nlines, dtype=cp.int32)
        so, si, sk, n_in = line_view(X)
        args = (X, so, si, sk, n_in, _i64(nlines), _i32(K), _i32(cplx), _i32(want_loss), _i32(b), _i32(p), e,
                stats[i * NSTAT:(i + 1) * NSTAT])
        if kmajor(X):
            blocks = int(min(-(-nlines // 8), 8192))
            _fn(cp, "line_stats_warp")((blocks,), (256,), args)
        else:
            blocks = int(min(-(-nlines // 256), 8192))
            _fn(cp, "line_stats_thread")((blocks,), (256,), args)
        es.append(e)
    if cached_copy is not None:
        stats[2 * NSTAT] = cp.array_equal(cached_copy, Xsmall).astype(cp.uint64)
    host = stats.get()  # the one host read of the call
    out = []
    for i in range(2):
        h = host[i * NSTAT:(i + 1) * NSTAT]
        out.append((int(h[0]), (int(h[1]), h[2:].astype(np.int64)) if want_loss else None))
    equal = bool(host[2 * NSTAT]) if cached_copy is not None else False
    return es[0], es[1], (out[0][0], out[1][0], out[0][1], out[1][1], equal)


def split(cp, X, e, line0, nlines, plan, role):
    """INT8 slices of lines [line0, line0 + nlines) of X: ``(lines_out, s * Kp)``."""
    s, Kp, K = plan.s, plan.Kp, plan.K
    nout = plan.lines_out(role, nlines)
    # lines rounded up to 4 so that a product may cover whole groups of 4 output columns; the
    # extra lines feed only output columns that are never read
    full = cp.empty((-(-nout // 4) * 4, s * Kp), dtype=cp.int8)
    out = full[:nout]
    if Kp > plan.kk:  # the padding columns of every slice must read as zeros
        out.reshape(nout, s, Kp)[:, :, plan.kk:] = 0
    so, si, sk, n_in = line_view(X)
    if FAST and K % 4 == 0:
        name, grid = "split_tile4", (int(-(-nlines // 16)), int(-(-K // 128)))
    else:
        name, grid = "split_tile", (int(-(-nlines // 32)), int(-(-K // 32)))
    _fn(cp, name)(grid, (32, 8), (
        X, so, si, sk, n_in, _i64(line0), _i64(nlines), _i32(K), _i32(plan.cplx), _i32(kmajor(X)), e,
        out, _i64(s * Kp), _i32(Kp), _i32(s), _i32(plan.b), _i32(0 if role == "a" else 1)))
    return out


def products(cp, SA, sA, SB, sB, plan):
    """The grouped slice products as INT32 ``(G, rows of SA, ldP)``: P[g, r, c] = SA_g[r] . SB_g[c]."""
    Kp = plan.Kp
    groups = plan.groups
    rows, cols = SA.shape[0], SB.shape[0]
    ldP = -(-cols // 4) * 4
    P = cp.empty((len(groups), rows, ldP), dtype=cp.int32)
    slab = rows * ldP * 4
    lda_b, ldb_a = sB * Kp, sA * Kp  # bytes per line of SB and SA
    for g, (w, i0, i1) in enumerate(groups):
        L = (i1 - i0 + 1) * Kp
        oa = (i0 - 1) * Kp
        ob = (sB - w + i0) * Kp
        cublas.gemm_s8(ldP, rows, L, SB.data.ptr + ob, lda_b, SA.data.ptr + oa, ldb_a, P.data.ptr + g * slab, ldP)
    return P


def new_output(cp, plan, out_shape):
    """The output of a whole product in its final layout (the blocks accumulate into it)."""
    return cp.empty(out_shape, dtype=np.complex128 if plan.cplx else np.float64)


def accumulate(cp, P, plan, eA, eB, r0, c0, rows, colsp, out):
    """Fused FP64 accumulation and rescaling of one block into the output (its final layout)."""
    total = rows * colsp
    blocks = int(min(-(-total // 256), sm_count(cp) * 64))
    if out.ndim == 3 and out.shape[1] == plan.R and out.shape[0] * out.shape[2] == plan.NC:
        n2 = out.shape[2]  # B stacked: column c = h * L + l
    else:
        n2 = plan.NC
    if FAST:
        ncols = colsp // 2 if plan.cplx else colsp
        threads = int(min(256, -(-ncols // 32) * 32))
        grid = (int(-(-ncols // threads)), int(min(rows, 65535)))
        _fn(cp, "accumulate2")(grid, (threads,), (
            P, _i64(P.shape[1] * P.shape[2]), _i64(P.shape[2]), _i32(rows), _i32(ncols), _i64(r0), _i64(c0),
            eA, eB, _i32(plan.s), _i32(plan.cap), _i32(plan.b), _i32(plan.cplx), out, _i64(plan.R), np.uint32(n2)))
        return
    _fn(cp, "accumulate")((blocks,), (256,), (
        P, _i64(P.shape[1] * P.shape[2]), _i64(P.shape[2]), _i64(rows), _i64(colsp), _i64(r0), _i64(c0),
        eA, eB, _i32(plan.s), _i32(plan.cap), _i32(plan.b), _i32(plan.cplx), out, _i64(plan.R), _i64(n2)))


def to_layout(cp, out, plan, out_shape):
    """The output as it is: :func:`accumulate` writes the final layout."""
    return out
