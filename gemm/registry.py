"""The one place that maps method names to implementations.

Modules are imported lazily on first use, so a method with optional dependencies (cupy) costs
nothing until it is asked for.
"""

from __future__ import annotations

import importlib

from gemm.method import Method

# name -> "module:Class"
_TABLE: dict[str, str] = {
    "native": "gemm.native.method:Native",
    "native32": "gemm.native.method:Native32",
    "native3m": "gemm.native.method:Native3M",
    "dd": "gemm.dd.method:DoubleDouble",
    "int8": "gemm.ozaki.method:Int8",
    "int8-auto": "gemm.ozaki.method:Int8Auto",
    "int8-crt": "gemm.ozaki.crt.method:Int8CRT",
    "tf32tf32": "gemm.tcec.method:TF32TF32",
    "halfhalf": "gemm.tcec.method:HalfHalf",
    "tc-auto": "gemm.tcec.method:TCAuto",
    "tf32": "gemm.tcec.method:TF32",
    "fp16": "gemm.tcec.method:FP16",
    "markidis": "gemm.tcec.method:Markidis",
}
_CACHE: dict[str, Method] = {}


def register(name: str, target: str) -> None:
    """Register ``target`` (``"module:Class"``) under ``name``, replacing none silently."""
    if name in _TABLE and _TABLE[name] != target:
        raise ValueError(f"method {name!r} is already registered as {_TABLE[name]}")
    _TABLE[name] = target


def methods() -> list[str]:
    """The registered method names."""
    return list(_TABLE)


def get_method(name: str) -> Method:
    """The method object registered under ``name``.

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    if not isinstance(name, str) or name not in _TABLE:
        raise ValueError(f"unknown GEMM method {name!r}; valid methods: {', '.join(_TABLE)}")
    if name not in _CACHE:
        module, cls = _TABLE[name].split(":")
        _CACHE[name] = getattr(importlib.import_module(module), cls)()
    return _CACHE[name]


def matmul(a, b, method: str = "native", return_report: bool = False, **options):
    """``a @ b`` computed by ``method``, with numpy ``matmul`` semantics (2-D and stacked 3-D).

    Args:
        a, b: numpy or cupy arrays (both on one device), real or complex.
        method: a name from :func:`methods`.
        return_report: also return the :class:`gemm.Report` of the call.
        **options: method options (for example ``splits=`` or ``threshold=``).

    Returns:
        The product, or ``(product, report)`` when ``return_report`` is true.

    Raises:
        ValueError: unknown method, bad shapes; TypeError: bad dtypes or unknown options;
        gemm.NonFiniteError: NaN/Inf given to a method that cannot carry them.
    """
    c, report = get_method(method)(a, b, **options)
    return (c, report) if return_report else c
