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

MAX_QUBITS = 6
# d -> (LOG_G, R): 2^LOG_G groups per tile, R matrix rows per thread (threads = 2^LOG_G * 2^d / R);
# tiles of 2048 amplitudes, 32 KB in complex128
CONFIG = {1: (7, 2), 2: (7, 4), 3: (7, 8), 4: (7, 16), 5: (6, 8), 6: (5, 16)}
# gates up to this size take the kernel by default; larger ones a GEMM (measured: benchmarks/)
KERNEL_MAX_D = 6


@functools.lru_cache(maxsize=None)
def _module(device_id: int):
    import cupy  # noqa: PLC0415

    code = resources.files("qsim_tc.kernels").joinpath("small_gate.cu").read_text()
    names = [_name(t, d) for t in ("double", "float") for d in CONFIG]
    return cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


def _name(real: str, d: int) -> str:
    log_g, r = CONFIG[d]
    return f"apply_small<{real}, {d}, {log_g}, {r}>"


def tile_layout(n_qubits: int, positions, itemsize: int) -> dict:
    """The kernel's tiling for sorted physical target ``positions`` (see small_gate.cu).

    A tile holds 2^(LOG_G + d) amplitudes: 2^k contiguous low ones, k = LOG_G + (targets
    below k), times every combination of the h targets at or above k.
    """
    d = len(positions)
    log_g = CONFIG[d][0]
    k = log_g
    for p in positions:
        if p < k:
            k += 1
    low = [p for p in positions if p < k]
    high = [p for p in positions if p >= k]
    tile_pos = low + [k + i for i in range(len(high))]
    trailing = 0  # targets at tile bits 0, 1, ...: the stride between neighbouring groups
    while trailing < d and tile_pos[trailing] == trailing:
        trailing += 1
    min_shift = 3 if itemsize == 16 else 4
    return {
        "n_tiles": (1 << n_qubits) >> (k + len(high)),
        "k": k,
        "h": len(high),
        "log_g": log_g,
        "hi_pos": high + [0] * (6 - len(high)),
        "tile_pos": tile_pos + [0] * (6 - d),
        "shift": max(trailing, min_shift),
    }


def fits(n_qubits: int, d: int) -> bool:
    """The kernel needs at least one whole tile: n_qubits >= LOG_G + d."""
    return 1 <= d <= MAX_QUBITS and n_qubits >= CONFIG[d][0] + d


def apply_small_gpu(data, n_qubits: int, matrix: np.ndarray, positions) -> object:
    """Apply ``matrix`` (host, bit j of its index = ``positions[j]``, ascending) to ``data`` in place."""
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = "double" if data.dtype == np.complex128 else "float"
    kern = _module(cupy.cuda.Device().id).get_function(_name(real, d))
    u = cupy.asarray(np.ascontiguousarray(matrix, dtype=data.dtype))
    lay = tile_layout(n_qubits, list(positions), data.dtype.itemsize)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid = int(min(lay["n_tiles"], sms * 16))
    i32 = np.int32
    log_g, r = CONFIG[d]
    threads = (1 << log_g) * ((1 << d) // r)
    kern((grid,), (threads,), (data, u, np.int64(lay["n_tiles"]), i32(lay["k"]), i32(lay["h"]),
                                   *(i32(p) for p in lay["hi_pos"]), *(i32(p) for p in lay["tile_pos"]),
                                   i32(lay["shift"])))
    return data


def select(method, d: int, device, want, n_qubits: int):
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
    ok = allowed and device.is_gpu and fits(n_qubits, d) and (want is True or d <= KERNEL_MAX_D)
    if want is True and not ok:
        why = (f"method {method.name!r} computes every gate as its own GEMM" if not allowed
               else f"the kernel handles 1..{MAX_QUBITS} targets on the GPU, on states of at least "
                    f"log2(groups per tile) + d qubits (got d={d}, {n_qubits} qubits, on the {device.name})")
        raise ValueError(f"small_gate_kernel=True cannot be honoured: {why}")
    return apply_small_gpu if ok else None
