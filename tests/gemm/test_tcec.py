"""Error-corrected TF32/FP16 methods on the CPU: the split bit for bit, accuracy against DD, bad input.

The CPU path emulates the GPU kernel (products of the split parts in float64 by k-blocks, rounded
as the tensor core and the FP32 accumulators do), so these tests check the algorithm in CI.
"""

import warnings

import numpy as np
import pytest

import gemm
from circuits import haar_unitary
from gemm.diagnostics import testmats as tm
from gemm.tcec import FP16RangeError, FP16RangeWarning
from gemm.tcec import debias as db
from gemm.tcec import emulate as em
from gemm.tcec import split as ts

EC = ("tf32tf32", "halfhalf", "tc-auto")
ALL = EC + ("tf32", "fp16", "markidis")
KINDS = ("urand", 1, 2, 3, 4)


def _pair(kind, m, k, n, rng, dtype=np.complex64):
    if kind == "urand":
        if np.dtype(dtype).kind == "c":
            return tm.complex_urand(m, k, rng, dtype=dtype), tm.complex_urand(k, n, rng, dtype=dtype)
        return tm.urand(m, k, rng, dtype=dtype), tm.urand(k, n, rng, dtype=dtype)
    return tm.exp_rand_type(kind, m, k, n, rng, dtype=dtype)


def _wide(x):
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _dd(a, b):
    return gemm.matmul(_wide(a), _wide(b), method="dd")


def _res(c, ref):
    return float(np.linalg.norm(_wide(c) - ref) / np.linalg.norm(ref))


def _fma_chain(terms, shape):
    """FP32 accumulation of float64-exact products, rounded once per step (an FMA chain)."""
    acc = np.zeros(shape, np.float32)
    for t in terms:
        acc = (acc.astype(np.float64) + t).astype(np.float32)
    return acc


def _simt_fp32(a, b):
    """FP32 GEMM as a GPU's SIMT cores compute it: one FMA chain along k per output. A complex
    product as CGEMM does it: for each k, Re += ar br then Re += ai (-bi); Im += ar bi then
    Im += ai br. Built from numpy's real and imaginary parts only (nothing of the code under
    test), every product exact in float64."""
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    shape = (a.shape[0], b.shape[1])
    if a.dtype.kind != "c":
        return _fma_chain((np.outer(f64(a[:, k]), f64(b[k])) for k in range(a.shape[1])), shape)
    ar, ai, br, bi = f64(a.real), f64(a.imag), f64(b.real), f64(b.imag)
    re = _fma_chain((t for k in range(a.shape[1]) for t in (np.outer(ar[:, k], br[k]), np.outer(ai[:, k], -bi[k]))),
                    shape)
    im = _fma_chain((t for k in range(a.shape[1]) for t in (np.outer(ar[:, k], bi[k]), np.outer(ai[:, k], br[k]))),
                    shape)
    return (re + 1j * im).astype(np.complex64)


def _run(a, b, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FP16RangeWarning)
        return gemm.matmul(a, b, method=method, return_report=True, **kw)


# ---------------------------------------------------------------- split


def test_tf32_rna_ties_specials():
    x = np.array([1 + 2**-11, -(1 + 2**-11), 1 + 2**-12, 1 + 3 * 2**-11, 1 + 2**-11 + 2**-20,
                  np.inf, -np.inf, np.finfo(np.float32).max, 2.0**-130, 2.0**-140, 0.0], np.float32)
    got = ts.tf32_rna(x)
    # FP32 subnormals (2^-130, 2^-140) are flushed to zero, as cvt.rna.tf32.f32 does on the GPU
    want = [1 + 2**-10, -(1 + 2**-10), 1.0, 1 + 2**-9, 1 + 2**-10, np.inf, -np.inf, np.inf, 0.0, 0.0, 0.0]
    assert got.tolist() == want
    assert np.isnan(ts.tf32_rna(np.array([np.nan], np.float32)))[0]


@pytest.mark.parametrize("fmt", ["tf32", "fp16"])
def test_split_parts_and_reconstruction(fmt, rng):
    x = (rng.uniform(1, 2, 4000) * np.exp2(rng.integers(-12, 12, 4000)) * rng.choice([-1, 1], 4000)).astype(np.float32)
    e = 0
    if fmt == "fp16":
        emax, emin, _, nz = ts.exponent_range(x)
        e, fits = ts.plan_fp16(emax, emin, nz)
        assert fits and e == 14 - 11
    hi, lo = ts.split(x, fmt, e)
    if fmt == "tf32":
        assert np.array_equal(ts.tf32_rna(hi), hi) and np.array_equal(ts.tf32_rna(lo), lo)
    else:
        assert np.array_equal(ts.round_fp16(hi), hi) and np.array_equal(ts.round_fp16(lo), lo)
    back = (hi.astype(np.float64) + lo.astype(np.float64) * 2.0**-11) * 2.0**-e
    # hi keeps 11 bits, lo 11 more of a residual below half an ulp of hi: error <= 2^-23 |x|
    assert np.all(np.abs(back - x) <= 2.0**-23 * np.abs(x.astype(np.float64)))
    # the input is never modified
    x0 = x.copy()
    ts.split(x, fmt, e)
    assert np.array_equal(x, x0)


def test_plan_fp16_scales_into_range():
    x = np.array([3.0e-6, 5.0e-3, -2.5e2], np.float32)
    emax, emin, bad, nz = ts.exponent_range(x)
    e, fits = ts.plan_fp16(emax, emin, nz)
    s = np.abs(x.astype(np.float64)) * 2.0**e
    assert fits and s.max() < 2**15 and s.max() >= 2**14 and s.min() >= 2**-14
    wide = np.array([1e-30, 1e10], np.float32)
    emax, emin, bad, nz = ts.exponent_range(wide)
    assert ts.plan_fp16(emax, emin, nz)[1] is False
    assert ts.plan_fp16(0, 0xFFFFFFFF, 0) == (0, True)  # all zeros


# ---------------------------------------------------------------- accuracy against DD


@pytest.mark.parametrize("k", [256, 1024, 4096])
@pytest.mark.parametrize("kind", ["urand", 1, 2, 3])
def test_tf32tf32_halfhalf_match_fp32_gemm(kind, k, rng):
    """Against the FP32 GEMM of SIMT cores (an FMA chain per output)."""
    a, b = _pair(kind, 8, k, 8, rng)
    ref = _dd(a, b)
    simt = _res(_simt_fp32(a, b), ref)
    for method in ("tf32tf32", "halfhalf", "tc-auto"):
        c, rep = _run(a, b, method)
        assert c.dtype == np.complex64
        r = _res(c, ref)
        assert r <= 1.5 * simt, (method, kind, k, r, simt)
        if method == "halfhalf":
            assert rep.choices["fp16_fits"] is True


@pytest.mark.parametrize("k", [256, 1024])
@pytest.mark.parametrize("kind", ["urand", 1])
def test_tf32tf32_vs_numpy_blas(kind, k, rng):
    a, b = _pair(kind, 8, k, 8, rng)
    ref = _dd(a, b)
    assert _res(_run(a, b, "tf32tf32")[0], ref) <= 1.5 * _res(a @ b, ref)


@pytest.mark.parametrize("k", [16, 256, 4096])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_error_bound_every_case(kind, k, dtype, rng):
    """|C - C_ref| <= (2^-21 + k' 2^-24) |A||B| elementwise: the split's own representation error
    (2^-23 per operand, lo*lo dropped) plus the accumulation. Holds for every data type, where
    uncorrected TF32 is far above its split term."""
    a, b = _pair(kind, 6, k, 5, rng, dtype)
    ref = _dd(a, b)
    kp = 2 * k if np.dtype(dtype).kind == "c" else k
    scale = 2 if np.dtype(dtype).kind == "c" else 1
    bound = (2.0**-21 + kp * 2.0**-24) * (np.abs(_wide(a)) @ np.abs(_wide(b))) * scale
    for method in ("tf32tf32", "tc-auto"):
        err = np.abs(_wide(_run(a, b, method)[0]) - ref)
        assert np.all(err <= bound), (method, float((err / bound).max()))
    err_tf32 = np.abs(_wide(_run(a, b, "tf32")[0]) - ref)
    assert err_tf32.max() > 50 * err.max()  # without the correction the error is ~2^11 times larger


def test_uncorrected_and_markidis(rng):
    a, b = _pair("urand", 8, 4096, 8, rng)
    ref = _dd(a, b)
    r_tf32 = _res(_run(a, b, "tf32")[0], ref)
    r_fp16 = _res(_run(a, b, "fp16")[0], ref)
    assert 1e-5 <= r_tf32 <= 2e-3 and 1e-5 <= r_fp16 <= 2e-3
    a2, b2 = a[:, :256], b[:256]
    ref2 = _dd(a2, b2)
    m_small = _res(_run(a2, b2, "markidis")[0], ref2)
    m_large = _res(_run(a, b, "markidis")[0], ref)
    ec_large = _res(_run(a, b, "tf32tf32")[0], ref)
    # truncation inside the tensor core: Markidis' error grows with k, far above tf32tf32
    assert m_large > 4 * m_small
    assert m_large > 20 * ec_large


@pytest.mark.parametrize("kind,expect", [("urand", "fp16"), (1, "fp16"), (2, "fp16"), (3, "fp16"), (4, "tf32")])
def test_tc_auto_choice(kind, expect, rng):
    a, b = _pair(kind, 4, 64, 4, rng)
    _, rep = _run(a, b, "tc-auto")
    assert rep.choices["precision"] == expect


def test_halfhalf_out_of_range_warns_or_raises(rng):
    a, b = _pair(4, 4, 64, 4, rng)
    with pytest.warns(FP16RangeWarning, match=r"of the elements of a fall below FP16's normal range"):
        c, rep = gemm.matmul(a, b, method="halfhalf", return_report=True)
    assert 0 < rep.choices["fp16_out_of_range_a"] < 1
    with pytest.raises(FP16RangeError, match=r"halfhalf.*fall below FP16's normal range after scaling"):
        gemm.matmul(a, b, method="halfhalf", on_range="raise")
    with pytest.raises(ValueError, match=r"on_range='x' is not valid"):
        gemm.matmul(a, b, method="halfhalf", on_range="x")


# ---------------------------------------------------------------- shapes, orientations, dtypes


def _shape_cases(rng):
    c64 = lambda *s: (rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(np.complex64)  # noqa: E731
    u = c64(16, 16)
    s = c64(40, 16)
    h = c64(3, 16, 20)
    return {
        "bottom S @ U.T": (s, u.T),
        "top U @ S": (u, c64(16, 33)),
        "batched U @ S[h]": (u, h),
        "stacked @ 2-D": (c64(2, 7, 16), u),
        "stacked @ stacked": (c64(2, 7, 13), c64(2, 13, 9)),
        "sliced views": (s[::2, 1:12], c64(33, 5)[::3][:11, ::-1]),
        "real odd sizes": (rng.standard_normal((17, 19)).astype(np.float32),
                           rng.standard_normal((19, 3)).astype(np.float32)),
        "real @ complex": (rng.standard_normal((5, 9)).astype(np.float32), c64(9, 4)),
    }


@pytest.mark.parametrize("method", ALL)
def test_shapes_orientations(method, rng):
    for name, (a, b) in _shape_cases(rng).items():
        a0, b0 = a.copy(), b.copy()
        c = _run(a, b, method)[0]
        ref = np.matmul(_wide(a), _wide(b))
        assert c.shape == ref.shape, name
        tol = 2e-6 if method in EC else (1e-4 if method == "markidis" else 3e-3)
        assert _res(c, ref) < tol, (name, _res(c, ref))
        assert np.array_equal(a, a0) and np.array_equal(b, b0), name


def test_float64_needs_downcast(rng):
    a = rng.standard_normal((4, 8))
    b = rng.standard_normal((8, 3)).astype(np.float32)
    with pytest.raises(TypeError, match=r"'tf32tf32' computes in FP32.*a is float64.*downcast=True"):
        gemm.matmul(a, b, method="tf32tf32")
    c, rep = gemm.matmul(a, b, method="tf32tf32", downcast=True, return_report=True)
    assert c.dtype == np.float32 and "downcast" in rep.notes[0]
    assert _res(c, a @ b.astype(np.float64)) < 1e-6


def test_bad_options():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match=r"'tf32tf32' got unknown option\(s\) kblock; it accepts: debias, downcast"):
        gemm.matmul(a, a, method="tf32tf32", kblock=3)
    with pytest.raises(TypeError, match=r"debias must be True or False, got 'yes'"):
        gemm.matmul(a, a, method="tf32tf32", debias="yes")
    with pytest.raises(TypeError, match=r"'markidis' got unknown option\(s\) debias"):
        gemm.matmul(a, a, method="markidis", debias=True)


@pytest.mark.parametrize("method", ["tf32tf32", "halfhalf", "tc-auto", "tf32", "fp16"])
def test_nan_inf_propagate(method, rng):
    a = rng.standard_normal((4, 24)).astype(np.float32)
    b = rng.standard_normal((24, 5)).astype(np.float32)
    a[0, 3] = np.inf
    a[1, 0] = np.nan
    a[2, 5] = -np.inf
    b[5, 1] = 0.0  # -inf * 0 = NaN in row 2, column 1
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    c = _run(a, b, method)[0]
    assert np.array_equal(np.isnan(c), np.isnan(want))
    assert np.array_equal(np.isposinf(c), np.isposinf(want)) and np.array_equal(np.isneginf(c), np.isneginf(want))
    fin = np.isfinite(want)
    # the finite entries keep the method's accuracy: the split's representation error (2^-21 |A||B|
    # corrected, 2^-10 for the uncorrected hi-only products: 11 bits per operand) plus FP32
    # accumulation (k 2^-24 |A||B|)
    split = 2.0**-21 if method in EC else 2.0**-10
    with np.errstate(invalid="ignore"):
        bound = (split + 24 * 2.0**-24) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(c[fin] - want[fin]) <= bound[fin])


def test_registered_precision_classes():
    # the uncorrected TF32/FP16 products keep their format's precision, Markidis's truncated sums are
    # their own class; every method keeps a complex64 state
    uncorrected = {"tf32": "tf32", "fp16": "fp16", "markidis": "fp32-tc"}
    for name in ALL:
        m = gemm.get_method(name)
        assert m.precision == uncorrected.get(name, "fp32") and m.state_dtype == np.complex64


# ---------------------------------------------------------------- engine


@pytest.fixture(scope="module")
def brickwork_12():
    from circuits.brickwork import brickwork
    from qsim_tc.reference import simulate_dd

    circ = brickwork(12, 6, 6, seed=5)
    return circ, simulate_dd(circ, device="cpu")


def test_engine_brickwork_matches_native_cgemm(brickwork_12):
    """A complex64 brickwork: the state's L2 error, mean amplitude error and infidelity against DD
    stay within 1.5x of native CGEMM's; the norm does not drift (no bias toward zero)."""
    from qsim_tc.accuracy import compare
    from qsim_tc.simulator import Simulator

    circ, ref = brickwork_12
    native = compare(Simulator(backend="native32", device="cpu").run(circ), ref)
    for backend in ("tf32tf32", "tc-auto"):
        res = Simulator(backend=backend, device="cpu").run(circ)
        assert res.state.dtype == np.complex64
        got = compare(res, ref)
        for key in ("l2_rel", "mean_rel", "infidelity"):
            assert got[key] <= 1.5 * native[key], (backend, key, got[key], native[key])
        assert abs(got["norm_drift"]) < 3e-8, (backend, got["norm_drift"])
    # without the debias step the truncation drains the norm
    biased = compare(Simulator(backend="tf32tf32", device="cpu", debias=False).run(circ), ref)
    assert biased["norm_drift"] < -1e-7


def test_probe_cli_without_gpu(capsys, monkeypatch):
    """``qsim-tc probe`` needs a GPU; without one it says so and exits with status 2."""
    from qsim_tc.cli import main

    monkeypatch.setattr(gemm, "gpu_available", lambda: False)
    assert main(["probe"]) == 2
    assert "the probe runs mma instructions on a CUDA GPU; none is available" in capsys.readouterr().err



def test_one_instruction_aligns_to_the_exponent_sums():
    """The products' terms are aligned to the largest exponent sum e(a) + e(b), not to the
    largest product's value: 1.5 * 1.5 = 2.25 (exponent sum 0, value exponent 1) beside seven
    products 1.5 * 2^-24 keeps 3 units of 2^-25 of each (cut 25 bits below 2^0), not 1 unit of
    2^-24 (cut below 2^1): 2.25 + 10.5 2^-24, truncated to FP32's 2^-22, is 2.25 + 2^-21 where the
    value's alignment gave 2.25 + 2^-22 (what an H100 returns: docs/results.md, section 7)."""
    from gemm.tcec.emulate import tc_mma

    a = np.array([1.5] * 8)
    b = np.array([1.5] + [2.0**-24] * 7)
    got = tc_mma(np.zeros((), np.float32), a, b, 2)
    assert got.dtype == np.float32 and float(got) == 2.25 + 2.0**-21
    # the accumulator's exponent counts too: with c = 4 (exponent 2) the terms are cut below
    # 2^-23, each small one (0.75 of that unit) to zero; aligned to the products alone they would
    # keep 10.5 2^-24, one ulp of 6.25 after the truncation
    assert float(tc_mma(np.float32(4.0), a, b, 2)) == 6.25

def test_probe_cli_saves_the_cases(capsys, monkeypatch, tmp_path):
    """``qsim-tc probe --cases F`` (on a stand-in GPU) writes F.npz, which load_cases reads back
    for model_fit; a --cases path in a missing folder is refused before any work."""
    from gemm.diagnostics import probe
    from gemm.tcec.emulate import tc_mma
    from qsim_tc.cli import main

    def stand_in(fmt, cases):
        a, b, c = (np.array([case[j] for case in cases]) for j in range(3))
        return tc_mma(c.astype(np.float32), a, b)

    monkeypatch.setattr(gemm, "gpu_available", lambda: True)
    monkeypatch.setattr(probe, "probe_all", lambda: [])
    monkeypatch.setattr(probe, "dots", stand_in)
    assert main(["probe", "--cases", str(tmp_path / "none" / "cases")]) == 2
    assert "--cases" in capsys.readouterr().err
    assert main(["probe", "--cases", str(tmp_path / "cases")]) == 0
    for fmt in probe.FORMATS:
        data = probe.load_cases(tmp_path / "cases.npz", fmt)
        assert data["a"].shape == (8192, probe.K[fmt]) and probe.model_fit(data)["model_agreement"] == 1.0


@pytest.mark.parametrize("chain", [1, 2])
def test_debias_epilogue_removes_the_bias(chain, monkeypatch, rng):
    """The epilogue debias (beta * hi*hi sum) leaves a mean relative bias well under the 0.29-0.44
    ulp that truncation causes without it, and no more error than the per-product debias."""
    m, k, n = 48, 512, 16
    a = (rng.standard_normal((m, k)) + 1j * rng.standard_normal((m, k))).astype(np.complex64)
    b = (rng.standard_normal((k, n)) + 1j * rng.standard_normal((k, n))).astype(np.complex64)
    ref = _wide(a) @ _wide(b)

    def bias_err(mode, debias):
        monkeypatch.setattr(db, "HH_CHAIN", chain)
        monkeypatch.setattr(db, "DEBIAS_MODE", mode)
        e = _wide(em.emulate(a, b, "tf32", "ec", debias=debias)) - ref
        return np.real(np.vdot(ref, e)) / np.vdot(ref, ref).real / 2.0**-23, _res(ref + e, ref)

    off, _ = bias_err("epilogue", False)
    on, err = bias_err("epilogue", True)
    assert off < -0.25
    assert abs(on) < 0.1, on
    if chain == 1:
        monkeypatch.setattr(db, "PRODUCT_DEBIAS_MAX_K", 1 << 20)  # the per-product debias at this k too
        _, err_product = bias_err("product", True)
        assert err <= 1.05 * err_product


def _gate_norm_bias(fmt, d, debias, trials=24, n=10):
    """Mean relative change of ||psi||^2 that Haar gates of d qubits give dense random states through
    the emulation, against the exact product of the same hi/lo parts (the split's own error, which
    is unbiased, is left out)."""
    rng = np.random.default_rng(5)
    dim, out = 1 << d, []

    def eff(x):
        def part(p):
            hi, lo = ts.split(np.ascontiguousarray(p, np.float32), fmt)
            return hi.astype(np.float64) + lo.astype(np.float64) * 2.0**-ts.LO_SHIFT
        return part(x.real) + 1j * part(x.imag)

    for _ in range(trials):
        a = rng.standard_normal(((1 << n) // dim, dim)) + 1j * rng.standard_normal(((1 << n) // dim, dim))
        a = (a / np.linalg.norm(a)).astype(np.complex64)
        u = np.ascontiguousarray(haar_unitary(dim, rng).astype(np.complex64).T)
        ref = eff(a) @ eff(u)
        got = em.emulate(a, u, fmt, "ec", debias=debias).astype(np.complex128)
        out.append(np.sum(np.abs(got) ** 2) / np.sum(np.abs(ref) ** 2) - 1)
    return float(np.mean(out))


@pytest.mark.parametrize("fmt", ["tf32", "fp16"])
def test_per_product_debias_keeps_the_norm_of_dense_gates(fmt):
    """Gates of 4 qubits (k = 32 real) on dense states: the per-product debias leaves a norm bias
    under 1.5e-9 per gate, where the 3/8-ulp epilogue model lost 3e-9 (TF32) and 9e-9 (FP16) and no
    debias loses ~1e-7."""
    assert db.debias_mode(32) == "product"
    assert abs(_gate_norm_bias(fmt, 4, True)) < 1.5e-9
    assert _gate_norm_bias(fmt, 4, False) < -3e-8


def test_per_product_debias_leaves_exact_results_alone():
    """An instruction that sums a single nonzero product returns it exactly: with one nonzero, real
    amplitude per row (a gate on a basis state) the debias adds nothing."""
    rng = np.random.default_rng(2)
    a = np.zeros((64, 16), np.complex64)
    a[np.arange(64), rng.integers(0, 16, 64)] = rng.standard_normal(64).astype(np.float32)
    u = haar_unitary(16, rng).astype(np.complex64)
    for fmt in ("tf32", "fp16"):
        on, off = (em.emulate(a, u, fmt, "ec", debias=flag) for flag in (True, False))
        assert np.array_equal(on, off)
    assert db.product_debias_fraction("tf32", 4) == 0.397 and db.product_debias_fraction("fp16", 32) == 0.594
    assert db.debias_mode(db.PRODUCT_DEBIAS_MAX_K * 2) == "epilogue"


def _ec_bound(a, b):
    """|C - C_ref| bound of an error-corrected product (see test_error_bound_every_case)."""
    kp = a.shape[-1] * (2 if a.dtype.kind == "c" else 1)
    return (2.0**-21 + kp * 2.0**-24) * (np.abs(_wide(a)) @ np.abs(_wide(b))) * (2 if a.dtype.kind == "c" else 1)


def test_ec_product_option_is_checked(rng):
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="ec_product='cublas' is not valid; expected one of auto, hybrid, fused"):
        gemm.matmul(a, a, method="tf32tf32", ec_product="cublas")
    with pytest.raises((TypeError, ValueError), match="ec_product"):
        gemm.matmul(a, a, method="tf32", ec_product="fused")  # no corrections to place
    # operands with full 24-bit mantissas (all-ones products are exact in any format)
    a, b = _pair("urand", 6, 40, 5, rng)
    for product in ("auto", "hybrid", "fused"):
        c = gemm.matmul(a, b, method="halfhalf", ec_product=product)
        assert np.all(np.abs(_wide(c) - _dd(a, b)) <= _ec_bound(a, b)), product


def test_product_kernel_option_is_checked(rng):
    """Every TF32/FP16 method takes product_kernel (the GPU product kernel); a bad value is named.
    On the CPU the emulation runs whatever it says, with the method's accuracy."""
    ones = np.ones((4, 4), np.float32)
    a, b = _pair("urand", 6, 40, 5, rng)
    ref = _dd(a, b)
    for method in ("tf32tf32", "halfhalf", "tc-auto", "tf32", "fp16", "markidis"):
        with pytest.raises(ValueError, match="product_kernel='tma' is not valid; expected one of auto, wgmma, mma"):
            gemm.matmul(ones, ones, method=method, product_kernel="tma")
        # corrected methods: their elementwise bound; markidis: the FP32 class (6e-7 measured);
        # uncorrected ones keep 11 bits per operand (3e-4 measured at this size)
        for kernel in ("auto", "wgmma", "mma"):
            c = _run(a, b, method, product_kernel=kernel)[0]
            if method in EC:
                assert np.all(np.abs(_wide(c) - ref) <= _ec_bound(a, b)), (method, kernel)
            else:
                assert _res(c, ref) < (1e-5 if method == "markidis" else 2e-3), (method, kernel, _res(c, ref))


def test_k_padding_covers_the_wgmma_stage():
    """Workspaces of the square tile class are padded to the wgmma stage (64 words of k), the
    others to the mma.sync stage (16 words); workspace_bytes counts the same padding."""
    from gemm.tcec import gpu as tcec_gpu

    assert tcec_gpu.k_quantum("tf32", "square") == tcec_gpu.WG_K_WORDS == 64
    assert tcec_gpu.k_quantum("fp16", "square") == 2 * tcec_gpu.WG_K_WORDS
    assert all(tcec_gpu.WG_K_WORDS % (32 * c.atoms) == 0 for c in tcec_gpu.WG_CONFIGS.values())
    # the wide configuration where the padded width allows, else 128 columns (no extra padding)
    for mode, (wide, narrow) in tcec_gpu.WG_CHOICE.items():
        assert tcec_gpu.wg_config(384, mode) == narrow and tcec_gpu.WG_CONFIGS[narrow].bn == 128
        assert tcec_gpu.wg_config(2048, mode) == (wide or narrow)
        assert wide is None or tcec_gpu.WG_CONFIGS[wide].bn == 256
    # shared memory within the 227 KB a block may have
    assert all(c.smem_bytes <= 227 * 1024 for c in tcec_gpu.WG_CONFIGS.values())
    assert tcec_gpu.k_quantum("tf32", "tiny-n") == tcec_gpu.BKW
    # 1000 x 100 @ 100 x 200 real: square tiles, k = 100 -> 128 TF32 words
    ws = tcec_gpu.workspace_bytes(1000, 200, 100, 1, 1, "tf32", "plain")
    assert ws == 4 * 2 * 128 * (1024 + 256)


def test_hybrid_debias_beta_grows_with_k():
    """The hybrid product's beta: the model plus a per-format constant at k = 128 (held below it)
    and a term per doubling of k; FP16 loses more than TF32; nothing below the model."""
    model = db.debias_beta(1)
    assert db.hybrid_debias_beta("tf32", 128) == pytest.approx(model + db.HYBRID_EXTRA_LOSS["tf32"])
    assert db.hybrid_debias_beta("tf32", 16) == db.hybrid_debias_beta("tf32", 128)
    step = db.hybrid_debias_beta("fp16", 256) - db.hybrid_debias_beta("fp16", 128)
    assert step == pytest.approx(db.HYBRID_EXTRA_LOSS_PER_DOUBLING["fp16"])
    assert db.hybrid_debias_beta("fp16", 512) > db.hybrid_debias_beta("tf32", 512) > model
    # the extra stays a small fraction of the model over gate sizes (k up to 2^13 real)
    assert db.hybrid_debias_beta("fp16", 1 << 13) < 1.2 * model


@pytest.mark.parametrize("tiles_m, tiles_n", [(1, 1), (7, 5), (1024, 32), (5, 16), (3, 1)])
def test_raster_visits_every_tile_once(tiles_m, tiles_n):
    """The product kernels' tile order (tile_coords, replayed): every raster visits each tile
    once; the extremes are n fastest and m fastest; groups keep their small-operand tiles
    together (a group's blocks touch at most `g` of them)."""
    from gemm.tcec import gpu as tcec_gpu

    every = {(m, n) for m in range(tiles_m) for n in range(tiles_n)}
    for ras in (1, 2, 3, 8, tiles_n, tiles_n + 5, -1, -2, -3, -tiles_m, -(tiles_m + 1)):
        order = tcec_gpu.raster_order(tiles_m, tiles_n, ras)
        assert len(order) == len(every) and set(order) == every, ras
        g = min(abs(ras), tiles_n if ras > 0 else tiles_m)
        step = g * (tiles_m if ras > 0 else tiles_n)
        for i in range(0, len(order), step):
            chunk = order[i:i + step]
            assert len({(n if ras > 0 else m) for m, n in chunk}) <= g, ras
    assert tcec_gpu.raster_order(tiles_m, tiles_n, tiles_n) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    assert tcec_gpu.raster_order(tiles_m, tiles_n, -tiles_m) == [(m, n) for n in range(tiles_n) for m in range(tiles_m)]


def test_raster_choice():
    """d = 10 gate (2 MB per column tile of hi and lo): one group, n fastest; d = 11 (4 MB):
    groups of 8; the small operand on the left: row groups."""
    from gemm.tcec import gpu as tcec_gpu

    assert tcec_gpu.raster(2048, 16, True, 2 << 20) == 16
    assert tcec_gpu.raster(1024, 32, True, 4 << 20) == 8
    assert tcec_gpu.raster(32, 1024, False, 4 << 20) == -8
    assert tcec_gpu.raster(10, 3, True, 1) == 3


def test_small_products_take_the_fused_kernel():
    """ec_product='auto' sends products of real k <= 64 (gates of up to 5 qubits) to the fused kernel,
    whose per-product debias they need: no correction buffer in the workspace, unlike the hybrid."""
    from gemm.tcec import gpu as tcec_gpu

    m, n = 1 << 20, 64  # a 5-qubit complex64 gate at the bottom of a 25-qubit state, in real form
    tile = tcec_gpu.tile_config(m, n)
    assert tcec_gpu.resolve_ec_product("auto", "auto", tile, 64) == "fused"
    assert tcec_gpu.resolve_ec_product("hybrid", "auto", tile, 64) == "hybrid"
    auto = tcec_gpu.workspace_bytes(m, n, 64, 1, 1, "tf32", "ec")
    hybrid = tcec_gpu.workspace_bytes(m, n, 64, 1, 1, "tf32", "ec", ec_product="hybrid")
    assert hybrid - auto >= 4 * m * n  # the hybrid's float correction buffer
    assert db.debias_mode(64) == "product" and db.debias_mode(128) == "epilogue"



@pytest.mark.parametrize("fmt,bits,steps", [("fp16", 2, 1), ("fp16", 5, 1), ("tf32", 0, 1), ("tf32", 3, 1),
                                            ("fp16", 2, 2), ("fp16", 3, 4), ("tf32", 2, 2)])
def test_probe_model_check_finds_the_gpus_kept_bits(fmt, bits, steps, monkeypatch, tmp_path):
    """The probe's model check on a stand-in GPU that keeps ``bits`` bits and sums its k products
    in ``steps`` steps: the emulation agrees on every instruction only with those, and the random
    instructions tell the bit counts and the steps apart."""
    from gemm.diagnostics import probe
    from gemm.tcec.emulate import tc_mma

    def stand_in(fmt_, cases):
        assert fmt_ == fmt and all(len(a) == len(b) == probe.K[fmt] for a, b, _ in cases)
        a = np.array([x for x, _, _ in cases], np.float64)
        b = np.array([y for _, y, _ in cases], np.float64)
        c = np.array([z for _, _, z in cases], np.float32)
        return tc_mma(c, a, b, bits, probe.K[fmt] // steps)

    monkeypatch.setattr(probe, "dots", stand_in)
    found = probe.model_agreement(fmt, np.random.default_rng(3))
    k = probe.K[fmt]
    assert found["model_best"] == {"products_a_step": k // steps, "extra_bits": bits, "agreement": 1.0}
    if steps == 1:
        assert found["model_best_extra_bits"] == bits
        assert found["model_agreement_by_bits"][bits] == 1.0
        assert all(share < 1.0 for b, share in found["model_agreement_by_bits"].items() if b != bits)
    else:  # no count of kept bits makes one step of k products agree everywhere
        assert max(found["model_agreement_by_bits"].values()) < 1.0
    # the saved form of the cases fits alike
    data = probe.model_data(fmt, np.random.default_rng(4), 256)
    assert set(data) == {"a", "b", "c", "got"} and data["got"].dtype == np.float32
    path = probe.save_cases(tmp_path / "cases", {fmt: data})
    assert path.endswith(".npz")
    back = probe.load_cases(path, fmt)
    assert all(np.array_equal(back[k], data[k]) for k in data)
    assert probe.model_fit(back)["model_best"]["agreement"] == 1.0
    a, b, c = probe.model_cases(fmt, np.random.default_rng(0), 64)
    assert a.shape == b.shape == (64, probe.K[fmt]) and c.dtype == np.float32 and (c == 0).any()
    if fmt == "fp16":
        assert (a.astype(np.float16).astype(np.float32) == a).all()  # FP16 values
