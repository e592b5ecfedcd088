"""CPU stages of the INT8 Ozaki scheme: the reference of the GPU ones (:mod:`gemm.ozaki.gpu`).

The same stage interface as the GPU module (``line_stats``, ``split``, ``products``,
``new_output``, ``accumulate``, ``to_layout``; the array module first), so the method picks one
module per call. The INT8 products are float64 BLAS GEMMs of the slice values: exact, every
partial sum being an integer below 2^31.
"""

from __future__ import annotations

import math

import numpy as np

from gemm.ozaki.plan import Plan, loss_sums_from_deltas


def _parts(X, cplx):
    X2 = X.reshape(-1, X.shape[-1])
    return (X2.real, X2.imag) if cplx else (X2,)


def _operand_stats(X, cplx, want_loss, b, p):
    """Line exponents and (nonzero count, loss sums) of one operand."""
    parts = _parts(X, cplx)
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



def line_stats(xp, XA, XB, cplx, want_loss, b, pa, pb, cached_copy, Xsmall):
    """Line exponents of both operands, non-finite counts, int8-auto loss sums and the cache check.

    Returns:
        (eA, eB, (bad_a, bad_b, stats_a, stats_b, equal)) with stats as ``(nonzero count, loss
        sums)`` (None when not wanted); when an operand holds NaN/Inf only the counts are set.
    """
    bad_a, bad_b = (int(X.size - np.count_nonzero(np.isfinite(X))) for X in (XA, XB))
    if bad_a or bad_b:
        return None, None, (bad_a, bad_b, None, None, False)
    eA, stats_a = _operand_stats(XA, cplx, want_loss, b, pa)
    eB, stats_b = _operand_stats(XB, cplx, want_loss, b, pb)
    equal = cached_copy is not None and np.array_equal(cached_copy, Xsmall)
    return eA, eB, (0, 0, stats_a, stats_b, equal)


def split(xp, X, e, line0, nlines, plan: Plan, role: str):
    """Slices of lines [line0, line0 + nlines) as float64 ``(lines_out, s * Kp)``."""
    s, b, K, Kp, cplx = plan.s, plan.b, plan.K, plan.Kp, plan.cplx
    parts = [q[line0:line0 + nlines] for q in _parts(X, cplx)]
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


def products(xp, SA, sA, SB, sB, plan: Plan):
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


def _accumulate_block(P, plan: Plan, eA, eB):
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



def new_output(xp, plan: Plan, out_shape):
    """The accumulation buffer of a whole product: float64 ``(R, cols')`` (complex interleaved)."""
    return np.empty((plan.R, plan.lines_out("b", plan.NC)), dtype=np.float64)


def accumulate(xp, P, plan: Plan, eA, eB, r0, c0, rows, colsp, out):
    """One block's products (rows ``r0..``, B lines ``c0..``) accumulated into ``out``."""
    f = 2 if plan.cplx else 1
    out[r0:r0 + rows, f * c0:f * c0 + colsp] = _accumulate_block(P, plan, eA[r0:r0 + rows], eB[c0:c0 + colsp // f])


def to_layout(xp, acc_full, plan: Plan, out_shape):
    """The (R, cols') float64 product (:func:`new_output`) in the matmul result layout ``out_shape``."""
    C = acc_full.view(np.complex128) if plan.cplx else acc_full  # (R, NC)
    if len(out_shape) == 3 and out_shape[1] == plan.R and out_shape[0] * out_shape[2] == plan.NC:
        # B was stacked: columns c = h * L + l of the product -> out[h, r, l]
        H, _, L = out_shape
        return np.ascontiguousarray(C.reshape(plan.R, H, L).transpose(1, 0, 2))
    return C.reshape(out_shape)
