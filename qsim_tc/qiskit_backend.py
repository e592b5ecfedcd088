"""``QsimTcBackend``: a Qiskit ``BackendV2`` that runs circuits on qsim-tc.

It takes the place of ``AerSimulator(method="statevector")`` in code written against a backend:

    from qiskit import transpile
    from qsim_tc.qiskit import QsimTcBackend
    backend = QsimTcBackend()
    result = backend.run(transpile(qc, backend), shots=1000, seed_simulator=7).result()
    result.get_counts(), result.get_memory()      # with memory=True
    result.get_statevector()                      # where the circuit has qc.save_statevector()

The target holds every standard gate with a matrix, ``unitary`` of any width, ``measure``,
``reset``, ``delay``, classical control (``if_else``, ``while_loop``, ``for_loop``,
``switch_case``) and, where qiskit-aer is installed, Aer's ``save_*`` instructions; so
transpiling is optional. A circuit runs as a :mod:`qsim_tc.dynamic` program: the unitary runs
through :class:`qsim_tc.Simulator` (the stage engine where it applies), mid-circuit measurements
and resets branch the state by shots, the final measurements are sampled from the final state.

Results follow Aer's layout: ``counts`` and ``memory`` as hex strings, one entry per save label
(``statevector``, ``probabilities``...), a header with the registers, ``seed_simulator`` per
experiment. Each experiment's ``metadata["error"]`` is the rounding-error bound of its final state
against double-double (:attr:`qsim_tc.Result.error` as a dict, the segments of a circuit combined:
:func:`_experiment_error`), as the Sampler's and Estimator's metadata carry it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from circuits.qiskit_import import require_qiskit

require_qiskit("qsim_tc.qiskit_backend")

from qiskit import QuantumCircuit  # noqa: E402
from qiskit.circuit import Measure, Parameter, Reset  # noqa: E402
from qiskit.circuit.controlflow import ForLoopOp, IfElseOp, SwitchCaseOp, WhileLoopOp  # noqa: E402
from qiskit.circuit.library import UnitaryGate, get_standard_gate_name_mapping  # noqa: E402
from qiskit.providers import BackendV2, JobStatus, JobV1, Options  # noqa: E402
from qiskit.result import Result  # noqa: E402
from qiskit.result.models import ExperimentResult  # noqa: E402
from qiskit.transpiler import Target  # noqa: E402

from circuits.errors import CircuitError  # noqa: E402
from qsim_tc import __version__, run_error  # noqa: E402
from qsim_tc.batched import BatchedCircuit  # noqa: E402
from qsim_tc.dynamic import DYNAMIC_NO_BOUND, FinalMeasure, Program, Runner, Unitary, compile_circuit  # noqa: E402
from qsim_tc.simulator import Simulator  # noqa: E402
from qsim_tc.state import MAX_QUBITS, StateVector  # noqa: E402

__all__ = ["QsimTcBackend", "QsimTcJob"]

# options of run() that configure the Simulator (the rest configure the shots)
_SIMULATOR_OPTIONS = ("backend", "precision", "device", "fuse", "plan")
# gates of the standard library left out of the target: not gates on qubits with a matrix
_NOT_GATES = frozenset({"measure", "reset", "delay", "barrier", "global_phase"})


def _target(num_qubits: int) -> Target:
    """Every standard gate, any unitary, measure/reset, classical control and Aer's saves."""
    target = Target(description="qsim-tc state vector", num_qubits=num_qubits)
    for name, gate in get_standard_gate_name_mapping().items():
        if name in _NOT_GATES:
            continue
        target.add_instruction(gate, name=name)
    target.add_instruction(UnitaryGate, name="unitary")
    target.add_instruction(Measure())
    target.add_instruction(Reset())
    target.add_instruction(get_standard_gate_name_mapping()["delay"])
    target.add_instruction(IfElseOp, name="if_else")
    target.add_instruction(WhileLoopOp, name="while_loop")
    target.add_instruction(ForLoopOp, name="for_loop")
    target.add_instruction(SwitchCaseOp, name="switch_case")
    try:  # Aer's save instructions, so transpile keeps them
        from qiskit_aer import library as aer_library  # noqa: PLC0415 - optional

        for name, cls in (("save_statevector", "SaveStatevector"), ("save_state", "SaveState"),
                          ("save_statevector_dict", "SaveStatevectorDict"),
                          ("save_probabilities", "SaveProbabilities"),
                          ("save_probabilities_dict", "SaveProbabilitiesDict"),
                          ("save_amplitudes", "SaveAmplitudes"), ("save_amplitudes_sq", "SaveAmplitudesSquared"),
                          ("save_expval", "SaveExpectationValue")):
            if hasattr(aer_library, cls):
                target.add_instruction(getattr(aer_library, cls), name=name)
    except ImportError:
        pass
    return target


class QsimTcJob(JobV1):
    """A job of :class:`QsimTcBackend`: the experiments run when it is submitted (synchronously)."""

    def __init__(self, backend, job_id: str, fn, *args):
        super().__init__(backend, job_id)
        self._fn = fn
        self._args = args
        self._result = None
        self._error = None

    def submit(self) -> None:
        """Run the experiments; errors are raised again by :meth:`result`."""
        try:
            self._result = self._fn(self._job_id, *self._args)
        except Exception as exc:  # noqa: BLE001 - kept for result(), as an asynchronous job would
            self._error = exc

    def result(self, timeout: float | None = None) -> Result:
        """The ``qiskit.result.Result`` (raises the run's error, if it failed)."""
        if self._error is not None:
            raise self._error
        return self._result

    def status(self) -> JobStatus:
        if self._error is not None:
            return JobStatus.ERROR
        return JobStatus.DONE if self._result is not None else JobStatus.INITIALIZING


class QsimTcBackend(BackendV2):
    """A Qiskit backend whose simulator is :class:`qsim_tc.Simulator`.

    Args:
        num_qubits: the width of the target (the widest circuit it accepts; default 30, as
            Aer's default target; the state must still fit in memory).
        **options: defaults of :meth:`run`'s options (see :meth:`_default_options`):
            ``shots`` (1024), ``seed_simulator`` (None), ``memory`` (False), ``backend``
            ("auto"), ``precision`` ("double"), ``device`` ("auto"), ``fuse`` ("auto"),
            ``plan`` ("auto"), ``save_state`` (False: True saves the final state as
            ``statevector`` in every experiment), and ``method`` ("statevector", the only one,
            accepted for code written for Aer).

    Raises:
        ValueError: an unknown option or a bad value (named).
    """

    def __init__(self, num_qubits: int = 30, **options):
        super().__init__(name="qsim_tc", description="qsim-tc: a state-vector simulator, every gate a GEMM",
                         backend_version=__version__)
        if isinstance(num_qubits, bool) or not isinstance(num_qubits, (int, np.integer)) \
                or not 1 <= num_qubits <= MAX_QUBITS:
            raise ValueError(f"num_qubits must be an int in 1..{MAX_QUBITS}, got {num_qubits!r}")
        self._target = _target(int(num_qubits))
        self._set_checked(options)

    @classmethod
    def _default_options(cls) -> Options:
        return Options(shots=1024, seed_simulator=None, memory=False, parameter_binds=None, backend="auto",
                       precision="double", device="auto", fuse="auto", plan="auto", save_state=False,
                       method="statevector")

    def _set_checked(self, options: dict) -> None:
        merged = _check_options(options, self.options)
        if merged:
            self.set_options(**merged)

    @property
    def target(self) -> Target:
        return self._target

    @property
    def max_circuits(self):
        return None

    def simulator(self, **options) -> Simulator:
        """The :class:`qsim_tc.Simulator` that the options (the backend's, updated by ``options``) make."""
        opts = {k: options.get(k, getattr(self.options, k)) for k in _SIMULATOR_OPTIONS}
        device = opts["device"].lower() if isinstance(opts["device"], str) else opts["device"]
        kwargs = {"device": device, "fuse": opts["fuse"], "plan": opts["plan"]}
        if opts["backend"] == "auto":
            kwargs["precision"] = opts["precision"]
        return Simulator(opts["backend"], **kwargs)

    def run(self, run_input, **options) -> QsimTcJob:
        """Run one circuit or a list of circuits; return a finished :class:`QsimTcJob`.

        Args:
            run_input: a ``QuantumCircuit`` or a sequence of them.
            shots: shots per experiment.
            seed_simulator: an int: experiment i draws from ``numpy.random.default_rng(seed + i)``
                (None: a random seed, reported in the result).
            memory: also return each shot's bits (``result.get_memory()``).
            parameter_binds: one dict per circuit ``{Parameter: [values...]}``: each circuit runs
                once per set of values (all lists of a dict of equal length), as in Aer.
            save_state, backend, precision, device, fuse, plan: as for the constructor.

        Raises:
            TypeError / ValueError: a bad input or option (named). CircuitError: a circuit that
                cannot be run (unbound parameters, an unsupported instruction), before any runs.
        """
        circuits = [run_input] if isinstance(run_input, QuantumCircuit) else list(run_input)
        for i, qc in enumerate(circuits):
            if not isinstance(qc, QuantumCircuit):
                raise TypeError(f"run_input[{i}] must be a qiskit.QuantumCircuit, got {type(qc).__name__}")
        opts = dict(self.options.__dict__)
        opts.update(_check_options(options, self.options))
        for qc in circuits:
            if qc.num_qubits > self._target.num_qubits:
                raise ValueError(f"circuit {qc.name!r} has {qc.num_qubits} qubits; this backend's target has "
                                 f"{self._target.num_qubits} (QsimTcBackend(num_qubits=...))")
        simulator = self.simulator(**opts)
        items = _experiments(circuits, opts["parameter_binds"], simulator)  # every error before the first run
        job = QsimTcJob(self, str(uuid.uuid4()), self._run_all, items, simulator, opts)
        job.submit()
        return job

    def _run_all(self, job_id, items, simulator, opts) -> Result:
        seed = opts["seed_simulator"]
        if seed is None:
            seed = int(np.random.default_rng().integers(0, 2**31 - 1))
        seed = int(seed)
        t0 = time.perf_counter()
        results = []
        for item in items:
            if isinstance(item, _Sweep):  # one plan, a block of bound states at a time
                for b0, block in item.batched.states(item.values, dtype=simulator.dtype, device=simulator.device):
                    for i in range(block.shape[0]):
                        state = StateVector.from_array(block[i], copy=False, device=simulator.device)
                        results.append(self._run_one(item.qc, item.program, simulator, opts, seed + len(results),
                                                     state=state, phase=float(item.phases[b0 + i])))
            else:
                qc, program = item
                results.append(self._run_one(qc, program, simulator, opts, seed + len(results)))
        return Result(backend_name=self.name, backend_version=self.backend_version, job_id=job_id,
                      qobj_id=job_id, success=True, results=results, time_taken=time.perf_counter() - t0,
                      status="COMPLETED")

    def _run_one(self, qc, program, simulator, opts, seed: int, state=None, phase=None) -> ExperimentResult:
        shots = opts["shots"]
        t0 = time.perf_counter()
        recording = _RecordingSimulator(simulator)
        outcome = Runner(recording, np.random.default_rng(seed)).run(program, shots, state)
        data = {}
        if program.has_measurements:
            keys = [hex(int(v)) for v in outcome.clbits]
            counts: dict = {}
            for k in keys:
                counts[k] = counts.get(k, 0) + 1
            data["counts"] = counts
            if opts["memory"]:
                data["memory"] = keys
        data.update(outcome.saved)
        if opts["save_state"] and "statevector" not in data:
            from qiskit.quantum_info import Statevector  # noqa: PLC0415

            data["statevector"] = Statevector(_final_vector(outcome.final_state, qc.num_qubits))
        header = {"name": qc.name, "n_qubits": qc.num_qubits, "memory_slots": qc.num_clbits,
                  "creg_sizes": [[r.name, r.size] for r in qc.cregs],
                  "qreg_sizes": [[r.name, r.size] for r in qc.qregs],
                  "global_phase": float(qc.global_phase) if phase is None else phase, "metadata": qc.metadata}
        return ExperimentResult.from_dict({"shots": shots, "success": True, "data": data, "meas_level": 2, "header": header,
                "status": "DONE", "seed_simulator": seed,
                "metadata": {"time_taken": time.perf_counter() - t0, "method": "statevector",
                             "device": simulator.device.name, "backend": simulator.backend,
                             "precision": simulator.precision, "dynamic": program.dynamic,
                             "branches": outcome.branches,
                             "error": _experiment_error(program, recording.reports, simulator.dtype,
                                                        batched=state is not None)}})


class _RecordingSimulator:
    """The Simulator a :class:`~qsim_tc.dynamic.Runner` runs segments on, keeping each run's
    error report (:attr:`qsim_tc.Result.error`) in order; everything else is the Simulator's."""

    def __init__(self, simulator: Simulator):
        self._simulator = simulator
        self.reports: list = []

    def run(self, circuit, *args, **kwargs):
        result = self._simulator.run(circuit, *args, **kwargs)
        self.reports.append(result.error)
        return result

    def __getattr__(self, name):
        return getattr(self._simulator, name)


def _experiment_error(program: Program, reports: list, dtype, *, batched: bool) -> dict:
    """The error bound of an experiment's final state, as a plain dict
    (:meth:`qsim_tc.error_bound.ErrorReport.to_dict`).

    A program without mid-circuit measurements, resets or classical control runs its unitary
    segments one after another on one state (saves read it, never change it): the segments'
    reports combine (:func:`qsim_tc.run_error.sequence_report`), with a scalar-phase step for
    each empty segment the runner applied as a global phase on the existing state instead of
    running it. A dynamic program projects and renormalises its branches' states, through which
    no bound is derived; bindings run as one batched plan keep no per-step record: both report
    "no bound" with the reason.
    """
    if batched:
        return {"l2_bound": None, "no_bound": "the bindings ran as one batched plan, which reports no bound"}
    if program.dynamic:
        return {"l2_bound": None, "no_bound": DYNAMIC_NO_BOUND}
    unitaries = sum(1 for op in program.ops if isinstance(op, Unitary))
    if unitaries == 0:  # |0...0> as made, exact
        return {"l2_bound": 0.0, "l2_estimate": 0.0, "max_abs_bound": 0.0, "infidelity_bound": 0.0,
                "top_steps": [], "no_bound": None, "n_steps": 0}
    phases = [run_error.phase_report(dtype)] * (unitaries - len(reports))
    return run_error.sequence_report(list(reports) + phases).to_dict()


def _final_vector(state, n: int) -> np.ndarray:
    if state is None:  # nothing ran: |0...0>
        v = np.zeros(1 << n, np.complex128)
        v[0] = 1
        return v
    return state.to_numpy().astype(np.complex128)


def _check_options(options: dict, defaults) -> dict:
    """``options`` checked (unknown names and bad values raise), as a dict."""
    known = set(QsimTcBackend._default_options().__dict__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; QsimTcBackend takes {', '.join(sorted(known))}")
    out = dict(options)
    if "shots" in out:
        s = out["shots"]
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1:
            raise ValueError(f"shots must be a positive int, got {s!r}")
        out["shots"] = int(s)
    if "seed_simulator" in out and out["seed_simulator"] is not None:
        s = out["seed_simulator"]
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise ValueError(f"seed_simulator must be a non-negative int or None, got {s!r}")
    if "method" in out and out["method"] not in ("statevector", "automatic"):
        raise ValueError(f"method must be 'statevector' (the only method of qsim-tc), got {out['method']!r}")
    for flag in ("memory", "save_state"):
        if flag in out and not isinstance(out[flag], bool):
            raise TypeError(f"{flag} must be True or False, got {type(out[flag]).__name__}")
    if "precision" in out and out["precision"] not in ("double", "single"):
        raise ValueError(f"precision must be 'double' or 'single', got {out['precision']!r}")
    if "device" in out and not (isinstance(out["device"], str) and out["device"].lower() in ("auto", "cpu", "gpu")):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu' (any case), got {out['device']!r}")
    return out


@dataclass
class _Sweep:
    """The bindings of one circuit, run through one plan (:class:`qsim_tc.batched.BatchedCircuit`)."""

    qc: object
    batched: BatchedCircuit
    values: np.ndarray
    phases: np.ndarray
    program: Program


def _experiments(circuits: list, parameter_binds, simulator) -> list:
    """(circuit, program) per experiment, or a :class:`_Sweep` for the bindings of a unitary
    circuit with final measurements only (where the simulator computes in the state's own
    arithmetic: backend "auto", "native" or "native32")."""
    out = []
    binds = _bind_lists(circuits, parameter_binds)
    for qc, values in zip(circuits, binds):
        if values is None:
            out.append((qc, compile_circuit(qc)))
            continue
        sweep = None
        if len(next(iter(values.values()))) > 1 and simulator.backend in ("auto", "native", "native32"):
            try:
                batched = BatchedCircuit(qc)
            except CircuitError:
                batched = None  # (not unitary, saves...): each bound circuit is compiled below
            if batched is not None:
                array = batched.values_array(values)
                phases = batched._values(qc.global_phase, "global_phase")(array)
                final = [FinalMeasure(list(batched.measured))] if batched.measured else []
                program = Program(qc.num_qubits, qc.num_clbits, final, bool(final), False)
                sweep = _Sweep(qc, batched, array, phases, program)
        if sweep is not None:
            out.append(sweep)
            continue
        n_values = len(next(iter(values.values())))
        for j in range(n_values):
            bound = qc.assign_parameters({p: float(v[j]) for p, v in values.items()})
            out.append((bound, compile_circuit(bound)))
    return out


def _bind_lists(circuits: list, parameter_binds) -> list:
    """Per circuit: None (no bindings) or its checked {Parameter: float array}, as in Aer."""
    if parameter_binds is None:
        return [None] * len(circuits)
    if isinstance(parameter_binds, dict):
        parameter_binds = [parameter_binds]
    if not isinstance(parameter_binds, Sequence) or len(parameter_binds) != len(circuits):
        raise ValueError(f"parameter_binds must be a list of one dict per circuit ({len(circuits)}), got "
                         f"{parameter_binds!r:.80}")
    out = []
    for i, (qc, binds) in enumerate(zip(circuits, parameter_binds)):
        if not isinstance(binds, dict):
            raise TypeError(f"parameter_binds[{i}] must be a dict {{Parameter: [values]}}, got {type(binds).__name__}")
        if not binds:
            out.append(None)
            continue
        for p in binds:
            if not isinstance(p, Parameter):
                raise TypeError(f"parameter_binds[{i}] keys must be Parameters, got {type(p).__name__}")
        values = {p: np.atleast_1d(np.asarray(v, dtype=np.float64)) for p, v in binds.items()}
        lengths = {len(v) for v in values.values()}
        if len(lengths) != 1:
            raise ValueError(f"parameter_binds[{i}] has value lists of different lengths {sorted(lengths)}")
        out.append(values)
    return out
