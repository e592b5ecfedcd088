"""Benchmark of the double-double reference: a brickwork circuit simulated in DD, timed per gate.

    python -m benchmarks.bench.dd --qubits 20 --gate-qubits 4 --depth 10 --device cpu
    python -m benchmarks.bench.dd --qubits 28 --gate-qubits 10 --depth 4 --device gpu \
        --fma-rows 32768 --compare native --json benchmarks/results/dd_gpu.json

Reports the wall time of ``simulate_dd``, the time of every gate, the effective DD GEMM rate
(8 M K N real flops of each complex product over its time), optionally the FMA kernel on a
subset of one gate's rows (extrapolated to the whole gate, and labelled so), and optionally the
accuracy of other backends against the reference, with their time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import gemm
from benchmarks.common import write_results
from circuits import brickwork
from qsim_tc.accuracy import compare
from qsim_tc.reference import simulate_dd


def _sync(xp):
    gemm.device.synchronize(xp)


def _free(xp):
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=20)
    p.add_argument("--gate-qubits", type=int, default=4)
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    p.add_argument("--algorithm", default="split", choices=("split", "fma"))
    p.add_argument("--fma-rows", type=int, default=0,
                   help="also time the FMA kernel on this many rows of one gate-shaped product (GPU)")
    p.add_argument("--compare", default="", help="comma-separated backends to run and measure against the reference")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    dev = gemm.resolve_device(args.device)
    xp = dev.xp
    circ = brickwork(args.qubits, args.gate_qubits, args.depth, seed=args.seed)
    n, d = args.qubits, args.gate_qubits
    m_rows, dim = 1 << (n - d), 1 << d
    gate_flops = 8.0 * m_rows * dim * dim
    out = {"device": dev.name, "device_reason": dev.reason,
           "circuit": {"name": circ.name, "qubits": n, "gate_qubits": d, "depth": args.depth,
                       "n_gates": len(circ), "seed": args.seed},
           "gate_gemm_shape": [m_rows, dim, dim]}
    print(f"DD reference: {circ.name}, {len(circ)} gates of ({m_rows} x {dim}) @ ({dim} x {dim}) complex, "
          f"device {dev.name} ({dev.reason})", flush=True)

    # warm-up: kernels, cuBLAS handles, memory pool (a small circuit with the same gate size)
    simulate_dd(brickwork(min(n, d + 4), d, 1, seed=0), device=dev, algorithm=args.algorithm)
    _sync(xp)

    stamps = []

    def progress(done, total):
        _sync(xp)
        stamps.append(time.perf_counter())
        print(f"  gate {done}/{total}: {stamps[-1] - stamps[-2] if len(stamps) > 1 else stamps[-1] - t0:.3f} s",
              flush=True)

    t0 = time.perf_counter()
    ref = simulate_dd(circ, device=dev, progress=progress, algorithm=args.algorithm)
    _sync(xp)
    wall = time.perf_counter() - t0
    gate_s = np.diff([t0, *stamps]).tolist()
    rate = gate_flops * len(circ) / sum(gate_s)
    out["reference"] = {"algorithm": args.algorithm, "wall_s": wall, "gate_s": gate_s,
                        "dd_gemm_rate_flops": rate, "choices": ref.metadata["dd"],
                        "norm_hi": float(xp.linalg.norm(ref.hi))}
    print(f"DD reference: {wall:.2f} s wall, {np.median(gate_s):.3f} s median per gate, "
          f"effective DD GEMM rate {rate / 1e9:.2f} GFLOP/s (8MKN per complex product)", flush=True)
    save(out, args.json)

    if args.fma_rows and dev.is_gpu:
        rows = min(args.fma_rows, m_rows)
        rng = np.random.default_rng(0)
        a = xp.asarray(rng.standard_normal((rows, dim)) + 1j * rng.standard_normal((rows, dim)))
        u = xp.asarray(circ.gates[0].matrix.T.copy())
        for alg in ("split", "fma"):
            gemm.matmul(a, u, method="dd", algorithm=alg, a_lo=a * 1e-17, output="pair")
            _sync(xp)
            t1 = time.perf_counter()
            hi_lo = gemm.matmul(a, u, method="dd", algorithm=alg, a_lo=a * 1e-17, output="pair")
            _sync(xp)
            dt = time.perf_counter() - t1
            out.setdefault("gate_subset", {})[alg] = {
                "rows": rows, "seconds": dt, "extrapolated_gate_s": dt * m_rows / rows,
                "rate_flops": 8.0 * rows * dim * dim / dt, "note": f"timed on {rows} of {m_rows} rows, extrapolated"}
            print(f"  {alg}: {rows} rows in {dt:.3f} s -> one full gate ~{dt * m_rows / rows:.2f} s "
                  f"(extrapolated), {8.0 * rows * dim * dim / dt / 1e12:.3f} TFLOP/s", flush=True)
            if alg == "split":
                split_pair = hi_lo
            else:
                dif = xp.abs((hi_lo[0] - split_pair[0]) + (hi_lo[1] - split_pair[1]))
                out["gate_subset"]["fma_vs_split_max_rel"] = float((dif / xp.abs(split_pair[0])).max())
                print(f"  fma vs split: max rel diff {out['gate_subset']['fma_vs_split_max_rel']:.2e}", flush=True)
        del a, hi_lo, split_pair
        _free(xp)
        save(out, args.json)

    backends = [b for b in args.compare.split(",") if b]
    if backends:
        from qsim_tc import Simulator  # noqa: PLC0415

        out["backends"] = []
        native_t = None
        for b in backends:
            try:
                sim = Simulator(b, device=dev)
                sim.run(brickwork(min(n, d + 4), d, 1, seed=0))  # warm-up
                res = sim.run(circ)
                row = {"backend": b, "time_s": res.wall_s, **compare(res.state, ref)}
                del res
            except Exception as exc:  # noqa: BLE001 - one failing backend must not lose the others
                row = {"backend": b, "error": f"{type(exc).__name__}: {exc}"}
            _free(xp)
            if b == "native" and "time_s" in row:
                native_t = row["time_s"]
            out["backends"].append(row)
            save(out, args.json)
        for row in out["backends"]:
            if native_t and "time_s" in row:
                row["speedup_vs_native"] = native_t / row["time_s"]
            print("  " + ", ".join(f"{k}={v:.3e}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                  flush=True)
    save(out, args.json, final=True)
    return 0


def save(out: dict, path: str | None, final: bool = False) -> None:
    """Write the results so far (called after every stage, so a killed run keeps what it did)."""
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    out["complete"] = final
    out.update(write_results(path, out, module="benchmarks.bench.dd"))


if __name__ == "__main__":
    sys.exit(main())
