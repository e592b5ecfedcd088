"""The INT8 Ozaki scheme (methods int8 and int8-auto) on the CPU: accuracy against DD and exact
references, the complex formulation, bad input, blocking, the slice cache, engine and CLI."""

import json
from fractions import Fraction

import numpy as np
import pytest

import gemm
from gemm import ozaki
from gemm.diagnostics import testmats
from gemm.ozaki import plan


def _dd(a, b):
    """(hi, lo) of the double-double product."""
    return gemm.matmul(a, b, method="dd", output="pair")


def _mean_rel(c, ref):
    hi, lo = ref
    err = np.abs((c - hi) - lo)
    return float(np.mean(err / np.abs(hi)))


def _exact(a, b):
    """The exactly rounded product (rational arithmetic; small sizes only)."""
    m, k = a.shape
    n = b.shape[1]
    fa = [[Fraction(float(a[i, t])) for t in range(k)] for i in range(m)]
    fb = [[Fraction(float(b[t, j])) for j in range(n)] for t in range(k)]
    return np.array([[float(sum(fa[i][t] * fb[t][j] for t in range(k))) for j in range(n)] for i in range(m)])


# --- options ---------------------------------------------------------------------------------


def test_registered_and_options():
    assert {"int8", "int8-auto"} <= set(gemm.methods())
    assert gemm.get_method("int8").options == {"splits": 13}
    assert set(gemm.get_method("int8-auto").options) == {"threshold", "max_splits"}


@pytest.mark.parametrize("opts, exc, match", [
    ({"splits": 2}, ValueError, r"option splits=2 is not valid; expected an int in 3\.\.20"),
    ({"splits": 21}, ValueError, r"option splits=21 is not valid; expected an int in 3\.\.20"),
    ({"splits": 7.0}, TypeError, r"option splits must be an int in 3\.\.20, got 7\.0 \(float\)"),
    ({"splits": True}, TypeError, r"splits must be an int"),
    ({"threshold": 1}, TypeError, r"method 'int8' got unknown option\(s\) threshold"),
])
def test_int8_bad_options(opts, exc, match):
    a = np.ones((2, 2))
    with pytest.raises(exc, match=match):
        gemm.matmul(a, a, method="int8", **opts)


@pytest.mark.parametrize("opts, exc, match", [
    ({"threshold": -1}, ValueError, r"option threshold=-1 is not valid; expected a finite number >= 0 \(bits of mean mantissa loss\)"),
    ({"threshold": float("nan")}, ValueError, r"option threshold=nan is not valid; expected a finite number >= 0"),
    ({"threshold": "0"}, TypeError, r"option threshold must be a finite number >= 0 .*, got '0' \(str\)"),
    ({"max_splits": 30}, ValueError, r"option max_splits=30 is not valid; expected an int in 3\.\.20"),
    ({"splits": 9}, TypeError, r"method 'int8-auto' got unknown option\(s\) splits"),
])
def test_auto_bad_options(opts, exc, match):
    a = np.ones((2, 2))
    with pytest.raises(exc, match=match):
        gemm.matmul(a, a, method="int8-auto", **opts)


def test_bad_operands_are_clear_errors():
    with pytest.raises(TypeError, match=r"a has dtype int64"):
        gemm.matmul(np.ones((2, 2), dtype=np.int64), np.ones((2, 2)), method="int8")
    with pytest.raises(ValueError, match=r"inner dimensions differ"):
        gemm.matmul(np.ones((2, 3)), np.ones((2, 2)), method="int8-auto")


# --- the numerics ----------------------------------------------------------------------------


def test_bits_per_slice_and_groups():
    assert plan.bits_per_slice(1024) == 7
    assert plan.bits_per_slice(2**18) == 6  # (31 - 18) // 2
    assert plan.bits_per_slice(2**20) == 5
    with pytest.raises(ValueError, match=r"inner dimension too long .*k'=1073741824"):
        plan.bits_per_slice(2**30)
    # every chunk's worst case sum fits INT32
    for kk in (16, 2048, 8192, 2**17):
        b = plan.bits_per_slice(kk)
        cap = plan.group_capacity(kk, b)
        assert cap * kk * (2**b - 1) ** 2 < 2**31
    groups = plan.slice_groups(5, 2)
    pairs = sorted((i, w - i) for w, i0, i1 in groups for i in range(i0, i1 + 1))
    assert pairs == sorted((i, j) for i in range(1, 6) for j in range(1, 6) if i + j <= 6)
    assert [w for w, _, _ in groups] == sorted([w for w, _, _ in groups], reverse=True)


def test_exact_against_rationals(rng):
    a = rng.standard_normal((6, 40))
    b = rng.standard_normal((40, 5))
    ref = _exact(a, b)
    c = gemm.matmul(a, b, method="int8", splits=13)
    # 13 slices of 7 bits keep 91 bits below each line's maximum: every element of these operands
    # is split exactly, every slice product is exact, the double-double sum holds the exact value
    # and is rounded once: the correctly rounded product, bit for bit
    assert np.array_equal(c, ref), np.max(np.abs(c - ref) / np.abs(ref))
    c3 = gemm.matmul(a, b, method="int8", splits=3)
    assert np.max(np.abs(c3 - ref) / np.abs(ref)) > 1e-7  # 3 slices really truncate


@pytest.mark.parametrize("phi", [0.1, 1.0, 2.0, 4.0])
def test_phi_13_splits_at_or_below_dgemm(phi):
    rng = np.random.default_rng(int(phi * 10) + 7)
    a = testmats.phi_matrix(64, 1024, phi, rng)
    b = testmats.phi_matrix(1024, 64, phi, rng)
    ref = _dd(a, b)
    e_int8 = _mean_rel(gemm.matmul(a, b, method="int8", splits=13), ref)
    e_native = _mean_rel(a @ b, ref)
    assert e_int8 <= e_native, (phi, e_int8, e_native)
    if phi == 0.1:
        e9 = _mean_rel(gemm.matmul(a, b, method="int8", splits=9), ref)
        assert e9 <= e_native, (e9, e_native)
    if phi == 4.0:  # and it is a real test: 5 slices are far worse than DGEMM here
        e5 = _mean_rel(gemm.matmul(a, b, method="int8", splits=5), ref)
        assert e5 > 10 * e_native


def test_cancellation_beats_dgemm(rng):
    a, ainv = testmats.cancel_pair(128, rng)
    hi, lo = _dd(a, ainv)
    err = lambda c: float(np.linalg.norm((c - hi) - lo))  # noqa: E731
    e_int8 = err(gemm.matmul(a, ainv, method="int8", splits=13))
    e_auto = err(gemm.matmul(a, ainv, method="int8-auto"))
    e_native = err(a @ ainv)
    assert e_int8 < e_native and e_auto < e_native, (e_int8, e_auto, e_native)


def test_exact_against_rationals_wide_range_and_complex(rng):
    """Correct rounding also with elements spread over binades (phi = 2) and for complex operands
    (Re and Im each one exactly rounded real sum of 2k products)."""
    a = testmats.phi_matrix(5, 32, 2.0, rng)
    b = testmats.phi_matrix(32, 4, 2.0, rng)
    assert np.array_equal(gemm.matmul(a, b, method="int8", splits=13), _exact(a, b))
    A = rng.standard_normal((4, 12)) + 1j * rng.standard_normal((4, 12))
    B = rng.standard_normal((12, 3)) + 1j * rng.standard_normal((12, 3))
    c = gemm.matmul(A, B, method="int8", splits=13)
    lhs = np.hstack([A.real, A.imag])  # numpy's parts: independent of the method's complex stacking
    assert np.array_equal(c.real, _exact(lhs, np.vstack([B.real, -B.imag])))
    assert np.array_equal(c.imag, _exact(lhs, np.vstack([B.imag, B.real])))


def test_complex_equals_real_stacked_formulation(rng):
    m, k, n = 9, 37, 11
    A = testmats.complex_phi_matrix(m, k, 1.0, rng)
    B = testmats.complex_phi_matrix(k, n, 1.0, rng)
    c = gemm.matmul(A, B, method="int8", splits=8)
    a2 = np.hstack([A.real, A.imag])
    b2 = np.block([[B.real, B.imag], [-B.imag, B.real]])
    c2 = gemm.matmul(a2, b2, method="int8", splits=8)
    assert np.array_equal(c.real, c2[:, :n]) and np.array_equal(c.imag, c2[:, n:])
    # and close to native within the scheme's bound (FP64 level at 13 slices)
    c13 = gemm.matmul(A, B, method="int8", splits=13)
    bound = 8 * 2.0**-53 * (np.abs(A) @ np.abs(B))
    assert np.all(np.abs(c13 - A @ B) <= bound)


@pytest.mark.parametrize("shape_a, shape_b", [
    ((33, 16), (16, 16)),        # bottom: S @ U.T
    ((16, 16), (16, 40)),        # top: U @ S
    ((16, 16), (3, 16, 8)),      # batched: U @ S[h]
    ((3, 12, 16), (16, 5)),      # stacked A
    ((3, 12, 16), (3, 16, 5)),   # both stacked
])
@pytest.mark.parametrize("cplx", [False, True])
def test_matmul_semantics_and_inputs_untouched(rng, shape_a, shape_b, cplx):
    def gen(shape):
        x = rng.standard_normal(shape)
        return x + 1j * rng.standard_normal(shape) if cplx else x
    a, b = gen(shape_a), gen(shape_b)
    a0, b0 = a.copy(), b.copy()
    c = gemm.matmul(a, b, method="int8-auto")
    ref = np.matmul(a, b)
    assert c.shape == ref.shape and c.dtype == ref.dtype
    assert np.allclose(c, ref, rtol=0, atol=1e-13 * np.abs(ref).max())
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


def test_non_contiguous_operands(rng):
    u = rng.standard_normal((16, 16)) + 1j * rng.standard_normal((16, 16))
    s = rng.standard_normal((40, 32)) + 1j * rng.standard_normal((40, 32))
    sv = s[:, ::2]  # strided rows
    c = gemm.matmul(sv, u.T, method="int8", splits=13)
    assert np.allclose(c, sv @ u.T, rtol=0, atol=1e-13)


def test_float32_operands_give_float32(rng):
    a = rng.standard_normal((5, 8)).astype(np.float32)
    b = rng.standard_normal((8, 3)).astype(np.float32)
    c, rep = gemm.matmul(a, b, method="int8-auto", return_report=True)
    assert c.dtype == np.float32
    assert rep.choices["splits"] <= 6  # 24-bit mantissas need far fewer slices than 53-bit ones
    assert np.allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6)


# --- int8-auto -------------------------------------------------------------------------------


def test_auto_loss_statistics_and_choice():
    # a line [1, 2^-10]: the small element sits 10 binades down, so it needs s*7 >= 63
    a = np.array([[1.0, 2.0**-10 * 1.5]])
    b = np.array([[1.0], [1.0]])
    c, rep = gemm.matmul(a, b, method="int8-auto", threshold=0, return_report=True)
    assert rep.choices["splits"] == 9  # 63 >= 53 + 10
    assert c[0, 0] == a[0, 0] + a[0, 1]
    # mean loss over the two elements: at s = 8 the small one loses 7 bits -> mean 3.5
    _, rep = gemm.matmul(a, b, method="int8-auto", threshold=3.5, return_report=True)
    assert rep.choices["splits"] == 8
    assert rep.choices["mean_loss_bits"]["a"] == 3.5


def test_auto_threshold_zero_loses_no_bit(rng):
    """threshold=0 promises that no element loses a bit: A @ I must give A back bit for bit.
    Rows hold a 1.0 and full 53-bit mantissas up to 11 binades below it, so the last slice
    is needed; one slice fewer truncates the smallest elements (an accuracy loss, whatever the
    reported split count)."""
    a = rng.uniform(1, 2, (8, 16)) * np.exp2(-rng.integers(0, 12, (8, 16))) * rng.choice([-1, 1], (8, 16))
    a[:, 0] = 1.0
    for cplx in (False, True):
        x = a + 1j * a[::-1] if cplx else a
        c = gemm.matmul(x, np.eye(16, dtype=x.dtype), method="int8-auto", threshold=0)
        assert np.array_equal(c, x), float(np.max(np.abs(c - x) / np.abs(x)))
    # the test has power: with one slice fewer than the rule asks for, A is not reproduced
    s = gemm.matmul(a, np.eye(16), method="int8-auto", threshold=0, return_report=True)[1].choices["splits"]
    assert not np.array_equal(gemm.matmul(a, np.eye(16), method="int8", splits=s - 1), a)


def test_auto_threshold_one_uses_fewer_splits(rng):
    a = testmats.phi_matrix(32, 64, 1.0, rng)
    b = testmats.phi_matrix(64, 32, 1.0, rng)
    s0 = gemm.matmul(a, b, method="int8-auto", threshold=0, return_report=True)[1].choices["splits"]
    s1 = gemm.matmul(a, b, method="int8-auto", threshold=1, return_report=True)[1].choices["splits"]
    assert s1 < s0


def test_huge_exponent_spread_falls_back(rng):
    a = rng.standard_normal((4, 8))
    a[0, 0] = 1e300
    a[0, 1] = 1e-300
    b = rng.standard_normal((8, 3))
    c, rep = gemm.matmul(a, b, method="int8-auto", max_splits=16, return_report=True)
    assert rep.choices["fallback"] is True and rep.choices["splits"] is None
    assert any("fell back to native" in n and "max_splits=16" in n for n in rep.notes)
    assert np.array_equal(c, a @ b)


# --- bad input and edge cases ----------------------------------------------------------------


@pytest.mark.parametrize("method", ["int8", "int8-auto"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_is_an_error(method, bad):
    a = np.ones((3, 4))
    b = np.ones((4, 2))
    b[1, 1] = bad
    with pytest.raises(gemm.NonFiniteError, match=r"b holds 1 NaN/Inf element\(s\)"):
        gemm.matmul(a, b, method=method)
    z = np.ones((3, 4), dtype=complex)
    z[2, 3] = complex(0, bad)
    with pytest.raises(gemm.NonFiniteError, match=r"a holds 1 NaN/Inf"):
        gemm.matmul(z, np.ones((4, 2), dtype=complex), method=method)


@pytest.mark.parametrize("method", ["int8", "int8-auto"])
def test_zero_rows_columns_and_matrices(rng, method):
    a = rng.standard_normal((5, 6)) + 1j * rng.standard_normal((5, 6))
    b = rng.standard_normal((6, 4)) + 1j * rng.standard_normal((6, 4))
    a[2] = 0
    b[:, 1] = 0
    c = gemm.matmul(a, b, method=method)
    assert np.all(c[2] == 0) and np.all(c[:, 1] == 0)
    z = gemm.matmul(np.zeros((3, 4)), np.zeros((4, 2)), method=method)
    assert z.shape == (3, 2) and np.all(z == 0)


def test_long_k_shrinks_b_and_stays_exact(rng):
    k = 1 << 19
    # 20-bit mantissas: every product is exact in float64 and math.fsum rounds the sum once
    a = np.round(rng.uniform(-1, 1, (2, k)) * 2**20) / 2**20
    b = np.round(rng.uniform(-1, 1, (k, 2)) * 2**20) / 2**20
    c, rep = gemm.matmul(a, b, method="int8-auto", return_report=True)
    assert rep.choices["bits_per_slice"] == 6
    import math
    ref = np.array([[math.fsum(a[i] * b[:, j]) for j in range(2)] for i in range(2)])
    assert np.all(np.abs(c - ref) <= 2 * 2.0**-53 * np.abs(ref))


# --- blocks and cache ------------------------------------------------------------------------


@pytest.mark.parametrize("shape_a, shape_b", [((300, 16), (16, 16)), ((16, 16), (4, 16, 80))])
def test_blocks_give_the_same_result(rng, monkeypatch, shape_a, shape_b):
    a = rng.standard_normal(shape_a) + 1j * rng.standard_normal(shape_a)
    b = rng.standard_normal(shape_b) + 1j * rng.standard_normal(shape_b)
    one = gemm.matmul(a, b, method="int8", splits=9)
    monkeypatch.setitem(plan.BLOCK_BYTES, "cpu", 1)  # 32 lines per block
    many, rep = gemm.matmul(a, b, method="int8", splits=9, return_report=True)
    assert rep.choices["blocks"] > 1
    assert np.array_equal(one, many)


def test_cache_hits_and_never_goes_stale(rng):
    ozaki.CACHE.clear()
    s = rng.standard_normal((64, 16))
    u = rng.standard_normal((16, 16))
    c1, r1 = gemm.matmul(s, u.T, method="int8", splits=9, return_report=True)
    c2, r2 = gemm.matmul(s, u.T, method="int8", splits=9, return_report=True)
    assert not r1.choices["cache_hit"] and r2.choices["cache_hit"]
    assert np.array_equal(c1, c2)
    u[3, 4] += 1e-9  # changed in place: the cached slices must not be used
    c3, r3 = gemm.matmul(s, u.T, method="int8", splits=9, return_report=True)
    assert not r3.choices["cache_hit"]
    assert np.allclose(c3, s @ u.T, rtol=0, atol=1e-13)
    # a hit with fewer slices reuses the larger set
    _, r4 = gemm.matmul(s, u.T, method="int8", splits=7, return_report=True)
    assert r4.choices["cache_hit"]


def test_report_and_workspace(rng):
    a = rng.standard_normal((64, 16)) + 0j
    b = rng.standard_normal((16, 16)) + 0j
    _, rep = gemm.matmul(a, b, method="int8", splits=7, return_report=True)
    ch = rep.choices
    assert ch["splits"] == 7 and ch["bits_per_slice"] == 7 and ch["fallback"] is False
    assert ch["slice_pairs"] == 28 and ch["int8_gemms"] == 7
    assert rep.workspace_bytes >= ch["slice_bytes"] > 0
    assert {"split", "int8_gemm", "accumulate"} <= set(rep.stages)
    # the engine's memory check: a 28-qubit d = 10 gate stays within the block budget
    ws = gemm.get_method("int8").workspace_bytes(1 << 18, 1024, 1024, np.complex128, splits=13)
    assert 0 < ws <= plan.BLOCK_BYTES["gpu"] + 13 * 2048 * 2048 * 2
    with pytest.raises(ValueError, match=r"option splits=1 is not valid; expected an int in 3\.\.20"):
        gemm.get_method("int8").workspace_bytes(8, 8, 8, np.complex128, splits=1)


# --- engine and CLI --------------------------------------------------------------------------

N_ENGINE = 16  # 20 qubits take ~1 min on 2 cores (DD reference + three runs); 16 keep CI short


def test_engine_int8_auto_against_dd():
    from circuits.brickwork import brickwork
    from qsim_tc import Simulator
    from qsim_tc.accuracy import compare
    from qsim_tc.reference import simulate_dd

    circ = brickwork(N_ENGINE, 4, 10, seed=3)
    ref = simulate_dd(circ, device="cpu")
    # both gate by gate, unfused: the same products, so the comparison is ZGEMM's rounding against
    # int8-auto's (the default plan would run native as stages, whose rounding differs)
    nat = compare(Simulator("native", device="cpu", fuse=None, plan=None).run(circ).state, ref)
    r0 = Simulator("int8-auto", device="cpu", threshold=0, fuse=None).run(circ)
    m0 = compare(r0.state, ref)
    for key in ("amp0_real_rel", "max_rel", "mean_rel", "l2_rel", "infidelity"):
        assert abs(m0[key]) <= 2 * abs(nat[key]), (key, m0[key], nat[key])
    # unbiased rounding errors of L2 size l2_rel project onto the state as a random walk: the norm
    # drifts by ~2 l2_rel / sqrt(2^N) (2e-18 here; 6e-18 measured). A bias toward zero (truncation)
    # would put the error along the state: a drift of order l2_rel, 16x above this bound.
    assert abs(m0["norm_drift"]) <= 16 * m0["l2_rel"] / 2.0 ** (N_ENGINE / 2), (m0["norm_drift"], m0["l2_rel"])
    r1 = Simulator("int8-auto", device="cpu", threshold=1, fuse=None).run(circ)
    s0 = [g.info.report.choices["splits"] for g in r0.stats]
    s1 = [g.info.report.choices["splits"] for g in r1.stats]
    assert sum(s1) < sum(s0) and all(x <= y for x, y in zip(s1, s0))
    d = r0.to_dict()
    assert d["gates"][0]["report"]["choices"]["splits"] == s0[0]
    json.dumps(d)


def test_cli_int8_auto_writes_splits(tmp_path):
    from qsim_tc.cli import main

    out = tmp_path / "r.json"
    rc = main(["brickwork", "--qubits", "8", "--gate-qubits", "2", "--depth", "2", "--seed", "1",
               "--device", "cpu", "--backend", "int8-auto", "--threshold", "1", "--max-splits", "12",
               "--json", str(out)])
    assert rc == 0
    gates = json.loads(out.read_text())["result"]["gates"]
    assert gates and all(3 <= g["report"]["choices"]["splits"] <= 12 for g in gates)
