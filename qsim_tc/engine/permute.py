"""Permutations of the state's index bits: the engine's one full pass over memory.

A transpose of the (2, 2, ..., 2) view of the state, with runs of bits that stay adjacent merged
into one axis. On the CPU numpy copies the strided view (in slabs on several threads); on the GPU
one gather kernel (``permute.cu``, beside this module) writes each amplitude once.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

import numpy as np

from qsim_tc.transfer import to_device

# numpy copies a strided view on one core; copies release the GIL, so slabs of the
# output can be filled by several threads (about 2x on 2 cores for a 24-qubit state).
_THREADS = max(1, min(8, os.cpu_count() or 1))
_POOL = ThreadPoolExecutor(_THREADS) if _THREADS > 1 else None
_PARALLEL_MIN = 1 << 18


def permute_bits(data, n_qubits: int, new_phys: list[int], old_phys: list[int], xp, out=None):
    """Return the state with physical bit order ``new_phys`` from one stored as ``old_phys``.

    Runs of bits that stay adjacent are merged into one axis first, so the transpose has as
    few axes as possible (fewer, longer loops in the copy). ``out``: a buffer of the same size
    to write into (it must not be ``data``).
    """
    old_pos = {q: p for p, q in enumerate(old_phys)}
    # source physical bit for each destination physical bit
    src = [old_pos[q] for q in new_phys]
    if src == list(range(n_qubits)):
        if out is None:
            return data
        xp.copyto(out, data)
        return out
    # group destination bits into runs whose sources are consecutive
    runs = []  # (src_start, length) in destination order, low to high
    for s in src:
        if runs and runs[-1][0] + runs[-1][1] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    # source axes, ordered high bit first (C order), one axis per run
    by_src = sorted(range(len(runs)), key=lambda r: runs[r][0], reverse=True)
    shape = [1 << runs[r][1] for r in by_src]
    axis_of_run = {r: i for i, r in enumerate(by_src)}
    # destination order high to low = runs reversed
    axes = [axis_of_run[r] for r in reversed(range(len(runs)))]
    if xp is not np and data.dtype.itemsize in (8, 16):
        return _permute_gpu(data, runs, out, xp)
    view = data.reshape(shape).transpose(axes)
    if xp is np and _POOL is not None and data.size >= _PARALLEL_MIN:
        return _parallel_copy(view, out).reshape(-1)
    if out is None:
        return xp.ascontiguousarray(view).reshape(-1)
    xp.copyto(out.reshape(view.shape), view)
    return out


@functools.lru_cache(maxsize=None)
def _permute_kernel(device_id: int, itemsize: int):
    import cupy  # noqa: PLC0415

    code = resources.files(__package__).joinpath("permute.cu").read_text()
    name = f"permute_bits_gather<{itemsize}>"
    return cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=[name]).get_function(name)


def _permute_gpu(data, runs, out, xp):
    """``permute_bits`` on the GPU: one gather pass (permute.cu); ``runs`` are
    [source start, length] in destination order, low to high."""
    table, dst = [], 0
    for src_start, length in runs:
        table += [dst, src_start, length]
        dst += length
    if out is None:
        out = xp.empty_like(data)
    n = data.size
    kern = _permute_kernel(xp.cuda.Device().id, data.dtype.itemsize)
    kern((int(max(1, -(-n // 256))),), (256,), (data.reshape(-1), out.reshape(-1), np.int64(n), np.int32(len(runs)),
                                                to_device(np.asarray(table, dtype=np.int32), xp)))
    return out.reshape(-1)


def _parallel_copy(view: np.ndarray, out=None) -> np.ndarray:
    """A C-contiguous copy of ``view`` made by several threads, slab by slab along a leading axis."""
    out = np.empty(view.shape, dtype=view.dtype) if out is None else out.reshape(view.shape)
    axis = 0
    while axis < view.ndim - 1 and view.shape[axis] < _THREADS:
        axis += 1
    n = view.shape[axis]
    bounds = [n * i // _THREADS for i in range(_THREADS + 1)]

    def copy(i):
        sl = (slice(None),) * axis + (slice(bounds[i], bounds[i + 1]),)
        np.copyto(out[sl], view[sl])

    list(_POOL.map(copy, range(_THREADS)))
    return out
