"""The GPU stage model's weights, fitted to the stages of real programs.

Times every stage of the stage kernel's programs for QFT, QuantumVolume(N, seed=7) and brickwork
circuits of gate widths 1-3 (and 4 in complex64) at N qubits, one kernel launch a stage (median of
five after a warm-up), with each stage's op counts (dense ops by width, phase ops, pre-phases).
Then fits, per precision, the model of :mod:`qsim_tc.stages.choice`: a stage costs
``STAGE_PASSES`` and each op its ``OP_PASSES`` weight (:mod:`qsim_tc.stages.program`), in
reference passes (``REFERENCE_PASS_MS`` at N = 28; scaled by 2^(N - 28) and by the GPU's SM count
times clock), by least squares on the relative error of each stage (non-negative weights). Prints
the weights and each circuit's measured and predicted total.

    python -m benchmarks.bench.stage_fit --qubits 28 --json benchmarks/results/stage_fit_h200.json
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.bench.auto import build
from benchmarks.common import write_results
from benchmarks.gate_timing import event_times
from qsim_tc.stages import choice as stage_choice
from qsim_tc.stages import kernel as stage_kernel
from qsim_tc.stages import program as stage_program
from qsim_tc.stages.choice import REFERENCE_PASS_MS, REFERENCE_SM_GHZ, reference_pass_ms
from qsim_tc.stages.plan import plan_stages

CIRCUITS = {"complex128": ("qft", "qv", "brickwork1", "brickwork2", "brickwork3"),
            "complex64": ("qft", "qv", "brickwork1", "brickwork2", "brickwork3", "brickwork4")}
LOCAL_QUBITS = {"complex128": 12, "complex64": 13}
KINDS = ("d1", "d2", "d3", "d4", "phase", "pre", "pair")


def op_counts(ops: np.ndarray) -> dict[str, int]:
    """A stage's op records counted by the model's kinds."""
    out: dict[str, int] = {}
    for rec in ops:
        if rec[stage_program.W_TYPE] == stage_program.OP_DENSE:
            pair = rec[stage_program.W_MMA] == stage_program.MMA_PAIR
            key = "pair" if pair else f"d{int(rec[stage_program.W_K])}"
            out[key] = out.get(key, 0) + 1
            if rec[stage_program.W_PCOUNT]:
                out["pre"] = out.get("pre", 0) + 1
        else:
            out["phase"] = out.get("phase", 0) + 1
    return out


def fit(rows: list[dict], unit_ms: float) -> dict:
    """Weights {"stage": .., kind: ..} (reference passes) minimising each stage's relative error."""
    from scipy.optimize import least_squares  # noqa: PLC0415

    kinds = [k for k in KINDS if any(k in r["ops"] for r in rows)]
    a = np.array([[1.0] + [r["ops"].get(k, 0) for k in kinds] for r in rows])
    y = np.array([r["ms"] for r in rows]) / unit_ms
    res = least_squares(lambda p: (a @ p - y) / y, np.full(a.shape[1], 0.3), bounds=(0, np.inf))
    return {"stage": float(res.x[0]), **{k: float(v) for k, v in zip(kinds, res.x[1:])}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.stage_fit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--dtypes", default="complex128,complex64")
    p.add_argument("--json", default=None)
    p.add_argument("--tensor-c64", action="store_true",
                   help="complex64's 2- and 3-qubit ops on the tensor cores (kernel.MMA_GPU[8]), to fit their weights")
    args = p.parse_args(argv)
    if args.tensor_c64:
        stage_kernel.MMA_GPU[8] = True
    import cupy as cp  # noqa: PLC0415

    n = args.qubits
    unit = reference_pass_ms(n, stage_kernel.sm_ghz())
    rows, fits, totals = [], {}, []
    for dname in args.dtypes.split(","):
        dtype = np.dtype(dname)
        big_l = LOCAL_QUBITS[dname]
        state = cp.zeros(1 << n, dtype)
        state[:1024] = 0.03
        part = []
        for cname in CIRCUITS[dname]:
            circ, desc = build(cname, n)
            rotate = stage_choice.ROTATE_LOW[dtype.itemsize]
            prog = stage_program.build_program(plan_stages(circ, big_l, keep_low=3, rotate_low=rotate), 3,
                                               fuse_qubits=stage_kernel.max_dense(dtype),
                                               block_qubits=stage_kernel.block_qubits(dtype), itemsize=dtype.itemsize,
                                               widen=stage_kernel.tensor_core_ops(dtype))
            pools = stage_kernel.upload(prog, dtype)
            for i, stage in enumerate(prog.stages):
                ms, _ = event_times(cp, lambda i=i: stage_kernel.run_stage(state, prog, i, pools), 5)
                part.append({"dtype": dname, "circuit": desc, "stage": i, "ms": ms, "ops": op_counts(stage.ops)})
        w = fits[dname] = fit(part, unit)
        for desc in dict.fromkeys(r["circuit"] for r in part):
            mine = [r for r in part if r["circuit"] == desc]
            meas = sum(r["ms"] for r in mine)
            pred = unit * sum(w["stage"] + sum(w.get(k, 0.0) * c for k, c in r["ops"].items()) for r in mine)
            totals.append({"dtype": dname, "circuit": desc, "stages": len(mine), "measured_ms": meas,
                           "predicted_ms": pred})
        rows += part
        state = None
        cp.get_default_memory_pool().free_all_blocks()
    print(f"unit (reference pass at {n} qubits, this GPU's SMs x clock): {unit:.3f} ms")
    for dname, w in fits.items():
        print(dname, " ".join(f"{k} {v:.3f}" for k, v in w.items()))
    print(f"{'dtype':10s} {'circuit':50s} {'stages':>6s} {'measured':>9s} {'model':>9s}")
    for t in totals:
        print(f"{t['dtype']:10s} {t['circuit'][:50]:50s} {t['stages']:6d} {t['measured_ms']:9.1f} "
              f"{t['predicted_ms']:9.1f}")
    if args.json:
        write_results(args.json, {"qubits": n, "unit_ms": unit, "reference_pass_ms": REFERENCE_PASS_MS,
                                  "tensor_c64": bool(args.tensor_c64),
                                  "reference_sm_ghz": REFERENCE_SM_GHZ, "weights": fits, "totals": totals,
                                  "stages": rows}, module="benchmarks.bench.stage_fit", argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
