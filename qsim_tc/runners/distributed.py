"""The distributed run: the state over the ranks of an MPI communicator, stage by stage
(:func:`qsim_tc.distributed.run_distributed`; each rank runs its slice with a Simulator, so this
runner sits above :class:`qsim_tc.Simulator`, not below it)."""

from __future__ import annotations

from circuits import Circuit
from qsim_tc.distributed import DistributedState, run_distributed
from qsim_tc.runners.records import STAGE, StepRecord


def run_distributed_steps(circuit: Circuit, comm, **options) -> tuple[DistributedState, list[StepRecord]]:
    """Simulate ``circuit`` over the ranks of ``comm`` (collective; the options are
    :func:`~qsim_tc.distributed.run_distributed`'s).

    Returns:
        (state, steps): this rank's DistributedState and one record a stage (method
        ``"distributed"``; the time this rank spent in the stage, its swaps included).
    """
    steps: list[StepRecord] = []

    def on_stage(index: int, gates: tuple[int, ...], seconds: float) -> None:
        qubits = tuple(sorted({q for g in gates for q in circuit.gates[g].qubits}))
        steps.append(StepRecord(index, STAGE, gates, qubits, "distributed", seconds * 1e3))

    state = run_distributed(circuit, comm, on_stage=on_stage, **options)
    return state, steps
