"""complex64 stages on the TF32 tensor cores against complex64 on the FMA loops, complex128 and the
gate-by-gate complex64 path (native32, plan=None): time and accuracy, in one process.

For each circuit at N qubits (QFT after H, QuantumVolume(N, seed=7), brickwork(N, 2, 20),
brickwork(N, 4, 10)): the default ``Simulator(precision="double")`` (the reference state and
its time), ``Simulator(precision="single")`` with the complex64 stage kernel on its FMA loops
(``kernel.MMA_GPU[8] = False``) and on the FP16 tensor cores (also with the kept low bits rotating
between stages, and with two blocks an SM: registers without spills), and ``native32`` gate by gate.
Each complex64 state is compared with the complex128 one: L2 error, infidelity and norm drift
(the complex128 result's own error, ~1e-14, is far below complex64's). Times are the best of
``--repeats`` runs after a warm-up. Beside each stage form: its pass floor (stages times one
read+write of the complex64 state) and arithmetic floor (:mod:`benchmarks.bench.arith_floor`).

    python -m benchmarks.bench.stage_tc32 --qubits 28 --json benchmarks/results/stage_tc32_h100.json
"""

from __future__ import annotations

import argparse
import warnings

from benchmarks.bench.arith_floor import floor_seconds, measure_peaks, program_flops
from benchmarks.bench.auto import build, time_run
from benchmarks.bench.stages_gpu import best_time
from benchmarks.common import write_results

CIRCUITS = ("qft", "qv", "brickwork2", "brickwork4")
TC_INSTRUCTIONS = 6  # FP16 instructions a complex64 tensor-core product takes (qsim_tc.stages.tc32)


def errors(cp, got, ref) -> dict:
    """L2 error, infidelity and norm drift of ``got`` (a complex64 state) against ``ref``."""
    x = cp.from_dlpack(got).astype(cp.complex128)
    r = cp.from_dlpack(ref)
    l2 = float(cp.linalg.norm(x - r))
    nx, nr = float(cp.vdot(x, x).real), float(cp.vdot(r, r).real)
    overlap = abs(complex(cp.vdot(r, x))) ** 2 / (nx * nr)
    del x
    return {"l2": l2, "infidelity": max(0.0, 1.0 - overlap), "norm_drift": abs(nx - 1.0)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.stage_tc32", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--circuits", default=",".join(CIRCUITS))
    p.add_argument("--no-gates", action="store_true", help="skip the gate-by-gate native32 runs")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import cupy as cp  # noqa: PLC0415

    from qsim_tc import Simulator  # noqa: PLC0415
    from qsim_tc.stages import choice, kernel  # noqa: PLC0415

    n = args.qubits
    rows = []
    peaks = measure_peaks(cp)
    state = cp.zeros(1 << n, dtype=cp.complex64)
    pass_ms = 1e3 * best_time(cp, lambda: cp.multiply(state, 1, out=state), 5)
    state = None  # released
    print("peaks (Tflop/s): " + ", ".join(f"{k} {v / 1e12:.1f}" for k, v in peaks.items())
          + f"; complex64 pass {pass_ms:.2f} ms", flush=True)
    for name in args.circuits.split(","):
        circ, desc = build(name, n)
        t128, ref = time_run(Simulator(precision="double"), circ, args.repeats)
        entry = {"circuit": desc, "complex128_ms": 1e3 * t128, "forms": {}}
        # (label, complex64 tensor-core ops, rotating low bits, blocks an SM the registers allow)
        configs = [("fma", False, False, 3), ("tc", True, False, 3), ("tc rotate", True, True, 3),
                   ("tc 2 blocks", True, False, 2)]
        default = (kernel.MMA_GPU[8], choice.ROTATE_LOW[8], kernel.MIN_BLOCKS[8])
        for label, mma, rotate, blocks in configs:
            kernel.MMA_GPU[8], choice.ROTATE_LOW[8], kernel.MIN_BLOCKS[8] = mma, rotate, blocks
            sim = Simulator(precision="single")
            try:
                t, res = time_run(sim, circ, args.repeats)
            finally:
                kernel.MMA_GPU[8], choice.ROTATE_LOW[8], kernel.MIN_BLOCKS[8] = default
            d = sim.stage_decision
            floors = {}
            if d is not None and d.program is not None:
                item = 16 if d.wide else 8
                terms = TC_INSTRUCTIONS if (mma and not d.wide) else 1
                flops = program_flops(d.program, mma or d.wide, terms)
                floors = {"arith_floor_ms": 1e3 * floor_seconds(flops, peaks, item, "fp16"),
                          "pass_floor_ms": pass_ms * d.plan.n_stages}
            entry["forms"][label] = {"ms": 1e3 * t, "path": res.step_kind, **floors,
                                     "why": d.why if d is not None else None,
                                     "wide": bool(d.wide) if d is not None else None,
                                     "stages": d.plan.n_stages if d is not None and d.plan is not None else None,
                                     **errors(cp, res.state, ref.state)}
            del res
        if not args.no_gates:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t, res = time_run(Simulator("native32", plan=None), circ, 1)
            entry["forms"]["native32 gates"] = {"ms": 1e3 * t, "path": res.step_kind, **errors(cp, res.state, ref.state)}
            del res
        del ref
        cp.get_default_memory_pool().free_all_blocks()
        rows.append(entry)
        print(f"{desc}: complex128 {entry['complex128_ms']:.1f} ms", flush=True)
        for label, f in entry["forms"].items():
            fl = (f"floors {f['pass_floor_ms']:5.1f}/{f['arith_floor_ms']:5.1f}" if "pass_floor_ms" in f
                  else " " * 18)
            print(f"  {label:15s} {f['ms']:8.1f} ms {fl} l2 {f['l2']:.2e} infid {f['infidelity']:.2e} "
                  f"norm {f['norm_drift']:.1e}  {f.get('why') or f['path']}", flush=True)
    if args.json:
        write_results(args.json, {"qubits": n, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                  "cupy": cp.__version__, "peak_flops": peaks, "pass_ms": pass_ms, "rows": rows}, module="benchmarks.bench.stage_tc32", argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
