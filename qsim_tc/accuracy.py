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

import math
from typing import Any

import numpy as np

import gemm
from circuits import Circuit
from gemm.dd import arith as dd_arith
from qsim_tc.reference import simulate_dd
from qsim_tc.simulator import Simulator
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


def mirror_error(simulator, circuit, floor: float = 0.5) -> dict[str, Any]:
    """Run ``circuit`` then ``circuit.inverse()`` on ``simulator`` and compare with |0...0>.

    Exact arithmetic returns |0...0>; what is left measures the accumulated rounding of twice the
    circuit's gates, with no reference state (any width the simulator can hold).

    Args:
        simulator: a :class:`qsim_tc.Simulator`.
        circuit: a :class:`circuits.Circuit`.
        floor: amplitudes of |0...0> above it are compared relatively (only amplitude 0).

    Returns:
        :func:`compare`'s dict plus ``time_s`` (the mirrored run) and ``n_gates`` (both halves).
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a circuits.Circuit, got {type(circuit).__name__}")
    mirrored = circuit.then(circuit.inverse())
    result = simulator.run(mirrored)
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
        backends: GEMM method names (``gemm.methods()``); ``"native"`` is added first if absent,
            as the speed baseline.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        reference: ``"dd"`` (a :func:`~qsim_tc.reference.simulate_dd` run on the same device)
            or None (no reference metrics).
        mirror: also run each backend on circuit + inverse and report ``mirror_*`` metrics.
        options_per_backend: backend name -> dict of options for that backend.
        floor: passed to :func:`compare`.
        warmup: run each backend once before timing (None: on the GPU only).
        progress: optional ``callable(str)`` told what is running.

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
        gemm.get_method(b)  # raises with the list of valid names
    if reference not in ("dd", None):
        raise ValueError(f"reference={reference!r} is not valid; expected 'dd' or None")
    options_per_backend = dict(options_per_backend or {})
    unknown = sorted(set(options_per_backend) - set(backends) - {"native"})
    if unknown:
        raise ValueError(f"options_per_backend names backends not in the run: {', '.join(unknown)}")
    if "native" not in backends:
        backends = ["native", *backends]
    dev = gemm.resolve_device(device)
    if warmup is None:
        warmup = dev.is_gpu
    say = progress or (lambda _msg: None)
    sims = {b: Simulator(b, device=dev, **options_per_backend.get(b, {})) for b in backends}

    ref = None
    ref_time = None
    if reference == "dd":
        say("reference: double-double")
        ref = simulate_dd(circuit, device=dev)
        ref_time = ref.wall_s
    rows = []
    for b in backends:
        sim = sims[b]
        if warmup:
            say(f"{b}: warm-up")
            sim.run(circuit)
        say(f"{b}: run")
        result = sim.run(circuit)
        row: dict[str, Any] = {"backend": b, "precision": sim.method.precision, "device": dev.name,
                               "time_s": result.wall_s, "options": options_per_backend.get(b, {})}
        if ref is not None:
            row.update(compare(result.state, ref, floor=floor))
        del result
        if mirror:
            say(f"{b}: mirror")
            m = mirror_error(sim, circuit)
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


_COLUMNS = (
    ("backend", "backend", "{}"),
    ("time_s", "time s", "{:.3f}"),
    ("speedup_vs_native", "vs native", "{:.2f}x"),
    ("amp0_real_rel", "amp0 re rel", "{:.2e}"),
    ("max_rel", "max rel", "{:.2e}"),
    ("mean_rel", "mean rel", "{:.2e}"),
    ("l2_rel", "l2 rel", "{:.2e}"),
    ("infidelity", "infidelity", "{:.2e}"),
    ("norm_drift", "norm drift", "{:.1e}"),
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
            line.append("-" if v is None else (fmt.format(v) if not isinstance(v, str) else v))
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
    return "\n".join(out)


def plot_rows(rows: list[dict], path: str, title: str | None = None) -> str:
    """Plot errors (log scale) and times per backend to ``path`` (PNG); returns the path.

    Raises:
        ImportError: matplotlib is missing (``pip install qsim-tc[plot]``).
    """
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("plot_rows needs matplotlib: pip install qsim-tc[plot]") from exc
    metrics = [m for m in ("amp0_real_rel", "max_rel", "mean_rel", "l2_rel", "infidelity", "mirror_l2_rel")
               if any(isinstance(r.get(m), float) and r.get(m) > 0 for r in rows)]
    names = [r["backend"] for r in rows]
    fig, (ax_err, ax_t) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(metrics), 1)
    for j, m in enumerate(metrics):
        vals = [r.get(m) if isinstance(r.get(m), float) and r.get(m) > 0 else np.nan for r in rows]
        ax_err.bar(np.arange(len(rows)) + j * width, vals, width, label=m)
    ax_err.set_yscale("log")
    ax_err.set_xticks(np.arange(len(rows)) + width * (len(metrics) - 1) / 2)
    ax_err.set_xticklabels(names, rotation=30, ha="right")
    ax_err.set_ylabel("error vs reference")
    if metrics:
        ax_err.legend(fontsize=8)
    ax_t.bar(names, [r["time_s"] for r in rows], color="tab:gray")
    ax_t.set_ylabel("time (s)")
    ax_t.tick_params(axis="x", rotation=30)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
