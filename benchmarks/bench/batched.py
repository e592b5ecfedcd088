"""Parameter sweeps: the Estimator on many bindings of one ansatz against a loop of Simulator().run.

    python -m benchmarks.bench.batched --qubits 16 --reps 4 --bindings 1000 --out benchmarks/results/batched_cpu.json
    python -m benchmarks.bench.batched --device gpu --qubits 12,16,20 --bindings 1000 --out $OUT/batched_gpu.json

The ansatz is ``efficient_su2(n, reps)``; the observable a sum of every Z_i and Z_i Z_{i+1}
and X_i X_{i+1}. "estimator" is one ``Estimator().run([(ansatz, observable, values)])`` with
all bindings (one plan, :mod:`qsim_tc.batched`: on a GPU, blocks of many small states evolve at
once); "loop" is ``Simulator().run(ansatz.assign_parameters(v))`` per binding (the state only,
no expectation value), timed on ``--loop-sample`` bindings and scaled to all of them. The two
are timed in turn ``--rounds`` times (best of each), so that on a loaded machine both sides of
the ratio see the same load. ``--qubits`` takes a list: one row per size (a short table).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _sync(device: str):
    """Wait for the device's queued work (GPU timings end there); nothing on the CPU."""
    if device == "gpu":
        import cupy  # noqa: PLC0415 - GPU runs only

        cupy.cuda.runtime.deviceSynchronize()


def one_size(n: int, args) -> dict:
    """Time the Estimator sweep and the loop for ``n`` qubits; one row of the table."""
    from qiskit.circuit.library import efficient_su2
    from qiskit.quantum_info import SparsePauliOp, Statevector

    from qsim_tc import Simulator
    from qsim_tc.batched import BLOCK_ELEMENTS
    from qsim_tc.qiskit import Estimator

    qc = efficient_su2(n, reps=args.reps)
    labels = [("Z", [i], 1.0) for i in range(n)] + [("ZZ", [i, i + 1], 0.5) for i in range(n - 1)] + \
        [("XX", [i, i + 1], 0.25) for i in range(n - 1)]
    op = SparsePauliOp.from_sparse_list(labels, n)
    values = np.random.default_rng(0).uniform(0, 2 * np.pi, (args.bindings, qc.num_parameters))
    est = Estimator(device=args.device)
    est.run([(qc, op, values[:4])]).result()  # warm
    Simulator(device=args.device).run(qc.assign_parameters(values[0]))  # warm: compiles the executor
    _sync(args.device)
    est_s = loop_one = float("inf")
    for _ in range(args.rounds):
        t = time.perf_counter()
        evs = est.run([(qc, op, values)]).result()[0].data.evs  # host values: the device work is done
        est_s = min(est_s, time.perf_counter() - t)
        t = time.perf_counter()
        for v in values[:args.loop_sample]:
            Simulator(device=args.device).run(qc.assign_parameters(v))
        _sync(args.device)
        loop_one = min(loop_one, (time.perf_counter() - t) / args.loop_sample)
    loop_s = loop_one * args.bindings
    # the first bindings' values against Qiskit's Statevector (an independent simulation)
    check = [float(np.real(Statevector(qc.assign_parameters(v)).expectation_value(op))) for v in values[:2]]
    row = {"qubits": n, "reps": args.reps, "bindings": args.bindings, "parameters": qc.num_parameters,
           "observable_terms": len(op), "estimator_s": est_s, "estimator_per_binding_s": est_s / args.bindings,
           "loop_per_binding_s": loop_one, "loop_s_scaled": loop_s, "speedup": loop_s / est_s,
           "states_per_block": min(args.bindings, max(1, BLOCK_ELEMENTS[args.device] >> n)),  # evolved at once
           "evs_first": evs[:2], "max_abs_diff_to_qiskit": float(np.max(np.abs(np.asarray(evs[:2]) - check)))}
    print(f"{n:>3} qubits, {args.bindings} bindings: estimator {est_s:.2f} s ({est_s / args.bindings * 1e3:.3f} ms "
          f"each); loop of Simulator().run {loop_one * 1e3:.1f} ms each, {loop_s:.1f} s for all: "
          f"{loop_s / est_s:.1f}x, {row['states_per_block']} states a block "
          f"(first values within {row['max_abs_diff_to_qiskit']:.1e} of Qiskit's)")
    return row


def main(argv=None) -> dict:
    from benchmarks.common import parse_range, write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qubits", default="16", help="sizes, e.g. 16 or 12,16,20")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--bindings", type=int, default=1000)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--loop-sample", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="times each side is timed, in turn (best kept)")
    ap.add_argument("--machine", default=None, help="where it ran, recorded in the result")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()[0]
    rows = [one_size(n, args) for n in parse_range(args.qubits)]
    # the machine's 1-minute load average before and after (other jobs share a small CPU)
    payload = {"device": args.device, "machine": args.machine, "rows": rows, "target": "speedup >= 10",
               "loop_sample": args.loop_sample, "rounds": args.rounds,
               "load_average_1min": [load_before, os.getloadavg()[0]], "cpu_count": os.cpu_count()}
    if len(rows) == 1:  # one size: its row's fields at the top level too (as earlier results have them)
        payload.update(rows[0])
    if args.device == "gpu":
        import cupy  # noqa: PLC0415 - GPU runs only

        payload["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    if args.out:
        write_results(args.out, payload, module="benchmarks.bench.batched", argv=argv)
    return payload


if __name__ == "__main__":
    main()
