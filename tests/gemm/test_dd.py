"""Double-double arithmetic and the ``dd`` GEMM against exact rationals and mpmath."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest

import gemm
from gemm import dd
from gemm.dd import arith as dd_arith
from gemm.diagnostics import testmats


def _fr(x) -> Fraction:
    return Fraction(float(x))


def _random_doubles(rng, size, lo_exp=-60, hi_exp=60):
    mant = rng.uniform(1, 2, size) * rng.choice([-1.0, 1.0], size)
    return np.ldexp(mant, rng.integers(lo_exp, hi_exp, size))


def _random_dd(rng, size, lo_exp=-60, hi_exp=60):
    hi = _random_doubles(rng, size, lo_exp, hi_exp)
    lo = hi * rng.uniform(-1, 1, size) * 2.0**-53
    hi, lo = dd_arith.fast_two_sum(hi, lo)
    return hi, lo


# --- error-free transformations ----------------------------------------------------------------


def test_two_sum_and_two_prod_are_error_free(rng):
    a = _random_doubles(rng, 300)
    b = _random_doubles(rng, 300)
    b[:100] = -a[:100] * (1 + rng.uniform(-1, 1, 100) * 2.0**-40)  # heavy cancellation
    s, e = dd_arith.two_sum(a, b)
    p, f = dd_arith.two_prod(a, b)
    for i in range(300):
        assert _fr(s[i]) + _fr(e[i]) == _fr(a[i]) + _fr(b[i])
        assert _fr(p[i]) + _fr(f[i]) == _fr(a[i]) * _fr(b[i])
        assert s[i] == a[i] + b[i] and p[i] == a[i] * b[i]


def test_dd_add_mul_fma_against_fractions(rng):
    n = 200
    ah, al = _random_dd(rng, n, -200, 200)
    bh, bl = _random_dd(rng, n, -200, 200)
    ch, cl = _random_dd(rng, n, -200, 200)
    # heavy cancellation: b = -a + tiny, c = -(a*b) + tiny
    bh[:60], bl[:60] = dd_arith.dd_add(-ah[:60], -al[:60], ah[:60] * 2.0**-70, 0.0 * ah[:60])
    sh, sl = dd_arith.dd_add(ah, al, bh, bl)
    mh, ml = dd_arith.dd_mul(ah, al, bh, bl)
    ph, pl = dd_arith.dd_mul(ah, al, bh, bl)
    ch[60:120], cl[60:120] = -ph[60:120], -pl[60:120] + ph[60:120] * 2.0**-90
    fh, fl = dd_arith.dd_fma(ah, al, bh, bl, ch, cl)
    worst_add = worst_mul = worst_fma = 0.0
    for i in range(n):
        a = _fr(ah[i]) + _fr(al[i])
        b = _fr(bh[i]) + _fr(bl[i])
        c = _fr(ch[i]) + _fr(cl[i])
        s, m, f = a + b, a * b, a * b + c
        if s:
            worst_add = max(worst_add, abs(float((_fr(sh[i]) + _fr(sl[i]) - s) / s)))
        worst_mul = max(worst_mul, abs(float((_fr(mh[i]) + _fr(ml[i]) - m) / m)))
        # fma: the rounding of the product counts against |a b| + |c|, not the cancelled sum
        worst_fma = max(worst_fma, abs(float((_fr(fh[i]) + _fr(fl[i]) - f) / (abs(m) + abs(c)))))
        assert abs(sl[i]) <= abs(sh[i]) * 2.0**-52  # normalised
    assert worst_add < 2.0**-103
    assert worst_mul < 2.0**-101
    assert worst_fma < 2.0**-100


def test_dd_sum_is_accurate(rng):
    x = rng.standard_normal(1000) * np.exp(rng.uniform(-20, 20, 1000))
    x = np.concatenate([x, -x[:500]])  # cancels half of it exactly
    hi, lo = dd_arith.dd_sum(x)
    exact = sum(_fr(v) for v in x)
    assert abs(float(_fr(hi) + _fr(lo) - exact)) <= abs(float(exact)) * 2.0**-100


# --- the DD GEMM -------------------------------------------------------------------------------


def _mp_matmul(ahi, alo, bhi, blo):
    mpmath.mp.prec = 320
    m, k = ahi.shape
    n = bhi.shape[1]
    A = [[mpmath.mpc(complex(ahi[i, t])) + mpmath.mpc(complex(alo[i, t])) for t in range(k)] for i in range(m)]
    B = [[mpmath.mpc(complex(bhi[t, j])) + mpmath.mpc(complex(blo[t, j])) for j in range(n)] for t in range(k)]
    return [[mpmath.fsum(A[i][t] * B[t][j] for t in range(k)) for j in range(n)] for i in range(m)]


def _max_rel(chi, clo, ref):
    worst = 0.0
    for i in range(chi.shape[0]):
        for j in range(chi.shape[1]):
            got = mpmath.mpc(complex(chi[i, j])) + mpmath.mpc(complex(clo[i, j]))
            worst = max(worst, float(abs(got - ref[i][j]) / abs(ref[i][j])))
    return worst


@pytest.mark.parametrize("k", [1, 16, 256])
@pytest.mark.parametrize("kind", ["complex", "real"])
def test_dd_gemm_against_mpmath(rng, k, kind):
    m, n = 4, 3
    cplx = kind == "complex"
    gen = testmats.complex_urand if cplx else testmats.urand
    ahi, bhi = gen(m, k, rng), gen(k, n, rng)
    alo = gen(m, k, rng) * 2.0**-54
    blo = gen(k, n, rng) * 2.0**-54
    ahi, alo = ahi + alo - alo, alo  # hi stays exact; lo is a genuine low part
    chi, clo = dd.matmul_pair((ahi, alo), (bhi, blo))
    assert chi.dtype == (np.complex128 if cplx else np.float64)
    ref = _mp_matmul(ahi, alo, bhi, blo)
    assert _max_rel(chi, clo, ref) < 1e-28


def test_dd_gemm_wide_exponents_against_mpmath(rng):
    # phi = 2 spreads the elements over ~20 binades; still well inside the split's 116 bits
    a = testmats.complex_phi_matrix(3, 64, 2.0, rng)
    b = testmats.complex_phi_matrix(64, 3, 2.0, rng)
    chi, clo = dd.matmul_pair(a, b)
    ref = _mp_matmul(a, 0 * a, b, 0 * b)
    assert _max_rel(chi, clo, ref) < 1e-28


def test_dd_cancellation_pair(rng):
    a, ainv = testmats.cancel_pair(24, rng)
    chi, clo = dd.matmul_pair(a, ainv)
    ref = _mp_matmul(a, 0 * a, ainv, 0 * ainv)
    scale = float(np.abs(a).sum(axis=1).max() * np.abs(ainv).max())
    worst = max(abs(float((mpmath.mpf(chi[i, j]) + mpmath.mpf(clo[i, j]) - ref[i][j].real)))
                for i in range(24) for j in range(24))
    assert worst < 1e-30 * scale


def test_default_output_is_rounded_pair_hi(rng):
    a = testmats.complex_urand(50, 8, rng)
    b = testmats.complex_urand(8, 6, rng)
    c = gemm.matmul(a, b, method="dd")
    hi, lo = gemm.matmul(a, b, method="dd", output="pair")
    assert np.array_equal(c, hi)
    assert np.array_equal(hi + lo, hi)  # hi is the rounded value
    np.testing.assert_allclose(c, a @ b, rtol=0, atol=1e-14)


def test_batched_forms_and_noncontiguous_inputs(rng):
    s = testmats.complex_urand(64, 8, rng)
    u = testmats.complex_urand(8, 8, rng)
    s_copy, u_copy = s.copy(), u.copy()
    bottom = gemm.matmul(s, u.T, method="dd")  # u.T is a transposed view
    assert np.array_equal(s, s_copy) and np.array_equal(u, u_copy)
    stacked = gemm.matmul(s.reshape(4, 16, 8), u.T, method="dd")
    assert np.array_equal(stacked.reshape(64, 8), bottom)
    st = testmats.complex_urand(3 * 8 * 5, 1, rng).reshape(3, 8, 5)
    top = gemm.matmul(u, st, method="dd")
    for h in range(3):
        assert np.array_equal(top[h], gemm.matmul(u, np.ascontiguousarray(st[h]), method="dd"))
    both = gemm.matmul(st.transpose(0, 2, 1), st, method="dd")
    np.testing.assert_allclose(both, st.transpose(0, 2, 1) @ st, atol=1e-14)


def test_chunking_does_not_change_bits(rng):
    a = testmats.complex_urand(300, 16, rng)
    b = testmats.complex_urand(16, 16, rng)
    one = gemm.matmul(a, b, method="dd", output="pair")
    many = gemm.matmul(a, b, method="dd", output="pair", chunk_rows=7)
    assert np.array_equal(one[0], many[0]) and np.array_equal(one[1], many[1])


def test_float32_operands_are_taken_exactly(rng):
    a = testmats.urand(5, 40, rng, dtype=np.float32)
    b = testmats.urand(40, 4, rng, dtype=np.float32)
    c = gemm.matmul(a, b, method="dd")
    assert c.dtype == np.float64
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-14)


def test_plan_pieces_is_exact_and_covers_bits():
    for kp in (2, 32, 512, 2048, 8192):
        b, n = dd.plan_pieces(kp)
        assert n * kp * 2.0 ** (2 * b) <= 2.0**53
        assert b * n >= 116
    with pytest.raises(ValueError, match="too large"):
        dd.plan_pieces(2**50)


def test_dd_bad_input(rng):
    a = testmats.urand(4, 4, rng)
    with pytest.raises(ValueError, match="output='hi'"):
        gemm.matmul(a, a, method="dd", output="hi")
    with pytest.raises(ValueError, match="bits=20"):
        gemm.matmul(a, a, method="dd", bits=20)
    with pytest.raises(ValueError, match="a_lo has shape"):
        gemm.matmul(a, a, method="dd", a_lo=np.zeros((3, 4)))
    with pytest.raises(TypeError, match="b_lo is complex"):
        gemm.matmul(a, a, method="dd", b_lo=np.zeros((4, 4), complex))
    with pytest.raises(ValueError, match="GPU only"):
        gemm.matmul(a, a, method="dd", algorithm="fma")
    bad = a.copy()
    bad[1, 2] = np.nan
    with pytest.raises(gemm.NonFiniteError, match="b holds 1 NaN/Inf"):
        gemm.matmul(a, bad, method="dd")
    with pytest.raises(gemm.NonFiniteError, match="a_lo holds"):
        gemm.matmul(a, a, method="dd", a_lo=bad)
    with pytest.raises(TypeError, match="unknown option"):
        gemm.matmul(a, a, method="dd", splits=3)
