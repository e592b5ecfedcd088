"""The simulator: options checked once, a runner chosen per circuit, the result assembled."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import gemm
from circuits import Circuit, fusion
from qsim_tc import memory, run_error
from qsim_tc.calibrate import table_for
from qsim_tc.plan.select import PRECISION_CLASSES, check_precision
from qsim_tc.progress import Progress, warn_emulated_on_cpu
from qsim_tc.result import Result
from qsim_tc.runners.auto import run_auto
from qsim_tc.runners.base import AUTO, Settings, Start
from qsim_tc.runners.bounded import run_bounded
from qsim_tc.runners.gates import fused, run_gates
from qsim_tc.runners.records import GateStat
from qsim_tc.runners.stage import StageRunner, stage_metadata, within_tolerance
from qsim_tc.stages import cpu_warmup
from qsim_tc.state import StateVector

__all__ = ["AUTO", "GateStat", "Result", "Simulator", "as_circuit"]


def as_circuit(circuit) -> Circuit:
    """A :class:`circuits.Circuit` from a Circuit or a ``qiskit.QuantumCircuit``."""
    if isinstance(circuit, Circuit):
        return circuit
    if any(c.__name__ == "QuantumCircuit" and c.__module__.startswith("qiskit.") for c in type(circuit).__mro__):
        from circuits import from_qiskit  # noqa: PLC0415 - qiskit stays optional

        return from_qiskit(circuit)
    raise TypeError(f"circuit must be a circuits.Circuit or a qiskit.QuantumCircuit, got {type(circuit).__name__}")


class Simulator:
    """Runs circuits: as stages (many gates a pass over the state) or gate by gate, each gate one
    GEMM (or small-gate kernel) through a backend. It validates the options, chooses a runner
    (:mod:`qsim_tc.runners`) and assembles the :class:`Result`.

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
            and in ``in_place`` runs (:mod:`qsim_tc.plan.guard`). Given, it is also the largest
            error bound (:attr:`Result.error`'s ``l2_bound``) the run may have: methods (and a
            stage run) whose predicted bound exceeds it are not used, and the run is refused
            with :class:`~qsim_tc.errors.ToleranceError` when no method meets it
            (:mod:`qsim_tc.run_error`). A method with an accuracy knob runs at the cheapest
            setting that meets it: int8-crt with the fewest moduli whose bound does
            (:func:`qsim_tc.run_error.tune_precision`; ``Result.error.notes`` say which).
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
                                      or not 0 < tolerance < float("inf")):
            raise ValueError(f"tolerance must be a finite positive number, got {tolerance!r}")
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
        self._stages = StageRunner()  # the stage decision and run, with their caches

    @property
    def cost_table(self):
        """The device's cost table (looked up, or measured on a GPU, on first use)."""
        if self._cost_table is None:
            self._cost_table = table_for(self.device, self.precision if self.backend == AUTO else None)
        return self._cost_table

    @property
    def dtype(self) -> np.dtype:
        """The state dtype: the backend's, or with ``backend="auto"`` the precision's."""
        if self.method is None:
            return gemm.method.PRECISIONS[PRECISION_CLASSES[self.precision]]
        return self.method.state_dtype

    @property
    def settings(self) -> Settings:
        """The options as the runners read them."""
        return Settings(self.backend, self.method, self.device, np.dtype(self.dtype), self.precision, self.tolerance,
                        self.small_gate_kernel, self.options, self.workspace_bytes)

    def _table(self):
        return self.cost_table

    def _fused(self, circuit: Circuit) -> Circuit:
        """The circuit after gate fusion, or the circuit itself when fusion is off."""
        return self._fuse(circuit)[0]

    def _fuse(self, circuit: Circuit):
        """(fused circuit, each fused gate's input gates or None); records an ``"auto"`` choice."""
        out, covers, choice = fused(circuit, self.fuse, self.settings, self._table,
                                    self._stages.take_fusion_choice(circuit) if self.fuse == "auto" else None)
        if self.fuse == "auto":
            self.fusion_choice = choice
        return out, covers

    def _check_run(self, initial_state, progress, in_place):
        """Validate :meth:`run`'s arguments; return the progress callable (or None)."""
        if initial_state is not None and not isinstance(initial_state, StateVector):
            raise TypeError(f"initial_state must be a StateVector (StateVector.from_array(amplitudes) makes one), "
                            f"got {type(initial_state).__name__}")
        if not isinstance(in_place, bool):
            raise TypeError(f"in_place must be True or False, got {type(in_place).__name__}")
        if in_place and initial_state is None:
            raise ValueError("in_place=True needs an initial_state to run on")
        if progress is True:
            progress = Progress(f"{self.backend}")
        elif progress is False:
            progress = None
        elif progress is not None and not callable(progress):
            raise TypeError(f"progress must be a callable(done, total), True or None, got {type(progress).__name__}")
        if self.method is not None:
            warn_emulated_on_cpu(self.method, self.device)
        return progress

    def run(self, circuit, initial_state: StateVector | None = None,
            progress: Callable[[int, int], None] | bool | None = None, *, in_place: bool = False) -> Result:
        """Simulate ``circuit`` from |0...0> (or a copy of ``initial_state``).

        Args:
            circuit: a :class:`circuits.Circuit` or a ``qiskit.QuantumCircuit`` (converted with
                :func:`circuits.from_qiskit`: parameters bound, no mid-circuit measurement).
            initial_state: optional start state (same width; it is copied, not changed, unless
                ``in_place``).
            progress: called as ``progress(done, total)`` after each gate (a stage run: after
                each stage, in input gates); ``True`` shows a progress bar on stderr for runs
                longer than ~1.5 s (one line when stderr is not a terminal).
            in_place: run on ``initial_state`` itself (no copy; it becomes the result's state):
                for states too large to hold twice.

        Raises:
            TypeError: ``circuit`` is neither. CircuitError: a Qiskit circuit that cannot be simulated.
            ToleranceError: with ``tolerance``, no method's predicted error bound meets it.
            InsufficientMemoryError: before anything is allocated, if state + workspace do not fit.
        """
        circuit = as_circuit(circuit)
        progress = self._check_run(initial_state, progress, in_place)
        settings = self.settings
        start = Start(circuit.n_qubits, settings, initial_state, in_place,
                      1.0 if initial_state is None else run_error.measured_norm_bound(initial_state))
        try:
            out, wall, meta = self._dispatch(circuit, start, settings, progress)
        except BaseException as exc:
            if in_place and not isinstance(exc, Exception):
                # an interruption (Ctrl-C, SystemExit) stops the run at no known point of the
                # circuit: the state run on in place must not stay marked valid
                initial_state._phys.invalid = f"the run was interrupted ({type(exc).__name__})"
            raise
        return Result(out.state, out.stats, self.backend, self.device.name, wall, meta, out.steps, len(circuit),
                      out.error)

    def _dispatch(self, circuit: Circuit, start: Start, settings: Settings, progress):
        """Decide stages or gates, run the chosen runner; (its output, wall seconds, metadata)."""
        t0 = time.perf_counter()
        self.stage_decision = self._stages.decide(circuit, settings, self.plan, self.fuse, self._table)
        if settings.tolerance is not None and self.stage_decision is not None and self.stage_decision.use:
            # stages compute in the state's precision: not where their bound misses the tolerance
            self.stage_decision = within_tolerance(self.stage_decision, settings)
        meta = {"circuit": circuit.name, "device_reason": self.device.reason, "options": dict(self.options),
                "fuse": self.fuse, "fuse_s": 0.0, "input_gates": len(circuit)}
        if self.stage_decision is not None and self.stage_decision.use:
            if not settings.device.is_gpu:
                # compiling or loading the CPU kernels is the process's cost, not the run's
                warm = cpu_warmup.ensure_ready(settings.dtype)
                t0 += warm
                if isinstance(progress, Progress):  # its elapsed time is the run's too
                    progress.t0 += warm
            out = self._stages.run(circuit, self.stage_decision, start, settings, progress)
            wall = time.perf_counter() - t0
            meta.update(applied_gates=len(out.stats), precision=self.precision, stages=self.stage_decision.to_dict())
            if self.method is None:
                meta.update(stage_metadata(self.stage_decision, out.stats, settings, self.cost_table, wall))
        else:
            applied, covers = self._fuse(circuit)
            meta.update(circuit=applied.name, fuse_s=time.perf_counter() - t0, applied_gates=len(applied),
                        precision=self.precision)
            widths = run_error.fused_widths_of(applied, covers, circuit) if settings.tolerance is not None else None
            if self.workspace_bytes is not None:
                out = run_bounded(applied, start, settings, self.cost_table if self.method is None else None,
                                  progress, covers, widths)
            elif self.method is None:
                out = run_auto(applied, start, settings, self.cost_table, progress, covers, widths)
            else:
                out = run_gates(applied, start, settings, progress, covers)
            wall = time.perf_counter() - t0
            out.error = run_error.gate_run_report(
                applied, out.stats, covers, circuit, settings.dtype, initial_norm=start.initial_norm,
                from_zero=start.initial is None, state_norms=run_error.guard_norms(out.metadata),
                norm_u=run_error.norm_unit_roundoff(settings.dtype, settings.device.is_gpu))
            out.error.notes.extend(run_error.precision_notes(out.metadata))
            if self.fuse == "auto" and self.fusion_choice is not None:
                meta["fusion_choice"] = self.fusion_choice.to_dict()
            if self.stage_decision is not None:
                meta["stages"] = self.stage_decision.to_dict()
            meta.update(out.metadata)
        return out, wall, meta
