"""The state vector over several MPI processes (``pip install ".[mpi]"``; run under mpiexec)."""

from qsim_tc.distributed.abort import abort_on_error
from qsim_tc.distributed.run import run_distributed
from qsim_tc.distributed.state import DistributedState

__all__ = ["DistributedState", "abort_on_error", "run_distributed"]
