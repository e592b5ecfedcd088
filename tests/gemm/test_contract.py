"""The contract of ``gemm.Method``, checked for every registered method (a newly registered one is
covered without editing this file)."""

from __future__ import annotations

import numpy as np
import pytest

import gemm
from gemm.method import PRECISIONS

# relative Frobenius error against dd allowed per precision class, at the sizes below; a class
# missing here fails the test of a method that declares it
BOUNDS = {"dd": 1e-15, "fp64": 1e-13, "fp32": 1e-5, "fp32-tc": 1e-5, "tf32": 4e-3, "fp16": 4e-3}
SHAPES = ((5, 4, 3), (2, 6, 4, 4))  # (m, k, n) and a stacked (p, m, k, n) with a broadcast b
NAMES = gemm.methods()


class _Sentinel:
    """A value of a type no option accepts."""


def _operands(method, kind, shape, rng):
    real = np.float32 if method.state_dtype == np.complex64 else np.float64
    if len(shape) == 3:
        m, k, n = shape
        sa, sb = (m, k), (k, n)
    else:
        p, m, k, n = shape
        sa, sb = (p, m, k), (k, n)

    def draw(s):
        x = rng.uniform(-1, 1, s)
        if kind == "c":
            x = x + 1j * rng.uniform(-1, 1, s)
        return x.astype(np.result_type(real, np.complex64) if kind == "c" else real)

    return draw(sa), draw(sb)


def _rel_fro(c, ref) -> float:
    return float(np.linalg.norm((c - ref).ravel()) / np.linalg.norm(ref.ravel()))


@pytest.mark.parametrize("name", NAMES)
def test_declarations(name):
    m = gemm.get_method(name)
    assert m.name == name
    assert m.precision in PRECISIONS and m.state_dtype in (np.complex64, np.complex128)
    assert isinstance(m.direct_small_gates, bool)
    assert set(m.options) == set(m.option_specs)
    for opt, spec in m.option_specs.items():
        assert m.options[opt] is spec.default
        checked = spec.check(opt, spec.default)  # the default passes its own check
        assert checked is spec.default or checked == spec.default


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["c", "f"])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_dd_within_precision_class(name, kind, shape, rng):
    m = gemm.get_method(name)
    assert m.precision in BOUNDS, f"method {name!r} declares precision {m.precision!r}, which has no bound here"
    a, b = _operands(m, kind, shape, rng)
    if np.dtype(a.dtype) not in m.dtypes:
        pytest.skip(f"{name} does not declare {a.dtype}")
    c, report = gemm.matmul(a, b, method=name, return_report=True)
    assert c.shape == np.matmul(a, b).shape and c.dtype == np.result_type(a, b)
    assert report.method == name and report.device == "cpu"
    ref = gemm.matmul(a.astype(np.complex128 if kind == "c" else np.float64),
                      b.astype(np.complex128 if kind == "c" else np.float64), method="dd")
    err = _rel_fro(np.asarray(c, dtype=ref.dtype), ref)
    assert err <= BOUNDS[m.precision], f"{name}: relative Frobenius error {err:.3g} > {BOUNDS[m.precision]:g}"


@pytest.mark.parametrize("name", NAMES)
def test_declares_complex_and_real(name):
    kinds = {np.dtype(d).kind for d in gemm.get_method(name).dtypes}
    assert kinds == {"c", "f"}


@pytest.mark.parametrize("name", NAMES)
def test_bad_option_values_rejected_before_work(name, monkeypatch, rng):
    m = gemm.get_method(name)
    ran = []
    monkeypatch.setattr(type(m), "_run", lambda self, *args, **kw: ran.append(1))
    a, b = _operands(m, "c", (3, 2, 2), rng)
    for opt in m.option_specs:
        with pytest.raises((TypeError, ValueError)) as info:
            m.check_options({opt: _Sentinel()})
        assert opt in str(info.value)
        with pytest.raises((TypeError, ValueError)) as info:
            m(a, b, **{opt: _Sentinel()})
        assert opt in str(info.value)
    assert not ran


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_rejected(name):
    m = gemm.get_method(name)
    with pytest.raises(TypeError, match=rf"method '{name}' got unknown option\(s\) no_such_option"):
        m.check_options({"no_such_option": 1})


@pytest.mark.parametrize("name, opts, exc, match", [
    ("tf32tf32", {"ec_product": "x"}, ValueError, r"option ec_product='x' is not valid; expected one of auto, hybrid, fused"),
    ("halfhalf", {"on_range": "ignore"}, ValueError, r"option on_range='ignore' is not valid; expected one of warn, raise"),
    ("tc-auto", {"debias": 1}, TypeError, r"option debias must be True or False, got 1 \(int\)"),
    ("tf32", {"product_kernel": "tma"}, ValueError, r"option product_kernel='tma' is not valid"),
    ("dd", {"bits": 3}, ValueError, r"option bits=3 is not valid; expected an int in 53\.\.200"),
    ("dd", {"bits": "116"}, TypeError, r"option bits must be an int in 53\.\.200, got '116' \(str\)"),
    ("dd", {"chunk_rows": 0}, ValueError, r"option chunk_rows=0 is not valid; expected an int >= 1 or None"),
    ("dd", {"output": "both"}, ValueError, r"option output='both' is not valid; expected one of rounded, pair"),
    ("dd", {"a_lo": [1.0]}, TypeError, r"option a_lo must be a numpy or cupy array or None, got list"),
    ("int8", {"splits": 21}, ValueError, r"option splits=21 is not valid; expected an int in 3\.\.20"),
    ("native", {"out": 0}, TypeError, r"option out must be a numpy or cupy array or None, got int"),
])
def test_option_messages(name, opts, exc, match):
    with pytest.raises(exc, match=match):
        gemm.get_method(name).check_options(opts)


def test_check_options_normalises_values():
    assert gemm.get_method("int8").check_options({"splits": np.int64(9)}) == {"splits": 9}
    assert type(gemm.get_method("int8").check_options({"splits": np.int64(9)})["splits"]) is int
    assert gemm.get_method("int8-auto").check_options({"threshold": 1}) == {"threshold": 1.0, "max_splits": 16}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("dtype", [np.complex128, np.float64, np.complex64, np.float32])
def test_workspace_bytes(name, device, dtype):
    m = gemm.get_method(name)
    ws = m.workspace_bytes(64, 16, 16, dtype, device=device)
    assert isinstance(ws, int) and ws >= 0
    if m.option_specs:
        opt = next(iter(m.option_specs))
        with pytest.raises((TypeError, ValueError), match=opt):
            m.workspace_bytes(64, 16, 16, dtype, device=device, **{opt: _Sentinel()})
