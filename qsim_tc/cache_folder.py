"""Where qsim-tc keeps what it measured on this machine: the cost tables (``qsim_tc.calibrate``) and
the CPU stage executor's fusion costs (``qsim_tc.stages.cpu_fuse_calibration``)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path


def cache_dir() -> Path:
    """``$QSIM_TC_CACHE``, else ``$XDG_CACHE_HOME/qsim-tc``, else ``~/.cache/qsim-tc``."""
    if os.environ.get("QSIM_TC_CACHE"):
        return Path(os.environ["QSIM_TC_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qsim-tc"


def keyed_path(prefix: str, name: str, key: dict) -> Path:
    """The cache file of what was measured for ``key``: ``prefix-name-digest.json`` in
    :func:`cache_dir`, ``name`` made readable, the digest of the whole key (another key, another file)."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", str(name)).strip("-").lower() or "device"
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir() / f"{prefix}-{slug}-{digest}.json"
