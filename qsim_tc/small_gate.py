"""Gates of 1 to 4 qubits on the GPU: a dedicated in-place kernel instead of a GEMM.

A GEMM with k = n = 2^d <= 16 runs far below the memory rate (cuBLAS ZGEMM took 26.7 ms for
d = 2 at 28 qubits where one pass over the state takes 2.1 ms). The kernel in
``kernels/small_gate.cu`` reads each amplitude once and writes it once, at any target positions.
It computes the same sums of products as the native method, so it stands in for it; emulated
methods (whose arithmetic differs) always get their GEMM.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

MAX_QUBITS = 4
_BLOCK = 256


@functools.lru_cache(maxsize=None)
def _module(device_id: int):
    import cupy  # noqa: PLC0415

    code = resources.files("qsim_tc.kernels").joinpath("small_gate.cu").read_text()
    names = [f"apply_small<{t}, {d}>" for t in ("double", "float") for d in range(1, MAX_QUBITS + 1)]
    return cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


def apply_small_gpu(data, n_qubits: int, matrix: np.ndarray, positions) -> object:
    """Apply ``matrix`` (host, bit j of its index = ``positions[j]``, ascending) to ``data`` in place."""
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = "double" if data.dtype == np.complex128 else "float"
    kern = _module(cupy.cuda.Device().id).get_function(f"apply_small<{real}, {d}>")
    u = cupy.asarray(np.ascontiguousarray(matrix, dtype=data.dtype))
    n_groups = (1 << n_qubits) >> d
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid = int(min((n_groups + _BLOCK - 1) // _BLOCK, sms * 16))
    p = list(positions) + [0] * (4 - d)
    kern((grid,), (_BLOCK,), (data, u, np.int64(n_groups), np.int32(p[0]), np.int32(p[1]),
                             np.int32(p[2]), np.int32(p[3])))
    return data


def select(method, d: int, device, want):
    """The small-gate kernel to use for a d-qubit gate, or None for the GEMM path.

    Args:
        method: the gemm Method; only one with ``direct_small_gates`` may be replaced.
        d: number of target qubits.
        device: the state's gemm.Device.
        want: None (use the kernel where allowed), True (require it) or False (never).

    Raises:
        ValueError: ``want`` is True but the kernel cannot stand in for this method or size.
    """
    if want is False:
        return None
    allowed = getattr(method, "direct_small_gates", False)
    ok = allowed and d <= MAX_QUBITS and device.is_gpu
    if want is True and not ok:
        why = (f"method {method.name!r} computes every gate as its own GEMM" if not allowed
               else f"the kernel handles 1..{MAX_QUBITS} qubits on the GPU (got d={d} on the {device.name})")
        raise ValueError(f"small_gate_kernel=True cannot be honoured: {why}")
    return apply_small_gpu if ok else None
