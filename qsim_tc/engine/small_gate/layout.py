"""Layout arithmetic of the small-gate kernels: pure functions of the state width, the sorted
physical target positions and the amplitude size, which give the kernels' launch arguments and say
which kernel can serve a gate. No GPU is needed to compute (or test) any of them.
"""

from __future__ import annotations

import functools

import numpy as np

from qsim_tc.engine.small_gate.tables import (
    CONFIG,
    DMMA_CONFIG,
    DMMA_PIPE_CONFIG,
    MAX_QUBITS,
    STAGED,
    STAGED_VARIANTS,
    DmmaPipeConfig,
)


def fits(n_qubits: int, d: int) -> bool:
    """The smallest state the kernels take: one whole tile of the tiled kernel, n_qubits >= LOG_G + d
    (which also holds every staged tile); select() sends smaller states to the GEMM."""
    return 1 <= d <= MAX_QUBITS and n_qubits >= CONFIG[d][0] + d


def coalesced(positions, itemsize: int) -> bool:
    """True when neighbouring groups are contiguous runs of >= 128 bytes (direct kernel)."""
    return (1 << min(positions)) * itemsize >= 128


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


def target_args(positions, width: int) -> list:
    """The kernels' target-position arguments: int32, padded with zeros to ``width``."""
    return [np.int32(p) for p in list(positions) + [0] * (width - len(positions))]


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


def fits_dmma(positions, itemsize: int) -> bool:
    """True when the DMMA kernel serves these targets: complex128 and d in DMMA_CONFIG (any
    positions: its loads and stores cover whole 32-byte sectors whatever the layout)."""
    return itemsize == 16 and len(positions) in DMMA_CONFIG


def dmma_shared_bytes(d: int) -> int:
    """U in fragment order: 4^d (Re, Im) pairs."""
    return (4 ** d) * 16


def dmma_pipe_shared_bytes(d: int, cfg: DmmaPipeConfig) -> int:
    """U in fragment order, then ``stages`` chunks of 8 * chunk groups of 2^d amplitudes."""
    return dmma_shared_bytes(d) + cfg.stages * cfg.chunk * 8 * (1 << d) * 16


def fits_dmma_pipe(n_qubits: int, positions, itemsize: int, config: DmmaPipeConfig | None = None) -> bool:
    """True when the pipelined DMMA kernel serves these targets: complex128, ``config`` (default
    DMMA_PIPE_CONFIG's for d) known, and at least one whole chunk of tiles in the state."""
    d = len(positions)
    cfg = config or DMMA_PIPE_CONFIG.get(d)
    return itemsize == 16 and cfg is not None and ((1 << n_qubits) >> d) >> 3 >= cfg.chunk
