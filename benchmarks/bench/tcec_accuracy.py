"""Accuracy of the TF32/FP16 methods on whole brickwork circuits against the double-double
reference, over several seeds, beside native CGEMM (``native32``), on the GPU.

Gates of d >= 6 qubits (complex64: 2^(d+1) >= 128 real columns) take the wgmma product on sm_90;
``--wg-chain 1,2`` repeats the error-corrected methods with each number of k-steps per hi*hi
product summed inside the tensor core; ``--options '{"ec_product": "fused"}'`` passes options to
every TF32/FP16 method.

    python -m benchmarks.bench.tcec_accuracy --qubits 20 --gate-qubits 8 --depth 6 --seeds 4 \
        --wg-chain 1,2 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from benchmarks.common import command, write_results

METRICS = ("amp0_real_rel", "max_rel", "mean_rel", "l2_rel", "infidelity", "norm_drift")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=20)
    p.add_argument("--gate-qubits", type=int, default=8)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--seed0", type=int, default=0, help="first seed")
    p.add_argument("--methods", default="tf32tf32,halfhalf,tc-auto")
    p.add_argument("--wg-chain", default="1", help="comma list of wgmma hi*hi chain lengths")
    p.add_argument("--options", default="{}", help="JSON options for every method but native32")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    options = json.loads(args.options)

    from circuits import brickwork
    from gemm.tcec import gpu as tcec_gpu
    from qsim_tc.accuracy import accuracy_table

    t0 = time.time()
    methods = ["native32"] + args.methods.split(",")
    chains = [int(c) for c in args.wg_chain.split(",")]
    base = dict(tcec_gpu.WG_CONFIGS)
    rows = []
    for chain in chains:
        tcec_gpu.WG_CONFIGS = {k: c._replace(chain=chain) for k, c in base.items()}
        for seed in range(args.seed0, args.seed0 + args.seeds):
            circ = brickwork(args.qubits, args.gate_qubits, args.depth, seed)
            per_backend = {m: options for m in methods[1:]}
            for r in accuracy_table(circ, methods, device="gpu", reference="dd", options_per_backend=per_backend):
                if r["backend"] in methods:
                    rows.append({"chain": chain, "seed": seed, **{k: r.get(k) for k in ("backend", "time_s", *METRICS)}})
                    print(f"chain {chain} seed {seed} {r['backend']:9s} " + " ".join(
                        f"{k}={r.get(k, float('nan')):.3g}" for k in METRICS), flush=True)
    tcec_gpu.WG_CONFIGS = base

    summary = {}
    for chain in chains:
        med = {}
        for m in methods:
            sel = [r for r in rows if r["chain"] == chain and r["backend"] == m]
            med[m] = {k: statistics.median(abs(r[k]) for r in sel) for k in METRICS}
            med[m]["norm_drift_mean"] = statistics.fmean(r["norm_drift"] for r in sel)
        for m in methods[1:]:
            med[f"{m}_over_native32"] = {k: med[m][k] / med["native32"][k] for k in METRICS
                                         if med["native32"][k]}
        summary[f"chain {chain}"] = med
    for chain, med in summary.items():
        for m in methods[1:]:
            ratio = med[f"{m}_over_native32"]
            print(f"{chain} {m:9s} over native32: " + " ".join(f"{k}={v:.2f}" for k, v in ratio.items())
                  + f" drift_mean={med[m]['norm_drift_mean']:.2e} (native32 {med['native32']['norm_drift_mean']:.2e})")
    if args.out:
        given = [("benchmarks/results/" + os.path.basename(a)) if a == args.out else a for a in (argv or sys.argv[1:])]
        write_results(args.out, {"command": command(__spec__.name, given),
                                 "note": "medians of |metric| over seeds; norm_drift_mean: mean signed "
                       "norm drift; ratios over native32 (cuBLAS CGEMM) in the same run",
                       "wg_configs": {k: c._asdict() for k, c in base.items()}, "options": options,
                                 "summary": summary, "rows": rows, "wall_s": time.time() - t0},
                      module=__spec__.name, argv=argv)


if __name__ == "__main__":
    main()
