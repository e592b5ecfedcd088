"""Memory checks made before anything large is allocated, and the bounded workspace's sizes.

The engine keeps one state and a workspace of bounded size (default: the smaller of 1/16 of the
state and 4 GiB, at least 1 MiB): GEMMs run on blocks of the state whose output, plus the
method's own workspace for the block, fits in it; permutations run in place. The old engine
(``double_buffer=True``) keeps a state-sized spare buffer instead.
"""

from __future__ import annotations

import os

import numpy as np

from qsim_tc.errors import InsufficientMemoryError

DEFAULT_WORKSPACE_FRACTION = 16  # the workspace is at most 1/16 of the state ...
DEFAULT_WORKSPACE_CAP = 4 << 30  # ... and at most 4 GiB
MIN_DEFAULT_WORKSPACE = 1 << 20  # tiny states still get blocks worth a BLAS call
# On the CPU a block's output is copied back while it is still in cache, and larger blocks only
# add resident memory (a 22-qubit brickwork on a loaded 2-core machine showed no consistent
# difference between 4, 8 and 32 MiB blocks).
CPU_BLOCK_BYTES = 8 << 20
MAX_QUBITS = 40
# CPU index-bit swaps copy chunks of at most 2^17 amplitudes (2 MiB in complex128) per thread:
# the temporary stays in L2/L3 and each numpy copy is long enough that its fixed cost is small.
SWAP_CHUNK_ELEMENTS = 1 << 17
SWAP_THREADS = max(1, min(8, os.cpu_count() or 1))


def swap_chunk_elements(limit: int, itemsize: int) -> int:
    """The CPU swap chunk (a power of two) whose temporaries, one per thread, fit ``limit`` bytes."""
    per_thread = max(4, int(limit) // (itemsize * SWAP_THREADS))
    return min(SWAP_CHUNK_ELEMENTS, 1 << (per_thread.bit_length() - 1))


def available_bytes(device) -> int:
    """Free memory on ``device`` (a gemm.Device): cudaMemGetInfo plus cupy's pool, or MemAvailable."""
    if device.is_gpu:
        cp = device.xp
        free, _total = cp.cuda.runtime.memGetInfo()
        pool = cp.get_default_memory_pool()
        return int(free + pool.free_bytes())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


# the spare-buffer engine is chosen by default only while the state, its spare and the default
# workspace take at most this share of the free memory: the rest is left to the gate's own
# workspace (GEMM methods, pinned staging) and to other work on the machine
DOUBLE_BUFFER_FREE_FRACTION = 0.75


def double_buffer_fits(n_qubits: int, dtype, device, *, allocated: bool = False) -> bool:
    """Whether a state-sized spare buffer fits comfortably beside a new state on ``device`` (or
    beside the state itself when it is ``allocated`` already)."""
    need = (1 if allocated else 2) * state_bytes(n_qubits, dtype) + default_workspace_bytes(n_qubits, dtype)
    return need <= DOUBLE_BUFFER_FREE_FRACTION * available_bytes(device)


def state_bytes(n_qubits: int, dtype) -> int:
    return (1 << n_qubits) * np.dtype(dtype).itemsize


def check_fits(what: str, needed: int, device, hint: str = "") -> None:
    """Raise InsufficientMemoryError naming ``what`` when ``needed`` bytes exceed what is free."""
    if needed <= 0:
        return  # nothing new to allocate (and no need to ask the system)
    avail = available_bytes(device)
    if needed > avail:
        raise InsufficientMemoryError(what, needed, avail, device.name, hint)


def check_workspace_bytes(value) -> int | None:
    """``workspace_bytes=`` as given by a user: None (the default) or a positive int.

    Raises:
        TypeError: not an int. ValueError: below 4096 bytes.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"workspace_bytes must be an int (bytes) or None, got {type(value).__name__}")
    if value < 4096:
        raise ValueError(f"workspace_bytes must be at least 4096 bytes, got {value}")
    return int(value)


def default_workspace_bytes(n_qubits: int, dtype) -> int:
    """The smaller of 1/16 of the state and 4 GiB, at least 1 MiB."""
    return max(MIN_DEFAULT_WORKSPACE,
               min(state_bytes(n_qubits, dtype) // DEFAULT_WORKSPACE_FRACTION, DEFAULT_WORKSPACE_CAP))


def workspace_limit(n_qubits: int, dtype, workspace_bytes: int | None = None) -> int:
    """The workspace bound of a state: ``workspace_bytes`` if given, else the default."""
    return default_workspace_bytes(n_qubits, dtype) if workspace_bytes is None else int(workspace_bytes)


def gate_block(method, n_qubits: int, d: int, dtype, options: dict, *, device: str, limit: int,
               copies: int = 1, explicit: bool = False) -> tuple[int, int]:
    """The output block of a d-qubit gate applied through a bounded workspace.

    A block is ``E`` amplitudes of output (a power of two, a multiple of 2^d, at most the state):
    its GEMM has the gate's shape with ``m = E / 2^d``. It needs ``copies * E`` amplitudes (the
    output, and on the GPU for column blocks a contiguous copy of the input) plus the method's
    own workspace for that shape, and the largest E within ``limit`` is taken (on the CPU at most
    ``CPU_BLOCK_BYTES`` of output).

    Args:
        method: the gemm.Method. options: its options. device: "cpu" or "gpu".
        limit: the workspace bound in bytes. copies: block-sized buffers besides the method's.
        explicit: the limit was set by the user; when even the smallest block (m = 1) does not fit,
            raise instead of taking that block.

    Returns:
        (E, bytes): the block size in amplitudes and the bytes it needs.

    Raises:
        InsufficientMemoryError: ``explicit`` and the smallest block needs more than ``limit``.
    """
    item = np.dtype(dtype).itemsize
    dim = 1 << d
    total = 1 << n_qubits
    opts = {k: v for k, v in options.items() if k != "out"}

    def need(e: int) -> int:
        ws = int(method.workspace_bytes(e // dim, dim, dim, dtype, device=device, **opts))
        return copies * e * item + ws

    if not explicit and need(dim) > limit:
        # a method's workspace that does not shrink with the block (the CPU tensor-core emulation
        # works in chunks of its own) goes beside the default bound rather than forcing one-row blocks
        limit += need(dim) - copies * dim * item
    cap = limit if device == "gpu" else min(limit, CPU_BLOCK_BYTES * copies)
    e = max(dim, min(total, 1 << max(0, (cap // (copies * item)).bit_length() - 1)))
    while e > dim and need(e) > limit:
        e //= 2
    if need(e) > limit and explicit:
        raise InsufficientMemoryError(
            f"a {d}-qubit gate with {method.name!r} through workspace_bytes={limit:,}", need(e), limit, device,
            f"its smallest block needs {need(e):,} bytes: raise workspace_bytes")
    return e, need(e)


def gate_extra_bytes(method, n_qubits: int, d: int, dtype, options: dict, *, spare_allocated: bool = False,
                     device: str = "cpu", workspace_bytes: int | None = None, double_buffer: bool = False) -> int:
    """Bytes a d-qubit gate needs beyond the state on ``device`` ("cpu"/"gpu").

    Bounded engine (the default): the workspace its blocks use, within the workspace bound
    (``workspace_bytes`` or the default), the method's own workspace counted inside it.
    Double-buffer engine: a method that writes into ``out=`` uses one spare state buffer, reused
    from gate to gate (and for permutations); any other method allocates its output, and a
    permuted copy of the state when the targets must move; plus the method's workspace.

    Args:
        spare_allocated: double-buffer engine only: the spare buffer exists already.
        workspace_bytes: the user's workspace bound, or None for the default.
        double_buffer: the old engine's estimate.
    """
    nbytes = state_bytes(n_qubits, dtype)
    d = min(d, n_qubits)
    if not double_buffer:
        limit = workspace_limit(n_qubits, dtype, workspace_bytes)
        copies = 2 if device == "gpu" else 1
        _, need = gate_block(method, n_qubits, d, dtype, options, device=device, limit=limit, copies=copies,
                             explicit=workspace_bytes is not None)
        if device == "cpu":  # the swap's temporaries share the buffer the blocks use
            item = np.dtype(dtype).itemsize
            need = max(need, swap_chunk_elements(limit, item) * SWAP_THREADS * item)
        return need
    opts = {k: v for k, v in options.items() if k != "out"}
    work = int(method.workspace_bytes((1 << n_qubits) >> d, 1 << d, 1 << d, dtype, device=device, **opts))
    if "out" in method.options:
        return work + (0 if spare_allocated else nbytes)
    return work + 2 * nbytes


def run_bytes(n_qubits: int, dtype, method=None, d: int = 1, options: dict | None = None, *, device: str = "cpu",
              workspace_bytes: int | None = None, double_buffer: bool = False) -> int:
    """The state plus what its largest gate needs (no method: the state alone, what a new state
    allocates; its gates' workspace is checked when they run)."""
    nbytes = state_bytes(n_qubits, dtype)
    if method is None:
        return nbytes
    return nbytes + gate_extra_bytes(method, n_qubits, d, dtype, options or {}, device=device,
                                     workspace_bytes=workspace_bytes, double_buffer=double_buffer)


def max_qubits(available: int, dtype, method=None, d: int = 1, options: dict | None = None, *, device: str = "cpu",
               workspace_bytes: int | None = None, double_buffer: bool = False) -> int:
    """The largest qubit count whose :func:`run_bytes` fits in ``available`` bytes (0 if none)."""
    best = 0
    for n in range(max(1, d), MAX_QUBITS + 1):
        if run_bytes(n, dtype, method, d, options, device=device, workspace_bytes=workspace_bytes,
                     double_buffer=double_buffer) > available:
            break
        best = n
    return best


def check_state_fits(what: str, n_qubits: int, dtype, device, method=None, d: int = 1, options: dict | None = None, *,
                     workspace_bytes: int | None = None, double_buffer: bool = False, allocated: int = 0) -> None:
    """Raise InsufficientMemoryError before allocating when the state and its workspace do not fit.

    The message says how many bytes are needed and available, and the largest qubit count that
    would fit with this method (or dtype) and workspace on ``device``.

    Args:
        what: names the request in the message. device: a gemm.Device. method: the gemm.Method
            of the run (None: the workspace bound only). d: its largest gate. allocated: bytes
            of it that are held already (a state that exists), not counted as new.
    """
    kw = dict(device=device.name, workspace_bytes=workspace_bytes, double_buffer=double_buffer)
    needed = run_bytes(n_qubits, dtype, method, d, options, **kw) - allocated
    avail = available_bytes(device)
    if needed > avail:
        fit = max_qubits(avail + allocated, dtype, method, d, options, **kw)
        name = f"{method.name!r} ({np.dtype(dtype)})" if method is not None else str(np.dtype(dtype))
        hint = (f"at most {fit} qubits fit with {name} on the {device.name}" if fit
                else f"no state fits with {name} on the {device.name}")
        raise InsufficientMemoryError(what, needed, avail, device.name, hint)
