"""The machine and library versions a result was measured with, for every result file."""

from __future__ import annotations

import platform

import numpy as np

import gemm


def environment() -> dict:
    """Machine and library versions, for result files."""
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "numpy": np.__version__,
    }
    try:
        import scipy  # noqa: PLC0415

        env["scipy"] = scipy.__version__
    except ImportError:
        pass
    if gemm.gpu_available():
        import cupy  # noqa: PLC0415

        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        env["gpu"] = name.decode() if isinstance(name, bytes) else name
        env["cupy"] = cupy.__version__
        env["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        env["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
        try:
            env["cublas"] = cupy.cuda.cublas.getVersion(cupy.cuda.device.get_cublas_handle())
        except Exception:  # noqa: BLE001 - version is informative only
            pass
    return env
