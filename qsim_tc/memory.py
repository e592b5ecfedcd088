"""Memory checks made before anything large is allocated."""

from __future__ import annotations

import os

import numpy as np

from qsim_tc.errors import InsufficientMemoryError


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


def state_bytes(n_qubits: int, dtype) -> int:
    return (1 << n_qubits) * np.dtype(dtype).itemsize


def check_fits(what: str, needed: int, device) -> None:
    """Raise InsufficientMemoryError naming ``what`` when ``needed`` bytes exceed what is free."""
    if needed <= 0:
        return  # nothing new to allocate (and no need to ask the system)
    avail = available_bytes(device)
    if needed > avail:
        raise InsufficientMemoryError(what, needed, avail, device.name)


def gate_extra_bytes(method, n_qubits: int, d: int, dtype, options: dict, *, spare_allocated: bool,
                     device: str = "cpu") -> int:
    """Bytes a d-qubit gate needs beyond the state on ``device`` ("cpu"/"gpu").

    A method that writes into ``out=`` uses one spare state buffer, reused from gate to gate (and
    for permutations); any other method allocates its output, and a permuted copy of the state
    when the targets must move. Added to that: the method's own workspace (``workspace_bytes``:
    slices, hi/lo splits, products).
    """
    nbytes = state_bytes(n_qubits, dtype)
    work = int(method.workspace_bytes((1 << n_qubits) >> d, 1 << d, 1 << d, dtype, device=device, **options))
    if "out" in method.options:
        return work + (0 if spare_allocated else nbytes)
    return work + 2 * nbytes
