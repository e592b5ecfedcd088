"""int8-crt on the GPU: bit-identical to the CPU path in every operand form and complex form,
blocks, accuracy against DD and native ZGEMM/DGEMM, zeros and bad input."""

import numpy as np
import pytest

import gemm
from gemm.diagnostics import testmats
from gemm.ozaki.crt import method

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


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("opts", [{}, {"complex_form": "3m"}, {"complex_form": "4m"}, {"moduli": 9},
                                  {"complex_form": "4m", "moduli": 20}])
def test_gpu_bit_identical_to_cpu(cp, rng, form, cplx, opts):
    sa, sb, tb = FORMS[form]
    a = _gen(rng, sa, cplx, 2.0)
    b = _gen(rng, sb[::-1] if tb else sb, cplx, 2.0)
    bh = b.T if tb else b
    bd = cp.asarray(b).T if tb else cp.asarray(b)
    c_cpu, r_cpu = gemm.matmul(a, bh, method=CRT, return_report=True, **opts)
    c_gpu, r_gpu = gemm.matmul(cp.asarray(a), bd, method=CRT, return_report=True, **opts)
    assert r_gpu.device == "gpu" and r_gpu.choices["moduli"] == r_cpu.choices["moduli"]
    got = cp.asnumpy(c_gpu)
    assert got.dtype == c_cpu.dtype and got.shape == c_cpu.shape
    assert np.array_equal(got, c_cpu), f"max |gpu - cpu| = {np.abs(got - c_cpu).max()}"
    assert {"scale", "residues", "int8_gemm", "reconstruct"} <= set(r_gpu.stages)


@pytest.mark.parametrize("form", ["bottom", "top", "batched"])
def test_gpu_blocks_bit_identical(cp, rng, monkeypatch, form):
    sa, sb, tb = FORMS[form]
    a = _gen(rng, sa, True)
    b = _gen(rng, sb[::-1] if tb else sb, True)
    bh, bd = (b.T, cp.asarray(b).T) if tb else (b, cp.asarray(b))
    c_cpu = gemm.matmul(a, bh, method=CRT)
    monkeypatch.setitem(method.BLOCK_BYTES, "gpu", (1, 1))
    c_gpu, rep = gemm.matmul(cp.asarray(a), bd, method=CRT, return_report=True)
    assert rep.choices["blocks"] > 1
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
