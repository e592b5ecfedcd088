"""Whether a circuit runs as stages (:mod:`qsim_tc.stages.plan`, one pass over the state per stage)
or gate by gate, and the stage plan when it does.

The GPU stage kernel (:mod:`qsim_tc.stages.kernel`) applies gates that mix at most
``max_dense`` qubits (3 for complex128, 4 for complex64) among the local ones; diagonal gates,
controlled gates' controls and SWAPs cost it no local qubit. A circuit runs as stages when every
gate fits and the model below predicts the stages faster than the gate-at-a-time path (priced by
the same cost table fusion uses, :func:`qsim_tc.plan.fusion.choose_fusion`).

Stage model, in reference passes (``REFERENCE_PASS_MS``: one complex128 read+write of 2^28
amplitudes on an H200, scaled by 2^(n - 28) and by the GPU's SM count times clock against the
H100 / H200's): a stage costs ``STAGE_PASSES`` and each op of the stage kernel's program (after
its in-stage fusion, :func:`qsim_tc.stages.program.build_program`) its weight there
(``OP_PASSES``, :func:`~qsim_tc.stages.program.op_passes`). The stage kernel is bound by its
SMs: an H100 and an H200 ran the same programs within 1% of each other while their passes differ
1.45x, so the unit is not the device's own pass. The gate path's estimate (the fusion planner's
sum of the cost table's gate times) came in 13-33% under the measured runs on both GPUs, so the
comparison scales it by ``GATE_PATH_BIAS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from circuits import Circuit
from qsim_tc.stages.plan import StagePlan, plan_stages
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL, classify

# L by itemsize: a block's chunk of 2^L amplitudes is 64 KiB of shared memory either way. On an
# H200 (28 qubits, benchmarks/results/stages_gpu_planner_h200.json) complex64 at L = 13 against 12:
# QFT 77 / 87 ms, QuantumVolume 201 / 244, brickwork(28, 2, 20) 104 / 119; complex128 at L = 13
# (128 KiB, one block an SM) was 1.6-2.1x slower than at 12
LOCAL_QUBITS = {16: 12, 8: 13}
# CPU: L by dtype (the executor's chunks, 4 MiB of complex64 and 2 MiB of complex128, keep 6 and 5
# lane bits below them), and the widest gate
# its kernels were measured faster than the gate-at-a-time path on. At 24 qubits on 2 cores,
# fuse="auto" against stages: QuantumVolume 5.31 / 1.72 s (complex64), 7.58 / 2.95 s (complex128);
# brickwork(24, 4, 10) 1.77 / 1.68 s (complex64) and, since the wide-gate kernel copies its input
# runs to a padded block, 2.81 / 2.15 s (complex128; 2.87 / 2.99 s before)
CPU_LOCAL_QUBITS = {8: 13, 16: 12}
# complex64 also plans with L = 15 (4 lane bits: one AVX-512 vector of float32 a run) and takes that
# plan where it has at most CPU_WIDE_FRACTION of the stages: fewer passes, each gate's runs
# shorter. 2 cores (Xeon, 2 MiB L2 a core), complex64, L = 13 / 15: QuantumVolume 22 qubits 16 / 12
# stages 0.341 / 0.279 s, 24 qubits 19 / 15 stages 1.49 / 1.29 s, 25 qubits 2.91 / 2.68 s; random
# pairings (tests' _random_pairs) 22 qubits 16 / 14 stages 0.332 / 0.312 s, 24 qubits 19 / 16 1.45 /
# 1.36 s; QFT-24 and brickwork(24, 4, 10) (3 and 6 stages either way) 0.52 / 0.61 and 0.70 / 0.73
# s, so they keep 13. complex128 gained nothing from a wider L (QV-24: 22 / 19 / 18 stages at L =
# 12 / 13 / 14, 2.49 / 2.55 / 2.68 s at 2 MiB chunks; 2.70 / 2.57 s at L = 13 / 14 in 4 MiB).
CPU_WIDE_LOCAL_QUBITS = {8: 15}
CPU_WIDE_FRACTION = 0.9
CPU_WIDE_LANE_BITS = 4  # the wider plan needs this many lane bits below its L (one vector of float32)
CPU_MAX_WIDTH = {8: 4, 16: 4}
MMA_FUSE = 3  # the widest dense op the tensor-core kernels take (program.MMA_K)
KEEP_LOW = 3  # 8 consecutive amplitudes per read: whole 128-byte lines of complex128
# the kept low bits rotate between stages (plan_stages' rotate_low) by amplitude size. At 28 qubits
# on an H100 (stage_rotate_h100.json), complex128: QuantumVolume(28, seed=7) 36 -> 31 stages,
# 159.5 -> 149.2 ms, brickwork(28, 2, 20) 14 -> 10 stages, 82.6 -> 76.4 ms, QFT-28 33.5 -> 31.6 ms.
# complex64 needs fewer stages too (31 -> 27, 12 -> 8) but ran slower (143.8 -> 146.2, 81.4 ->
# 83.3 ms): its chunk has no swizzle, and a rotating store's reads then meet up to 16 to a bank.
# A store whose warps wrote 32-byte sectors instead of 64-byte runs, reading at most 4 to a bank,
# was slower still (149.2, 89.9 ms; stage_rotate_h100.json).
ROTATE_LOW = {16: True, 8: False}
# the model's unit (see the module docstring) and a stage's cost in it by amplitude size, fitted
# with program.OP_PASSES to every stage of 5 (complex128) and 6 (complex64) circuits' programs
# at 28 qubits on an H200 (python -m benchmarks.bench.stage_fit, stage_fit_h200.json). A complex64
# stage costs half a pass beyond its ops: its FMA-loop ops overlap the other blocks' copies
REFERENCE_PASS_MS = 2.05
REFERENCE_SM_GHZ = 132 * 1.98  # SMs x boost clock of the H100 / H200 SXM the weights were fitted on
STAGE_PASSES = {16: 1.04, 8: 0.44}
# a stage of a complex64 state on the complex128 programs (decide's ``wide``; its ops weigh as
# complex128's): half complex128's traffic, plus the widening and rounding in shared memory. Fitted
# (least squares over stages) to whole programs at 28 qubits on an H200 against complex128's model
# (stage_wide_c64_h200.json): QFT 27.9 ms measured (29.8 predicted), QuantumVolume 115.6 (116.2),
# brickwork(28, 2, 20) 59.6 (57.0). The stage is bound on the chip (shared memory, tensor cores),
# not by memory: complex128 ran the same programs in 29.9 / 124.1 / 60.3 ms. QFT keeps complex64's
# own programs (28.2 predicted; 28.8 measured)
WIDE_STAGE_PASSES = 0.83
# the gate path's measured time over its estimate: 1.13-1.33 in 12 runs (QFT, quantum volume and
# brickwork(28, 2, 20), both precisions, H100 and H200)
GATE_PATH_BIAS = 1.2


@dataclass(frozen=True)
class StageDecision:
    """The choice for one circuit.

    Attributes:
        use: run it as stages.
        why: one line for reports.
        plan: the stage plan (None when a gate does not fit the kernel).
        predicted_ms: the stage model's time (None without a plan).
        gate_ms: the gate-at-a-time path's predicted time it was compared with.
    """

    use: bool
    why: str
    plan: StagePlan | None = None
    predicted_ms: float | None = None
    gate_ms: float | None = None
    keep_low: int = 0
    program: object = field(default=None, repr=False)  # the plan's stage program, built for the model
    wide: bool = False  # a complex64 state on the complex128 program (kernel.program_dtype)

    def to_dict(self) -> dict:
        out = {"use": self.use, "why": self.why, "predicted_ms": self.predicted_ms, "gate_ms": self.gate_ms,
               "wide": self.wide}
        if self.plan is not None:
            out.update(self.plan.summary())
        return out


def mixing_width(structure) -> int:
    """The local qubits a gate of this structure mixes in the kernel (0 for diagonals)."""
    if structure.kind == DIAGONAL:
        return 0
    if structure.kind == CONTROLLED:
        return len(structure.targets)
    return structure.n_bits


def reference_pass_ms(n_qubits: int, sm_ghz: float | None = None) -> float:
    """The stage model's unit for ``n_qubits`` on a GPU of ``sm_ghz`` (SM count x clock in GHz;
    None: the H100 / H200 the weights were fitted on)."""
    return REFERENCE_PASS_MS * 2.0 ** (n_qubits - 28) * (1.0 if not sm_ghz else REFERENCE_SM_GHZ / sm_ghz)


def decide(circuit: Circuit, max_dense: int, pass_ms: float, gate_ms: float, *, itemsize: int = 16,
           local_qubits: int | None = None, keep_low: int = KEEP_LOW, block_qubits: int | None = None,
           widen: bool | None = None, rotate_low: bool | None = None,
           wide: tuple[int, int] | None = None) -> StageDecision:
    """Plan ``circuit`` as stages if every gate fits, and compare the model with ``gate_ms``.

    Args:
        circuit: the circuit (unfused).
        max_dense: the widest dense op the kernel applies for the state's dtype (also the
            in-stage fusion width).
        pass_ms: the model's unit for this circuit and GPU (:func:`reference_pass_ms`); 1.0 gives
            the prediction in reference passes.
        gate_ms: the predicted time of the gate-at-a-time path.
        itemsize: bytes of an amplitude (16 complex128, 8 complex64).
        local_qubits, keep_low: the stage shape (L, C; L by default :data:`LOCAL_QUBITS` of
            ``itemsize``); C shrinks for gates that need more of L.
        block_qubits: the width of the program's commuting blocks (default: ``max_dense``).
        widen: the program's 2-qubit ops become 3-qubit ones (default by ``itemsize``:
            :func:`~qsim_tc.stages.program.build_program`).
        rotate_low: the kept low bits' qubits change between stages
            (:func:`~qsim_tc.stages.plan.plan_stages`; default by ``itemsize``: :data:`ROTATE_LOW`).
        wide: complex64 only: (max_dense, block_qubits) of the complex128 programs where the GPU
            can run a complex64 state on them (tensor-core ops, widened in shared memory); that
            form (complex128's shape, pairs and rotation, at least one kept low bit) is priced too
            and taken where the model prefers it (``StageDecision.wide``).
    """
    n = circuit.n_qubits
    structures = [classify(g.matrix) for g in circuit.gates]
    if any(s.kind == DIAGONAL and np.abs(np.abs(s.diagonal) - 1.0).max() > 1e-9 for s in structures):
        return StageDecision(False, "a diagonal gate has entries of modulus other than 1 (the stage kernel "
                                    "applies phases)", gate_ms=gate_ms)
    widest = max((mixing_width(s) for s in structures), default=0)
    big_l = min(LOCAL_QUBITS.get(itemsize, 12) if local_qubits is None else local_qubits, n)
    if widest > min(max_dense, big_l):
        return StageDecision(False, f"a gate mixes {widest} qubits; the stage kernel takes at most "
                                    f"{min(max_dense, big_l)}", gate_ms=gate_ms)
    own = _priced(circuit, structures, widest, max_dense, itemsize, big_l, keep_low, block_qubits, widen,
                  ROTATE_LOW.get(itemsize, False) if rotate_low is None else rotate_low, STAGE_PASSES[itemsize])
    best, is_wide = own, False
    if wide is not None and itemsize == 8 and local_qubits is None:
        wide_l = min(LOCAL_QUBITS[16], n)
        if widest <= min(wide[0], wide_l) and min(keep_low, wide_l - max(widest, 1)) >= 1:
            alt = _priced(circuit, structures, widest, wide[0], 16, wide_l, keep_low, wide[1], True,
                          ROTATE_LOW[16], WIDE_STAGE_PASSES)
            if alt[3] < own[3]:
                best, is_wide = alt, True
    plan, program, keep, passes = best
    predicted = passes * pass_ms
    use = predicted < gate_ms * GATE_PATH_BIAS
    form = ""
    if is_wide:
        form = " (complex128 programs, widened)"
    elif itemsize == 8 and widen:
        form = " (2- and 3-qubit ops on the FP16 tensor cores, exact leading product)"
    why = (f"{plan.n_stages} stages, {program.n_ops} ops{form}: "
           f"predicted {predicted:.3g} ms against {gate_ms:.3g} ms gate by gate (x{GATE_PATH_BIAS} measured)"
           + ("" if use else ", which is expected faster"))
    return StageDecision(use, why, plan, float(predicted), float(gate_ms), keep, program, is_wide)


def fuse_width(max_dense: int, widest: int, tensor: bool) -> int:
    """The in-stage fusion width of a program: ``max_dense``, or where its ops run on the tensor
    cores (``tensor``, the program's ``widen``), at most the widest tensor-core op (3) unless a
    gate is wider: a fused 4-qubit op runs on the FMA loops, which cost a complex64 stage 0.46
    reference passes an op against 0.26 for a 3-qubit one before the tensor cores took those."""
    return max(min(max_dense, MMA_FUSE), widest) if tensor else max_dense


def _priced(circuit: Circuit, structures, widest: int, max_dense: int, itemsize: int, big_l: int, keep_low: int,
            block_qubits: int | None, widen: bool | None, rotate: bool, stage_passes: float):
    """One stage form of ``circuit``: (plan, program, kept low bits, predicted reference passes),
    the program's ops priced at ``itemsize``'s weights."""
    from qsim_tc.stages.program import build_program, op_passes  # noqa: PLC0415

    keep = max(0, min(keep_low, big_l - max(widest, 1)))
    plan = plan_stages(circuit, big_l, structures=structures, keep_low=keep, rotate_low=rotate)
    program = build_program(plan, keep, fuse_qubits=fuse_width(max_dense, widest, widen),
                            block_qubits=block_qubits, itemsize=itemsize, widen=widen)
    passes = stage_passes * plan.n_stages + sum(op_passes(stage.ops, itemsize, bool(widen), big_l)
                                                for stage in program.stages)
    return plan, program, keep, passes


def decide_cpu(circuit: Circuit, itemsize: int, *, always: bool = False) -> StageDecision:
    """The CPU's choice: stages when every gate mixes at most ``CPU_MAX_WIDTH`` qubits (where the
    compiled stage executor was measured faster than the gate-at-a-time path); with ``always``,
    whenever every gate fits the local qubits."""
    n = circuit.n_qubits
    big_l = min(CPU_LOCAL_QUBITS[itemsize], n)
    structures = [classify(g.matrix) for g in circuit.gates]
    widest = max((mixing_width(s) for s in structures), default=0)
    limit = big_l if always else min(CPU_MAX_WIDTH[itemsize], big_l)
    if widest > limit:
        return StageDecision(False, f"a gate mixes {widest} qubits; stages run on the CPU up to {limit}")
    plan = plan_stages(circuit, big_l, structures=structures)
    wide = CPU_WIDE_LOCAL_QUBITS.get(itemsize, big_l)
    # (a state narrower than L + lanes is one chunk, whose lanes are fewer than the vector)
    if wide > big_l and n >= wide + CPU_WIDE_LANE_BITS and plan.n_stages > 1:
        alt = plan_stages(circuit, wide, structures=structures)
        if alt.n_stages <= CPU_WIDE_FRACTION * plan.n_stages:
            plan = alt
    return StageDecision(True, f"{plan.n_stages} stages of {plan.local_qubits} local qubits (CPU: every gate mixes "
                               f"at most {limit} qubits)", plan)
