"""The bounded run: the gate path on a state without a state-sized spare buffer, each gate's
GEMM through a workspace of at most ``workspace_bytes`` (:mod:`qsim_tc.engine.bounded`), with a
named method or ``backend="auto"``. Chosen where ``workspace_bytes`` is given."""

from __future__ import annotations

from circuits import Circuit
from qsim_tc.runners.auto import run_auto
from qsim_tc.runners.base import AUTO, RunOutput, Settings, Start
from qsim_tc.runners.gates import run_gates


def run_bounded(circuit: Circuit, start: Start, settings: Settings, table, progress=None, covers=None,
                fused_widths=None) -> RunOutput:
    """Every gate of ``circuit`` on a state whose workspace is bounded by
    ``settings.workspace_bytes`` (the start state is made with it, which selects the bounded
    engine; memory is checked against it before anything is allocated). ``table``: the cost
    table and ``fused_widths`` (:func:`~qsim_tc.runners.auto.run_auto`), for ``backend="auto"`` only.

    Raises:
        ValueError: ``settings.workspace_bytes`` is None (use :func:`run_gates` or :func:`run_auto`).
    """
    if settings.workspace_bytes is None:
        raise ValueError("run_bounded needs settings.workspace_bytes (the bound of the gates' workspace)")
    if settings.backend == AUTO:
        return run_auto(circuit, start, settings, table, progress, covers, fused_widths)
    return run_gates(circuit, start, settings, progress, covers)
