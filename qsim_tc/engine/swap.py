"""Index-bit swaps in place: the bounded-memory way to move qubits between physical bits.

A set of disjoint bit pairs (p, q) is one involution of the amplitude index: the amplitudes with
bit p = 1, bit q = 0 trade places with those with bit p = 0, bit q = 1, for every pair at once.
That is one pass over the state with no second buffer. Any permutation of the bits is the
product of two such involutions (each cycle of length m is two reflections), so a full
relayout costs at most two passes in place, against one pass into a state-sized spare buffer
for :func:`~qsim_tc.engine.permute.permute_bits`.

CPU: the state is cut into chunks by fixing index bits that no pair touches; a chunk is closed
under the involution, so it is copied into a small temporary and written back transposed (one
strided read and one strided write of the state, the temporary stays in cache). Chunks go to
the same thread pool as the permutation copies. GPU: one kernel (``swap.cu``) in which the
lower index of each exchanged pair swaps the two amplitudes.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from qsim_tc.engine.permute import _POOL, _THREADS
from qsim_tc.memory import SWAP_CHUNK_ELEMENTS as CHUNK_ELEMENTS
from qsim_tc.transfer import to_device

_MAX_GPU_PAIRS = 32  # the kernel's shared table


class SwapInterrupted(RuntimeError):
    """A swap pass failed after amplitudes began to move: the state is partly swapped.

    Any other exception from :func:`swap_bits` was raised before any amplitude moved.
    """


def pairs_between(old_phys: list[int], new_phys: list[int]) -> list[list[tuple[int, int]]]:
    """The involutions (lists of disjoint (p, q), p < q) that take layout ``old_phys`` to ``new_phys``.

    Applied in order, they move the qubit stored at physical bit p to bit ``new_phys.index(q)``.
    At most two: one if the permutation is itself an involution (only 2-cycles), none if equal.

    Args:
        old_phys, new_phys: ``phys[p]`` = logical qubit at physical bit p, same qubits.

    Returns:
        A list of 0, 1 or 2 lists of pairs.
    """
    new_pos = {q: p for p, q in enumerate(new_phys)}
    sigma = [new_pos[q] for q in old_phys]  # content of bit p goes to bit sigma[p]
    seen = [False] * len(sigma)
    first, second = [], []
    for start in range(len(sigma)):
        if seen[start] or sigma[start] == start:
            seen[start] = True
            continue
        cycle = [start]
        seen[start] = True
        while sigma[cycle[-1]] != start:
            cycle.append(sigma[cycle[-1]])
            seen[cycle[-1]] = True
        m = len(cycle)
        # sigma on the cycle is c_i -> c_{i+1} = r2(r1(c_i)) with r1: c_i <-> c_{-i}, r2: c_i <-> c_{1-i}
        for i in range(m):
            j = (-i) % m
            if i < j:
                first.append(_pair(cycle[i], cycle[j]))
            j = (1 - i) % m
            if i < j:
                second.append(_pair(cycle[i], cycle[j]))
    return [ps for ps in (first, second) if ps]


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def apply_pairs(phys: list[int], pairs) -> list[int]:
    """The layout after exchanging the physical bits of each pair."""
    out = list(phys)
    for p, q in pairs:
        out[p], out[q] = out[q], out[p]
    return out


def swap_bits(data, n_qubits: int, pairs, xp, *, chunk_elements: int = CHUNK_ELEMENTS, scratch=None) -> None:
    """Exchange index bits p and q of ``data`` in place, for every pair at once (module docstring).

    Args:
        data: 1-D numpy or cupy array of 2^n_qubits amplitudes (changed in place).
        n_qubits: the number of index bits.
        pairs: disjoint (p, q) pairs of bits in 0..n_qubits-1 with p != q.
        xp: numpy or cupy.
        chunk_elements: CPU only: the largest chunk copied at once by one thread (a power of two;
            the temporaries take ``threads * chunk_elements`` amplitudes).
        scratch: CPU only: a 1-D array of ``data``'s dtype to carve the temporaries from (the
            engine's workspace); they are allocated when it is None or too small.

    Raises:
        ValueError: pairs that overlap or name a bit outside the state.
        SwapInterrupted: a failure after amplitudes began to move (the state is partly swapped);
            any other exception leaves ``data`` as it was.
    """
    pairs = [_pair(int(p), int(q)) for p, q in pairs]
    bits = [b for pq in pairs for b in pq]
    if len(set(bits)) != len(bits) or any(not 0 <= b < n_qubits for b in bits):
        raise ValueError(f"pairs must be disjoint bits in 0..{n_qubits - 1}, got {pairs}")
    if not pairs:
        return
    if xp is np:
        _swap_cpu(data, n_qubits, pairs, max(4, int(chunk_elements)), scratch)
    else:
        for k in range(0, len(pairs), _MAX_GPU_PAIRS):
            _swap_gpu(data, pairs[k:k + _MAX_GPU_PAIRS], xp)


def permute_in_place(data, n_qubits: int, new_phys: list[int], old_phys: list[int], xp, *,
                     chunk_elements: int = CHUNK_ELEMENTS, scratch=None, on_pass=None) -> int:
    """Relayout ``data`` from ``old_phys`` to ``new_phys`` in place (at most two passes).

    Args:
        chunk_elements, scratch: as :func:`swap_bits`.
        on_pass: called with the layout after each completed pass (so that a caller's record of
            the layout stays true if a later pass fails).

    Returns:
        The number of passes made (0, 1 or 2).

    Raises:
        SwapInterrupted, and as :func:`swap_bits`.
    """
    passes = pairs_between(old_phys, new_phys)
    phys = list(old_phys)
    for ps in passes:
        swap_bits(data, n_qubits, ps, xp, chunk_elements=chunk_elements, scratch=scratch)
        phys = apply_pairs(phys, ps)
        if on_pass is not None:
            on_pass(phys)
    return len(passes)


# --- CPU ---------------------------------------------------------------------------------------

def _swap_cpu(data: np.ndarray, n: int, pairs, chunk_elements: int, scratch=None) -> None:
    involved = {b for pq in pairs for b in pq}
    free = [b for b in range(n) if b not in involved]
    inner_bits = min(n, chunk_elements.bit_length() - 1)
    if len(involved) > inner_bits and len(pairs) > 1:
        # the pairs span more bits than a chunk holds: two passes over halves of the pairs
        half = len(pairs) // 2
        _swap_cpu(data, n, pairs[:half], chunk_elements, scratch)
        _swap_cpu(data, n, pairs[half:], chunk_elements, scratch)
        return
    inner_bits = max(inner_bits, len(involved))
    outer = sorted(free, reverse=True)[:n - inner_bits]  # fix the highest free bits per chunk
    # the (2,)*n view: axis a holds bit n-1-a; a chunk is the sub-array with the outer axes fixed
    view = data.reshape((2,) * n)
    inner_axes = [a for a in range(n) if (n - 1 - a) not in outer]
    perm = list(range(len(inner_axes)))
    where = {n - 1 - a: i for i, a in enumerate(inner_axes)}  # bit -> axis of the chunk
    for p, q in pairs:
        perm[where[p]], perm[where[q]] = perm[where[q]], perm[where[p]]
    chunk_shape = (2,) * len(inner_axes)
    n_chunks = 1 << len(outer)
    threads = _THREADS if _POOL is not None and n_chunks > 1 else 1
    # one temporary per thread, allocated before any amplitude moves: a failed allocation
    # leaves the state as it was
    n_tmp, size = min(threads, n_chunks), 1 << len(inner_axes)
    if scratch is not None and scratch.dtype == data.dtype and scratch.size >= n_tmp * size:
        tmps = [scratch[i * size:(i + 1) * size].reshape(chunk_shape) for i in range(n_tmp)]
    else:
        tmps = [np.empty(chunk_shape, dtype=data.dtype) for _ in range(n_tmp)]

    def index(c: int):
        idx = [slice(None)] * n
        for k, b in enumerate(outer):
            idx[n - 1 - b] = (c >> k) & 1
        return tuple(idx)

    def work(t: int) -> None:
        tmp = tmps[t]
        for c in range(t, n_chunks, len(tmps)):
            _swap_chunk(view[index(c)], tmp, perm)

    try:
        if len(tmps) == 1:
            work(0)
        else:
            list(_POOL.map(work, range(len(tmps))))
    except BaseException as exc:
        raise SwapInterrupted(f"swapping index bits {pairs} failed after amplitudes began to move: {exc!r}") from exc


def _swap_chunk(chunk: np.ndarray, tmp: np.ndarray, perm: list[int]) -> None:
    """One chunk: copy out, write back with the paired axes exchanged."""
    np.copyto(tmp, chunk)
    np.copyto(chunk, tmp.transpose(perm))


# --- GPU ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _swap_kernel(device_id: int, itemsize: int):
    import cupy  # noqa: PLC0415

    code = resources.files(__package__).joinpath("swap.cu").read_text()
    name = f"swap_bits_inplace<{itemsize}>"
    return cupy.RawModule(code=code, options=("-std=c++17",), name_expressions=[name]).get_function(name)


def _swap_gpu(data, pairs, xp) -> None:
    if data.dtype.itemsize not in (8, 16):
        raise TypeError(f"swap_bits on the GPU takes complex64 or complex128 data, got {data.dtype}")
    table = to_device(np.asarray([b for pq in pairs for b in pq], dtype=np.int32), xp)
    n = data.size
    kern = _swap_kernel(xp.cuda.Device().id, data.dtype.itemsize)
    blocks = int(max(1, min(-(-n // 256), 1 << 20)))  # grid-stride beyond 2^28 threads
    kern((blocks,), (256,), (data.reshape(-1), np.int64(n), np.int32(len(pairs)), table))
