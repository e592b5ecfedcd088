"""What every benchmark shares: the command that ran it, the machine and library versions, the
commit, and writing a result file that records all of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from qsim_tc.environment import environment

__all__ = ["command", "commit", "environment", "parse_range", "write_results"]


def command(module: str, argv: list[str] | None = None) -> str:
    """The command line that reproduces a run of ``module`` (``python -m module args``)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", "-m", module, *args])


def commit() -> str | None:
    """The checked-out commit (with ``+dirty`` when the tree has changes), or None outside git."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def _plain(o):
    """numpy / cupy scalars and arrays as JSON values; anything else by its text."""
    if hasattr(o, "item") and getattr(o, "ndim", 1) == 0:
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def write_results(path: str | Path, payload: dict, *, module: str, argv: list[str] | None = None) -> dict:
    """Write ``payload`` as JSON with ``command``, ``environment`` and ``commit`` filled in.

    Keys the payload already has are kept (a benchmark may record a more precise command).

    Returns:
        The payload as written.
    """
    out = {"command": command(module, argv), "environment": environment(), "commit": commit()}
    out.update(payload)
    Path(path).write_text(json.dumps(out, indent=1, default=_plain))
    print(f"wrote {path}")
    return out


def parse_range(text: str) -> list[int]:
    """``"1-4,6"`` -> ``[1, 2, 3, 4, 6]``."""
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out
