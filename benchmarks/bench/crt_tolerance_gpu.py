"""int8-crt at the moduli counts a tolerance chooses (``Simulator(tolerance=...)``,
:func:`qsim_tc.run_error.tune_precision`): does the cost model's scaling with the count hold, and
what does a tolerance buy end to end?

1. **counts**: at ``--qubits`` (28) a complex128 state ``(2^(n-d), 2^d)`` times ``U.T`` of a
   Haar gate, d in ``--dims``: ZGEMM and int8-crt at ``moduli`` in ``--counts`` and at its default
   (the data's count at bits=53); CUDA events, one warm-up, median of ``--repeats``; the stages
   from one more call's report. Each count's time over the default's is printed beside the
   model's ``relative_cost`` (:meth:`Int8CRT.precision_settings`, ``FIXED_COST_SHARE``).
2. **auto**: brickwork(``--qubits``, 10, 4) under ``backend="auto"`` without a tolerance and with
   each of ``--tolerances``, and under ``native``: wall time (best of two after a warm-up run),
   blocks per method, the moduli a tolerance chose, the run's ``Result.error.l2_bound``; at
   ``--check-qubits`` (24) the same runs against the GPU double-double reference (measured L2
   must stay within the bound and the tolerance).

Usage (from the repository root; about 4-6 minutes on an H100/H200)::

    PYTHONPATH=$PWD python -m benchmarks.bench.crt_tolerance_gpu

With ``$OUT`` set the JSON goes to ``$OUT/crt_tolerance_gpu.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings

import numpy as np


def _counts_part(cp, n, d, counts, repeats):
    import gemm
    from benchmarks.gate_timing import event_times
    from circuits.haar import haar_unitary

    rng = np.random.default_rng(2026 + d)
    D, M = 1 << d, 1 << (n - d)
    u = cp.asarray(haar_unitary(D, rng))
    x = (cp.random.standard_normal((M, D)) + 1j * cp.random.standard_normal((M, D))).astype(cp.complex128)
    x /= cp.linalg.norm(x)
    b = u.T
    rows = []
    zgemm, _ = event_times(cp, lambda: gemm.matmul(x, b, method="native"), repeats)
    rows.append({"d": d, "method": "zgemm", "median_ms": zgemm})
    _, rep = gemm.matmul(x, b, method="int8-crt", return_report=True)
    n0 = rep.choices["moduli"]
    base, _ = event_times(cp, lambda: gemm.matmul(x, b, method="int8-crt"), repeats)
    rows.append({"d": d, "method": "int8-crt", "moduli": n0, "median_ms": base, "x_zgemm": base / zgemm,
                 "stages_ms": rep.stages, "default": True})
    model = {s.options["moduli"]: s.relative_cost
             for s in gemm.get_method("int8-crt").precision_settings(d, np.complex128, {"moduli": n0})}
    for m in counts:
        ms, _ = event_times(cp, lambda m=m: gemm.matmul(x, b, method="int8-crt", moduli=m), repeats)
        _, rep = gemm.matmul(x, b, method="int8-crt", moduli=m, return_report=True)
        rows.append({"d": d, "method": "int8-crt", "moduli": m, "median_ms": ms, "x_zgemm": ms / zgemm,
                     "x_default": ms / base, "model_relative_cost": model[m], "stages_ms": rep.stages})
    return rows


def _auto_part(n, tolerances, check):
    from circuits import brickwork
    from qsim_tc import Simulator
    from qsim_tc.reference import simulate_dd

    c = brickwork(n, 10, 4, seed=0)
    ref = simulate_dd(c, device="gpu").to_numpy() if check else None
    rows = []
    for label, kw in [("native", {"backend": "native"}), ("auto", {})] + [
            (f"auto tol={t:.0e}", {"tolerance": t}) for t in tolerances]:
        sim = Simulator(device="gpu", **kw)
        res = sim.run(c)  # warm-up (compiles, probes, cost table)
        walls = []
        for _ in range(2):
            res = sim.run(c)
            walls.append(res.wall_s)
        auto = res.metadata.get("auto", {})
        row = {"qubits": n, "run": label, "wall_s": min(walls), "walls_s": walls,
               "blocks_per_method": auto.get("blocks_per_method"),
               "precision_settings": auto.get("precision_settings"), "excluded": auto.get("excluded"),
               "l2_bound": res.error.l2_bound if res.error else None,
               "notes": list(res.error.notes) if res.error else []}
        if ref is not None:
            hi, lo = ref
            err = (res.state.to_numpy() - hi) - lo
            row["measured_l2"] = float(np.linalg.norm(err))
            row["within_bound"] = row["l2_bound"] is not None and row["measured_l2"] <= row["l2_bound"]
            if "tolerance" in kw:
                row["within_tolerance"] = row["measured_l2"] <= kw["tolerance"] and row["l2_bound"] <= kw["tolerance"]
        rows.append(row)
        print(f"  {n}q {label:16s} {row['wall_s'] * 1e3:8.1f} ms  {row['blocks_per_method']}  "
              f"bound {row['l2_bound']:.3g}" + (f"  measured {row['measured_l2']:.3g}" if ref is not None else "")
              + "".join(f"\n      {note}" for note in row["notes"]), flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--check-qubits", type=int, default=24)
    p.add_argument("--dims", default="10,12,8")
    p.add_argument("--counts", default="8,10,12,14,16")
    p.add_argument("--tolerances", default="1e-12,1e-10,1e-8,1e-6")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="JSON path (default $OUT/crt_tolerance_gpu.json when OUT is set)")
    args = p.parse_args(argv)
    import cupy as cp

    warnings.simplefilter("ignore")
    out = args.out or (os.path.join(os.environ["OUT"], "crt_tolerance_gpu.json") if os.environ.get("OUT") else None)
    payload = {"timing": f"CUDA events, one warm-up, median of {args.repeats}; runs: best of two after a warm-up",
               "counts": [], "auto": [], "errors": []}
    t0 = time.time()

    def save():
        if out:
            from benchmarks.common import write_results

            write_results(out, {**payload, "elapsed_s": time.time() - t0},
                          module=__spec__.name if __spec__ else "benchmarks.bench.crt_tolerance_gpu", argv=argv)

    counts = [int(x) for x in args.counts.split(",")]
    tols = [float(x) for x in args.tolerances.split(",")]
    for d in (int(x) for x in args.dims.split(",")):
        try:
            print(f"== counts d={d} at {args.qubits} qubits", flush=True)
            rows = _counts_part(cp, args.qubits, d, counts, args.repeats)
            payload["counts"] += rows
            for r in rows:
                print(f"  {r['method']:9s} moduli {r.get('moduli', '-')!s:>3s} {r['median_ms']:8.2f} ms "
                      f"x{r.get('x_zgemm', 1.0):.3f} ZGEMM  x{r.get('x_default', 1.0):.3f} default "
                      f"(model {r.get('model_relative_cost', 1.0):.3f})", flush=True)
        except Exception as e:  # noqa: BLE001 - recorded, the other parts still run
            payload["errors"].append(f"counts d={d}: {type(e).__name__}: {e}"[-2000:])
            traceback.print_exc()
        save()
    for n, check in ((args.check_qubits, True), (args.qubits, False)):
        try:
            print(f"== brickwork({n}, 10, 4) under auto with tolerances" + (" (against double-double)" if check else ""),
                  flush=True)
            payload["auto"] += _auto_part(n, tols, check)
        except Exception as e:  # noqa: BLE001
            payload["errors"].append(f"auto {n}: {type(e).__name__}: {e}"[-2000:])
            traceback.print_exc()
        save()
    print(f"errors: {payload['errors'] or 'none'}; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
