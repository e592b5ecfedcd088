"""The state vector over several MPI processes (``pip install ".[mpi]"``; run under mpiexec)."""

import contextlib
import sys
import time
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
        # one write, then a moment for the launcher to forward it: the abort tears down every
        # rank's pipes, and a traceback printed line by line arrived cut after its first line
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        time.sleep(0.5)
        comm.Abort(code)
        raise
