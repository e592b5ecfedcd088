"""One gate through a bounded workspace: products on blocks written back in place, swaps in place.

The state is never copied whole. With the targets on physical bits [t, t+d):

* bottom (t = 0): the state is (M, 2^d) and ``S @ U^T`` on a block of rows depends on those rows
  only, so each block's product goes into the workspace and is copied back over its rows
  before the next block is read.
* bottom, rotating (the GPU, d in ``BLOCK_ROTATE_D``): ``U @ B^T`` per block of 2^r rows, the
  orientation cuBLAS runs faster. Its (2^d, 2^r) result is copied back as it is, so inside every
  block the targets move above the block's row bits: a rotation of the low d + r bits that the
  lazy layout records (the copy back stays one contiguous copy).
* top / batched (the state is (H, 2^d, L), ``U @ S[h]``): whole slabs h when they fit a block
  (contiguous), else column blocks of one slab (on the GPU first copied to a contiguous buffer,
  since the cuBLAS call takes contiguous operands); each written back before the next.
* anything else: the targets are first swapped into the bottom bits in place (one pass of
  disjoint bit exchanges, :mod:`~qsim_tc.engine.swap`), with the next gate's targets moved to
  the top in the same pass when they are known, then the bottom path.

Failure: the blocks already written back cannot be restored (keeping them would cost the
memory this engine saves, and undoing them with U^dagger is not exact), so a failure after the
first write marks the state invalid and raises :class:`~qsim_tc.errors.StateInvalidError`
naming the gate. A failure before any write (the first block's product, a swap pass that
never started) leaves a valid state: the layout is updated after each completed swap pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import gemm
from qsim_tc import memory
from qsim_tc.engine.swap import SwapInterrupted, apply_pairs, swap_bits
from qsim_tc.memory import SWAP_THREADS, swap_chunk_elements

# Sizes that take the rotating orientation per block. The GPU: the sizes where cuBLAS runs
# U @ S^T faster than S @ U^T (see apply.ROTATE_D). The CPU: none, since BLAS costs the same in
# both orientations there and the rotation's other use (a brickwork layer arriving at the bottom
# with no permutation) needs the whole-state rotation that a bounded workspace cannot hold.
BLOCK_ROTATE_D = {"cpu": frozenset(), "gpu": frozenset({4, 5, 6, 9, 10, 12})}


@dataclass(frozen=True)
class BoundedPlan:
    """How one gate is applied through the bounded workspace.

    Attributes:
        path: "bottom", "bottom-rotate", "top", "batched", "permute+bottom" or "permute+rotate".
        order: the targets' indices sorted by physical bit after the swaps (the matrix's bit order).
        pairs: disjoint (p, q) bit pairs exchanged in place before the product (may be empty).
        t: the lowest target bit after the swaps.
        rotate: the per-block product is ``U @ B^T``.
    """

    path: str
    order: list
    pairs: tuple = ()
    t: int = 0
    rotate: bool = False


def plan_bounded(layout, qubits, n_qubits: int, device_name: str, min_batched_l: int, max_batches: int,
                 next_qubits=None) -> BoundedPlan:
    """Decide how to apply a gate on logical ``qubits`` with the bounded workspace.

    Args:
        layout: the state's :class:`~qsim_tc.layout.Layout`.
        qubits: the logical targets. n_qubits: the state's width. device_name: "cpu" or "gpu".
        min_batched_l, max_batches: the batched path's limits on this device (see apply.py).
        next_qubits: the next gate's targets, if known: moved to the top bits in the same swap pass.

    Returns:
        BoundedPlan.
    """
    d = len(qubits)
    pos = [layout.pos[q] for q in qubits]
    sorted_pos = sorted(pos)
    rotate = d < n_qubits and d in BLOCK_ROTATE_D[device_name]
    t = sorted_pos[0]
    if sorted_pos[-1] - t == d - 1:  # contiguous
        order = sorted(range(d), key=lambda i: pos[i])
        if t == 0:
            return BoundedPlan("bottom-rotate" if rotate else "bottom", order, rotate=rotate)
        if t + d == n_qubits:
            return BoundedPlan("top", order, t=t)
        if (1 << t) >= min_batched_l and (1 << (n_qubits - t - d)) <= max_batches:
            return BoundedPlan("batched", order, t=t)
    pairs = _zone_pairs(pos, range(d), set())
    nxt = [q for q in (next_qubits or ()) if q not in qubits]
    if nxt and len(nxt) == len(next_qubits) and len(nxt) + d <= n_qubits:
        # the next gate's targets to the top bits, where it needs no swap of its own
        used = {b for pq in pairs for b in pq}
        after = apply_pairs(layout.phys, pairs)
        where = {q: p for p, q in enumerate(after)}
        pairs += _zone_pairs([where[q] for q in nxt], range(n_qubits - len(nxt), n_qubits), used | set(range(d)))
    after = apply_pairs(layout.phys, pairs)
    where = {q: p for p, q in enumerate(after)}
    order = sorted(range(d), key=lambda i: where[qubits[i]])
    return BoundedPlan("permute+rotate" if rotate else "permute+bottom", order, tuple(pairs), 0, rotate)


def _zone_pairs(positions, zone, blocked: set) -> list:
    """Disjoint pairs that move the bits ``positions`` into ``zone``: those inside stay, each
    other one is exchanged with a zone bit that holds none of them. Bits in ``blocked`` are
    not touched (a position there is left where it is)."""
    zone = list(zone)
    inside = set(positions) & set(zone)
    free = [z for z in zone if z not in inside and z not in blocked]
    pairs = []
    for p in sorted(positions):
        if p in inside or p in blocked or not free:
            continue
        z = free.pop(0)
        pairs.append((min(p, z), max(p, z)))
    return pairs


def apply_bounded(state, gate, plan: BoundedPlan, u_host: np.ndarray):
    """Apply the gate of ``plan`` to ``state`` in place through its bounded workspace.

    Args:
        state: the :class:`~qsim_tc.engine.storage.PhysicalState` (data changed in place, layout
            updated).
        gate: the :class:`~qsim_tc.engine.apply.GateRequest`.
        plan: from :func:`plan_bounded`.
        u_host: the gate matrix in the state's dtype, bits in ``plan.order``.

    Returns:
        (report, blocks): the gemm.Report of the last block's product and the number of blocks.

    Raises:
        InsufficientMemoryError: the workspace cannot be allocated (the state is unchanged).
        StateInvalidError: a failure after part of the state was overwritten (the state is
            marked invalid).
        Whatever the GEMM method raises before anything was written back (the state is valid,
            possibly with its bits swapped: the layout says so).
    """
    from qsim_tc.transfer import to_device  # noqa: PLC0415

    xp, n, method = state.xp, state.n_qubits, gate.method
    data = state.data
    d = len(gate.qubits)
    dim = 1 << d
    dev = state.device.name
    column_blocks = plan.path in ("top", "batched")
    copies = 2 if (column_blocks and dev == "gpu") else 1
    elems, need = memory.gate_block(method, n, d, data.dtype, gate.options, device=dev, limit=state.workspace_limit,
                                    copies=copies, explicit=state.workspace_explicit)
    takes_out = "out" in method.options
    buf_elems = (elems if takes_out else 0) + (elems if copies == 2 else 0)
    item = data.dtype.itemsize
    other = need - buf_elems * item  # the method's own workspace (and output, if it allocates it)
    # one buffer serves the swap's temporaries (CPU) and then the blocks' output / input copies;
    # the swap's share leaves room for the method's workspace, which comes after it
    chunk = swap_chunk_elements(max(0, state.workspace_limit - other), item)
    swap_elems = chunk * SWAP_THREADS if plan.pairs and dev == "cpu" else 0
    have = 0 if state.work is None else int(state.work.size)
    grow = max(0, max(buf_elems, swap_elems) - have) * item
    memory.check_fits(f"applying a {d}-qubit gate with {method.name!r}", grow + other, state.device)
    if max(buf_elems, swap_elems):
        state.workspace(max(buf_elems, swap_elems))
    what = f"the {d}-qubit gate on qubits {list(gate.qubits)} with {method.name!r}"
    if plan.pairs:
        try:
            swap_bits(data, n, plan.pairs, xp, chunk_elements=chunk, scratch=state.work)
        except SwapInterrupted as exc:
            state.mark_invalid(f"{what} failed while swapping index bits {list(plan.pairs)} ({exc.__cause__!r})", exc)
        state.layout.set(apply_pairs(state.layout.phys, plan.pairs))
    if state.work is not None and state.work.size > buf_elems and state.work.nbytes + other > state.workspace_limit:
        # the swap's larger buffer would sit beside the method's own workspace: release it
        state.work = None
    work = state.workspace(buf_elems) if buf_elems else None
    u = to_device(np.ascontiguousarray(u_host), xp)
    kw = {k: v for k, v in gate.options.items() if k != "out"}
    runner = _Blocks(state, method, kw, work, takes_out, what)
    if plan.path in ("top", "batched"):
        report = _columns(runner, data, u, n, d, plan.t, elems, xp, dev)
    else:
        report = _rows(runner, data, u, dim, elems, plan.rotate)
        if plan.rotate:
            r = (elems // dim).bit_length() - 1
            phys = state.layout.phys
            state.layout.set(phys[d:d + r] + phys[:d] + phys[d + r:])
    return report, runner.blocks


class _Blocks:
    """Runs block products and their copies back; turns a failure after the first write into an
    invalid state."""

    def __init__(self, state, method, options, work, takes_out, what):
        self.state, self.method, self.options = state, method, options
        self.work, self.takes_out, self.what = work, takes_out, what
        self.blocks = 0  # blocks written back
        self.report = None

    def product(self, a, b, out_shape):
        """``a @ b`` into the workspace (or the method's own output)."""
        kw = dict(self.options)
        if self.takes_out:
            size = int(np.prod(out_shape))
            kw["out"] = self.work[:size].reshape(out_shape)
        try:
            c, self.report = gemm.matmul(a, b, method=self.method.name, return_report=True, **kw)
        except BaseException as exc:
            self.fail(exc)
            raise
        return c

    def write(self, dst, src) -> None:
        """Copy a block's product over its input; after it the block counts as written."""
        try:
            _copy(dst, src, self.state.xp)
        except BaseException as exc:
            self.blocks += 1  # part of this block may be written
            self.fail(exc)
            raise
        self.blocks += 1

    def fail(self, exc: BaseException) -> None:
        if self.blocks:
            self.state.mark_invalid(f"{self.what} failed after {self.blocks} block(s) of the state had been "
                                    f"overwritten ({exc!r})", exc)


def _copy(dst, src, xp) -> None:
    if src.dtype != dst.dtype:
        src = src.astype(dst.dtype)
    if xp is not np and dst.flags.c_contiguous and src.flags.c_contiguous:
        # a device-to-device memcpy on the current stream: the copy engine's rate, no kernel
        dst.data.copy_from_device_async(src.data, dst.nbytes, xp.cuda.get_current_stream())
        return
    xp.copyto(dst, src.reshape(dst.shape))


def _rows(runner: _Blocks, data, u, dim: int, elems: int, rotate: bool):
    """Bottom path: blocks of rows of the (M, 2^d) state."""
    s2 = data.reshape(-1, dim)
    rows = elems // dim
    ut = u.T
    for r0 in range(0, s2.shape[0], rows):
        blk = s2[r0:r0 + rows]
        if rotate:
            out = runner.product(u, blk.T, (dim, blk.shape[0]))
        else:
            out = runner.product(blk, ut, (blk.shape[0], dim))
        runner.write(blk.reshape(-1), out.reshape(-1))
    return runner.report


def _columns(runner: _Blocks, data, u, n: int, d: int, t: int, elems: int, xp, dev: str):
    """Top and batched paths: ``U @ S[h]`` on whole slabs, or on column blocks of one slab."""
    dim, width = 1 << d, 1 << t
    h_count = 1 << (n - t - d)
    s3 = data.reshape(h_count, dim, width)
    slab = dim * width
    if elems >= slab:
        hs = elems // slab
        for h0 in range(0, h_count, hs):
            blk = s3[h0:h0 + hs]
            if blk.shape[0] == 1:  # one slab: the plain 2-D product, as the top path always was
                out = runner.product(u, blk[0], (dim, width))
            else:
                out = runner.product(u, blk, (blk.shape[0], dim, width))
            runner.write(blk.reshape(-1), out.reshape(-1))
        return runner.report
    cols = elems // dim
    gpu = dev == "gpu"
    for h in range(h_count):
        for c0 in range(0, width, cols):
            blk = s3[h, :, c0:c0 + cols]  # (2^d, cols), rows `width` apart
            src = blk
            if gpu:
                # a contiguous copy for the cuBLAS call; it sits after the output in the workspace
                base = elems if runner.takes_out else 0
                src = runner.work[base:base + dim * cols].reshape(dim, cols)
                try:
                    xp.copyto(src, blk)
                except BaseException as exc:
                    runner.fail(exc)
                    raise
            out = runner.product(u, src, (dim, cols))
            runner.write(blk, out.reshape(dim, cols))
    return runner.report
