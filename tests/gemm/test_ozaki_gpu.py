"""int8 / int8-auto on the GPU: bit-identical to the CPU reference path in every operand form,
the accuracy tests of the CPU suite, errors, blocks, the slice cache and the engine."""

import numpy as np
import pytest

import gemm
from gemm import ozaki
from gemm.diagnostics import testmats
from gemm.ozaki import plan

pytestmark = pytest.mark.gpu


def _gen(rng, shape, cplx, phi=1.0):
    if cplx:
        return testmats.complex_phi_matrix(int(np.prod(shape[:-1])), shape[-1], phi, rng).reshape(shape)
    return testmats.phi_matrix(int(np.prod(shape[:-1])), shape[-1], phi, rng).reshape(shape)


FORMS = {
    # name: (shape a, shape b, transpose b on the device)
    "bottom": ((2048, 64), (64, 64), True),  # S @ U.T with U.T a transposed view
    "top": ((64, 64), (64, 3000), False),
    "batched": ((64, 64), (8, 64, 96), False),
    "stacked_a": ((4, 100, 37), (37, 50), False),  # k' not a multiple of 16: padded slices
    "both_stacked": ((3, 40, 64), (3, 64, 24), False),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("method, opts", [("int8", {"splits": 9}), ("int8", {"splits": 13}),
                                          ("int8-auto", {"threshold": 0}), ("int8-auto", {"threshold": 1})])
def test_gpu_bit_identical_to_cpu(cp, rng, form, cplx, method, opts):
    sa, sb, tb = FORMS[form]
    a = _gen(rng, sa, cplx)
    b = _gen(rng, sb[::-1] if tb else sb, cplx)
    bh = b.T if tb else b
    bd = cp.asarray(b).T if tb else cp.asarray(b)
    c_cpu, r_cpu = gemm.matmul(a, bh, method=method, return_report=True, **opts)
    c_gpu, r_gpu = gemm.matmul(cp.asarray(a), bd, method=method, return_report=True, **opts)
    assert r_gpu.device == "gpu" and r_gpu.choices["splits"] == r_cpu.choices["splits"]
    got = cp.asnumpy(c_gpu)
    assert got.dtype == c_cpu.dtype and got.shape == c_cpu.shape
    diff = np.abs(got - c_cpu).max()
    assert np.array_equal(got, c_cpu), f"max |gpu - cpu| = {diff}"
    assert {"split", "int8_gemm", "accumulate"} <= set(r_gpu.stages)


@pytest.mark.parametrize("form", ["bottom", "batched"])
def test_gpu_blocks_bit_identical(cp, rng, monkeypatch, form):
    sa, sb, tb = FORMS[form]
    a = _gen(rng, sa, True)
    b = _gen(rng, sb[::-1] if tb else sb, True)
    bh, bd = (b.T, cp.asarray(b).T) if tb else (b, cp.asarray(b))
    c_cpu = gemm.matmul(a, bh, method="int8", splits=11)
    monkeypatch.setitem(plan.BLOCK_BYTES, "gpu", 1)
    c_gpu, rep = gemm.matmul(cp.asarray(a), bd, method="int8", splits=11, return_report=True)
    assert rep.choices["blocks"] > 1
    assert np.array_equal(cp.asnumpy(c_gpu), c_cpu)


@pytest.mark.parametrize("phi", [0.1, 1.0, 2.0, 4.0])
def test_gpu_phi_13_splits_at_or_below_dgemm(cp, phi):
    rng = np.random.default_rng(int(phi * 10) + 7)
    a = testmats.phi_matrix(64, 1024, phi, rng)
    b = testmats.phi_matrix(1024, 64, phi, rng)
    hi, lo = gemm.matmul(a, b, method="dd", output="pair")

    def mean_rel(c):
        return float(np.mean(np.abs((c - hi) - lo) / np.abs(hi)))

    e13 = mean_rel(cp.asnumpy(gemm.matmul(cp.asarray(a), cp.asarray(b), method="int8", splits=13)))
    e_native = mean_rel(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)))
    assert e13 <= e_native, (e13, e_native)
    if phi == 0.1:
        e9 = mean_rel(cp.asnumpy(gemm.matmul(cp.asarray(a), cp.asarray(b), method="int8", splits=9)))
        assert e9 <= e_native


def test_gpu_cancellation_beats_dgemm(cp, rng):
    a, ainv = testmats.cancel_pair(128, rng)
    hi, lo = gemm.matmul(a, ainv, method="dd", output="pair")
    err = lambda c: float(np.linalg.norm((cp.asnumpy(c) - hi) - lo))  # noqa: E731
    ad, bd = cp.asarray(a), cp.asarray(ainv)
    assert err(gemm.matmul(ad, bd, method="int8", splits=13)) < err(ad @ bd)


@pytest.mark.parametrize("method", ["int8", "int8-auto"])
def test_gpu_errors_zeros_and_fallback(cp, rng, method):
    a = cp.ones((3, 4))
    b = cp.ones((4, 2))
    b[1, 1] = cp.nan
    with pytest.raises(gemm.NonFiniteError, match=r"b holds 1 NaN/Inf element\(s\)"):
        gemm.matmul(a, b, method=method)
    a = cp.asarray(rng.standard_normal((5, 6)) + 1j * rng.standard_normal((5, 6)))
    b = cp.asarray(rng.standard_normal((6, 4)) + 1j * rng.standard_normal((6, 4)))
    a[2] = 0
    b[:, 1] = 0
    c = gemm.matmul(a, b, method=method)
    assert bool((c[2] == 0).all()) and bool((c[:, 1] == 0).all())
    if method == "int8-auto":
        x = rng.standard_normal((4, 8))
        x[0, 0], x[0, 1] = 1e300, 1e-300
        c, rep = gemm.matmul(cp.asarray(x), cp.ones((8, 3)), method=method, return_report=True)
        assert rep.choices["fallback"] is True and "fell back to native" in rep.notes[0]


def test_gpu_cache_hits_and_never_goes_stale(cp, rng):
    ozaki.CACHE.clear()
    s = cp.asarray(rng.standard_normal((4096, 64)) + 1j * rng.standard_normal((4096, 64)))
    u = cp.asarray(rng.standard_normal((64, 64)) + 1j * rng.standard_normal((64, 64)))
    c1, r1 = gemm.matmul(s, u.T, method="int8-auto", return_report=True)
    c2, r2 = gemm.matmul(s, u.T, method="int8-auto", return_report=True)
    assert not r1.choices["cache_hit"] and r2.choices["cache_hit"]
    assert bool((c1 == c2).all())
    u[3, 4] += 1e-9
    c3, r3 = gemm.matmul(s, u.T, method="int8-auto", return_report=True)
    assert not r3.choices["cache_hit"]
    c_cpu = gemm.matmul(cp.asnumpy(s), cp.asnumpy(u).T, method="int8-auto")
    assert np.array_equal(cp.asnumpy(c3), c_cpu)


def test_gpu_engine_int8_auto_against_dd(cp):
    from circuits.brickwork import brickwork
    from qsim_tc import Simulator
    from qsim_tc.accuracy import compare
    from qsim_tc.reference import simulate_dd

    circ = brickwork(20, 4, 10, seed=3)
    ref = simulate_dd(circ, device="gpu")
    nat = compare(Simulator("native", device="gpu", fuse=None, plan=None).run(circ).state, ref)
    r0 = Simulator("int8-auto", device="gpu", threshold=0, fuse=None).run(circ)
    m0 = compare(r0.state, ref)
    print({k: (m0[k], nat[k]) for k in ("amp0_real_rel", "max_rel", "mean_rel", "l2_rel", "infidelity", "norm_drift")})
    for key in ("amp0_real_rel", "max_rel", "mean_rel", "l2_rel", "infidelity"):
        assert abs(m0[key]) <= 2 * abs(nat[key]), (key, m0[key], nat[key])
    assert abs(m0["norm_drift"]) <= 2 * abs(nat["norm_drift"]) + 2.0**-52
    r1 = Simulator("int8-auto", device="gpu", threshold=1, fuse=None).run(circ)
    s0 = [g.info.report.choices["splits"] for g in r0.stats]
    s1 = [g.info.report.choices["splits"] for g in r1.stats]
    assert sum(s1) < sum(s0)
    # the GPU path is the CPU path, bit for bit, through the whole engine (small width)
    small = brickwork(12, 4, 6, seed=5)
    g = Simulator("int8-auto", device="gpu", threshold=0).run(small).state.to_numpy()
    c = Simulator("int8-auto", device="cpu", threshold=0).run(small).state.to_numpy()
    assert np.array_equal(g, c), float(np.abs(g - c).max())


@pytest.mark.parametrize("form", list(FORMS))
def test_gpu_basic_kernels_bit_identical(cp, rng, monkeypatch, form):
    from gemm.ozaki import gpu as ozaki_gpu

    monkeypatch.setattr(ozaki_gpu, "FAST", False)
    sa, sb, tb = FORMS[form]
    a = _gen(rng, sa, True)
    b = _gen(rng, sb[::-1] if tb else sb, True)
    bh, bd = (b.T, cp.asarray(b).T) if tb else (b, cp.asarray(b))
    c_cpu = gemm.matmul(a, bh, method="int8", splits=10)
    c_gpu = gemm.matmul(cp.asarray(a), bd, method="int8", splits=10)
    assert np.array_equal(cp.asnumpy(c_gpu), c_cpu)
