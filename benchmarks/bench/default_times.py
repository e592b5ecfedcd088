"""Wall time of the default ``Simulator()`` on QFT (after H on every qubit), QuantumVolume(n,
seed=7) and brickwork(n, 4, 10, seed=1): one warm-up run (kernel compilation and loading), then
the best of ``--repeats``. Prints one JSON object a line, for A/B comparisons of two trees run
alternately in the same process environment.

    python -m benchmarks.bench.default_times --qubits 20,22 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit, qv_circuit
from circuits import brickwork
from qsim_tc import Simulator


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", default="20,22")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    for n in (int(q) for q in args.qubits.split(",")):
        for name, c in ((f"qft{n}", prepend_hadamards(qft_circuit(n)[0])), (f"qv{n}", qv_circuit(n, 7)[0]),
                        (f"brickwork{n}", brickwork(n, 4, 10, seed=1))):
            sim = Simulator()
            sim.run(c)  # warm-up: compilation, loading, the plan cached for this circuit
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                r = sim.run(c)
                times.append(time.perf_counter() - t0)
            print(json.dumps({"label": args.label, "circuit": name, "device": r.device, "dtype": str(r.state.dtype),
                              "best_s": min(times), "times_s": times}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
