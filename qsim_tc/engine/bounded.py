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
* anything else: one pass of disjoint bit exchanges in place (:mod:`~qsim_tc.engine.swap`)
  first brings the targets into a window where one of the products above needs no swap. When
  the next gate's targets are known the same pass also puts them where this product leaves
  them in a window of their own (after a rotation: at the bottom), so that gate needs no pass;
  the windows are chosen by the passes over the state that each choice costs
  (:func:`plan_bounded`).

Failure: the blocks already written back cannot be restored (keeping them would cost the
memory this engine saves, and undoing them with U^dagger is not exact), so a failure after the
first write marks the state invalid and raises :class:`~qsim_tc.errors.StateInvalidError`
naming the gate. A failure before any write (the first block's product, a swap pass that
never started) leaves a valid state: the layout is updated after each completed swap pass.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

import gemm
from qsim_tc import memory
from qsim_tc.engine.swap import SwapInterrupted, apply_pairs, pairs_between, swap_bits
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
        path: "bottom", "bottom-rotate", "top", "batched", or after a swap pass "permute+bottom",
            "permute+rotate", "permute+top" or "permute+batched".
        order: the targets' indices sorted by physical bit after the swaps (the matrix's bit order).
        pairs: disjoint (p, q) bit pairs exchanged in place before the product (may be empty).
        t: the lowest target bit after the swaps (0: row blocks; above 0: column blocks).
        rotate: the per-block product is ``U @ B^T``.
    """

    path: str
    order: list
    pairs: tuple = ()
    t: int = 0
    rotate: bool = False


@dataclass(frozen=True)
class _Geometry:
    """What the planner knows of the products on one device: the windows [t, t+d) of physical
    bits where a product needs no swap (the bottom, the top, a middle block the batched product
    serves: apply.py's MIN_BATCHED_L and MAX_BATCHES) and the blocks they run on."""

    n_qubits: int
    device_name: str
    min_batched_l: int
    max_batches: int

    def fits(self, t: int, d: int) -> bool:
        n = self.n_qubits
        return t == 0 or t + d == n or ((1 << t) >= self.min_batched_l and (1 << (n - t - d)) <= self.max_batches)

    def starts(self, d: int) -> list:
        """The lowest bits of the windows of a d-qubit gate, bottom first."""
        return [t for t in range(self.n_qubits - d + 1) if self.fits(t, d)]

    def copy_cost(self, t: int, d: int) -> int:
        """Passes over the state that the product on window [t, t+d) adds: 1 where the GPU runs
        it on column blocks (a slab larger than a block), each copied to a contiguous buffer."""
        if t == 0 or self.device_name != "gpu":
            return 0
        return int(t + d > _block_bits(self.n_qubits, d, self.device_name, 2))

    def moves(self, d: int, rotate: bool) -> tuple:
        """Where the product of a d-qubit gate leaves the bits, as (after, to): ``after[p]`` is
        the bit whose qubit bit p holds after it, ``to[b]`` the bit that bit b's qubit goes to
        (the identity, or the rotating product's move)."""
        return _moves(self.n_qubits, d, _block_bits(self.n_qubits, d, self.device_name, 1) - d if rotate else None)


@functools.lru_cache(maxsize=None)
def _block_bits(n_qubits: int, d: int, device_name: str, copies: int) -> int:
    """log2 of the block that the planner assumes: the native method's from the default workspace.

    The engine takes the state's own (another workspace or method may give another block) and
    records the layout it makes, so a wrong guess costs a later swap pass, never a wrong state.
    """
    dtype = np.complex128
    elems, _ = memory.gate_block(gemm.get_method("native"), n_qubits, d, dtype, {}, device=device_name,
                                 limit=memory.workspace_limit(n_qubits, dtype), copies=copies)
    return elems.bit_length() - 1


@functools.lru_cache(maxsize=None)
def _moves(n_qubits: int, d: int, row_bits: int | None) -> tuple:
    """:meth:`_Geometry.moves` for blocks of 2^row_bits rows (None: no rotation), computed once."""
    after = tuple(range(n_qubits)) if row_bits is None else tuple(rotated(list(range(n_qubits)), d, row_bits))
    to = [0] * n_qubits
    for p, b in enumerate(after):
        to[b] = p
    return after, tuple(to)


def plan_bounded(layout, qubits, n_qubits: int, device_name: str, min_batched_l: int, max_batches: int,
                 next_qubits=None) -> BoundedPlan:
    """Decide how to apply a gate on logical ``qubits`` with the bounded workspace.

    Targets in a window where a product needs no swap (bottom, top, a batched middle block) are
    used there, unless a swap pass now saves more than it costs (:func:`_cost`). Otherwise one
    swap pass brings them into such a window; where the next gate's targets are known, the
    window and the pass are chosen so that the same pass also puts them where that gate needs
    no pass of its own (:func:`_swap_options`).

    Args:
        layout: the state's :class:`~qsim_tc.layout.Layout`.
        qubits: the logical targets. n_qubits: the state's width. device_name: "cpu" or "gpu".
        min_batched_l, max_batches: the batched path's limits on this device (see apply.py).
        next_qubits: the next gate's targets, if known.

    Returns:
        BoundedPlan.
    """
    d = len(qubits)
    geometry = _Geometry(n_qubits, device_name, min_batched_l, max_batches)
    rotate = d < n_qubits and d in BLOCK_ROTATE_D[device_name]
    nxt = frozenset(next_qubits or ())
    pos = sorted(layout.pos[q] for q in qubits)
    best = None
    if pos[-1] - pos[0] == d - 1 and geometry.fits(pos[0], d):
        best = _cost(geometry, layout, d, nxt, (), pos[0], rotate), (), pos[0]
        if best[0][0] < 2:  # a swap pass costs a pass: it can only pay where it saves two
            return _plan_at(layout.phys, qubits, (), pos[0], rotate)
    for pairs, t in _swap_options(layout, qubits, nxt, geometry, rotate):
        key = _cost(geometry, layout, d, nxt, pairs, t, rotate)
        if best is None or key < best[0]:
            best = key, pairs, t
    return _plan_at(layout.phys, qubits, best[1], best[2], rotate)


def _plan_at(phys, qubits, pairs, t: int, rotate_d: bool) -> BoundedPlan:
    """The plan for targets in window [t, t+d) after exchanging ``pairs``."""
    n, d = len(phys), len(qubits)
    where = {q: p for p, q in enumerate(apply_pairs(phys, pairs))}
    order = sorted(range(d), key=lambda i: where[qubits[i]])
    rotate = rotate_d and t == 0
    path = "bottom-rotate" if rotate else "bottom" if t == 0 else "top" if t + d == n else "batched"
    if pairs:
        path = "permute+" + ("rotate" if rotate else path)
    return BoundedPlan(path, order, tuple(pairs), t, rotate)


def _cost(geometry: _Geometry, layout, d: int, nxt, pairs, t: int, rotate_d: bool) -> tuple:
    """How good it is to exchange ``pairs`` and apply a d-qubit gate on window [t, t+d): a key,
    lower is better.

    First the passes over the state that it costs with the next gate: this swap pass, the
    contiguous copies of column blocks (:meth:`_Geometry.copy_cost`) of this gate and the next,
    and the next gate's own swap pass where the product leaves its targets outside every window.
    With no next gate known the state may be read next: then the passes that take it to logical
    order (in place: one or two). Then fewer pairs, none best (bits left where they are keep the
    order that earlier gates found convenient, as a brickwork's repeated layers do), then the
    lower window for this gate (the bottom rotates where cuBLAS prefers it) and for the next.
    """
    n = geometry.n_qubits
    after, to = geometry.moves(d, rotate_d and t == 0)
    cost = (1 if pairs else 0) + geometry.copy_cost(t, d)
    w, read = n, 0
    if nxt:
        partner = {p: q for pq in pairs for p, q in (pq, pq[::-1])}
        pos = sorted(to[partner.get(layout.pos[q], layout.pos[q])] for q in nxt)
        if pos[-1] - pos[0] == len(pos) - 1 and geometry.fits(pos[0], len(pos)):
            w = pos[0]
            cost += geometry.copy_cost(w, len(pos))
        else:
            cost += 1
    else:
        swapped = apply_pairs(layout.phys, pairs)
        read = len(pairs_between([swapped[b] for b in after], range(n)))
    return cost, read, len(pairs), t, w


def _swap_options(layout, qubits, nxt, geometry: _Geometry, rotate_d: bool):
    """The swap passes (pairs, t) that bring the targets into a window [t, t+d): for every
    window, the one that moves the targets only, and the ones that also put the next gate's
    targets where the product leaves them in one of its windows. A pass realizes an assignment
    of qubits to bits only when it is a set of exchanges (:func:`_exchanges`), so the two
    windows are chosen together."""
    d, k = len(qubits), len(nxt)
    targets = frozenset(qubits)
    for t in geometry.starts(d):
        here = frozenset(range(t, t + d))
        yield _exchanges(layout, [(targets, here)]), t
        after = geometry.moves(d, rotate_d and t == 0)[0]
        for w in geometry.starts(k) if k else ():
            groups = _with_next(targets, here, nxt, frozenset(after[w:w + k]))
            pairs = _exchanges(layout, groups) if groups else None
            if pairs is not None:
                yield pairs, t


def _with_next(targets, here, nxt, there) -> list | None:
    """The qubit groups and the bits each must occupy before the product so that this gate's
    targets are on bits ``here`` and the next gate's on bits ``there`` (the bits that the
    product moves to the next gate's window); None when the sizes do not match."""
    groups = [(targets & nxt, here & there), (targets - nxt, here - there), (nxt - targets, there - here)]
    return None if any(len(qs) != len(ps) for qs, ps in groups) else [g for g in groups if g[0]]


def _exchanges(layout, groups) -> list | None:
    """Disjoint bit pairs that move every group's qubits onto its bits in one pass, or None.

    Args:
        layout: the :class:`~qsim_tc.layout.Layout`.
        groups: (qubits, bits) of equal sizes, disjoint; the other qubits form one more group on
            the other bits.

    One pass exchanges bits pairwise: a qubit away from its group's bits moves only by trading
    places with one that wants its bit. So the pass exists iff for every two groups as many
    qubits of the first sit on the second's bits as the other way round; it pairs them in
    ascending order of bit on both sides.
    """
    home = {}  # bit -> its group (the other bits: -1)
    group_of = {}
    for g, (qs, ps) in enumerate(groups):
        home.update(dict.fromkeys(ps, g))
        group_of.update(dict.fromkeys(qs, g))
    away = {}  # (group of the qubit, group of the bit it sits on) -> bits; only these qubits move
    for q, g in group_of.items():
        p = layout.pos[q]
        if home.get(p, -1) != g:
            away.setdefault((g, home.get(p, -1)), []).append(p)
    for p, g in home.items():
        if layout.phys[p] not in group_of:
            away.setdefault((-1, g), []).append(p)
    pairs = []
    for (a, b), ps in away.items():
        qs = away.get((b, a), ())
        if len(qs) != len(ps):
            return None
        if a < b:
            pairs += [(min(p, q), max(p, q)) for p, q in zip(sorted(ps), sorted(qs))]
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
        (report, blocks, choices): the gemm.Report of the last block's product, the number of
        blocks, and the distinct ``Report.choices`` of every block's product (methods that decide
        per product, such as int8-auto's slices, may decide differently per block; the error
        bound takes each).

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
    column_blocks = plan.t > 0  # top or middle: U @ S[h]
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
    if column_blocks:
        report = _columns(runner, data, u, n, d, plan.t, elems, xp, dev)
    else:
        report = _rows(runner, data, u, dim, elems, plan.rotate)
        if plan.rotate:
            state.layout.set(rotated(state.layout.phys, d, (elems // dim).bit_length() - 1))
    return report, runner.blocks, tuple(runner.choices.values())


def rotated(phys, d: int, row_bits: int) -> list:
    """The layout after the rotating product on blocks of 2^row_bits rows: inside each block the
    d target bits move above the row bits, which move down by d; the bits above stay."""
    return phys[d:d + row_bits] + phys[:d] + phys[d + row_bits:]


class _Blocks:
    """Runs block products and their copies back; turns a failure after the first write into an
    invalid state."""

    def __init__(self, state, method, options, work, takes_out, what):
        self.state, self.method, self.options = state, method, options
        self.work, self.takes_out, self.what = work, takes_out, what
        self.blocks = 0  # blocks written back
        self.report = None
        self.choices: dict[str, dict] = {}  # the distinct choices of the products, by their repr

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
        self.choices.setdefault(repr(self.report.choices), self.report.choices)
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
