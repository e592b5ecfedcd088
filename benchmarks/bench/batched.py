"""Parameter sweeps: the Estimator on many bindings of one ansatz against a loop of Simulator().run.

    python -m benchmarks.bench.batched --qubits 16 --reps 4 --bindings 1000 --out benchmarks/results/batched_cpu.json

The ansatz is ``efficient_su2(n, reps)``; the observable a sum of every Z_i and Z_i Z_{i+1}
and X_i X_{i+1}. "estimator" is one ``Estimator().run([(ansatz, observable, values)])`` with
all bindings (one plan, :mod:`qsim_tc.batched`); "loop" is ``Simulator().run(ansatz.assign_parameters(v))``
per binding (the state only, no expectation value), timed on ``--loop-sample`` bindings and
scaled to all of them. The two are timed in turn ``--rounds`` times (best of each), so that on a
loaded machine both sides of the ratio see the same load.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> dict:
    from qiskit.circuit.library import efficient_su2
    from qiskit.quantum_info import SparsePauliOp

    from benchmarks.common import write_results
    from qsim_tc import Simulator
    from qsim_tc.qiskit import Estimator

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qubits", type=int, default=16)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--bindings", type=int, default=1000)
    ap.add_argument("--loop-sample", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="times each side is timed, in turn (best kept)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    n = args.qubits
    qc = efficient_su2(n, reps=args.reps)
    labels = [("Z", [i], 1.0) for i in range(n)] + [("ZZ", [i, i + 1], 0.5) for i in range(n - 1)] + \
        [("XX", [i, i + 1], 0.25) for i in range(n - 1)]
    op = SparsePauliOp.from_sparse_list(labels, n)
    values = np.random.default_rng(0).uniform(0, 2 * np.pi, (args.bindings, qc.num_parameters))
    est = Estimator(device="cpu")
    est.run([(qc, op, values[:4])]).result()  # warm
    Simulator(device="cpu").run(qc.assign_parameters(values[0]))  # warm: compiles the executor
    est_s = loop_one = float("inf")
    for _ in range(args.rounds):
        t = time.perf_counter()
        evs = est.run([(qc, op, values)]).result()[0].data.evs
        est_s = min(est_s, time.perf_counter() - t)
        t = time.perf_counter()
        for v in values[:args.loop_sample]:
            Simulator(device="cpu").run(qc.assign_parameters(v))
        loop_one = min(loop_one, (time.perf_counter() - t) / args.loop_sample)
    loop_s = loop_one * args.bindings
    print(f"estimator, {args.bindings} bindings: {est_s:.2f} s ({est_s / args.bindings * 1e3:.2f} ms each); loop of "
          f"Simulator().run: {loop_one * 1e3:.1f} ms each, {loop_s:.1f} s for all: {loop_s / est_s:.1f}x")
    payload = {"qubits": n, "reps": args.reps, "bindings": args.bindings, "parameters": qc.num_parameters,
               "observable_terms": len(op), "estimator_s": est_s, "loop_per_binding_s": loop_one,
               "loop_sample": args.loop_sample, "rounds": args.rounds, "loop_s_scaled": loop_s,
               "speedup": loop_s / est_s,
               "target": "speedup >= 10", "evs_first": evs[:3]}
    if args.out:
        write_results(args.out, payload, module="benchmarks.bench.batched")
    return payload


if __name__ == "__main__":
    main()
