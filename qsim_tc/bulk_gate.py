"""Gates of 1 to 3 qubits through the bulk copy engine (``apply_bulk`` in kernels/small_gate.cu).

One thread per block (or a copy warp of its own, ``apply_bulk_ws``) moves whole chunks of 2^C
amplitudes between global and shared memory with ``cp.async.bulk`` (S stages deep, completing
on mbarriers), and the block multiplies the chunk's groups in shared memory. A chunk holds whole
groups at any target positions: it is 2^h contiguous segments, one per combination of the h
targets that lie above the segment, the other targets inside it (:func:`chunk_layout`). It was
the default where low and high targets mix (the tiled kernel took 2.59-3.34 ms there at 28
qubits, complex128; this one 2.27-2.31) until the lanes kernel learned high targets (2.12-2.31
ms at d = 2, benchmarks/results/tune_lanes_high_h200.json); it is no longer in the default
policy and is kept, tested, as the tuner's point of comparison (benchmarks/tune_small_gate.py
--only bulk, --only lanes_high).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import NamedTuple

import numpy as np

from qsim_tc.small_gate import _real, _sms, target_args
from qsim_tc.transfer import to_device

MAX_D = 3
SMEM_PER_SM = 228 * 1024  # shared memory per SM on sm_90 (H100/H200)
STATIC_SMEM = 2 * 1024  # the kernel's matrix and barriers, and the per-block reserve


class BulkConfig(NamedTuple):
    """One variant of ``apply_bulk`` and its launch."""

    chunk_log: int  # C: amplitudes per chunk, log2
    stages: int  # S: chunks in flight per block
    blocks_per_sm: int  # persistent grid
    lag: int = 1  # a stage is refilled this many chunks after its own (stores in flight)
    ws: bool = False  # apply_bulk_ws: the copies on a warp of their own, no block barrier in the loop

    @property
    def threads(self) -> int:
        return 288 if self.ws else 256

    @property
    def kernel(self) -> tuple:
        """What the compiled kernel depends on (blocks_per_sm is a launch choice)."""
        return (self.chunk_log, self.stages, self.lag, self.ws)

    def smem_bytes(self, itemsize: int) -> int:
        return self.stages * (itemsize << self.chunk_log)


# variants compiled for tuning; BULK_CONFIG: (real, d) -> the default, the best mean over mixed
# placements ({0,13}, {1,9}, {2,20}, {4,5}; {0,13,27}, {0,5,9}, {1,2,20}, {3,4,8}) in interleaved
# rounds on an H200 at 28 qubits (benchmarks/results/tune_bulk_ws_h200.json; earlier rounds in
# tune_bulk_h200.json, tune_bulk_mixed_h200.json, tune_bulk_lag_h200.json). There it beats the
# tiled kernel: complex128 2.27-2.31 ms against 2.59-3.34, complex64 1.19-1.22 against 1.34-1.82,
# but not cuStateVec (2.08 and 1.05). At the bottom and in the middle the lanes and direct kernels
# stay faster: one thread issues every copy, and the groups' gathers from shared memory conflict
# on banks when the targets are the lowest bits. The copy warp of its own (ws) helped complex64
# most (mixed d = 3: 1.22 against 1.34 ms); two stores in flight (lag 2) changed little.
BULK_VARIANTS = tuple(BulkConfig(c, s, 4) for c in (9, 10) for s in (3, 4)) + (
    BulkConfig(9, 4, 4, 2), BulkConfig(10, 4, 4, 2), BulkConfig(10, 4, 2)) + tuple(
    BulkConfig(c, s, b, ws=True) for c, s, b in ((9, 3, 4), (9, 4, 4), (10, 3, 4), (10, 4, 2), (9, 6, 2)))
BULK_CONFIG = {("double", 1): BulkConfig(10, 3, 4), ("double", 2): BulkConfig(9, 4, 4, ws=True),
               ("double", 3): BulkConfig(10, 3, 4), ("float", 1): BulkConfig(10, 3, 4, ws=True),
               ("float", 2): BulkConfig(10, 4, 2, ws=True), ("float", 3): BulkConfig(10, 3, 4, ws=True)}


class ChunkLayout(NamedTuple):
    """Where a chunk's amplitudes lie: segments of 2^seg_log contiguous amplitudes, one per
    combination of the ``high`` targets; ``local`` are the targets' positions inside the chunk's
    index (segment bits above seg_log)."""

    seg_log: int
    high: tuple
    local: tuple


def chunk_layout(positions, chunk_log: int) -> ChunkLayout:
    """The chunk of 2^chunk_log amplitudes around groups of targets ``positions`` (ascending): the
    targets plus the lowest other bits; its segments run up to the first bit it leaves out."""
    pos = sorted(int(p) for p in positions)
    bits = set(pos)
    b = 0
    while len(bits) < chunk_log:
        if b not in bits:
            bits.add(b)
        b += 1
    seg = 0
    while seg in bits:
        seg += 1
    high = tuple(p for p in pos if p >= seg)
    local = tuple(p if p < seg else seg + high.index(p) for p in pos)
    return ChunkLayout(seg, high, local)


def fits_bulk(n_qubits: int, positions, chunk_log: int) -> bool:
    """1..3 distinct targets on a state of at least one chunk."""
    d = len(positions)
    return 1 <= d <= MAX_D and len(set(positions)) == d and n_qubits >= chunk_log and max(positions) < n_qubits


def bulk_name(real: str, d: int, cfg: BulkConfig) -> str:
    if cfg.ws:
        return f"apply_bulk_ws<{real}, {d}, {cfg.chunk_log}, {cfg.stages}>"
    return f"apply_bulk<{real}, {d}, {cfg.chunk_log}, {cfg.stages}, {cfg.lag}>"


@functools.lru_cache(maxsize=None)
def _module(device_id: int, tuning: bool):
    """The configured kernels (BULK_CONFIG), or every tuning variant: compiled apart, so that a call
    with the configured kernel does not wait for the whole tuning set."""
    import cupy  # noqa: PLC0415

    code = resources.files("qsim_tc.kernels").joinpath("small_gate.cu").read_text()
    if tuning:
        names = {bulk_name(real, d, c) for real in ("double", "float") for d in range(1, MAX_D + 1) for c in BULK_VARIANTS}
    else:
        names = {bulk_name(real, d, c) for (real, d), c in BULK_CONFIG.items()}
    return cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=sorted(names))


def apply_bulk_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: BulkConfig | None = None):
    """``matrix`` (bit j of its index = ``positions[j]``, ascending) in place, through the bulk
    copy engine. ``config`` overrides BULK_CONFIG (tuning and tests).

    Raises:
        ValueError: more than 3 targets, repeated ones, a state smaller than one chunk, unsorted
            positions, or a config that is neither the default nor in BULK_VARIANTS.
    """
    import cupy  # noqa: PLC0415

    d = len(positions)
    real = _real(data.dtype.itemsize)
    cfg = config or BULK_CONFIG.get((real, d))
    if cfg is None or not fits_bulk(n_qubits, positions, cfg.chunk_log):
        raise ValueError(f"apply_bulk takes 1..{MAX_D} distinct targets on a state of at least one chunk "
                         f"(got targets {list(positions)} on {n_qubits} qubits)")
    if list(positions) != sorted(positions):
        raise ValueError(f"positions must be ascending (the matrix's bit order), got {list(positions)}")
    lay = chunk_layout(positions, cfg.chunk_log)
    default = BULK_CONFIG[real, d].kernel == cfg.kernel
    if not default and cfg.kernel not in {c.kernel for c in BULK_VARIANTS}:
        raise ValueError(f"config {cfg} names no compiled apply_bulk kernel (see BULK_VARIANTS)")
    kern = _module(cupy.cuda.Device().id, not default).get_function(bulk_name(real, d, cfg))
    smem = cfg.smem_bytes(data.dtype.itemsize)
    if kern.max_dynamic_shared_size_bytes < smem:
        kern.max_dynamic_shared_size_bytes = smem
    u = to_device(np.ascontiguousarray(matrix, dtype=data.dtype), cupy)
    n_chunks = 1 << (n_qubits - cfg.chunk_log)
    # a persistent grid: never more blocks than can be resident at once (a second wave of blocks
    # would start only when the first finishes its whole share)
    per_sm = max(1, min(cfg.blocks_per_sm, SMEM_PER_SM // (smem + STATIC_SMEM)))
    grid = int(min(n_chunks, _sms() * per_sm))
    kern((grid,), (cfg.threads,), (data, u, np.int64(n_chunks), np.int32(lay.seg_log), np.int32(len(lay.high)),
                           *target_args(lay.high, 3), *target_args(lay.local, 3)), shared_mem=smem)
    return data
