"""gemm: matrix products, native or emulated on low-precision tensor cores.

Usable on its own, with no quantum knowledge::

    import gemm
    c, report = gemm.matmul(a, b, method="native", return_report=True)
    gemm.methods()   # the registered names
"""

from gemm.device import Device, gpu_available, resolve_device
from gemm.errors import DeviceError, GemmError, NonFiniteError
from gemm.method import Method
from gemm.registry import get_method, matmul, methods, register
from gemm.report import Report

__all__ = [
    "Device",
    "DeviceError",
    "GemmError",
    "Method",
    "NonFiniteError",
    "Report",
    "get_method",
    "gpu_available",
    "matmul",
    "methods",
    "register",
    "resolve_device",
]
