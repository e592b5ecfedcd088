"""Gates of 1 to 6 qubits on the GPU: dedicated in-place kernels instead of a GEMM.

A GEMM with k = n = 2^d <= 64 runs below the memory rate (cuBLAS ZGEMM took 26.7 ms for
d = 2 at 28 qubits where one pass over the state takes 2.1 ms, and 3.3-4.8 ms at d = 5, 6). The
kernels in ``kernels/small_gate.cu`` read each amplitude once and write it once:

* ``apply_direct``: thread = group of 2^d amplitudes gathered straight from global memory.
  Coalesced when the lowest target is at bit 3 or above (neighbouring groups are neighbours).
* ``apply_staged``: 1..3 targets anywhere; a block of 32-128 threads loads a tile of 2^(5..7 + d)
  amplitudes (whole groups) into shared memory, coalesced, each thread multiplies one group, the
  tile goes back. The default for complex128 d = 1..3 and complex64 d = 2 where the direct
  kernel's loads would not be coalesced (measured at cuStateVec's rate: 2.026-2.053 ms).
* ``apply_lanes``: targets below bit 5 (d <= 3), and up to two more at bit 5 or above: each
  lane of a warp loads one of 32 consecutive amplitudes of every combination of the high
  targets and gathers the rest of its group from neighbouring lanes by shuffles. The default for
  complex64 d = 1 below bit 4 and complex64 d = 3 with low and high targets mixed.
* ``apply_lanes_smem``: the same targets, staged through a per-warp shared-memory buffer: a warp
  loads 32 x ROUNDS consecutive amplitudes, each lane multiplies whole groups read from the
  buffer, the warp stores the window back. The default for complex64 d = 3 below bit 5.
* ``apply_bulk`` (bulk_gate.py): chunks moved by the bulk copy engine and multiplied in shared
  memory, at any target positions; no longer in the default policy (the lanes kernel serves the
  mixed layouts faster), kept as the tuner's point of comparison. So is ``apply_dmma_widened_gpu``
  (a complex128 gate of 1-3 qubits as a 4-qubit DMMA one), and the lanes kernels in complex128,
  all of which the staged kernel outran.
* ``apply_small`` (tiled): tiles staged through shared memory, for the remaining layouts of 4
  targets with a target among the low bits.
* ``apply_dmma``: complex128 gates of 4..6 qubits on the FP64 tensor cores (``mma.sync`` f64),
  at any target positions; a warp multiplies U by the 2^d x 8 block of 8 neighbouring groups
  held in its registers. On the CUDA cores d = 5, 6 are bound by the FP64 FMA rate
  (2.1 and 4.1 ms at 28 qubits).

They compute the same sums of products as the native method (the DMMA kernel's default forms
the imaginary part from three real products, (Ur + Ui)(Vr + Vi) - Ur Vr - Ui Vi: errors of a
few ulp, like ZGEMM's), so they stand in for it; emulated methods (whose arithmetic differs)
always get their GEMM.

Choices below were measured on an H200 at 28 qubits (benchmarks/tune_small_gate.py and
benchmarks/results/apply_*.json, tune_dmma_h200.json, tune_grid_h200.json): direct kernel
2.05 ms for d = 1..3 and 2.12 ms for d = 4 (complex128, one pass per thread), lanes kernel
2.12-2.46 ms for d = 1..3 at the bottom (the tiled kernel took 2.3-3.2 ms there), tiled 2.3-3.9
ms, lanes through shared memory 2.14-2.26 ms at d = 2, 3 (complex128; lanes 2.26-2.51, widened
DMMA 2.20-2.31, cuStateVec 2.08-2.14) and 1.08-1.10 ms (complex64; lanes 1.11-1.25,
tune_lanes_smem_h200.json); DMMA 2.1-2.3 ms at d = 4 with low targets, 2.3-2.6 ms at d = 5 and 2.9-3.5 ms at d = 6
against cuBLAS's 2.7, 3.3 and 4.7 ms. Complex64 gates of 5, 6 qubits keep cuBLAS (no FP32
tensor-core product is exact enough to stand in for CGEMM), and four complex64 targets exactly
at the bottom the rotating GEMM.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import NamedTuple

import numpy as np

from qsim_tc.transfer import to_device

MAX_QUBITS = 6  # the kernels compile for d <= 6
KERNEL_MAX_D = 4  # the CUDA-core kernels' default range; the DMMA kernel adds complex128 d = 5, 6
# tiled kernel: d -> (LOG_G, R): 2^LOG_G groups per tile, R matrix rows per thread
CONFIG = {1: (7, 2), 2: (7, 4), 3: (7, 8), 4: (7, 16), 5: (6, 8), 6: (5, 16)}
# Launch sizes, measured on an H200 at 28 qubits (benchmarks/results/tune_grid_h200.json): a
# grid with as many blocks as work, each thread taking one pass (ONE_PASS), ran the memory-bound
# kernels at the copy rate (complex128 d = 1..3: 2.05 ms against 2.18-2.30 with a persistent
# grid looping over the state; cuStateVec 2.03-2.05); complex64 d >= 4 and the compute-heavier
# variants keep a persistent grid of the given blocks per SM.
ONE_PASS = 0
# direct kernel: (real type, d) -> (groups per thread, blocks per SM or ONE_PASS)
# (complex128 d = 5 takes the DMMA kernel)
DIRECT = {("double", 1): (1, ONE_PASS), ("double", 2): (1, ONE_PASS), ("double", 3): (1, ONE_PASS),
          ("double", 4): (1, ONE_PASS),
          ("float", 1): (2, ONE_PASS), ("float", 2): (1, ONE_PASS), ("float", 3): (1, ONE_PASS),
          ("float", 4): (1, 8), ("float", 5): (1, 4)}
LANES_MAX_BIT = 5  # targets below this bit: a warp's 32 amplitudes hold whole groups of them


class LanesConfig(NamedTuple):
    """One variant of ``apply_lanes`` (small_gate.cu) and its launch."""

    rpt: int  # windows of 32 x 2^DH amplitudes per warp, loaded before any arithmetic
    min_blocks: int = 1  # register cap: blocks of 256 threads per SM
    reload: bool = False  # read the matrix from shared memory at each use instead of keeping it in registers
    blocks_per_sm: int = ONE_PASS  # or a persistent grid whose warps loop over the windows

    @property
    def kernel(self) -> tuple:
        return (self.rpt, self.min_blocks, self.reload)


# lanes kernel, every target below bit 5: (real type, d) -> LanesConfig (rpt: rounds of 32 amplitudes)
LANES = {("double", 1): LanesConfig(8), ("double", 2): LanesConfig(2), ("double", 3): LanesConfig(8, blocks_per_sm=8),
         ("float", 1): LanesConfig(2), ("float", 2): LanesConfig(8, blocks_per_sm=16),
         ("float", 3): LanesConfig(2, blocks_per_sm=8)}
LANES_D = frozenset(d for _, d in LANES)
# lanes kernel with DH of the targets at bit 5 or above (low and high targets mixed):
# (real type, d, DH) -> LanesConfig, from rounds on three H200 instances at 28 qubits, at 4-5
# mixed placements each (benchmarks/results/tune_lanes_high_h200.json, tune_lanes_xor_h200.json);
# these configurations measured complex128 d = 2 2.12-2.31 ms (bulk-copy kernel 2.25-2.36,
# widened DMMA 2.23-2.35, cuStateVec 2.05-2.12); complex64 d = 2 1.07-1.12 ms (bulk 1.15-1.19,
# cuStateVec 1.03-1.04), d = 3 1.11-1.18 (bulk 1.17-1.29, cuStateVec 1.03-1.07). Complex128
# d = 3 keeps the widened DMMA kernel (2.13-2.34 ms against 2.22-2.35 here).
LANES_HIGH = {("double", 2, 1): LanesConfig(8, 1, True), ("double", 3, 1): LanesConfig(8, 1, True, 16),
              ("double", 3, 2): LanesConfig(1, 1, True, 16), ("float", 2, 1): LanesConfig(4),
              ("float", 3, 1): LanesConfig(8, 2), ("float", 3, 2): LanesConfig(8, 1, True, 16)}
LANES_HIGH_DEFAULT = frozenset({("double", 2), ("float", 2), ("float", 3)})  # where it is the default policy
# variants compiled for tuning (benchmarks/tune_small_gate.py --only lanes_high), as
# (rpt, min_blocks, reload): those that do not spill (ptxas -v, sm_90a) and whose register cap
# changes the code
_F, _T = False, True
LANES_HIGH_VARIANTS = {
    ("double", 2, 1): ((1, 1, _F), (2, 1, _F), (4, 1, _F), (2, 3, _F), (4, 2, _F),
                       (2, 1, _T), (2, 3, _T), (4, 1, _T), (4, 2, _T), (8, 1, _T)),
    ("double", 3, 1): ((1, 1, _F), (2, 1, _F), (4, 1, _F), (2, 2, _F), (2, 1, _T), (4, 1, _T), (8, 1, _T)),
    ("double", 3, 2): ((1, 1, _F), (2, 1, _F), (1, 1, _T)),
    ("float", 2, 1): ((1, 1, _F), (2, 1, _F), (4, 1, _F), (4, 3, _F), (4, 4, _F), (8, 2, _F),
                      (4, 1, _T), (4, 4, _T), (8, 1, _T), (8, 2, _T)),
    ("float", 3, 1): ((1, 1, _F), (2, 1, _F), (4, 1, _F), (4, 2, _F), (8, 2, _F), (2, 3, _T), (4, 2, _T),
                      (8, 1, _T), (8, 2, _T)),
    ("float", 3, 2): ((1, 1, _F), (2, 1, _F), (4, 1, _F), (2, 2, _F), (2, 2, _T), (4, 1, _T), (8, 1, _T)),
}
del _F, _T


class LanesSmemConfig(NamedTuple):
    """One variant of ``apply_lanes_smem`` (small_gate.cu) and its launch."""

    rounds: int  # rounds of 32 amplitudes per warp window, a multiple of 2^d (whole groups per lane)
    min_blocks: int = 1  # register cap: blocks of 256 threads per SM
    async_copy: bool = False  # cp.async from global straight into shared memory
    blocks_per_sm: int = ONE_PASS  # or a persistent grid whose warps loop over the windows

    @property
    def kernel(self) -> tuple:
        return (self.rounds, self.min_blocks, self.async_copy)


# lanes kernel through shared memory, from three interleaved rounds on one H200 beside the lanes,
# direct and DMMA kernels and cuStateVec (benchmarks/tune_small_gate.py --only lanes_smem,
# tune_lanes_smem_h200.json): 8 rounds with cp.async won every placement at d = 2, 3 in both
# precisions; at d = 1 the shuffle kernel stays (complex64: 1.05 ms against 1.08)
LANES_SMEM_CONFIG = {("double", 1): LanesSmemConfig(8), ("double", 2): LanesSmemConfig(8, 1, True),
                     ("double", 3): LanesSmemConfig(8, 1, True), ("float", 1): LanesSmemConfig(2),
                     ("float", 2): LanesSmemConfig(8, 1, True), ("float", 3): LanesSmemConfig(8, 1, True)}
LANES_SMEM_DEFAULT_D = frozenset({2, 3})  # sizes where it is the default policy
# variants compiled for tuning, (real, d) -> (rounds, min_blocks) pairs, each with and without
# cp.async: those that do not spill (ptxas -v, sm_90a) and whose register cap changes the code
LANES_SMEM_VARIANTS = {
    ("double", 1): ((2, 1), (2, 8), (4, 1), (8, 1)),
    ("double", 2): ((4, 1), (8, 1)),
    ("double", 3): ((8, 1), (8, 4)),
    ("float", 1): ((2, 1), (4, 1), (4, 8), (8, 1), (16, 1), (16, 4)),
    ("float", 2): ((4, 1), (8, 1), (8, 4), (16, 1)),
    ("float", 3): ((8, 1),),
}
LANES_SMEM_COMPILED = tuple((real, d, r, mb, a) for (real, d), pairs in LANES_SMEM_VARIANTS.items()
                            for r, mb in pairs for a in (False, True))
DIRECT_STREAM = False  # evict-first loads/stores
TILED_GRID_PER_SM = 32


class TiledConfig(NamedTuple):
    """One variant of ``apply_small`` (the tiled kernel, small_gate.cu) and its launch."""

    log_g: int  # 2^log_g groups per tile
    rows: int  # matrix rows per thread (2^d: one group per thread)
    blocks_per_sm: int = TILED_GRID_PER_SM  # persistent grid, or ONE_PASS: one tile per block

    @property
    def kernel(self) -> tuple:
        return (self.log_g, self.rows)


# variants compiled for tuning: (real, d) -> TiledConfig.kernel pairs, small tiles of one group per
# thread (the shape cuStateVec's kernels for low targets take: 64 threads, 2^(6 + d) amplitudes)
TILED_VARIANTS = {(t, d): tuple((g, 1 << d) for g in (5, 6, 7)) for t in ("double", "float") for d in (1, 2, 3, 4)}
# DMMA kernel (complex128 on the FP64 tensor cores, any target positions)


class DmmaConfig(NamedTuple):
    """One variant of ``apply_dmma`` (small_gate.cu) and its launch."""

    tiles: int  # tiles of 8 groups per warp
    gauss: bool  # three real products instead of four
    min_blocks: int  # register cap: blocks of 256 threads per SM
    prefetch: bool  # load the next block while computing this one
    slices: int  # row slices computed together
    shape: int  # mma.sync f64 shape: 0 m8n8k4, 1 m16n8k8, 2 m16n8k16 (sm_90)
    threads: int = 128
    blocks_per_sm: int = 8  # persistent grid; ONE_PASS (0): as many blocks as tiles need

    @property
    def kernel(self) -> tuple:
        return (self.tiles, self.gauss, self.min_blocks, self.prefetch, self.slices, self.shape)


# chosen from three interleaved rounds on one H200 (benchmarks/results/tune_dmma_h200.json):
# d = 5 2.29-2.52 ms (cuStateVec 2.68-3.23), d = 6 3.07-3.48 ms (cuStateVec 3.00-3.34); at d = 4
# the direct kernel (2.12 ms one-pass) beats every DMMA variant when the lowest target is at
# bit 3 or above, and DMMA (one pass at d = 4: 2.12-2.21 ms) beats the tiled kernel and the
# rotating GEMM below that (tune_dmma_placements_h200.json, tune_grid_h200.json); d = 5, 6 keep
# persistent grids (one pass: 2.65 and 4.4 ms)
DMMA_CONFIG = {4: DmmaConfig(2, True, 1, False, 1, 0, 256, ONE_PASS),
               5: DmmaConfig(2, True, 2, False, 1, 0, 256, 16),
               6: DmmaConfig(2, True, 1, False, 1, 1, 256, 4)}
DMMA_DEFAULT_D = frozenset({5, 6})  # sizes where the DMMA kernel is the default policy
# kernels compiled for tuning, (d, *DmmaConfig.kernel): variants that do not spill (ptxas -v), but for
# (6, 1, T, 2, F, 1, 0), kept as the register-capped variant (128 registers, 56 bytes of spill)
T, F = True, False
DMMA_COMPILED = (
    (4, 2, F, 1, F, 1, 0), (4, 2, T, 1, F, 1, 0), (4, 1, T, 1, F, 1, 1), (4, 2, T, 1, F, 1, 1), (4, 1, T, 1, F, 1, 2),
    (5, 1, T, 1, F, 1, 0), (5, 2, T, 1, F, 1, 0), (5, 2, T, 2, F, 1, 0),
    (5, 1, T, 1, T, 1, 1), (5, 2, T, 1, F, 1, 1), (5, 1, T, 1, F, 1, 2), (5, 1, T, 1, T, 1, 2), (5, 2, T, 1, F, 1, 2),
    (6, 1, T, 2, F, 1, 0),
    (6, 1, F, 1, T, 1, 1), (6, 1, T, 1, T, 1, 1), (6, 2, T, 1, F, 1, 1),
    (6, 1, T, 1, F, 1, 2),
)
del T, F


# L2 prefetch size, in bytes, on the kernels' loads of the state (PTX ld/cp.async .L2::<n>B): 0 for
# none, or 64, 128, 256. A compile-time option (QSIM_L2_PREFETCH), part of every module's cache key.
LOAD_PREFETCH = 0
PREFETCH_SIZES = (0, 64, 128, 256)


def _compile(names, prefetch: int):
    import cupy  # noqa: PLC0415

    if prefetch not in PREFETCH_SIZES:
        raise ValueError(f"LOAD_PREFETCH must be one of {PREFETCH_SIZES} (got {prefetch!r})")
    code = resources.files("qsim_tc.kernels").joinpath("small_gate.cu").read_text()
    return cupy.RawModule(code=code, options=("-std=c++17", f"-DQSIM_L2_PREFETCH={prefetch}"),
                          name_expressions=names)


def _module(device_id: int):
    return _default_module(device_id, LOAD_PREFETCH)


@functools.lru_cache(maxsize=None)
def _default_module(device_id: int, prefetch: int):
    names = [tiled_name(t, d, *CONFIG[d]) for t in ("double", "float") for d in CONFIG]
    names += [_direct_name(t, d) for t, d in DIRECT]
    names += [_lanes_name(t, d) for t, d in LANES]
    names += [dmma_name(d, *DMMA_CONFIG[d].kernel) for d in DMMA_CONFIG]
    return _compile(names, prefetch)


@functools.lru_cache(maxsize=None)
def _variants_module(device_id: int, prefetch: int):
    return _compile([dmma_name(*v) for v in DMMA_COMPILED], prefetch)


@functools.lru_cache(maxsize=None)
def _lanes_smem_module(device_id: int, prefetch: int):
    return _compile([lanes_smem_name(*v) for v in LANES_SMEM_COMPILED], prefetch)


def tiled_name(real: str, d: int, log_g: int, rows: int) -> str:
    return f"apply_small<{real}, {d}, {log_g}, {rows}>"


@functools.lru_cache(maxsize=None)
def _tiled_variants_module(device_id: int, prefetch: int):
    return _compile([tiled_name(t, d, *k) for (t, d), ks in TILED_VARIANTS.items() for k in ks], prefetch)


def _direct_name(real: str, d: int) -> str:
    return f"apply_direct<{real}, {d}, {DIRECT[real, d][0]}, {'true' if DIRECT_STREAM else 'false'}>"


def _lanes_name(real: str, d: int) -> str:
    return lanes_name(real, d, 0, *LANES[real, d].kernel)


def lanes_name(real: str, d: int, dh: int, rpt: int, min_blocks: int = 1, reload: bool = False) -> str:
    """``apply_lanes`` with ``dh`` targets at bit 5 or above and ``rpt`` windows per warp."""
    return f"apply_lanes<{real}, {d}, {rpt}, {min_blocks}, {dh}, {'true' if reload else 'false'}>"


@functools.lru_cache(maxsize=None)
def _lanes_high_module(device_id: int, prefetch: int, tuning: bool = False):
    """The lanes kernels with high targets: the configured ones, or (``tuning``) every variant.
    A module of their own, so that circuits without mixed layouts never compile them."""
    if tuning:
        names = [lanes_name(t, d, dh, *v) for (t, d, dh), vs in LANES_HIGH_VARIANTS.items() for v in vs]
    else:
        names = [lanes_name(t, d, dh, *cfg.kernel) for (t, d, dh), cfg in LANES_HIGH.items()]
    return _compile(names, prefetch)


def lanes_smem_name(real: str, d: int, rounds: int, min_blocks: int, async_copy: bool) -> str:
    return f"apply_lanes_smem<{real}, {d}, {rounds}, {min_blocks}, {'true' if async_copy else 'false'}>"


def dmma_name(d: int, tiles: int, gauss: bool, min_blocks: int, prefetch: bool, slices: int, shape: int) -> str:
    b = {True: "true", False: "false"}
    return f"apply_dmma<{d}, {tiles}, {b[gauss]}, {min_blocks}, {b[prefetch]}, {slices}, {shape}>"


def dmma_shared_bytes(d: int) -> int:
    """U in fragment order: 4^d (Re, Im) pairs."""
    return (4 ** d) * 16


def tile_layout(n_qubits: int, positions, itemsize: int, log_g: int | None = None) -> dict:
    """The tiled kernel's layout for sorted physical target ``positions`` (see small_gate.cu).

    A tile holds 2^(LOG_G + d) amplitudes (LOG_G: ``log_g``, default CONFIG's): 2^k contiguous
    low ones, k = LOG_G + (targets below k), times every combination of the h targets at or above k.
    """
    d = len(positions)
    log_g = CONFIG[d][0] if log_g is None else log_g
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
    real = _real(data.dtype.itemsize)
    kern = _module(cupy.cuda.Device().id).get_function(_direct_name(real, d))
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_groups = (1 << n_qubits) >> d
    gpt, per_sm = DIRECT[real, d]
    grid = launch_blocks(-(-n_groups // (256 * gpt)), per_sm)
    kern((grid,), (256,), (data, u, np.int64(n_groups), *target_args(positions, 6)))
    return data


def fits_dmma(positions, itemsize: int) -> bool:
    """True when the DMMA kernel serves these targets: complex128 and d in DMMA_CONFIG (any
    positions: its loads and stores cover whole 32-byte sectors whatever the layout)."""
    return itemsize == 16 and len(positions) in DMMA_CONFIG


def apply_dmma_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: DmmaConfig | None = None):
    """DMMA kernel: same contract as :func:`apply_direct_gpu`, complex128 only.

    ``config`` overrides ``DMMA_CONFIG[d]`` (tuning and tests); its kernel must be in DMMA_COMPILED.
    """
    import cupy  # noqa: PLC0415

    d = len(positions)
    cfg = config or DMMA_CONFIG[d]
    if config is not None and (d, *cfg.kernel) not in DMMA_COMPILED:
        raise ValueError(f"config {cfg} names no compiled DMMA kernel for d={d} (see DMMA_COMPILED)")
    kern = _dmma_kernel(cupy.cuda.Device().id, LOAD_PREFETCH, dmma_name(d, *cfg.kernel), dmma_shared_bytes(d))
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_tiles = ((1 << n_qubits) >> d) >> 3
    warps = (n_tiles + cfg.tiles - 1) // cfg.tiles
    grid = launch_blocks(-(-warps * 32 // cfg.threads), cfg.blocks_per_sm)
    kern((grid,), (cfg.threads,), (data, u, np.int64(n_tiles), *target_args(positions, 6)),
         shared_mem=dmma_shared_bytes(d))
    return data


@functools.lru_cache(maxsize=None)
def _dmma_kernel(device_id: int, prefetch: int, name: str, shared: int):
    if name in {dmma_name(d, *DMMA_CONFIG[d].kernel) for d in DMMA_CONFIG}:
        kern = _default_module(device_id, prefetch).get_function(name)
    else:  # a variant outside the default table (tuning, tests): every variant in one module
        kern = _variants_module(device_id, prefetch).get_function(name)
    kern.max_dynamic_shared_size_bytes = shared  # above the 48 KB default from d = 6
    return kern


def widen(matrix: np.ndarray, positions, extra: int) -> tuple[np.ndarray, list[int]]:
    """The same gate on one more target, ``extra`` (not in ``positions``), acting as identity
    there: (matrix over the sorted positions, sorted positions). Bit j of a matrix index is the
    j-th lowest position, as everywhere in this module."""
    new = sorted(list(positions) + [extra])
    k = new.index(extra)
    dim = 1 << len(new)
    idx = np.arange(dim)
    low, high = idx & ((1 << k) - 1), idx >> (k + 1)
    old = low | (high << k)  # the index without bit k
    same = ((idx[:, None] >> k) & 1) == ((idx[None, :] >> k) & 1)
    m = np.asarray(matrix)
    return np.where(same, m[old[:, None], old[None, :]], 0).astype(m.dtype), new


def apply_dmma_widened_gpu(data, n_qubits: int, matrix: np.ndarray, positions):
    """A complex128 gate of 1-3 qubits applied as a 4-qubit gate (identity on the lowest other
    bits) by the DMMA kernel, whose loads cover whole sectors at any target positions: 2.2 ms
    where the lanes kernel took 2.45 ms for 3 targets at the bottom (tune_grid_h200.json: DMMA
    d = 4 one pass at [0..3] 2.21 ms)."""
    m, pos = matrix, list(positions)
    while len(pos) < 4:
        m, pos = widen(m, pos, next(b for b in range(n_qubits) if b not in pos))
    return apply_dmma_gpu(data, n_qubits, m, pos)


def fits_lanes(positions) -> bool:
    """True when the lanes kernel serves these targets: d <= 3, all below bit 5."""
    return len(positions) in LANES_D and max(positions) < LANES_MAX_BIT


def high_targets(positions) -> int:
    """How many of ``positions`` lie at bit 5 or above (the lanes kernel's DH)."""
    return sum(1 for p in positions if p >= LANES_MAX_BIT)


def fits_lanes_high(n_qubits: int, positions, rpt: int | None = None) -> bool:
    """True when the lanes kernel with high targets serves these sorted ``positions``: 2 or 3
    distinct targets on the state, some below bit 5 and some at or above it, and a state of at
    least ``rpt`` (default: the largest configured) windows of 32 x 2^DH amplitudes."""
    d, dh = len(positions), high_targets(positions)
    if not any(k[1:] == (d, dh) for k in LANES_HIGH) or list(positions) != sorted(set(positions)):
        return False
    if positions[0] < 0 or positions[-1] >= n_qubits:
        return False
    rpt = rpt or max(LANES_HIGH[t, d, dh].rpt for t in ("double", "float"))
    return n_qubits >= LANES_MAX_BIT + dh + (rpt - 1).bit_length()


def launch_blocks(blocks_needed: int, blocks_per_sm: int) -> int:
    """Blocks to launch: every block the work needs (ONE_PASS) or a persistent grid of
    ``blocks_per_sm`` per SM whose threads loop over the state."""
    if blocks_per_sm == ONE_PASS:
        return int(max(1, blocks_needed))
    return int(max(1, min(blocks_needed, _sms() * blocks_per_sm)))


def target_args(positions, width: int) -> list:
    """The kernels' target-position arguments: int32, padded with zeros to ``width``."""
    return [np.int32(p) for p in list(positions) + [0] * (width - len(positions))]


def _real(itemsize: int) -> str:
    """The kernels' real type for amplitudes of ``itemsize`` bytes (complex128: 16, complex64: 8)."""
    return "double" if itemsize == 16 else "float"


def apply_lanes_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: LanesConfig | None = None):
    """Lanes kernel: same contract as :func:`apply_direct_gpu`, for targets among bits 0..4 and,
    with some of them there, up to two more at bit 5 or above (:func:`fits_lanes_high`).

    ``config`` overrides ``LANES_HIGH`` (tuning and tests; targets at bit 5 or above only): its
    kernel must be in LANES_HIGH_VARIANTS.

    Raises:
        ValueError: the targets do not fit the kernel, or ``config`` names no compiled variant.
    """
    import cupy  # noqa: PLC0415

    d, dh = len(positions), high_targets(positions)
    real = _real(data.dtype.itemsize)
    dev = cupy.cuda.Device().id
    low = dh == 0 and fits_lanes(positions) and len(set(positions)) == d and min(positions) >= 0
    if low and config is None and (1 << n_qubits) >> LANES_MAX_BIT >= LANES[real, d].rpt:
        rpt, per_sm = LANES[real, d].rpt, LANES[real, d].blocks_per_sm
        kern = _module(dev).get_function(_lanes_name(real, d))
    elif dh > 0 and fits_lanes_high(n_qubits, positions, config and config.rpt):
        cfg = config or LANES_HIGH[real, d, dh]
        if cfg.kernel == LANES_HIGH[real, d, dh].kernel:
            kern = _lanes_high_module(dev, LOAD_PREFETCH).get_function(lanes_name(real, d, dh, *cfg.kernel))
        elif cfg.kernel in LANES_HIGH_VARIANTS[real, d, dh]:
            kern = _lanes_high_module(dev, LOAD_PREFETCH, True).get_function(lanes_name(real, d, dh, *cfg.kernel))
        else:
            raise ValueError(f"config {cfg} names no compiled apply_lanes kernel for {real}, d={d}, {dh} "
                             "targets at bit 5 or above (see LANES_HIGH_VARIANTS)")
        rpt, per_sm = cfg.rpt, cfg.blocks_per_sm
    else:
        rpt_needed = (config.rpt if config else max(c.rpt for c in LANES_HIGH.values()))
        raise ValueError(
            f"apply_lanes takes positions of 1..3 distinct targets below bit {LANES_MAX_BIT} on a state of at least "
            f"{LANES_MAX_BIT} + log2(rpt) qubits (rpt: LANES), or of 2..3 targets in ascending order with at least "
            f"one below bit {LANES_MAX_BIT}, one at or above it and all below n_qubits, on a state of at least "
            f"{LANES_MAX_BIT} + DH + log2(rpt) qubits (DH: the targets at or above bit {LANES_MAX_BIT}; rpt "
            f"{rpt_needed}); a config is taken only with targets at or above bit {LANES_MAX_BIT} "
            f"(got positions {list(positions)}, n_qubits {n_qubits}, config {config})")
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_windows = (1 << n_qubits) >> (LANES_MAX_BIT + dh)
    grid = launch_blocks(-(-max(1, n_windows // rpt) // 8), per_sm)  # 8 warps per block
    kern((grid,), (256,), (data, u, np.int64(n_windows), *target_args(positions, 6)))
    return data


def lanes_smem_swizzle(positions, itemsize: int) -> int:
    """The shared-memory swizzle of ``apply_lanes_smem`` for targets ``positions`` (all below bit 5, any
    order), as the kernel's ``swz_tbl``: buffer index e is stored at e ^ m(e), m(e) = entry
    (e >> S) & 7 of the table (eight 4-bit entries). S = 3 for 16-byte amplitudes (a shared-memory
    wavefront serves 8 lanes of 16 bytes), 4 for 8-byte ones (16 lanes).

    The lanes of one wavefront differ in the lowest S bits of their group number, which the kernel
    places at the lowest S non-target bits of e. m XORs each of those at or above S into one of the
    target bits below S, so the lanes' swizzled indices differ in all low S bits: distinct bank
    slots. m is linear over GF(2) and reads only bits >= S, so e -> e ^ m(e) permutes every aligned
    run of 2^S indices (the coalesced staging and stores stay conflict-free too).
    """
    s = 3 if itemsize == 16 else 4
    free = [b for b in range(s + len(positions)) if b not in positions][:s]  # the lowest s non-target bits
    pairs = list(zip(sorted(p for p in positions if p < s), [b for b in free if b >= s]))
    table = 0
    for x in range(8):  # bits s, s + 1, s + 2 of e (every source bit is below s + d <= s + 3)
        m = 0
        for t, h in pairs:
            m |= ((x >> (h - s)) & 1) << t
        table |= m << (4 * x)
    return table


def fits_lanes_smem(n_qubits: int, positions, rounds: int) -> bool:
    """True when ``apply_lanes_smem`` with ``rounds`` serves these targets on this state: 1..3
    distinct targets below bit 5, ``rounds`` a multiple of 2^d, and at least one window of
    32 x rounds amplitudes."""
    d = len(positions)
    return (1 <= d <= 3 and len(set(positions)) == d and 0 <= min(positions) and max(positions) < LANES_MAX_BIT
            and rounds % (1 << d) == 0 and 1 << n_qubits >= 32 * rounds)


def apply_lanes_smem_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: LanesSmemConfig | None = None):
    """Lanes kernel through shared memory: ``matrix`` in place, bit j of its index at target
    ``positions[j]`` (any order, all below bit 5). The default for d = 2, 3 (LANES_SMEM_DEFAULT_D).

    ``config`` overrides ``LANES_SMEM_CONFIG`` (tuning and tests); its kernel must be in LANES_SMEM_COMPILED.

    Raises:
        ValueError: the targets or the state size do not fit (see :func:`fits_lanes_smem`), or
            ``config`` names no compiled variant.
    """
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = _real(data.dtype.itemsize)
    cfg = config or LANES_SMEM_CONFIG.get((real, d))
    if cfg is None or not fits_lanes_smem(n_qubits, positions, cfg.rounds):
        raise ValueError(f"apply_lanes_smem takes 1..3 distinct targets below bit {LANES_MAX_BIT} and a state of at "
                         f"least one window of 32 x rounds amplitudes (got targets {list(positions)}, "
                         f"{n_qubits} qubits, {cfg})")
    if (real, d, *cfg.kernel) not in LANES_SMEM_COMPILED:
        raise ValueError(f"config {cfg} names no compiled apply_lanes_smem kernel for {real}, d={d} "
                         "(see LANES_SMEM_COMPILED)")
    kern = _lanes_smem_module(cupy.cuda.Device().id, LOAD_PREFETCH).get_function(lanes_smem_name(real, d, *cfg.kernel))
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_windows = (1 << n_qubits) // (32 * cfg.rounds)
    grid = launch_blocks(-(-n_windows // 8), cfg.blocks_per_sm)  # 8 warps per block
    swz = np.uint32(lanes_smem_swizzle(positions, data.dtype.itemsize))
    kern((grid,), (256,), (data, u, np.int64(n_windows), *target_args(positions, 3), swz))
    return data


def apply_tiled_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: TiledConfig | None = None):
    """Tiled kernel: same contract as :func:`apply_direct_gpu`, coalesced for low targets too.

    ``config`` overrides CONFIG (tuning and tests); its kernel must be CONFIG's or in TILED_VARIANTS.

    Raises:
        ValueError: ``config`` names no compiled variant, or the state holds no whole tile of it.
    """
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = _real(data.dtype.itemsize)
    cfg = config or TiledConfig(*CONFIG[d])
    dev = cupy.cuda.Device().id
    if cfg.kernel == CONFIG[d]:
        kern = _module(dev).get_function(tiled_name(real, d, *cfg.kernel))
    elif cfg.kernel in TILED_VARIANTS.get((real, d), ()):
        kern = _tiled_variants_module(dev, LOAD_PREFETCH).get_function(tiled_name(real, d, *cfg.kernel))
    else:
        raise ValueError(f"config {cfg} names no compiled apply_small kernel for {real}, d={d} "
                         "(see CONFIG and TILED_VARIANTS)")
    if n_qubits < cfg.log_g + d:
        raise ValueError(f"apply_small with {cfg} needs a state of at least {cfg.log_g + d} qubits (got {n_qubits})")
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    lay = tile_layout(n_qubits, list(positions), data.dtype.itemsize, cfg.log_g)
    grid = launch_blocks(lay["n_tiles"], cfg.blocks_per_sm)
    threads = (1 << cfg.log_g) * ((1 << d) // cfg.rows)
    i32 = np.int32
    kern((grid,), (threads,), (data, u, np.int64(lay["n_tiles"]), i32(lay["k"]), i32(lay["h"]),
                               *(i32(p) for p in lay["hi_pos"]), *(i32(p) for p in lay["tile_pos"]),
                               i32(lay["shift"])))
    return data


class StagedConfig(NamedTuple):
    """One variant of ``apply_staged`` (small_gate.cu): tiles of 2^log_t amplitudes, one per block
    of 2^(log_t - d) threads, one group per thread."""

    log_t: int

    def threads(self, d: int) -> int:
        return 1 << (self.log_t - d)


# apply_staged, (real type, d) -> StagedConfig, from one H200 at 28 qubits beside the engine's
# earlier kernels and cuStateVec (benchmarks/results/tune_staged_h200.json, lead-call clock):
# complex128 d = 1 2.026-2.027 ms at bits 0, 2 (lanes kernel 2.096; cuStateVec 2.023), d = 2
# 2.026-2.028 low or mixed (lanes through shared memory / with high targets 2.071-2.089; cuStateVec
# 2.021-2.025), d = 3 2.053 at the bottom (2.144; cuStateVec 2.108); complex64 d = 2 1.013-1.038
# (1.029-1.046; cuStateVec 1.014-1.076). Where the lowest target is at bit 3 (complex64: 4) or
# above, the direct kernel stays (within 0.5%).
STAGED = {("double", 1): StagedConfig(8), ("double", 2): StagedConfig(7), ("double", 3): StagedConfig(8),
          ("float", 1): StagedConfig(8), ("float", 2): StagedConfig(8), ("float", 3): StagedConfig(8)}
# where it is the default policy: complex64 d = 1, 3 keep the lanes kernels (d = 1 1.011 ms against
# 1.017; d = 3 1.062-1.113 against 1.075-1.357 with targets at bit 5 or above)
STAGED_DEFAULT = frozenset({("double", 1), ("double", 2), ("double", 3), ("float", 2)})
# log_t compiled for tuning: tiles of 32, 64 and 128 groups (2 or 4 threads per group, each taking
# some of its rows behind a second barrier, ran 5-40% slower: tune_staged_d3_h200.json)
STAGED_VARIANTS = {d: (5 + d, 6 + d, 7 + d) for d in (1, 2, 3)}


def staged_name(real: str, d: int, log_t: int) -> str:
    return f"apply_staged<{real}, {d}, {log_t}>"


@functools.lru_cache(maxsize=None)
def _staged_module(device_id: int, prefetch: int):
    return _compile([staged_name(t, d, lt) for t in ("double", "float") for d, lts in STAGED_VARIANTS.items()
                     for lt in lts], prefetch)


def fits_staged(n_qubits: int, positions, log_t: int | None = None) -> bool:
    """True when ``apply_staged`` serves these targets: 1..3 distinct ascending positions on the
    state, and at least one tile of 2^log_t amplitudes (default STAGED's)."""
    d = len(positions)
    if d not in STAGED_VARIANTS or list(positions) != sorted(set(positions)):
        return False
    log_t = max(STAGED[t, d].log_t for t in ("double", "float")) if log_t is None else log_t
    return positions[0] >= 0 and positions[-1] < n_qubits and n_qubits >= log_t


def apply_staged_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: StagedConfig | None = None):
    """Staged kernel: same contract as :func:`apply_direct_gpu`, for 1..3 targets anywhere.

    ``config`` overrides ``STAGED`` (tuning and tests); its log_t must be in STAGED_VARIANTS.

    Raises:
        ValueError: the targets or the state do not fit (:func:`fits_staged`), or ``config`` names
            no compiled variant.
    """
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = _real(data.dtype.itemsize)
    cfg = config or STAGED.get((real, d))
    if cfg is None or not fits_staged(n_qubits, positions, cfg.log_t):
        raise ValueError(f"apply_staged takes 1..3 distinct targets in ascending order, all below n_qubits, on a "
                         f"state of at least log_t qubits (got targets {list(positions)}, {n_qubits} qubits, {cfg})")
    if cfg.log_t not in STAGED_VARIANTS[d]:
        raise ValueError(f"config {cfg} names no compiled apply_staged kernel for d={d} (see STAGED_VARIANTS)")
    kern = _staged_module(cupy.cuda.Device().id, LOAD_PREFETCH).get_function(staged_name(real, d, cfg.log_t))
    lay = tile_layout(n_qubits, list(positions), data.dtype.itemsize, cfg.log_t - d)
    swz = np.uint32(lanes_smem_swizzle(lay["tile_pos"][:d], data.dtype.itemsize))
    i32 = np.int32
    kern((int(lay["n_tiles"]),), (cfg.threads(d),),
         (gate_matrix_arg(matrix, data.dtype), data, i32(lay["k"]), i32(lay["h"]),
          *target_args(lay["hi_pos"][:lay["h"]], 3), *target_args(lay["tile_pos"][:d], 3), swz))
    return data


def gate_matrix_arg(matrix: np.ndarray, dtype) -> np.ndarray:
    """``matrix`` as the kernels' ``GateMatrix`` passed by value (a one-element structured array,
    which cupy packs into the kernel's parameters): no device copy of the matrix at all."""
    m = np.ascontiguousarray(matrix, dtype=dtype).reshape(-1)
    return m.view(np.dtype({"names": ["m"], "formats": [(m.dtype, (m.size,))]}))


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
    if not possible:
        if want is True:
            why = (f"method {method.name!r} computes every gate as its own GEMM" if not allowed
                   else f"the kernels handle 1..{MAX_QUBITS} targets on the GPU, on states of at least "
                        f"{CONFIG.get(d, (7,))[0]} + d qubits (got d={d}, {n_qubits} qubits, on the {device.name})")
            raise ValueError(f"small_gate_kernel=True cannot be honoured: {why}")
        return None
    chosen = _default_kernel(d, n_qubits, positions, itemsize)
    if chosen is None and want is True:  # where the default prefers a GEMM, the best kernel there
        direct = (_real(itemsize), d) in DIRECT and coalesced(positions, itemsize)
        return apply_direct_gpu if direct else apply_tiled_gpu
    return chosen


def _default_kernel(d: int, n_qubits: int, positions, itemsize: int):
    """The measured default policy for a gate the kernels can serve; None where a GEMM is faster."""
    if d in DMMA_DEFAULT_D and fits_dmma(positions, itemsize):
        return apply_dmma_gpu
    if d > KERNEL_MAX_D:
        return None
    if coalesced(positions, itemsize):
        return apply_direct_gpu
    staged = (_real(itemsize), d)
    if staged in STAGED_DEFAULT and fits_staged(n_qubits, positions, STAGED[staged].log_t):
        return apply_staged_gpu
    dmma4 = itemsize == 16 and 4 in DMMA_CONFIG
    smem_cfg = LANES_SMEM_CONFIG.get((_real(itemsize), d))
    if d in LANES_SMEM_DEFAULT_D and smem_cfg and fits_lanes_smem(n_qubits, positions, smem_cfg.rounds):
        return apply_lanes_smem_gpu
    if fits_lanes(positions) and n_qubits >= 8:  # whole rounds of up to 8 x 32 amplitudes
        return apply_lanes_gpu
    if (_real(itemsize), d) in LANES_HIGH_DEFAULT and fits_lanes_high(n_qubits, positions):
        return apply_lanes_gpu  # low and high targets mixed
    if d == 4 and dmma4:
        return apply_dmma_gpu  # low targets, complex128: 2.1-2.3 ms against tiled 2.4-4.1, rotating GEMM 2.4
    if d == 4 and list(positions) == [0, 1, 2, 3]:
        return None  # complex64: the rotating bottom GEMM is faster here (measured)
    if d == 3 and dmma4:  # spread complex128 targets: 2.13-2.34 ms against the lanes kernel's 2.22-2.35
        return apply_dmma_widened_gpu
    return apply_tiled_gpu
