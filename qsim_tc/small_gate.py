"""Gates of 1 to 4 qubits on the GPU: dedicated in-place kernels instead of a GEMM.

A GEMM with k = n = 2^d <= 16 runs far below the memory rate (cuBLAS ZGEMM took 26.7 ms for
d = 2 at 28 qubits where one pass over the state takes 2.1 ms). The kernels in
``kernels/small_gate.cu`` read each amplitude once and write it once, at any target positions:

* ``apply_direct``: thread = group of 2^d amplitudes gathered straight from global memory.
  Coalesced when the lowest target is at bit 3 or above (neighbouring groups are neighbours).
* ``apply_lanes``: targets all below bit 5 (d <= 3): each lane of a warp loads one of 32
  consecutive amplitudes and gathers the rest of its group from neighbouring lanes by shuffles.
* ``apply_small`` (tiled): tiles staged through shared memory, for the remaining layouts with a
  target among the low bits.

They compute the same sums of products as the native method, so they stand in for it; emulated
methods (whose arithmetic differs) always get their GEMM.

Choices below were measured on an H200 at 28 qubits (benchmarks/tune_small_gate.py and
benchmarks/results/apply_*.json): direct kernel 2.17-2.20 ms for d = 1..4 (complex128), lanes
kernel 2.18-2.29 ms for d = 1..3 at the bottom (the tiled kernel took 2.3-3.2 ms there), tiled
2.3-3.9 ms; for four targets exactly at the bottom the rotating GEMM (2.7 ms) beats the tiled
and lanes kernels (3.9 ms); for d = 5, 6 cuBLAS (3.2-4.6 ms) beats the kernels (3.6-14 ms).
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from qsim_tc.transfer import to_device

MAX_QUBITS = 6  # the kernels compile for d <= 6; the default policy uses them up to KERNEL_MAX_D
KERNEL_MAX_D = 4
# tiled kernel: d -> (LOG_G, R): 2^LOG_G groups per tile, R matrix rows per thread
CONFIG = {1: (7, 2), 2: (7, 4), 3: (7, 8), 4: (7, 16), 5: (6, 8), 6: (5, 16)}
# direct kernel: d -> groups per thread per pass (more loads in flight for small d)
DIRECT_GPT = {1: 2, 2: 4, 3: 4, 4: 1, 5: 1}
DIRECT_GRID_PER_SM = 8
# lanes kernel: d -> rounds of 32 amplitudes loaded per warp before the arithmetic
LANES_RPT = {1: 4, 2: 8, 3: 8}
LANES_MAX_BIT = 5  # every target below this bit: a warp's 32 amplitudes hold whole groups
LANES_GRID_PER_SM = 16
DIRECT_STREAM = False  # evict-first loads/stores
TILED_GRID_PER_SM = 32


@functools.lru_cache(maxsize=None)
def _module(device_id: int):
    import cupy  # noqa: PLC0415

    code = resources.files("qsim_tc.kernels").joinpath("small_gate.cu").read_text()
    names = [_tiled_name(t, d) for t in ("double", "float") for d in CONFIG]
    names += [_direct_name(t, d) for t in ("double", "float") for d in DIRECT_GPT]
    names += [_lanes_name(t, d) for t in ("double", "float") for d in LANES_RPT]
    return cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


def _tiled_name(real: str, d: int) -> str:
    log_g, r = CONFIG[d]
    return f"apply_small<{real}, {d}, {log_g}, {r}>"


def _direct_name(real: str, d: int) -> str:
    return f"apply_direct<{real}, {d}, {DIRECT_GPT[d]}, {'true' if DIRECT_STREAM else 'false'}>"


def _lanes_name(real: str, d: int) -> str:
    return f"apply_lanes<{real}, {d}, {LANES_RPT[d]}>"


def tile_layout(n_qubits: int, positions, itemsize: int) -> dict:
    """The tiled kernel's layout for sorted physical target ``positions`` (see small_gate.cu).

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
    """The tiled kernel needs at least one whole tile: n_qubits >= LOG_G + d."""
    return 1 <= d <= MAX_QUBITS and n_qubits >= CONFIG[d][0] + d


def coalesced(positions, itemsize: int) -> bool:
    """True when neighbouring groups are contiguous runs of >= 128 bytes (direct kernel)."""
    return (1 << min(positions)) * itemsize >= 128


@functools.lru_cache(maxsize=None)
def _sms_of(device_id: int) -> int:
    import cupy  # noqa: PLC0415

    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


def _sms() -> int:
    import cupy  # noqa: PLC0415

    return _sms_of(cupy.cuda.Device().id)


def apply_direct_gpu(data, n_qubits: int, matrix: np.ndarray, positions):
    """Direct kernel: ``matrix`` (bit j of its index = ``positions[j]``, ascending) in place."""
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = "double" if data.dtype == np.complex128 else "float"
    kern = _module(cupy.cuda.Device().id).get_function(_direct_name(real, d))
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_groups = (1 << n_qubits) >> d
    grid = int(max(1, min((n_groups + 255) // 256, _sms() * DIRECT_GRID_PER_SM)))
    p = [np.int32(x) for x in list(positions) + [0] * (6 - d)]
    kern((grid,), (256,), (data, u, np.int64(n_groups), *p))
    return data


def fits_lanes(positions) -> bool:
    """True when the lanes kernel serves these targets: d <= 3, all below bit 5."""
    return len(positions) in LANES_RPT and max(positions) < LANES_MAX_BIT


def apply_lanes_gpu(data, n_qubits: int, matrix: np.ndarray, positions):
    """Lanes kernel: same contract as :func:`apply_direct_gpu`, for targets among bits 0..4."""
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = "double" if data.dtype == np.complex128 else "float"
    kern = _module(cupy.cuda.Device().id).get_function(_lanes_name(real, d))
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    rounds = (1 << n_qubits) >> 5
    warps = max(1, rounds // LANES_RPT[d])
    grid = int(max(1, min((warps + 7) // 8, _sms() * LANES_GRID_PER_SM)))
    p = [np.int32(x) for x in list(positions) + [0] * (5 - d)]
    kern((grid,), (256,), (data, u, np.int64(1 << n_qubits), *p))
    return data


def apply_tiled_gpu(data, n_qubits: int, matrix: np.ndarray, positions):
    """Tiled kernel: same contract as :func:`apply_direct_gpu`, coalesced for low targets too."""
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = "double" if data.dtype == np.complex128 else "float"
    kern = _module(cupy.cuda.Device().id).get_function(_tiled_name(real, d))
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    lay = tile_layout(n_qubits, list(positions), data.dtype.itemsize)
    grid = int(min(lay["n_tiles"], _sms() * TILED_GRID_PER_SM))
    log_g, r = CONFIG[d]
    threads = (1 << log_g) * ((1 << d) // r)
    i32 = np.int32
    kern((grid,), (threads,), (data, u, np.int64(lay["n_tiles"]), i32(lay["k"]), i32(lay["h"]),
                               *(i32(p) for p in lay["hi_pos"]), *(i32(p) for p in lay["tile_pos"]),
                               i32(lay["shift"])))
    return data


def select(method, device, want, n_qubits: int, positions, itemsize: int):
    """The kernel for a gate on sorted physical ``positions``, or None for the GEMM path.

    Args:
        method: the gemm Method; only one with ``direct_small_gates`` may be replaced.
        device: the state's gemm.Device.
        want: None (the measured default policy), True (require a kernel) or False (never).
        n_qubits: width of the state.
        positions: physical target bits, ascending.
        itemsize: bytes per amplitude (16 or 8).

    Raises:
        ValueError: ``want`` is True but no kernel can stand in for this method or size.
    """
    if want is False:
        return None
    d = len(positions)
    allowed = getattr(method, "direct_small_gates", False)
    possible = allowed and device.is_gpu and fits(n_qubits, d)
    if want is True:
        if not possible:
            why = (f"method {method.name!r} computes every gate as its own GEMM" if not allowed
                   else f"the kernels handle 1..{MAX_QUBITS} targets on the GPU, on states of at least "
                        f"{CONFIG.get(d, (7,))[0]} + d qubits (got d={d}, {n_qubits} qubits, on the {device.name})")
            raise ValueError(f"small_gate_kernel=True cannot be honoured: {why}")
        return apply_direct_gpu if d in DIRECT_GPT and coalesced(positions, itemsize) else apply_tiled_gpu
    if not possible or d > KERNEL_MAX_D:
        return None
    if coalesced(positions, itemsize):
        return apply_direct_gpu
    if fits_lanes(positions) and n_qubits >= 8:  # whole rounds of up to 8 x 32 amplitudes
        return apply_lanes_gpu
    if d == 4 and list(positions) == [0, 1, 2, 3]:
        return None  # the rotating bottom GEMM is faster here (measured)
    return apply_tiled_gpu
