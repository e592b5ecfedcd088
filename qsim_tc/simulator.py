"""The simulator loop: a circuit, a backend, a state; per-gate statistics."""

from __future__ import annotations

import dataclasses
import importlib.util
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gemm
from circuits import Circuit, fusion
from qsim_tc import memory
from qsim_tc.calibrate import table_for
from qsim_tc.engine import ApplyInfo
from qsim_tc.engine.apply import layout_after, predict_layout_path, predict_path
from qsim_tc.errors import InsufficientMemoryError
from qsim_tc.plan import choose_fusion, guard
from qsim_tc.plan.costs import lookup
from qsim_tc.plan.select import PRECISION_CLASSES, Selector, check_precision, needs_guard, placement_of
from qsim_tc.progress import Progress, warn_emulated_on_cpu
from qsim_tc.state import StateVector

AUTO = "auto"


@dataclass
class GateStat:
    """Statistics of one applied gate."""

    index: int
    name: str
    qubits: tuple
    info: ApplyInfo

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name, "qubits": list(self.qubits), **self.info.to_dict()}


@dataclass
class Result:
    """The outcome of :meth:`Simulator.run`: the final state and what each gate cost."""

    state: StateVector
    stats: list[GateStat]
    backend: str
    device: str
    wall_s: float
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def gate_time_ms(self) -> float:
        return float(sum(s.info.time_ms for s in self.stats))

    def to_dict(self, gates: bool = True) -> dict:
        out = {
            "backend": self.backend,
            "device": self.device,
            "n_qubits": self.state.n_qubits,
            "dtype": str(self.state.dtype),
            "wall_s": self.wall_s,
            "gate_time_ms": self.gate_time_ms,
            "n_gates": len(self.stats),
            "metadata": self.metadata,
        }
        if gates:
            out["gates"] = [s.to_dict() for s in self.stats]
        return out


def as_circuit(circuit) -> Circuit:
    """A :class:`circuits.Circuit` from a Circuit or a ``qiskit.QuantumCircuit``."""
    if isinstance(circuit, Circuit):
        return circuit
    if type(circuit).__module__.startswith("qiskit.") and type(circuit).__name__ == "QuantumCircuit":
        from circuits import from_qiskit  # noqa: PLC0415 - qiskit stays optional

        return from_qiskit(circuit)
    raise TypeError(f"circuit must be a circuits.Circuit or a qiskit.QuantumCircuit, got {type(circuit).__name__}")


class _RestartRun(Exception):
    """Raised by a block of ``backend="auto"`` in the guard's run mode whose method's statistics
    failed: the run starts again from its initial state without that method."""

    def __init__(self, record: dict):
        super().__init__(record["why"])
        self.record = record


class Simulator:
    """Runs circuits gate by gate, each gate one GEMM (or small-gate kernel) through a backend.

    Args:
        backend: ``"auto"`` (default: per block, the method fastest on this device among those of
            ``precision``, from the device's cost table, :mod:`qsim_tc.plan.select`), or one GEMM
            method name (``gemm.methods()``) for every gate.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        precision: with ``backend="auto"``: ``"double"`` (default; complex128 state, FP64-class
            methods) or ``"single"`` (complex64, FP32-class). With a named backend: None, or the
            backend's own precision.
        tolerance: with ``backend="auto"``: the largest relative norm change a block may show
            before the accuracy guard redoes it with the next method (default: 64 u sqrt(2^d),
            u the precision's unit roundoff); the guard checks the norm once a run, against the
            root of the sum of its guarded blocks' squared bounds, and per block after a failure
            and in ``in_place`` runs (:mod:`qsim_tc.plan.guard`).
        small_gate_kernel: None (default: use it where the backend allows), True or False.
        fuse: None (no fusion), the most qubits a fused block may have, or ``"auto"`` (chosen per
            circuit from the device's cost table, :mod:`qsim_tc.plan.costs`).
        cost_table: with ``backend="auto"`` or ``fuse="auto"``: the cost table to use (default:
            :func:`qsim_tc.calibrate.table_for` this device, measured once per device on a GPU).
        plan: ``"auto"`` (default): with ``backend="auto"``, ``"native"`` or ``"native32"``, run
            the circuit as stages (:mod:`qsim_tc.stages.plan`: many gates per pass over the
            state) where that is expected faster (:mod:`qsim_tc.stages.choice`): on a GPU in
            the stage kernel when every gate fits it and the device's costs predict it faster;
            on a CPU in the compiled stage executor when every gate mixes at most 4 qubits and
            two states fit in memory; not with an int ``fuse`` (a
            setting of the gate-by-gate path); ``"always"``:
            as stages whenever every gate fits (for comparisons); None: gate by gate (with
            ``fuse``), as before.
        workspace_bytes: the most memory gates may use beside the state (default: the smaller of
            1/16 of the state and 4 GiB); giving it selects the bounded engine (no state-sized
            spare buffer), see :class:`qsim_tc.StateVector`.
        **backend_options: passed to every ``gemm.matmul`` call (``threshold=``, ``splits=``...);
            not with ``backend="auto"`` (each method runs with its defaults).

    Raises:
        ValueError: unknown backend, device or precision (the message lists the valid ones); a
            precision that is not a named backend's.
        TypeError: an option the backend does not accept; options with ``backend="auto"``.
    """

    def __init__(self, backend: str = AUTO, device="auto", *, precision: str | None = None,
                 tolerance: float | None = None, small_gate_kernel: bool | None = None, fuse="auto", cost_table=None,
                 plan: str | None = "auto", workspace_bytes: int | None = None, **backend_options):
        self.backend = backend
        self.workspace_bytes = memory.check_workspace_bytes(workspace_bytes)
        self.device = gemm.resolve_device(device)
        if backend == AUTO:
            self.precision = check_precision("double" if precision is None else precision)
            if backend_options:
                raise TypeError(f"backend='auto' takes no method options (each method runs with its defaults); got "
                                f"{', '.join(sorted(backend_options))}; name a backend to pass them")
            self.method = None
        else:
            self.method = gemm.get_method(backend)
            self.method.check_options(backend_options)
            own = {v: k for k, v in PRECISION_CLASSES.items()}.get(self.method.precision)
            if precision is not None and precision != own:
                raise ValueError(f"precision={precision!r} does not match backend {backend!r} (precision class "
                                 f"{self.method.precision!r}); use backend='auto' with precision={precision!r}, or "
                                 "leave precision out")
            self.precision = own
        if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
                                      or not tolerance > 0):
            raise ValueError(f"tolerance must be a positive number, got {tolerance!r}")
        if tolerance is not None and backend != AUTO:
            raise ValueError(f"tolerance applies to backend='auto' (its accuracy guard), not to {backend!r}")
        self.tolerance = tolerance
        self.small_gate_kernel = small_gate_kernel
        self.fuse = fusion.check_fuse_option(fuse)  # None: off; an int d: blocks of at most d qubits; "auto"
        self.fusion_choice = None  # the last "auto" choice (qsim_tc.plan.FusionChoice)
        if plan not in ("auto", "always", None):
            raise ValueError(f"plan must be 'auto', 'always' or None, got {plan!r}")
        self.plan = plan
        self.stage_decision = None  # the last run's StageDecision (plan="auto" on a GPU)
        self.options = backend_options
        self._cost_table = cost_table
        self._fusion_cache = None  # (circuit, FusionChoice) priced by the stage decision
        self._stage_cache = None  # (circuit, its length, StageDecision) of the last decision
        self._stage_pools = None  # (StageDecision, its program on the GPU): a repeat copies nothing
        self._in_place = False  # the current run works on its initial_state itself
        self._guarded_norm = None  # (state, its norm) after the last guarded block of a run

    @property
    def cost_table(self):
        """The device's cost table (looked up, or measured on a GPU, on first use)."""
        if self._cost_table is None:
            self._cost_table = table_for(self.device, self.precision if self.backend == AUTO else None)
        return self._cost_table

    def _fused(self, circuit: Circuit) -> Circuit:
        """The circuit after gate fusion, or the circuit itself when fusion is off."""
        if self.fuse is None:
            return circuit
        if self.fuse == "auto":
            cached = self._fusion_cache
            if cached is not None and cached[0] is circuit:
                choice = cached[1]
            else:
                choice = choose_fusion(circuit, self.backend, self.device.name, str(np.dtype(self.dtype)),
                                       table=self.cost_table, precision=self.precision or "double")
            self._fusion_cache = None
            self.fusion_choice = choice
            if choice.max_qubits is None:
                return circuit
            return fusion.fuse(circuit, choice.max_qubits, min_qubits=choice.min_qubits)
        return fusion.fuse(circuit, self.fuse)

    @property
    def dtype(self) -> np.dtype:
        """The state dtype: the backend's, or with ``backend="auto"`` the precision's."""
        if self.method is None:
            return gemm.method.PRECISIONS[PRECISION_CLASSES[self.precision]]
        return self.method.state_dtype

    def run(self, circuit, initial_state: StateVector | None = None,
            progress: Callable[[int, int], None] | bool | None = None, *, in_place: bool = False) -> Result:
        """Simulate ``circuit`` from |0...0> (or a copy of ``initial_state``).

        Args:
            circuit: a :class:`circuits.Circuit` or a ``qiskit.QuantumCircuit`` (converted with
                :func:`circuits.from_qiskit`: parameters bound, no mid-circuit measurement).
            initial_state: optional start state (same width; it is copied, not changed, unless
                ``in_place``).
            progress: called as ``progress(done, total)`` after each gate; ``True`` shows a
                progress bar on stderr for runs longer than ~1.5 s (one line when stderr is not a
                terminal).
            in_place: run on ``initial_state`` itself (no copy; it becomes the result's state):
                for states too large to hold twice.

        Raises:
            TypeError: ``circuit`` is neither. CircuitError: a Qiskit circuit that cannot be simulated.
            InsufficientMemoryError: before anything is allocated, if state + workspace do not fit.
        """
        circuit = as_circuit(circuit)
        if not isinstance(in_place, bool):
            raise TypeError(f"in_place must be True or False, got {type(in_place).__name__}")
        if in_place and initial_state is None:
            raise ValueError("in_place=True needs an initial_state to run on")
        self._in_place = in_place
        self._guarded_norm = None
        if progress is True:
            progress = Progress(f"{self.backend}")
        elif progress is False:
            progress = None
        elif progress is not None and not callable(progress):
            raise TypeError(f"progress must be a callable(done, total), True or None, got {type(progress).__name__}")
        if self.method is not None:
            warn_emulated_on_cpu(self.method, self.device)
        t_fuse = time.perf_counter()
        n_input_gates = len(circuit)
        self.stage_decision = self._decide_stages(circuit)
        if self.stage_decision is not None and self.stage_decision.use:
            return self._run_stages(circuit, initial_state, t_fuse, progress)
        circuit = self._fused(circuit)
        fuse_s = time.perf_counter() - t_fuse
        n = circuit.n_qubits
        d_max = min(max(circuit.max_gate_qubits, 1), n)
        selector = None
        if self.method is None:
            selector = Selector(self.cost_table, self.precision)
            self._route_by_memory(selector, n, d_max)
        else:
            memory.check_state_fits(f"simulating {n} qubits with {self.backend!r} (gates up to {d_max} qubits)", n,
                                    self.dtype, self.device, self.method, d_max, self.options,
                                    workspace_bytes=self.workspace_bytes, allocated=self._held_bytes(n))
        t0 = time.perf_counter() - fuse_s  # the run's wall time includes the fusion
        total = len(circuit)
        gates = circuit.gates
        if selector is None:
            state = self._start_state(n, initial_state)
            stats = []
            for i, g in enumerate(gates):
                nxt = gates[i + 1].qubits if i + 1 < total else None
                info = state.apply(g.matrix, g.qubits, method=self.backend, check_unitary=False,
                                   small_gate_kernel=self.small_gate_kernel, next_qubits=nxt, **self.options)
                stats.append(GateStat(i, g.name, g.qubits, info))
                if progress is not None:
                    progress(i + 1, total)
        else:
            state, stats, blocks, guard_meta = self._run_auto(circuit, initial_state, selector, progress)
        if circuit.global_phase:
            state.apply_global_phase(circuit.global_phase)
        gemm.device.synchronize(self.device.xp)
        wall = time.perf_counter() - t0
        meta = {"circuit": circuit.name, "device_reason": self.device.reason, "options": dict(self.options),
                "fuse": self.fuse, "fuse_s": fuse_s, "input_gates": n_input_gates, "applied_gates": total,
                "precision": self.precision}
        if self.fuse == "auto" and self.fusion_choice is not None:
            meta["fusion_choice"] = self.fusion_choice.to_dict()
        if self.stage_decision is not None:
            meta["stages"] = self.stage_decision.to_dict()
        if selector is not None:
            meta.update(self._auto_metadata(selector, stats, blocks))
            meta["auto"]["guard"] = guard_meta
        return Result(state, stats, self.backend, self.device.name, wall, meta)

    def _start_state(self, n: int, initial_state: StateVector | None) -> StateVector:
        """A copy of ``initial_state`` (checked against the circuit and this simulator; the state
        itself with ``in_place``) or |0...0>."""
        if initial_state is None:
            return StateVector(n, dtype=self.dtype, device=self.device, workspace_bytes=self.workspace_bytes)
        if initial_state.n_qubits != n:
            raise ValueError(f"initial_state has {initial_state.n_qubits} qubits, the circuit {n}")
        if initial_state.dtype != self.dtype:
            raise ValueError(f"initial_state is {initial_state.dtype}; this simulator keeps {self.dtype} states "
                             f"(backend {self.backend!r}, precision {self.precision!r})")
        return initial_state if self._in_place else initial_state.copy()

    def _held_bytes(self, n: int) -> int:
        """The bytes of the run's state that exist already (an ``in_place`` start state)."""
        return memory.state_bytes(n, self.dtype) if self._in_place else 0

    # --- stages -------------------------------------------------------------------------------

    def _decide_stages(self, circuit: Circuit):
        """The StageDecision for ``circuit``, or None where stages do not apply (plan=None, a CPU,
        a named emulated backend, or a diagonal gate of modulus other than 1)."""
        if self.plan is None or self.backend not in (AUTO, "native", "native32"):
            return None
        if isinstance(self.fuse, int) and self.plan == "auto":
            return None  # a fusion width asked for is a setting of the gate-by-gate path
        from qsim_tc.stages import choice as stage_choice  # noqa: PLC0415

        if len(circuit) == 0:
            return None
        cached = self._stage_cache
        if cached is not None and cached[0] is circuit and cached[1] == len(circuit):
            return cached[2]  # the same circuit again (a benchmark's repeats, a primitive's runs)
        if not self.device.is_gpu:
            # the CPU executor gathers each stage into a spare state-sized buffer: only where two
            # states fit, as the double-buffer engine's own rule (StateVector's double_buffer=None)
            need = 2 * memory.state_bytes(circuit.n_qubits, self.dtype)
            if self.workspace_bytes is not None or need > 0.75 * memory.available_bytes(self.device):
                return None
            if importlib.util.find_spec("numba") is None:  # a dependency, but an install may lack it
                return None
            decision = stage_choice.decide_cpu(circuit, np.dtype(self.dtype).itemsize, always=self.plan == "always")
            self._stage_cache = (circuit, len(circuit), decision)
            return decision
        from qsim_tc.stages.kernel import block_qubits, max_dense, sm_ghz, tensor_core_ops  # noqa: PLC0415

        dtype = str(np.dtype(self.dtype))
        n = circuit.n_qubits
        row, _ = lookup("native" if dtype == "complex128" else "native32", self.device.name, dtype, self.cost_table)
        pass_ms = stage_choice.reference_pass_ms(n, sm_ghz())
        if self.fuse == "auto" or self.fuse is None:
            choice = choose_fusion(circuit, self.backend, self.device.name, dtype, table=self.cost_table,
                                   precision=self.precision or "double")
            self._fusion_cache = (circuit, choice)  # reused by _fused if the gate path runs
            gate_ms = choice.unfused_ms if self.fuse is None else min(choice.estimated_ms, choice.unfused_ms)
        else:
            gate_ms = sum(row.gate_ms(len(g.qubits), n) for g in circuit.gates)
        # complex64 may run the complex128 programs where the GPU has them on its tensor cores
        wide = ((max_dense(np.complex128), block_qubits(np.complex128))
                if np.dtype(self.dtype) == np.complex64 and tensor_core_ops(np.complex128) else None)
        decision = stage_choice.decide(circuit, max_dense(self.dtype), pass_ms, gate_ms,
                                       itemsize=np.dtype(self.dtype).itemsize, block_qubits=block_qubits(self.dtype),
                                       widen=tensor_core_ops(self.dtype), wide=wide)
        if self.plan == "always" and decision.plan is not None and not decision.use:
            decision = dataclasses.replace(decision, use=True, why=decision.why + " (plan='always')")
        # kept for the next run of this very circuit (planning QFT-28 costs tens of ms of host time)
        self._stage_cache = (circuit, len(circuit), decision)
        return decision

    def _run_stages(self, circuit: Circuit, initial_state: StateVector | None, t_start: float, progress) -> Result:
        """Run ``circuit`` as the decided stage plan."""
        decision = self.stage_decision
        n = circuit.n_qubits
        memory.check_fits(f"simulating {n} qubits as stages", memory.state_bytes(n, self.dtype) - self._held_bytes(n),
                          self.device)
        plan = decision.plan
        if self.device.is_gpu:
            from qsim_tc.stages.gpu import run_plan  # noqa: PLC0415
            from qsim_tc.stages.kernel import upload  # noqa: PLC0415

            fresh = initial_state is None  # the first stage makes |0...0> itself: no zeroing pass
            if fresh:
                state = StateVector._unset(n, dtype=self.dtype, device=self.device,
                                           workspace_bytes=self.workspace_bytes)
            else:
                state = self._start_state(n, initial_state)
                state._phys.canonicalize()  # a copied initial state may keep a pending permutation
            if self._stage_pools is None or self._stage_pools[0] is not decision:
                self._stage_pools = (decision, upload(decision.program, self.dtype, decision.wide))
            # (the global phase included: folded into an op's matrix where the program allows)
            run_plan(state._phys, plan, program=decision.program, on_stage=progress if callable(progress) else None,
                     fresh=fresh, wide=decision.wide, pools=self._stage_pools[1])
        else:
            from qsim_tc.stages.cpu import run_stages  # noqa: PLC0415 - compiles numba kernels on use

            state = self._start_state(n, initial_state)
            try:  # the executor writes the state chunk by chunk: a failure leaves it mixed
                run_stages(state._phys, plan)  # (from any layout; the global phase included)
            except Exception as exc:
                state._phys.mark_invalid("the CPU stage executor failed", exc)
            if callable(progress):
                progress(plan.n_stages, plan.n_stages)
        gemm.device.synchronize(self.device.xp)
        wall = time.perf_counter() - t_start
        engine = "stage-kernel" if self.device.is_gpu else "stage-cpu"
        stats = [GateStat(i, "stage", tuple(sorted({q for op in st.ops for q in circuit.gates[op.gate].qubits})),
                          ApplyInfo("stage", engine, st.n_gates, ())) for i, st in enumerate(plan.stages)]
        predicted = decision.predicted_ms  # None on a CPU (no stage cost model there)
        meta = {"circuit": circuit.name, "device_reason": self.device.reason, "options": dict(self.options),
                "fuse": self.fuse, "fuse_s": 0.0, "input_gates": len(circuit), "applied_gates": len(stats),
                "precision": self.precision, "stages": decision.to_dict()}
        if self.method is None:
            meta["auto"] = {"precision": self.precision, "tolerance": self.tolerance,
                            "cost_table": self.cost_table.describe(), "candidates": [engine], "excluded": {},
                            "blocks_per_method": {engine: len(stats)}, "predicted_ms": predicted,
                            "measured_ms": wall * 1e3, "redone_blocks": 0}
            # one block per stage; the stage's time is not measured apart (one launch or pass each)
            meta["blocks"] = [{"index": i, "qubits": list(stats[i].qubits), "d": len(stats[i].qubits),
                               "placement": "stage", "method": engine, "gates": st.n_gates,
                               "predicted_ms": None if predicted is None else predicted / max(len(stats), 1),
                               "measured_ms": None,
                               "reason": decision.why, "redone": [], "guard": None}
                              for i, st in enumerate(plan.stages)]
        return Result(state, stats, self.backend, self.device.name, wall, meta)

    # --- backend="auto" ---------------------------------------------------------------------

    def _route_by_memory(self, selector: Selector, n: int, d_max: int) -> None:
        """Exclude the candidates whose workspace for the widest block does not fit; raise the
        memory error of the cheapest one when none does."""
        state_b = memory.state_bytes(n, self.dtype) - self._held_bytes(n)
        avail = memory.available_bytes(self.device)
        fits = []
        for name in selector.candidates:
            extra = memory.gate_extra_bytes(gemm.get_method(name), n, d_max, self.dtype, {}, spare_allocated=False,
                                            device=self.device.name, workspace_bytes=self.workspace_bytes)
            if state_b + extra > avail:
                selector.exclude(name, f"its workspace for {d_max}-qubit blocks does not fit "
                                       f"({(state_b + extra) / 2**30:.2f} GiB > {avail / 2**30:.2f} GiB free)")
            else:
                fits.append(name)
        if not fits:
            method = gemm.get_method(selector.candidates[0])
            memory.check_state_fits(f"simulating {n} qubits with backend 'auto' (gates up to {d_max} qubits)", n,
                                    self.dtype, self.device, method, d_max, {}, workspace_bytes=self.workspace_bytes,
                                    allocated=self._held_bytes(n))

    def _run_auto(self, circuit: Circuit, initial_state: StateVector | None, selector: Selector, progress):
        """The gates of ``circuit`` with ``backend="auto"``, under the accuracy guard
        (:mod:`qsim_tc.plan.guard`: its run and per-block modes).

        The run mode keeps no copy of the state: a block whose method's statistics fail, or a run
        whose norm moved more than :func:`guard.run_bound` allows, makes the run start again from
        its initial state (not changed: the run works on a copy of it, or on |0...0>), without
        that method, or in the per-block mode. An ``in_place`` run is guarded per block from the
        start, since its initial state is what it changes.

        Returns:
            (state, stats, blocks, guard_meta): the final state, the GateStats, the blocks' records
            and the guard's record for the metadata (mode, restarts, the run's norm change).
        """
        n, gates, total = circuit.n_qubits, circuit.gates, len(circuit)
        per_block = self._in_place
        restarts: list[dict] = []
        start_norm = None
        while True:
            state = self._start_state(n, initial_state)
            self._guarded_norm = None
            stats, blocks, bounds = [], [], []
            try:
                for i, g in enumerate(gates):
                    nxt = gates[i + 1].qubits if i + 1 < total else None
                    state, info, block = self._apply_auto(state, g, nxt, selector, per_block)
                    if not per_block and block["guard"] is not None:  # a guarded block, checked at the end
                        bounds.append(guard.norm_bound(self.precision, len(g.qubits), self.tolerance))
                    blocks.append(block)
                    stats.append(GateStat(i, g.name, g.qubits, info))
                    if progress is not None:
                        progress(i + 1, total)
            except _RestartRun as again:
                restarts.append({"block": len(blocks), **again.record})
                del state  # freed before the next start state is made
                continue
            meta = {"mode": "per-block" if per_block else "run", "restarts": restarts,
                    "run_norm_change": None, "run_norm_bound": None}
            if not bounds:
                return state, stats, blocks, meta
            # the run's one norm: the start state's is 1 for |0...0>, else measured (unchanged)
            if start_norm is None:
                start_norm = 1.0 if initial_state is None else initial_state.norm()
            change = guard.norm_change(start_norm, state.norm())
            bound = guard.run_bound(bounds)
            meta["run_norm_change"], meta["run_norm_bound"] = change, bound
            if change <= bound:  # (False for NaN)
                return state, stats, blocks, meta
            restarts.append({"block": None, "method": None,
                             "why": f"the run's norm changed by {change:.3g} (bound {bound:.3g}, "
                                    f"{len(bounds)} guarded blocks): run again guarded per block"})
            per_block = True
            del state

    def _apply_auto(self, state: StateVector, gate, nxt, selector: Selector, per_block: bool = True):
        """Apply one block with the method the selector picks; guard it when the method can lose
        accuracy on out-of-range data.

        ``per_block``: keep the block's input and measure the norm around it, and redo the block
        from the kept input with the next method when the guard fires. Otherwise (the run mode)
        only the method's statistics are checked, and a failure raises :class:`_RestartRun`
        with the method excluded.

        Returns:
            (state, info, block): the state (a restored copy after a redo), the engine's
            ApplyInfo, and the block's record for the metadata.
        """
        n, d = state.n_qubits, len(gate.qubits)
        # the path the engine will take for a GEMM from the current layout; a method with a
        # small-gate kernel was timed at that placement with its kernel (calibration runs the engine)
        path = predict_path(state._phys, gate.qubits, nxt)
        placement = placement_of(path)
        then = self._next_placements(state, gate, nxt, selector)
        tried: list[str] = []
        redone: list[dict] = []
        while True:
            choice = selector.choose(d, n, placement, without=tuple(tried), then=then)
            method = gemm.get_method(choice.method)
            block = {"qubits": list(gate.qubits), "d": d, "placement": placement, "method": choice.method,
                     "predicted_ms": choice.predicted_ms, "reason": choice.reason, "redone": redone, "guard": None}
            if not needs_guard(method):
                self._guarded_norm = None  # the state changes without a norm measured after it
                info = state.apply(gate.matrix, gate.qubits, method=choice.method, check_unitary=False,
                                   small_gate_kernel=self.small_gate_kernel, next_qubits=nxt)
                return state, info, block
            if not per_block:
                info, verdict = self._apply_checked(state, gate, nxt, choice.method, None)
                block["guard"] = verdict.to_dict()
                if verdict.ok:
                    return state, info, block
                selector.exclude(choice.method, f"accuracy guard: {verdict.why}")
                raise _RestartRun({"method": choice.method, "why": verdict.why})
            try:  # the guard keeps the block's input: only when a copy of the state fits
                memory.check_fits("the accuracy guard's copy of the state", state.nbytes, state.device)
            except InsufficientMemoryError:
                selector.exclude(choice.method, "no memory for the accuracy guard's copy of the state")
                redone.append({"method": choice.method, "why": "routed: no memory for the guard's copy"})
                continue
            saved = state.copy()
            # the norm the last guarded block measured, while nothing has changed the state since
            known = self._guarded_norm
            norm0 = known[1] if known is not None and known[0] is state else saved.norm()
            info, verdict = self._apply_checked(state, gate, nxt, choice.method, norm0)
            block["guard"] = verdict.to_dict()
            if verdict.ok:
                return state, info, block
            redone.append({"method": choice.method, "why": verdict.why})
            selector.exclude(choice.method, f"accuracy guard: {verdict.why}")
            tried.append(choice.method)
            state = saved

    def _next_placements(self, state: StateVector, gate, nxt, selector: Selector) -> dict | None:
        """Candidate -> (width, placement) of the next block after this one ran with it, where the
        candidates leave different layouts (their batched products differ: one keeps contiguous
        middle targets in place, another moves them down and the next block's targets up); else
        None (the choice is per block)."""
        if nxt is None or not state._phys.double_buffer:
            return None
        methods = {name: gemm.get_method(name) for name in selector.candidates if name not in selector.excluded}
        if len({m.batched_products for m in methods.values()}) < 2:
            return None
        out = {}
        for name, m in methods.items():
            after = layout_after(state._phys, gate.qubits, nxt, m, self.small_gate_kernel)
            out[name] = (len(nxt), placement_of(predict_layout_path(after, nxt, state.n_qubits, self.device.name)))
        return out

    def _apply_checked(self, state: StateVector, gate, nxt, method: str, norm0: float | None):
        """Apply one block with ``method``, recording the gemm warnings, and return
        ``(info, verdict)``: info None when the method raised a domain error. ``norm0``: the norm
        before the block, to check the norm after it against; None checks the statistics only."""
        info = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                info = state.apply(gate.matrix, gate.qubits, method=method, check_unitary=False,
                                   small_gate_kernel=self.small_gate_kernel, next_qubits=nxt)
            except gemm.errors.GemmError as exc:  # a domain failure of the method: redo with the next
                verdict = guard.Verdict(False, f"{type(exc).__name__}: {exc}")
        for w in caught:  # warnings from outside gemm are not the guard's business: pass them on
            if getattr(w.category, "__module__", "").split(".")[0] != "gemm":
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if info is not None:
            norm1 = None
            if norm0 is not None:
                norm1 = state.norm()
                self._guarded_norm = (state, norm1)
            verdict = guard.check(info.report, caught, norm0, norm1,
                                  guard.norm_bound(self.precision, len(gate.qubits), self.tolerance))
        return info, verdict

    def _auto_metadata(self, selector: Selector, stats: list[GateStat], blocks: list[dict]) -> dict:
        """Per block: method, predicted and measured time, why; and the run's summary."""
        per_method: dict[str, int] = {}
        for st, block in zip(stats, blocks):
            block["index"] = st.index
            block["measured_ms"] = st.info.time_ms
            per_method[block["method"]] = per_method.get(block["method"], 0) + 1
        table = selector.table
        return {"auto": {"precision": self.precision, "tolerance": self.tolerance, "cost_table": table.describe(),
                         "candidates": list(selector.candidates), "excluded": dict(selector.excluded),
                         "blocks_per_method": per_method,
                         "predicted_ms": float(sum(b["predicted_ms"] for b in blocks)),
                         "measured_ms": float(sum(b["measured_ms"] for b in blocks)),
                         "redone_blocks": sum(bool(b["redone"]) for b in blocks)},
                "blocks": blocks}
