"""int8-crt on the GPU: bit-identical to the CPU path in every operand form and complex form,
blocks, accuracy against DD and native ZGEMM/DGEMM, zeros and bad input."""

import numpy as np
import pytest

import gemm
from gemm.diagnostics import testmats
from gemm.ozaki.crt import gpu, method, wgmma
from gemm.ozaki.crt.moduli import Moduli

pytestmark = pytest.mark.gpu
CRT = "int8-crt"


def _gen(rng, shape, cplx, phi=1.0):
    gen = testmats.complex_phi_matrix if cplx else testmats.phi_matrix
    return gen(int(np.prod(shape[:-1])), shape[-1], phi, rng).reshape(shape)


FORMS = {
    # name: (shape a, shape b, transpose b on the device)
    "bottom": ((2048, 64), (64, 64), True),  # S @ U.T with U.T a transposed view
    "top": ((64, 64), (64, 3000), False),  # B the larger operand: blocks of B's lines
    "batched": ((64, 64), (8, 64, 96), False),  # U @ S[h]: lines of B strided (thread-per-line kernels)
    "stacked_a": ((4, 100, 37), (37, 50), False),  # k not a multiple of 16: padded residues
    "both_stacked": ((3, 40, 64), (3, 64, 24), False),
}


def _operands(cp, rng, form, cplx, phi=1.0):
    """``a``, and ``b`` as the CPU and the GPU take it (``bh``, ``bd``: transposed on the device
    where FORMS says so), for the shapes of FORMS[form]."""
    sa, sb, tb = FORMS[form]
    a = _gen(rng, sa, cplx, phi)
    b = _gen(rng, sb[::-1] if tb else sb, cplx, phi)
    return a, (b.T if tb else b), (cp.asarray(b).T if tb else cp.asarray(b))


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("opts", [{}, {"complex_form": "3m"}, {"complex_form": "4m"}, {"moduli": 9},
                                  {"complex_form": "4m", "moduli": 20}, {"product_kernel": "cublas"},
                                  {"product_kernel": "cublas", "complex_form": "3m"}])
def test_gpu_bit_identical_to_cpu(cp, rng, form, cplx, opts):
    a, bh, bd = _operands(cp, rng, form, cplx, 2.0)
    c_cpu, r_cpu = gemm.matmul(a, bh, method=CRT, return_report=True, **opts)
    c_gpu, r_gpu = gemm.matmul(cp.asarray(a), bd, method=CRT, return_report=True, **opts)
    assert r_gpu.device == "gpu" and r_gpu.choices["moduli"] == r_cpu.choices["moduli"]
    got = cp.asnumpy(c_gpu)
    assert got.dtype == c_cpu.dtype and got.shape == c_cpu.shape
    assert np.array_equal(got, c_cpu), f"max |gpu - cpu| = {np.abs(got - c_cpu).max()}"
    assert {"scale", "residues", "int8_gemm", "reconstruct"} <= set(r_gpu.stages)


@pytest.mark.parametrize("kernel", ["auto", "cublas"])
@pytest.mark.parametrize("form", ["bottom", "top", "batched"])
def test_gpu_blocks_bit_identical(cp, rng, monkeypatch, form, kernel):
    a, bh, bd = _operands(cp, rng, form, True)
    c_cpu = gemm.matmul(a, bh, method=CRT)
    monkeypatch.setitem(method.BLOCK_BYTES, "gpu", (1, 1))
    c_gpu, rep = gemm.matmul(cp.asarray(a), bd, method=CRT, return_report=True, product_kernel=kernel)
    assert rep.choices["blocks"] > 1
    assert rep.choices["product_kernel"] == ("wgmma" if kernel == "auto" and wgmma.supported(cp) else "cublas")
    assert np.array_equal(cp.asnumpy(c_gpu), c_cpu)


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("phi", [0.1, 1.0, 2.0, 4.0])
def test_gpu_phi_at_or_below_native(cp, phi, cplx):
    rng = np.random.default_rng(int(phi * 10) + 11)
    a = _gen(rng, (64, 1024), cplx, phi)
    b = _gen(rng, (1024, 64), cplx, phi)
    hi, lo = gemm.matmul(a, b, method="dd", output="pair")

    def mean_rel(c):
        return float(np.mean(np.abs((c - hi) - lo) / np.abs(hi)))

    e_crt = mean_rel(cp.asnumpy(gemm.matmul(cp.asarray(a), cp.asarray(b), method=CRT)))
    e_native = mean_rel(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)))
    assert e_crt <= e_native, (e_crt, e_native)


def test_gpu_gate_shape_against_zgemm(cp):
    """A d = 8 gate on 16 qubits: every form against cuBLAS ZGEMM and the CPU path."""
    rng = np.random.default_rng(5)
    u = testmats.complex_urand(256, 256, rng)
    s = testmats.complex_urand(256, 256, rng)
    ref = cp.asnumpy(cp.asarray(s) @ cp.asarray(u).T)
    for f in ("2m", "3m", "4m"):
        got = cp.asnumpy(gemm.matmul(cp.asarray(s), cp.asarray(u).T, method=CRT, complex_form=f))
        assert np.abs(got - ref).max() <= 1e-13 * np.abs(ref).max()
        assert np.array_equal(got, gemm.matmul(s, u.T, method=CRT, complex_form=f))


def test_gpu_zeros_and_non_finite(cp, rng):
    a = _gen(rng, (40, 32), True)
    b = _gen(rng, (32, 24), True)
    a[3] = 0
    b[:, 5] = 0
    got = cp.asnumpy(gemm.matmul(cp.asarray(a), cp.asarray(b), method=CRT))
    assert np.all(got[3] == 0) and np.all(got[:, 5] == 0)
    assert np.array_equal(got, gemm.matmul(a, b, method=CRT))
    b[2, 2] = np.nan
    with pytest.raises(gemm.NonFiniteError, match=r"^b holds 1 NaN/Inf element\(s\)"):
        gemm.matmul(cp.asarray(a), cp.asarray(b), method=CRT)


def _wgmma_or_skip(cp):
    if not wgmma.supported(cp):
        pytest.skip("the fused INT8 product needs an sm_90 GPU")


@pytest.mark.parametrize("rows, cols, kp, n, G, family, extreme", [
    (300, 200, 128, 3, 2, "split", False),     # partial tiles in both directions
    (129, 257, 256, 2, 1, "general", True),    # p = 256 and -128 * -128 sums at the INT32 bound's side
    (1000, 1024, 1024, 4, 2, "general", False),
    (64, 16, 2048, 3, 3, "general", True),     # 16 B lines: one partial column tile
])
@pytest.mark.parametrize("load", wgmma.LOADS)
def test_fused_products_are_the_int32_products_mod_p(cp, rng, rows, cols, kp, n, G, family, extreme, load):
    _wgmma_or_skip(cp)
    mods = Moduli.first(n, family)
    if extreme:
        RA = cp.full((n, G, rows, kp), -128, dtype=cp.int8)
        RB = cp.full((n, G, cols, kp), -128, dtype=cp.int8)
        RA[..., ::3] = 127
    else:
        RA = cp.asarray(rng.integers(-128, 128, (n, G, rows, kp), dtype=np.int8))
        RB = cp.asarray(rng.integers(-128, 128, (n, G, cols, kp), dtype=np.int8))
    got = wgmma.products_r8(cp, RA, RB, mods, load=load)
    assert got.shape == (n, G, rows, -(-cols // 16) * 16) and got.dtype == cp.int8
    P = gpu.products(cp, RA, RB, mods, None)[..., :cols].astype(cp.int64)
    p = cp.asarray(np.array(mods.values, dtype=np.int64))[:, None, None, None]
    assert bool(((P - got[..., :cols].astype(cp.int64)) % p == 0).all())


def test_fused_products_reject_unaligned_residues(cp):
    _wgmma_or_skip(cp)
    mods = Moduli.first(2, "split")
    RA = cp.zeros((2, 1, 10, 96), dtype=cp.int8)
    with pytest.raises(ValueError, match="128-byte multiples"):
        wgmma.products_r8(cp, RA, RA, mods)


def test_product_kernel_wgmma_needs_sm90(cp, rng):
    a = cp.asarray(_gen(rng, (64, 32), True))
    if wgmma.supported(cp):
        c, rep = gemm.matmul(a, a[:32].T, method=CRT, return_report=True, product_kernel="wgmma")
        assert rep.choices["product_kernel"] == "wgmma"
    else:
        with pytest.raises(ValueError, match="product_kernel='wgmma' needs an sm_90 GPU"):
            gemm.matmul(a, a[:32].T, method=CRT, product_kernel="wgmma")


@pytest.mark.parametrize("K, cplx", [(100, True), (256, False), (512, False), (1000, True), (1024, True),
                                     (4096, True), (8192, False)])
def test_gpu_line_exponents_match_cpu(cp, rng, K, cplx):
    """Norm exponents, NaN/Inf counts and depth histograms of the GPU kernels (warp, and block per
    line from 512 doubles a line) against scale.line_exponents, with zero lines, a NaN line,
    a spread of exponents and a line of subnormals."""
    from gemm.ozaki.crt import cpu

    a = _gen(rng, (37, K), cplx, 4.0)
    a[3] = 0
    a[5, : K // 2] = 0
    a[7] *= 2.0 ** -1060  # subnormals
    a[9] *= 2.0 ** 900
    b = _gen(rng, (K, 6), cplx, 1.0)  # B's lines: strided columns (thread per line)
    X = method._as_lines(cp.asarray(a), "a")
    XB = method._as_lines(cp.asarray(b), "b")
    ea, eb, (bad_a, bad_b, ha, hb) = gpu.line_exponents(cp, X, XB, cplx, True)
    ea_c, eb_c, (bad_ac, bad_bc, ha_c, hb_c) = cpu.line_exponents(np, method._as_lines(a, "a"),
                                                                  method._as_lines(b, "b"), cplx, True)
    assert (bad_a, bad_b) == (bad_ac, bad_bc) == (0, 0)
    assert np.array_equal(cp.asnumpy(ea), np.asarray(ea_c)) and np.array_equal(cp.asnumpy(eb), np.asarray(eb_c))
    assert np.array_equal(ha, ha_c) and np.array_equal(hb, hb_c) and ha.sum() > 0
    a[11, K // 3] = np.inf
    a[12, 1] = np.nan
    _, _, (bad_a, _, _, _) = gpu.line_exponents(cp, method._as_lines(cp.asarray(a), "a"), XB, cplx, True)
    assert bad_a == 2


# --- the reconstruction's word sums on INT8 tensor cores (gpu.reconstruct_mma) -----------------


@pytest.mark.parametrize("form, n", [("2m", 17), ("2m", 20), ("3m", 20), (None, 16), ("2m", 2), (None, 9)])
@pytest.mark.parametrize("rows, cols", [(300, 1024), (7, 200), (129, 33)])
def test_mma_reconstruct_matches_fp64_kernel(cp, rng, form, n, rows, cols):
    """crt_reconstruct_mma and crt_reconstruct_r8 give the same bits on any INT8 residues (the
    extremes -128 and 127 included), partial column blocks included."""
    mods = Moduli.first(n, "split" if form == "2m" else "general")
    G = {None: 1, "2m": 2, "3m": 3}[form]
    ld = -(-cols // 16) * 16
    R8 = rng.integers(-128, 128, (n, G, rows, ld), dtype=np.int8)
    R8[..., :4] = -128
    R8[..., 4:8] = 127
    R8 = cp.asarray(R8)
    E_a = cp.asarray(rng.integers(-3, 4, rows).astype(np.int32))
    E_b = cp.asarray(rng.integers(-3, 4, cols).astype(np.int32))
    dtype = np.float64 if form is None else np.complex128
    ref, got = (cp.full((rows, cols), np.nan, dtype=dtype) for _ in range(2))
    gpu.reconstruct_r8(cp, R8, mods, form, E_a, E_b, 0, 0, cols, ref)
    gpu.reconstruct_mma(cp, R8, mods, form, E_a, E_b, 0, 0, cols, got)
    assert np.array_equal(cp.asnumpy(got), cp.asnumpy(ref), equal_nan=False)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cplx, opts", [(True, {}), (True, {"complex_form": "3m"}), (False, {}),
                                        (True, {"moduli": 20})])
def test_gpu_mma_reconstruct_bit_identical_to_cpu(cp, rng, monkeypatch, form, cplx, opts):
    _wgmma_or_skip(cp)
    monkeypatch.setattr(gpu, "RECONSTRUCT", "mma")
    a, bh, bd = _operands(cp, rng, form, cplx, 2.0)
    c_cpu = gemm.matmul(a, bh, method=CRT, **opts)
    c_gpu, rep = gemm.matmul(cp.asarray(a), bd, method=CRT, return_report=True, **opts)
    assert rep.choices["reconstruct_kernel"] == "mma"
    assert np.array_equal(cp.asnumpy(c_gpu), c_cpu)


def test_gpu_mma_reconstruct_leaves_4m_to_fp64(cp, rng, monkeypatch):
    _wgmma_or_skip(cp)
    monkeypatch.setattr(gpu, "RECONSTRUCT", "mma")
    a = cp.asarray(_gen(rng, (256, 64), True))
    _, rep = gemm.matmul(a, a[:40].T, method=CRT, return_report=True, complex_form="4m")
    assert rep.choices["reconstruct_kernel"] == "fp64"


# --- the residues on INT8 tensor cores (gpu.RESIDUES = "mma", crt_residues_mma) ---------------


def _adversarial(rng, shape, cplx):
    """Spread exponents with zero lines, one lone huge element, subnormal-only lines (their scaled
    integers reach past 64 bits at 17+ general moduli), huge next to tiny."""
    def part():
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))
        x[0] = 0.0
        x[1] = -0.0
        x[2] = 0.0
        x[2, shape[1] // 2] = -3.0 * 2.0 ** 900
        x[3] = 5e-324 * rng.integers(-5, 6, shape[1])
        x[4] = np.where(rng.random(shape[1]) < 0.5, 1e300, 1e-300)
        return x
    return part() + 1j * part() if cplx else part()


@pytest.mark.parametrize("form", [None, "2m", "3m", "4m"])
@pytest.mark.parametrize("role", ["a", "b"])
@pytest.mark.parametrize("K, n", [(37, 2), (64, 9), (1024, 17), (100, 20), (69, 20)])
@pytest.mark.parametrize("strided", [False, True])
def test_mma_residues_match_fp32_kernel_and_cpu(cp, rng, form, role, K, n, strided):
    """crt_residues_mma's bytes equal crt_residues_J's and cpu.residues' (K-major and strided
    lines, ragged tiles, a block of lines from line0 > 0, 4m's odd K)."""
    from gemm.ozaki.crt import cpu
    from gemm.ozaki.crt.moduli import dot_length, family_for

    cplx = form is not None
    mods = Moduli.first(n, family_for(form))
    bits = mods.alpha if role == "a" else mods.beta
    a = _adversarial(rng, (45, K), cplx)
    ad = cp.asfortranarray(cp.asarray(a)) if strided else cp.asarray(a)
    X = method._as_lines(ad, "a")
    E, _, _ = gpu.line_exponents(cp, X, X, cplx, False)
    kp = -(-dot_length(form, K) // 16) * 16
    ref = gpu.residues(cp, X, E, bits, 3, 40, mods, form, role, kp, kernel="fp32")
    got = gpu.residues(cp, X, E, bits, 3, 40, mods, form, role, kp, kernel="mma")
    assert np.array_equal(cp.asnumpy(got), cp.asnumpy(ref))
    want = cpu.residues(np, method._as_lines(a, "a"), cp.asnumpy(E).astype(np.int64), bits, 3, 40, mods, form,
                        role, kp)
    assert np.array_equal(cp.asnumpy(got), want.astype(np.int8))


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cplx, opts", [(True, {}), (True, {"complex_form": "3m"}), (True, {"complex_form": "4m"}),
                                        (False, {}), (True, {"moduli": 20}), (False, {"moduli": 20}),
                                        (True, {"product_kernel": "cublas"})])
def test_gpu_mma_residues_bit_identical_to_cpu(cp, rng, monkeypatch, form, cplx, opts):
    monkeypatch.setattr(gpu, "RESIDUES", "mma")
    a, bh, bd = _operands(cp, rng, form, cplx, 2.0)
    c_cpu = gemm.matmul(a, bh, method=CRT, **opts)
    c_gpu, rep = gemm.matmul(cp.asarray(a), bd, method=CRT, return_report=True, **opts)
    assert rep.choices["residues_kernel"] == "mma"
    assert np.array_equal(cp.asnumpy(c_gpu), c_cpu)


@pytest.mark.parametrize("kernel", ["fp32", "mma"])
def test_gpu_subnormal_lines_at_20_moduli(cp, rng, monkeypatch, kernel):
    """Lines of subnormals scale to integers past 2^64 at 20 general moduli: both residue kernels
    give the CPU's product (the FP32 kernel's digits had kept only the low 64 bits)."""
    monkeypatch.setattr(gpu, "RESIDUES", kernel)
    a = rng.standard_normal((64, 48))
    a[5] = 5e-324 * rng.integers(-7, 8, 48)
    b = rng.standard_normal((48, 40))
    c_cpu = gemm.matmul(a, b, method=CRT, moduli=20)
    c_gpu = gemm.matmul(cp.asarray(a), cp.asarray(b), method=CRT, moduli=20)
    assert np.array_equal(cp.asnumpy(c_gpu), c_cpu)
    assert np.any(c_cpu[5] != 0)
