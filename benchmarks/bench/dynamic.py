"""Dynamic circuits through ``QsimTcBackend`` beside Qiskit Aer's statevector method, same circuits,
same shots, one process.

Circuits (n qubits, k mid-circuit measurements):

  feedforward  quantum_volume(n, depth) layers; then k times: measure qubit j into its own bit,
               if it read 1 apply X to qubit j + 5, another quantum_volume(n, 2) block; then
               every qubit measured.
  rus          repeat until success: H on qubit 0 and a measurement in a ``while`` loop until it
               reads 1 (an expected 2 iterations a shot), then quantum_volume(n, depth) and every
               qubit measured.

qsim-tc branches the state only where a measurement's outcomes differ (k measurements: at most
min(shots, 2^k) states); Aer runs the circuit shot by shot once it holds a mid-circuit
measurement. Before a time is reported, the two samples of the mid-circuit bits (and of the
first final qubits) are compared by a two-sample chi-square test; a p-value below 1e-3 fails the
run. Each side is timed after a warm-up, best of --repeats (Aer: --aer-repeats).

    python -m benchmarks.bench.dynamic --qubits 16 --json benchmarks/results/dynamic_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from benchmarks.common import write_results

MODULE = "benchmarks.bench.dynamic"
CIRCUITS = ("feedforward", "rus")


def build(name: str, n: int, k: int, depth: int):
    from qiskit import QuantumCircuit  # noqa: PLC0415
    from qiskit.circuit.library import quantum_volume  # noqa: PLC0415

    if name == "feedforward":
        qc = QuantumCircuit(n, n + k)
        qc.compose(quantum_volume(n, depth=depth, seed=3).decompose(), inplace=True)
        for j in range(k):
            qc.measure(j, n + j)
            with qc.if_test((qc.clbits[n + j], 1)):
                qc.x((j + 5) % n)
            qc.compose(quantum_volume(n, depth=2, seed=10 + j).decompose(), inplace=True)
        qc.measure(range(n), range(n))
        return qc, list(range(n, n + k))
    if name == "rus":
        qc = QuantumCircuit(n, n + 1)
        qc.h(0)
        qc.measure(0, n)
        with qc.while_loop((qc.clbits[n], 0)):
            qc.h(0)
            qc.measure(0, n)
        qc.compose(quantum_volume(n, depth=depth, seed=4).decompose(), inplace=True)
        qc.measure(range(n), range(n))
        return qc, [n]
    raise ValueError(f"unknown circuit {name!r}; known: {', '.join(CIRCUITS)}")


def bits_of(counts: dict, positions: list[int], width: int) -> dict:
    """Counts of the bits at ``positions`` (clbit indices) of hex or binary keys."""
    out: dict = {}
    for key, c in counts.items():
        v = int(key, 16) if key.startswith("0x") else int(key.replace(" ", ""), 2)
        sub = sum(((v >> p) & 1) << i for i, p in enumerate(positions))
        out[sub] = out.get(sub, 0) + c
    return out


def two_sample_p(a: dict, b: dict) -> float:
    """p-value of a chi-square test that two samples of counts come from one distribution."""
    from scipy.stats import chi2_contingency  # noqa: PLC0415

    keys = sorted(set(a) | set(b))
    table = np.array([[a.get(k, 0) for k in keys], [b.get(k, 0) for k in keys]])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0
    return float(chi2_contingency(table)[1])


def best_time(fn, repeats: int):
    out = fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qubits", type=int, default=16)
    ap.add_argument("--circuits", default=",".join(CIRCUITS))
    ap.add_argument("--measurements", type=int, default=3, help="k of the feedforward circuit")
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--shots", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--aer-repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from qiskit_aer import AerSimulator  # noqa: PLC0415

    from qsim_tc import Simulator  # noqa: PLC0415
    from qsim_tc.qiskit_backend import QsimTcBackend  # noqa: PLC0415

    ours, aer = QsimTcBackend(), AerSimulator(method="statevector")
    rows = []
    for name in args.circuits.split(","):
        qc, mid = build(name, args.qubits, args.measurements, args.depth)
        t_ours, res = best_time(lambda qc=qc: ours.run(qc, shots=args.shots, seed_simulator=1).result(), args.repeats)
        t_aer, res_aer = best_time(lambda qc=qc: aer.run(qc, shots=args.shots, seed_simulator=1).result(),
                                   args.aer_repeats)
        unitary = qc.remove_final_measurements(inplace=False)
        plain = unitary.copy_empty_like()
        for inst in unitary.data:  # the same gates without measurements and control: one simulation
            if inst.operation.name not in ("measure", "if_else", "while_loop"):
                plain.append(inst)
        plain.remove_final_measurements()
        t_plain, _ = best_time(lambda plain=plain: Simulator().run(plain), args.repeats)
        c_ours, c_aer = res.get_counts(), res_aer.get_counts()
        width = qc.num_clbits
        p_mid = two_sample_p(bits_of(c_ours, mid, width), bits_of(c_aer, mid, width))
        p_final = two_sample_p(bits_of(c_ours, [0, 1, 2], width), bits_of(c_aer, [0, 1, 2], width))
        row = {"circuit": name, "n": args.qubits, "shots": args.shots, "mid_bits": mid,
               "qsim_tc_s": t_ours, "aer_s": t_aer, "aer_over_qsim_tc": t_aer / t_ours,
               "one_simulation_s": t_plain, "branches": res.results[0].metadata["branches"],
               "p_mid_bits": p_mid, "p_final_bits_0_2": p_final}
        rows.append(row)
        print(f"{name:12s} n={args.qubits} shots={args.shots}: qsim-tc {t_ours:.3f} s ({row['branches']} branches), "
              f"Aer {t_aer:.3f} s ({row['aer_over_qsim_tc']:.0f}x), one simulation {t_plain:.3f} s; "
              f"chi-square p {p_mid:.3f} (mid bits), {p_final:.3f} (final bits 0-2)", flush=True)
        if min(p_mid, p_final) < 1e-3:
            raise SystemExit(f"{name}: the outcomes of qsim-tc and Aer differ (p {p_mid:.2g}, {p_final:.2g})")
    if args.json:
        write_results(args.json, {"rows": rows}, module=MODULE, argv=argv if argv is not None else sys.argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
