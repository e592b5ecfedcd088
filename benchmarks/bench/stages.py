"""Stage plans on the CPU: passes per circuit, and the staged executor against gate-at-a-time and qsim.

Two parts, both in one result file:

  counts   stages (= passes over the state) and swap passes that ``plan_stages`` makes for QFT,
           QuantumVolume (seed 7) and brickwork(n, 4, depth 10) at each --count-qubits and
           local size L in --local (plans only, no state).

  timing   at --qubits (default 24), for each circuit: the staged CPU executor
           (``run_stages``, complex128 and complex64) beside ``Simulator(fuse="auto")`` with
           ``native`` and ``native32``, and qsim (qsimcirq, complex64, --threads threads,
           max_fused_gate_size 2 and 4) when qsimcirq imports. Every state is compared with the
           first one of its circuit before any time is reported.

    python -m benchmarks.bench.stages --json benchmarks/results/stages_cpu_2core.json

The circuits are those of ``benchmarks.bench.qiskit_circuits``: QFT with H on every qubit first,
and quantum_volume as Qiskit builds it.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit, qv_circuit
from benchmarks.common import parse_range, write_results
from circuits import Circuit, brickwork
from qsim_tc import Simulator
from qsim_tc.engine.stages_cpu import DEFAULT_BLOCK_BYTES, run_stages
from qsim_tc.plan.stage_choice import CPU_LOCAL_QUBITS
from qsim_tc.plan.stages import cpu_local_qubits, plan_stages
from qsim_tc.plan.structure import classify

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


def to_cirq(c: Circuit):
    """The circuit for qsimcirq: cirq lists a gate's qubits most significant first."""
    import cirq  # noqa: PLC0415 - optional peer

    q = cirq.LineQubit.range(c.n_qubits)
    ops = [cirq.MatrixGate(np.asarray(g.matrix)).on(*[q[i] for i in reversed(g.qubits)]) for g in c.gates]
    return cirq.Circuit(ops), q


def run_qsim(c: Circuit, fused: int, threads: int):
    import qsimcirq  # noqa: PLC0415 - optional peer

    cc, q = to_cirq(c)
    sim = qsimcirq.QSimSimulator(qsim_options={"t": threads, "f": fused})
    t0 = time.perf_counter()
    res = sim.simulate(cc, qubit_order=list(reversed(q)))  # qubit 0 least significant, as here
    dt = time.perf_counter() - t0
    return np.asarray(res.final_state_vector) * np.exp(1j * c.global_phase), dt


def timing(n: int, threads: int, block_bytes: int, chunk_bytes: int, repeats: int) -> list[dict]:
    try:
        import qsimcirq  # noqa: F401, PLC0415
        have_qsim = True
    except ImportError:
        have_qsim = False
    rows = []
    for name, (c, src) in circuits(n).items():
        runs: list[tuple[str, dict, object]] = []

        def staged(dtype, c=c):
            def go():
                t0 = time.perf_counter()
                big_l = CPU_LOCAL_QUBITS[np.dtype(dtype).itemsize] if not chunk_bytes else cpu_local_qubits(dtype,
                                                                                                            chunk_bytes)
                plan = plan_stages(c, big_l)
                t1 = time.perf_counter()
                psi = np.zeros(1 << n, dtype=dtype)
                psi[0] = 1
                out = run_stages(psi, plan, block_bytes=block_bytes, threads=threads)
                t2 = time.perf_counter()
                return out, t2 - t0, {"plan_s": round(t1 - t0, 3), **plan.summary()}
            return go

        def simulator(backend, c=c):
            def go():
                sim = Simulator(backend, device="cpu", fuse="auto", plan=None)
                t0 = time.perf_counter()
                res = sim.run(c)
                dt = time.perf_counter() - t0
                return res.state.to_numpy(), dt, {"fusion": sim.fusion_choice.to_dict() if sim.fusion_choice else None,
                                                  "applied_gates": res.metadata.get("applied_gates")}
            return go

        def qsim(f, c=c):
            def go():
                out, dt = run_qsim(c, f, threads)
                return out, dt, {"max_fused_gate_size": f, "threads": threads}
            return go

        cases = [("staged native (complex128)", staged(np.complex128)),
                 ("staged native32 (complex64)", staged(np.complex64)),
                 ("Simulator native (complex128) fuse=auto", simulator("native")),
                 ("Simulator native32 (complex64) fuse=auto", simulator("native32"))]
        if have_qsim:
            cases += [(f"qsim complex64 f={f}", qsim(f)) for f in (2, 4)]
        ref = None
        for label, go in cases:
            times, info, out = [], {}, None
            for _ in range(repeats):
                out, dt, info = go()
                times.append(dt)
            out = np.asarray(out)
            if ref is None:
                ref = out.astype(np.complex128)
            err = float(np.abs(out.astype(np.complex128) - ref).max())
            tol = 1e-10 if "complex128" in label or " native " in label else 1e-4
            if err > tol:
                raise SystemExit(f"{name}: {label} differs from the first result by {err:.3g}")
            row = {"circuit": name, "source": src, "n": n, "gates": len(c), "what": label,
                   "seconds": round(min(times), 3), "all_seconds": [round(t, 3) for t in times],
                   "max_abs_diff_vs_first": err, **info}
            rows.append(row)
            runs.append((label, row, out))
            print(f"{name:24s} {label:30s} {row['seconds']:7.2f} s  (diff {err:.1e})", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count-qubits", default="20,24,28", help="widths of the stage-count table")
    ap.add_argument("--local", default="10-14", help="local sizes L of the stage-count table")
    ap.add_argument("--qubits", type=int, default=24, help="width of the timing runs (0: skip)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--block-bytes", type=int, default=DEFAULT_BLOCK_BYTES)
    ap.add_argument("--chunk-bytes", type=int, default=0,
                    help="the cache budget that sets L on the CPU (0: L as the Simulator takes it, "
                         "qsim_tc.plan.stage_choice.CPU_LOCAL_QUBITS)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    payload = {"counts": counts(parse_range(args.count_qubits), parse_range(args.local))}
    if args.qubits:
        payload["timing"] = timing(args.qubits, args.threads, args.block_bytes, args.chunk_bytes, args.repeats)
        payload["timing_options"] = {"threads": args.threads, "block_bytes": args.block_bytes,
                                     "chunk_bytes": args.chunk_bytes, "repeats": args.repeats}
    if args.json:
        write_results(args.json, payload, module=MODULE, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
