"""The small-gate kernels' tuning tables and kernel names.

Every table was measured on one device (an H200 at 28 qubits unless a comment says otherwise;
benchmarks/results/ names the file); a new device is tuned by rewriting its rows, not the code.
The kernel names are the template instantiations ``small_gate.cu`` compiles: the default policy's
set in one module, every tuning variant in a second one.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

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
# 2.95-2.97 (tune_dmma_pipe2_h200.json); in bench.apply x1.17-1.24 against cuStateVec where
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
# complex64 d = 4 with a low target (tune_staged_d4_h200.json, bench.apply's rotating GEMM and tiled
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


# --- kernel names ---------------------------------------------------------------------------------


def real_type(itemsize: int) -> str:
    """The kernels' real type for amplitudes of ``itemsize`` bytes (complex128: 16, complex64: 8)."""
    return "double" if itemsize == 16 else "float"


def tiled_name(real: str, d: int, log_g: int, rows: int) -> str:
    """The tiled kernel (``apply_small``) for ``real`` amplitudes, d targets, 2^log_g groups per
    tile and ``rows`` matrix rows per thread."""
    return f"apply_small<{real}, {d}, {log_g}, {rows}>"


def direct_name(real: str, d: int, usrc: int | None = None) -> str:
    """The direct kernel for ``real`` amplitudes and d targets; ``usrc`` (default DIRECT_USRC[d]) says
    where its row products read the matrix."""
    usrc = DIRECT_USRC[d] if usrc is None else usrc
    return f"apply_direct<{real}, {d}, {DIRECT[real, d][0]}, {'true' if DIRECT_STREAM else 'false'}, 1, {usrc}>"


def dmma_name(d: int, tiles: int, gauss: bool, min_blocks: int, prefetch: bool, slices: int, shape: int) -> str:
    """The DMMA kernel for d targets and the variant ``DmmaConfig.kernel`` names."""
    b = {True: "true", False: "false"}
    return f"apply_dmma<{d}, {tiles}, {b[gauss]}, {min_blocks}, {b[prefetch]}, {slices}, {shape}>"


def dmma_pipe_name(d: int, shape: int, warps: int, chunk: int, tiles: int, stages: int, gauss: bool) -> str:
    """The pipelined DMMA kernel for d targets and the variant ``DmmaPipeConfig.kernel`` names."""
    return f"apply_dmma_pipe<{d}, {shape}, {warps}, {chunk}, {tiles}, {stages}, {'true' if gauss else 'false'}>"


def staged_name(real: str, d: int, log_t: int) -> str:
    """The staged kernel for ``real`` amplitudes, d targets and tiles of 2^log_t amplitudes."""
    return f"apply_staged<{real}, {d}, {log_t}>"


@functools.lru_cache(maxsize=None)
def default_kernel_names() -> frozenset:
    """The kernels the default policy can launch: one module, compiled at the first GPU gate."""
    names = {direct_name(t, d) for t, d in DIRECT
             if d not in STAGED_EVERYWHERE_D and not (t == "double" and d in DMMA_DEFAULT_D)}
    names |= {tiled_name("float", d, *CONFIG[d]) for d in (5, 6)}  # spread complex64 d = 5; forced d = 6
    names |= {dmma_name(d, *DMMA_CONFIG[d].kernel) for d in DMMA_CONFIG}
    names |= {dmma_pipe_name(d, *DMMA_PIPE_CONFIG[d].kernel) for d in DMMA_PIPE_CONFIG}
    names |= {staged_name(t, d, cfg.log_t) for (t, d), cfg in STAGED.items()}
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def tuning_kernel_names() -> frozenset:
    """Every other compiled variant (tuning, tests, configurations outside the policy)."""
    names = {direct_name(t, d, m) for t, d in DIRECT for m in range(3) if not (m == 0 and d >= 4)}
    names |= {tiled_name(t, d, *CONFIG[d]) for t in ("double", "float") for d in CONFIG}
    names |= {tiled_name(t, d, *k) for (t, d), ks in TILED_VARIANTS.items() for k in ks}
    names |= {staged_name(t, d, lt) for t in ("double", "float") for d, lts in STAGED_VARIANTS.items() for lt in lts}
    names |= {dmma_name(*v) for v in DMMA_COMPILED}
    names |= {dmma_pipe_name(*v) for v in DMMA_PIPE_COMPILED}
    return frozenset(names - default_kernel_names())
