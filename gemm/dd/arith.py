"""Double-double (DD) arithmetic on numpy or cupy arrays, elementwise and vectorised.

A DD number is an unevaluated sum ``hi + lo`` of two float64 with ``|lo| <= ulp(hi) / 2``
(about 106 significant bits). A complex DD number is held as four float64 arrays
(real hi, real lo, imaginary hi, imaginary lo), or equivalently as two complex128 arrays
``(hi, lo)`` whose real and imaginary parts pair up.

Every function takes the array module implicitly from its arguments (numpy or cupy ufuncs work
on both). Each operation is a separate ufunc call, so no compiler can contract ``a * b + c``
into a fused multiply-add: the results are the same bits on the CPU and the GPU.

Building blocks (Knuth's TwoSum, Dekker's FastTwoSum, Dekker's split with 2^27 + 1 and
Dekker's TwoProd) are error-free: ``s + e`` equals the exact sum or product. Dekker's split
overflows for ``|a| > 2^996``; the DD values this project meets are far below that.
"""

from __future__ import annotations

import numpy as np

SPLITTER = 134217729.0  # 2^27 + 1


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth, any order)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def fast_two_sum(a, b):
    """``(s, e)`` with ``s + e = a + b`` exactly, valid when ``|a| >= |b|`` (or a == 0)."""
    s = a + b
    e = b - (s - a)
    return s, e


def split(a):
    """Dekker's split: ``a = hi + lo``, each with at most 26 significant bits."""
    c = SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    """``(p, e)`` with ``p = fl(a * b)`` and ``p + e = a * b`` exactly (Dekker, no FMA)."""
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def dd_add(ahi, alo, bhi, blo):
    """``a + b`` in DD, the accurate (IEEE-style) variant: relative error ~ 2^-106."""
    s, e = two_sum(ahi, bhi)
    t, f = two_sum(alo, blo)
    e = e + t
    s, e = fast_two_sum(s, e)
    e = e + f
    return fast_two_sum(s, e)


def dd_add_d(ahi, alo, b):
    """``a + b`` for a DD ``a`` and a double ``b``."""
    s, e = two_sum(ahi, b)
    e = e + alo
    return fast_two_sum(s, e)


def dd_mul(ahi, alo, bhi, blo):
    """``a * b`` in DD (relative error ~ 2^-104)."""
    p, e = two_prod(ahi, bhi)
    e = e + (ahi * blo + alo * bhi)
    return fast_two_sum(p, e)


def dd_fma(ahi, alo, bhi, blo, chi, clo):
    """``a * b + c`` in DD."""
    phi, plo = dd_mul(ahi, alo, bhi, blo)
    return dd_add(phi, plo, chi, clo)


# --- complex DD: (hi, lo) pairs of complex128 arrays -------------------------------------------


def cdd_parts(hi, lo):
    """Complex DD ``(hi, lo)`` -> its four float64 arrays ``(re_hi, re_lo, im_hi, im_lo)``."""
    return hi.real, lo.real, hi.imag, lo.imag


def cdd_join(re_hi, re_lo, im_hi, im_lo, xp=np):
    """Four float64 arrays -> complex DD ``(hi, lo)`` of complex128 arrays."""
    shape = tuple(re_hi.shape)
    out = []
    for re, im in ((re_hi, im_hi), (re_lo, im_lo)):
        z = xp.empty(shape or (1,), dtype=np.complex128)
        v = z.view(np.float64)  # interleaved (re, im), last axis doubled
        v[..., 0::2] = re
        v[..., 1::2] = im
        out.append(z.reshape(shape))
    return out[0], out[1]


def cdd_mul(ahi, alo, bhi, blo, xp=np):
    """Complex DD product ``a * b`` of complex DD pairs (each (hi, lo) complex128)."""
    arh, arl, aih, ail = cdd_parts(ahi, alo)
    brh, brl, bih, bil = cdd_parts(bhi, blo)
    rr = dd_mul(arh, arl, brh, brl)
    ii = dd_mul(aih, ail, bih, bil)
    ri = dd_mul(arh, arl, bih, bil)
    ir = dd_mul(aih, ail, brh, brl)
    re = dd_add(rr[0], rr[1], -ii[0], -ii[1])
    im = dd_add(ri[0], ri[1], ir[0], ir[1])
    return cdd_join(re[0], re[1], im[0], im[1], xp)


def dd_sum(hi, lo=None, xp=np):
    """The DD sum of all elements of a real DD array (pairwise tree, accurate add).

    Returns a pair of Python floats ``(hi, lo)``.
    """
    hi = xp.asarray(hi, dtype=np.float64).reshape(-1)
    lo = xp.zeros_like(hi) if lo is None else xp.asarray(lo, dtype=np.float64).reshape(-1)
    if hi.size == 0:
        return 0.0, 0.0
    while hi.size > 1:
        if hi.size % 2:
            hi = xp.concatenate([hi, xp.zeros(1, dtype=hi.dtype)])
            lo = xp.concatenate([lo, xp.zeros(1, dtype=lo.dtype)])
        hi, lo = dd_add(hi[0::2], lo[0::2], hi[1::2], lo[1::2])
    return float(hi[0]), float(lo[0])
