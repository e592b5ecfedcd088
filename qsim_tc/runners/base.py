"""The contract every runner shares: the settings of a run, the state it starts from, and what
it returns (the final state, per-step records, metadata)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gemm
from qsim_tc import memory
from qsim_tc.runners.records import GateStat, StepRecord
from qsim_tc.state import StateVector

AUTO = "auto"


@dataclass(frozen=True)
class Settings:
    """A Simulator's options as its runners read them (validated by the Simulator).

    Attributes:
        backend: ``"auto"`` or a GEMM method name; method: that method (None with ``"auto"``).
        device, dtype: where the state lives and its dtype.
        precision, tolerance: ``backend="auto"``'s precision class and guard tolerance.
        small_gate_kernel, options: passed to every gate application.
        workspace_bytes: the bounded engine's limit (None: the engine's default).
    """

    backend: str
    method: Any
    device: gemm.Device
    dtype: np.dtype
    precision: str | None
    tolerance: float | None
    small_gate_kernel: bool | None
    options: dict
    workspace_bytes: int | None


@dataclass
class Start:
    """The state a run starts from: |0...0>, a copy of ``initial``, or with ``in_place``
    ``initial`` itself. :meth:`make` may be called again (a restarted run): ``initial`` is
    not changed unless ``in_place``. ``initial_norm``: the start state's norm as measured
    before the run (1 for |0...0>), for the run's error bound."""

    n_qubits: int
    settings: Settings
    initial: StateVector | None = None
    in_place: bool = False
    initial_norm: float = 1.0

    def make(self) -> StateVector:
        """The start state (checked against the circuit's width and the simulator's dtype)."""
        s = self.settings
        if self.initial is None:
            return StateVector(self.n_qubits, dtype=s.dtype, device=s.device, workspace_bytes=s.workspace_bytes)
        if self.initial.n_qubits != self.n_qubits:
            raise ValueError(f"initial_state has {self.initial.n_qubits} qubits, the circuit {self.n_qubits}")
        if self.initial.dtype != s.dtype:
            raise ValueError(f"initial_state is {self.initial.dtype}; this simulator keeps {s.dtype} states "
                             f"(backend {s.backend!r}, precision {s.precision!r})")
        return self.initial if self.in_place else self.initial.copy()

    @property
    def held_bytes(self) -> int:
        """The bytes of the run's state that exist already (an ``in_place`` start state)."""
        return memory.state_bytes(self.n_qubits, self.settings.dtype) if self.in_place else 0


@dataclass
class RunOutput:
    """What a runner returns: the final state (the circuit's global phase applied), the per-gate
    statistics (one a stage for a stage run), the step records, the run's metadata, and the
    run's error bound where the runner computes it (:mod:`qsim_tc.run_error`)."""

    state: StateVector
    stats: list[GateStat]
    steps: list[StepRecord]
    metadata: dict[str, Any] = field(default_factory=dict)
    error: Any = None  # the run's qsim_tc.error_bound.ErrorReport, once computed
