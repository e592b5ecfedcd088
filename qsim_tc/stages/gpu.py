"""Runs a stage plan on a GPU :class:`~qsim_tc.engine.storage.PhysicalState`: the plan's program
(:mod:`qsim_tc.stages.program`) one kernel launch per stage, in place; the state's layout
becomes the program's final storage layout (no amplitude moves for the plan's swaps)."""

from __future__ import annotations

import numpy as np

from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages.kernel import block_qubits, max_dense, program_dtype, run_stage, tensor_core_ops, upload
from qsim_tc.stages.plan import StagePlan
from qsim_tc.stages.program import build_program


def run_plan(phys: PhysicalState, plan: StagePlan, *, fuse_qubits: int | None = None, program=None,
             on_stage=None, fresh: bool = False, wide: bool = False, pools=None) -> int:
    """Apply ``plan`` (made from the state's current layout) to ``phys``; return the stages run.

    ``fuse_qubits``: the in-stage fusion width (default: the kernel's widest dense op for the
    state's dtype; the commuting blocks' width is the kernel's ``block_qubits``); ``program``: the
    plan's program when already built (with that width); ``on_stage(done, total)``: called after
    each stage is launched. ``fresh``: ``phys`` holds no amplitudes yet and stands for |0...0>
    (in its layout): the first stage makes its chunks instead of reading them. ``wide``: a complex64
    state runs a complex128 program (widened in the kernel's shared memory:
    :func:`~qsim_tc.stages.kernel.program_dtype`). ``pools``: ``program`` already on the
    device for this state (:func:`~qsim_tc.stages.kernel.upload`, with ``program``).

    The circuit's global phase is applied: folded into an op's matrix where the program allows
    (``StageProgram.global_phase`` is then 0), else as a pass after the last stage. A launch that
    fails after the first stage leaves a state that is neither the input nor the result: it is
    marked invalid and StateInvalidError raised.

    Raises:
        ValueError: the plan is not for the state's width or layout.
        StateInvalidError: a stage failed after another had written the state.
    """
    phys.check_valid()
    if plan.n_qubits != phys.n_qubits:
        raise ValueError(f"the plan is for {plan.n_qubits} qubits, the state has {phys.n_qubits}")
    if list(plan.initial_layout) != list(phys.layout.phys):
        raise ValueError("the plan was made for another layout of the state")
    compute = program_dtype(phys.data.dtype, wide)
    if program is None:
        if fuse_qubits is None:
            fuse_qubits = max_dense(compute)
        program = build_program(plan, _kept_low_bits(plan), fuse_qubits=fuse_qubits,
                                block_qubits=block_qubits(compute), itemsize=compute.itemsize,
                                widen=tensor_core_ops(compute))
    if fresh and not program.stages:
        phys.data.fill(0)
        phys.data[0] = 1
    if pools is None:
        pools = upload(program, phys.data.dtype, wide)
    elif pools.wide != wide:
        raise ValueError(f"the pools were uploaded with wide={pools.wide}, the run asks wide={wide}")
    for i in range(len(program.stages)):
        try:
            run_stage(phys.data, program, i, pools, fresh=fresh and i == 0)
        except BaseException as exc:
            if i == 0 and isinstance(exc, Exception):  # nothing written yet; a fresh state holds no amplitudes
                if fresh:
                    phys.invalid = "the first stage, which makes |0...0>, failed"
                raise
            phys.mark_invalid(f"stage {i} of {len(program.stages)} failed", exc)
        if on_stage is not None:
            on_stage(i + 1, len(program.stages))
    if program.global_phase:
        phys.data *= complex(np.exp(1j * program.global_phase))
    phys.layout.set(list(program.final_phys))
    return len(program.stages)


def _kept_low_bits(plan: StagePlan) -> int:
    """The low slots no swap with a global slot touches (the plan was made with at least this
    keep_low); exactly the plan's keep_low where its low slots rotate (their exchanges name it)."""
    big_l = plan.local_qubits
    if any(s.low_exchanges(big_l) for s in plan.stages):
        return plan.keep_low
    touched = [p for s in plan.stages for p, _ in s.swaps]
    return min(touched) if touched else big_l
