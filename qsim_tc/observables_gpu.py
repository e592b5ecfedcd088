"""The GPU pass of :mod:`qsim_tc.observables`: every X group of an observable in one launch.

The terms go in ascending order of their X mask (as the CPU pass takes them), cut into launches
of at most :data:`LAUNCH_TERMS` terms (a thread block keeps one sum per term in shared memory).
A group's terms are cut into *keys*, their Z masks within a tile and their part (real or
imaginary): the kernel makes one signed sum of a group's products per key and tile, and each
term adds it with the sign of its Z bits above the tile (the tile's index is the same for all its
amplitudes), so terms that differ only above the tile cost one sum (chemistry at 28 qubits: 1,483
keys for 3,000 terms).
Within a launch the groups (runs of one X mask) are cut into segments of one high part
``d = x >> tb``, ``tb`` the tile bits (:data:`TILE_BITS`, at most the state's qubits). A thread
block stages its tile of ``2^tb`` amplitudes once, and for each segment with ``d != 0`` the
partner tile ``q ^ d`` once, which then serves every group of the segment: the state is read
about once per distinct high part of the X masks (half of it each time: only tiles whose bit
``top``, the highest bit of ``d``, is 0 take a segment, and their sums are doubled).

The thread blocks' per-term sums are added in a fixed order by a second kernel, so a result is
the same from run to run. :func:`model_kernels` is a numpy model of both kernels that follows
their indexing line for line (tiles, segments, partner tiles, the split of an amplitude's sign
into a thread's part and a per-element bit mask; not the kernel's pacing of its thread blocks,
which changes no value); the host code is tested with it on the CPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

# tile bits of the pass per state kind (TB in observables.cu): 32 KB tiles in either precision
TILE_BITS = {"c128": 11, "c64": 12}
# threads of a thread block (THREADS in observables.cu)
THREADS = 256
# thread blocks of a launch, over all the states of a block of states: None for BLOCKS_PER_SM on
# each multiprocessor, all resident at once, so that they move through the state side by side (a
# thread block takes every BLOCKS-th tile) and the partner tiles of the high parts below about
# BLOCKS tiles come from the L2 cache, read from memory once as a thread block's own tile. An int
# fixes the number. (The order of the sums, and so a result's last bits, follow it: a result is
# the same from run to run on one device.)
BLOCKS = None
# thread blocks that fit a multiprocessor (registers and shared memory: see observables.cu)
BLOCKS_PER_SM = 2
# steps a thread block may run ahead of the others' mean before it waits a little (a bounded
# wait: see observables.cu), so that they stay side by side in the state; -1: no pacing
PACE_LAG = 4
# terms of one launch: a thread block holds one float64 sum per term and one int32 per key in shared
# memory (3,072 terms: 36 KB beside the two 32 KB tiles and the staging slots, so that two thread
# blocks fit a multiprocessor)
LAUNCH_TERMS = 3072
# static shared memory of the pass (the warps' staging slots of two flush parities, stage in
# observables.cu: 2 x WARPS x STAGE float64)
STAGE = 64  # (STAGE in observables.cu)
STATIC_SHARED = 2 * (THREADS // 32) * STAGE * 8
# a key's part bit (KEY_IM in observables.cu): set where its terms take the imaginary parts
KEY_IM = 1 << 30
# bits of a key index in a group record (REC_KEY_BITS in observables.cu: two in one word)
REC_KEY_BITS = 16
_KINDS = {np.dtype(np.complex128): "c128", np.dtype(np.complex64): "c64"}


@dataclass
class Launch:
    """The arguments of one launch of ``group_pass``: the terms at ``positions`` of the pass's
    order (a slice of it, each group's terms reordered by key), in the kernel's order.

    Segment ``s`` (high part ``seg_d[s]``, its highest bit ``seg_top[s]``) owns the groups
    ``seg_g[s]:seg_g[s+1]``; group ``g`` (X mask ``g_x[g]``) owns the keys ``g_u[g]:g_u[g+1]``,
    those of the real parts first. A key is a Z mask within a tile and a part: ``u_key[u] =
    (z mod 2^tb) | KEY_IM * (ny odd)``; the kernel makes one signed sum of the products a key and
    tile, and key ``u``'s terms ``u_t[u]:u_t[u+1]`` (term ``t``'s key ``t_u[t]``) each add it
    with the sign of their Z bits above the tile, ``parity(t_zh[t] & q)`` for tile ``q``. Terms
    that differ only in those bits share one sum (a 3,000-term chemistry operator at 28 qubits has
    1,483 keys).
    """

    positions: np.ndarray  # int64
    seg_d: np.ndarray  # int64
    seg_top: np.ndarray  # int32
    seg_g: np.ndarray  # int32
    g_x: np.ndarray  # int64
    g_u: np.ndarray  # int32
    u_key: np.ndarray  # int32
    u_t: np.ndarray  # int32
    t_u: np.ndarray  # int32
    t_zh: np.ndarray  # int64

    @property
    def n_terms(self) -> int:
        return len(self.positions)

    @property
    def n_keys(self) -> int:
        return len(self.u_key)

    def segment_records(self) -> np.ndarray:
        """int32 (segments + 1, 4), the kernel's segment records: ``d`` (words 0 and 1, low word
        first), ``top`` (word 2), the first group (word 3); the last row holds the end of the groups
        in word 3."""
        rec = np.zeros((len(self.seg_d) + 1, 4), dtype=np.int32)
        rec[:-1, :2] = _words(self.seg_d)
        rec[:-1, 2] = self.seg_top
        rec[:, 3] = self.seg_g
        return rec

    def group_records(self) -> np.ndarray:
        """int32 (groups, 4), the kernel's group records: ``x`` (words 0 and 1, low word first),
        the first key and, shifted by :data:`REC_KEY_BITS`, the first key that takes the imaginary
        parts (word 2; a group's keys of the real parts come first), the end of its keys (word 3)."""
        rec = np.zeros((len(self.g_x), 4), dtype=np.int32)
        rec[:, :2] = _words(self.g_x)
        im = (self.u_key & KEY_IM) != 0
        n_re = np.add.reduceat(~im, self.g_u[:-1]) if len(self.g_x) else np.zeros(0, np.int64)
        n_re = np.where(np.diff(self.g_u) > 0, n_re, 0)
        rec[:, 2] = self.g_u[:-1] | ((self.g_u[:-1] + n_re) << REC_KEY_BITS)
        rec[:, 3] = self.g_u[1:]
        return rec

    def shared_bytes(self, tile_bytes: int) -> int:
        """Dynamic shared memory of the launch: the two tiles, a sum a term, a key a key."""
        return 2 * tile_bytes + 8 * self.n_terms + 4 * self.n_keys


def _words(v: np.ndarray) -> np.ndarray:
    """int64 values as (low, high) int32 words."""
    return np.ascontiguousarray(np.asarray(v, dtype=np.int64)).view(np.int32).reshape(-1, 2)


def launches(terms, order: np.ndarray, tile_bits: int) -> list[Launch]:
    """The launches of the pass for the terms in ``order`` (grouped by X mask, ascending).

    Within a launch each group's terms are reordered by key (``Launch.positions``), so a key's
    terms are consecutive.

    Args:
        terms: a :class:`qsim_tc.observables.PauliTerms`.
        order: the term indices, each X mask's terms together, masks ascending.
        tile_bits: the tiles' bits ``tb`` (the kernel's, at most the number of qubits).
    """
    out = []
    for start in range(0, len(order), LAUNCH_TERMS):
        idx = np.asarray(order[start:start + LAUNCH_TERMS], dtype=np.int64)
        x = terms.x[idx]
        key = (terms.z[idx] & ((1 << tile_bits) - 1)) | np.where(terms.ny[idx] % 2 == 1, KEY_IM, 0)
        # by group (runs of one x, kept in place), then by key; a stable sort keeps the input order
        # of terms with one key
        perm = np.lexsort((key, np.cumsum(np.r_[False, x[1:] != x[:-1]])))
        idx, key = idx[perm], key[perm]
        g_first = np.flatnonzero(np.r_[True, x[1:] != x[:-1]])  # each group's first term
        u_first = np.flatnonzero(np.r_[True, (x[1:] != x[:-1]) | (key[1:] != key[:-1])])  # each key's
        g_x = x[g_first]
        d = g_x >> tile_bits
        s_first = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])  # each segment's first group
        seg_d = d[s_first]
        seg_top = np.array([int(v).bit_length() - 1 if v else 0 for v in seg_d], dtype=np.int32)
        u_key = key[u_first]
        g_u = np.searchsorted(u_first, np.r_[g_first, len(idx)]).astype(np.int32)
        t_u = (np.cumsum(np.r_[False, (x[1:] != x[:-1]) | (key[1:] != key[:-1])]) if len(idx)
               else np.zeros(0, np.int64))
        out.append(Launch(start + perm, seg_d.astype(np.int64), seg_top, np.r_[s_first, len(g_x)].astype(np.int32),
                          g_x.astype(np.int64), g_u, u_key.astype(np.int32),
                          np.r_[u_first, len(idx)].astype(np.int32), t_u.astype(np.int32),
                          (terms.z[idx] >> tile_bits).astype(np.int64)))
    return out


def total_blocks(shared_bytes: int) -> int:
    """Thread blocks of a launch over all its states on the current device (:data:`BLOCKS`):
    :data:`BLOCKS_PER_SM`, or as many as fit a multiprocessor's shared memory with
    ``shared_bytes`` of dynamic shared memory each, on each multiprocessor."""
    if BLOCKS is not None:
        return BLOCKS
    import cupy  # noqa: PLC0415 - only for device arrays

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    per_sm = props.get("sharedMemPerMultiprocessor")
    fit = BLOCKS_PER_SM if per_sm is None else _blocks_that_fit(int(per_sm), shared_bytes)
    return max(1, min(BLOCKS_PER_SM, fit)) * int(props["multiProcessorCount"])


def _blocks_that_fit(shared_per_sm: int, dynamic_bytes: int) -> int:
    """Thread blocks with ``dynamic_bytes`` of dynamic shared memory (and the static staging slots)
    that fit a multiprocessor's shared memory; the driver keeps 1 KB a thread block."""
    return shared_per_sm // (dynamic_bytes + STATIC_SHARED + 1024)


def _tile_bytes(kind: str) -> int:
    """Bytes of one full tile of the pass (:data:`TILE_BITS` amplitudes)."""
    return (1 << TILE_BITS[kind]) * (16 if kind == "c128" else 8)


def grid_blocks(n_qubits: int, tile_bits: int, n_states: int, total: int) -> int:
    """Thread blocks per state of a launch: ``total`` over all states, at most one a tile."""
    return max(1, min(1 << (n_qubits - tile_bits), total // n_states))


def term_sums(psi, terms, order: np.ndarray) -> tuple[np.ndarray, int]:
    """The pass's sums of the terms ``order`` for a cupy state (1-D) or block of states (B, 2^n).

    Args:
        psi: complex128 or complex64 amplitudes in logical order.
        terms: a :class:`qsim_tc.observables.PauliTerms`.
        order: the term indices, each X mask's terms together, masks ascending.

    Returns:
        ``(sums, tb)``: float64 numpy sums of shape (B, len(order)) (B = 1 for one state), column
        ``j`` the sum ``sum_b (-1)^|b & z| (Re or Im)(conj(psi[b ^ x]) psi[b])`` of term
        ``order[j]`` over the tiles that take its segment (so half the pairs where ``x >> tb`` is
        not 0), and the tile bits ``tb``.

    Raises:
        TypeError: ``psi`` is not complex128 or complex64.
    """
    import cupy  # noqa: PLC0415 - only for device arrays

    n = terms.n_qubits
    n_states = psi.shape[0] if psi.ndim == 2 else 1
    kind = _KINDS.get(np.dtype(psi.dtype))
    if kind is None:
        raise TypeError(f"psi must be complex128 or complex64, got {psi.dtype}")
    tb = min(TILE_BITS[kind], n)
    if len(order) == 0 or n_states == 0:  # (no launch: a grid of no states is no grid)
        return np.zeros((n_states, len(order))), tb
    flat = cupy.ascontiguousarray(psi).reshape(n_states, 1 << n)
    pass_fn, sums_fn = _kernels(kind)
    tile_bytes = _tile_bytes(kind)
    plan = launches(terms, order, tb)
    shared = max(launch.shared_bytes(tile_bytes) for launch in plan)
    grid_x = grid_blocks(n, tb, n_states, total_blocks(shared))
    sums = cupy.zeros((n_states, len(order)), dtype=np.float64)
    for launch in plan:
        nt = launch.n_terms
        dev = [cupy.asarray(a) for a in (launch.segment_records(), launch.group_records())]
        keys = [cupy.asarray(a) for a in (launch.u_key, launch.u_t, launch.t_u, launch.t_zh)]
        partial = cupy.zeros((n_states, grid_x, nt), dtype=np.float64)
        progress = cupy.zeros(n_states, dtype=np.uint32)  # tiles done, per state (paces only)
        launch_shared = launch.shared_bytes(tile_bytes)
        pass_fn.max_dynamic_shared_size_bytes = launch_shared  # (above the 48 KB default)
        for s0 in range(0, n_states, 65535):  # (the grid's second dimension is at most 65535)
            pass_fn((grid_x, min(65535, n_states - s0)), (THREADS,),
                    (flat, np.int32(n), np.int32(len(launch.seg_d)), *dev, np.int32(launch.n_keys), *keys,
                     np.int32(nt), partial, np.int64(s0), progress, np.int32(PACE_LAG)),
                    shared_mem=launch_shared)
        part_sums = cupy.zeros((n_states, nt), dtype=np.float64)
        rows = n_states * nt
        sums_fn((-(-rows // THREADS),), (THREADS,), (partial, np.int32(grid_x), np.int32(nt), np.int64(rows),
                                                     part_sums))
        sums[:, cupy.asarray(launch.positions)] = part_sums
    return sums.get(), tb


MIN_COMPUTE_CAPABILITY = 80  # observables.cu's cp.async tile copies


def pass_runs_on_current_device() -> bool:
    """Whether the current GPU runs the pass (compute capability 8.0 or later)."""
    import cupy  # noqa: PLC0415 - only for device arrays

    return int(cupy.cuda.Device().compute_capability) >= MIN_COMPUTE_CAPABILITY


def _kernels(kind: str):
    """``(group_pass_<kind>, block_sums)`` on the current device, compiled once per process and
    device."""
    import cupy  # noqa: PLC0415 - only for device arrays

    return _loaded(cupy.cuda.Device().id, kind)


@functools.lru_cache(maxsize=None)
def _loaded(device: int, kind: str):
    from gemm.cuda.compile import PIPELINE, raw_module  # noqa: PLC0415 - the project's one kernel loader

    # (the pipeline header: cp.async for the complex128 walk's tile copies)
    module = raw_module("qsim_tc", "observables.cu", ("-std=c++17",), device, (PIPELINE,))
    return module.get_function(f"group_pass_{kind}"), module.get_function("block_sums")


def shared_limit_terms(kind: str, optin_bytes: int) -> int:
    """Terms whose sums and keys (at most one a term) fit a thread block's shared memory beside
    the two tiles (a check on :data:`LAUNCH_TERMS` against a device's opt-in limit)."""
    return (optin_bytes - STATIC_SHARED - 2 * _tile_bytes(kind)) // 12


def blocks_per_sm_fit(kind: str, shared_per_sm: int) -> int:
    """Thread blocks of a full launch (:data:`LAUNCH_TERMS` terms and keys) that fit a
    multiprocessor's shared memory."""
    return _blocks_that_fit(shared_per_sm, 2 * _tile_bytes(kind) + 12 * LAUNCH_TERMS)


# --- a numpy model of observables.cu ------------------------------------------------------------

def model_kernels(kind: str):
    """``(group_pass, block_sums)`` launchers that run observables.cu's kernels in numpy.

    They take the arguments of the CUDA kernels (``fn(grid, block, args, shared_mem=...)``, on
    numpy arrays) and follow their indexing: the thread blocks' tiles in grid-stride order, the
    segments and their skip rule, the partner tile ``q ^ d``, the partner ``i ^ (x mod 2^tb)``
    within it, and each amplitude's sign as ``parity((base | tid) & z) ^ parity(k & kz)``. The
    tile bits are :data:`TILE_BITS` at call time and the threads ``block[0]``, so small values
    exercise every part of the index on small states. Sums within a tile are numpy's (the
    kernel's warp reductions are not modelled); the order of tiles and thread blocks is.
    """
    dtype = {"c128": np.complex128, "c64": np.complex64}[kind]

    def group_pass(grid, block, args, shared_mem=0):
        (psi, n, n_segs, seg_rec, g_rec, n_keys, u_key, u_t, t_u, t_zh, n_terms, partial, state0, progress,
         lag) = args
        assert progress.dtype == np.uint32 and progress.size == partial.shape[0] and int(lag) >= -1
        n, n_terms, n_keys, state0 = int(n), int(n_terms), int(n_keys), int(state0)
        assert seg_rec.dtype == g_rec.dtype == np.int32 and seg_rec.shape == (int(n_segs) + 1, 4)
        # the records' words, as the kernel reads them
        seg_d = seg_rec[:-1, :2].copy().view(np.int64).ravel()
        seg_top, seg_g = seg_rec[:-1, 2], seg_rec[:, 3]
        g_x = g_rec[:, :2].copy().view(np.int64).ravel()
        mask = (1 << REC_KEY_BITS) - 1
        g_u = np.r_[g_rec[:, 2] & mask, g_rec[-1:, 3]]
        g_im = (g_rec[:, 2] >> REC_KEY_BITS) & mask  # each group's first key of the imaginary parts
        assert (g_rec[1:, 2] & mask == g_rec[:-1, 3]).all()  # consecutive keys
        assert len(u_key) == n_keys == len(u_t) - 1
        assert psi.dtype == dtype and partial.shape[2] == n_terms == len(t_u)
        threads = block[0]
        big = TILE_BITS[kind]
        log_t = threads.bit_length() - 1
        k_count = max(1, (1 << big) // threads)  # K
        assert shared_mem >= 2 * (1 << big) * psi.itemsize + 8 * n_terms + 4 * n_keys
        tb = min(big, n)
        tile, tiles = 1 << tb, 1 << (n - tb)
        tid = np.arange(threads, dtype=np.int64)
        k = np.arange(k_count, dtype=np.int64)
        i = tid[None, :] + k[:, None] * threads  # (K, THREADS): the amplitude of (k, tid)
        live = i < tile
        i_safe = np.where(live, i, 0)
        pattern = np.array([sum(((kk >> j) & 1) << kk for kk in range(k_count)) for j in range(12)])
        for y in range(grid[1]):
            state = state0 + y
            s = psi.reshape(-1, 1 << n)[state]
            for bx in range(grid[0]):
                acc = np.zeros(n_terms)
                for q in range(bx, tiles, grid[0]):
                    base = q << tb
                    own = s[base + i_safe]
                    for seg in range(len(seg_d)):
                        d = int(seg_d[seg])
                        src = own
                        if d:
                            if (q >> int(seg_top[seg])) & 1:
                                continue
                            src = s[((q ^ d) << tb) + i_safe]
                        for g in range(int(seg_g[seg]), int(seg_g[seg + 1])):
                            x = int(g_x[g])
                            a = own.astype(np.complex128)
                            if x:
                                xin = x & (tile - 1)
                                partner = src.reshape(-1)[i_safe ^ xin]  # (K, THREADS) flat: i at position i
                                w = np.conj(partner.astype(np.complex128)) * a
                            else:
                                w = np.abs(a) ** 2 + 0j
                            w = np.where(live, w, 0)
                            for u in range(int(g_u[g]), int(g_u[g + 1])):
                                key = int(u_key[u])
                                im = u >= g_im[g]  # the part the kernel computes for the key
                                assert im == bool(key & KEY_IM)
                                assert key & ~KEY_IM < tile  # a Z mask within the tile
                                kz = (key >> log_t) & (k_count - 1)
                                neg = np.where(_parity(tid & key & (threads - 1)), (1 << k_count) - 1, 0)  # per tid
                                for j in range(max(0, k_count.bit_length() - 1)):
                                    if (kz >> j) & 1:
                                        neg = neg ^ pattern[j]
                                sign = np.where((neg[None, :] >> k[:, None]) & 1, -1.0, 1.0)
                                inner = float((sign * (w.imag if im else w.real)).sum())
                                for t in range(int(u_t[u]), int(u_t[u + 1])):
                                    assert int(t_u[t]) == u
                                    acc[t] += -inner if _parity(int(t_zh[t]) & q) else inner
                partial[state, bx, :] = acc

    def block_sums(grid, block, args, shared_mem=0):
        partial, n_blocks, n_terms, n_out, out = args
        n_blocks, n_terms = int(n_blocks), int(n_terms)
        assert grid[0] * block[0] >= int(n_out) == out.size
        p = partial.reshape(-1, n_blocks, n_terms)
        total = np.zeros(p.shape[::2])
        for b in range(n_blocks):  # in ascending order of thread block
            total += p[:, b, :]
        out.reshape(total.shape)[...] = total

    return group_pass, block_sums


def _parity(v):
    v = np.asarray(v, dtype=np.int64).copy()
    for s in (32, 16, 8, 4, 2, 1):
        v ^= v >> s
    return (v & 1).astype(bool)
