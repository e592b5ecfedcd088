"""The commands under mpiexec: ``mpiexec -n R qsim-tc brickwork ...`` / ``qsim-tc run FILE`` run the
circuit over R ranks (:mod:`qsim_tc.distributed`) when the launcher says there are several.
Rank 0 prints and writes the JSON; every rank computes."""

from __future__ import annotations

import os
import time

from qsim_tc.cli.common import write_json
from qsim_tc.environment import environment

# the process count the common launchers put in each rank's environment
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")


def launched_ranks() -> int:
    """How many ranks the MPI launcher started (1 when not under one)."""
    for var in _SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 1:
            return int(value)
    return 1


def run_ranks(args, circ, backend: str, what: str) -> int:
    """Simulate ``circ`` over the launched ranks; rank 0 reports like the single-process command,
    plus ranks, exchanges, swaps and bytes sent per rank."""
    try:
        from mpi4py import MPI  # noqa: PLC0415 - the mpi extra
    except ImportError as exc:
        raise ValueError('started under an MPI launcher, but mpi4py is not installed: pip install ".[mpi]"') from exc
    from qsim_tc.distributed import abort_on_error, run_distributed  # noqa: PLC0415

    comm = MPI.COMM_WORLD
    with abort_on_error(comm):
        comm.Barrier()
        t0 = time.perf_counter()
        st = run_distributed(circ, comm, backend=backend, device=args.device)
        comm.Barrier()
        wall = time.perf_counter() - t0
        norm, amp0 = st.norm(), st.amplitude(0)
        swaps = comm.gather(st.swaps, root=0)
        exchanges = comm.gather(st.exchanges, root=0)
        sent = comm.gather(st.bytes_sent, root=0)
        if comm.Get_rank() == 0:
            print(f"{what}: {circ.n_qubits} qubits, {len(circ)} gates, backend {backend}, {comm.Get_size()} ranks of "
                  f"{st.local_qubits} local qubits ({args.device})")
            print(f"time: {wall:.3f} s wall; {max(exchanges)} exchanges of {max(swaps)} swapped bits, "
                  f"{max(sent):,} bytes sent per rank (most)")
            print(f"norm: {norm:.15f}")
            print(f"amplitude[0] = {amp0:.6e}")
            if getattr(args, "json", None):
                write_json(args.json, {"command": what, "args": vars(args) | {"func": None}, "environment": environment(),
                                       "ranks": comm.Get_size(), "local_qubits": st.local_qubits, "wall_s": wall,
                                       "swaps_per_rank": swaps, "exchanges_per_rank": exchanges,
                                       "bytes_sent_per_rank": sent, "norm": norm,
                                       "amp0": [amp0.real, amp0.imag]})
    return 0
