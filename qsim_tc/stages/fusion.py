"""Gate fusion inside a stage: a stage's consecutive local gates merged into wider dense ops.

A stage (:mod:`qsim_tc.stages.plan`) applies its gates to a chunk that sits in fast memory, so
a gate costs its arithmetic more than its traffic, and a kernel's arithmetic rate grows with its
width: on the 2-core AVX-512 host the CPU stage kernels reach 53-67 GFMA/s a core at 3-4 targets
against ~27 at 2 (:mod:`qsim_tc.stages.cpu_kernels`). Two 2-qubit gates that share a qubit
cost 8 complex multiply-adds an amplitude apart or fused, so fusing them halves the time; three
on four qubits cost 12 apart and 16 fused, still faster at twice the rate.

Which gates join a run: those whose every qubit is local (a slot below L) and that mix
amplitudes (dense, permutation and controlled gates; a local control becomes a target of the
fused matrix); diagonal gates do not (the executors apply them by their own kernels, cheaper
than any dense op). A gate that does not join (a diagonal, a gate with
a global control or bit) ends the run, so order is kept without a dependency analysis; relabels
(SWAPs applied to the layout) move no amplitude and pass through. A run is fused with the greedy
convex fusion of :mod:`circuits.fusion`, at the width whose blocks cost the executor least by
its relative cost per width; a block of one gate keeps its op (and its structure: a controlled
gate stays controlled).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from circuits.circuit import Circuit
from circuits.fusion import block_matrix, plan
from circuits.gate import Gate
from qsim_tc.stages.plan import RELABEL, Stage, StageOp, StagePlan
from qsim_tc.stages.structure import CONTROLLED, DENSE, DIAGONAL, PERMUTATION, classify, controlled_matrix


def full_matrix(s) -> np.ndarray:
    """The 2^d matrix of a gate structure in its own bit order (controlled gates rebuilt)."""
    if s.kind == DIAGONAL:
        return np.diag(np.asarray(s.diagonal, dtype=np.complex128))
    if s.kind != CONTROLLED:
        return np.asarray(s.target_matrix, dtype=np.complex128)
    return controlled_matrix(s, range(s.n_bits))


def fuse_stage(stage: Stage, local_qubits: int, cost) -> Stage:
    """``stage`` with each run of local gates fused where the fused ops cost less.

    Args:
        stage: a stage of a :class:`~qsim_tc.stages.plan.StagePlan`.
        local_qubits: the plan's L (slots below it are local).
        cost: ``cost[k - 1]`` is the relative time of a k-target dense op of the executor, for
            k = 1 .. K; K is the widest fused block (K <= 1: the stage unchanged).

    Returns:
        A :class:`~qsim_tc.stages.plan.Stage` with the same swaps and layout. Each run is fused
        with the greatest width in 2 .. K whose blocks cost least in total (a block of one gate
        priced at the qubits it mixes), or left as it is when no width beats it. A fused op has
        kind ``"dense"`` (or what :func:`~qsim_tc.stages.structure.classify` finds its matrix to
        be), its sorted slots as positions and the circuit index of its first gate as ``gate``.
    """
    cost = tuple(float(c) for c in cost)
    if len(cost) <= 1:
        return stage
    out: list[StageOp] = []
    run: list[StageOp] = []

    def joins(op: StageOp) -> bool:
        return op.kind != DIAGONAL and len(op.positions) <= len(cost) and all(p < local_qubits for p in op.positions)

    def flush() -> None:
        out.extend(_fused(run, local_qubits, cost) if len(run) > 1 else run)
        run.clear()

    for op in stage.ops:
        if op.kind == RELABEL:
            out.append(op)  # moves no amplitude: the run goes on across it
        elif joins(op):
            run.append(op)
        else:
            flush()
            out.append(op)
    flush()
    if len(out) == len(stage.ops):
        return stage
    return replace(stage, ops=tuple(out))


def fuse_plan(stage_plan: StagePlan, cost) -> StagePlan:
    """Every stage of ``stage_plan`` through :func:`fuse_stage`."""
    if len(cost) <= 1:
        return stage_plan
    return replace(stage_plan, stages=tuple(fuse_stage(s, stage_plan.local_qubits, cost) for s in stage_plan.stages))


def _mixing(op: StageOp) -> int:
    """The qubits an op's kernel mixes (a controlled op's targets; every qubit otherwise)."""
    return len(op.structure.targets) if op.kind == CONTROLLED else len(op.positions)


def _fused(run: list[StageOp], local_qubits: int, cost: tuple[float, ...]) -> list[StageOp]:
    """One run as its cheapest fusion, in an order that keeps every dependency."""
    mini = Circuit(local_qubits, [Gate(full_matrix(op.structure), op.positions, "g", check_unitary=False)
                                  for op in run])
    best, best_blocks = sum(cost[_mixing(op) - 1] for op in run), None
    for width in range(2, len(cost) + 1):
        blocks = plan(mini, width)
        price = sum(cost[(_mixing(run[b.gates[0]]) if len(b.gates) == 1 else len(b.qubits)) - 1] for b in blocks)
        if price <= best * (1 - 1e-9):
            best, best_blocks = price, blocks
    if best_blocks is None:
        return list(run)
    ops: list[StageOp] = []
    for blk in best_blocks:
        if len(blk.gates) == 1:
            ops.append(run[blk.gates[0]])
            continue
        slots = tuple(sorted(blk.qubits))
        s = classify(block_matrix([mini.gates[i] for i in blk.gates], slots))
        kind = DENSE if s.kind == PERMUTATION and s.qubit_swap is not None else s.kind  # never a relabel
        ops.append(StageOp(run[blk.gates[0]].gate, kind, slots, s))
    return ops


def _mixed_positions(op: StageOp) -> tuple[int, ...]:
    """The slots an op flips: a controlled gate's targets, every slot of any other gate."""
    if op.kind == CONTROLLED:
        return tuple(op.positions[b] for b in op.structure.targets)
    return op.positions


def commuting_blocks(stage: Stage, local_qubits: int, width: int) -> Stage:
    """``stage`` with its local gates grouped into dense blocks of at most ``width`` qubits,
    moving diagonal gates past the gates they commute with.

    :func:`fuse_stage` fuses runs between diagonal gates. A QFT stage has a diagonal run after
    every Hadamard, so its Hadamards stay one-qubit ops there, each a sweep over the chunk. Here a
    diagonal gate waits (it commutes with every other diagonal and with every gate it shares no
    qubit with) until a gate that shares a qubit with it comes: it is then multiplied into the open
    block where its qubits fit (they meet the block's), or applied before the block where it
    shares no qubit with the block (a pre-phase), else the block is closed and it is applied
    before the next one. Disjoint gates share a block while it has room: three Hadamards become
    one 3-qubit op, which the complex128 stage kernel runs on its tensor cores.

    A controlled gate shares a qubit with a diagonal only through its targets: a phase on its
    control waits past it (they commute).

    One block is open at a time, in circuit order; a gate that does not fit closes it. Gates with
    a global qubit or control, or wider than ``width``, are not blocked: such a gate that shares
    no qubit with the open block and no target with a waiting diagonal is applied before the
    block, which stays open (Toffolis with global controls among one-qubit gates), else it closes
    the block; diagonal gates that nothing follows in the stage end it, in one run.

    Args:
        stage: a stage of a :class:`~qsim_tc.stages.plan.StagePlan`.
        local_qubits: the plan's L.
        width: the widest block (>= 1).

    Returns:
        A :class:`~qsim_tc.stages.plan.Stage` with the same swaps and layout that applies the same
        unitary. A block of one gate keeps its op; a block of several is one op of kind
        ``"dense"`` (or what :func:`~qsim_tc.stages.structure.classify` finds its matrix to be) on
        its sorted slots, named by its first gate. Relabels keep their place among the emitted ops.
    """
    out: list[StageOp] = []
    waiting: list[StageOp] = []  # diagonal gates not applied yet (after the open block)
    pre: list[StageOp] = []  # diagonal (and unblocked commuting) gates applied before the open block
    block: list[StageOp] = []
    qubits: set[int] = set()

    def close() -> None:
        out.extend(pre)
        pre.clear()
        if len(block) == 1:
            out.append(block[0])
        elif block:
            slots = tuple(sorted(qubits))
            gates = [Gate(full_matrix(op.structure), op.positions, "g", check_unitary=False) for op in block]
            s = classify(block_matrix(gates, slots))
            kind = DENSE if s.kind == PERMUTATION and s.qubit_swap is not None else s.kind  # never a relabel
            first = next(op for op in block if op.kind != DIAGONAL)
            out.append(StageOp(first.gate, kind, slots, s))
        block.clear()
        qubits.clear()

    for op in stage.ops:
        if op.kind == RELABEL:
            out.append(op)
            continue
        if op.kind == DIAGONAL:
            waiting.append(op)
            continue
        mine = set(op.positions)
        mixed = set(_mixed_positions(op))  # a diagonal commutes with a controlled gate on its controls
        touch = [d for d in waiting if mixed & set(d.positions)]
        waiting[:] = [d for d in waiting if not mixed & set(d.positions)]
        if len(mine) > width or max(mine) >= local_qubits:
            if block and not touch and not mine & qubits:
                # it commutes with the open block (no shared qubit) and with every waiting diagonal:
                # applied before the block, which stays open for the gates after it
                pre.append(op)
                continue
            close()
            out.extend(touch)
            out.append(op)
            continue
        inside = [d for d in touch if qubits & set(d.positions)]
        grown = qubits | mine | {p for d in inside for p in d.positions}
        if block and len(grown) <= width and max(grown) < local_qubits:
            pre.extend(d for d in touch if not qubits & set(d.positions))  # commute with the block
            block.extend(inside)
            qubits.update(grown)
        else:
            close()
            grown = mine | {p for d in touch for p in d.positions}
            if len(grown) <= width and max(grown) < local_qubits:
                block.extend(touch)
                qubits.update(grown)
            else:
                pre.extend(touch)
                qubits.update(mine)
        block.append(op)
    close()
    out.extend(waiting)
    return replace(stage, ops=tuple(out))
