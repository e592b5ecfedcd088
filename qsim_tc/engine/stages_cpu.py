"""Runs a stage plan (:mod:`qsim_tc.plan.stages`) on a numpy state, one cache-sized block at a time.

Per stage: one permutation pass brings the stage's layout in (the index-bit swaps, all of them
in one strided copy), then the state is cut into blocks of 2^K contiguous amplitudes, K >= L, and
every gate of the stage is applied to a block before the next block is touched, so the block
stays in cache. A block holds whole chunks (the L local bits) and also the global bits L..K-1,
which vary inside it; bits >= K are fixed per block, so a gate's high control selects whether
the gate applies to the block and a diagonal's high bits select a slice of its diagonal.
Blocks several chunks wide keep each numpy call large enough that its fixed overhead (a few
microseconds) stays small against its work.

How a gate is applied to a block (``x``, 2^K amplitudes viewed as one axis per run of bits):

- diagonal: one broadcast multiply; runs of consecutive diagonal gates are merged first into
  one diagonal over the union of their bits (up to ``_MAX_MERGED_BITS`` bits);
- controlled: the gate's target matrix on the sub-view where the controls are 1;
- dense (and non-SWAP permutations): a matrix product when the targets are one run of bits of
  the whole block, else a sum of 2^d scaled slices per output slice.

Threads: blocks go to a small pool (numpy releases the GIL in array loops).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

import gemm
from circuits.gate import reorder_bits
from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.layout import Layout
from qsim_tc.plan.stages import RELABEL, Stage, StagePlan
from qsim_tc.plan.structure import CONTROLLED, DIAGONAL

DEFAULT_BLOCK_BYTES = 4 << 20  # a few MB a numpy call; two blocks (one a thread) stay in L3
_MAX_MERGED_BITS = 14  # a merged diagonal keeps at most 2^14 entries per block
_THREADS = max(1, min(8, os.cpu_count() or 1))


def run_stages(state, plan: StagePlan, *, block_bytes: int = DEFAULT_BLOCK_BYTES, threads: int | None = None):
    """Apply ``plan`` to a state.

    Args:
        state: a :class:`~qsim_tc.engine.storage.PhysicalState` on the CPU (changed in place:
            data, layout and spare buffer; its layout is left as the plan ends, lazily), or a
            1-D numpy complex array in logical order (used as storage and overwritten).
        plan: from :func:`~qsim_tc.plan.stages.plan_stages` for a circuit of the state's width.
        block_bytes: the size of the blocks the gates are applied to (rounded down to a power of
            two amplitudes, at least one chunk of 2^L).
        threads: worker threads over blocks (default: the CPU count, at most 8).

    Returns:
        The PhysicalState, or for an array input the final amplitudes in logical order (a numpy
        array that may be the input array or a new one).

    Raises:
        TypeError: ``state`` is neither, or holds a non-complex dtype.
        ValueError: the widths of state and plan differ.
    """
    if isinstance(state, PhysicalState):
        phys, as_array = state, False
    elif isinstance(state, np.ndarray):
        if state.ndim != 1 or state.size < 2 or state.size & (state.size - 1):
            raise ValueError(f"state must be 1-D with a power-of-two length >= 2, got shape {state.shape}")
        phys, as_array = PhysicalState(state, gemm.resolve_device("cpu")), True
    else:
        raise TypeError(f"state must be a PhysicalState or a numpy array, got {type(state).__name__}")
    if phys.data.dtype not in (np.complex64, np.complex128):
        raise TypeError(f"state dtype must be complex64 or complex128, got {phys.data.dtype}")
    if not isinstance(phys.data, np.ndarray):
        raise TypeError("run_stages runs on the CPU; the state is not a numpy array")
    if phys.n_qubits != plan.n_qubits:
        raise ValueError(f"the plan is for {plan.n_qubits} qubits, the state has {phys.n_qubits}")
    n, item = plan.n_qubits, phys.data.dtype.itemsize
    k = min(n, max(plan.local_qubits, int(max(block_bytes // item, 1)).bit_length() - 1))
    n_threads = _THREADS if threads is None else max(1, int(threads))
    pool = ThreadPoolExecutor(n_threads) if n_threads > 1 and n > k else None
    try:
        for stage in plan.stages:
            _bring_layout(phys, stage.layout)
            _run_stage(phys.data, n, k, stage, pool)
            phys.layout.set(list(stage.end_layout))  # the stage's relabels moved no amplitude
    finally:
        if pool is not None:
            pool.shutdown()
    if plan.global_phase:
        phys.data *= phys.data.dtype.type(np.exp(1j * plan.global_phase))
    if as_array:
        phys.canonicalize()
        return phys.data
    return phys


def _bring_layout(phys: PhysicalState, layout) -> None:
    """Permute the data so that physical bit p holds logical qubit ``layout[p]`` (one pass)."""
    if list(layout) == phys.layout.phys:
        return
    n = phys.n_qubits
    new = permute_bits(phys.data, n, list(layout), phys.layout.phys, np, out=phys.spare)
    phys.spare = phys.data
    phys.data = new
    phys.layout = Layout(n)
    phys.layout.set(list(layout))


# --- one stage ------------------------------------------------------------------------------


@dataclass
class _Op:
    """A gate compiled for blocks of K bits: its kind, block bits, high bits and matrices."""

    kind: str  # "diagonal", "controlled" or "dense"
    bits: tuple[int, ...]  # diagonal: its block bits (ascending); else the target bits (matrix order)
    high: tuple[int, ...] = ()  # bits >= K: diagonal bits, or controls that must be 1
    controls: tuple[int, ...] = ()  # controls inside the block
    matrix: np.ndarray | None = None  # dense target matrix (row = output)
    table: np.ndarray | None = None  # diagonal: (2^len(high), 2^len(bits)) entries


def _run_stage(data: np.ndarray, n: int, k: int, stage: Stage, pool) -> None:
    ops = _compile(stage, k, data.dtype)
    if not ops:
        return
    blocks = data.reshape(1 << (n - k), 1 << k)
    local = threading.local()

    def work(b: int) -> None:
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = np.empty((2, 1 << k), dtype=data.dtype)
        _apply_block(blocks[b], b, k, ops, scratch)

    if pool is None:
        for b in range(blocks.shape[0]):
            work(b)
    else:
        list(pool.map(work, range(blocks.shape[0])))


def _compile(stage: Stage, k: int, dtype) -> list[_Op]:
    """The stage's ops as block ops, consecutive diagonals merged."""
    out: list[_Op] = []
    pending: list[tuple[tuple[int, ...], np.ndarray]] = []  # diagonal (positions, diag) to merge
    pending_bits: set[int] = set()

    def flush():
        if pending:
            out.append(_merged_diagonal(pending, k, dtype))
            pending.clear()
            pending_bits.clear()

    for op in stage.ops:
        s = op.structure
        if op.kind == RELABEL:
            continue
        if op.kind == DIAGONAL:
            if len(pending_bits | set(op.positions)) > _MAX_MERGED_BITS:
                flush()
            pending.append((op.positions, s.diagonal))
            pending_bits.update(op.positions)
            continue
        flush()
        if op.kind == CONTROLLED:
            ctl = [op.positions[b] for b in s.controls]
            tgt = tuple(op.positions[b] for b in s.targets)
            out.append(_Op("controlled", tgt, high=tuple(c for c in ctl if c >= k),
                           controls=tuple(c for c in ctl if c < k), matrix=s.target_matrix.astype(dtype)))
        else:
            out.append(_Op("dense", op.positions, matrix=s.target_matrix.astype(dtype)))
    flush()
    return out


def _merged_diagonal(pending, k: int, dtype) -> _Op:
    """One diagonal over the union of the gates' bits, split into block bits and high bits."""
    bits = sorted({p for pos, _ in pending for p in pos})
    where = {p: i for i, p in enumerate(bits)}
    idx = np.arange(1 << len(bits))
    diag = np.ones(1 << len(bits), dtype=np.complex128)
    for pos, d in pending:
        sub = np.zeros_like(idx)
        for j, p in enumerate(pos):
            sub |= ((idx >> where[p]) & 1) << j
        diag *= d[sub]
    low = [p for p in bits if p < k]
    high = [p for p in bits if p >= k]
    # reorder so that the high bits index the rows: index = high_value * 2^len(low) + low_value
    order = [where[p] for p in low] + [where[p] for p in high]
    table = diag[_gather(idx, order)].reshape(1 << len(high), 1 << len(low)).astype(dtype)
    return _Op("diagonal", tuple(low), high=tuple(high), table=table)


def _gather(idx: np.ndarray, order) -> np.ndarray:
    """For each new index, the old index whose bit ``order[j]`` is the new index's bit j."""
    out = np.zeros_like(idx)
    for j, src in enumerate(order):
        out |= ((idx >> j) & 1) << src
    return out


# --- one block --------------------------------------------------------------------------------


def _apply_block(x: np.ndarray, b: int, k: int, ops: list[_Op], scratch: np.ndarray) -> None:
    """All ops of a stage on block ``b`` (``x``: its 2^K amplitudes, a contiguous view)."""
    for op in ops:
        if op.high:
            hv = 0
            for j, p in enumerate(op.high):
                hv |= ((b >> (p - k)) & 1) << j
            if op.kind == "controlled" and hv != (1 << len(op.high)) - 1:
                continue  # a high control is 0 in this whole block
        else:
            hv = 0
        if op.kind == "diagonal":
            _diagonal(x, k, op.bits, op.table[hv])
        else:
            _dense(x, k, op.bits, op.controls, op.matrix, scratch)


def _runs(k: int, special) -> tuple[list[int], dict[int, int]]:
    """A C-order shape of a 2^k array with an axis of 2 for each special bit and one axis per
    run of other bits; and the axis of each special bit."""
    shape: list[int] = []
    axis: dict[int, int] = {}
    run = 0
    for p in range(k - 1, -1, -1):
        if p in special:
            if run:
                shape.append(1 << run)
                run = 0
            axis[p] = len(shape)
            shape.append(2)
        else:
            run += 1
    if run:
        shape.append(1 << run)
    return shape, axis


def _diagonal(x: np.ndarray, k: int, bits, entries: np.ndarray) -> None:
    """Multiply by a diagonal over block ``bits`` (ascending; ``entries`` indexed little-endian)."""
    if not bits:
        x *= entries[0]
        return
    shape, axis = _runs(k, set(bits))
    # entries as a broadcastable tensor: axis of bit p is 2, others 1
    d = len(bits)
    t = entries.reshape([2] * d)  # C order: axis i is bit d-1-i of the entries index
    perm = sorted(range(d), key=lambda i: axis[bits[d - 1 - i]])
    bshape = [1] * len(shape)
    for p in bits:
        bshape[axis[p]] = 2
    x.reshape(shape)[...] *= t.transpose(perm).reshape(bshape)


def _dense(x: np.ndarray, k: int, targets, controls, m: np.ndarray, scratch: np.ndarray) -> None:
    """Apply matrix ``m`` (bit i = ``targets[i]``) to block ``x``, where ``controls`` are all 1."""
    d = len(targets)
    order = sorted(range(d), key=lambda i: targets[i])
    tsorted = [targets[i] for i in order]
    if not controls and d >= 2 and tsorted[-1] - tsorted[0] == d - 1 and (tsorted[0] == 0 or tsorted[0] >= 3):
        # one run of bits [p, p+d): a matrix product, as the GEMM path does (for one qubit, or
        # 2-4 amplitudes between rows, BLAS calls are too small and the slice sums are faster)
        m = reorder_bits(m, order)
        p = tsorted[0]
        if p == 0:
            out = scratch[0].reshape(-1, 1 << d)
            np.matmul(x.reshape(-1, 1 << d), m.T, out=out)
        else:
            out = scratch[0].reshape(-1, 1 << d, 1 << p)
            np.matmul(m, x.reshape(-1, 1 << d, 1 << p), out=out)
        x[...] = scratch[0]
        return
    if not controls and d >= 3:
        # scattered targets: gather them to the low bits (a copy in cache), one matrix product,
        # scatter back; cheaper than 4^d slice products from d = 3 on
        shape, axis = _runs(k, set(targets))
        v = x.reshape(shape)
        tax = [axis[targets[i]] for i in reversed(range(d))]  # C order: matrix bit d-1 first
        perm = [a for a in range(len(shape)) if a not in tax] + tax
        tshape = [shape[a] for a in perm]
        y = scratch[0].reshape(tshape)
        np.copyto(y, v.transpose(perm))
        z = scratch[1].reshape(-1, 1 << d)
        np.matmul(y.reshape(-1, 1 << d), m.T, out=z)
        np.copyto(v.transpose(perm), z.reshape(tshape))
        return
    shape, axis = _runs(k, set(targets) | set(controls))
    v = x.reshape(shape)
    base = [slice(None)] * len(shape)
    for c in controls:
        base[axis[c]] = 1
    slices = []
    for j in range(1 << d):
        s = list(base)
        for i, t in enumerate(targets):
            s[axis[t]] = (j >> i) & 1
        slices.append((*s, ...))  # the Ellipsis keeps a view even when every axis is indexed
    ins = [v[s].copy() for s in slices]
    for r, s in enumerate(slices):
        o = v[s]
        np.multiply(ins[0], m[r, 0], out=o)
        for c in range(1, 1 << d):
            if m[r, c] != 0:
                o += m[r, c] * ins[c]
