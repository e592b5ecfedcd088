"""The cost-table cache file: reading it without trusting it, writing it whole.

A cached table (one JSON file per device key, :func:`qsim_tc.calibrate.cache_path`) is data
from outside the process: a file left by another version, cut short by a full disk, or edited.
:func:`read` checks every field (:meth:`qsim_tc.plan.costs.CostTable.from_json`), the file's size
and kind, the device key and the method names, and raises :class:`~qsim_tc.plan.costs.CostTableError`
naming the file; the caller then reports it once (:func:`report_once`) and runs on a shipped table
until ``qsim-tc calibrate`` writes a new one over it. :func:`write` goes through a temporary file
created in the same folder (``O_EXCL``, no symlink followed) and renamed over the old one.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import gemm
from circuits._atomic import write_atomic
from qsim_tc.plan.costs import CostTable, CostTableError

MAX_BYTES = 4 << 20  # a measured table is ~10-50 KB; a larger file is not one (and is not read)
_REPORTED: set = set()  # (path, reason) already reported by this process


class CostTableWarning(UserWarning):
    """A cached cost table could not be used (it is ignored; ``qsim-tc calibrate`` replaces it)."""


def read(path: Path, key: dict) -> CostTable | None:
    """The table cached at ``path`` for device ``key``; None when there is no such file.

    Raises:
        CostTableError: the file exists but is not a valid table of ``key`` (the message names the
            file and what is wrong).
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CostTableError(f"cost table {path} is unreadable: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CostTableError(f"cost table {path} is not a regular file")
    if info.st_size > MAX_BYTES:
        raise CostTableError(f"cost table {path} is unreadable: {info.st_size} bytes, more than a table takes "
                             f"({MAX_BYTES})")
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_BYTES + 1).decode("utf-8")
        table = CostTable.from_json(text, origin=f"cache:{path}")
    except (CostTableError, OSError, UnicodeDecodeError) as exc:
        raise CostTableError(f"cost table {path} is unreadable: {exc}") from None
    if table.key != key:
        raise CostTableError(f"cost table {path} was measured for {table.key}, not {key}")
    unknown = sorted({r.backend for r in table.rows} - set(gemm.methods()))
    if unknown:
        raise CostTableError(f"cost table {path} names unknown method(s) {', '.join(unknown)}")
    return table


def write(path: Path, table: CostTable) -> Path:
    """Write ``table`` to ``path`` (its folder created), whole or not at all; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, table.to_json() + "\n")
    return path


def report_once(error: CostTableError, what_now: str, message=None) -> None:
    """Say once per process that a cached table was not used: ``"<error>; <what_now>"``.

    Args:
        error: from :func:`read` (it names the file).
        what_now: what is used instead ("using a shipped table", "recalibrating").
        message: called with the line; default a :class:`CostTableWarning`.
    """
    text = f"{error}; {what_now}"
    if text in _REPORTED:
        return
    _REPORTED.add(text)
    if message is not None:
        message(text)
    else:
        warnings.warn(text, CostTableWarning, stacklevel=3)


def forget_reports() -> None:
    """Report again what was reported (the cache has changed)."""
    _REPORTED.clear()
