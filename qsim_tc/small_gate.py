"""Gates of 1 to 6 qubits on the GPU: dedicated in-place kernels instead of a GEMM.

A GEMM with k = n = 2^d <= 64 runs below the memory rate (cuBLAS ZGEMM took 26.7 ms for
d = 2 at 28 qubits where one pass over the state takes 2.1 ms, and 3.3-4.8 ms at d = 5, 6). The
kernels in ``kernels/small_gate.cu`` read each amplitude once and write it once:

* ``apply_direct``: thread = group of 2^d amplitudes gathered straight from global memory.
  Coalesced when the lowest target is at bit 3 or above (neighbouring groups are neighbours).
  The matrix comes by value; DIRECT_USRC says where the row products read it.
* ``apply_staged``: 1..4 targets anywhere; a block loads a tile of 2^8 amplitudes (2^10 for
  complex64 d = 4; whole groups) into shared memory, coalesced, each of its 2^(8 - d) threads
  multiplies one group with the matrix
  passed by value (FMA operands from the constant bank), the tile goes back. The default for
  d = 1 everywhere and for d = 2, 3 (complex64: 2..4) wherever the direct kernel's loads would
  not be coalesced: at cuStateVec's rate, 2.022-2.071 ms in
  complex128 and 1.006-1.048 ms in complex64 (benchmarks/results/tune_staged_h200.json). It
  replaced three kernels that each served part of those layouts 1-10% slower (a warp-shuffle
  kernel, a per-warp shared-memory kernel, a bulk-copy-engine kernel) and a complex128 path that
  applied 3-qubit gates as 4-qubit DMMA ones; their measurements stay in benchmarks/results/
  (tune_lanes_*, tune_bulk_*, tune_widened_h200.json).
* ``apply_small`` (tiled): tiles staged through shared memory, R rows per thread; for complex64
  gates of 5 qubits on spread targets below the coalesced range (and 6-qubit ones when a kernel
  is forced).
* ``apply_dmma``: complex128 gates of 4..6 qubits on the FP64 tensor cores (``mma.sync`` f64),
  at any target positions; a warp multiplies U by the 2^d x 8 block of 8 neighbouring groups
  held in its registers. On the CUDA cores d = 5, 6 are bound by the FP64 FMA rate
  (2.1 and 4.1 ms at 28 qubits).
* ``apply_dmma_pipe``: the same product fed through shared memory by asynchronous copies, several
  chunks in flight while one is multiplied; complex128 d = 5 with coalesced targets
  (DMMA_PIPE_CONFIG).

They compute the same sums of products as the native method (the DMMA kernel's default forms
the imaginary part from three real products, (Ur + Ui)(Vr + Vi) - Ur Vr - Ui Vi: errors of a
few ulp, like ZGEMM's), so they stand in for it; emulated methods (whose arithmetic differs)
always get their GEMM.

Choices below were measured on an H200 at 28 qubits (benchmarks/tune_small_gate.py,
tune_variants.py and benchmarks/results/apply_*.json, tune_dmma_h200.json, tune_grid_h200.json,
tune_staged_h200.json): direct kernel 2.03-2.05 ms for d = 1..3 and 2.1 ms for d = 4 (complex128,
one pass per thread), staged kernel 2.02-2.07 ms for d = 1..3 with a low target, tiled 2.3-3.9
ms; DMMA 2.1-2.3 ms at d = 4 with low targets, 2.3-2.6 ms at d = 5 and 2.9-3.5 ms at d = 6
against cuBLAS's 2.7, 3.3 and 4.7 ms. Complex64 gates of 5 qubits keep CGEMM on a block of
targets and take the direct or tiled kernel on spread ones (which a GEMM reaches only through a
permutation), 6 qubits keep CGEMM (no FP32 tensor-core product is exact enough to stand in).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import NamedTuple

import numpy as np

from qsim_tc.transfer import to_device

MAX_QUBITS = 6  # the kernels compile for d <= 6
KERNEL_MAX_D = 4  # the CUDA-core kernels' default range; the DMMA kernel adds complex128 d = 5, 6
# sizes above it where the CUDA-core kernels still take spread targets (complex64 d = 5 at 28
# qubits, apply_h200_c64_d5_paths.json: tiled kernel 3.16 ms against 4.32 for the permutation and
# rotating CGEMM; the direct kernel 2.15 ms; with the targets together CGEMM stays, 1.94-2.06)
SPREAD_KERNEL_D = frozenset({5})
# tiled kernel: d -> (LOG_G, R): 2^LOG_G groups per tile, R matrix rows per thread
CONFIG = {1: (7, 2), 2: (7, 4), 3: (7, 8), 4: (7, 16), 5: (6, 8), 6: (5, 16)}
# Launch sizes, measured on an H200 at 28 qubits (benchmarks/results/tune_grid_h200.json): a
# grid with as many blocks as work, each thread taking one pass (ONE_PASS), ran the memory-bound
# kernels at the copy rate (complex128 d = 1..3: 2.05 ms against 2.18-2.30 with a persistent
# grid looping over the state; cuStateVec 2.03-2.05); complex64 d >= 4 and the compute-heavier
# variants keep a persistent grid of the given blocks per SM.
ONE_PASS = 0
# direct kernel: (real type, d) -> (groups per thread, blocks per SM or ONE_PASS)
# (complex128 d = 4..6 take the DMMA kernel)
DIRECT = {("double", 1): (1, ONE_PASS), ("double", 2): (1, ONE_PASS), ("double", 3): (1, ONE_PASS),
          ("double", 4): (1, ONE_PASS),
          ("float", 1): (2, ONE_PASS), ("float", 2): (1, ONE_PASS), ("float", 3): (1, ONE_PASS),
          ("float", 4): (1, 8), ("float", 5): (1, 4)}
DIRECT_STREAM = False  # evict-first loads/stores
# direct kernel: where the row products read the matrix (apply_direct's USRC), by d: 0 immediate
# constant-bank operands (rows unrolled), 1 constant-bank loads (rows rolled), 2 shared memory;
# measured in tune_direct_h200.json (28 qubits: d = 3 unrolled 3.0 ms against 2.03 rolled, d = 4
# from the constant bank 2.7 against 2.2 from shared memory)
DIRECT_USRC = {1: 0, 2: 0, 3: 1, 4: 2, 5: 2}
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
# d = 5 2.29-2.52 ms (cuStateVec 2.68-3.23), d = 6 3.07-3.48 ms (cuStateVec 3.00-3.34); d = 4 one
# pass 2.12-2.21 ms, ahead of the tiled kernel and the rotating GEMM with low targets and level
# with the direct kernel above them (tune_dmma_placements_h200.json, tune_grid_h200.json; see
# DMMA_DEFAULT_D); d = 5, 6 keep persistent grids (one pass: 2.65 and 4.4 ms)
DMMA_CONFIG = {4: DmmaConfig(2, True, 1, False, 1, 0, 256, ONE_PASS),
               5: DmmaConfig(2, True, 2, False, 1, 0, 256, 16),
               6: DmmaConfig(2, True, 1, False, 1, 1, 256, 4)}
# sizes where the DMMA kernel is the default policy at every placement: d = 4 too, where it ties
# with the direct kernel at full clocks (2.14 against 2.18 ms in the middle, 2.26 against 2.15
# higher up, tune_dmma_d45_placements_h200.json) but holds 2.10-2.19 ms while drifting clocks
# take the direct kernel's FP64 FMAs (half the memory time at d = 4) to 2.4-3.4
# (apply_h200.json)
DMMA_DEFAULT_D = frozenset({4, 5, 6})
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


def _compile(names):
    import cupy  # noqa: PLC0415

    code = resources.files("qsim_tc.kernels").joinpath("small_gate.cu").read_text()
    return cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


@functools.lru_cache(maxsize=None)
def _default_names() -> frozenset:
    """The kernels the default policy can launch: one module, compiled at the first GPU gate."""
    names = {_direct_name(t, d) for t, d in DIRECT
             if d not in STAGED_EVERYWHERE_D and not (t == "double" and d in DMMA_DEFAULT_D)}
    names |= {tiled_name("float", d, *CONFIG[d]) for d in (5, 6)}  # spread complex64 d = 5; forced d = 6
    names |= {dmma_name(d, *DMMA_CONFIG[d].kernel) for d in DMMA_CONFIG}
    names |= {dmma_pipe_name(d, *DMMA_PIPE_CONFIG[d].kernel) for d in DMMA_PIPE_CONFIG}
    names |= {staged_name(t, d, cfg.log_t) for (t, d), cfg in STAGED.items()}
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def _tuning_names() -> frozenset:
    """Every other compiled variant (tuning, tests, configurations outside the policy)."""
    names = {_direct_name(t, d, m) for t, d in DIRECT for m in range(3) if not (m == 0 and d >= 4)}
    names |= {tiled_name(t, d, *CONFIG[d]) for t in ("double", "float") for d in CONFIG}
    names |= {tiled_name(t, d, *k) for (t, d), ks in TILED_VARIANTS.items() for k in ks}
    names |= {staged_name(t, d, lt) for t in ("double", "float") for d, lts in STAGED_VARIANTS.items() for lt in lts}
    names |= {dmma_name(*v) for v in DMMA_COMPILED}
    names |= {dmma_pipe_name(*v) for v in DMMA_PIPE_COMPILED}
    return frozenset(names - _default_names())


@functools.lru_cache(maxsize=None)
def _module(device_id: int):
    return _compile(sorted(_default_names()))


@functools.lru_cache(maxsize=None)
def _tuning_module(device_id: int):
    return _compile(sorted(_tuning_names()))


@functools.lru_cache(maxsize=None)
def _kernel(device_id: int, name: str):
    """Kernel ``name`` from the module that compiles it.

    Raises:
        ValueError: no module compiles ``name`` (a configuration outside the compiled variants).
    """
    if name in _default_names():
        return _module(device_id).get_function(name)
    if name in _tuning_names():
        return _tuning_module(device_id).get_function(name)
    raise ValueError(f"{name} is not compiled (see DIRECT, CONFIG, TILED_VARIANTS, STAGED_VARIANTS, DMMA_COMPILED)")


def tiled_name(real: str, d: int, log_g: int, rows: int) -> str:
    return f"apply_small<{real}, {d}, {log_g}, {rows}>"


def _direct_name(real: str, d: int, usrc: int | None = None) -> str:
    usrc = DIRECT_USRC[d] if usrc is None else usrc
    return f"apply_direct<{real}, {d}, {DIRECT[real, d][0]}, {'true' if DIRECT_STREAM else 'false'}, 1, {usrc}>"


def dmma_name(d: int, tiles: int, gauss: bool, min_blocks: int, prefetch: bool, slices: int, shape: int) -> str:
    b = {True: "true", False: "false"}
    return f"apply_dmma<{d}, {tiles}, {b[gauss]}, {min_blocks}, {b[prefetch]}, {slices}, {shape}>"


def dmma_shared_bytes(d: int) -> int:
    """U in fragment order: 4^d (Re, Im) pairs."""
    return (4 ** d) * 16


def tile_layout(n_qubits: int, positions, itemsize: int, log_g: int | None = None) -> dict:
    """The tiled kernel's layout for sorted physical target ``positions`` (see small_gate.cu), and
    the staged kernel's with ``log_g`` = log_t - d (which ignores ``shift``).

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
    """The smallest state the kernels take: one whole tile of the tiled kernel, n_qubits >= LOG_G + d
    (which also holds every staged tile); select() sends smaller states to the GEMM."""
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


def check_launch(kernel: str, data, n_qubits: int, matrix: np.ndarray, positions) -> None:
    """The contract every launcher below shares, checked before anything runs: ``data`` a
    complex128 or complex64 vector of 2^n_qubits amplitudes, ``positions`` 1..MAX_QUBITS distinct
    targets in ascending order below ``n_qubits``, ``matrix`` of shape (2^d, 2^d).

    Raises:
        ValueError: naming the argument that breaks it.
    """
    if getattr(data, "dtype", None) not in (np.complex128, np.complex64):
        raise ValueError(f"{kernel}: data must be complex128 or complex64 (got {getattr(data, 'dtype', type(data))})")
    if data.ndim != 1 or data.size != 1 << n_qubits:
        raise ValueError(f"{kernel}: data must be a vector of 2^n_qubits = {1 << n_qubits} amplitudes "
                         f"(got shape {data.shape})")
    pos = list(positions)
    if not 1 <= len(pos) <= MAX_QUBITS or pos != sorted(set(pos)) or pos[0] < 0 or pos[-1] >= n_qubits:
        raise ValueError(f"{kernel}: positions must be 1..{MAX_QUBITS} distinct targets in ascending order in "
                         f"0..{n_qubits - 1} (got {pos})")
    dim = 1 << len(pos)
    if np.shape(matrix) != (dim, dim):
        raise ValueError(f"{kernel}: matrix must be {dim} x {dim} for {len(pos)} targets (got shape {np.shape(matrix)})")


def apply_direct_gpu(data, n_qubits: int, matrix: np.ndarray, positions, usrc: int | None = None):
    """Direct kernel: ``matrix`` (bit j of its index = ``positions[j]``, ascending) in place.
    ``usrc`` (0, 1, 2) overrides DIRECT_USRC's choice of where the row products read the matrix."""
    import cupy  # noqa: PLC0415

    check_launch("apply_direct", data, n_qubits, matrix, positions)
    d = len(positions)
    real = _real(data.dtype.itemsize)
    if (real, d) not in DIRECT:
        raise ValueError(f"apply_direct: no kernel for {data.dtype} with {d} targets (DIRECT: {sorted(DIRECT)})")
    if usrc is not None and (type(usrc) is not int or usrc not in (0, 1, 2)):
        raise ValueError(f"usrc must be 0, 1 or 2 (got {usrc!r})")
    kern = _kernel(cupy.cuda.Device().id, _direct_name(real, d, usrc))
    n_groups = (1 << n_qubits) >> d
    gpt, per_sm = DIRECT[real, d]
    grid = launch_blocks(-(-n_groups // (256 * gpt)), per_sm)
    kern((grid,), (256,), (gate_matrix_arg(matrix, data.dtype), data, np.int64(n_groups), *target_args(positions, 6)))
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

    check_launch("apply_dmma", data, n_qubits, matrix, positions)
    d = len(positions)
    if data.dtype != np.complex128 or d not in DMMA_CONFIG:
        raise ValueError(f"apply_dmma: complex128 states and 4..6 targets only (got {data.dtype}, {d} targets)")
    cfg = config or DMMA_CONFIG[d]
    if config is not None and (d, *cfg.kernel) not in DMMA_COMPILED:
        raise ValueError(f"config {cfg} names no compiled DMMA kernel for d={d} (see DMMA_COMPILED)")
    kern = _dmma_kernel(cupy.cuda.Device().id, dmma_name(d, *cfg.kernel), dmma_shared_bytes(d))
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_tiles = ((1 << n_qubits) >> d) >> 3
    warps = (n_tiles + cfg.tiles - 1) // cfg.tiles
    grid = launch_blocks(-(-warps * 32 // cfg.threads), cfg.blocks_per_sm)
    kern((grid,), (cfg.threads,), (data, u, np.int64(n_tiles), *target_args(positions, 6)),
         shared_mem=dmma_shared_bytes(d))
    return data


@functools.lru_cache(maxsize=None)
def _dmma_kernel(device_id: int, name: str, shared: int):
    kern = _kernel(device_id, name)
    kern.max_dynamic_shared_size_bytes = shared  # above the 48 KB default from d = 6
    return kern


class DmmaPipeConfig(NamedTuple):
    """One variant of ``apply_dmma_pipe`` (small_gate.cu) and its launch."""

    shape: int  # mma.sync f64 shape, as DmmaConfig's
    warps: int  # warps per block
    chunk: int  # tiles of 8 groups per chunk (one pipeline stage)
    tiles: int  # tiles per warp
    stages: int  # chunks in shared memory: the one multiplied and stages - 1 in flight
    gauss: bool = True
    blocks_per_sm: int = 1

    @property
    def kernel(self) -> tuple:
        return (self.shape, self.warps, self.chunk, self.tiles, self.stages, self.gauss)


# the pipelined kernel where it beats apply_dmma: d = 5 with coalesced targets (lowest at bit 3 or
# above). H200s, 28 qubits, interleaved rounds: 2.54 ms against apply_dmma's 2.81-2.84, cuStateVec
# 2.95-2.97 (tune_dmma_pipe2_h200.json); in bench_apply x1.17-1.24 against cuStateVec where
# apply_dmma had x1.01-1.06. d = 4 stays with apply_dmma: the pipe's best variant won on one
# machine (2.17-2.23 ms against 2.46-2.60) and lost on another (2.18-2.23 against 2.09-2.22,
# tune_dmma_pipe_d4_h200.json). With a target at bit 0 it ran 3.0-3.3 ms against apply_dmma's
# 2.1-2.7, with the copies in lane-per-group order or in address order alike; d = 6 4.0-4.9 ms
# against 3.3-3.6.
DMMA_PIPE_CONFIG = {5: DmmaPipeConfig(1, 8, 8, 1, 3)}
# variants compiled for tuning, (d, *DmmaPipeConfig.kernel)
DMMA_PIPE_COMPILED = (
    (4, 0, 8, 16, 2, 4, True), (4, 1, 8, 16, 2, 4, True), (4, 0, 4, 8, 2, 4, True), (4, 0, 8, 8, 1, 4, True),
    (5, 0, 8, 8, 2, 4, True), (5, 1, 8, 8, 2, 4, True), (5, 0, 4, 4, 2, 4, True), (5, 1, 8, 8, 1, 3, True),
    (6, 1, 8, 4, 2, 3, True), (6, 1, 8, 4, 1, 3, True), (6, 1, 4, 2, 2, 4, True), (6, 2, 8, 4, 2, 3, True),
)


def dmma_pipe_name(d: int, shape: int, warps: int, chunk: int, tiles: int, stages: int, gauss: bool) -> str:
    return f"apply_dmma_pipe<{d}, {shape}, {warps}, {chunk}, {tiles}, {stages}, {'true' if gauss else 'false'}>"


def dmma_pipe_shared_bytes(d: int, cfg: DmmaPipeConfig) -> int:
    """U in fragment order, then ``stages`` chunks of 8 * chunk groups of 2^d amplitudes."""
    return dmma_shared_bytes(d) + cfg.stages * cfg.chunk * 8 * (1 << d) * 16


def fits_dmma_pipe(n_qubits: int, positions, itemsize: int, config: DmmaPipeConfig | None = None) -> bool:
    """True when the pipelined DMMA kernel serves these targets: complex128, ``config`` (default
    DMMA_PIPE_CONFIG's for d) known, and at least one whole chunk of tiles in the state."""
    d = len(positions)
    cfg = config or DMMA_PIPE_CONFIG.get(d)
    return itemsize == 16 and cfg is not None and ((1 << n_qubits) >> d) >> 3 >= cfg.chunk


def apply_dmma_pipe_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: DmmaPipeConfig | None = None):
    """Pipelined DMMA kernel: same contract as :func:`apply_dmma_gpu`. ``config`` overrides
    ``DMMA_PIPE_CONFIG[d]`` (tuning and tests); its kernel must be in DMMA_PIPE_COMPILED.

    Raises:
        ValueError: not complex128, ``config`` names no compiled variant, or the state holds no
            whole chunk.
    """
    import cupy  # noqa: PLC0415

    check_launch("apply_dmma_pipe", data, n_qubits, matrix, positions)
    d = len(positions)
    if data.dtype != np.complex128:
        raise ValueError(f"apply_dmma_pipe: complex128 states only (got {data.dtype})")
    if config is None and d not in DMMA_PIPE_CONFIG:
        raise ValueError(f"apply_dmma_pipe: no default configuration for {d} targets; pass a config "
                         f"(DMMA_PIPE_CONFIG: d in {sorted(DMMA_PIPE_CONFIG)})")
    config = config or DMMA_PIPE_CONFIG[d]
    if (d, *config.kernel) not in DMMA_PIPE_COMPILED:
        raise ValueError(f"config {config} names no compiled apply_dmma_pipe kernel for d={d} (see DMMA_PIPE_COMPILED)")
    if not fits_dmma_pipe(n_qubits, positions, data.dtype.itemsize, config):
        raise ValueError(f"apply_dmma_pipe with {config} needs a state of at least "
                         f"{d + 3 + config.chunk.bit_length() - 1} qubits (got {n_qubits})")
    shared = dmma_pipe_shared_bytes(d, config)
    kern = _dmma_kernel(cupy.cuda.Device().id, dmma_pipe_name(d, *config.kernel), shared)
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_chunks = (((1 << n_qubits) >> d) >> 3) // config.chunk
    grid = launch_blocks(n_chunks, config.blocks_per_sm)
    kern((grid,), (32 * config.warps,), (data, u, np.int64(n_chunks), *target_args(positions, 6)), shared_mem=shared)
    return data


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


def smem_swizzle(positions, itemsize: int) -> int:
    """The staged kernel's shared-memory swizzle for 1..4 targets at tile positions ``positions``
    (any order), as the kernel's ``swz_tbl``: buffer index e is stored at e ^ m(e), m(e) = entry
    (e >> S) & 15 of the table (16 4-bit entries). S = 3 for 16-byte amplitudes (a shared-memory
    wavefront serves 8 threads of 16 bytes), 4 for 8-byte ones (16 threads).

    The threads of one wavefront differ in the lowest S bits of their group number, which the
    kernel places at the lowest S non-target bits of e. m XORs each of those at or above S into one
    of the target bits below S, so the threads' swizzled indices differ in all low S bits: distinct
    bank slots. m is linear over GF(2) and reads only bits >= S, so e -> e ^ m(e) permutes every
    aligned run of 2^S indices (the coalesced staging and stores stay conflict-free too).
    """
    s = 3 if itemsize == 16 else 4
    free = [b for b in range(s + len(positions)) if b not in positions][:s]  # the lowest s non-target bits
    pairs = list(zip(sorted(p for p in positions if p < s), [b for b in free if b >= s]))
    table = 0
    if len(positions) > 4:
        raise ValueError(f"smem_swizzle takes 1..4 target positions (got {list(positions)})")
    for x in range(16):  # bits s .. s + 3 of e (every source bit is below s + d <= s + 4)
        m = 0
        for t, h in pairs:
            m |= ((x >> (h - s)) & 1) << t
        table |= m << (4 * x)
    return table


def apply_tiled_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: TiledConfig | None = None):
    """Tiled kernel: same contract as :func:`apply_direct_gpu`, coalesced for low targets too.

    ``config`` overrides CONFIG (tuning and tests); its kernel must be CONFIG's or in TILED_VARIANTS.

    Raises:
        ValueError: ``config`` names no compiled variant, or the state holds no whole tile of it.
    """
    import cupy  # noqa: PLC0415

    check_launch("apply_small", data, n_qubits, matrix, positions)
    d = len(positions)
    real = _real(data.dtype.itemsize)
    cfg = config or TiledConfig(*CONFIG[d])
    dev = cupy.cuda.Device().id
    if cfg.kernel != CONFIG[d] and cfg.kernel not in TILED_VARIANTS.get((real, d), ()):
        raise ValueError(f"config {cfg} names no compiled apply_small kernel for {real}, d={d} "
                         "(see CONFIG and TILED_VARIANTS)")
    kern = _kernel(dev, tiled_name(real, d, *cfg.kernel))
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
# earlier kernels and cuStateVec in interleaved rounds (benchmarks/results/tune_staged_h200.json,
# lead-call clock): complex128 d = 1..3 2.022-2.071 ms at bottom and mixed placements (the lanes
# kernels 2.071-2.177; cuStateVec 2.020-2.113), complex64 1.006-1.048 ms (lanes 1.011-1.111;
# cuStateVec 1.016-1.267). Where the lowest target is at bit 3 (complex64: 4) or above, the
# direct kernel stays (complex64 d = 3 in the middle: 1.019 ms against 1.095).
STAGED = {(t, d): StagedConfig(8) for t in ("double", "float") for d in (1, 2, 3)}
# complex64 d = 4 with a low target (tune_staged_d4_h200.json, bench_apply's rotating GEMM and tiled
# kernel in apply_h200_c64.json): 1.38-1.49 ms against 2.59 (the bottom's rotating GEMM) and 2.32
# (tiled, mixed); cuStateVec 1.47-1.55. Complex128 d = 4 keeps the DMMA kernel (2.12-2.16 ms
# against 2.66-2.92 here).
STAGED["float", 4] = StagedConfig(10)
# sizes where the staged kernel also beats the direct one with coalesced targets: d = 1 (complex128
# at bits 13 and 27: 2.022-2.024 ms against 2.032-2.038; complex64 1.009-1.015 against 1.017-1.034);
# d = 2 ties, and from d = 3 the direct kernel wins (2.027 against 2.035; complex64 1.019 against 1.095)
STAGED_EVERYWHERE_D = frozenset({1})
# log_t compiled for tuning: tiles of 32, 64 and 128 groups (2 or 4 threads per group, each taking
# some of its rows behind a second barrier, ran 5-40% slower: tune_staged_d3_h200.json)
STAGED_VARIANTS = {d: (5 + d, 6 + d, 7 + d) for d in (1, 2, 3)} | {4: (9, 10)}


def staged_name(real: str, d: int, log_t: int) -> str:
    return f"apply_staged<{real}, {d}, {log_t}>"


def fits_staged(n_qubits: int, positions, log_t: int | None = None) -> bool:
    """True when ``apply_staged`` serves these targets: 1..4 distinct ascending positions on the
    state, and at least one tile of 2^log_t amplitudes (default: the largest STAGED tile for d, or
    the smallest compiled one)."""
    d = len(positions)
    if d not in STAGED_VARIANTS or list(positions) != sorted(set(positions)):
        return False
    if log_t is None:
        log_t = max((c.log_t for (_, dd), c in STAGED.items() if dd == d), default=min(STAGED_VARIANTS[d]))
    return positions[0] >= 0 and positions[-1] < n_qubits and n_qubits >= log_t


def apply_staged_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: StagedConfig | None = None):
    """Staged kernel: same contract as :func:`apply_direct_gpu`, for 1..4 targets anywhere.

    ``config`` overrides ``STAGED`` (tuning and tests); its log_t must be in STAGED_VARIANTS.

    Raises:
        ValueError: the targets or the state do not fit (:func:`fits_staged`), or ``config`` names
            no compiled variant.
    """
    import cupy  # noqa: PLC0415

    check_launch("apply_staged", data, n_qubits, matrix, positions)
    d = len(positions)
    real = _real(data.dtype.itemsize)
    cfg = config or STAGED.get((real, d))
    if cfg is None and d in STAGED_VARIANTS:
        raise ValueError(f"apply_staged: no default tile for {data.dtype} with {d} targets; pass a config "
                         f"(log_t in STAGED_VARIANTS[{d}] = {STAGED_VARIANTS[d]})")
    if cfg is None or not fits_staged(n_qubits, positions, cfg.log_t):
        raise ValueError(f"apply_staged takes 1..4 distinct targets in ascending order, all below n_qubits, on a "
                         f"state of at least log_t qubits (got targets {list(positions)}, {n_qubits} qubits, {cfg})")
    if cfg.log_t not in STAGED_VARIANTS[d]:
        raise ValueError(f"config {cfg} names no compiled apply_staged kernel for d={d} (see STAGED_VARIANTS)")
    kern = _kernel(cupy.cuda.Device().id, staged_name(real, d, cfg.log_t))
    n_tiles, layout_args = staged_layout_args(n_qubits, tuple(positions), data.dtype.itemsize, cfg.log_t)
    kern((n_tiles,), (cfg.threads(d),), (gate_matrix_arg(matrix, data.dtype), data, *layout_args))
    return data


@functools.lru_cache(maxsize=4096)
def staged_layout_args(n_qubits: int, positions: tuple, itemsize: int, log_t: int) -> tuple:
    """apply_staged's grid and layout arguments (k, h, hp0..hp3, q0..q3, swz_tbl) for sorted
    ``positions``: the same few layouts recur gate after gate, so they are computed once."""
    d = len(positions)
    lay = tile_layout(n_qubits, list(positions), itemsize, log_t - d)
    swz = np.uint64(smem_swizzle(lay["tile_pos"][:d], itemsize))
    i32 = np.int32
    return int(lay["n_tiles"]), (i32(lay["k"]), i32(lay["h"]), *target_args(lay["hi_pos"][:lay["h"]], 4),
                                 *target_args(lay["tile_pos"][:d], 4), swz)


def gate_matrix_arg(matrix: np.ndarray, dtype) -> np.ndarray:
    """``matrix`` as the kernels' ``GateMatrix`` passed by value: a one-element structured array
    whose bytes the launch copies into the kernel's parameter space, so no device copy of the
    matrix is made."""
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
    if chosen is None and want is True:  # where the default prefers a GEMM (d >= 5), the best kernel there
        direct = (_real(itemsize), d) in DIRECT and coalesced(positions, itemsize)
        return apply_direct_gpu if direct else apply_tiled_gpu
    return chosen


def _default_kernel(d: int, n_qubits: int, positions, itemsize: int):
    """The measured default policy for a gate the kernels can serve; None where a GEMM is faster."""
    if d in DMMA_DEFAULT_D and fits_dmma(positions, itemsize):
        if coalesced(positions, itemsize) and fits_dmma_pipe(n_qubits, positions, itemsize):
            return apply_dmma_pipe_gpu
        return apply_dmma_gpu
    if d > KERNEL_MAX_D:
        if d in SPREAD_KERNEL_D and positions[-1] - positions[0] != d - 1 and (_real(itemsize), d) in DIRECT:
            # spread targets, which a GEMM reaches only through a permutation pass
            return apply_direct_gpu if coalesced(positions, itemsize) else apply_tiled_gpu
        return None
    staged = STAGED.get((_real(itemsize), d))
    if staged and d in STAGED_EVERYWHERE_D and fits_staged(n_qubits, positions, staged.log_t):
        return apply_staged_gpu
    if coalesced(positions, itemsize):
        return apply_direct_gpu
    if staged and fits_staged(n_qubits, positions, staged.log_t):
        return apply_staged_gpu
    return apply_tiled_gpu  # not reached while select() requires fits(): every staged tile fits then
