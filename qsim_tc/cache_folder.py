"""Where qsim-tc keeps what it measured on this machine: the cost tables (``qsim_tc.calibrate``) and
the CPU stage executor's fusion costs (``qsim_tc.stages.cpu_fuse_calibration``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$QSIM_TC_CACHE``, else ``$XDG_CACHE_HOME/qsim-tc``, else ``~/.cache/qsim-tc``."""
    if os.environ.get("QSIM_TC_CACHE"):
        return Path(os.environ["QSIM_TC_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qsim-tc"
