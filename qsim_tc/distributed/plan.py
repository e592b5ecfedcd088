"""The distributed plan: which qubits are local (on every rank's slice) in each stage, and which
global exchanges bring them in, chosen to move as little as possible.

It is the stage planner's plan (:func:`qsim_tc.stages.plan.plan_stages` with L = N - g local
qubits) with three changes that count on a distributed state:

* **Free swaps.** A qubit that no gate has flipped yet is |0> on every amplitude (the run starts
  from |0...0>; diagonal gates and controls keep it so). Exchanging two index bits that are both
  such qubits leaves every amplitude where it is: that swap is a relabelling of the layout, no
  exchange. In particular the initial layout is free.
* **The initial layout.** Since it is free, several are planned (the identity; the qubits first
  needed latest on the global bits, ties broken by the latest last need; the qubits last needed
  latest on them) and the one with the fewest data-moving exchanges is kept. QFT then runs in two stages with one exchange (the high
  qubits' H and controlled phases first, the low qubits' after), as Atlas's staging does.
* **Full exchanges.** An exchange of k global bits is one all-to-all sending (2^k - 1)/2^k of a
  slice, so a bit more costs little once an exchange happens. At each exchange of k < g bits, the
  plan also tries bringing in the global qubits needed soonest in place of local qubits the next
  stage does not use, re-plans the rest of the circuit from there, and keeps the result when the
  whole plan has fewer exchanges.

Diagonal gates (phases, controlled phases, CZ, RZ) and a controlled gate's controls never need a
local qubit: the stage planner already leaves them where they are and the runner applies their
global bits from the rank number.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from circuits import Circuit
from qsim_tc.stages.plan import RELABEL, Stage, plan_stages
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL, GateStructure, classify

# at most this many exchanges are tried with more bits (each try re-plans the rest of the circuit)
MAX_WIDENED = 16


@dataclass(frozen=True)
class DistributedPlan:
    """A circuit as stages over 2^g ranks.

    Attributes:
        n_qubits: N. local_qubits: L = N - g. n_global: g.
        initial_layout: ``initial_layout[p]`` is the logical qubit at physical bit p before the
            first stage (a relabelling of |0...0>: free).
        stages: the stages (:class:`qsim_tc.stages.plan.Stage`; ``swaps`` in plan bits, gate
            indices of the circuit).
        moves: per stage, the swaps that move data (an all-to-all when several).
        relabels: per stage, the swaps of two qubits still |0>: a renaming, no exchange.
    """

    n_qubits: int
    local_qubits: int
    n_global: int
    initial_layout: tuple[int, ...]
    stages: tuple[Stage, ...]
    moves: tuple[tuple[tuple[int, int], ...], ...]
    relabels: tuple[tuple[tuple[int, int], ...], ...]

    @property
    def exchanges(self) -> int:
        """Collective exchanges that move data (one a stage with moves)."""
        return sum(bool(m) for m in self.moves)

    @property
    def swapped_bits(self) -> int:
        """Index-bit swaps that move data, over all exchanges."""
        return sum(len(m) for m in self.moves)

    @property
    def slices_sent(self) -> float:
        """Slices each rank sends in all (an exchange of k bits sends 1 - 2^-k of one)."""
        return sum(1.0 - 2.0 ** -len(m) for m in self.moves if m)

    def summary(self) -> dict:
        """Counts for reports."""
        return {"n_qubits": self.n_qubits, "local_qubits": self.local_qubits, "stages": len(self.stages),
                "exchanges": self.exchanges, "swapped_bits": self.swapped_bits,
                "slices_sent": round(self.slices_sent, 6),
                "free_relabels": sum(len(r) for r in self.relabels)}


def plan_distributed(circuit: Circuit, local_qubits: int, *, structures=None, search: bool = True) -> DistributedPlan:
    """Plan ``circuit`` for a state of ``local_qubits`` local qubits a rank.

    Args:
        circuit: the circuit.
        local_qubits: L = N - g (g = log2 of the ranks), at least 1.
        structures: the gates' :class:`~qsim_tc.stages.structure.GateStructure` (default: classified).
        search: False gives the stage planner's plan as it is (identity layout, every swap
            moving data): the baseline the choices above are measured against.

    Returns:
        The :class:`DistributedPlan`.

    Raises:
        TypeError: ``circuit`` is not a Circuit.
        ValueError: ``local_qubits`` out of range, or a gate needing more than L local qubits.
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a circuits.Circuit, got {type(circuit).__name__}")
    n = circuit.n_qubits
    if isinstance(local_qubits, bool) or not isinstance(local_qubits, int) or not 1 <= local_qubits <= n:
        raise ValueError(f"local_qubits must be an int in 1..{n}, got {local_qubits!r}")
    if structures is None:
        structures = [classify(g.matrix) for g in circuit.gates]
    if not search:
        base = plan_stages(circuit, local_qubits, structures=structures)
        return _account(circuit, structures, local_qubits, base.initial_layout, base.stages, free=False)
    best = None
    for layout in _initial_layouts(circuit, structures, local_qubits):
        p = plan_stages(circuit, local_qubits, structures=structures, initial_layout=layout)
        cand = _account(circuit, structures, local_qubits, p.initial_layout, p.stages)
        if best is None or _cost(cand) < _cost(best):
            best = cand
    return _widen(circuit, structures, best)


def _cost(plan: DistributedPlan) -> tuple:
    return plan.exchanges, plan.slices_sent, len(plan.stages)


def _needed(gate, s: GateStructure) -> frozenset[int]:
    """The logical qubits a gate needs local (as the stage planner counts them)."""
    if s.kind == DIAGONAL or (s.qubit_swap is not None and s.n_bits == 2):
        return frozenset()
    if s.kind == CONTROLLED:
        return frozenset(gate.qubits[b] for b in s.targets)
    return frozenset(gate.qubits)


def _flipped(gate, s: GateStructure, kind: str) -> tuple[int, ...]:
    """The logical qubits an op may take out of |0>: none for a diagonal, a controlled gate's
    targets, every qubit of any other gate."""
    if kind == DIAGONAL:
        return ()
    if kind == CONTROLLED:
        return tuple(gate.qubits[b] for b in s.targets)
    return tuple(gate.qubits)


def _initial_layouts(circuit: Circuit, structures, big_l: int) -> list[tuple[int, ...]]:
    """Candidate starting layouts: the identity; the qubits first needed latest on the global bits
    (ties: the latest last need); the qubits last needed latest on them (a layer of H before a QFT
    needs every qubit first in index order, but the QFT needs its low qubits last)."""
    n = circuit.n_qubits
    far = len(circuit.gates)
    first, last = [far] * n, [-1] * n
    for i, (g, s) in enumerate(zip(circuit.gates, structures)):
        for q in _needed(g, s):
            first[q] = min(first[q], i)
            last[q] = max(last[q], i)
    out = [tuple(range(n))]
    for key in (lambda q: (first[q], last[q], q), lambda q: (last[q], first[q], q)):
        order = sorted(range(n), key=key)
        layout = tuple(sorted(order[:big_l]) + sorted(order[big_l:]))
        if layout not in out:
            out.append(layout)
    return out


def _account(circuit: Circuit, structures, big_l: int, initial_layout, stages, *,
             free: bool = True) -> DistributedPlan:
    """The plan with each stage's swaps split into data moves and free relabels: a swap of two
    qubits still |0> (no op has flipped them since the start, |0...0>) is free."""
    n = circuit.n_qubits
    zero = [True] * n
    layout = list(initial_layout)
    moves, relabels = [], []
    for stage in stages:
        m, r = [], []
        for p, g in stage.swaps:
            (r if free and zero[layout[p]] and zero[layout[g]] else m).append((p, g))
            layout[p], layout[g] = layout[g], layout[p]
        for op in stage.ops:
            gate = circuit.gates[op.gate]
            if op.kind == RELABEL:
                a, b = gate.qubits
                zero[a], zero[b] = zero[b], zero[a]
                a, b = op.positions
                layout[a], layout[b] = layout[b], layout[a]
            else:
                for q in _flipped(gate, structures[op.gate], op.kind):
                    zero[q] = False
        moves.append(tuple(m))
        relabels.append(tuple(r))
    return DistributedPlan(n, big_l, n - big_l, tuple(initial_layout), tuple(stages), tuple(moves), tuple(relabels))


def _widen(circuit: Circuit, structures, plan: DistributedPlan) -> DistributedPlan:
    """Try each exchange of fewer than g bits with more bits (the global qubits needed soonest in
    place of local ones its stage does not use), re-planning the rest; keep what lowers the cost."""
    big_l, n = plan.local_qubits, plan.n_qubits
    g = n - big_l
    tried = 0
    s = 0
    while s < len(plan.stages) and tried < MAX_WIDENED:
        if not plan.moves[s] or len(plan.stages[s].swaps) >= min(g, big_l):
            s += 1
            continue
        tried += 1
        better = _widened_at(circuit, structures, plan, s)
        if better is not None and _cost(better) < _cost(plan):
            plan = better
        s += 1
    return plan


def _widened_at(circuit: Circuit, structures, plan: DistributedPlan, s: int) -> DistributedPlan | None:
    """The plan with stage s's swaps widened and the rest re-planned (None: nothing to add)."""
    big_l, n = plan.local_qubits, plan.n_qubits
    stage = plan.stages[s]
    layout = list(stage.layout)  # after stage s's swaps
    done = {op.gate for st in plan.stages[:s] for op in st.ops}
    rest = [i for i in range(len(circuit.gates)) if i not in done]
    used = {q for op in stage.ops for q in _needed(circuit.gates[op.gate], structures[op.gate])}
    swapped = {b for pair in stage.swaps for b in pair}
    next_need = {}
    for i in rest:
        for q in _needed(circuit.gates[i], structures[i]):
            next_need.setdefault(q, i)
    far = len(circuit.gates)
    incoming = sorted((p for p in range(big_l, n) if p not in swapped and layout[p] in next_need),
                      key=lambda p: next_need[layout[p]])
    evictable = sorted((p for p in range(big_l) if p not in swapped and layout[p] not in used),
                       key=lambda p: -next_need.get(layout[p], far))
    extra = []
    for gp, lp in zip(incoming, evictable):
        if next_need.get(layout[lp], far) <= next_need[layout[gp]]:
            break  # the local qubit is needed no later than the one it would make room for
        extra.append((lp, gp))
    extra = extra[:max(0, min(n - big_l, big_l) - len(stage.swaps))]
    if not extra:
        return None
    for lp, gp in extra:
        layout[lp], layout[gp] = layout[gp], layout[lp]
    sub = Circuit(n, [circuit.gates[i] for i in rest])
    tail = plan_stages(sub, big_l, structures=[structures[i] for i in rest], initial_layout=layout)
    if not tail.stages or tail.stages[0].swaps:
        return None  # stage s applied nothing with the widened set (it cannot happen: its gates stay local)
    remap = [dataclasses.replace(st, ops=tuple(dataclasses.replace(op, gate=rest[op.gate]) for op in st.ops))
             for st in tail.stages]
    remap[0] = dataclasses.replace(remap[0], swaps=stage.swaps + tuple(extra))
    stages = plan.stages[:s] + tuple(remap)
    return _account(circuit, structures, big_l, plan.initial_layout, stages)
