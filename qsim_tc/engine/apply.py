"""Applying one gate: turn ``U`` on target qubits into one GEMM (or a small-gate kernel).

With targets on physical bits [t, t+d) of an N-qubit state, the state is a (H, 2^d, L) array,
H = 2^(N-t-d), L = 2^t, and the gate is ``U @ S[h]`` for every h. These need no transpose:

* bottom (t = 0):      S (2^(N-d), 2^d) @ U^T     -- one GEMM, m huge, k = n = 2^d
* bottom, rotating:    U @ S^T (2^d, 2^(N-d))     -- the same product written with the targets on
                                                    top; the layout records the rotation
* top (t + d = N):     U @ S (2^d, 2^(N-d))      -- one GEMM
* middle, L large:     U @ S[h], batched          -- one strided-batched GEMM

Targets that are not contiguous, or a middle block the batch cannot serve, are first brought to
the bottom by a permutation of the state, recorded in the lazy :class:`~qsim_tc.layout.Layout`
(the permutation is not undone until the state is read). On the GPU, gates of 1-6 qubits take
an in-place kernel instead (:mod:`qsim_tc.engine.small_gate`) when the method allows it and the
measured policy prefers it.

Two engines run these products. The default, :mod:`~qsim_tc.engine.bounded`, keeps no second
state: each product runs on blocks through a workspace of bounded size and every block is
written back before the next is read, and permutations are index-bit swaps in place. The
double-buffer engine (``PhysicalState.double_buffer``, below) is the one it replaced: one GEMM
over the whole state into a state-sized spare buffer, and permutations into that buffer; it is
kept to compare against and for states small enough that twice their size fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gemm
from circuits.gate import reorder_bits
from qsim_tc import memory
from qsim_tc.engine.bounded import apply_bounded, plan_bounded
from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.small_gate.policy import select as select_kernel
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.transfer import to_device

# A batched GEMM whose blocks are narrower than this is slower than permuting the state first
# and applying at the bottom (cuBLAS and OpenBLAS both lose efficiency on skinny blocks).
MIN_BATCHED_L = {"cpu": 1 << 4, "gpu": 1 << 5}
# numpy runs a batched matmul as one BLAS call per batch; thousands of small multithreaded calls
# are slow and, on a busy machine, erratic (each call synchronises the BLAS threads). The CPU
# takes the batched path only for a few large batches and permutes otherwise.
MAX_BATCHES = {"cpu": 1 << 6, "gpu": 1 << 62}
# Targets at the bottom can also be applied as U @ S^T, which writes the result with the targets
# moved to the top (a free layout rotation), the rest of the layout shifted down by d.
# ROTATE_D: the sizes that take it. cuBLAS runs that orientation (m = 2^(N-d), n = 2^d) faster
# than S @ U^T for most d (28 qubits, H200: d = 4 2.7 ms against 7.0, d = 10 45.6 against 53.2;
# d = 7, 8, 11 were 4-10% slower rotated). On the CPU it costs about what the plain product does
# from d = 4 on (24 qubits: d = 4 53 ms against 45, d >= 5 within 5%), and when the next gate
# sits on the block just above (a brickwork layer) that block arrives at the bottom with no
# permutation (a 24-qubit brickwork: 9 permutations instead of 27, 3.6-3.8 s against 4.5-5.0).
ROTATE_D = {"cpu": frozenset(range(4, 64)), "gpu": frozenset({4, 5, 6, 9, 10, 12})}


@dataclass
class ApplyInfo:
    """What one gate application did."""

    path: str  # Plan.path: "kernel", "bottom", "bottom-rotate", "top", "batched", "permute+bottom|rotate|top|batched"
    method: str
    n_targets: int
    physical_targets: tuple
    report: Any = None  # gemm.Report of the product (the last block's), if a GEMM ran
    timer: Any = field(default=None, repr=False)
    blocks: int = 0  # blocks of the state the bounded engine wrote back (0: kernel or double buffer)
    choices: tuple = ()  # the distinct Report.choices of every block's product (empty: report's only)

    @property
    def block_choices(self) -> tuple:
        """The choices of every product the gate ran (one dict a distinct choice; ``({},)`` for a
        small-gate kernel, which decides nothing)."""
        if self.choices:
            return self.choices
        return (self.report.choices,) if self.report is not None else ({},)

    @property
    def time_ms(self) -> float:
        return self.timer.result().get("apply", 0.0) if self.timer is not None else 0.0

    def to_dict(self) -> dict:
        out = {
            "path": self.path,
            "method": self.method,
            "n_targets": self.n_targets,
            "physical_targets": list(self.physical_targets),
            "time_ms": self.time_ms,
            "blocks": self.blocks,
        }
        if self.report is not None:
            out["report"] = self.report.to_dict()
        return out


@dataclass(frozen=True)
class Plan:
    """How one gate is applied.

    Attributes:
        path: "kernel", "bottom", "bottom-rotate", "top", "batched", "permute+bottom" or
            "permute+rotate".
        order: the targets' indices sorted by physical bit (to reorder the matrix's bits).
        permute_to: the layout to permute the state into before the product, or None.
        final: the layout after the gate, or None when it does not change.
        rotate: the product is ``U @ S^T`` (targets move from the bottom to the top).
    """

    path: str
    order: list
    permute_to: list | None = None
    final: list | None = None
    rotate: bool = False


def plan_targets(layout, qubits, n_qubits: int, device_name: str, use_kernel: bool, next_qubits=None,
                 batched: bool = True) -> Plan:
    """Decide how to apply a gate on logical ``qubits`` (see the module docstring).

    Args:
        batched: whether the method's batched products are fast (``gemm.Method.batched_products``);
            if not, contiguous middle targets are moved to the bottom instead.
        next_qubits: targets of the gate that follows, if known. When this gate needs a
            permutation anyway, the next gate's targets are placed where it will need no
            permutation of its own: on top (a plain GEMM), or at the bottom after a rotation.
    """
    d = len(qubits)
    pos = [layout.pos[q] for q in qubits]
    order = sorted(range(d), key=lambda i: pos[i])
    if use_kernel:
        return Plan("kernel", order)
    sorted_pos = [pos[i] for i in order]
    targets_sorted = [qubits[i] for i in order]
    targets = set(qubits)
    start = max(qubits) + 1
    nxt = set(next_qubits) if next_qubits is not None else set()
    # the next gate acts on the block just above this one (cyclically): a brickwork layer
    chained = bool(nxt) and sorted(nxt) == sorted((start + i) % n_qubits for i in range(len(nxt))) \
        and targets.isdisjoint(nxt)
    rotate = d < n_qubits and d in ROTATE_D[device_name]
    t = sorted_pos[0]
    if sorted_pos[-1] - t == d - 1:  # contiguous
        if t == 0:
            if rotate:
                return Plan("bottom-rotate", order, None, [q for q in layout.phys if q not in targets] + targets_sorted,
                            rotate=True)
            return Plan("bottom", order)
        if t + d == n_qubits:
            return Plan("top", order)
        batches = 1 << (n_qubits - t - d)
        if batched and (1 << t) >= MIN_BATCHED_L[device_name] and batches <= MAX_BATCHES[device_name]:
            return Plan("batched", order)
    # bring the targets to the bottom in their current physical order, keep the rest in order
    rest = [q for q in layout.phys if q not in targets]
    if rotate and chained:
        # after the rotation the rest moves down by d; in cyclic logical order from just above
        # these targets, the following blocks of the layer arrive at the bottom one by one.
        # Only then: for gates on random qubits that order cuts the bits into short runs and
        # makes the permutation a slow copy (quantum volume, 24 qubits: 12.7 s against 8.9 s)
        rest.sort(key=lambda q: (q - start) % n_qubits)
    if nxt and targets.isdisjoint(nxt) and len(nxt) + d <= n_qubits:
        others = [q for q in rest if q not in nxt]
        nxt_sorted = sorted(nxt, key=lambda q: layout.pos[q])
        rest = nxt_sorted + others if rotate else others + nxt_sorted
    perm = targets_sorted + rest
    if rotate:
        return Plan("permute+rotate", order, perm, rest + targets_sorted, rotate=True)
    return Plan("permute+bottom", order, perm, perm)


@dataclass(frozen=True)
class GateRequest:
    """One gate for the engine, validated at the public boundary (:meth:`StateVector.apply`).

    Attributes:
        matrix: host complex128 (2^d, 2^d); the first listed qubit is the index's low bit.
        qubits: the d distinct logical targets.
        method: the ``gemm.Method`` computing the product; ``options`` already checked by it.
        options: keyword options of every ``gemm.matmul`` call.
        small_gate_kernel: None (the measured default policy), True (require a kernel) or False.
        next_qubits: targets of the gate applied next, if known (a layout hint only).
    """

    matrix: np.ndarray
    qubits: tuple
    method: Any
    options: dict = field(default_factory=dict)
    small_gate_kernel: bool | None = None
    next_qubits: tuple | None = None


def apply_gate(state: PhysicalState, gate: GateRequest) -> ApplyInfo:
    """Apply ``gate`` to ``state`` in place: a small-gate kernel or a GEMM (module docstring).

    The default engine runs the GEMM on blocks through the state's bounded workspace, with
    index-bit swaps in place (:mod:`qsim_tc.engine.bounded`). With ``state.double_buffer`` the
    old engine runs: methods that accept ``out=`` write into ``state.spare`` (or, after a
    permutation into it, back into ``state.data``) and the two buffers swap roles.

    Returns:
        ApplyInfo: the path taken, the GEMM report, the time, the blocks written.

    Raises:
        ValueError: ``small_gate_kernel=True`` cannot be honoured.
        InsufficientMemoryError: the GEMM's output and workspace do not fit (nothing changed).
        StateInvalidError: the state was already invalid, or the gate failed after overwriting
            part of it (the state is marked invalid).
        Whatever the GEMM method raises before the state was written; the state is then as it
        was (in the bounded engine possibly with index bits swapped, which the layout records).
    """
    state.check_valid()
    data, layout, xp = state.data, state.layout, state.xp
    n_qubits, qubits, method = state.n_qubits, gate.qubits, gate.method
    d = len(qubits)
    positions = sorted(layout.pos[q] for q in qubits)
    small_kernel = select_kernel(method, state.device, gate.small_gate_kernel, n_qubits, positions,
                                 data.dtype.itemsize)
    if small_kernel is None and state.double_buffer:
        return _apply_double_buffer(state, gate)
    timer = gemm.timing.StageTimer(xp)
    dev = state.device.name
    if small_kernel is not None:
        order = sorted(range(d), key=lambda i: layout.pos[qubits[i]])
        u_host = reorder_bits(gate.matrix, order).astype(data.dtype, copy=False)
        phys = tuple(layout.pos[qubits[i]] for i in order)
        with timer.stage("apply"):
            out = small_kernel(data, n_qubits, u_host, phys)
        state.data = out
        return ApplyInfo("kernel", "kernel", d, phys, None, timer)
    plan = plan_bounded(layout, qubits, n_qubits, dev, MIN_BATCHED_L[dev], MAX_BATCHES[dev], gate.next_qubits)
    u_host = reorder_bits(gate.matrix, plan.order).astype(data.dtype, copy=False)
    with timer.stage("apply"):
        report, blocks, choices = apply_bounded(state, gate, plan, u_host)
    phys_t = tuple(sorted(state.layout.pos[q] for q in qubits))
    return ApplyInfo(plan.path, method.name, d, phys_t, report, timer, blocks, choices)


def _apply_double_buffer(state: PhysicalState, gate: GateRequest) -> ApplyInfo:
    """The double-buffer engine: one GEMM over the whole state into a state-sized spare buffer.

    Raises:
        As :func:`apply_gate`; on any error ``state`` is left as it was (its data is restored if
        it had been written).
    """
    data, layout, xp = state.data, state.layout, state.xp
    n_qubits, qubits, method = state.n_qubits, gate.qubits, gate.method
    d = len(qubits)
    extra = memory.gate_extra_bytes(method, n_qubits, d, data.dtype, gate.options, double_buffer=True,
                                    spare_allocated=state.spare is not None, device=state.device.name)
    memory.check_fits(f"applying a {d}-qubit gate with {method.name!r}", extra, state.device)
    if state.spare is None and "out" in method.options:
        state.spare = xp.empty_like(data)
    spare = state.spare
    plan = plan_targets(layout, qubits, n_qubits, state.device.name, False, gate.next_qubits,
                        batched=method.batched_products)
    u_host = reorder_bits(gate.matrix, plan.order).astype(data.dtype, copy=False)
    timer = gemm.timing.StageTimer(xp)
    report = None
    dim = 1 << d
    with timer.stage("apply"):
        takes_out = "out" in method.options and spare is not None
        u = to_device(np.ascontiguousarray(u_host), xp)
        src, free, t = data, spare, min(layout.pos[q] for q in qubits)
        if plan.permute_to is not None:
            src = permute_bits(data, n_qubits, plan.permute_to, layout.phys, xp, out=spare if takes_out else None)
            free = data if takes_out else None
            t = 0
        if plan.rotate:
            a, b = u, src.reshape(-1, dim).T  # result (2^d, 2^(N-d)): targets on top
        elif t == 0:
            a, b = src.reshape(-1, dim), u.T
        elif t + d == n_qubits:
            a, b = u, src.reshape(dim, -1)
        else:
            a, b = u, src.reshape(-1, dim, 1 << t)
        kw = dict(gate.options)
        if takes_out:
            shape = (a.shape[-2], b.shape[-1]) if a.ndim == b.ndim == 2 else (b.shape[0], a.shape[0], b.shape[2])
            kw["out"] = free.reshape(shape)
        try:
            out, report = gemm.matmul(a, b, method=method.name, return_report=True, **kw)
        except BaseException:
            if takes_out and free is data:  # the permuted copy holds the state: put it back
                xp.copyto(data, permute_bits(src, n_qubits, layout.phys, plan.permute_to, xp))
            raise
        out = out.reshape(-1)
        if out.dtype != data.dtype:
            out = out.astype(data.dtype)
        if takes_out:
            spare = src  # the GEMM's input buffer is free now
    final = plan.final
    phys_t = tuple(sorted((final or layout.phys).index(q) for q in qubits))
    info = ApplyInfo(plan.path, method.name, d, phys_t, report, timer)
    state.data, state.spare = out, spare
    if final is not None:
        layout.set(final)
    return info


def layout_after(state: PhysicalState, qubits, next_qubits, method, small_gate_kernel=None):
    """The layout the double-buffer engine (``state.double_buffer``) leaves after applying a gate
    on logical ``qubits`` with ``method`` (a small-gate kernel keeps it)."""
    positions = sorted(state.layout.pos[q] for q in qubits)
    if select_kernel(method, state.device, small_gate_kernel, state.n_qubits, positions,
                     state.data.dtype.itemsize) is not None:
        return state.layout
    plan = plan_targets(state.layout, qubits, state.n_qubits, state.device.name, False, next_qubits,
                        batched=method.batched_products)
    after = state.layout.copy()
    if plan.final is not None:
        after.set(plan.final)
    return after


def predict_layout_path(layout, qubits, n_qubits: int, device_name: str) -> str:
    """The GEMM path the double-buffer engine takes for ``qubits`` from ``layout`` (the gate after
    them unknown)."""
    return plan_targets(layout, qubits, n_qubits, device_name, False, None).path


def predict_path(state: PhysicalState, qubits, next_qubits=None) -> str:
    """The GEMM path :func:`apply_gate` takes for a gate on logical ``qubits`` of ``state`` now
    (the engine ``state`` uses; small-gate kernels not considered), without applying it."""
    dev = state.device.name
    if state.double_buffer:
        return plan_targets(state.layout, qubits, state.n_qubits, dev, False, next_qubits).path
    return plan_bounded(state.layout, qubits, state.n_qubits, dev, MIN_BATCHED_L[dev], MAX_BATCHES[dev],
                        next_qubits).path
