"""CPU stages of the CRT scheme, and the reference of the GPU ones (:mod:`gemm.ozaki.crt.gpu`).

The same stage interface as the GPU module (the array module first): ``line_exponents``,
``residues``, ``products``, ``new_output``, ``reconstruct``, ``to_layout``. Every value here is an
exact integer held in float64 until the last rounding, so the order of operations matters only in
:func:`finish`, which the GPU kernel ``crt_reconstruct`` repeats operation by operation; the
products are float64 BLAS GEMMs of the residues, exact while ``k' * 128^2 < 2^53`` (every partial
sum is an integer of that size).
"""

from __future__ import annotations

import numpy as np

from gemm.ozaki.crt import scale
from gemm.ozaki.crt.moduli import D, Moduli

KP_ALIGN = 1  # residue lines need no padding for BLAS
ITEM_RES, ITEM_PROD = 8, 8  # bytes per residue and per product value (float64 here)


def mod(v, p: float, inv_p: float):
    """``v mod p`` in ``[0, p)`` for integer-valued float64 ``|v| < 2^41`` (exact).

    ``floor(v * inv_p)`` is off by at most one (its relative error 2^-52 times ``|v|/p < 2^41``
    is below 2^-11, and a non-integer ``v/p`` is at least ``1/p >= 2^-8`` from an integer), the
    product ``q * p < 2^41`` and the difference are exact, and one correction each way fixes
    the quotient.
    """
    q = np.floor(v * inv_p)
    r = v - q * p
    r = np.where(r < 0, r + p, r)
    return np.where(r >= p, r - p, r)


def sym(r, p: float):
    """A residue in ``[0, p)`` moved to the symmetric range ``[-floor(p/2), ceil(p/2) - 1]``:
    at most 128 in magnitude, so INT8 holds it (p = 256 gives [-128, 127])."""
    return np.where(r > np.floor((p - 1) / 2), r - p, r)


def _parts(X, cplx):
    X2 = X.reshape(-1, X.shape[-1])
    return (X2.real, X2.imag) if cplx else (X2,)


def line_exponents(xp, XA, XB, cplx, want_hist):
    """Norm exponents of A's rows and B's columns (:func:`gemm.ozaki.crt.scale.line_exponents`).

    Args:
        XA, XB: the line views ``(outer, inner, K)`` of A and B.
        cplx: complex operands.
        want_hist: also return the depth histograms (for the choice of the moduli count).

    Returns:
        ``(E_a, E_b, (bad_a, bad_b, hist_a, hist_b))``.
    """
    ea, bad_a, ha = scale.line_exponents(_parts(XA, cplx), want_hist)
    eb, bad_b, hb = scale.line_exponents(_parts(XB, cplx), want_hist)
    return ea, eb, (bad_a, bad_b, ha, hb)


def _neg(r, p):
    return sym(mod(-r, p, 1.0 / p), p)


def residues(xp, X, E, bits, line0, nlines, mods: Moduli, form, role, kp):
    """Residues of lines ``[line0, line0 + nlines)`` scaled to ``bits`` (alpha or beta), float64
    ``(n, parts, lines_out, kp)`` in the symmetric range.

    Per modulus p: ``r = sym(((hi mod p) (2^40 mod p) + lo mod p) mod p)`` from the exact split
    of :func:`gemm.ozaki.crt.scale.scaled_integers`. Complex parts by form: 4m A-lines
    ``[r_re | r_im]`` and two B-lines per column ``[r_re | -r_im]``, ``[r_im | r_re]``; 3m
    ``r_re, r_im, sym(r_re + r_im)``; 2m ``sym(r_re + s r_im), sym(r_re - s r_im)`` with
    ``s^2 = -1 (mod p)``. Negation and sums are reduced again (-(-128) is -128 modulo 256).
    """
    cplx = form is not None
    parts = [q[line0:line0 + nlines] for q in _parts(X, cplx)]
    shift = scale.shifts(E[line0:line0 + nlines], bits)
    split = [scale.scaled_integers(q, shift) for q in parts]
    K = parts[0].shape[1]
    n = len(mods)
    out = None
    for i in range(n):
        p, inv_p, c40, s = mods.table[i, :4]
        r = [sym(mod(mod(hi, p, inv_p) * c40 + mod(lo, p, inv_p), p, inv_p), p) for hi, lo in split]
        if form is None:
            lines = [r[0]]
        elif form == "4m":
            if role == "a":
                lines = [np.concatenate(r, axis=1)]
            else:
                two = np.empty((nlines, 2, 2 * K))
                two[:, 0, :K], two[:, 0, K:] = r[0], _neg(r[1], p)
                two[:, 1, :K], two[:, 1, K:] = r[1], r[0]
                lines = [two.reshape(2 * nlines, 2 * K)]
        elif form == "3m":
            lines = [r[0], r[1], sym(mod(r[0] + r[1], p, inv_p), p)]
        else:  # 2m
            lines = [sym(mod(r[0] + s * r[1], p, inv_p), p), sym(mod(r[0] - s * r[1], p, inv_p), p)]
        if out is None:
            out = np.zeros((n, len(lines), lines[0].shape[0], kp))
        for g, v in enumerate(lines):
            out[i, g, :, :v.shape[1]] = v
    return out


def products(xp, RA, RB, mods: Moduli, form):
    """The residue products ``P[i, g] = RA[i, g] @ RB[i, g].T``, float64 ``(n, G, rows, cols')``
    (exact integers), as one batched BLAS call."""
    return np.matmul(RA, RB.transpose(0, 1, 3, 2))


def product_residues(P, mods: Moduli):
    """The products reduced to the symmetric range modulo their moduli: float64, P's shape
    ``(n, G, rows, cols')``, every value in ``[-128, 127]``."""
    U = np.empty_like(P)
    for i, p in enumerate(mods.table[:, 0]):  # a modulus at a time: mod's temporaries stay small
        U[i] = sym(mod(P[i], p, 1.0 / p), p)
    return U


def combine(U, i, form, part):
    """Re (``part`` 0) or Im (1) of modulus i from its products' residues ``U[i]`` (not reduced
    again: magnitudes at most 384, as :meth:`Moduli.weights` assumes)."""
    if form is None:
        return U[i, 0]
    if form == "4m":
        return U[i, 0][:, part::2]
    if form == "3m":
        return U[i, 0] - U[i, 1] if part == 0 else U[i, 2] - U[i, 0] - U[i, 1]
    return U[i, 0] + U[i, 1] if part == 0 else U[i, 0] - U[i, 1]


def crt_values(U, form, part):
    """``c_i`` of every modulus for one part: float64 ``(rows, cols, n)``."""
    return np.stack([combine(U, i, form, part) for i in range(U.shape[0])], axis=-1)


def finish(C, weights, mods: Moduli, shift):
    """``C' = sum_i c_i w_i - q P`` rounded once to float64, times ``2^-shift``.

    1. Words: ``S_w = sum_i c_i w_iw`` (exact: products and sums are integers below 2^51), and
       ``q`` the integer nearest ``S / P``, estimated from the top two words (those below add
       less than 2^-24 to the ratio, ``P >= 2^(D (W - 1))``; ``|S / P - q| = |C'| / P <= 1/4``
       leaves no doubt); ``S_w -= q P_w``, exact.
    2. Carries, least significant word first: ``c = floor(S_w 2^-D + 1/2)``, ``S_w -= c 2^D``,
       ``S_(w+1) += c`` (exact), so every word but the top one lies in ``[-2^(D-1), 2^(D-1))``.
       These balanced digits of ``C'`` are unique (ties carry upwards), so they do not depend on
       which representatives ``c_i`` the products gave, and with the leading nonzero word fixing
       the magnitude no cancellation is left for the floating-point sum.
    3. ``C' = sum_w S_w 2^(Dw)`` most significant first with TwoSum into ``(hi, lo)``: the top
       two words (76 bits) are exact, every lower word adds at most 2^-105 of the partial sum,
       and ``hi + lo`` is the one rounding (error <= u |C'| (1 + 2^-100)).
    4. ``ldexp(., -shift)`` is exact unless the result is subnormal.

    The GPU kernel ``crt_reconstruct`` computes the same words and repeats steps 2-4 operation
    by operation (its quotient is computed differently but is the same integer).
    """
    W = mods.words
    S = C @ weights
    top = S[..., W - 1] if W == 1 else np.ldexp(S[..., W - 1], D * (W - 1)) + np.ldexp(S[..., W - 2], D * (W - 2))
    q = np.rint(top * mods.inv_P)
    S -= q[..., None] * mods.digits_p
    for w in range(W - 1):
        c = np.floor(S[..., w] * 2.0 ** -D + 0.5)
        S[..., w] -= c * 2.0 ** D
        S[..., w + 1] += c
    hi = np.ldexp(S[..., W - 1], D * (W - 1))
    lo = np.zeros_like(hi)
    for w in range(W - 2, -1, -1):
        x = np.ldexp(S[..., w], D * w)
        s = hi + x
        bb = s - hi
        lo = lo + ((hi - (s - bb)) + (x - bb))
        hi = s
    return np.ldexp(hi + lo, -shift)


def new_output(xp, R, NC, dtype, out_shape):
    """The output of a whole product as ``(R, NC)`` lines (:func:`to_layout` makes it ``out_shape``)."""
    return np.empty((R, NC), dtype=dtype)


def reconstruct(xp, P, mods: Moduli, form, E_a, E_b, r0, c0, cols, out):
    """One block's products (rows ``r0..``, ``cols`` B lines from ``c0``) rebuilt into ``out``."""
    rows = P.shape[2]
    shift = (scale.shifts(E_a[r0:r0 + rows], mods.alpha)[:, None]
             + scale.shifts(E_b[c0:c0 + cols], mods.beta)[None, :])
    U = product_residues(P, mods)
    wts = mods.weights(form)
    re = finish(crt_values(U, form, 0), wts[0], mods, shift)
    blk = out[r0:r0 + rows, c0:c0 + cols]
    if form is None:
        blk[...] = re
    else:
        blk.real = re
        blk.imag = finish(crt_values(U, form, 1), wts[1], mods, shift)


def to_layout(xp, C, R, NC, out_shape):
    """The ``(R, NC)`` product in the matmul result layout ``out_shape``."""
    if len(out_shape) == 3 and out_shape[1] == R and out_shape[0] * out_shape[2] == NC:
        # B was stacked: column c = h * L + l of the product -> out[h, r, l]
        H, _, L = out_shape
        return np.ascontiguousarray(C.reshape(R, H, L).transpose(1, 0, 2))
    return C.reshape(out_shape)
