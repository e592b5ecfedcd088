"""The GEMM accuracy tests of the literature, run over every registered method against ``dd``.

- ``phi``: A, B from :func:`gemm.diagnostics.testmats.phi_matrix` for each phi; mean and max elementwise
  relative error of C (Ozaki et al.'s test).
- ``cancel``: A times its numerical inverse (:func:`gemm.diagnostics.testmats.cancel_pair`); relative
  Frobenius residual and the largest absolute error (the result is nearly I).
- ``exp-rand``: the four pairs of :func:`gemm.diagnostics.testmats.exp_rand_type`; relative residual
  ``||C - C_ref||_F / ||C_ref||_F`` (Ootomo and Yokota's test).

Every method registered in :mod:`gemm` takes part unless a list is given. Methods that keep a
complex64 state (``state_dtype``: precision classes fp32, tf32, fp16) get float32/complex64
operands and are measured against the DD product of the same rounded operands; the others get float64/complex128. A method that cannot
run here (wrong device, unsupported dtype, missing dependency) is listed under ``skipped``
with the reason.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import numpy as np

from gemm.device import resolve_device
from gemm.diagnostics import testmats
from gemm.diagnostics.style import method_style, offsets, require_matplotlib
from gemm.registry import get_method
from gemm.registry import methods as registered_methods

TESTS = ("phi", "cancel", "exp-rand")
DEFAULT_PHIS = (0.1, 1.0, 2.0, 4.0)
DEFAULT_TYPES = (1, 2, 3, 4)


def _cases(test: str, m: int, k: int, n: int, rng, cplx: bool, phis, types):
    """(label, A, B) triples in float64/complex128 on the host."""
    dt = np.complex128 if cplx else np.float64
    if test == "phi":
        gen = testmats.complex_phi_matrix if cplx else testmats.phi_matrix
        for phi in phis:
            yield f"phi={phi:g}", gen(m, k, phi, rng), gen(k, n, phi, rng)
    elif test == "cancel":
        a, ainv = testmats.cancel_pair(k, rng, dt)
        yield f"A inv(A), {k} x {k}", a, ainv
    else:
        for t in types:
            a, b = testmats.exp_rand_type(t, m, k, n, rng, dt)
            yield f"type {t}", a, b


def _errors(test: str, c, ref_hi, ref_lo, xp) -> dict[str, float]:
    c = c.astype(ref_hi.dtype, copy=False)
    err = (c - ref_hi) - ref_lo
    ref = ref_hi + ref_lo
    out = {"rel_fro": float(xp.linalg.norm(err) / xp.linalg.norm(ref)) if float(xp.linalg.norm(ref)) else float("nan")}
    if test == "phi":
        mag = xp.abs(ref)
        ok = mag > 0
        rel = xp.abs(err)[ok] / mag[ok]
        out["mean_rel"] = float(rel.mean())
        out["max_rel"] = float(rel.max())
    if test == "cancel":
        out["max_abs"] = float(xp.abs(err).max())
    return out


def run_accuracy_test(test: str, k: int, methods=None, *, m: int = 256, n: int = 256, device="auto",
                      seed: int = 0, complex_operands: bool = False, phis=DEFAULT_PHIS, types=DEFAULT_TYPES,
                      options_per_method: dict | None = None, progress=None) -> dict[str, Any]:
    """Run one accuracy test over ``methods`` (default: every registered method).

    Args:
        test: ``"phi"``, ``"cancel"`` or ``"exp-rand"``.
        k: inner dimension (for ``cancel`` the matrices are k x k).
        methods: names, or None for all of :func:`gemm.methods`.
        m, n: outer dimensions of ``phi`` and ``exp-rand``.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        seed: seed of the operand generator.
        complex_operands: complex128/complex64 operands instead of real.
        phis, types: the cases of ``phi`` and ``exp-rand``.
        options_per_method: method name -> options dict.
        progress: optional ``callable(done, total)`` called after each method.

    Returns:
        dict with ``test``, ``m``, ``k``, ``n``, ``device``, ``results`` (one dict per method and
        case: ``method``, ``precision``, ``case``, ``rel_fro``, ``mean_rel``/``max_rel`` (phi),
        ``max_abs`` (cancel), ``time_ms``) and ``skipped`` (``method``, ``reason``).

    Raises:
        ValueError: unknown test or method, bad sizes.
    """
    if test not in TESTS:
        raise ValueError(f"test={test!r} is not valid; expected one of {', '.join(TESTS)}")
    for name, v in (("k", k), ("m", m), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    names = list(registered_methods()) if methods is None else list(methods)
    if not names:
        raise ValueError("methods is empty; give at least one method name")
    meths = {name: get_method(name) for name in names}  # unknown names raise with the valid list
    options_per_method = dict(options_per_method or {})
    dev = resolve_device(device)
    xp = dev.xp
    rng = np.random.default_rng(seed)
    cases = list(_cases(test, m, k, n, rng, complex_operands, phis, types))
    dd = get_method("dd")
    results, skipped = [], []
    refs: dict[tuple, tuple] = {}
    for name, meth in meths.items():
        low = meth.state_dtype == np.complex64
        reason = None
        rows = []
        for label, a64, b64 in cases:
            if low:
                dt = np.complex64 if complex_operands else np.float32
                a_h, b_h = a64.astype(dt), b64.astype(dt)
            else:
                a_h, b_h = a64, b64
            key = (label, low)
            a, b = xp.asarray(a_h), xp.asarray(b_h)
            if key not in refs:
                wide = np.complex128 if complex_operands else np.float64
                refs[key] = dd(a.astype(wide), b.astype(wide), output="pair")[0]
            ref_hi, ref_lo = refs[key]
            try:
                meth(a, b, **options_per_method.get(name, {}))  # warm-up (kernel builds, plans)
                if dev.is_gpu:
                    xp.cuda.get_current_stream().synchronize()
                t0 = time.perf_counter()
                c, report = meth(a, b, **options_per_method.get(name, {}))
                if dev.is_gpu:
                    xp.cuda.get_current_stream().synchronize()
                ms = (time.perf_counter() - t0) * 1e3
            except (TypeError, ValueError, NotImplementedError, ImportError, RuntimeError, MemoryError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                break
            if isinstance(c, tuple):
                c = c[0]
            row = {"method": name, "precision": meth.precision, "case": label, "time_ms": ms,
                   "choices": dict(report.choices)}
            row.update(_errors(test, c, ref_hi, ref_lo, xp))
            rows.append(row)
        if reason is not None:
            skipped.append({"method": name, "reason": reason})
        else:
            results.extend(rows)
        if progress is not None:
            progress(len(results) // max(len(cases), 1) + len(skipped), len(meths))
    return {"test": test, "m": m, "k": k, "n": n, "device": dev.name, "complex": bool(complex_operands),
            "seed": seed, "results": results, "skipped": skipped}


# what each exp-rand type is (testmats.EXP_RAND_TYPES): the exponent ranges of A and B
EXP_RAND_DESCRIPTIONS = {
    1: "A and B within FP16's range",
    2: "B tiny (below FP16's normal range)",
    3: "A and B small",
    4: "A and B beyond FP16's range",
}


def _metric_tables(test: str) -> list[tuple[str, str]]:
    if test == "phi":
        return [("mean_rel", "mean relative error"), ("max_rel", "max relative error")]
    if test == "cancel":
        return [("rel_fro", "relative Frobenius error ||C - C_ref||_F / ||C_ref||_F"),
                ("max_abs", "largest absolute error max |C - C_ref|")]
    return [("rel_fro", "relative Frobenius error ||C - C_ref||_F / ||C_ref||_F")]


def describe(out: dict) -> str:
    """One line naming the test, its sizes, the operands and the device."""
    kind = "complex" if out["complex"] else "real"
    if out["test"] == "cancel":
        what = f"cancel test: A ({out['k']} x {out['k']}) times its numerical inverse"
    elif out["test"] == "phi":
        what = f"phi test: ({out['m']} x {out['k']}) @ ({out['k']} x {out['n']}), entries spread by phi"
    else:
        what = f"exp-rand test: ({out['m']} x {out['k']}) @ ({out['k']} x {out['n']}), random exponents"
    return f"{what}, {kind} operands, device {out['device']}, reference double-double"


def format_results(out: dict) -> str:
    """Text tables (method x case) of :func:`run_accuracy_test`'s output."""
    res = out["results"]
    cases = list(dict.fromkeys(r["case"] for r in res))
    meths = list(dict.fromkeys(r["method"] for r in res))
    lines = [describe(out)]
    if out["test"] == "exp-rand":
        types = [int(c.split()[-1]) for c in cases if c.startswith("type ")]
        lines.append("types: " + "; ".join(f"{t} = {EXP_RAND_DESCRIPTIONS.get(t, '?')}" for t in types))
    for key, title in _metric_tables(out["test"]):
        lines.append("")
        lines.append(title)
        width = max([len(c) for c in cases] + [10])
        lines.append("method".ljust(12) + "".join(c.rjust(width + 2) for c in cases))
        for meth in meths:
            vals = {r["case"]: r.get(key) for r in res if r["method"] == meth}
            cells = "".join((f"{vals[c]:.2e}" if vals.get(c) is not None else "-").rjust(width + 2) for c in cases)
            lines.append(meth.ljust(12) + cells)
    lines.append("")
    lines.append("time (ms): " + ", ".join(
        f"{meth} {np.median([r['time_ms'] for r in res if r['method'] == meth]):.2f}" for meth in meths))
    for s in out["skipped"]:
        lines.append(f"skipped {s['method']}: {s['reason']}")
    return "\n".join(lines)


def _positive(v):
    return v if isinstance(v, (int, float)) and v > 0 and np.isfinite(v) else np.nan


def plot_results(out: dict, path: str) -> str:
    """Plot the test's errors per method and case (log scale) to ``path`` (PNG); returns the path.

    One colour and marker per method (:mod:`gemm.diagnostics.style`); a single-case test
    (``cancel``) is drawn as bars, one panel per metric.

    Raises:
        ImportError: matplotlib is missing (the message says what to install).
    """
    plt = require_matplotlib("plot_results")
    res = out["results"]
    cases = list(dict.fromkeys(r["case"] for r in res))
    meths = list(dict.fromkeys(r["method"] for r in res))
    metrics = _metric_tables(out["test"])
    single = len(cases) == 1
    if single:
        metrics_drawn = metrics
    else:
        metrics_drawn = metrics[:1] if out["test"] != "phi" else metrics
    fig, axes = plt.subplots(1, len(metrics_drawn), figsize=(5.2 * len(metrics_drawn) + 2.2, 4.8), squeeze=False)
    axes = axes[0]
    handles = {}
    for ax, (key, title) in zip(axes, metrics_drawn):
        if single:
            for i, meth in enumerate(meths):
                v = next((r.get(key) for r in res if r["method"] == meth), None)
                st = method_style(meth)
                h = ax.bar(i, _positive(v), color=st["color"], edgecolor="black", linewidth=0.5, label=meth)
                handles.setdefault(meth, h)
            ax.set_xticks(range(len(meths)))
            ax.set_xticklabels(meths, rotation=45, ha="right")
            ax.set_xlabel("method")
        else:
            dx = offsets(len(meths), 0.4)
            for i, meth in enumerate(meths):
                vals = {r["case"]: r.get(key) for r in res if r["method"] == meth}
                ys = [_positive(vals.get(c)) for c in cases]
                (h,) = ax.plot(np.arange(len(cases)) + dx[i], ys, linestyle="-", linewidth=1, markersize=7,
                               markerfacecolor="none" if i % 2 else None, label=meth, **method_style(meth))
                handles.setdefault(meth, h)
            ax.set_xticks(range(len(cases)))
            labels = cases
            if out["test"] == "exp-rand":
                labels = [f"{c}\n{EXP_RAND_DESCRIPTIONS.get(int(c.split()[-1]), '')}".replace(" (", "\n(")
                          if c.startswith("type ") else c for c in cases]
            ax.set_xticklabels(labels, fontsize=8)
            ax.set_xlabel("phi (spread of the entries' magnitudes)" if out["test"] == "phi"
                          else "operand exponent ranges")
        ax.set_yscale("log")
        ax.set_ylabel(title if len(title) < 45 else title.split(" ||")[0].split(" max |")[0])
        ax.set_title(title, fontsize=9)
        ax.grid(True, axis="y", which="major", alpha=0.3)
    fig.legend(list(handles.values()), list(handles.keys()), loc="center left", bbox_to_anchor=(1.0, 0.5),
               title="method", fontsize=9)
    date = datetime.date.today().isoformat()
    fig.suptitle(f"GEMM accuracy: {describe(out)}\n{date}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
