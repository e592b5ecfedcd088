"""backend="auto" against every fixed choice of its precision class, in the same run.

For each circuit (brickwork(N, d, depth) for d = 2, 4, 6, 8, 10 at depths 20, 10, 6, 4, 4;
QFT-N after H on every qubit; QuantumVolume(N, seed=7)), each precision asked and each fusion
setting: the time of every method of the precision class (``qualifying_methods``) and of
``auto``, then the ratio of auto's best time to the fastest fixed (method, fusion) pair. The
cost table is looked up (or measured, on a GPU) before any timing. Then, at
``--accuracy-qubits``, auto's and native's (double) / native32's (single) L2 error and
infidelity against the double-double reference.

    python -m benchmarks.bench.auto --qubits 28 --json benchmarks/results/auto_h100.json
    python -m benchmarks.bench.auto --device cpu --qubits 16 --accuracy-qubits 12 \\
        --methods native,native3m,int8-auto,native32,tc-auto --circuits brickwork2,brickwork10,qft

Every run is timed ``--repeats`` times (the minimum is kept); the first run of each
configuration warms up (kernels, plans) and is not counted.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

import gemm
from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit, qv_circuit
from benchmarks.common import write_results
from circuits import brickwork
from qsim_tc import Simulator, accuracy
from qsim_tc.calibrate import table_for
from qsim_tc.plan.select import qualifying_methods
from qsim_tc.reference import simulate_dd

BRICKWORK = {2: 20, 4: 10, 6: 6, 8: 4, 10: 4}  # gate width -> depth
CIRCUITS = tuple(f"brickwork{d}" for d in BRICKWORK) + ("qft", "qv")
BASELINE = {"double": "native", "single": "native32"}


def build(name: str, n: int):
    """(circuit, description) of a circuit name of :data:`CIRCUITS` at n qubits."""
    if name.startswith("brickwork"):
        d = int(name[len("brickwork"):])
        depth = BRICKWORK.get(d, 4)  # other widths (brickwork12: where int8-crt wins) at depth 4
        return brickwork(n, d, depth, seed=1), f"brickwork({n}, {d}, {depth})"
    if name == "qft":
        c, src = qft_circuit(n)
        return prepend_hadamards(c), f"QFT-{n} after H ({src})"
    if name == "qv":
        c, src = qv_circuit(n, seed=7)
        return c, f"QuantumVolume({n}, seed=7) ({src})"
    raise ValueError(f"unknown circuit {name!r}; known: {', '.join(CIRCUITS)}")


def _fuse(text: str):
    return None if text == "none" else ("auto" if text == "auto" else int(text))


def time_run(sim: Simulator, circ, repeats: int) -> tuple[float, object]:
    """(best wall seconds of ``repeats`` runs after one warm-up, the last result)."""
    res = sim.run(circ)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = sim.run(circ)
        best = min(best, time.perf_counter() - t0)
    return best, res


def speed(args, precision: str, table) -> list[dict]:
    methods = [m for m in qualifying_methods(precision) if args.methods is None or m in args.methods]
    rows = []
    for name in args.circuits:
        circ, desc = build(name, args.qubits)
        print(f"{desc}: {len(circ)} gates, {precision}", flush=True)
        entries = []
        for backend in methods + ["auto"]:
            for fuse in args.fuse:
                kw = {"precision": precision, "cost_table": table} if backend == "auto" else {"cost_table": table}
                sim = Simulator(backend, device=args.device, fuse=_fuse(fuse), **kw)
                t, res = time_run(sim, circ, args.repeats)
                e = {"backend": backend, "fuse": fuse, "time_s": t, "applied_gates": len(res.stats)}
                if backend == "auto":
                    e["blocks_per_method"] = res.metadata["auto"]["blocks_per_method"]
                    e["predicted_ms"] = res.metadata["auto"]["predicted_ms"]
                entries.append(e)
                print(f"  {backend:10s} fuse={fuse:5s} {t:9.3f} s" + (
                    f"  {e['blocks_per_method']}" if backend == "auto" else ""), flush=True)
        fixed = [e for e in entries if e["backend"] != "auto"]
        best_fixed = min(fixed, key=lambda e: e["time_s"])
        best_auto = min((e for e in entries if e["backend"] == "auto"), key=lambda e: e["time_s"])
        ratio = best_auto["time_s"] / best_fixed["time_s"]
        print(f"  auto/fastest fixed = {ratio:.3f} (auto fuse={best_auto['fuse']} {best_auto['time_s']:.3f} s; "
              f"fastest fixed {best_fixed['backend']} fuse={best_fixed['fuse']} {best_fixed['time_s']:.3f} s)",
              flush=True)
        rows.append({"circuit": desc, "precision": precision, "n_qubits": args.qubits, "entries": entries,
                     "ratio_auto_to_fastest_fixed": ratio, "fastest_fixed": best_fixed, "best_auto": best_auto})
    return rows


def accuracy_rows(args, precision: str, table) -> list[dict]:
    rows = []
    base = BASELINE[precision]
    for name in args.circuits:
        circ, desc = build(name, args.accuracy_qubits)
        ref = simulate_dd(circ, device=args.device)
        out = {"circuit": desc, "precision": precision}
        for backend in (base, "auto"):
            kw = {"precision": precision} if backend == "auto" else {}
            st = Simulator(backend, device=args.device, cost_table=table, **kw).run(circ).state
            m = accuracy.compare(st, ref)
            out[backend] = {"l2_rel": m["l2_rel"], "infidelity": m["infidelity"]}
        out["l2_ratio"] = out["auto"]["l2_rel"] / max(out[base]["l2_rel"], 1e-300)
        print(f"{desc} {precision}: l2 {base} {out[base]['l2_rel']:.3g} auto {out['auto']['l2_rel']:.3g} "
              f"(x{out['l2_ratio']:.2f}); infidelity {out[base]['infidelity']:.3g} / {out['auto']['infidelity']:.3g}",
              flush=True)
        rows.append(out)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.auto", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"), help="where to run (default auto)")
    p.add_argument("--qubits", type=int, default=28, help="N of the speed runs (default 28; 0: no speed runs)")
    p.add_argument("--accuracy-qubits", type=int, default=24, help="N of the accuracy runs against dd (default 24; "
                   "0 skips them)")
    p.add_argument("--precision", default="double,single", help="precisions (default double,single)")
    p.add_argument("--methods", default=None, help="only these fixed methods (comma list; default every method of "
                   "the precision class)")
    p.add_argument("--circuits", default=",".join(CIRCUITS), help=f"comma list of {', '.join(CIRCUITS)} (default all)")
    p.add_argument("--fuse", default="none,auto", help="fusion settings: none, auto or d, comma list "
                   "(default none,auto)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs after the warm-up; the minimum is kept "
                   "(default 1)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    args.circuits = [c for c in args.circuits.split(",") if c]
    args.methods = [m for m in args.methods.split(",") if m] if args.methods else None
    args.fuse = [f for f in args.fuse.split(",") if f]
    for c in args.circuits:
        if c not in CIRCUITS and not re.fullmatch(r"brickwork([1-9][0-9]?)", c):
            raise SystemExit(f"--circuits: unknown {c!r}; known: {', '.join(CIRCUITS)}, or brickworkD for another "
                             "gate width D (depth 4)")
    precisions = [x for x in args.precision.split(",") if x]
    dev = gemm.resolve_device(args.device)
    args.device = dev.name
    t0 = time.perf_counter()
    table = table_for(dev)  # before any timing: a GPU without a table calibrates here, once
    print(f"device {dev.name} ({dev.reason}); cost table {table.describe()} ({time.perf_counter() - t0:.1f} s)",
          flush=True)
    payload = {"device": dev.name, "cost_table": table.describe(), "speed": [], "accuracy": []}
    for precision in precisions if args.qubits else ():
        payload["speed"] += speed(args, precision, table)
    if args.accuracy_qubits:
        for precision in precisions:
            payload["accuracy"] += accuracy_rows(args, precision, table)
    if payload["speed"]:
        worst = max(r["ratio_auto_to_fastest_fixed"] for r in payload["speed"])
        print(f"worst auto/fastest-fixed ratio: {worst:.3f} (target <= 1.05)")
    if args.json:
        write_results(args.json, payload, module="benchmarks.bench.auto", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
