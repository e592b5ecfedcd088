"""Gate fusion: merge gates into blocks of at most d qubits, one matrix per block.

Greedy, in one pass over the gates, on the dependency graph of blocks (an edge joins two blocks
that touch a qubit in turn). Each qubit remembers the last block on it. A gate joins the last
blocks of its qubits (all of them, else the one giving the widest block that fits) when the
union has at most d qubits and the merged set is convex: no path leaves one of the merged
blocks and comes back into the set, or into a block the gate depends on, through another
block. A convex merge keeps the graph acyclic, so the blocks are emitted in a topological order
(earliest first gate first). Otherwise the gate starts a new block. Gates wider than d stay as
they are.

A block's matrix is the product of its gates, each expanded to the block's qubits (sorted
ascending; the first listed qubit is the low bit of the matrix index, as in ``circuits.Gate``).

The choice of d (``choose_size``) takes the cost of one gate of each width as a function (the
simulator passes its measured cost model, :mod:`qsim_tc.plan`): it plans the fusion for every
candidate d (cheap: qubit sets only) and keeps the d whose blocks cost least in total.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.gate import Gate

MAX_FUSE_QUBITS = 14  # a 2^14 x 2^14 complex128 matrix is 4 GiB: beyond this fusion makes no sense
_SEARCH_LIMIT = 256  # blocks visited by one convexity check before giving up (and not merging)


@dataclass
class Block:
    """A fused block: the indices of its gates (in a valid order) and its qubits."""

    gates: list[int]
    qubits: set[int]
    preds: set[int] = field(default_factory=set, repr=False)
    succs: set[int] = field(default_factory=set, repr=False)


def plan(circuit: Circuit, max_qubits: int) -> list[Block]:
    """The blocks greedy fusion makes of ``circuit`` with at most ``max_qubits`` qubits each.

    Only the qubit sets are looked at (no matrices), so this is fast enough to try several d.
    Returns the blocks in an order in which they can be applied.
    """
    d = _check_max_qubits(max_qubits)
    blocks: dict[int, Block] = {}
    last: dict[int, int] = {}  # qubit -> id of the last block touching it
    for gi, g in enumerate(circuit.gates):
        qs = g.qubits
        deps = {last[q] for q in qs if q in last}
        members = _members(blocks, deps, qs, d) if len(qs) <= d and deps else None
        if members is None:
            bid = gi  # gate indices are unique ids
            blocks[bid] = Block([gi], set(qs), set(deps))
            for c in deps:
                blocks[c].succs.add(bid)
            for q in qs:
                last[q] = bid
            continue
        _merge(blocks, last, members, deps, gi, qs)
    return _topological(blocks)


def _members(blocks, deps: set, qs, d: int):
    """The set of blocks the gate joins, or None."""
    union = set(qs)
    for c in deps:
        union |= blocks[c].qubits
    if len(union) <= d and _convex(blocks, deps, deps):
        return set(deps)
    if len(deps) == 1:
        return None
    for c in sorted(deps, key=lambda b: (-len(blocks[b].qubits | set(qs)), -b)):
        if len(blocks[c].qubits | set(qs)) <= d and _convex(blocks, {c}, deps):
            return {c}
    return None


def _convex(blocks, members: set, deps: set) -> bool:
    """No path from a member through a non-member back into the members or into ``deps``."""
    targets = deps - members
    stack = [x for m in members for x in blocks[m].succs if x not in members]
    seen = set()
    while stack:
        x = stack.pop()
        if x in targets:
            return False
        if x in seen:
            continue
        seen.add(x)
        if len(seen) > _SEARCH_LIMIT:
            return False
        for y in blocks[x].succs:
            if y in members or y in targets:
                return False
            stack.append(y)
    return True


def _merge(blocks, last, members: set, deps: set, gi: int, qs) -> None:
    host = min(members)
    hb = blocks[host]
    gates, qubits = [], set(qs)
    preds, succs = set(), set()
    for m in members:
        b = blocks[m]
        gates.extend(b.gates)
        qubits |= b.qubits
        preds |= b.preds
        succs |= b.succs
    preds = (preds | deps) - members
    succs -= members
    for m in members:
        if m == host:
            continue
        b = blocks.pop(m)
        for p in b.preds:
            if p not in members:
                blocks[p].succs.discard(m)
        for x in b.succs:
            if x not in members:
                blocks[x].preds.discard(m)
        for q in b.qubits:
            if last.get(q) == m:
                last[q] = host
    for p in preds:
        blocks[p].succs.add(host)
    for x in succs:
        blocks[x].preds.add(host)
    hb.gates = sorted(gates) + [gi]  # original order is a valid order for any subset of the gates
    hb.qubits, hb.preds, hb.succs = qubits, preds, succs
    for q in qs:
        last[q] = host


def _topological(blocks: dict) -> list[Block]:
    """Blocks in dependency order, the one with the earliest first gate first among the ready."""
    indeg = {b: len(blk.preds) for b, blk in blocks.items()}
    ready = [(blk.gates[0], b) for b, blk in blocks.items() if indeg[b] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, b = heapq.heappop(ready)
        out.append(blocks[b])
        for x in blocks[b].succs:
            indeg[x] -= 1
            if indeg[x] == 0:
                heapq.heappush(ready, (blocks[x].gates[0], x))
    assert len(out) == len(blocks), "fusion produced a cyclic block graph"
    return out


def fuse(circuit: Circuit, max_qubits: int, *, min_qubits: int = 1) -> Circuit:
    """Fuse consecutive gates of ``circuit`` into blocks of at most ``max_qubits`` qubits.

    Args:
        circuit: the circuit (not changed).
        max_qubits: d, the most qubits a fused block may act on (1..14). Gates wider than d
            are kept unfused.
        min_qubits: blocks narrower than this are widened to it with identity on neighbouring
            qubits (for engines where a narrow gate costs more than a wider one); 1: never.

    Returns:
        A new circuit with the same width, global phase and measurements whose gates are the
        blocks (a block of one gate keeps that gate).

    Raises:
        TypeError / CircuitError: ``max_qubits`` not an int in 1..14, or ``min_qubits`` not an
            int in 1..max_qubits.
    """
    return fuse_blocks(circuit, max_qubits, min_qubits=min_qubits)[0]


def fuse_blocks(circuit: Circuit, max_qubits: int, *, min_qubits: int = 1) -> tuple[Circuit, list[tuple[int, ...]]]:
    """:func:`fuse`, and for each gate of the fused circuit the indices of the gates of
    ``circuit`` it applies (in the order they were multiplied)."""
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a circuits.Circuit, got {type(circuit).__name__}")
    blocks = plan(circuit, max_qubits)
    if isinstance(min_qubits, bool) or not isinstance(min_qubits, (int, np.integer)):
        raise TypeError(f"min_qubits must be an int, got {min_qubits!r}")
    if not 1 <= min_qubits <= max_qubits:
        raise CircuitError(f"min_qubits must be in 1..max_qubits={max_qubits}, got {min_qubits}")
    pad_to = min(int(min_qubits), circuit.n_qubits)
    gates = []
    for blk in blocks:
        if len(blk.gates) == 1 and len(blk.qubits) >= pad_to:
            gates.append(circuit.gates[blk.gates[0]])
            continue
        qubits = tuple(sorted(_padded(blk.qubits, pad_to, circuit.n_qubits)))
        m = block_matrix([circuit.gates[i] for i in blk.gates], qubits)
        gates.append(Gate(m, qubits, f"fused{len(blk.gates)}", check_unitary=False))
    fused = Circuit(circuit.n_qubits, gates, global_phase=circuit.global_phase, measured=circuit.measured,
                    n_clbits=circuit.n_clbits, name=f"{circuit.name}_fused{int(max_qubits)}")
    return fused, [tuple(blk.gates) for blk in blocks]


def _padded(qubits: set, width: int, n_qubits: int) -> set:
    """``qubits`` widened to ``width`` with the qubits nearest to them (gaps first, then the ends)."""
    if len(qubits) >= width:
        return qubits
    out = set(qubits)
    free = sorted((q for q in range(n_qubits) if q not in out), key=lambda q: (min(abs(q - p) for p in qubits), q))
    out.update(free[: width - len(out)])
    return out


def block_matrix(gates, qubits) -> np.ndarray:
    """The product ``G_last ... G_first`` of ``gates`` on ``qubits`` (low bit first) as one matrix."""
    k = len(qubits)
    dim = 1 << k
    bit = {q: i for i, q in enumerate(qubits)}
    # m viewed as a tensor: axes 0..k-1 are row bits k-1..0, the last axis is the column
    m = np.eye(dim, dtype=np.complex128).reshape([2] * k + [dim])
    for g in gates:
        gd = g.num_qubits
        u = g.matrix.reshape([2] * (2 * gd))  # axes: out bits gd-1..0, in bits gd-1..0
        # gate bit j (j-th listed qubit) sits at block bit bit[q_j], i.e. tensor axis k-1-bit[q_j]
        m_axes = [k - 1 - bit[g.qubits[gd - 1 - a]] for a in range(gd)]  # for in-axis gd + a
        m = np.tensordot(u, m, axes=(list(range(gd, 2 * gd)), m_axes))
        # result axes: gate out bits gd-1..0 first, then m's remaining axes in order
        m = np.moveaxis(m, list(range(gd)), m_axes)
    return np.ascontiguousarray(m.reshape(dim, dim))


def _check_max_qubits(max_qubits) -> int:
    if isinstance(max_qubits, bool) or not isinstance(max_qubits, (int, np.integer)):
        raise TypeError(f"max_qubits must be an int in 1..{MAX_FUSE_QUBITS}, got {max_qubits!r}")
    if not 1 <= max_qubits <= MAX_FUSE_QUBITS:
        raise CircuitError(f"max_qubits must be in 1..{MAX_FUSE_QUBITS}, got {max_qubits}")
    return int(max_qubits)


# --- choosing d from the cost of a gate of each width -------------------------------------

# host-side cost of building block matrices: complex multiply-adds per millisecond (tensordot
# with its axis moves, measured on 2 CPU cores); makes wide blocks pay for their construction
_BUILD_MACS_PER_MS = 1.0e6
MAX_AUTO_QUBITS = 12


@dataclass(frozen=True)
class FusionSize:
    """The fusion ``choose_size`` picked and what it expects it to cost."""

    max_qubits: int | None  # None: do not fuse
    min_qubits: int  # blocks narrower than this are widened to it
    estimated_ms: float  # gates plus building the block matrices
    unfused_ms: float
    n_blocks: int


def choose_size(circuit: Circuit, gate_ms: Callable[[int], float], *,
                max_candidate: int = MAX_AUTO_QUBITS) -> FusionSize:
    """Pick (max_qubits, min_qubits) for ``circuit`` given the cost of one gate of each width.

    Every d in 1..max_candidate (at most the circuit's width) is planned (qubit sets only),
    until three widths in a row bring no improvement; for each plan every padding width p <= d
    is priced as the sum of the costs of its blocks, plus the host time to build the block
    matrices. The cheapest wins, if it beats the unfused circuit.

    Args:
        circuit: the circuit.
        gate_ms: milliseconds of one gate of k qubits on this circuit's state, for k >= 1 (the
            simulator's measured cost model: :func:`qsim_tc.plan.choose_fusion`).
        max_candidate: the widest d to consider.

    Returns:
        The chosen sizes, the estimate and the unfused circuit's cost.
    """
    n = circuit.n_qubits
    top = max(1, min(int(max_candidate), n, MAX_FUSE_QUBITS))
    widest = max([top] + [g.num_qubits for g in circuit.gates])
    cost = {k: gate_ms(k) for k in range(1, widest + 1)}
    unfused = sum(cost[g.num_qubits] for g in circuit.gates)
    best = FusionSize(None, 1, unfused, unfused, len(circuit.gates))
    worse = 0  # consecutive widths that did not beat the best: the costs have turned upwards
    for d in range(1, top + 1):
        blocks = plan(circuit, d)
        widths = [len(b.qubits) for b in blocks]
        build = _build_macs(circuit, blocks) / _BUILD_MACS_PER_MS
        improved = False
        for p in range(1, d + 1):
            total = build + sum(cost[max(w, p)] for w in widths)
            if p > 1:
                total += sum(_pad_macs(w, p) for w in widths if w < p) / _BUILD_MACS_PER_MS
            if total < best.estimated_ms * (1 - 1e-9):
                best = FusionSize(d, p, total, unfused, len(blocks))
                improved = True
        worse = 0 if improved else worse + 1
        if worse >= 3:
            break
    return best


def _build_macs(circuit: Circuit, blocks) -> float:
    """Multiply-adds to build the block matrices (a gate of g qubits in a block of k: 4^k 2^g)."""
    total = 0.0
    for b in blocks:
        if len(b.gates) > 1:
            k = len(b.qubits)
            total += sum(float(1 << (2 * k + circuit.gates[i].num_qubits)) for i in b.gates)
    return total


def _pad_macs(w: int, p: int) -> float:
    return float(1 << (2 * p + w))


def check_fuse_option(fuse):
    """Validate a simulator's ``fuse=``: None, ``"auto"`` or an int d in 1..14; return it."""
    if fuse is None or fuse == "auto":
        return fuse
    if isinstance(fuse, bool) or not isinstance(fuse, (int, np.integer)):
        raise TypeError(f"fuse must be None, 'auto' or an int in 1..{MAX_FUSE_QUBITS}, got {fuse!r}")
    if not 1 <= fuse <= MAX_FUSE_QUBITS:
        raise ValueError(f"fuse must be None, 'auto' or an int in 1..{MAX_FUSE_QUBITS}, got {fuse}")
    return int(fuse)
