"""Small gates through the TF32/FP16 methods: the fused mma.sync product against the hybrid.

A d-qubit complex64 gate (d = 2..6) on an N-qubit state, targets at the bottom (``S @ U.T``) and in
the middle (the batched orientation, ``U @ S[h]``), through ``StateVector.apply`` with
``ec_product="fused"`` and ``"hybrid"`` beside native CGEMM (the engine's default path for the
native method: its small-gate kernels). Each result is checked against a complex128 product before
it is timed; times are CUDA-event medians over repeats after a warm-up.

    python -m benchmarks.bench.tcec_small --qubits 28 --json out.json
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from benchmarks.common import write_results
from circuits import haar_unitary
from qsim_tc import StateVector


def main():
    import cupy as cp

    p = argparse.ArgumentParser()
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--d", default="2,4,5,6")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    n, rng, rows = args.qubits, np.random.default_rng(0), []
    psi = cp.random.RandomState(1).standard_normal(2 << n, dtype=np.float32).view(np.complex64)
    psi /= cp.linalg.norm(psi)
    cases = [("native32", {}), ("tf32tf32", {"ec_product": "fused"}), ("tf32tf32", {"ec_product": "hybrid"}),
             ("halfhalf", {"ec_product": "fused"}), ("halfhalf", {"ec_product": "hybrid"})]
    for d in (int(x) for x in args.d.split(",")):
        u = haar_unitary(1 << d, rng)
        for where, qs in (("bottom", list(range(d))), ("middle", list(range(8, 8 + d)))):
            for method, opts in cases:
                sv = StateVector(n, dtype=np.complex64, device="gpu", data=psi)
                info = sv.apply(u, qs, method=method, check_unitary=False, **opts)
                got = sv.data()[:1 << 14].get().astype(np.complex128)
                want = StateVector(14, device="cpu", data=psi[:1 << 14].get().astype(np.complex128))
                if max(qs) < 14:
                    want.apply(u, qs)
                    err = float(np.abs(got - want.to_numpy()).max())
                else:
                    err = float("nan")
                ts = []
                for _ in range(args.repeats):
                    s, e = cp.cuda.Event(), cp.cuda.Event()
                    s.record()
                    sv.apply(u, qs, method=method, check_unitary=False, **opts)
                    e.record()
                    e.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(s, e))
                choices = info.report.choices if info.report is not None else {}
                row = {"d": d, "placement": where, "method": method, "options": opts, "path": info.path,
                       "ms": statistics.median(ts), "max_abs_err_first_2^14": err,
                       "ec_product": choices.get("ec_product"), "product_kernel": choices.get("product_kernel")}
                rows.append(row)
                print(f"d={d} {where:6s} {method:9s} {opts.get('ec_product', ''):6s} {row['ms']:8.3f} ms "
                      f"err {err:.1e} {row['path']} {row['ec_product'] or ''} {row['product_kernel'] or ''}",
                      flush=True)
    if args.json:
        write_results(args.json, {"qubits": n, "rows": rows}, module=__spec__.name)


if __name__ == "__main__":
    main()
