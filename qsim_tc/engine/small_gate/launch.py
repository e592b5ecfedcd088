"""Compiling and launching the small-gate kernels (``small_gate.cu``, beside this module).

One module holds the kernels the default policy launches, compiled at the first GPU gate; a second
one, compiled only when asked for, holds the tuning variants. Each launcher checks its arguments
(:func:`check_launch`) before anything runs, then applies the gate in place. cupy is imported
inside the launchers only, so the package imports without a GPU.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from gemm.device import sm_count
from qsim_tc.engine.small_gate.layout import (
    dmma_pipe_shared_bytes,
    dmma_shared_bytes,
    fits_dmma_pipe,
    fits_staged,
    gate_matrix_arg,
    staged_layout_args,
    target_args,
    tile_layout,
)
from qsim_tc.engine.small_gate.tables import (
    CONFIG,
    DIRECT,
    DMMA_COMPILED,
    DMMA_CONFIG,
    DMMA_PIPE_COMPILED,
    DMMA_PIPE_CONFIG,
    MAX_QUBITS,
    ONE_PASS,
    STAGED,
    STAGED_VARIANTS,
    TILED_VARIANTS,
    DmmaConfig,
    DmmaPipeConfig,
    StagedConfig,
    TiledConfig,
    default_kernel_names,
    direct_name,
    dmma_name,
    dmma_pipe_name,
    real_type,
    staged_name,
    tiled_name,
    tuning_kernel_names,
)
from qsim_tc.transfer import to_device


def kernel_source() -> str:
    """The CUDA source of every small-gate kernel (``small_gate.cu``)."""
    return resources.files(__package__).joinpath("small_gate.cu").read_text()


def _compile(names):
    import cupy  # noqa: PLC0415

    return cupy.RawModule(code=kernel_source(), options=("-std=c++17",), name_expressions=names)


@functools.lru_cache(maxsize=None)
def _module(device_id: int):
    return _compile(sorted(default_kernel_names()))


@functools.lru_cache(maxsize=None)
def _tuning_module(device_id: int):
    return _compile(sorted(tuning_kernel_names()))


@functools.lru_cache(maxsize=None)
def _kernel(device_id: int, name: str):
    """Kernel ``name`` from the module that compiles it.

    Raises:
        ValueError: no module compiles ``name`` (a configuration outside the compiled variants).
    """
    if name in default_kernel_names():
        return _module(device_id).get_function(name)
    if name in tuning_kernel_names():
        return _tuning_module(device_id).get_function(name)
    raise ValueError(f"{name} is not compiled (see DIRECT, CONFIG, TILED_VARIANTS, STAGED_VARIANTS, DMMA_COMPILED)")


def _sms() -> int:
    import cupy  # noqa: PLC0415

    return sm_count(cupy)


def launch_blocks(blocks_needed: int, blocks_per_sm: int) -> int:
    """Blocks to launch: every block the work needs (ONE_PASS) or a persistent grid of
    ``blocks_per_sm`` per SM whose threads loop over the state."""
    if blocks_per_sm == ONE_PASS:
        return int(max(1, blocks_needed))
    return int(max(1, min(blocks_needed, _sms() * blocks_per_sm)))


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
    real = real_type(data.dtype.itemsize)
    if (real, d) not in DIRECT:
        raise ValueError(f"apply_direct: no kernel for {data.dtype} with {d} targets (DIRECT: {sorted(DIRECT)})")
    if usrc is not None and (type(usrc) is not int or usrc not in (0, 1, 2)):
        raise ValueError(f"usrc must be 0, 1 or 2 (got {usrc!r})")
    kern = _kernel(cupy.cuda.Device().id, direct_name(real, d, usrc))
    n_groups = (1 << n_qubits) >> d
    gpt, per_sm = DIRECT[real, d]
    grid = launch_blocks(-(-n_groups // (256 * gpt)), per_sm)
    kern((grid,), (256,), (gate_matrix_arg(matrix, data.dtype), data, np.int64(n_groups), *target_args(positions, 6)))
    return data


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


def apply_tiled_gpu(data, n_qubits: int, matrix: np.ndarray, positions, config: TiledConfig | None = None):
    """Tiled kernel: same contract as :func:`apply_direct_gpu`, coalesced for low targets too.

    ``config`` overrides CONFIG (tuning and tests); its kernel must be CONFIG's or in TILED_VARIANTS.

    Raises:
        ValueError: ``config`` names no compiled variant, or the state holds no whole tile of it.
    """
    import cupy  # noqa: PLC0415

    check_launch("apply_small", data, n_qubits, matrix, positions)
    d = len(positions)
    real = real_type(data.dtype.itemsize)
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
    real = real_type(data.dtype.itemsize)
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
