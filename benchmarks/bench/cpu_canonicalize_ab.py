"""Putting a CPU state back into logical order after the stages: numpy's in-place permutation
against the compiled gather into the spare buffer (``stages.cpu.canonicalize``), in one process.

For each circuit and dtype, the Simulator's plan is run once by ``run_stages`` on a
``PhysicalState``; its final layout is then undone from copies of that state, alternately by
the engine's own permutation (``PhysicalState.canonicalize`` with no spare buffer) and by the
compiled gather. Both results must equal bit for bit; the minimum of the repeats is kept.

    python -m benchmarks.bench.cpu_canonicalize_ab --json benchmarks/results/stages_cpu_canonicalize_ab.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import gemm
from benchmarks.bench.auto import build
from benchmarks.bench.cpu_vs_qsim import host_cpu
from benchmarks.common import write_results
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages.choice import decide_cpu
from qsim_tc.stages.cpu import canonicalize, run_stages

MODULE = "benchmarks.bench.cpu_canonicalize_ab"


def compare(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    circ, desc = build(name, n)
    plan = decide_cpu(circ, np.dtype(dtype).itemsize, always=True).plan
    psi = np.zeros(1 << n, dtype)
    psi[0] = 1
    done = run_stages(PhysicalState(psi, gemm.resolve_device("cpu")), plan, threads=threads)
    layout = list(done.layout.phys)
    stored = done.data.copy()

    def state(with_spare: bool) -> PhysicalState:
        phys = PhysicalState(stored.copy(), gemm.resolve_device("cpu"))
        phys.layout.set(layout)
        if with_spare:  # as the stages leave it: allocated and written (its pages mapped)
            phys.spare = np.empty_like(stored)
            phys.spare.fill(0)
        return phys

    times: dict[str, list[float]] = {"numpy": [], "compiled": []}
    outs = {}
    for _ in range(repeats):
        for kind in times:
            phys = state(kind == "compiled")
            t0 = time.perf_counter()
            if kind == "compiled":
                assert canonicalize(phys, threads=threads)
            else:
                phys.canonicalize()
            times[kind].append(time.perf_counter() - t0)
            outs[kind] = phys.data
    if not np.array_equal(outs["numpy"], outs["compiled"]):
        raise SystemExit(f"{desc}: the two orders differ")
    return {"circuit": name, "description": desc, "dtype": np.dtype(dtype).name, "n": n, "final_layout": layout,
            **{f"{k}_s": min(v) for k, v in times.items()}, **{f"{k}_all_s": v for k, v in times.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qubits", type=int, default=24)
    ap.add_argument("--circuits", default="qft,qv,brickwork4,brickwork2")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    for name in args.circuits.split(","):
        for dtype in (np.complex64, np.complex128):
            row = compare(name, dtype, args.qubits, args.threads, args.repeats)
            rows.append(row)
            print(f"{row['description'][:30]:30s} {row['dtype']:10s} numpy {row['numpy_s'] * 1e3:6.1f} ms  "
                  f"compiled {row['compiled_s'] * 1e3:6.1f} ms", flush=True)
    if args.json:
        write_results(args.json, {"cpu": host_cpu(), "threads": args.threads, "rows": rows}, module=MODULE,
                      argv=argv if argv is not None else sys.argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
