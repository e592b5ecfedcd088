"""One failing rank ends every rank: the guard that keeps a collective from waiting forever."""

import contextlib
import sys
import time
import traceback


@contextlib.contextmanager
def abort_on_error(comm, code: int = 2):
    """Run a block on every rank; an exception on any rank prints its traceback and aborts all
    ranks (MPI_Abort), so that no rank is left waiting in a collective for one that failed.

    Nested use is harmless: the innermost guard aborts, and MPI_Abort does not return."""
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
