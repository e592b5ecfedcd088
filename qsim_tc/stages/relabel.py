"""A stage's local slots renamed so that its tensor-core ops meet no shared-memory bank conflicts.

The complex128 stage kernel swizzles its chunk so that flipping local index bit t moves an
amplitude's 16-byte bank slot by bit ``t % 3`` (``swz`` in ``kernel.cu``). A quarter-warp of
a tensor-core op touches eight amplitudes that differ in three index bits; they fall in eight
distinct bank slots when the three bits have distinct residues mod 3, else two or more to a slot
(a 2-way conflict doubles that access's wavefronts). A single op can always pick such bits (its
group bits are free slots, ``program._mma_layout``), but a pair record's group bits are its
second op's targets: its loads (T1[0], T1[1], G0) and stores (T1[1], T1[2], G1) are conflict-free
for some target orders only where both target sets have the residues for it (``_pair_record``).
In a quantum-volume stage, 50 of 89 pairs' accesses met conflicts (ncu: 12% of the stage's
shared-memory wavefronts; the shared-memory pipe is the kernel's busiest unit).

The slots above the kept low bits (C .. L-1) are addressed through the stage's slot map, so any
renaming of them within a stage is free: the stage's slot map is permuted with it and no amplitude
moves. :func:`bank_relabel` picks, per stage, the assignment of residues to those slots that
minimises the conflicts of the stage's op groups (all assignments of the L - C slots to their
residue classes: 1680 at L = 12, C = 3, scored at once with numpy).
"""

from __future__ import annotations

import functools
from itertools import permutations, product

import numpy as np

WILD = 3  # a widened 2-qubit op's pad: its residue is chosen with the op (program._pad_target)


def missing_residues(bits) -> int:
    """How many residues mod 3 three index bits (slots, or their residues) miss: 0 when a
    quarter-warp's eight amplitudes over them fill eight bank slots, else the conflict's depth."""
    return 3 - len({b % 3 for b in bits})


def pair_conflicts(t1, t2) -> int:
    """A pair record's 2-way conflicts (loads T1[0], T1[1], G0 plus stores T1[1], T1[2], G1) for
    its first targets ``t1`` and group bits ``t2`` = (G0, G1, G2) in their order."""
    a, b, c = t1
    g0, g1, _ = t2
    return missing_residues((a, b, g0)) + missing_residues((b, c, g1))


@functools.lru_cache(maxsize=None)
def _pair_cost(r1: tuple, r2: tuple) -> int:
    """The fewest conflicts of a pair whose targets have residues ``r1``, ``r2`` (a WILD entry
    takes the best residue), over both target orders."""
    fills1 = [r1] if WILD not in r1 else [tuple(x if x != WILD else w for x in r1) for w in range(3)]
    fills2 = [r2] if WILD not in r2 else [tuple(x if x != WILD else w for x in r2) for w in range(3)]
    return min(pair_conflicts(p, q) for f1 in fills1 for f2 in fills2 for p in permutations(f1)
               for q in permutations(f2))


def _single_cost(r: tuple) -> int:
    """A single 3-qubit op's conflicts: its loads need two targets of distinct residues (its group
    bits are free slots of any residue)."""
    return int(WILD not in r and len(set(r)) == 1)


@functools.lru_cache(maxsize=None)
def _tables():
    """Canonical keys of residue triples (sorted, entries 0-2 or WILD) as indices, the code of
    every triple in base 4, and the cost tables by key (pairs: key x key; singles: key)."""
    keys = sorted({tuple(sorted(t)) for t in product(range(4), repeat=3) if t.count(WILD) <= 1})
    index = {k: i for i, k in enumerate(keys)}
    code = np.full(64, -1, dtype=np.int64)
    for t in product(range(4), repeat=3):
        s = tuple(sorted(t))
        if s in index:
            code[t[0] * 16 + t[1] * 4 + t[2]] = index[s]
    pair = np.array([[_pair_cost(a, b) for b in keys] for a in keys], dtype=np.int64)
    single = np.array([_single_cost(k) for k in keys], dtype=np.int64)
    return code, pair, single


@functools.lru_cache(maxsize=None)
def _assignments(big_l: int, keep_low: int) -> np.ndarray:
    """Every assignment of residues to slots keep_low .. L-1 with the residue counts of those
    slots themselves, as rows (int8); row 0 is the identity (each slot its own residue)."""
    free = list(range(keep_low, big_l))
    counts = [sum(1 for p in free if p % 3 == r) for r in range(3)]
    rows = []

    def grow(prefix, left):
        if len(prefix) == len(free):
            rows.append(tuple(prefix))
            return
        for r in range(3):
            if left[r]:
                left[r] -= 1
                grow(prefix + [r], left)
                left[r] += 1

    grow([], counts)
    ident = tuple(p % 3 for p in free)
    rows.remove(ident)
    return np.array([ident] + rows, dtype=np.int8)


def bank_relabel(groups, big_l: int, keep_low: int, exchanges=()) -> list[int] | None:
    """A renaming of a stage's local slots (``sigma[p]``: the kernel slot of plan slot p; the kept
    low slots and the global ones keep theirs) that minimises its tensor-core ops' bank conflicts,
    or None where the identity is as good.

    Args:
        groups: the stage's records as lists of one op or two (a pair), each op
            ``(targets, widen)``: its slots, and whether it is a 2-qubit op the kernel pads.
        big_l, keep_low: L and C (the slots C .. L-1 are renamed).
        exchanges: the next stage's low-slot exchanges (p, g), g a slot of this stage: the
            store's reads stay conflict-free where g keeps the residue of p (the planner's
            choice), so g's residue is kept.
    """
    free = big_l - keep_low
    if free < 3 or big_l > 16 or not any(len(g) == 2 or len(g[0][0]) == 3 for g in groups):
        return None
    rows = _assignments(big_l, keep_low)
    if len(rows) > 20000:  # (L - C >= 12: no kept low bits at L = 12; left as it is)
        return None
    code, pair, single = _tables()
    m = len(rows)
    res = np.empty((m, big_l + 1), dtype=np.int64)  # column big_l: WILD
    res[:, :keep_low] = np.arange(keep_low) % 3
    res[:, keep_low:big_l] = rows
    res[:, big_l] = WILD

    def key(targets, widen):
        cols = list(targets) + ([big_l] if widen and len(targets) == 2 else [])  # (the pad: WILD)
        if len(cols) != 3 or max(targets) >= big_l:
            return None
        r = res[:, cols]
        return code[r[:, 0] * 16 + r[:, 1] * 4 + r[:, 2]]

    cost = np.zeros(m, dtype=np.int64)
    for g in groups:
        keys = [key(*op) for op in g]
        if any(k is None for k in keys):
            continue
        cost += pair[keys[0], keys[1]] if len(g) == 2 else single[keys[0]]
    ok = np.ones(m, dtype=bool)
    for p, q in exchanges:
        if keep_low <= q < big_l:
            ok &= res[:, q] == p % 3
    if not ok[0]:  # (the planner keeps residues where it can; then any row that does is as valid)
        ok[0] = True
    best = int(np.argmin(np.where(ok, cost, np.iinfo(np.int64).max)))
    if cost[best] >= cost[0]:
        return None
    sigma = list(range(big_l))
    for r in range(3):
        plan_slots = [keep_low + i for i in range(free) if rows[best][i] == r]
        kernel_slots = [p for p in range(keep_low, big_l) if p % 3 == r]
        for a, b in zip(plan_slots, kernel_slots):
            sigma[a] = b
    return sigma
