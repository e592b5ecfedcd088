"""Accuracy of a simulated state against a reference: metrics, mirror checks, backend tables.

- :func:`compare`: error metrics of a state against a reference (a double-double state from
  :func:`qsim_tc.reference.simulate_dd`, a ``(hi, lo)`` pair or a plain array).
- :func:`mirror_error`: run a circuit and then its inverse, compare with |0...0>; needs no
  reference, so it reaches sizes the DD reference cannot.
- :func:`accuracy_table`, :func:`format_table`, :func:`plot_rows`: every backend on one circuit,
  timed, with its speed relative to ``native`` and every metric.

Errors are computed without losing what they measure: ``psi - ref`` is formed with TwoSum
against the DD reference (so a 1e-30 error is resolved), and the fidelity's inner products
and norms are summed in double-double, so ``1 - F`` keeps its digits down to ~1e-31.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import numpy as np

import gemm
from gemm.dd import arith as dd_arith
from gemm.diagnostics.style import REFERENCE_LABEL, method_style, offsets, require_matplotlib
from qsim_tc.plan.select import PRECISION_CLASSES
from qsim_tc.progress import Progress
from qsim_tc.reference import simulate_dd
from qsim_tc.simulator import AUTO, Simulator, as_circuit
from qsim_tc.state import StateVector

METRICS = ("amp0_real_rel", "max_rel", "mean_rel", "l2_rel", "infidelity", "norm_drift")
DEFAULT_FLOOR_FACTOR = 1e-3  # default floor: 1e-3 of the typical amplitude 2^(-n/2)


# --- compare -----------------------------------------------------------------------------------


def _state_array(state):
    """A 1-D complex array and its array module from a StateVector, a Result or an array."""
    if hasattr(state, "state") and isinstance(getattr(state, "state"), StateVector):
        state = state.state
    if isinstance(state, StateVector):
        data = state.data()
        return data, state.xp
    if hasattr(state, "shape") and hasattr(state, "dtype"):
        xp = gemm.device.array_module(state)
        if np.dtype(state.dtype).kind not in "fc":
            raise TypeError(f"state must hold complex or float amplitudes, got dtype {state.dtype}")
        return state.reshape(-1), xp
    raise TypeError(f"state must be a qsim_tc.StateVector or an array, got {type(state).__name__}")


def _reference_pair(reference, xp):
    """(hi, lo) complex128 arrays on ``xp`` from a DDState, a (hi, lo) tuple or an array."""
    if hasattr(reference, "hi") and hasattr(reference, "lo"):
        hi, lo = reference.hi, reference.lo
    elif isinstance(reference, tuple):
        if len(reference) != 2:
            raise ValueError(f"reference as a tuple must be (hi, lo), got {len(reference)} items")
        hi, lo = reference
    elif hasattr(reference, "shape") and hasattr(reference, "dtype"):
        hi, lo = reference, None
    else:
        raise TypeError(f"reference must be a DDState, a (hi, lo) pair or an array, got {type(reference).__name__}")

    def move(a):
        if a is None:
            return None
        if xp is np and hasattr(a, "get") and not isinstance(a, np.ndarray):
            a = a.get()
        return xp.asarray(a, dtype=np.complex128).reshape(-1)

    hi = move(hi)
    lo = xp.zeros_like(hi) if lo is None else move(lo)
    return hi, lo


def _dd_dot_real(xh, xl, yh, yl, xp):
    """DD sum of x * y over real DD vectors (Python floats hi, lo)."""
    ph, pl = dd_arith.dd_mul(xh, xl, yh, yl)
    return dd_arith.dd_sum(ph, pl, xp)


def _dd_scalar_add(a, b):
    return tuple(float(v) for v in dd_arith.dd_add(a[0], a[1], b[0], b[1]))


def _dd_scalar_mul(a, b):
    return tuple(float(v) for v in dd_arith.dd_mul(a[0], a[1], b[0], b[1]))


def _dd_float(a) -> float:
    return float(a[0]) + float(a[1])


def compare(state, reference, floor: float | None = None) -> dict[str, Any]:
    """Error metrics of ``state`` against ``reference``.

    Args:
        state: a :class:`qsim_tc.StateVector` (or a simulator ``Result``), or a 1-D array of
            amplitudes in logical order (numpy or cupy, complex64/complex128).
        reference: a :class:`qsim_tc.reference.DDState`, a ``(hi, lo)`` pair of arrays, or one
            array (taken as exact).
        floor: amplitudes with ``|ref| <= floor`` are left out of ``max_rel`` and ``mean_rel``
            (never divided by); None means 1e-3 * 2^(-n/2), a thousandth of a typical amplitude.

    Returns:
        dict with ``amp0_real_rel`` (relative error of Re(amplitude 0); NaN if Re(ref_0) is 0),
        ``max_rel``, ``mean_rel`` (over ``n_compared`` amplitudes above ``floor``;
        ``n_below_floor`` counts the others; NaN if none is above), ``l2_rel``
        (``||psi - ref|| / ||ref||``), ``infidelity`` (``1 - |<ref|psi>|^2 / (<ref|ref><psi|psi>)``,
        in double-double), ``norm_drift`` (``||psi|| - ||ref||``), ``n_qubits``, ``floor``.

    Raises:
        TypeError: unsupported types. ValueError: different numbers of qubits; a negative floor.
    """
    psi, xp = _state_array(state)
    ref_hi, ref_lo = _reference_pair(reference, xp)
    if psi.size != ref_hi.size or ref_lo.size != ref_hi.size:
        nq = lambda s: (math.log2(s) if s > 0 else float("nan"))  # noqa: E731
        raise ValueError(f"state has {psi.size} amplitudes ({nq(psi.size):g} qubits) but reference has "
                         f"{ref_hi.size} ({nq(ref_hi.size):g} qubits); they must match")
    size = int(psi.size)
    n_qubits = size.bit_length() - 1
    if size != 1 << n_qubits:
        raise ValueError(f"state has {size} amplitudes, not a power of two")
    if floor is None:
        floor = DEFAULT_FLOOR_FACTOR * 2.0 ** (-n_qubits / 2)
    if not (isinstance(floor, (int, float, np.floating)) and np.isfinite(floor) and floor >= 0):
        raise ValueError(f"floor must be a finite number >= 0, got {floor!r}")
    if not bool(xp.isfinite(psi).all()):
        raise ValueError("state holds NaN or Inf amplitudes")
    p = psi.astype(np.complex128, copy=False)
    # err = psi - (ref_hi + ref_lo): TwoSum keeps psi - ref_hi exact, then the low part
    er_s, er_t = dd_arith.two_sum(p.real, -ref_hi.real)
    ei_s, ei_t = dd_arith.two_sum(p.imag, -ref_hi.imag)
    err_re = er_s + (er_t - ref_lo.real)
    err_im = ei_s + (ei_t - ref_lo.imag)
    abs_err = xp.hypot(err_re, err_im)
    abs_ref = xp.abs(ref_hi + ref_lo)
    above = abs_ref > floor
    n_cmp = int(above.sum())
    if n_cmp:
        rel = abs_err[above] / abs_ref[above]
        max_rel = float(rel.max())
        mean_rel = float(rel.mean())
    else:
        max_rel = mean_rel = float("nan")
    r0 = float(ref_hi[0].real) + float(ref_lo[0].real)
    amp0_real_rel = abs(float(err_re[0])) / abs(r0) if r0 != 0 else float("nan")
    ref_norm2 = float(xp.sum(abs_ref.astype(np.float64) ** 2))
    err_norm2 = float(xp.sum(abs_err**2))
    l2_rel = math.sqrt(err_norm2 / ref_norm2) if ref_norm2 > 0 else float("nan")

    # double-double inner products for the fidelity and the norms
    zeros = xp.zeros(size, dtype=np.float64)
    rr, rl, ir, il = ref_hi.real, ref_lo.real, ref_hi.imag, ref_lo.imag
    pr, pi = xp.ascontiguousarray(p.real), xp.ascontiguousarray(p.imag)
    ov_re = _dd_scalar_add(_dd_dot_real(rr, rl, pr, zeros, xp), _dd_dot_real(ir, il, pi, zeros, xp))
    ri_pr = _dd_dot_real(ir, il, pr, zeros, xp)
    ov_im = _dd_scalar_add(_dd_dot_real(rr, rl, pi, zeros, xp), (-ri_pr[0], -ri_pr[1]))
    nref = _dd_scalar_add(_dd_dot_real(rr, rl, rr, rl, xp), _dd_dot_real(ir, il, ir, il, xp))
    npsi = _dd_scalar_add(_dd_dot_real(pr, zeros, pr, zeros, xp), _dd_dot_real(pi, zeros, pi, zeros, xp))
    ov2 = _dd_scalar_add(_dd_scalar_mul(ov_re, ov_re), _dd_scalar_mul(ov_im, ov_im))
    denom = _dd_scalar_mul(nref, npsi)
    if _dd_float(denom) > 0:
        num = _dd_scalar_add(denom, (-ov2[0], -ov2[1]))
        infidelity = _dd_float(num) / _dd_float(denom)
    else:
        infidelity = float("nan")
    diff = _dd_scalar_add(npsi, (-nref[0], -nref[1]))
    root_sum = math.sqrt(_dd_float(npsi)) + math.sqrt(_dd_float(nref))
    norm_drift = _dd_float(diff) / root_sum if root_sum > 0 else float("nan")
    return {
        "amp0_real_rel": amp0_real_rel,
        "max_rel": max_rel,
        "mean_rel": mean_rel,
        "l2_rel": l2_rel,
        "infidelity": infidelity,
        "norm_drift": norm_drift,
        "n_qubits": n_qubits,
        "floor": float(floor),
        "n_compared": n_cmp,
        "n_below_floor": size - n_cmp,
    }


# --- mirror ------------------------------------------------------------------------------------


def mirror_error(simulator, circuit, floor: float = 0.5, progress=None) -> dict[str, Any]:
    """Run ``circuit`` then ``circuit.inverse()`` on ``simulator`` and compare with |0...0>.

    Exact arithmetic returns |0...0>; what is left measures the accumulated rounding of twice the
    circuit's gates, with no reference state (any width the simulator can hold).

    Args:
        simulator: a :class:`qsim_tc.Simulator`.
        circuit: a :class:`circuits.Circuit`.
        floor: amplitudes of |0...0> above it are compared relatively (only amplitude 0).
        progress: passed to :meth:`Simulator.run`.

    Returns:
        :func:`compare`'s dict plus ``time_s`` (the mirrored run) and ``n_gates`` (both halves).
    """
    circuit = as_circuit(circuit)
    mirrored = circuit.then(circuit.inverse())
    result = simulator.run(mirrored, progress=progress)
    xp = result.state.xp
    e0 = xp.zeros(1 << circuit.n_qubits, dtype=np.complex128)
    e0[0] = 1
    out = compare(result.state, e0, floor=floor)
    out["time_s"] = result.wall_s
    out["n_gates"] = len(mirrored)
    return out


# --- tables over backends ----------------------------------------------------------------------


def accuracy_table(circuit, backends, device="auto", reference: str | None = "dd", mirror: bool = False,
                   options_per_backend: dict | None = None, floor: float | None = None,
                   warmup: bool | None = None, progress=None) -> list[dict[str, Any]]:
    """Run every backend on ``circuit``, time it, and measure it against the reference.

    Args:
        circuit: a :class:`circuits.Circuit`.
        backends: GEMM method names (``gemm.methods()``) or ``"auto"`` (the per-block choice of
            :class:`~qsim_tc.Simulator`; ``options_per_backend["auto"]`` may give its
            ``precision``); ``"native"`` is added first if absent, as the speed baseline.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        reference: ``"dd"`` (a :func:`~qsim_tc.reference.simulate_dd` run on the same device)
            or None (no reference metrics).
        mirror: also run each backend on circuit + inverse and report ``mirror_*`` metrics.
        options_per_backend: backend name -> dict of options for that backend.
        floor: passed to :func:`compare`.
        warmup: run each backend once before timing (None: on the GPU only).
        progress: None; ``True`` (a bar per backend and stage on stderr, for stages longer than
            ~1.5 s; one line per stage when stderr is not a terminal); a
            :class:`qsim_tc.progress.Progress`; or a ``callable(str)`` told each stage's name.

    Returns:
        One dict per backend: ``backend``, ``precision``, ``time_s``, ``speedup_vs_native``
        (native time / backend time), every metric of :func:`compare` (with a reference), and
        ``mirror_l2_rel``, ``mirror_infidelity``, ``mirror_amp0_rel``, ``mirror_time_s`` (with
        ``mirror``); a last row ``backend="dd (reference)"`` gives the reference's own time.

    Raises:
        ValueError: an unknown backend or reference; TypeError: bad options.
    """
    if isinstance(backends, str):
        backends = [b.strip() for b in backends.split(",") if b.strip()]
    backends = list(backends)
    if not backends:
        raise ValueError("backends is empty; give at least one GEMM method name")
    for b in backends:
        if b != AUTO:
            gemm.get_method(b)  # raises with the list of valid names
    if reference not in ("dd", None):
        raise ValueError(f"reference={reference!r} is not valid; expected 'dd' or None")
    options_per_backend = dict(options_per_backend or {})
    unknown = sorted(set(options_per_backend) - set(backends) - {"native"})
    if unknown:
        raise ValueError(f"options_per_backend names backends not in the run: {', '.join(unknown)}")
    if "native" not in backends:
        backends = ["native", *backends]
    circuit = as_circuit(circuit)
    dev = gemm.resolve_device(device)
    if warmup is None:
        warmup = dev.is_gpu
    if progress is True:
        progress = Progress("reference")
    if isinstance(progress, Progress):
        bar = progress

        def say(msg):
            bar.stage(msg)
    else:
        bar = None
        say = progress or (lambda _msg: None)
    sims = {b: Simulator(b, device=dev, **options_per_backend.get(b, {})) for b in backends}

    ref = None
    ref_time = None
    if reference == "dd":
        say("reference: double-double")
        ref = simulate_dd(circuit, device=dev, progress=bar)
        ref_time = ref.wall_s
    rows = []
    for b in backends:
        sim = sims[b]
        if warmup:
            say(f"{b}: warm-up")
            sim.run(circuit, progress=bar)
        say(f"{b}: run")
        result = sim.run(circuit, progress=bar)
        row: dict[str, Any] = {"backend": b, "precision": precision_class(sim), "device": dev.name,
                               "time_s": result.wall_s, "options": options_per_backend.get(b, {})}
        if ref is not None:
            row.update(compare(result.state, ref, floor=floor))
        del result
        if mirror:
            say(f"{b}: mirror")
            m = mirror_error(sim, circuit, progress=bar)
            row.update({"mirror_amp0_rel": m["amp0_real_rel"], "mirror_l2_rel": m["l2_rel"],
                        "mirror_infidelity": m["infidelity"], "mirror_norm_drift": m["norm_drift"],
                        "mirror_time_s": m["time_s"]})
        rows.append(row)
    t_native = next(r["time_s"] for r in rows if r["backend"] == "native")
    for r in rows:
        r["speedup_vs_native"] = t_native / r["time_s"] if r["time_s"] > 0 else float("nan")
    if ref_time is not None:
        rows.append({"backend": "dd (reference)", "precision": "dd", "device": dev.name, "time_s": ref_time,
                     "speedup_vs_native": t_native / ref_time if ref_time > 0 else float("nan"),
                     "options": {}})
    return rows


def precision_class(sim: Simulator) -> str:
    """The precision class of a simulator's method ("fp64", "fp32"); with ``backend="auto"``, that
    of the precision it chooses within (auto has no single method)."""
    return sim.method.precision if sim.method is not None else PRECISION_CLASSES[sim.precision]


def _vs_native(v: float) -> str:
    """``speedup_vs_native`` in words: "1.00x", "3.2x faster", "232x slower"."""
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return "-"
    if 0.995 <= v <= 1.005:
        return "1.00x"
    if v > 1:
        return f"{v:.3g}x faster"
    return f"{1 / v:.3g}x slower"


_COLUMNS = (
    ("backend", "backend", "{}"),
    ("time_s", "time s", "{:.3f}"),
    ("speedup_vs_native", "vs native", _vs_native),
    ("amp0_real_rel", "amp0 re rel", "{:.2e}"),
    ("max_rel", "max rel", "{:.2e}"),
    ("mean_rel", "mean rel", "{:.2e}"),
    ("l2_rel", "l2 rel", "{:.2e}"),
    ("infidelity", "infidelity", "{:.2e}"),
    ("norm_drift", "norm drift", "{:.1e}"),
    ("mirror_time_s", "mirror time s", "{:.3f}"),
    ("mirror_l2_rel", "mirror l2", "{:.2e}"),
    ("mirror_infidelity", "mirror infid", "{:.2e}"),
)


def format_table(rows: list[dict]) -> str:
    """A plain-text table of :func:`accuracy_table` rows (columns that no row has are left out)."""
    cols = [c for c in _COLUMNS if any(c[0] in r for r in rows)]
    cells = [[title for _, title, _ in cols]]
    for r in rows:
        line = []
        for key, _, fmt in cols:
            v = r.get(key)
            if v is None:
                line.append("-")
            elif isinstance(v, str):
                line.append(v)
            else:
                line.append(fmt(v) if callable(fmt) else fmt.format(v))
        cells.append(line)
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    out = []
    for j, row in enumerate(cells):
        out.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    floor = next((r.get("floor") for r in rows if "floor" in r), None)
    if floor is not None:
        below = next(r.get("n_below_floor") for r in rows if "floor" in r)
        out.append(f"(max/mean rel over |ref| > {floor:.2e}; {below} amplitude(s) below the floor left out)")
    if any("mirror_l2_rel" in r for r in rows):
        out.append("(mirror: the circuit then its inverse, compared with |0...0>; its time covers both halves)")
    return "\n".join(out)


_BRICKWORK_NAME = re.compile(r"^brickwork_n(\d+)_d(\d+)_L(\d+)_s(-?\d+)$")


def describe_circuit(circuit) -> str:
    """A circuit in words for titles: "brickwork circuit, 20 qubits, 4-qubit gates, depth 10 (seed 1)"."""
    name = getattr(circuit, "name", "") or "circuit"
    m = _BRICKWORK_NAME.match(name)
    if m:
        n, d, depth, seed = m.groups()
        return f"brickwork circuit, {n} qubits, {d}-qubit gates, depth {depth} (seed {seed})"
    return f"{name}, {circuit.n_qubits} qubits, {len(circuit)} gates"


# (key, words) of the error metrics drawn, in the order drawn
_REF_METRICS = (("amp0_real_rel", "Re(amplitude 0)\nrelative"), ("max_rel", "max amplitude\nrelative"),
                ("mean_rel", "mean amplitude\nrelative"), ("l2_rel", "L2 norm\nrelative"))
_MIRROR_METRICS = (("mirror_amp0_rel", "Re(amplitude 0)\nrelative"), ("mirror_l2_rel", "L2 norm\nrelative"))


def _drew_positive(ax) -> bool:
    """Whether a panel holds a finite positive value (its points or bars) to put on a log axis."""
    ys = [y for line in ax.get_lines() for y in np.asarray(line.get_ydata(), dtype=float).ravel()]
    ys += [p.get_height() for p in ax.patches]
    return any(math.isfinite(y) and y > 0 for y in ys)


def _pos(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else np.nan


def plot_rows(rows: list[dict], path: str, title: str | None = None, *, circuit=None) -> str:
    """Plot errors and times per backend (log scales) to ``path`` (PNG); returns the path.

    Panels: the errors against the reference (when there is one), the errors after the circuit
    and its inverse (with ``mirror``), the infidelity, the run time. Each backend keeps the
    colour and marker of :mod:`gemm.diagnostics.style`, the same in every figure.

    Args:
        rows: :func:`accuracy_table`'s rows.
        path: the PNG to write.
        title: the first title line (default: the circuit in words, or "accuracy per backend").
        circuit: the circuit run, to describe it in the title.

    Raises:
        ImportError: matplotlib is missing (the message says what to install).
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("rows is empty; nothing to plot")
    plt = require_matplotlib("plot_rows")
    runs = [r for r in rows if r["backend"] != "dd (reference)"]
    ref_row = next((r for r in rows if r["backend"] == "dd (reference)"), None)
    has_ref = any("l2_rel" in r for r in runs)
    has_mirror = any("mirror_l2_rel" in r for r in runs)
    panels = []
    if has_ref:
        panels.append(("ref", "error against the double-double reference", _REF_METRICS))
    if has_mirror:
        panels.append(("mirror", "error after circuit and inverse (vs |0...0>)", _MIRROR_METRICS))
    if has_ref or has_mirror:
        panels.append(("infid", "infidelity 1 - F", None))
    panels.append(("time", "run time", None))
    ncols = 2 if len(panels) == 4 else len(panels)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols + 2.0, 4.6 * nrows), squeeze=False)
    axes = list(axes.ravel())
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    names = [r["backend"] for r in runs]
    labels = {r["backend"]: f"{r['backend']} ({str(r.get('precision', '')).upper()})" for r in runs}
    handles = {}
    dx = offsets(len(runs), 0.6)
    for ax, (kind, ptitle, metrics) in zip(axes, panels):
        if metrics is not None:
            for i, r in enumerate(runs):
                st = method_style(r["backend"])
                ys = [_pos(r.get(k)) for k, _ in metrics]
                (h,) = ax.plot(np.arange(len(metrics)) + dx[i], ys, linestyle="none", markersize=8,
                               markerfacecolor="none" if i % 2 else st["color"], markeredgewidth=1.5, **st)
                handles.setdefault(r["backend"], h)
            ax.set_xticks(range(len(metrics)))
            ax.set_xticklabels([w for _, w in metrics], fontsize=8)
            ax.set_xlim(-0.6, len(metrics) - 0.4)
            ax.set_ylabel("relative error" if kind == "ref" else "relative error after circuit + inverse")
            ax.set_xlabel("error measure")
        elif kind == "infid":
            keys = [k for k in ("infidelity", "mirror_infidelity") if any(k in r for r in runs)]
            bw = 0.8 / len(keys)
            for j, key in enumerate(keys):
                for i, r in enumerate(runs):
                    st = method_style(r["backend"])
                    v = _pos(r.get(key))
                    ax.bar(i + (j - (len(keys) - 1) / 2) * bw, v, bw, color=st["color"], edgecolor="black",
                           linewidth=0.5, hatch="//" if key.startswith("mirror") else None)
                    if not np.isfinite(v) and key in r:
                        ax.annotate("0", (i + (j - (len(keys) - 1) / 2) * bw, 0), xycoords=("data", "axes fraction"),
                                    ha="center", va="bottom", fontsize=7)
            ax.set_xticks(range(len(runs)))
            ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
            ax.set_ylabel("infidelity" + (" after circuit + inverse" if keys == ["mirror_infidelity"] else ""))
            if len(keys) > 1:
                ax.set_title("infidelity 1 - F (hatched: after circuit + inverse)", fontsize=9)
            ax.set_xlabel("method")
        else:
            keys = [k for k in ("time_s", "mirror_time_s") if any(k in r for r in runs)]
            bw = 0.8 / len(keys)
            for j, key in enumerate(keys):
                for i, r in enumerate(runs):
                    ax.bar(i + (j - (len(keys) - 1) / 2) * bw, _pos(r.get(key)), bw,
                           color=method_style(r["backend"])["color"], edgecolor="black", linewidth=0.5,
                           hatch="//" if key.startswith("mirror") else None)
            ticks = names
            if ref_row is not None:
                ax.bar(len(runs), _pos(ref_row["time_s"]), 0.8 / len(keys), color=method_style("dd")["color"])
                ticks = [*names, REFERENCE_LABEL]
            ax.set_xticks(range(len(ticks)))
            ax.set_xticklabels(ticks, rotation=45, ha="right", fontsize=8)
            if len(keys) > 1:
                ax.set_title("run time (hatched: circuit + inverse)", fontsize=9)
            ax.set_ylabel("wall time (seconds)")
            ax.set_xlabel("method")
        if _drew_positive(ax):
            ax.set_yscale("log")
            if kind != "time":  # the time axis keeps its minor labels: its range is often under a decade
                ax.yaxis.set_minor_formatter(plt.NullFormatter())
        else:  # every value 0 (an exact result) or missing: a log axis has nothing to show
            ax.text(0.5, 0.5, "all values 0 or missing", transform=ax.transAxes, ha="center", va="center")
        if not ax.get_title():
            ax.set_title(ptitle, fontsize=9)
        ax.grid(True, axis="y", which="major", alpha=0.3)
    if handles:
        fig.legend(list(handles.values()), [labels[n] for n in handles], loc="center left",
                   bbox_to_anchor=(1.0, 0.5), title="method (precision)", fontsize=9)
    head = title or (describe_circuit(circuit) if circuit is not None else "accuracy per backend")
    precisions = sorted({str(r.get("precision", "")).upper() for r in runs if r.get("precision")})
    device = runs[0].get("device", "?")
    fig.suptitle(f"{head}\nprecision {', '.join(precisions)}, device {device}, {datetime.date.today().isoformat()}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
