"""Error models of one product of every CPU method (``Method.error_model``), against double-double."""

import math
import warnings

import numpy as np
import pytest

import gemm
from circuits.haar import haar_unitary
from gemm import error_model as em

CPU_METHODS = ["native", "native32", "int8", "int8-auto", "int8-crt", "tf32tf32", "halfhalf", "tc-auto", "dd"]


def _state(n, rng, dtype):
    x = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    return (x / np.linalg.norm(x)).astype(dtype)


@pytest.mark.parametrize("method", CPU_METHODS)
@pytest.mark.parametrize("d", [1, 3, 5])
def test_one_product_within_bound_and_near_estimate(method, d):
    rng = np.random.default_rng(d)
    m = gemm.get_method(method)
    dtype = m.state_dtype
    u = haar_unitary(1 << d, rng)
    x = _state(10, rng, dtype).reshape(-1, 1 << d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, rep = gemm.matmul(x, u.T.astype(dtype), method=method, return_report=True)
    hi, lo = gemm.matmul(x.astype(np.complex128), np.ascontiguousarray(u.T), method="dd", output="pair")
    err = np.linalg.norm((y.astype(np.complex128) - hi) - lo)
    ctx = em.ProductContext.for_matrix(u, dtype, float(np.linalg.norm(x.astype(np.complex128))),
                                       n_amplitudes=x.size, choices=rep.choices)
    e = m.error_model(ctx)
    assert e is not None
    assert err <= e.bound
    if method != "dd":  # dd's error is the output rounding alone; estimate and bound both tiny
        assert e.estimate / 10 <= err <= 10 * e.estimate, (err, e.estimate)


def test_methods_without_a_model_report_none():
    ctx = em.ProductContext(2, np.complex64, 1.0, 2.0, 2.0, choices={"precision": "tf32"})
    for name in ("markidis", "tf32", "fp16"):
        assert gemm.get_method(name).error_model(ctx) is None
    # halfhalf out of FP16's range after scaling: no bound, not a guess
    ctx = em.ProductContext(2, np.complex64, 1.0, 2.0, 2.0, choices={"fp16_fits": False, "fp16_scale_exp": [3, 4]})
    assert gemm.get_method("halfhalf").error_model(ctx) is None
    # a model that needs a choice the report lacks says so
    assert gemm.get_method("int8-crt").error_model(em.ProductContext(2, np.complex128, 1.0, 2.0, 2.0)) is None


def test_gamma_and_abs_norm():
    assert em.gamma(4, 2.0 ** -53) == pytest.approx(4 * 2.0 ** -53)
    assert em.gamma(2 ** 30, 2.0 ** -24) == math.inf
    h = np.array([[1, 1], [1, -1]]) / math.sqrt(2)
    assert em.abs_norm_bound(h) == pytest.approx(math.sqrt(2))
    assert em.abs_norm_bound(np.eye(8)[::-1]) == pytest.approx(1.0)  # a permutation
    with pytest.raises(ValueError, match="2\\^d x 2\\^d"):
        em.ProductContext.for_matrix(np.eye(3), np.complex128, 1.0)


