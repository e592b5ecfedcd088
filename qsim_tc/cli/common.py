"""Pieces shared by subcommands: backend lists, options, progress bar, JSON output."""

from __future__ import annotations

import json
import sys
import time


def add_device(p) -> None:
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                   help="where to run (auto: the GPU if cupy finds one)")


def add_backend_options(p) -> None:
    """Options of the emulated backends; only those a backend accepts are passed to it."""
    g = p.add_argument_group("backend options")
    g.add_argument("--threshold", type=float, default=None, help="int8-auto: mean mantissa loss allowed (bits)")
    g.add_argument("--splits", type=int, default=None, help="int8: number of INT8 slices")
    g.add_argument("--max-splits", type=int, default=None, help="int8-auto: most slices before falling back")


def add_fuse(p, default: str = "none") -> None:
    p.add_argument("--fuse", default=default, metavar="D",
                   help=f"gate fusion: none, auto (from the measured gate costs) or the widest block d "
                        f"(default {default})")


def fuse_option(args):
    """The Simulator's ``fuse=`` from ``--fuse``: None, "auto" or an int."""
    text = getattr(args, "fuse", "none")
    if text in ("none", "None", "0"):
        return None
    if text == "auto":
        return "auto"
    try:
        d = int(text)
    except ValueError:
        raise ValueError(f"--fuse must be none, auto or an int d >= 1, got {text!r}") from None
    if d < 1:
        raise ValueError(f"--fuse must be none, auto or an int d >= 1, got {text!r}")
    return d


def _given_options(args) -> dict:
    given = {
        "threshold": getattr(args, "threshold", None),
        "splits": getattr(args, "splits", None),
        "max_splits": getattr(args, "max_splits", None),
    }
    return {k: v for k, v in given.items() if v is not None}


def backend_options(args, method) -> dict:
    """The backend options given on the command line that ``method`` accepts."""
    return {k: v for k, v in _given_options(args).items() if k in method.options}


def check_options_used(args, methods) -> None:
    """An option that no chosen backend accepts is an error, not silently dropped."""
    for key in _given_options(args):
        if not any(key in m.options for m in methods):
            names = ", ".join(m.name for m in methods)
            raise ValueError(f"--{key.replace('_', '-')} is not an option of {names}; "
                             "it applies to int8 (--splits) and int8-auto (--threshold, --max-splits)")


def parse_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


class Progress:
    """A one-line progress bar on stderr, shown only once a run has lasted ``after`` seconds."""

    def __init__(self, label: str, after: float = 2.0, stream=None):
        self.label = label
        self.after = after
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        el = time.perf_counter() - self.t0
        if el < self.after and done < total:
            return
        if not self.shown and done == total and el < self.after:
            return
        self.shown = True
        width = 30
        fill = int(width * done / max(total, 1))
        eta = el / done * (total - done) if done else 0.0
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {done}/{total} "
                          f"{el:6.1f}s eta {eta:5.1f}s")
        if done == total:
            self.stream.write("\n")
        self.stream.flush()


def write_json(path: str, payload: dict) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=_default)
    print(f"wrote {path}")


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
