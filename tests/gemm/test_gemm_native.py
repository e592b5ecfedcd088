"""The gemm layer: registry, matmul semantics, reports, validation, device selection."""

import numpy as np
import pytest

import gemm
from gemm.native.method import real_form


def cplx(rng, *shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((4, 5, 7), (7, 3)), ((5, 7), (4, 7, 3)),
                                   ((4, 5, 7), (4, 7, 3)), ((300, 16), (16, 16))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_native_matches_numpy_matmul(rng, sa, sb, dtype):
    a = cplx(rng, *sa).astype(dtype) if np.dtype(dtype).kind == "c" else rng.standard_normal(sa).astype(dtype)
    b = cplx(rng, *sb).astype(dtype) if np.dtype(dtype).kind == "c" else rng.standard_normal(sb).astype(dtype)
    c, rep = gemm.matmul(a, b, return_report=True)
    ref = a.astype(np.complex128) @ b.astype(np.complex128)
    tol = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    assert c.shape == ref.shape and c.dtype == dtype
    assert np.abs(c - ref).max() <= tol * max(1.0, np.abs(ref).max())
    assert rep.method == "native" and rep.device == "cpu" and rep.shape_c == ref.shape
    k = sa[-1]
    batch = max(sa[0] if len(sa) == 3 else 1, sb[0] if len(sb) == 3 else 1)
    assert rep.flops == (8 if np.dtype(dtype).kind == "c" else 2) * ref.shape[-2] * ref.shape[-1] * k * batch
    assert "gemm" in rep.stages and rep.to_dict()["stages_ms"]["gemm"] >= 0


def test_real_form_is_the_complex_product(rng):
    a, b = cplx(rng, 50, 8), cplx(rng, 8, 4)
    assert np.allclose((a.view(np.float64) @ real_form(b)).view(np.complex128), a @ b, atol=1e-13)


def test_transposed_view_operand(rng):
    a, u = cplx(rng, 256, 8), cplx(rng, 8, 8)
    assert np.allclose(gemm.matmul(a, u.T), a @ u.T, atol=1e-13)


def test_methods_and_registry():
    assert "native" in gemm.methods()
    assert gemm.get_method("native").precision == "fp64"
    assert gemm.get_method("native32").state_dtype == np.complex64
    with pytest.raises(ValueError, match="unknown GEMM method 'nope'; valid methods: native"):
        gemm.matmul(np.eye(2), np.eye(2), method="nope")


@pytest.mark.parametrize("a,b,err,match", [
    (np.eye(2), [[1, 0], [0, 1]], TypeError, "b must be a numpy or cupy array"),
    (np.ones(3), np.eye(3), ValueError, r"a must be 2-D or 3-D"),
    (np.ones((2, 3)), np.ones((2, 3)), ValueError, r"inner dimensions differ"),
    (np.ones((2, 2, 3)), np.ones((3, 3, 2)), ValueError, r"batch sizes differ"),
    (np.ones((2, 2), dtype=np.int32), np.eye(2), TypeError, r"a has dtype int32"),
    (np.ones((0, 2)), np.eye(2), ValueError, "empty dimension"),
])
def test_operand_validation(a, b, err, match):
    with pytest.raises(err, match=match):
        gemm.matmul(a, b)


def test_resolve_device():
    cpu = gemm.resolve_device("cpu")
    assert cpu.name == "cpu" and cpu.xp is np
    auto = gemm.resolve_device("auto")
    assert auto.reason.startswith("auto:")
    assert (auto.name == "gpu") == gemm.gpu_available()
    with pytest.raises(ValueError, match="expected one of auto, cpu, gpu"):
        gemm.resolve_device("npu")
