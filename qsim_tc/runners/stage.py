"""The stage run: the circuit as stages (:mod:`qsim_tc.stages`), many gates per pass over the
state, on the GPU in the stage kernel or on the CPU in the compiled executor; and the decision
whether a circuit runs so (:mod:`qsim_tc.stages.choice`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import time

import numpy as np

import gemm
from circuits import Circuit
from qsim_tc import memory, run_error
from qsim_tc.engine import ApplyInfo
from qsim_tc.plan import choose_fusion
from qsim_tc.plan.costs import lookup
from qsim_tc.runners.base import AUTO, RunOutput, Settings, Start
from qsim_tc.runners.records import STAGE, GateStat, StepRecord
from qsim_tc.stages import choice as stage_choice
from qsim_tc.state import StateVector

STAGE_BACKENDS = (AUTO, "native", "native32")  # the backends whose products the stage kernels compute


class StageRunner:
    """Decides and runs stage plans for one Simulator; keeps the last decision (planning QFT-28
    costs tens of ms of host time) and its program on the GPU (a repeat copies nothing)."""

    def __init__(self):
        self._cache = None  # (circuit, its length, StageDecision) of the last decision
        self._pools = None  # (StageDecision, its program on the GPU)
        self._error_steps = None  # (StageDecision, dtype, its error steps on the GPU)
        self.fusion_choice = None  # (circuit, FusionChoice) the last GPU decision priced the gate path with

    def decide(self, circuit: Circuit, settings: Settings, plan, fuse, table):
        """The StageDecision for ``circuit``, or None where stages do not apply (``plan=None``, a
        named emulated backend, an int ``fuse`` with ``plan="auto"``, an empty circuit, or on a CPU
        a bounded workspace, two states that do not fit, or no numba).

        Args:
            plan, fuse: the Simulator's options; table: returns the cost table.
        """
        if plan is None or settings.backend not in STAGE_BACKENDS:
            return None
        if isinstance(fuse, int) and plan == "auto":
            return None  # a fusion width asked for is a setting of the gate-by-gate path
        if len(circuit) == 0:
            return None
        cached = self._cache
        if cached is not None and cached[0] is circuit and cached[1] == len(circuit):
            return cached[2]  # the same circuit again (a benchmark's repeats, a primitive's runs)
        if not settings.device.is_gpu:
            # the CPU executor gathers each stage into a spare state-sized buffer: only where two
            # states fit, as the double-buffer engine's own rule (StateVector's double_buffer=None)
            need = 2 * memory.state_bytes(circuit.n_qubits, settings.dtype)
            if settings.workspace_bytes is not None or need > 0.75 * memory.available_bytes(settings.device):
                return None
            if importlib.util.find_spec("numba") is None:  # a dependency, but an install may lack it
                return None
            decision = stage_choice.decide_cpu(circuit, np.dtype(settings.dtype).itemsize, always=plan == "always")
            self._cache = (circuit, len(circuit), decision)
            return decision
        decision = self._decide_gpu(circuit, settings, plan, fuse, table)
        # kept for the next run of this very circuit (planning QFT-28 costs tens of ms of host time)
        self._cache = (circuit, len(circuit), decision)
        return decision

    def _decide_gpu(self, circuit: Circuit, settings: Settings, plan, fuse, table):
        from qsim_tc.stages.kernel import block_qubits, max_dense, sm_ghz, tensor_core_ops  # noqa: PLC0415

        dtype = str(np.dtype(settings.dtype))
        n = circuit.n_qubits
        row, _ = lookup("native" if dtype == "complex128" else "native32", settings.device.name, dtype, table())
        pass_ms = stage_choice.reference_pass_ms(n, sm_ghz())
        if fuse == "auto" or fuse is None:
            choice = choose_fusion(circuit, settings.backend, settings.device.name, dtype, table=table(),
                                   precision=settings.precision or "double")
            self.fusion_choice = (circuit, choice)  # reused by the gate path if it runs
            gate_ms = choice.unfused_ms if fuse is None else min(choice.estimated_ms, choice.unfused_ms)
        else:
            gate_ms = sum(row.gate_ms(len(g.qubits), n) for g in circuit.gates)
        # complex64 may run the complex128 programs where the GPU has them on its tensor cores
        wide = ((max_dense(np.complex128), block_qubits(np.complex128))
                if np.dtype(settings.dtype) == np.complex64 and tensor_core_ops(np.complex128) else None)
        decision = stage_choice.decide(circuit, max_dense(settings.dtype), pass_ms, gate_ms,
                                       itemsize=np.dtype(settings.dtype).itemsize,
                                       block_qubits=block_qubits(settings.dtype),
                                       widen=tensor_core_ops(settings.dtype), wide=wide)
        if plan == "always" and decision.plan is not None and not decision.use:
            decision = dataclasses.replace(decision, use=True, why=decision.why + " (plan='always')")
        return decision

    def take_fusion_choice(self, circuit: Circuit):
        """The FusionChoice the last decision made for ``circuit`` (once), else None."""
        cached, self.fusion_choice = self.fusion_choice, None
        return cached[1] if cached is not None and cached[0] is circuit else None

    def run(self, circuit: Circuit, decision, start: Start, settings: Settings, progress=None) -> RunOutput:
        """Run ``circuit`` as ``decision``'s plan (the global phase included: folded into an op's
        matrix where the program allows).

        Args:
            progress: ``progress(done, total)`` in input gates, after each stage.

        Returns:
            The output: one GateStat (path ``"stage"``) and one step record per stage; a CPU
            stage's time measured apart, a GPU stage's not (one asynchronous launch each).

        Raises:
            InsufficientMemoryError: the state does not fit.
        """
        n, plan = circuit.n_qubits, decision.plan
        memory.check_fits(f"simulating {n} qubits as stages", memory.state_bytes(n, settings.dtype) - start.held_bytes,
                          settings.device)
        covers = [tuple(op.gate for op in st.ops) for st in plan.stages]
        done_gates = np.cumsum([len(c) for c in covers]).tolist()
        times: list[float] = []
        last = [0.0]

        def on_stage(done: int, total: int) -> None:
            now = time.perf_counter()
            times.append((now - last[0]) * 1e3)
            last[0] = now
            if progress is not None:
                progress(done_gates[done - 1], len(circuit))

        fresh = start.initial is None  # the first stage makes |0...0> itself: no zeroing pass, no read
        if fresh:
            state = StateVector._unset(n, dtype=settings.dtype, device=settings.device,
                                       workspace_bytes=settings.workspace_bytes)
        else:
            state = start.make()
        if settings.device.is_gpu:
            from qsim_tc.stages.gpu import run_plan  # noqa: PLC0415
            from qsim_tc.stages.kernel import upload  # noqa: PLC0415

            if not fresh:
                state._phys.canonicalize()  # a copied initial state may keep a pending permutation
            if self._pools is None or self._pools[0] is not decision:
                self._pools = (decision, upload(decision.program, settings.dtype, decision.wide))
            run_plan(state._phys, plan, program=decision.program,
                     on_stage=(lambda done, total: progress(done_gates[done - 1], len(circuit)))
                     if progress is not None else None,
                     fresh=fresh, wide=decision.wide, pools=self._pools[1])
            engine, step_ms = "stage-kernel", [None] * plan.n_stages
            from qsim_tc.stages.kernel import max_dense  # noqa: PLC0415

            # the program's error steps depend on the plan and dtype only: kept with the pools for
            # the next run of the same decision (host work of several ms on QV-28, beside a launch)
            if self._error_steps is None or self._error_steps[0] is not decision or \
                    self._error_steps[1] != np.dtype(settings.dtype):
                wide = bool(decision.wide)
                steps = run_error.stage_steps(
                    plan, settings.dtype, max_dense=max_dense(np.complex128 if wide else settings.dtype),
                    compute="fp64" if wide or np.dtype(settings.dtype) == np.complex128 else "fp32")
                self._error_steps = (decision, np.dtype(settings.dtype), steps)
            error = run_error.report_of(self._error_steps[2], start.initial_norm)
        else:
            from qsim_tc.stages.cpu import run_stages  # noqa: PLC0415 - compiles numba kernels on use

            last[0] = time.perf_counter()
            executed: list = []
            # (from any layout; the global phase included; a stage stopped half-way marks the state invalid)
            run_stages(state._phys, plan, on_stage=on_stage, executed=executed, fresh=fresh)
            engine, step_ms = "stage-cpu", times + [None] * (plan.n_stages - len(times))
            error = run_error.stage_run_report(plan, settings.dtype, executed=executed,
                                               initial_norm=start.initial_norm)
        gemm.device.synchronize(settings.device.xp)
        stats, steps = [], []
        for i, st in enumerate(plan.stages):
            qubits = tuple(sorted({q for op in st.ops for q in circuit.gates[op.gate].qubits}))
            stats.append(GateStat(i, "stage", qubits, ApplyInfo("stage", engine, st.n_gates, ())))
            steps.append(StepRecord(i, STAGE, covers[i], qubits, engine, step_ms[i]))
        return RunOutput(state, stats, steps, error=error)


def within_tolerance(decision, settings: Settings):
    """``decision`` (a StageDecision to run as stages), or, where the stage run's predicted error
    bound exceeds ``settings.tolerance``, the same decision not to run as stages (the gate path
    then chooses methods under the tolerance, or refuses)."""
    if settings.device.is_gpu:
        from qsim_tc.stages.kernel import max_dense  # noqa: PLC0415

        wide = bool(decision.wide)
        k = max_dense(np.complex128 if wide else settings.dtype)
        compute = "fp64" if wide or np.dtype(settings.dtype) == np.complex128 else "fp32"
    else:
        k, compute = run_error.CPU_MAX_FUSED, None
    bound = run_error.stage_bound_for_tolerance(decision.plan, settings.dtype, k, compute)
    if bound <= settings.tolerance:
        return decision
    return dataclasses.replace(decision, use=False, why=f"{decision.why}; not as stages: their error bound "
                                                        f"{bound:.3g} exceeds tolerance={settings.tolerance:.3g}")


def stage_metadata(decision, stats: list[GateStat], settings: Settings, table, wall_s: float) -> dict:
    """``backend="auto"``'s record of a stage run: one block a stage, the stage engine as its
    method; the stages' predicted time is the decision's (None on a CPU: no stage cost model there)."""
    engine = stats[0].info.method if stats else "stage"
    predicted = decision.predicted_ms
    auto = {"precision": settings.precision, "tolerance": settings.tolerance, "cost_table": table.describe(),
            "candidates": [engine], "excluded": {}, "blocks_per_method": {engine: len(stats)},
            "predicted_ms": predicted, "measured_ms": wall_s * 1e3, "redone_blocks": 0}
    # one block per stage; the stage's time is not measured apart (one launch or pass each)
    blocks = [{"index": i, "qubits": list(stats[i].qubits), "d": len(stats[i].qubits), "placement": "stage",
               "method": engine, "gates": st.n_gates,
               "predicted_ms": None if predicted is None else predicted / max(len(stats), 1), "measured_ms": None,
               "reason": decision.why, "redone": [], "guard": None}
              for i, st in enumerate(decision.plan.stages)]
    return {"auto": auto, "blocks": blocks}
