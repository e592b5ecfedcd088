"""The default ``Simulator()`` of two checkouts side by side: time and final-state hash.

A layout change must leave behaviour untouched. This runs the default ``Simulator()`` (and
``Simulator(precision="single")``) of checkout A and checkout B on QFT, QuantumVolume and
brickwork(n, 2, 20), alternating A, B, A, B... in fresh processes on the same machine, and
reports per circuit the best wall time of each and whether the final states are bit-identical
(sha256 of the amplitudes in logical order).

    python -m benchmarks.bench.default_ab --a OLD_CHECKOUT --b NEW_CHECKOUT --qubits 28 \
        --json benchmarks/results/default_ab.json

Only the public API is used (``qsim_tc.Simulator``, ``benchmarks.bench.auto.build`` and
``time_run``), so both
checkouts may differ in everything behind it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import hashlib, json, sys
import numpy as np
from benchmarks.bench.auto import build, time_run
from qsim_tc import Simulator
n, repeats, device = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
out = {}
for name in ("qft", "qv", "brickwork2"):
    circ, desc = build(name, n)
    for precision in ("double", "single"):
        best, res = time_run(Simulator(precision=precision, device=device), circ, repeats)
        amps = np.ascontiguousarray(res.state.to_numpy())
        out[f"{desc} {precision}"] = {"s": best, "sha256": hashlib.sha256(amps.tobytes()).hexdigest()}
print("RESULT " + json.dumps(out))
"""


def run_child(root: Path, n: int, repeats: int, device: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(repeats), device], cwd=root, env=env,
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"run in {root.name} failed:\n{proc.stderr[-3000:]}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.default_ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, type=Path, help="checkout A (the baseline)")
    p.add_argument("--b", required=True, type=Path, help="checkout B")
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--repeats", type=int, default=5, help="timed runs per process after a warm-up")
    p.add_argument("--rounds", type=int, default=2, help="A, B alternations")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    runs = {"a": [], "b": []}
    for _ in range(args.rounds):
        for key in ("a", "b"):
            runs[key].append(run_child(getattr(args, key).resolve(), args.qubits, args.repeats, args.device))
    rows = []
    for case in runs["a"][0]:
        ta = min(r[case]["s"] for r in runs["a"])
        tb = min(r[case]["s"] for r in runs["b"])
        hashes_a = {r[case]["sha256"] for r in runs["a"]}
        hashes_b = {r[case]["sha256"] for r in runs["b"]}
        rows.append({"case": case, "a_ms": ta * 1e3, "b_ms": tb * 1e3, "b_over_a": tb / ta,
                     "bit_identical": hashes_a == hashes_b and len(hashes_a) == 1,
                     "runs_a_ms": [r[case]["s"] * 1e3 for r in runs["a"]],
                     "runs_b_ms": [r[case]["s"] * 1e3 for r in runs["b"]]})
    print(f"{'case':52s} {'A ms':>9s} {'B ms':>9s} {'B/A':>6s}  identical")
    for r in rows:
        print(f"{r['case']:52s} {r['a_ms']:9.2f} {r['b_ms']:9.2f} {r['b_over_a']:6.3f}  {r['bit_identical']}")
    if args.json:
        from benchmarks.common import write_results
        write_results(args.json, {"qubits": args.qubits, "rounds": args.rounds, "repeats": args.repeats,
                                  "a": str(args.a.name), "b": str(args.b.name), "rows": rows},
                      module="benchmarks.bench.default_ab", argv=argv)
    return 0 if all(r["bit_identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
