"""Benchmark of the INT8 Ozaki methods against native ZGEMM on the GPU.

Measures, in one run on one device:

- a 28-qubit gate (``S (2^(n-d), 2^d) @ U.T``, the engine's bottom orientation, and for the
  largest d also the batched orientation ``U @ S[h]``) at d = 6, 8, 10 with ``int8`` (s = 7..13),
  ``int8-auto`` (T = 0, 1) and native ZGEMM: median of CUDA-event timings after warm-up, every
  result checked against native first, the stage breakdown, slice memory, the INT8 rate;
- a 28-qubit brickwork circuit (d = 10, depth 4) through the simulator with each backend.

Usage::

    python -m benchmarks.bench.ozaki --out benchmarks/results/ozaki_<gpu>.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from benchmarks.common import write_results
from benchmarks.gate_timing import event_times as _events


def _configs(splits, thresholds):
    out = [("native", {})]
    out += [("int8", {"splits": s}) for s in splits]
    out += [("int8-auto", {"threshold": t}) for t in thresholds]
    return out


def bench_gate(cp, gemm, n, d, orientation, configs, repeats, rng):
    D = 1 << d
    M = 1 << (n - d)
    from circuits.haar import haar_unitary

    u = cp.asarray(haar_unitary(D, rng))
    re = cp.random.standard_normal((1 << n,), dtype=cp.float64)
    im = cp.random.standard_normal((1 << n,), dtype=cp.float64)
    state = (re + 1j * im).astype(cp.complex128)
    del re, im
    state /= cp.linalg.norm(state)
    if orientation == "bottom":
        a, b = state.reshape(M, D), u.T
    else:  # batched: targets in the middle, L = 2^9
        L = 1 << 9
        a, b = u, state.reshape(M // L, D, L)
    ref = cp.matmul(a, b)
    ref_max = float(cp.abs(ref).max())
    rows = []
    native_ms = None
    for method, opts in configs:
        c, rep = gemm.matmul(a, b, method=method, return_report=True, **opts)
        err = float(cp.abs(c - ref).max()) / ref_max
        del c
        ms, all_ms = _events(cp, lambda: gemm.matmul(a, b, method=method, **opts), repeats)
        _, rep = gemm.matmul(a, b, method=method, return_report=True, **opts)
        stages = rep.stages
        ch = rep.choices
        if method == "native":
            native_ms = ms
        pairs = ch.get("slice_pairs") or 0
        int8_ops = pairs * 8.0 * M * D * D  # complex: 2 * m * (2n) * (2k) per slice pair
        row = {
            "n_qubits": n, "d": d, "orientation": orientation, "method": method, "options": opts,
            "median_ms": ms, "times_ms": all_ms, "ratio_to_native": ms / native_ms if native_ms else None,
            "max_rel_err_vs_native": err, "splits": ch.get("splits"), "bits_per_slice": ch.get("bits_per_slice"),
            "int8_gemms": ch.get("int8_gemms"), "slice_pairs": pairs, "fallback": ch.get("fallback"),
            "slice_bytes": ch.get("slice_bytes"), "workspace_bytes": rep.workspace_bytes, "stages_ms": stages,
            "int8_tops": (int8_ops / (stages["int8_gemm"] * 1e-3) / 1e12) if stages.get("int8_gemm") else None,
            "mean_loss_bits": ch.get("mean_loss_bits"),
        }
        ok = err < (1e-6 if method != "native" else 1)
        row["checked"] = ok
        if not ok:
            print(f"  CHECK FAILED {method} {opts}: max rel err {err:.3g}", flush=True)
        rows.append(row)
        print(f"  d={d} {orientation:7s} {method:9s} {json.dumps(opts):20s} {ms:9.2f} ms  x{ms / native_ms:5.2f}  "
              f"s={ch.get('splits')} err={err:.2e} stages={ {k: round(v, 2) for k, v in stages.items()} }", flush=True)
    a = b = ref = state = u = None  # free the device memory before the next case
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def bench_brickwork(cp, n, d, depth, configs, seed=11):
    from circuits.brickwork import brickwork
    from qsim_tc import Simulator

    circ = brickwork(n, d, depth, seed=seed)
    rows = []
    native_state = None
    native_ms = None
    # warm-up (kernels, cuBLAS heuristics) on a small circuit with the same gate size
    for method, opts in configs:
        Simulator(method, device="gpu", **opts).run(brickwork(d + 8, d, 2, seed=seed))
    for method, opts in configs:
        sim = Simulator(method, device="gpu", **opts)
        cp.cuda.get_current_stream().synchronize()
        t0 = time.perf_counter()
        res = sim.run(circ)
        cp.cuda.get_current_stream().synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        amps = res.state.data()
        if native_state is None:
            native_state = amps.copy()
            native_ms = wall
            err = 0.0
        else:
            err = float(cp.abs(amps - native_state).max() / cp.abs(native_state).max())
        splits = [g.info.report.choices.get("splits") if g.info.report is not None else None for g in res.stats]
        rows.append({"n_qubits": n, "d": d, "depth": depth, "n_gates": len(res.stats), "method": method,
                     "options": opts, "wall_ms": wall, "gate_time_ms": res.gate_time_ms,
                     "ratio_to_native": wall / native_ms, "max_rel_err_vs_native": err, "splits_per_gate": splits,
                     "paths": [g.info.path for g in res.stats]})
        print(f"  brickwork {method:9s} {json.dumps(opts):20s} {wall:9.1f} ms  x{wall / native_ms:5.2f} err={err:.2e} "
              f"splits={splits}", flush=True)
        del res, amps
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--dims", default="6,8,10")
    p.add_argument("--splits", default="7,8,9,10,11,12,13")
    p.add_argument("--thresholds", default="0,1")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--brickwork-depth", type=int, default=4)
    p.add_argument("--brickwork-d", type=int, default=10)
    p.add_argument("--skip-brickwork", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import cupy as cp

    import gemm

    rng = np.random.default_rng(2026)
    splits = [int(x) for x in args.splits.split(",") if x]
    thresholds = [float(x) for x in args.thresholds.split(",") if x]
    configs = _configs(splits, thresholds)
    dims = [int(x) for x in args.dims.split(",") if x]
    from gemm.ozaki import gpu as ozaki_gpu

    payload = {"kernels": "fast" if ozaki_gpu.FAST else "basic",
               "timing": f"CUDA events, one warm-up, median of {args.repeats}", "gates": [], "brickwork": []}
    t0 = time.time()
    for d in dims:
        payload["gates"] += bench_gate(cp, gemm, args.qubits, d, "bottom", configs, args.repeats, rng)
    if dims:
        big = max(dims)
        sub = [c for c in configs if c[0] != "int8" or c[1]["splits"] in (splits[0], splits[-1])]
        payload["gates"] += bench_gate(cp, gemm, args.qubits, big, "batched", sub, args.repeats, rng)
    if not args.skip_brickwork:
        sub = [c for c in configs if c[0] != "int8" or c[1]["splits"] in (splits[0], 9, splits[-1])]
        payload["brickwork"] = bench_brickwork(cp, args.qubits, args.brickwork_d, args.brickwork_depth, sub)
    payload["elapsed_s"] = time.time() - t0
    if args.out:
        payload = write_results(args.out, payload, module=__spec__.name, argv=argv)
    print("\nmethod     options              d  orient    median_ms  x_native  splits  split/gemm/acc ms")
    for r in payload["gates"]:
        st = r["stages_ms"]
        print(f"{r['method']:10s} {json.dumps(r['options']):20s} {r['d']:2d} {r['orientation']:8s} "
              f"{r['median_ms']:9.2f} {r['ratio_to_native']:9.2f} {str(r['splits']):>6s}  "
              f"{st.get('split', 0):.1f}/{st.get('int8_gemm', 0):.1f}/{st.get('accumulate', 0):.1f}")
    for r in payload["brickwork"]:
        print(f"brickwork {r['method']:10s} {json.dumps(r['options']):20s} {r['wall_ms']:9.1f} ms x{r['ratio_to_native']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
