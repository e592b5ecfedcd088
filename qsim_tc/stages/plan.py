"""The stage planner: a circuit as a few passes over the state, each applying many gates.

A stage fixes L *local* qubits: the L lowest physical bits of the state index. A chunk of 2^L
contiguous amplitudes then holds every amplitude that a gate on local qubits mixes, so one
pass that loads each chunk once (into GPU shared memory, or into a CPU cache) can apply all of
the stage's gates to it. Between stages, index-bit swaps (physical bit g >= L exchanged with
physical bit p < L) bring the next stage's qubits in.

What a gate needs to be local (:mod:`qsim_tc.stages.structure` reads it from the matrix):

- dense or permutation: all of its qubits;
- controlled-U: only its targets. In a chunk every global bit is fixed, so a global control
  either enables the gate for the whole chunk or skips it;
- diagonal: nothing (its global bits are fixed per chunk, the rest of the diagonal is applied
  within the chunk);
- SWAP of two qubits (unit phases): nothing; it is applied by relabelling the two qubits in the
  layout, and moves no amplitude.

Order: a gate acts *diagonally* on a qubit when it never flips it: a diagonal gate on each of
its qubits, a controlled gate on its controls. Two gates commute when on every qubit they share
both act diagonally (each is then a sum over the shared qubits' basis states of operators on
disjoint qubits); the planner keeps every other pair in circuit order (a dependency DAG). So
Toffolis that share a control, or a phase on a Toffoli's control, need no order between them.

Greedy algorithm (after Atlas / HyQuas):

1. Apply every ready gate (all predecessors applied) whose needed qubits are local, smallest
   circuit index first, until no ready gate can go. This is one stage.
2. Choose the next local set among candidates, the one with which the next stage would apply
   the most gates (ties: fewer qubits to swap in):

   - the circuit-order walk: walk the remaining gates in circuit order (up to ``lookahead`` of
     them) and take each gate whose predecessors are applied or taken and whose needed qubits
     still fit in L with the set; a gate that does not fit is skipped, and so is everything that
     depends on it;
   - grown sets (``seeds`` of them): start from the needed qubits of one blocked gate, then
     repeatedly take the gate (predecessors applied or taken) that brings in the fewest new
     qubits, while they fit. Where the walk fills the set with one layer's gates across the
     whole register, this finds a window's light cone: brickwork(28, 2, 20) at L = 12 takes 9
     stages instead of 21.
3. Fill the set up to L with qubits already local (no swap), keeping the ones needed soonest;
   swap each chosen global qubit with an evicted local one (the one needed latest). Repeat.

Kept low bits (``keep_low`` = C): physical bits 0..C-1 are local in every stage (the GPU kernel
reads a chunk in runs of 2^C amplitudes through them). Fixed, their qubits take C of the L local
places for the whole circuit. With ``rotate_low`` they may change at each stage boundary to
qubits that are local on both sides of it: the previous stage's store exchanges them (a
permutation within the chunk, so it moves no amplitude between chunks and costs no pass). Such
an exchange (low bit p < C, local bit p' >= C) comes first in the next stage's swaps. At 28
qubits, L = 12, C = 3 it takes QuantumVolume(28, seed=7) from 36 stages to 29-30 and
brickwork(28, 2, 20) from 14 to 9-10 (C = 0 gives 29 and 9).

The plan records, per stage, the swaps before it, the layout after them, and the gates in the
order to apply them with the physical positions of their qubits at that point; within a stage,
diagonal gates are gathered at as few places as their order allows (:func:`_gather_diagonals`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from circuits.circuit import Circuit
from qsim_tc.layout import Layout
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL, PERMUTATION, GateStructure, classify

RELABEL = "relabel"  # a SWAP applied to the layout only
DEFAULT_LOOKAHEAD = 2048
# blocked gates from which step 2 also grows a candidate local set (see _grow). At 28 qubits,
# L = 12: brickwork(28, 2, 20) 21 -> 9 stages, QuantumVolume(28) 44 -> 29, brickwork(28, 4, 10)
# 14 -> 8 (4 seeds gave 9 / 31 / 8; 64 no better than 16); planning takes ~20 ms
DEFAULT_SEEDS = 16
# CPU chunk: about a core's share of the L2 cache (1 MiB a core on the measured EPYC); the
# executor may batch several chunks per numpy call, so this bounds the planner's L only.
DEFAULT_CPU_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class StageOp:
    """One gate of a stage, placed.

    Attributes:
        gate: its index in the circuit.
        kind: ``"diagonal"``, ``"controlled"``, ``"permutation"``, ``"dense"`` or ``"relabel"``.
        positions: the physical bit of each of the gate's qubits (in the gate's qubit order)
            when the gate runs; for ``"relabel"``, the two physical bits whose qubits trade names.
        structure: the gate's :class:`~qsim_tc.stages.structure.GateStructure` (matrices, and
            which bits are controls and targets, in the gate's bit order).
    """

    gate: int
    kind: str
    positions: tuple[int, ...]
    structure: GateStructure = field(repr=False)


@dataclass(frozen=True)
class Stage:
    """One pass over the state.

    Attributes:
        swaps: physical bit pairs exchanged before the stage, in order: a kept low bit with
            another local bit (p < C <= g < L; only with ``rotate_low``, first), then a local
            bit with a global one (p < L <= g).
        layout: ``layout[p]`` is the logical qubit at physical bit p once the swaps are done.
        ops: the gates, in an order that respects their dependencies.
    """

    swaps: tuple[tuple[int, int], ...]
    layout: tuple[int, ...]
    ops: tuple[StageOp, ...]

    def low_exchanges(self, local_qubits: int) -> tuple[tuple[int, int], ...]:
        """The swaps of two local bits (a kept low bit and another, ``rotate_low``): the previous
        stage's store performs them."""
        return tuple((p, g) for p, g in self.swaps if g < local_qubits)

    @property
    def end_layout(self) -> tuple[int, ...]:
        """The layout after the stage: ``layout`` with the stage's relabels applied."""
        phys = list(self.layout)
        for op in self.ops:
            if op.kind == RELABEL:
                a, b = op.positions
                phys[a], phys[b] = phys[b], phys[a]
        return tuple(phys)

    @property
    def n_gates(self) -> int:
        """Gates that touch amplitudes (relabels excluded)."""
        return sum(op.kind != RELABEL for op in self.ops)


@dataclass(frozen=True)
class StagePlan:
    """A circuit as stages.

    Attributes:
        n_qubits: N.
        local_qubits: L (at most N).
        stages: the stages in order.
        initial_layout: the layout the first stage expects the state in.
        final_layout: the layout of the state after the last stage (relabels included).
        global_phase: radians, applied once at the end.
        n_gates: gates of the circuit.
        keep_low: C, the low physical bits that are local in every stage.
    """

    n_qubits: int
    local_qubits: int
    stages: tuple[Stage, ...]
    initial_layout: tuple[int, ...]
    final_layout: tuple[int, ...]
    global_phase: float
    n_gates: int
    keep_low: int = 0

    @property
    def n_stages(self) -> int:
        """Passes that apply gates (each stage reads and writes the state once)."""
        return len(self.stages)

    @property
    def n_swap_passes(self) -> int:
        """Stages that begin with index-bit swaps (a separate pass unless fused into the load)."""
        return sum(bool(s.swaps) for s in self.stages)

    @property
    def n_swapped_bits(self) -> int:
        return sum(len(s.swaps) for s in self.stages)

    def summary(self) -> dict:
        """Counts for reports."""
        return {"n_qubits": self.n_qubits, "local_qubits": self.local_qubits, "n_gates": self.n_gates,
                "stages": self.n_stages, "swap_passes": self.n_swap_passes, "swapped_bits": self.n_swapped_bits,
                "gates_per_stage": [s.n_gates for s in self.stages]}


def cpu_local_qubits(dtype, chunk_bytes: int = DEFAULT_CPU_CHUNK_BYTES) -> int:
    """The L whose chunk of 2^L amplitudes of ``dtype`` fits ``chunk_bytes``.

    Args:
        dtype: the state's dtype (complex128 or complex64).
        chunk_bytes: the cache budget of one chunk (default: 1 MiB, a core's L2).

    Returns:
        L >= 1.

    Raises:
        ValueError: ``chunk_bytes`` is smaller than two amplitudes.
    """
    item = np.dtype(dtype).itemsize
    if chunk_bytes < 2 * item:
        raise ValueError(f"chunk_bytes must hold at least 2 amplitudes ({2 * item} bytes), got {chunk_bytes}")
    return int(chunk_bytes // item).bit_length() - 1


def plan_stages(circuit: Circuit, local_qubits: int, *, structures: Sequence[GateStructure] | None = None,
                initial_layout: Sequence[int] | None = None, lookahead: int = DEFAULT_LOOKAHEAD,
                keep_low: int = 0, seeds: int = DEFAULT_SEEDS, rotate_low: bool = False) -> StagePlan:
    """Split ``circuit`` into stages of ``local_qubits`` local qubits.

    Args:
        circuit: the circuit.
        local_qubits: L, the qubits a chunk holds (e.g. 10-13 for GPU shared memory,
            :func:`cpu_local_qubits` on a CPU). Values above N are clipped to N.
        structures: the gates' structures (default: :func:`~qsim_tc.stages.structure.classify`
            of each matrix); pass them to reuse a classification.
        initial_layout: the state's layout at the start (``phys`` list; default identity).
        lookahead: how many remaining gates step 2 of the algorithm looks at.
        seeds: how many blocked gates step 2 grows candidate sets from (0: the circuit-order
            walk alone).
        keep_low: physical bits 0..keep_low-1 are never swapped out (they stay local in every
            stage). The GPU stage kernel reads a chunk through them, so they keep its loads
            contiguous; gates may then need at most ``local_qubits - keep_low`` other qubits.
        rotate_low: the kept low bits' qubits may change between stages, each time to qubits
            local in both stages (module docstring); False keeps them for the whole circuit.

    Returns:
        The :class:`StagePlan`.

    Raises:
        TypeError: ``circuit`` is not a Circuit.
        ValueError: ``local_qubits`` < 1, a bad ``initial_layout`` or ``structures`` length, or a
            gate that needs more than L local qubits (name and qubits given).
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a circuits.Circuit, got {type(circuit).__name__}")
    if isinstance(local_qubits, bool) or not isinstance(local_qubits, (int, np.integer)) or local_qubits < 1:
        raise ValueError(f"local_qubits must be an int >= 1, got {local_qubits!r}")
    n = circuit.n_qubits
    big_l = min(int(local_qubits), n)
    if isinstance(keep_low, bool) or not isinstance(keep_low, (int, np.integer)) or not 0 <= keep_low <= big_l:
        raise ValueError(f"keep_low must be an int in 0..{big_l}, got {keep_low!r}")
    gates = circuit.gates
    if structures is None:
        structures = [classify(g.matrix) for g in gates]
    elif len(structures) != len(gates):
        raise ValueError(f"structures has {len(structures)} entries for {len(gates)} gates")
    layout = Layout(n)
    if initial_layout is not None:
        if sorted(initial_layout) != list(range(n)):
            raise ValueError(f"initial_layout must be a permutation of range({n}), got {list(initial_layout)}")
        layout.set(list(initial_layout))
    start_layout = tuple(layout.phys)

    kinds = [_kind(s) for s in structures]
    needed = [_needed(g.qubits, s, k) for g, s, k in zip(gates, structures, kinds)]
    pinned = frozenset(layout.phys[:keep_low])  # their slots never swap, relabels move names only
    for i, need in enumerate(needed):
        if len(need | pinned) > big_l:
            raise ValueError(f"gate {i} ({gates[i].name!r} on qubits {gates[i].qubits}) needs {len(need)} local "
                             f"qubits {sorted(need)}, more than local_qubits={big_l}"
                + (f" leaves beside the {keep_low} kept low bits" if keep_low else ""))
    preds, succs = _dag(gates, [_diagonal_on(g.qubits, s, k) for g, s, k in zip(gates, structures, kinds)])
    dag = _Dag(preds, succs)

    stages: list[Stage] = []
    swaps: tuple[tuple[int, int], ...] = ()
    ready = [i for i in range(len(gates)) if not preds[i]]
    heapq.heapify(ready)
    while True:
        stage_layout = tuple(layout.phys)
        ops, ready = _run_stage(ready, dag, gates, structures, kinds, needed, layout, big_l)
        if ops or swaps:
            stages.append(Stage(swaps, stage_layout, tuple(_gather_diagonals(ops))))
        if not ready:
            break
        # a rotation is the store of the stage before: none before the first
        swaps = _next_local_set(ready, dag, gates, kinds, needed, layout, big_l, lookahead, keep_low, seeds,
                                rotate=bool(rotate_low and keep_low and stages))
    return StagePlan(n, big_l, tuple(stages), start_layout, tuple(layout.phys), circuit.global_phase, len(gates),
                     keep_low)


# --- the gates' needs and order --------------------------------------------------------------


def _kind(s: GateStructure) -> str:
    if s.kind == PERMUTATION and s.qubit_swap is not None and s.n_bits == 2:
        return RELABEL
    return s.kind


def _needed(qubits: tuple[int, ...], s: GateStructure, kind: str) -> frozenset[int]:
    """The logical qubits that must be local for the gate."""
    if kind in (DIAGONAL, RELABEL):
        return frozenset()
    if kind == CONTROLLED:
        return frozenset(qubits[b] for b in s.targets)
    return frozenset(qubits)


def _diagonal_on(qubits: tuple[int, ...], s: GateStructure, kind: str) -> frozenset[int]:
    """The logical qubits the gate acts diagonally on (never flips): all of a diagonal gate's, a
    controlled gate's controls, none of any other gate's."""
    if kind == DIAGONAL:
        return frozenset(qubits)
    if kind == CONTROLLED:
        return frozenset(qubits[b] for b in s.controls)
    return frozenset()


def _dag(gates, diagonal_on) -> tuple[list[list[int]], list[list[int]]]:
    """Predecessors and successors: on each of its qubits a gate follows the last gate that flips
    that qubit, and a gate that flips it also follows the gates acting diagonally on it since
    then (gates diagonal on a qubit commute there, nothing else is assumed to commute).
    ``diagonal_on[i]``: the qubits gate i acts diagonally on (:func:`_diagonal_on`)."""
    preds: list[set[int]] = [set() for _ in gates]
    last: dict[int, int] = {}
    diag_since: dict[int, list[int]] = {}
    for i, g in enumerate(gates):
        for q in g.qubits:
            if q in last:
                preds[i].add(last[q])
            if q in diagonal_on[i]:
                diag_since.setdefault(q, []).append(i)
            else:
                preds[i].update(diag_since.pop(q, ()))
                last[q] = i
    succs: list[list[int]] = [[] for _ in gates]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return [sorted(p) for p in preds], succs


class _Dag:
    """The DAG and which gates have been applied."""

    def __init__(self, preds, succs):
        self.preds = preds
        self.succs = succs
        self.waiting = [len(p) for p in preds]  # predecessors not yet applied
        self.done = [False] * len(preds)
        self.first_open = 0  # every gate before this index is done

    def apply(self, i: int) -> list[int]:
        """Mark gate i applied; return the gates that became ready."""
        self.done[i] = True
        while self.first_open < len(self.done) and self.done[self.first_open]:
            self.first_open += 1
        out = []
        for s in self.succs[i]:
            self.waiting[s] -= 1
            if self.waiting[s] == 0:
                out.append(s)
        return out


# --- step 1: one stage -----------------------------------------------------------------------


def _run_stage(ready, dag: _Dag, gates, structures, kinds, needed, layout: Layout, big_l: int):
    """Apply every ready gate whose needed qubits are local, in index order; return the ops and
    the gates left ready (blocked) as a heap."""
    ops: list[StageOp] = []
    blocked: list[int] = []
    pos = layout.pos
    while ready:
        i = heapq.heappop(ready)
        if any(pos[q] >= big_l for q in needed[i]):
            blocked.append(i)
            continue
        g = gates[i]
        if kinds[i] == RELABEL:
            a, b = g.qubits
            pa, pb = pos[a], pos[b]
            ops.append(StageOp(i, RELABEL, (pa, pb), structures[i]))
            phys = list(layout.phys)
            phys[pa], phys[pb] = b, a
            layout.set(phys)
            pos = layout.pos
            # a relabel moves qubits between local and global: blocked gates may now fit
            for j in blocked:
                heapq.heappush(ready, j)
            blocked = []
        else:
            ops.append(StageOp(i, kinds[i], tuple(pos[q] for q in g.qubits), structures[i]))
        for j in dag.apply(i):
            heapq.heappush(ready, j)
    heapq.heapify(blocked)
    return ops, blocked


def _flipped(op: StageOp) -> tuple[int, ...]:
    """The slots an op flips: none of a diagonal gate, a controlled gate's targets, every slot of
    any other op (a relabel's two slots change qubits)."""
    if op.kind == DIAGONAL:
        return ()
    if op.kind == CONTROLLED:
        return tuple(op.positions[b] for b in op.structure.targets)
    return op.positions


def _gather_diagonals(ops: list[StageOp]) -> list[StageOp]:
    """A stage's ops with its diagonal gates gathered at as few places as their order allows.

    A diagonal gate may go anywhere between the last op before it and the first op after it that
    flips one of its slots (it commutes with everything between). Placing each group at the end
    of the window that closes first, and with it every diagonal whose window holds that place
    (greedy interval stabbing: the fewest places), leaves the fewest diagonal runs: each a phase
    op of the GPU program, or a pre-phase. Where a controlled gate splits them (it flips only its
    targets, and an op with controls takes no pre-phase) they were one phase op each:
    controlled_random(28, 30) 3-8% of the predicted time. QFT, quantum volume and brickwork keep
    their order (their diagonals already sit at such places, or have none).
    """
    others = [i for i, op in enumerate(ops) if op.kind != DIAGONAL]
    if len(others) == len(ops):
        return ops
    # each diagonal's window, in places k = "just before the k-th other op" (len(others): the end)
    last: dict[int, int] = {}  # slot -> place after the latest op flipping it
    lo: dict[int, int] = {}
    k = 0
    for i, op in enumerate(ops):
        if op.kind == DIAGONAL:
            lo[i] = max((last.get(p, 0) for p in op.positions), default=0)
        else:
            k += 1
            for p in _flipped(op):
                last[p] = k
    nxt: dict[int, int] = {}  # slot -> place of the next op flipping it
    windows = []
    k = len(others)
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if op.kind == DIAGONAL:
            windows.append((min((nxt.get(p, len(others)) for p in op.positions), default=len(others)), lo[i], i))
        else:
            k -= 1
            for p in _flipped(op):
                nxt[p] = k
    windows.sort()
    at: dict[int, list[int]] = {}
    placed = set()
    for hi, _, i in windows:
        if i in placed:
            continue
        take = [j for h, low, j in windows if j not in placed and low <= hi <= h]
        at[hi] = sorted(take)
        placed.update(take)
    out: list[StageOp] = []
    for k, j in enumerate(others):
        out.extend(ops[i] for i in at.get(k, ()))
        out.append(ops[j])
    out.extend(ops[i] for i in at.get(len(others), ()))
    return out


# --- steps 2 and 3: the next local set and the swaps -------------------------------------------


def _next_local_set(ready, dag: _Dag, gates, kinds, needed, layout: Layout, big_l: int, lookahead: int,
                    keep_low: int = 0, seeds: int = 0, rotate: bool = False):
    """Choose the next stage's local qubits, change ``layout`` by the swaps; return the swaps.

    ``rotate``: the kept low bits' qubits may be evicted too; candidates are then also grown
    without them, and kept when at most L - C qubits come in (so that C qubits local now stay
    local, to take the low bits)."""
    n = len(layout.phys)
    low = list(layout.phys[:keep_low])
    start = dag.first_open
    stop = min(len(gates), max(ready[0], start) + lookahead)
    pos = layout.pos

    def incoming_of(chosen):
        return sum(pos[q] >= big_l for q in chosen)

    def score(chosen):
        return (_closure(dag, needed, chosen, ready, stop), -incoming_of(chosen))

    best, best_score = None, None
    for pinned in ([set(low), set()] if rotate else [set(low)]):
        cands = [_walk(dag, gates, kinds, needed, pinned, big_l, start, stop, n)]
        # candidates grown from other blocked gates, kept when more gates would run with them
        # (ties: fewer qubits to bring in; the circuit-order walk first)
        cands += [_grow(dag, gates, kinds, needed, pinned, big_l, seed, ready, stop, n)
                  for seed in heapq.nsmallest(seeds, ready)]
        for chosen in cands:
            if incoming_of(chosen) > big_l - keep_low:
                continue  # too few of today's local qubits left for the low bits
            sc = score(chosen)
            if best is None or sc > best_score:
                best, best_score = chosen, sc
    chosen = best
    incoming = sorted((q for q in chosen if pos[q] >= big_l), key=lambda q: pos[q])
    if not incoming:  # cannot happen: the first blocked gate needs a global qubit
        raise AssertionError("planner made no progress")
    # evict the local qubits not chosen whose next use is latest (Belady); low bits only when
    # they rotate
    next_use = _next_use(dag, gates, needed, start, stop, n)
    first = 0 if rotate else keep_low
    candidates = [p for p in range(first, big_l) if layout.phys[p] not in chosen]
    candidates.sort(key=lambda p: (-next_use[layout.phys[p]], p))
    out = set(candidates[: len(incoming)])
    phys = list(layout.phys)
    exchanges = []
    for p in range(keep_low):
        if p in out:  # the low bit's qubit leaves: a local qubit that stays takes its place
            q = _low_successor(p, out, exchanges, keep_low, big_l)
            exchanges.append((p, q))
            out.discard(p)
            out.add(q)
            phys[p], phys[q] = phys[q], phys[p]
    swaps = tuple(zip(sorted(out), sorted(pos[q] for q in incoming)))
    for p, g in swaps:
        phys[p], phys[g] = phys[g], phys[p]
    layout.set(phys)
    return tuple(exchanges) + swaps


def _low_successor(p: int, out, exchanges, keep_low: int, big_l: int) -> int:
    """The local bit (>= C, staying local, not yet taken) whose qubit replaces low bit p's: of the
    same residue mod 3 where one is left. The GPU kernel's shared-memory swizzle folds the bits of
    an index in threes, so then a store's reads stay free of bank conflicts."""
    taken = {q for _, q in exchanges}
    free = [q for q in range(keep_low, big_l) if q not in out and q not in taken]
    same = [q for q in free if q % 3 == p % 3]
    return (same or free)[0]


def _walk(dag: _Dag, gates, kinds, needed, pinned, big_l: int, start: int, stop: int, n: int) -> set[int]:
    """Step 2 of the algorithm: the gates in circuit order, each taken when its predecessors are
    applied or taken and its needed qubits still fit."""
    alias = list(range(n))  # alias[q]: the qubit, named as at the stage start, whose place q holds
    chosen = set(pinned)
    taken: set[int] = set()
    for i in range(start, stop):
        if dag.done[i] or any(not (dag.done[p] or p in taken) for p in dag.preds[i]):
            continue
        want = {alias[q] for q in needed[i]}
        if len(chosen | want) > big_l:
            continue
        chosen |= want
        taken.add(i)
        if kinds[i] == RELABEL:
            a, b = gates[i].qubits
            alias[a], alias[b] = alias[b], alias[a]
    return chosen


def _grow(dag: _Dag, gates, kinds, needed, pinned, big_l: int, seed: int, ready, stop: int, n: int) -> set[int]:
    """A local set grown from one blocked gate: repeatedly take the gate whose predecessors are
    applied or taken that brings in the fewest new qubits (earliest first), while they fit. On a
    brickwork circuit this finds the light cone of a window around the seed, where the
    circuit-order walk fills the set with one layer's gates across the whole width."""
    alias = list(range(n))
    chosen = set(pinned) | set(needed[seed])
    waiting: dict[int, int] = {}
    open_ = [i for i in ready if i != seed]
    open_ += _released(dag, seed, stop, waiting)
    while open_:
        pick, cost = -1, big_l + 1
        for i in open_:
            new = len({alias[q] for q in needed[i]} - chosen)
            if new < cost or new == cost and i < pick:
                pick, cost = i, new
        if len(chosen) + cost > big_l:
            break
        open_.remove(pick)
        chosen |= {alias[q] for q in needed[pick]}
        if kinds[pick] == RELABEL:
            a, b = gates[pick].qubits
            alias[a], alias[b] = alias[b], alias[a]
        open_ += _released(dag, pick, stop, waiting)
    return chosen


def _closure(dag: _Dag, needed, chosen, ready, stop: int) -> int:
    """How many gates a stage with local set ``chosen`` would apply (relabels' renaming ignored)."""
    waiting: dict[int, int] = {}
    todo = [i for i in ready if needed[i] <= chosen]
    count = 0
    while todo:
        i = todo.pop()
        count += 1
        todo += [s for s in _released(dag, i, stop, waiting) if needed[s] <= chosen]
    return count


def _released(dag: _Dag, i: int, stop: int, waiting: dict[int, int]) -> list[int]:
    """The successors of gate i (below ``stop``, not applied) whose last missing predecessor was
    i, as if i were applied; ``waiting`` keeps the counts of a simulation that does not touch
    ``dag`` (a successor's first visit counts its predecessors not applied)."""
    out = []
    for s in dag.succs[i]:
        if s >= stop or dag.done[s]:
            continue
        left = waiting.get(s, sum(not dag.done[p] for p in dag.preds[s])) - 1
        waiting[s] = left
        if left == 0:
            out.append(s)
    return out


def _next_use(dag: _Dag, gates, needed, start: int, stop: int, n: int) -> list[int]:
    """For each qubit, the index of the first remaining gate in the window that needs it local."""
    far = stop + 1
    out = [far] * n
    for i in range(stop - 1, start - 1, -1):
        if not dag.done[i]:
            for q in needed[i]:
                out[q] = i
    return out
