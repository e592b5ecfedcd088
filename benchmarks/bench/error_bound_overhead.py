"""The cost of ``Result.error`` against the run it bounds, in one process: each run path's wall
time, and the time to compute its bound again from the same run's records.

    python -m benchmarks.bench.error_bound_overhead [--qubits 20] [--depth 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time

from circuits import brickwork


def bound_seconds(sim, circuit, result) -> float:
    """The host time to compute ``result``'s error report again, as the run computes it:
    a GPU stage run accumulates its plan's kept steps (built on its first run), a CPU stage run
    accumulates its executed stages (fused here again, not timed), a gate run its applied gates
    with the guard's norms."""
    import numpy as np  # noqa: PLC0415

    from qsim_tc import run_error  # noqa: PLC0415

    if result.step_kind == "stage":
        plan = sim.stage_decision.plan
        if sim.device.is_gpu:
            from qsim_tc.stages.kernel import max_dense  # noqa: PLC0415

            wide = bool(sim.stage_decision.wide)
            steps = run_error.stage_steps(plan, sim.dtype, max_dense=max_dense(np.complex128 if wide else sim.dtype),
                                          compute="fp64" if wide or sim.dtype == np.complex128 else "fp32")
            t = time.perf_counter()
            run_error.report_of(steps, 1.0)
            return time.perf_counter() - t
        from qsim_tc.stages.cpu import host_fuse_costs  # noqa: PLC0415
        from qsim_tc.stages.fusion import fuse_stage  # noqa: PLC0415

        # the executor's fused stages, as the run collects them while it runs (not part of the cost)
        executed = [fuse_stage(s, plan.local_qubits, host_fuse_costs()[sim.dtype.itemsize]) for s in plan.stages]
        t = time.perf_counter()
        run_error.stage_run_report(plan, sim.dtype, executed=executed)
        return time.perf_counter() - t
    applied, covers = sim._fuse(circuit)
    t = time.perf_counter()
    run_error.gate_run_report(applied, result.stats, covers, circuit, sim.dtype, from_zero=True,
                              state_norms=run_error.guard_norms(result.metadata),
                              norm_u=run_error.norm_unit_roundoff(sim.dtype, sim.device.is_gpu))
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
            bounds.append(bound_seconds(sim, c, res))
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
