"""Pieces shared by subcommands: backend lists, options, progress bar, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np

from circuits._atomic import atomic_path, write_atomic
from gemm.diagnostics.style import require_matplotlib
from qsim_tc.progress import Progress  # noqa: F401 - the subcommands' progress bar


def add_device(p) -> None:
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                   help="where to run (auto: the GPU if cupy finds one, else the CPU)")


def add_precision(p) -> None:
    p.add_argument("--precision", choices=("double", "single"), default=None,
                   help="with --backend auto: double (complex128 state, FP64-class methods; the default) or "
                        "single (complex64, FP32-class methods)")


def add_tolerance(p) -> None:
    p.add_argument("--tolerance", type=float, default=None, metavar="L2",
                   help="with --backend auto: the largest error bound against double-double the run may have; "
                        "methods whose predicted bound misses it are not used (int8-crt runs the fewest moduli "
                        "that meet it), and the run is refused when none can")


def tolerance_option(args, backend: str):
    """The Simulator's ``tolerance=``: the flag with ``auto`` (None when not given); an error with a
    named backend."""
    tolerance = getattr(args, "tolerance", None)
    if tolerance is not None and backend != "auto":
        raise ValueError(f"--tolerance applies to --backend auto; backend {backend!r} runs as it is")
    return tolerance


def precision_option(args, backend: str):
    """The Simulator's ``precision=``: the flag with ``auto``; an error with a named backend."""
    precision = getattr(args, "precision", None)
    if backend == "auto":
        return precision or "double"
    if precision is not None:
        raise ValueError(f"--precision applies to --backend auto; backend {backend!r} has its own precision")
    return None


def methods_of(backends) -> list:
    """The gemm methods of the named backends (``auto`` stands for none); unknown names fail here."""
    import gemm  # noqa: PLC0415 - the CLI's parser builds without importing every method

    return [gemm.get_method(b) for b in backends if b != "auto"]


def add_backend_options(p) -> None:
    """Options of the emulated backends; only those a backend accepts are passed to it."""
    g = p.add_argument_group("backend options")
    g.add_argument("--threshold", type=float, default=None, help="int8-auto: mean mantissa loss allowed (bits)")
    g.add_argument("--splits", type=int, default=None, help="int8: number of INT8 slices")
    g.add_argument("--max-splits", type=int, default=None, help="int8-auto: most slices before falling back")


def add_fuse(p, default: str = "auto") -> None:
    p.add_argument("--fuse", default=default, metavar="D",
                   help="gate fusion: none, auto (from the measured gate costs) or the widest block d")
    p.add_argument("--plan", default="auto", choices=("auto", "always", "none"),
                   help="GPU: run the circuit as stages of many gates per pass when predicted faster (auto), "
                        "whenever every gate fits the stage kernel (always), or gate by gate (none)")


def plan_option(args):
    """The Simulator's ``plan=`` from ``--plan``."""
    text = getattr(args, "plan", "auto")
    return None if text == "none" else text


def print_stages(result) -> None:
    """One line on the stage decision, when one was made (GPU)."""
    st = result.metadata.get("stages")
    if st:
        print(f"stages: {'yes' if st['use'] else 'no'} ({st['why']})")


def explain_table(blocks) -> str:
    """One line per block: index, width, placement, method, predicted and measured ms, and why."""
    lines = [f"{'block':>5s} {'d':>2s} {'placement':9s} {'method':10s} {'predicted':>10s} {'measured':>10s}  why"]
    for b in blocks:
        why = b["reason"]
        if b["redone"]:
            why = "redone after " + "; ".join(f"{r['method']}: {r['why']}" for r in b["redone"]) + "; " + why
        # a tuned setting (Simulator(tolerance=...): int8-crt's moduli count) beside the method
        method = b["method"] + "".join(f"[{k}={v}]" for k, v in (b.get("options") or {}).items())
        lines.append(f"{b['index']:5d} {b['d']:2d} {b['placement']:9s} {method:10s} "
                     f"{_cell(b['predicted_ms'])} {_cell(b['measured_ms'])}  {why}")
    lines.append("(times in ms; - where a stage is not timed apart)")
    return "\n".join(lines)


def error_text(result) -> str | None:
    """The run's error-bound line (:attr:`qsim_tc.Result.error`), or None where it has none."""
    return None if result.error is None else result.error.summary()


def error_steps_table(result) -> str | None:
    """The steps that contribute most to the run's error bound, one line each (``--explain``)."""
    rep = result.error
    if rep is None or not rep.top_steps:
        return None
    lines = [f"{'step':>5s} {'label':16s} {'method':10s} {'bound':>10s} {'estimate':>10s}  (largest error-bound steps)"]
    for s in rep.top_steps:
        lines.append(f"{s.index:5d} {s.label[:16]:16s} {s.method:10s} {s.bound:10.3g} {s.estimate:10.3g}")
    lines += [f"precision: {note}" for note in rep.notes]  # what a tolerance chose, and why
    return "\n".join(lines)


def _cell(ms) -> str:
    return f"{ms:9.3f}m" if ms is not None else f"{'-':>10s}"


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def time_text(result, n_gates: int) -> str:
    """The run's time line: wall time, the circuit's gates and the steps that applied them, and
    the time in the steps where they were timed one by one (a CPU stage or a gate; a GPU stage is
    one asynchronous launch, timed only as part of the wall time)."""
    t, k = result.gate_time_ms, len(result.steps or result.stats)
    if result.step_kind == "stage":
        line = f"time: {result.wall_s:.3f} s wall, {n_gates} gates in {k} stage{'' if k == 1 else 's'} (passes)"
        return line + ("" if t is None else f", {t:.1f} ms in stages ({t / max(k, 1):.2f} ms/stage)")
    return (f"time: {result.wall_s:.3f} s wall, {n_gates} gates in {k} blocks applied, {t:.1f} ms in "
            f"gates ({t / max(n_gates, 1):.2f} ms/gate)")


def run_or_hint(sim, circ, args, progress):
    """``sim.run(circ)``; where it does not fit, its InsufficientMemoryError with what would
    (:func:`memory_hint`) added to the message."""
    from qsim_tc.errors import InsufficientMemoryError  # noqa: PLC0415

    try:
        return sim.run(circ, progress=progress)
    except InsufficientMemoryError as exc:
        exc.args = (str(exc) + memory_hint(exc, circ.n_qubits, sim, args),)
        raise


def memory_hint(exc, n_qubits: int, sim, args) -> str:
    """What would fit where a run of ``n_qubits`` did not (``exc``: its InsufficientMemoryError):
    single precision, or the bounded engine (state plus a bounded workspace, no spare buffer);
    "" when neither fits."""
    from qsim_tc import memory  # noqa: PLC0415

    avail = exc.available
    hints = []
    dtype = np.dtype(sim.dtype)
    if dtype == np.complex128:
        need = memory.state_bytes(n_qubits, np.complex64) + memory.default_workspace_bytes(n_qubits, np.complex64)
        if need <= avail:
            flag = "--precision single" if args.backend == "auto" else "--backend native32"
            hints.append(f"{flag} (complex64: {need / 2**30:.1f} GiB with the bounded engine)")
    need = memory.state_bytes(n_qubits, dtype) + (1 << 30)
    if getattr(args, "max_workspace", None) is None and need <= avail < exc.needed:
        hints.append(f"--max-workspace 1G (the bounded engine: {need / 2**30:.1f} GiB)")
    return f"; would fit: {' or '.join(hints)}" if hints else ""


def parse_bytes(text: str) -> int:
    """``--max-workspace`` values: bytes, or a number with K, M or G (binary units: 512M, 2G)."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in ("k", "m", "g") else ""
    try:
        value = float(t[: len(t) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes or a size like 512M or 2G, got {text!r}") from None
    return int(value)


def add_workspace(p) -> None:
    p.add_argument("--max-workspace", type=parse_bytes, default=None, metavar="BYTES",
                   help="the most memory gates may use beside the state (e.g. 512M, 2G); giving it runs the "
                        "bounded engine, which needs no state-sized spare buffer (default: the spare buffer where "
                        "twice the state fits, else the bounded engine with min(state/16, 4G))")


def fuse_option(args):
    """The Simulator's ``fuse=`` from ``--fuse``: None, "auto" or an int."""
    text = getattr(args, "fuse", "none")
    if text in ("none", "None", "0"):
        return None
    if text == "auto":
        return "auto"
    from circuits.fusion import MAX_FUSE_QUBITS  # noqa: PLC0415

    expected = f"--fuse must be none, auto or an int d in 1..{MAX_FUSE_QUBITS} (the widest fused block)"
    try:
        d = int(text)
    except ValueError:
        raise ValueError(f"{expected}, got {text!r}") from None
    if not 1 <= d <= MAX_FUSE_QUBITS:
        raise ValueError(f"{expected}, got {text!r}")
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
    """An option that no chosen backend accepts is an error, not silently dropped (``auto`` takes
    none: each method it picks runs with its defaults)."""
    for key in _given_options(args):
        if not any(key in m.options for m in methods):
            names = ", ".join(m.name for m in methods)
            raise ValueError(f"--{key.replace('_', '-')} is not an option of {names}; "
                             "it applies to int8 (--splits) and int8-auto (--threshold, --max-splits)")


def parse_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def check_outputs(args, *, plot: bool = True) -> None:
    """Before any work: the folders of ``--json`` / ``--plot`` exist and take new files, the paths
    are not folders, and ``--plot`` has matplotlib (a run's results are not lost at its end)."""
    for opt in ("json", "plot") if plot else ("json",):
        path = getattr(args, opt, None)
        if not path:
            continue
        check_writable(f"--{opt} {path}", path)
    if plot and getattr(args, "plot", None):
        try:
            require_matplotlib("--plot")
        except ImportError as exc:
            raise RuntimeError(str(exc)) from None


def check_writable(what: str, path: str) -> None:
    """That a file can be written at ``path``: its folder exists and a new file can be made there
    (tried, then removed: permissions, read-only file systems and full quotas all show).

    Raises:
        ValueError: naming ``what``, the folder and the reason.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{what}: the folder {folder} does not exist; create it first")
    if os.path.isdir(path):
        raise ValueError(f"{what} is a folder; give a file name")
    try:
        fd, probe = tempfile.mkstemp(prefix=".qsim-tc-probe-", dir=folder)
    except OSError as exc:
        raise ValueError(f"{what}: cannot write in {folder} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def write_json(path: str, payload: dict) -> None:
    """Write ``payload`` as JSON to ``path``, whole or not at all (an existing file survives a
    failed write), and say so."""
    write_atomic(path, json.dumps(payload, indent=1, default=_default))
    print(f"wrote {path}")


def write_plot(path: str, draw) -> None:
    """Call ``draw(tmp_path)`` to write a plot beside ``path``, then rename it over ``path``."""
    with atomic_path(path) as tmp:
        draw(str(tmp))
    print(f"wrote {path}")


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
