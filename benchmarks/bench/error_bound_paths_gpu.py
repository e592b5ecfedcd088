"""Result.error on the GPU run paths against the GPU double-double reference: the measured L2
error never above the bound, and the bound's cost against the run's time.

    python -m benchmarks.bench.error_bound_paths_gpu [--qubits 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

from circuits import brickwork


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from qsim_tc import Simulator, run_error
    from qsim_tc.reference import simulate_dd

    n = args.qubits
    rows = []
    circuits = {"brickwork d=2": brickwork(n, 2, 12, seed=1), "brickwork d=4": brickwork(n, 4, 6, seed=2)}
    configs = [("auto double stages", {}), ("auto single stages", {"precision": "single"}),
               ("auto double gates", {"plan": None}), ("auto single gates", {"plan": None, "precision": "single"}),
               ("int8-crt gates", {"backend": "int8-crt", "plan": None}),
               ("tc-auto gates", {"backend": "tc-auto", "plan": None}),
               ("native bounded", {"backend": "native", "plan": None, "workspace_bytes": 1 << 20})]
    for cname, c in circuits.items():
        hi, lo = simulate_dd(c, device="gpu").to_numpy()
        for label, kw in configs:
            sim = Simulator(device="gpu", **kw)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sim.run(c)
                res = sim.run(c)
            x = res.state.to_numpy().astype(np.complex128)
            err = float(np.linalg.norm((x - hi) - lo))
            rep = res.error
            t = time.perf_counter()
            if res.step_kind == "stage":
                from qsim_tc.stages.kernel import max_dense
                d = sim.stage_decision
                run_error.stage_run_report(d.plan, sim.dtype, max_dense=max_dense(np.complex128 if d.wide else sim.dtype),
                                           compute="fp64" if d.wide or sim.dtype == np.complex128 else "fp32")
            else:
                applied, covers = sim._fuse(c)
                t = time.perf_counter()
                run_error.gate_run_report(applied, res.stats, covers, c, sim.dtype)
            cost = time.perf_counter() - t
            row = {"circuit": cname, "config": label, "kind": res.step_kind, "steps": len(res.steps),
                   "measured_l2": err, "l2_bound": rep.l2_bound, "l2_estimate": rep.l2_estimate,
                   "ok": rep.l2_bound is not None and err <= rep.l2_bound, "run_s": res.wall_s, "bound_s": cost}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
