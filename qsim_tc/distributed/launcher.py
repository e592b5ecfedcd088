"""Where the MPI launcher is: the ``mpi`` extra's mpich wheel puts ``mpiexec`` beside the Python
interpreter, which need not be on PATH (a virtual environment used without activation)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_mpiexec() -> str | None:
    """The path of ``mpiexec`` (or ``mpirun``): beside the running interpreter first, then on PATH;
    None when neither has one."""
    here = Path(sys.executable).parent
    for name in ("mpiexec", "mpirun"):
        candidate = here / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("mpiexec") or shutil.which("mpirun")
