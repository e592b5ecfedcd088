"""The state vector over several MPI processes (``pip install ".[mpi]"``; run under mpiexec)."""

import contextlib
import sys
import traceback

from qsim_tc.distributed.run import run_distributed
from qsim_tc.distributed.state import DistributedState

__all__ = ["DistributedState", "abort_on_error", "run_distributed"]


@contextlib.contextmanager
def abort_on_error(comm, code: int = 2):
    """Run a block on every rank; an exception on any rank prints its traceback and aborts all
    ranks (MPI_Abort), so that no rank is left waiting in a collective for one that failed."""
    try:
        yield
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(code)
        raise
