"""The outcome of a run: the final state, what ran (input gates, applied steps) and their times."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qsim_tc.runners.records import GATE, GateStat, StepRecord
from qsim_tc.state import StateVector


@dataclass
class Result:
    """The outcome of :meth:`Simulator.run`.

    Attributes:
        state: the final state.
        stats: per applied gate its engine statistics (a stage run: one entry a stage, path
            ``"stage"``).
        backend, device: as run.
        wall_s: the run's wall time (planning and fusion included).
        metadata: the run's choices (fusion, stages, ``backend="auto"``'s blocks and guard).
        steps: per applied step (a gate, a fused block or a stage) the input gates it covers,
            its method and its time (None where not measured apart: a GPU stage).
        n_input_gates: the gates of the circuit as given (None: one per step).
        error: the bound of the final state's rounding error against the double-double
            reference (:class:`qsim_tc.error_bound.ErrorReport`: ``l2_bound``, ``l2_estimate``,
            ``max_abs_bound``, ``infidelity_bound``, the top steps; ``l2_bound`` None with the
            reason where a step's method has no model), or None where the run path gives none.
    """

    state: StateVector
    stats: list[GateStat]
    backend: str
    device: str
    wall_s: float
    metadata: dict[str, Any] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    n_input_gates: int | None = None
    error: Any = None

    @property
    def input_gates(self) -> int:
        """The gates of the circuit as given (before fusion or stages)."""
        return len(self.steps or self.stats) if self.n_input_gates is None else self.n_input_gates

    @property
    def step_kind(self) -> str:
        """``"gate"`` (gates or fused blocks one at a time) or ``"stage"``."""
        return self.steps[0].kind if self.steps else GATE

    @property
    def gate_time_ms(self) -> float | None:
        """The steps' time: the sum of the gates' (or CPU stages') measured times; None where the
        steps were not timed one by one (GPU stages: see :attr:`wall_s`)."""
        if not self.steps:
            return float(sum(s.info.time_ms for s in self.stats))
        if any(s.time_ms is None for s in self.steps):
            return None
        return float(sum(s.time_ms for s in self.steps))

    def to_dict(self, gates: bool = True, steps: bool | None = None) -> dict:
        """A JSON-ready summary; with ``gates``, the per-gate statistics; with ``steps`` (default:
        as ``gates``), the step records (input gates covered, method, time)."""
        out = {
            "backend": self.backend,
            "device": self.device,
            "n_qubits": self.state.n_qubits,
            "dtype": str(self.state.dtype),
            "wall_s": self.wall_s,
            "gate_time_ms": self.gate_time_ms,
            "n_gates": self.input_gates,
            "step_kind": self.step_kind,
            "n_steps": len(self.steps or self.stats),
            "metadata": self.metadata,
            "error": self.error.to_dict() if self.error is not None else None,
        }
        if gates:
            out["gates"] = [s.to_dict() for s in self.stats]
        if gates if steps is None else steps:
            out["steps"] = [s.to_dict() for s in self.steps]
        return out
