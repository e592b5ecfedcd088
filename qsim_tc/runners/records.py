"""What a run applied: one record per step, a gate (or fused block) or a stage, in one shape for
every run path, and the per-gate statistics of the gate path."""

from __future__ import annotations

from dataclasses import dataclass

from qsim_tc.engine import ApplyInfo

GATE = "gate"  # one GEMM or small-gate kernel: an input gate, or a fused block of several
STAGE = "stage"  # one pass over the state that applies many input gates


@dataclass
class GateStat:
    """Statistics of one applied gate."""

    index: int
    name: str
    qubits: tuple
    info: ApplyInfo

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name, "qubits": list(self.qubits), **self.info.to_dict()}


@dataclass(frozen=True)
class StepRecord:
    """One applied step of a run.

    Attributes:
        index: its place in the run (0, 1, ...).
        kind: :data:`GATE` or :data:`STAGE`.
        gates: the indices of the input circuit's gates the step applies (a fused block's or a
            stage's several; the SWAPs a stage applies as relabellings included).
        qubits: the qubits it touches (sorted for a stage).
        method: the GEMM method of a gate, ``"stage-kernel"`` (GPU) or ``"stage-cpu"``.
        time_ms: its time; None where it is not measured apart (a GPU stage is one asynchronous
            launch among the run's, timed only as part of the run's wall time).
    """

    index: int
    kind: str
    gates: tuple[int, ...]
    qubits: tuple[int, ...]
    method: str
    time_ms: float | None

    def to_dict(self) -> dict:
        return {"index": self.index, "kind": self.kind, "n_gates": len(self.gates), "gates": list(self.gates),
                "qubits": list(self.qubits), "method": self.method, "time_ms": self.time_ms}


def gate_steps(stats: list[GateStat], covers: list[tuple[int, ...]] | None) -> list[StepRecord]:
    """The step records of a gate-path run: ``covers[i]``, the input gates of applied gate i
    (None: the applied gates are the input gates)."""
    return [StepRecord(s.index, GATE, (s.index,) if covers is None else covers[s.index], tuple(s.qubits),
                       s.info.method, s.info.time_ms) for s in stats]
