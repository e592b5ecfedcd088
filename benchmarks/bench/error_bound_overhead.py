"""The cost of ``Result.error`` against the run it bounds, in one process: each run path's wall
time, and the time to compute its bound again from the same run's records.

    python -m benchmarks.bench.error_bound_overhead [--qubits 20] [--depth 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time

from circuits import brickwork


def _bound_seconds(sim, circuit, result) -> float:
    from qsim_tc import run_error

    if result.step_kind == "stage":
        from qsim_tc.stages.cpu import FUSE_COST
        from qsim_tc.stages.fusion import fuse_stage

        plan = sim.stage_decision.plan
        # the executor's fused stages, as the run collects them while it runs (not part of the cost)
        executed = [fuse_stage(s, plan.local_qubits, FUSE_COST[sim.dtype.itemsize]) for s in plan.stages]
        t = time.perf_counter()
        run_error.stage_run_report(plan, sim.dtype, executed=executed)
        return time.perf_counter() - t
    applied, covers = sim._fuse(circuit)
    t = time.perf_counter()
    run_error.gate_run_report(applied, result.stats, covers, circuit, sim.dtype)
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=20)
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from qsim_tc import Simulator

    c = brickwork(args.qubits, 2, args.depth, seed=1)
    rows = []
    for label, kw in (("stages", {"plan": "always"}), ("gates, fused", {"plan": None}),
                      ("gates, unfused", {"plan": None, "fuse": None})):
        sim = Simulator(device="cpu", **kw)
        sim.run(c)  # compiles and warms
        walls, bounds = [], []
        for _ in range(args.repeats):
            res = sim.run(c)
            walls.append(res.wall_s)
            bounds.append(_bound_seconds(sim, c, res))
        row = {"path": label, "steps": len(res.steps), "run_s": min(walls), "bound_s": min(bounds),
               "fraction": min(bounds) / min(walls), "l2_bound": res.error.l2_bound,
               "l2_estimate": res.error.l2_estimate}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"circuit": f"brickwork({args.qubits}, 2, {args.depth}, seed=1)", "device": "cpu",
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
