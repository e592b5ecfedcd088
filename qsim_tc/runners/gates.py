"""The gate run with one named method: each gate of the (fused) circuit one GEMM or small-gate
kernel, timed one by one; and the fusion every gate-path run starts with."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import gemm
from circuits import Circuit, fusion
from qsim_tc import memory
from qsim_tc.plan import choose_fusion
from qsim_tc.runners.base import RunOutput, Settings, Start
from qsim_tc.runners.records import GateStat, gate_steps


def fused(circuit: Circuit, fuse, settings: Settings, table: Callable, choice=None):
    """The circuit the gate path applies.

    Args:
        fuse: the Simulator's ``fuse`` option (None, a width, or ``"auto"``).
        table: returns the cost table (``"auto"`` prices the widths with it).
        choice: a FusionChoice already made for this circuit (the stage decision prices one).

    Returns:
        (circuit, covers, choice): the fused circuit (``circuit`` itself without fusion), for
        each of its gates the input gates it applies (None without fusion), and the ``"auto"``
        choice (None otherwise).
    """
    if fuse is None:
        return circuit, None, None
    if fuse != "auto":
        return *fusion.fuse_blocks(circuit, fuse), None
    if choice is None:
        choice = choose_fusion(circuit, settings.backend, settings.device.name, str(np.dtype(settings.dtype)),
                               table=table(), precision=settings.precision or "double")
    if choice.max_qubits is None:
        return circuit, None, choice
    return *fusion.fuse_blocks(circuit, choice.max_qubits, min_qubits=choice.min_qubits), choice


def max_width(circuit: Circuit) -> int:
    """The widest gate's qubits (at least 1, at most the circuit's)."""
    return min(max(circuit.max_gate_qubits, 1), circuit.n_qubits)


def run_gates(circuit: Circuit, start: Start, settings: Settings, progress=None, covers=None) -> RunOutput:
    """Every gate of ``circuit`` with ``settings.method``, in order.

    Args:
        circuit: the circuit as applied (fused or not); covers: its gates' input gates.
        start: the start state; progress: ``progress(done, total)`` after each gate.

    Raises:
        InsufficientMemoryError: before anything is allocated, if state + workspace do not fit.
    """
    n, d_max = circuit.n_qubits, max_width(circuit)
    memory.check_state_fits(f"simulating {n} qubits with {settings.backend!r} (gates up to {d_max} qubits)", n,
                            settings.dtype, settings.device, settings.method, d_max, settings.options,
                            workspace_bytes=settings.workspace_bytes, allocated=start.held_bytes)
    state = start.make()
    gates, total = circuit.gates, len(circuit)
    stats = []
    for i, g in enumerate(gates):
        nxt = gates[i + 1].qubits if i + 1 < total else None
        info = state.apply(g.matrix, g.qubits, method=settings.backend, check_unitary=False,
                           small_gate_kernel=settings.small_gate_kernel, next_qubits=nxt, **settings.options)
        stats.append(GateStat(i, g.name, g.qubits, info))
        if progress is not None:
            progress(i + 1, total)
    if circuit.global_phase:
        state.apply_global_phase(circuit.global_phase)
    gemm.device.synchronize(settings.device.xp)
    return RunOutput(state, stats, gate_steps(stats, covers))
