"""Error-corrected TF32/FP16 methods on the GPU (mma.sync and wgmma kernels): split, accuracy, shapes, engine."""

import warnings

import numpy as np
import pytest

import gemm
from gemm.diagnostics import testmats as tm
from gemm.tcec import FP16RangeWarning
from gemm.tcec import split as ts

pytestmark = pytest.mark.gpu

EC = ("tf32tf32", "halfhalf", "tc-auto")
ALL = EC + ("tf32", "fp16", "markidis")


def _run(a, b, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FP16RangeWarning)
        return gemm.matmul(a, b, method=method, return_report=True, **kw)


def _wide(x):
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _res(c, ref, xp):
    return float(xp.linalg.norm(_wide(c) - ref) / xp.linalg.norm(ref))


def _pair(kind, m, k, n, rng, dtype=np.complex64):
    if kind == "urand":
        return tm.complex_urand(m, k, rng, dtype=dtype), tm.complex_urand(k, n, rng, dtype=dtype)
    return tm.exp_rand_type(kind, m, k, n, rng, dtype=dtype)


def _split_data(fmt, cols, rng):
    x = (rng.standard_normal((70, cols)) * np.exp2(rng.integers(-30, 30, (70, cols)))).astype(np.float32)
    if fmt == "fp16":
        x = (rng.uniform(1, 2, (70, cols)) * np.exp2(rng.integers(-12, 12, (70, cols)))).astype(np.float32)
    special = [1 + 2**-11, -(1 + 2**-11), 1 + 3 * 2**-11, 2.0**-130, 2.0**-140, 0.0, -0.0, np.inf, -np.inf, 3e38]
    x[0, :len(special)] = special
    x[1, 0] = np.nan
    return x


@pytest.mark.parametrize("cols", [45, 48])  # 48: rows of contiguous float4s (the vector kernels)
@pytest.mark.parametrize("fmt", ["tf32", "fp16"])
def test_gpu_split_bit_exact(fmt, cols, cp, rng):
    from gemm.tcec import gpu as tcec_gpu

    x = _split_data(fmt, cols, rng)
    e = 3 if fmt == "fp16" else 0
    op = tcec_gpu._as_a(cp.asarray(x), False)
    assert tcec_gpu.rows_contiguous(op) == (cols % 4 == 0)
    hi, lo, kw = tcec_gpu._split(cp, op, 96, 64, fmt, "ec", e)
    if fmt == "tf32":
        ghi, glo = (w.get().view(np.float32).reshape(96, 64) for w in (hi, lo))
    else:
        ghi, glo = (w.get().view(np.float16).astype(np.float32).reshape(96, 64) for w in (hi, lo))
    chi, clo = ts.split(x, fmt, e)
    for g, c in ((ghi, chi), (glo, clo)):
        bad = ~((g[:70, :cols] == c) | (np.isnan(g[:70, :cols]) & np.isnan(c)))
        got = g[:70, :cols]
        assert not bad.any(), list(zip(x[bad][:8].tolist(), got[bad][:8].tolist(), c[bad][:8].tolist()))
        assert not g[70:].any() and not g[:, cols:].any()  # zero padding


@pytest.mark.parametrize("fmt", ["tf32", "fp16"])
def test_gpu_range_rows_matches_tiles(fmt, cp, rng):
    """The exponent range from contiguous rows (float4 loads) equals the tiled kernel's on the
    same data read through a transposed view, for a batch with specials, and for a complex one."""
    from gemm.tcec import gpu as tcec_gpu

    x = cp.asarray(np.stack([_split_data(fmt, 48, rng), _split_data(fmt, 48, rng) * 2.0**-20]))
    z = cp.asarray((rng.standard_normal((33, 24)) + 1j * rng.standard_normal((33, 24))).astype(np.complex64))
    for arr, complex_ in ((x, False), (z, True)):
        rows = tcec_gpu._as_a(arr, complex_)
        tiles = tcec_gpu._as_a(cp.ascontiguousarray(arr.swapaxes(-1, -2)).swapaxes(-1, -2), complex_)
        assert tcec_gpu.rows_contiguous(rows) and not tcec_gpu.rows_contiguous(tiles)
        outs = []
        for op in (rows, tiles):
            out = cp.zeros(4, cp.uint64)
            out[1] = 0xFFFFFFFF
            tcec_gpu._range(cp, op, fmt, out)
            outs.append(out.get().tolist())
        assert outs[0] == outs[1], outs


@pytest.mark.parametrize("k", [16, 256, 1024, 4096])
@pytest.mark.parametrize("kind", ["urand", 1, 2, 3, 4])
def test_gpu_accuracy_vs_dd_and_cgemm(kind, k, cp, rng):
    a, b = _pair(kind, 64, k, 48, rng)
    a, b = cp.asarray(a), cp.asarray(b)
    ref = gemm.matmul(_wide(a), _wide(b), method="dd")
    native = _res(a @ b, ref, cp)
    res = {m: _res(_run(a, b, m)[0], ref, cp) for m in ALL}
    print(f"\nkind={kind} k={k} cgemm={native:.2e} " + " ".join(f"{m}={v:.2e}" for m, v in res.items()))
    kp = 2 * k
    assert res["tf32tf32"] <= 2.0**-21 + kp * 2.0**-24  # normwise form of the split + accumulation bound
    if k >= 256 and kind != 4:
        # tf32tf32 reaches 1.36-1.54x of cuBLAS CGEMM at k = 4096 (measured on an H200): the
        # 1.5x claim is asserted up to k = 1024, halfhalf (fewer accumulator additions) everywhere
        if k <= 1024:
            assert res["tf32tf32"] <= 1.5 * native
        assert res["halfhalf"] <= 1.5 * native
        assert res["tc-auto"] <= 1.5 * native
    assert 1e-5 <= res["tf32"] <= 2e-3
    if k >= 1024:
        assert res["markidis"] > 10 * res["tf32tf32"]  # truncation inside the tensor core


def test_gpu_markidis_grows_with_k(cp, rng):
    a, b = _pair("urand", 64, 4096, 64, rng)
    a, b = cp.asarray(a), cp.asarray(b)
    errs = []
    for k in (256, 4096):
        ref = gemm.matmul(_wide(a[:, :k]), _wide(b[:k]), method="dd")
        ak, bk = a[:, :k], b[:k]
        errs.append((_res(_run(ak, bk, "markidis")[0], ref, cp), _res(_run(ak, bk, "tf32tf32")[0], ref, cp)))
    (m256, e256), (m4096, e4096) = errs
    assert m4096 > 4 * m256
    assert m4096 / e4096 > 4 * (m256 / e256) or m4096 > 50 * e4096


def test_gpu_matches_cpu_emulation(cp, rng):
    a, b = _pair(1, 40, 300, 24, rng)
    for method, kw in (("tf32tf32", {"ec_product": "fused"}), ("halfhalf", {"ec_product": "fused"}),
                       ("tf32tf32", {}), ("halfhalf", {}), ("tf32", {}), ("markidis", {})):
        g = _run(cp.asarray(a), cp.asarray(b), method, **kw)[0].get()
        c = _run(a, b, method)[0]
        assert np.linalg.norm(g - c) / np.linalg.norm(c) < 3e-7, (method, kw)


@pytest.mark.parametrize("method", ["tf32tf32", "halfhalf"])
def test_gpu_hybrid_matches_fused(method, cp, rng):
    """The corrections through cuBLAS (hybrid) against the mma.sync fused kernel, on every shape
    case: both as accurate, and apart only by the truncation of the 2^-11 correction terms."""
    hybrid = set()
    for name, (a, b) in _shape_cases(cp, rng).items():
        ch, rh = _run(a, b, method, ec_product="hybrid")
        cf, rf = _run(a, b, method, ec_product="fused", product_kernel="mma")
        assert rf.choices["ec_product"] == "fused"
        ref = cp.matmul(_wide(a), _wide(b))
        r_h, r_f = _res(ch, ref, cp), _res(cf, ref, cp)
        assert r_h < 2e-6 and r_h <= 1.2 * r_f + 1e-8, (name, r_h, r_f)
        assert _res(ch, _wide(cf), cp) < 1e-6, name
        if rh.choices["ec_product"] == "hybrid":
            hybrid.add(name)
            assert "corrections" in rh.stages and rh.workspace_bytes > rf.workspace_bytes, name
        else:  # the padded correction buffer would dwarf the output: fused, and said so
            assert any("fused" in n for n in rh.notes), name
    # the gate-sized products, whose padded tiles match the output, take the hybrid
    assert {"bottom d=8", "top d=8"} <= hybrid, hybrid


def test_gpu_ec_product_auto(cp, rng):
    """ec_product='auto' (the default): the fused product where the wgmma kernel serves it (the
    gate-sized products on sm_90), else the hybrid; the workspace estimate follows the choice."""
    from gemm.tcec import gpu as tcec_gpu

    a, b = _shape_cases(cp, rng)["bottom d=8"]
    c, rep = _run(a, b, "tf32tf32")
    wg = tcec_gpu.wgmma_supported()
    assert rep.choices["ec_product"] == ("fused" if wg else "hybrid"), rep.choices
    assert rep.choices["product_kernel"] == ("wgmma n128-ec" if wg else "mma.sync"), rep.choices
    assert _res(c, cp.matmul(_wide(a), _wide(b)), cp) < 2e-6
    _, rep_h = _run(a, b, "tf32tf32", product_kernel="mma")
    assert rep_h.choices["ec_product"] == "hybrid"
    est = gemm.get_method("tf32tf32").workspace_bytes(a.shape[0], a.shape[1], b.shape[1], np.complex64,
                                                      device="gpu")
    assert est == rep.workspace_bytes, (est, rep.workspace_bytes)  # no correction buffer when fused


def test_gpu_hybrid_buffer_stays_near_the_output(cp, rng):
    """A 1-qubit gate in the batched orientation (2 real rows padded to a 256-row tile) would need
    a correction buffer 64x the state; the method falls back to the fused kernel instead, and its
    workspace stays a small multiple of the state (hi and lo parts, k = 4 reals padded to 16: 8x;
    the hybrid buffer alone would have been 64x)."""
    u = cp.asarray(np.array([[0, 1], [1, 0]], np.complex64))
    s = cp.asarray((rng.standard_normal((1 << 12, 2, 64)) + 1j * rng.standard_normal((1 << 12, 2, 64)))
                   .astype(np.complex64))
    c, rep = _run(u, s, "tf32tf32")
    assert rep.choices["ec_product"] == "fused"
    assert rep.workspace_bytes <= 10 * s.nbytes, (rep.workspace_bytes, s.nbytes)
    assert _res(c, cp.matmul(_wide(u), _wide(s)), cp) < 2e-6


def _shape_cases(cp, rng):
    def c64(*s):
        return cp.asarray((rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(np.complex64))

    u8 = c64(256, 256)
    u4 = c64(16, 16)
    return {
        "bottom d=8": (c64(3000, 256), u8.T),
        "bottom d=4": (c64(5000, 16), u4.T),
        "bottom d=5": (c64(4000, 32), c64(32, 32).T),
        "bottom d=1": (c64(3001, 2), c64(2, 2).T),
        "bottom d=2": (c64(3000, 4), c64(4, 4).T),
        "bottom d=3": (c64(2999, 8), c64(8, 8).T),
        "top d=2": (c64(4, 4), c64(4, 3001)),
        "batched d=3": (c64(8, 8), c64(6, 8, 100)),
        "small transposed left": (c64(3000, 4).T, c64(3000, 100)),  # 8 real rows, split from a strided view
        "top d=8": (u8, c64(256, 2000)),
        "top d=4": (u4, c64(16, 3001)),
        "batched d=8": (u8, c64(5, 256, 64)),
        "batched d=4": (u4, c64(7, 16, 96)),
        "stacked @ 2-D": (c64(3, 130, 70), c64(70, 90)),
        "stacked @ stacked": (c64(2, 33, 47), c64(2, 47, 29)),
        "sliced views": (c64(300, 200)[::2, 3:150], c64(600, 77)[::4][:147, ::-1]),
        "real tails": (cp.asarray(rng.standard_normal((1003, 100)).astype(np.float32)),
                       cp.asarray(rng.standard_normal((100, 77)).astype(np.float32))),
        "real transposed": (cp.asarray(rng.standard_normal((64, 300)).astype(np.float32)).T,
                            cp.asarray(rng.standard_normal((90, 64)).astype(np.float32)).T),
        "real @ complex": (cp.asarray(rng.standard_normal((50, 40)).astype(np.float32)), c64(40, 30)),
    }


@pytest.mark.parametrize("method", ALL)
def test_gpu_shapes_orientations(method, cp, rng):
    for name, (a, b) in _shape_cases(cp, rng).items():
        a0, b0 = a.copy(), b.copy()
        c, rep = _run(a, b, method)
        ref = cp.matmul(_wide(a), _wide(b))
        assert c.shape == ref.shape, name
        tol = 2e-6 if method in EC else (1e-4 if method == "markidis" else 3e-3)
        r = _res(c, ref, cp)
        assert r < tol, (name, r, rep.choices)
        assert bool((a == a0).all()) and bool((b == b0).all()), name


def _need_wgmma():
    from gemm.tcec import gpu as tcec_gpu

    if not tcec_gpu.wgmma_supported():
        pytest.skip("the wgmma product needs an sm_90 GPU")


@pytest.mark.parametrize("wide, narrow", [("n256", "n128"), ("n256x64", "n128"), (None, "n128"),
                                          ("n256-tma", "n128-tma"), ("n256x64-tma", "n128-tma"), (None, "n128-tma")])
@pytest.mark.parametrize("method", ["tf32tf32", "halfhalf", "tf32", "fp16"])
def test_gpu_wgmma_matches_mma(method, wide, narrow, cp, rng):
    """The wgmma product (default on sm_90 for the square tile class; error-corrected: the hybrid's
    hi*hi) against the mma.sync one on every shape case: as accurate (error-corrected: FP32
    level; plain: its own truncation level), and taken for the gate-sized products, and by the
    plain methods also with k tails and batches; with each 256-column configuration where the
    width allows (wide) and a 128-column one elsewhere (narrow; everywhere when wide is None),
    stages loaded by cp.async or by TMA."""
    from gemm.tcec import gpu as tcec_gpu

    _need_wgmma()
    taken = set()
    saved = dict(tcec_gpu.WG_CHOICE)
    tcec_gpu.WG_CHOICE.update({m: (wide, narrow) for m in ("plain", "ec-hybrid")})
    try:
        opts = {"ec_product": "hybrid"} if method in EC else {}  # the fused product: its own test
        for name, (a, b) in _shape_cases(cp, rng).items():
            cw, rw = _run(a, b, method, **opts)
            cm, rm = _run(a, b, method, product_kernel="mma", **opts)
            assert rm.choices["product_kernel"] == "mma.sync", name
            ref = cp.matmul(_wide(a), _wide(b))
            r_w, r_m = _res(cw, ref, cp), _res(cm, ref, cp)
            if method in EC:
                assert r_w < 2e-6 and r_w <= 1.2 * r_m + 1e-8, (name, r_w, r_m)
            else:
                assert r_w <= 1.5 * r_m + 1e-7, (name, r_w, r_m)
            if rw.choices["product_kernel"].startswith("wgmma"):
                taken.add((name, rw.choices["product_kernel"]))
    finally:
        tcec_gpu.WG_CHOICE.update(saved)
    names = {n for n, _ in taken}
    want = {"bottom d=8", "top d=8"} | (set() if method in EC else {"real tails", "stacked @ 2-D"})
    assert want <= names, taken
    assert ("bottom d=8", f"wgmma {wide or narrow}") in taken, taken


@pytest.mark.parametrize("method", ["tf32tf32", "halfhalf"])
def test_gpu_wgmma_fused_matches_mma(method, cp, rng):
    """The fused error-corrected product on wgmma (hi*hi added with RN, lo*hi + hi*lo in its own
    tensor-core accumulator, stages loaded by TMA) against the mma.sync fused kernel: FP32-level
    accurate on every shape case, within 1.2x of it, and taken for the gate-sized products."""
    _need_wgmma()
    taken = set()
    for name, (a, b) in _shape_cases(cp, rng).items():
        cw, rw = _run(a, b, method, ec_product="fused")
        cm, rm = _run(a, b, method, ec_product="fused", product_kernel="mma")
        assert rw.choices["ec_product"] == rm.choices["ec_product"] == "fused", name
        ref = cp.matmul(_wide(a), _wide(b))
        r_w, r_m = _res(cw, ref, cp), _res(cm, ref, cp)
        assert r_w < 2e-6 and r_w <= 1.2 * r_m + 1e-8, (name, r_w, r_m)
        if rw.choices["product_kernel"].startswith("wgmma"):
            taken.add(name)
    assert {"bottom d=8", "top d=8"} <= taken, taken


@pytest.mark.parametrize("method", ["tf32tf32", "tf32"])
def test_gpu_raster_groups_give_the_same_bits(method, cp, rng, monkeypatch):
    """The tile order changes which block computes a tile, never its arithmetic: with an L2
    budget small enough to split the small operand into groups of one, two or three tiles, the
    products (bottom: column groups; top: row groups; wgmma and mma.sync) are bit-identical."""
    from gemm.tcec import gpu as tcec_gpu

    cases = _shape_cases(cp, rng)
    for name in ("bottom d=8", "top d=8", "real tails"):
        a, b = cases[name]
        for kernel in ("auto", "mma"):
            ref = _run(a, b, method, product_kernel=kernel)[0]
            for budget in (1, 300_000, 700_000):
                monkeypatch.setattr(tcec_gpu, "RASTER_L2_BYTES", budget)
                got = _run(a, b, method, product_kernel=kernel)[0]
                monkeypatch.undo()
                assert bool((got == ref).all()), (name, kernel, budget)


def test_gpu_wgmma_forced_where_it_does_not_apply(cp, rng):
    """product_kernel='wgmma' on a product the kernel does not serve (8 real columns: the tiny8
    tile) raises and names the option; 'auto' runs the mma.sync kernel there."""
    _need_wgmma()
    a = cp.asarray(rng.standard_normal((500, 64)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((64, 8)).astype(np.float32))
    with pytest.raises(ValueError, match="product_kernel"):
        _run(a, b, "tf32tf32", product_kernel="wgmma")
    c, rep = _run(a, b, "tf32tf32")
    assert rep.choices["product_kernel"] == "mma.sync"
    assert _res(c, cp.matmul(_wide(a), _wide(b)), cp) < 2e-6


@pytest.mark.parametrize("method", ["tf32tf32", "halfhalf"])
def test_gpu_square16_tile(method, cp, rng):
    from gemm.tcec import gpu as tcec_gpu

    saved = tcec_gpu.SQUARE_TILE
    tcec_gpu.SQUARE_TILE = "square16"
    try:
        tiles = set()
        for name, (a, b) in _shape_cases(cp, rng).items():
            c, rep = _run(a, b, method)
            r = _res(c, cp.matmul(_wide(a), _wide(b)), cp)
            assert r < 2e-6, (name, r, rep.choices)
            tiles.add(rep.choices["tile"].split()[0])
        assert "square16" in tiles and "square" not in tiles
    finally:
        tcec_gpu.SQUARE_TILE = saved


@pytest.mark.parametrize("method", ["tf32tf32", "halfhalf", "tc-auto", "tf32", "fp16"])
def test_gpu_nan_inf(method, cp, rng):
    a = rng.standard_normal((40, 70)).astype(np.float32)
    b = rng.standard_normal((70, 30)).astype(np.float32)
    a[0, 3] = np.inf
    a[1, 0] = np.nan
    a[2, 5] = -np.inf
    b[5, 1] = 0.0
    want = a.astype(np.float64) @ b.astype(np.float64)
    c = _run(cp.asarray(a), cp.asarray(b), method)[0].get()
    assert np.array_equal(np.isnan(c), np.isnan(want))
    assert np.array_equal(np.isposinf(c), np.isposinf(want)) and np.array_equal(np.isneginf(c), np.isneginf(want))


@pytest.mark.parametrize("kind,expect", [("urand", "fp16"), (1, "fp16"), (3, "fp16"), (4, "tf32")])
def test_gpu_tc_auto_choice(kind, expect, cp, rng):
    a, b = _pair(kind, 64, 128, 64, rng)
    _, rep = _run(cp.asarray(a), cp.asarray(b), "tc-auto")
    assert rep.choices["precision"] == expect
    if kind == 4:
        with pytest.warns(FP16RangeWarning, match="fall below FP16's normal range"):
            gemm.matmul(cp.asarray(a), cp.asarray(b), method="halfhalf")


def test_gpu_engine_brickwork_20_qubits(cp):
    """20-qubit d = 6 brickworks (hybrid products, wgmma on sm_90) against double-double: each
    method's l2, mean and infidelity within 1.5x of native CGEMM on every seed; the norm drift,
    whose seed-to-seed scatter (about 3e-8 here) is as large as the bias the debias step removes,
    on the mean over seeds."""
    from circuits.brickwork import brickwork
    from qsim_tc.accuracy import compare
    from qsim_tc.reference import simulate_dd
    from qsim_tc.simulator import Simulator

    keys = ("amp0_real_rel", "max_rel", "mean_rel", "l2_rel", "infidelity", "norm_drift")
    drifts = {}
    for seed in (11, 12, 13):
        circ = brickwork(20, 6, 8, seed=seed)
        ref = simulate_dd(circ, device="gpu")
        native = compare(Simulator(backend="native32", device="gpu").run(circ), ref)
        print(f"\nseed {seed} native32 " + " ".join(f"{k}={native[k]:.2e}" for k in keys))
        for backend, opts in (("tf32tf32", {}), ("tc-auto", {}), ("halfhalf", {}), ("tf32tf32", {"debias": False})):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FP16RangeWarning)
                res = Simulator(backend=backend, device="gpu", **opts).run(circ)
            got = compare(res, ref)
            print(f"seed {seed} {backend} {opts} " + " ".join(f"{k}={got[k]:.2e}" for k in keys))
            if backend == "halfhalf":
                # a state spans more binades than FP16 after scaling (tc-auto takes TF32 there); a
                # forced halfhalf must then say so, or be as accurate as the others: never silently wrong
                warned = any(issubclass(w.category, FP16RangeWarning) for w in caught)
                assert warned or got["l2_rel"] <= 1.5 * native["l2_rel"], (got["l2_rel"], native["l2_rel"])
                continue
            if opts:
                assert got["norm_drift"] < -3e-8  # without debias the truncation drains the norm
                continue
            for key in ("l2_rel", "mean_rel", "infidelity"):
                assert got[key] <= 1.5 * native[key], (seed, backend, key, got[key], native[key])
            assert any(s.info.report is not None and "precision" in s.info.report.choices for s in res.stats)
            drifts.setdefault(backend, []).append(got["norm_drift"])
    for backend, d in drifts.items():
        assert abs(float(np.mean(d))) < 3e-8, (backend, d)


def test_count_below_matches_cpu(cp):
    """The GPU count of elements below FP16's range equals numpy's, on complex, real and strided
    operands (zeros not counted)."""
    from gemm.tcec.gpu import count_below as on_gpu
    from gemm.tcec.split import count_below

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 48)) * 10.0 ** rng.uniform(-9, 2, (64, 48))).astype(np.float32)
    x[::7, ::5] = 0
    z = (x[:, :24] + 1j * x[:, 24:]).astype(np.complex64)
    for host in (x, z, x[:, ::3], z.T):
        for e in (0, 8, 20):
            assert on_gpu(cp, cp.asarray(host), e) == count_below(host, e) > 0
