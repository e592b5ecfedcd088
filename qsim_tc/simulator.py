"""The simulator loop: a circuit, a backend, a state; per-gate statistics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gemm
from circuits import Circuit, fusion
from qsim_tc import memory
from qsim_tc.engine import ApplyInfo
from qsim_tc.plan import choose_fusion
from qsim_tc.progress import Progress, warn_emulated_on_cpu
from qsim_tc.state import StateVector


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


class Simulator:
    """Runs circuits gate by gate, each gate one GEMM through ``backend``.

    Args:
        backend: a GEMM method name (``gemm.methods()``); it fixes the state dtype.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        small_gate_kernel: None (default: use it where the backend allows), True or False.
        fuse: None (no fusion), the most qubits a fused block may have, or ``"auto"`` (chosen per
            circuit from the measured gate costs of this backend and device, qsim_tc.plan.costs).
        **backend_options: passed to every ``gemm.matmul`` call (``threshold=``, ``splits=``...).

    Raises:
        ValueError: unknown backend or device (the message lists the valid ones).
        TypeError: an option the backend does not accept.
    """

    def __init__(self, backend: str = "native", device="auto", *, small_gate_kernel: bool | None = None,
                 fuse=None, **backend_options):
        self.method = gemm.get_method(backend)
        self.method.check_options(backend_options)
        self.backend = backend
        self.device = gemm.resolve_device(device)
        self.small_gate_kernel = small_gate_kernel
        self.fuse = fusion.check_fuse_option(fuse)  # None: off; an int d: blocks of at most d qubits; "auto"
        self.fusion_choice = None  # the last "auto" choice (qsim_tc.plan.FusionChoice)
        self.options = backend_options

    def _fused(self, circuit: Circuit) -> Circuit:
        """The circuit after gate fusion, or the circuit itself when fusion is off."""
        if self.fuse is None:
            return circuit
        if self.fuse == "auto":
            choice = choose_fusion(circuit, self.backend, self.device.name, str(np.dtype(self.dtype)))
            self.fusion_choice = choice
            if choice.max_qubits is None:
                return circuit
            return fusion.fuse(circuit, choice.max_qubits, min_qubits=choice.min_qubits)
        return fusion.fuse(circuit, self.fuse)

    @property
    def dtype(self) -> np.dtype:
        return self.method.state_dtype

    def run(self, circuit, initial_state: StateVector | None = None,
            progress: Callable[[int, int], None] | bool | None = None) -> Result:
        """Simulate ``circuit`` from |0...0> (or a copy of ``initial_state``).

        Args:
            circuit: a :class:`circuits.Circuit` or a ``qiskit.QuantumCircuit`` (converted with
                :func:`circuits.from_qiskit`: parameters bound, no mid-circuit measurement).
            initial_state: optional start state (same width; it is copied, not changed).
            progress: called as ``progress(done, total)`` after each gate; ``True`` shows a
                progress bar on stderr for runs longer than ~1.5 s (one line when stderr is not a
                terminal).

        Raises:
            TypeError: ``circuit`` is neither. CircuitError: a Qiskit circuit that cannot be simulated.
            InsufficientMemoryError: before anything is allocated, if state + workspace do not fit.
        """
        circuit = as_circuit(circuit)
        if progress is True:
            progress = Progress(f"{self.backend}")
        elif progress is False:
            progress = None
        elif progress is not None and not callable(progress):
            raise TypeError(f"progress must be a callable(done, total), True or None, got {type(progress).__name__}")
        warn_emulated_on_cpu(self.method, self.device)
        t_fuse = time.perf_counter()
        n_input_gates = len(circuit)
        circuit = self._fused(circuit)
        fuse_s = time.perf_counter() - t_fuse
        n = circuit.n_qubits
        d_max = max(circuit.max_gate_qubits, 1)
        need = memory.state_bytes(n, self.dtype) + memory.gate_extra_bytes(
            self.method, n, min(d_max, n), self.dtype, self.options, spare_allocated=False, device=self.device.name)
        memory.check_fits(f"simulating {n} qubits with {self.backend!r} (gates up to {d_max} qubits)", need,
                          self.device)
        t0 = time.perf_counter() - fuse_s  # the run's wall time includes the fusion
        if initial_state is not None:
            if initial_state.n_qubits != n:
                raise ValueError(f"initial_state has {initial_state.n_qubits} qubits, the circuit {n}")
            state = initial_state.copy()
        else:
            state = StateVector(n, dtype=self.dtype, device=self.device)
        stats = []
        total = len(circuit)
        gates = circuit.gates
        for i, g in enumerate(gates):
            nxt = gates[i + 1].qubits if i + 1 < total else None
            info = state.apply(g.matrix, g.qubits, method=self.backend, check_unitary=False,
                               small_gate_kernel=self.small_gate_kernel, next_qubits=nxt, **self.options)
            stats.append(GateStat(i, g.name, g.qubits, info))
            if progress is not None:
                progress(i + 1, total)
        if circuit.global_phase:
            state.apply_global_phase(circuit.global_phase)
        gemm.device.synchronize(self.device.xp)
        wall = time.perf_counter() - t0
        meta = {"circuit": circuit.name, "device_reason": self.device.reason, "options": dict(self.options),
                "fuse": self.fuse, "fuse_s": fuse_s, "input_gates": n_input_gates, "applied_gates": total}
        if self.fuse == "auto" and self.fusion_choice is not None:
            meta["fusion_choice"] = self.fusion_choice.to_dict()
        return Result(state, stats, self.backend, self.device.name, wall, meta)
