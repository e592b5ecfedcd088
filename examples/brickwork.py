"""Simulate a brickwork random circuit and look at the result.

    python examples/brickwork.py                          # 20 qubits, d = 4, depth 10, best device
    python examples/brickwork.py --qubits 26 --gate-qubits 6 --backend int8-auto --threshold 1

Prints the time (the circuit's gates, the steps that applied them: stages or gates), the norm, a
few amplitudes, the heaviest outcomes of 10,000 shots, and how each step was applied (a stage,
small-gate kernel, bottom/top/batched GEMM, or a layout permutation first).
"""

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gemm  # noqa: E402
from circuits import brickwork  # noqa: E402
from qsim_tc import Simulator  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=20)
    p.add_argument("--gate-qubits", type=int, default=4)
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backend", default="native", help=f"one of {', '.join(gemm.methods())}")
    p.add_argument("--threshold", type=float, help="int8-auto: mantissa bits that may be lost on average")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    args = p.parse_args()

    options = {"threshold": args.threshold} if args.threshold is not None else {}
    circ = brickwork(args.qubits, args.gate_qubits, args.depth, seed=args.seed)
    sim = Simulator(args.backend, device=args.device, **options)
    print(f"{circ.name}: {len(circ)} gates on {sim.device.name} ({sim.device.reason}), backend {args.backend}")

    result = sim.run(circ)
    state = result.state
    steps, t = len(result.steps), result.gate_time_ms
    if result.step_kind == "stage":  # many gates a pass over the state; a GPU stage is not timed apart
        per = "" if t is None else f", {t / steps:.2f} ms per stage"
        print(f"simulated in {result.wall_s:.3f} s: {result.input_gates} gates in {steps} stages{per}")
    else:
        print(f"simulated in {result.wall_s:.3f} s: {result.input_gates} gates as {steps} blocks "
              f"({t / result.input_gates:.2f} ms per gate)")
    print(f"norm = {state.norm():.15f}")
    for i in (0, 1, (1 << args.qubits) - 1):
        print(f"amplitude[{i}] = {state.amplitude(i):.6e}")

    shots = state.sample(10_000, seed=7)
    print("heaviest outcomes of 10,000 shots:",
          ", ".join(f"{k:0{args.qubits}b}: {v}" for k, v in Counter(shots.tolist()).most_common(3)))
    print("paths:", dict(Counter(s.info.path for s in result.stats)))
    splits = [s.info.report.choices.get("splits") for s in result.stats if s.info.report is not None]
    if any(x is not None for x in splits):
        print("INT8 splits per gate:", splits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
