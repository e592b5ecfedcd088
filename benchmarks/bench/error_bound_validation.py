"""Validate the rounding-error bounds (:mod:`qsim_tc.error_bound`) against double-double on the CPU.

For a mixed set of 203 circuits (brickwork d = 1-8 at 10-16 qubits and d = 9-12 at 10-14, QFT on
a random product state, quantum volume, Qiskit library ansaetze with random parameters at 10-14
qubits; some of them fused into blocks of 3-9 qubits; and a subset at 16-20 qubits: brickwork
d = 1-8 at 18 and d = 3-4 at 20, QFT, quantum volume and the ansaetze at 16, quantum volume at 17)
every CPU method runs the circuit gate by gate (``Simulator(backend=method, plan=None,
fuse=None)``) and ``auto`` runs it as a user would (``Simulator(device="cpu")``, in double and in
single precision: its choice of stage engine or methods, its own fusion). The final state is
compared with ``qsim_tc.reference.simulate_dd`` of the circuit's own gates
(``||(psi - hi) - lo||``, so the reference's own rounding to complex128 does not count), and the
error against the bound the run reported (``Result.error``). A circuit fused here before the run
(the ``-fused`` kinds) has its per-step descriptors built from the gates, the products' reports
and the fused widths (the run itself does not know what was fused).

Checked: zero violations (measured L2 and max errors at or below their bounds); reported: the
distribution of measured / estimate (target: within 10x for >= 95% of the runs), and of
bound / measured. The emulated methods (int8, int8-auto, int8-crt, tf32tf32, halfhalf, tc-auto)
run where a circuit's arithmetic (sum over gates of 2^n 2^d) is below a cap, to keep the CPU time
reasonable.

Usage::

    python -m benchmarks.bench.error_bound_validation [--quick] [--out FILE.json] [--plot FILE.png]

The full set takes about 20 minutes on 2 CPU cores (the double-double reference is most of it:
0.07 s a 2-qubit gate at 16 qubits, 0.4 s at 18, 3 s at 20).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings

import numpy as np

from circuits import Circuit, Gate, brickwork, fusion
from circuits.haar import haar_unitary
from qsim_tc import error_bound as eb
from qsim_tc.reference import simulate_dd
from qsim_tc.simulator import Simulator

NATIVE = ("native", "native32")
EMULATED = ("int8", "int8-auto", "int8-crt", "tf32tf32", "halfhalf", "tc-auto")
TCEC = ("tf32tf32", "halfhalf", "tc-auto")
# the emulations run where sum over gates of 2^n 2^d is at most this (about a second each on 2 cores)
EMULATION_CAP = {"ozaki": 4e5, "tcec": 2.5e5}
TCEC_MAX_D = 7  # the tcec emulation loops over k-blocks in Python: wide gates are slow
# the auto runs: the default Simulator on the CPU in each precision
AUTO = {"auto": "double", "auto-single": "single"}


def _from_qiskit(qc):
    from circuits import from_qiskit  # noqa: PLC0415 - qiskit stays optional

    try:
        return from_qiskit(qc)
    except Exception:  # a composite instruction the importer does not take: one level down
        return from_qiskit(qc.decompose())


def _qft_on_product_state(n: int, seed: int) -> Circuit:
    """A Haar single-qubit layer (a random product state) followed by Qiskit's QFT synthesis."""
    from qiskit.synthesis import synth_qft_full  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    qft = _from_qiskit(synth_qft_full(n))
    c = Circuit(n, global_phase=qft.global_phase, name=f"qft{n}_s{seed}")
    for q in range(n):
        c.append(Gate(haar_unitary(2, rng), (q,), "haar1", check_unitary=False))
    for g in qft.gates:
        c.append(g)
    return c


def _library(kind: str, n: int, seed: int) -> Circuit:
    from qiskit.circuit.library import efficient_su2, n_local, quantum_volume, real_amplitudes  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    if kind == "qv":
        qc = quantum_volume(n, seed=seed)
    elif kind == "su2":
        qc = efficient_su2(n, reps=2, entanglement="circular")
    elif kind == "ra":
        qc = real_amplitudes(n, reps=3, entanglement="full")
    else:  # a hardware-efficient ansatz with controlled rotations
        qc = n_local(n, ["ry", "rz"], "crx", entanglement="linear", reps=2)
    if qc.num_parameters:
        qc = qc.assign_parameters(rng.uniform(0, 2 * np.pi, qc.num_parameters))
    c = _from_qiskit(qc)
    c.name = f"{kind}{n}_s{seed}"
    return c


def _fused(c: Circuit, width: int):
    """The fused circuit and, per block, the widths of the gates multiplied into it."""
    blocks = fusion.plan(c, width)
    widths = [() if len(b.gates) == 1 else tuple(c.gates[i].num_qubits for i in b.gates) for b in blocks]
    f = fusion.fuse(c, width)
    assert len(f.gates) == len(widths)
    return f, widths


def circuit_set(quick: bool):
    """``[(kind, name, build)]``, deterministic; ``build()`` returns ``(reference circuit, circuit
    run, fused widths or None)`` (built on use: a Haar gate of 12 qubits is a QR of 4096 x 4096)."""
    out = []

    def add(kind, name, fn):
        out.append((kind, name, fn))

    def plain(c):
        return c, c, None

    def fused(c, w):
        f, widths = _fused(c, w)
        return c, f, widths

    bw_sizes = (10, 12) if quick else (10, 12, 14, 16)
    # seeds per size: fewer at 14 and 16 qubits, whose reference costs more
    bw_seeds = {10: (1, 2, 3, 4), 12: (1, 2, 3, 4), 14: (1, 2, 3), 16: (1, 2)}
    for d in range(1, 9):
        for n in bw_sizes:
            for s in ((1,) if quick else bw_seeds[n]):
                depth = 2 + (d + n + s) % 3
                add("brickwork", f"bw{n}_d{d}_s{s}",
                    lambda n=n, d=d, depth=depth, s=s: plain(brickwork(n, d, depth, seed=1000 * d + 10 * n + s)))
    wide = ((9, 10, 2), (10, 10, 2), (9, 12, 2), (10, 12, 2), (11, 12, 1), (12, 12, 2), (9, 14, 2), (10, 14, 2))
    for d, n, depth in (wide[:2] if quick else wide):
        add("brickwork", f"bw{n}_d{d}", lambda n=n, d=d, depth=depth: plain(brickwork(n, d, depth, seed=77 * n + d)))
    # (the double-double reference costs about 0.1 s a gate on a loaded 2-core machine: the
    # circuits of many gates stay at 12-14 qubits)
    lib = [(12, 1)] if quick else [(n, s) for n in (12, 13, 14) for s in (1, 2)] + [(10, 1), (11, 1), (12, 3)]
    for n, s in lib:
        _library_kinds(add, plain, fused, n, s, ("su2", "ra", "nlocal"))
    if not quick:
        _large(add, plain, fused)
    # kinds interleaved (a fixed order), so that a run cut short still covers every kind
    order = np.random.default_rng(0).permutation(len(out))
    return [out[i] for i in order]


def _library_kinds(add, plain, fused, n: int, s: int, ansaetze) -> None:
    """QFT, quantum volume (each also fused into blocks of 4 + s qubits) and the Qiskit ansaetze
    (EfficientSU2 also fused into blocks of 3 + 2 s) at n qubits."""
    add("qft", f"qft{n}_s{s}", lambda: plain(_qft_on_product_state(n, s)))
    add("qft-fused", f"qft{n}_s{s}_f{4 + s}", lambda: fused(_qft_on_product_state(n, s), 4 + s))
    add("quantum-volume", f"qv{n}_s{s}", lambda: plain(_library("qv", n, s)))
    add("qv-fused", f"qv{n}_s{s}_f{4 + s}", lambda: fused(_library("qv", n, s), 4 + s))
    for kind in ansaetze:
        add(f"qiskit-{kind}", f"{kind}{n}_s{s}", lambda kind=kind: plain(_library(kind, n, s)))
    if "su2" in ansaetze:
        add("qiskit-su2-fused", f"su2{n}_s{s}_f{3 + 2 * s}", lambda: fused(_library("su2", n, s), 3 + 2 * s))


def _large(add, plain, fused) -> None:
    """The 16-20 qubit subset: brickwork d = 1-8 at 18 qubits and d = 3, 4 at 20 (depth 2: a
    first layer of disjoint gates on |0...0> is exact in FP64, whatever its width), the library
    kinds at 16, quantum volume at 17 (about 5 minutes of reference on 2 cores)."""
    for d in range(1, 9):
        add("brickwork", f"bw18_d{d}", lambda d=d: plain(brickwork(18, d, 2, seed=1800 + d)))
    for d in (3, 4):
        add("brickwork", f"bw20_d{d}", lambda d=d: plain(brickwork(20, d, 2, seed=2000 + d)))
    _library_kinds(add, plain, fused, 16, 1, ("su2", "ra", "nlocal"))
    add("quantum-volume", "qv17_s1", lambda: plain(_library("qv", 17, 1)))


def _cost(c: Circuit) -> float:
    return float(sum(2.0 ** c.n_qubits * 2.0 ** g.num_qubits for g in c.gates))


def methods_for(c: Circuit) -> list[str]:
    """The methods that run on ``c`` (the emulations only below their cost caps)."""
    cost, dmax = _cost(c), max(g.num_qubits for g in c.gates)
    out = list(NATIVE)
    if cost <= EMULATION_CAP["ozaki"]:
        out += ["int8", "int8-auto", "int8-crt"]
    if cost <= EMULATION_CAP["tcec"] and dmax <= TCEC_MAX_D:
        out += list(TCEC)
    return out


def run_one(method: str, run_c: Circuit, widths, hi: np.ndarray, lo: np.ndarray) -> dict:
    """Run ``run_c`` with ``method`` (or as ``auto`` does: :data:`AUTO`); its error against
    (hi, lo) and the error report: the run's own (``Result.error``), or for a circuit fused here
    (``widths``) the report of its steps with the fused widths."""
    if method in AUTO:
        sim = Simulator(device="cpu", precision=AUTO[method])
    else:
        sim = Simulator(backend=method, device="cpu", plan=None, fuse=None)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sim.run(run_c)
    run_s = time.perf_counter() - t0
    rep, bound_s = res.error, None
    if method not in AUTO:  # the steps' report again: its cost, and the fused widths where given
        t0 = time.perf_counter()
        n_amp = 1 << run_c.n_qubits
        acc = eb.ErrorAccumulator(from_zero=True)  # as the run's own report: the start is |0...0>
        for i, (st, g) in enumerate(zip(res.stats, run_c.gates)):
            choices = st.info.report.choices if st.info.report is not None else {}
            acc.add(eb.gate_step(g.name, method, g.matrix, sim.dtype, choices=choices, n_amplitudes=n_amp,
                                 fused_widths=widths[i] if widths else ()))
        if run_c.global_phase:
            acc.add(eb.stage_step("global phase", [eb.StageOp("scalar")], sim.dtype, n_amplitudes=n_amp))
        steps_rep = acc.report()
        bound_s = time.perf_counter() - t0
        if widths:
            rep = steps_rep
    x = res.state.to_numpy().astype(np.complex128)
    err = (x - hi) - lo
    l2, mx = float(np.linalg.norm(err)), float(np.abs(err).max())
    return {"method": method, "l2": l2, "max": mx, "l2_bound": rep.l2_bound, "l2_estimate": rep.l2_estimate,
            "max_abs_bound": rep.max_abs_bound, "infidelity_bound": rep.infidelity_bound,
            "no_bound": rep.no_bound, "run_s": run_s, "bound_s": bound_s, "path": res.step_kind,
            "top_step": rep.top_steps[0].to_dict() if rep.top_steps else None}


def _summary(records: list[dict]) -> dict:
    out = {}
    for m in sorted({r["method"] for r in records}):
        rs = [r for r in records if r["method"] == m and r["l2_bound"] is not None]
        ratio = np.array([r["l2"] / r["l2_estimate"] for r in rs if r["l2_estimate"] > 0])
        slack = np.array([r["l2_bound"] / r["l2"] for r in rs if r["l2"] > 0])
        # an exact result predicted exact (measured and estimate 0) is within; a measured 0
        # against a positive estimate is not
        exact = sum(r["l2"] == 0 and r["l2_estimate"] == 0 for r in rs)
        within = float((np.sum((ratio >= 0.1) & (ratio <= 10)) + exact) / len(rs)) if rs else None
        def q(a):
            return ({k: float(np.quantile(a, p)) for k, p in
                     (("min", 0), ("p05", 0.05), ("median", 0.5), ("p95", 0.95), ("max", 1))} if a.size else None)

        out[m] = {"runs": len(rs), "no_bound": sum(r["l2_bound"] is None for r in records if r["method"] == m),
                  "l2_violations": sum(r["l2"] > r["l2_bound"] for r in rs),
                  "max_violations": sum(r["max"] > r["max_abs_bound"] for r in rs),
                  "measured_over_estimate": q(ratio), "estimate_within_10x": within,
                  "exact_predicted_exact": exact,
                  "measured_over_estimate_histogram": _decades(ratio),
                  "bound_over_measured": q(slack),
                  "bound_share_of_run_time": (float(sum(r["bound_s"] for r in rs)
                                                    / max(sum(r["run_s"] for r in rs), 1e-9))
                                              if rs and all(r["bound_s"] is not None for r in rs) else None),
                  "qubits": sorted({r["n_qubits"] for r in rs})}
    return out


def _decades(ratio: np.ndarray) -> dict:
    """Counts of measured / estimate per bin: 0 (an exact result), then by half decades."""
    edges = [0.0, 1e-3, 0.01, 0.1, 0.316, 1.0, 3.16, 10.0, np.inf]
    out = {"0": int(np.sum(ratio == 0))}
    for lo, hi in zip(edges[:-1], edges[1:]):
        out[f"[{lo:g}, {hi:g})"] = int(np.sum((ratio > 0) & (ratio >= lo) & (ratio < hi)))
    return out


def plot(records: list[dict], path: str) -> None:
    """Measured L2 error against bound and estimate, one panel per method (log-log)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    methods = sorted({r["method"] for r in records})
    cols = 4
    rows = -(-len(methods) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.6 * rows), squeeze=False)
    for ax, m in zip(axes.flat, methods):
        rs = [r for r in records if r["method"] == m and r["l2_bound"] is not None and r["l2"] > 0]
        meas = np.array([r["l2"] for r in rs])
        ax.loglog(meas, [r["l2_bound"] for r in rs], "v", ms=3, color="tab:red", label="bound")
        ax.loglog(meas, [r["l2_estimate"] for r in rs], "o", ms=3, color="tab:blue", label="estimate")
        lo, hi = meas.min() / 3, max(r["l2_bound"] for r in rs) * 3
        ax.loglog([lo, hi], [lo, hi], "k-", lw=0.8, label="= measured")
        ax.fill_between([lo, hi], [lo / 10, hi / 10], [lo * 10, hi * 10], color="0.9", label="10x band")
        ax.set_title(f"{m} ({len(rs)} runs)")
        ax.set_xlabel("measured ||psi - psi_dd||_2")
        ax.set_ylabel("bound / estimate")
    for ax in list(axes.flat)[len(methods):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write_json(path: str, obj) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def machine() -> dict:
    """The machine the validation ran on (CPU model, cores, load, library versions)."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    import numba  # noqa: PLC0415
    import scipy  # noqa: PLC0415

    return {"cpu": model, "cores": os.cpu_count(), "load_average": list(os.getloadavg()),
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "scipy": scipy.__version__, "blas": _blas_name()}


def _blas_name() -> str | None:
    try:
        cfg = np.show_config(mode="dicts")
        return cfg["Build Dependencies"]["blas"]["name"] + " " + str(cfg["Build Dependencies"]["blas"].get("version"))
    except Exception:  # noqa: BLE001 - informative only
        return None


def _document(args, circuits, records, t_start, partial: bool) -> dict:
    done = len({r["circuit"] for r in records})
    return {"benchmark": "error_bound_validation", "host": platform.node(), "machine": machine(),
            "command": "python -m benchmarks.bench.error_bound_validation " + " ".join(args.argv),
            "quick": args.quick,
            "partial": partial, "circuits": done, "circuits_planned": len(circuits), "runs": len(records),
            "wall_s": time.perf_counter() - t_start, "kinds": sorted({r["kind"] for r in records}),
            "emulation_cap": EMULATION_CAP, "summary": _summary(records), "records": records}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small subset (minutes)")
    ap.add_argument("--out", default="benchmarks/results/error_bound_cpu.json")
    ap.add_argument("--plot", default="benchmarks/results/error_bound_cpu.png")
    ap.add_argument("--limit", type=int, default=None, help="run only the first N circuits")
    ap.add_argument("--kinds", default=None, help="comma-separated circuit kinds to run (default: all)")
    ap.add_argument("--checkpoint", action="store_true", help="rewrite the JSON after every circuit")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    circuits = circuit_set(args.quick)
    if args.kinds:
        kinds = set(args.kinds.split(","))
        circuits = [c for c in circuits if c[0] in kinds]
    circuits = circuits[: args.limit]
    records = []
    t_start = time.perf_counter()
    # the fused kinds share their input circuit's reference: kept until its last use
    ref_key = [name.rsplit("_f", 1)[0] if kind.endswith("-fused") else name for kind, name, _ in circuits]
    refs: dict = {}
    for i, (kind, name, build) in enumerate(circuits):
        ref_c, run_c, widths = build()
        t0 = time.perf_counter()
        key = ref_key[i]
        hi, lo = refs[key] if key in refs else simulate_dd(ref_c, device="cpu").to_numpy()
        if key in ref_key[i + 1:]:
            refs[key] = (hi, lo)
        else:
            refs.pop(key, None)
        ref_s = time.perf_counter() - t0
        methods = methods_for(run_c) + ([] if widths else list(AUTO))
        for m in methods:
            r = run_one(m, run_c, widths, hi, lo)
            r.update({"circuit": name, "kind": kind, "n_qubits": run_c.n_qubits, "gates": len(run_c),
                      "max_d": max(g.num_qubits for g in run_c.gates), "ref_s": ref_s})
            records.append(r)
            bad = r["l2_bound"] is not None and (r["l2"] > r["l2_bound"] or r["max"] > r["max_abs_bound"])
            flag = "  VIOLATION" if bad else ""
            said = (f"est {r['l2_estimate']:.3g} bound {r['l2_bound']:.3g}" if r["l2_bound"] is not None
                    else f"no bound: {r['no_bound']}")
            print(f"[{i + 1}/{len(circuits)}] {kind:16s} {name:18s} {m:11s} L2 {r['l2']:.3g} {said}{flag}", flush=True)
        if args.checkpoint:
            _write_json(args.out, _document(args, circuits, records, t_start, partial=True))
    out = _document(args, circuits, records, t_start, partial=False)
    summary = out["summary"]
    _write_json(args.out, out)
    if args.plot:
        plot(records, args.plot)
    total_bad = sum(s["l2_violations"] + s["max_violations"] for s in summary.values())
    for m, s in summary.items():
        q, b = s["measured_over_estimate"], s["bound_over_measured"]
        if q is None or b is None:
            print(f"{m:11s} runs {s['runs']:4d} (no bound on {s['no_bound']})")
            continue
        print(f"{m:11s} runs {s['runs']:4d} no-bound {s['no_bound']} violations "
              f"{s['l2_violations'] + s['max_violations']} within-10x {s['estimate_within_10x']:.3f} "
              f"measured/estimate median {q['median']:.3g} [{q['min']:.3g}, {q['max']:.3g}] "
              f"bound/measured median {b['median']:.3g}")
    print(f"{len(circuits)} circuits, {len(records)} runs, violations: {total_bad}")
    return 1 if total_bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
