"""Stage plans: the stages (= passes over the state) and swap passes that ``plan_stages`` makes for
QFT, QuantumVolume (seed 7) and brickwork(n, 4, depth 10) at each --count-qubits and local size L
in --local (plans only, no state). The times of the staged executors are measured by
``benchmarks.bench.cpu_vs_qsim`` (CPU, against qsim) and ``benchmarks.bench.stages_gpu``.

    python -m benchmarks.bench.stages --json benchmarks/results/stage_counts.json

The circuits are those of ``benchmarks.bench.qiskit_circuits``: QFT with H on every qubit first,
and quantum_volume as Qiskit builds it.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit, qv_circuit
from benchmarks.common import parse_range, write_results
from circuits import Circuit, brickwork
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.structure import classify

MODULE = "benchmarks.bench.stages"


def circuits(n: int) -> dict[str, tuple[Circuit, str]]:
    """The three benchmark circuits at width n, with where each came from."""
    qft, qft_src = qft_circuit(n)
    qv, qv_src = qv_circuit(n, 7)
    return {
        f"qft{n}": (prepend_hadamards(qft), qft_src + " after H on every qubit"),
        f"qv{n}": (qv, qv_src + ", seed 7"),
        f"brickwork{n}_d4_depth10": (brickwork(n, 4, 10, seed=1), "circuits.brickwork(n, 4, 10, seed=1)"),
    }


def counts(qubits: list[int], locals_: list[int]) -> list[dict]:
    rows = []
    for n in qubits:
        for name, (c, _) in circuits(n).items():
            structures = [classify(g.matrix) for g in c.gates]
            kinds: dict[str, int] = {}
            for s in structures:
                kinds[s.kind] = kinds.get(s.kind, 0) + 1
            for big_l in locals_:
                t0 = time.perf_counter()
                plan = plan_stages(c, big_l, structures=structures)
                row = {"circuit": name, "n": n, "L": big_l, "gates": len(c), "kinds": kinds,
                       "plan_s": round(time.perf_counter() - t0, 3), **plan.summary()}
                del row["gates_per_stage"]
                rows.append(row)
                print(f"{name:24s} N={n} L={big_l:2d}: {plan.n_stages:3d} stages, {plan.n_swap_passes:3d} swap "
                      f"passes, {plan.n_swapped_bits:3d} bits swapped ({row['plan_s']:.2f} s to plan)", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count-qubits", default="20,24,28", help="widths of the stage-count table")
    ap.add_argument("--local", default="10-14", help="local sizes L of the stage-count table")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    payload = {"counts": counts(parse_range(args.count_qubits), parse_range(args.local))}
    if args.json:
        write_results(args.json, payload, module=MODULE, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
