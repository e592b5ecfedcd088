"""The CPU stage path against the gate-at-a-time path and qsim, in one run (issue 16's CPU target).

For QFT-N (H on every qubit first), QuantumVolume(N, seed=7) and brickwork(N, 4, depth 10), built
as ``benchmarks.bench.auto.build`` builds them, at --qubits (default 24):

  staged      ``run_stages`` on a complex64 (native32) and a complex128 (native) state, the plan
              made as the Simulator makes it (``stage_choice.decide_cpu``) or with L = --local, and
              chunks of --block-bytes; from |0...0> as the Simulator starts (the state allocated
              unwritten, made by the first stage), its fusion costs the host's
              (``stages.cpu.host_fuse_costs``: calibrated where ``qsim-tc calibrate`` measured them),
              read back into logical order
  gate        ``Simulator(backend, device="cpu", fuse="auto", plan=None)`` (gate by gate, fused as the
              cost table says), native32
              and native (--gate-repeats runs, 0 skips them)
  qsim        qsimcirq (complex64, --threads threads, max_fused_gate_size 2 and 4), when it
              imports (``pip install ".[bench]"``)

Every configuration runs once untimed first (numba compile, page faults), then --repeats
times, round-robin over the configurations of a circuit (a slow spell of a shared machine then
touches all of them); the minimum is kept. Every state is compared with the staged complex128 one before a
time is reported. Also reported: the plan's passes over the state (one per stage; the
index-bit swaps are folded into the stage's load, so they add none) and the pass floor: the
best time of one read+write of the state (``np.multiply(x, 1, out=x)``, one thread, and a
copy split over --threads threads), measured in the same run.

    python -m benchmarks.bench.cpu_vs_qsim --json benchmarks/results/stages_cpu_vs_qsim.json
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import gemm
from benchmarks.bench.auto import build
from benchmarks.common import write_results
from qsim_tc import Simulator
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages.choice import decide_cpu
from qsim_tc.stages.cpu import default_block_bytes, run_stages
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.structure import classify

MODULE = "benchmarks.bench.cpu_vs_qsim"
CIRCUITS = ("qft", "qv", "brickwork4")


def to_cirq(c):
    """The circuit for qsimcirq: one cirq.MatrixGate per gate on cirq.LineQubit; cirq lists a
    gate's qubits most significant first, our matrices have the gate's qubit 0 as bit 0."""
    import cirq  # noqa: PLC0415 - optional peer

    q = cirq.LineQubit.range(c.n_qubits)
    ops = [cirq.MatrixGate(np.asarray(g.matrix)).on(*[q[i] for i in reversed(g.qubits)]) for g in c.gates]
    return cirq.Circuit(ops), q


def qsim_state(c, fused: int, threads: int):
    """(final state in our order, seconds of ``simulate``)."""
    import qsimcirq  # noqa: PLC0415 - optional peer

    cc, q = to_cirq(c)
    sim = qsimcirq.QSimSimulator(qsim_options={"t": threads, "f": fused})
    t0 = time.perf_counter()
    res = sim.simulate(cc, qubit_order=list(reversed(q)))  # qubit 0 least significant, as ours
    dt = time.perf_counter() - t0
    return np.asarray(res.final_state_vector) * np.exp(1j * c.global_phase), dt


def check_qsim_order(threads: int) -> float:
    """Max |difference| between qsim and run_stages on a small circuit with asymmetric gates (a
    wrong qubit or bit order would show as an O(1) difference)."""
    from circuits import Circuit, haar_unitary  # noqa: PLC0415

    rng = np.random.default_rng(3)
    c = Circuit(5)
    for qubits in [(0,), (3, 1), (4, 0, 2), (1, 4), (2,)]:
        c.add(haar_unitary(1 << len(qubits), rng), qubits, "u")
    ours = run_stages(np.eye(1, 32, dtype=np.complex128)[0], plan_stages(c, 3))
    theirs, _ = qsim_state(c, 2, threads)
    return float(np.abs(ours - theirs).max())


def pass_floor(n: int, threads: int, repeats: int = 5) -> dict:
    """Seconds of one read+write of a 2^n state, per dtype."""
    out = {}
    for dt in (np.complex64, np.complex128):
        x = np.ones(1 << n, dt)
        y = np.empty_like(x)
        best_mul = best_copy = float("inf")
        parts = np.array_split(np.arange(1 << n), threads)
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(repeats):
                t0 = time.perf_counter()
                np.multiply(x, 1, out=x)
                best_mul = min(best_mul, time.perf_counter() - t0)
                t0 = time.perf_counter()
                list(pool.map(lambda p: np.copyto(y[p[0]:p[-1] + 1], x[p[0]:p[-1] + 1]), parts))
                best_copy = min(best_copy, time.perf_counter() - t0)
        out[np.dtype(dt).name] = {"multiply_1thread_s": best_mul, f"copy_{threads}threads_s": best_copy}
    return out


def timing(args) -> list[dict]:
    try:
        import qsimcirq  # noqa: F401, PLC0415
        have_qsim = True
    except ImportError:
        have_qsim = False
    rows: list[dict] = []
    for name in args.circuits:
        c, desc = build(name, args.qubits)
        kinds: dict[str, int] = {}
        for g in c.gates:
            k = classify(g.matrix).kind
            kinds[k] = kinds.get(k, 0) + 1
        print(f"{desc}: {len(c)} gates {kinds}", flush=True)

        def staged(dtype, c=c):
            # the Simulator's plan (stage_choice.decide_cpu: its L, or complex64's wider one where
            # that saves stages) unless --local fixes L
            if args.local:
                plan = plan_stages(c, args.local)
            else:
                plan = decide_cpu(c, np.dtype(dtype).itemsize, always=True).plan

            def go():
                # as the Simulator runs it from |0...0>: the state allocated unwritten, made by the
                # first stage (fresh); then read into logical order, as qsim's result is
                t0 = time.perf_counter()
                phys = PhysicalState(np.empty(1 << args.qubits, dtype), gemm.resolve_device("cpu"))
                run_stages(phys, plan, block_bytes=args.block_bytes, threads=args.threads, fresh=True)
                phys.canonicalize()
                return phys.data, time.perf_counter() - t0
            info = {"local_qubits": plan.local_qubits, "passes": plan.n_stages,
                    "block_bytes": args.block_bytes or default_block_bytes(np.dtype(dtype).itemsize, plan.local_qubits,
                                                                         args.threads),
                    "stages_with_swaps": plan.n_swap_passes, "swapped_bits": plan.n_swapped_bits}
            return go, info

        def gate(backend, c=c):
            sim = Simulator(backend, device="cpu", fuse="auto", plan=None)  # gate by gate, fused

            def go():
                t0 = time.perf_counter()
                res = sim.run(c)
                return res.state.to_numpy(), time.perf_counter() - t0
            return go, {"passes": len(c)}

        def qsim(f, c=c):
            return (lambda: qsim_state(c, f, args.threads)), {"max_fused_gate_size": f, "threads": args.threads}

        cases = [("staged native (complex128)", staged(np.complex128), args.repeats),
                 ("staged native32 (complex64)", staged(np.complex64), args.repeats)]
        if have_qsim:
            cases += [(f"qsim complex64 f={f}", qsim(f), args.repeats) for f in (2, 4)]
        if args.gate_repeats:
            cases += [("gate-at-a-time native (complex128)", gate("native"), args.gate_repeats),
                      ("gate-at-a-time native32 (complex64)", gate("native32"), args.gate_repeats)]
        # warm-up (numba compile, page faults), then the repeats round-robin over the cases, so
        # that a slow spell of a shared machine touches every case alike
        outs = {label: np.asarray(go()[0]) for label, (go, _), _ in cases}
        times: dict[str, list[float]] = {label: [] for label, _, _ in cases}
        for rep in range(max(r for _, _, r in cases)):
            for label, (go, _), repeats in cases:
                if rep < repeats:
                    out, dt = go()
                    times[label].append(dt)
                    outs[label] = np.asarray(out)
        ref = outs[cases[0][0]].astype(np.complex128)
        for label, (_, info), _ in cases:
            err = float(np.abs(outs[label].astype(np.complex128) - ref).max())
            tol = 1e-10 if "complex128" in label else 1e-4
            if err > tol:
                raise SystemExit(f"{name}: {label} differs from the staged complex128 state by {err:.3g}")
            row = {"circuit": name, "description": desc, "n": args.qubits, "gates": len(c), "kinds": kinds,
                   "what": label, "seconds": min(times[label]), "all_seconds": times[label],
                   "max_abs_diff_vs_staged128": err, **info}
            rows.append(row)
            print(f"  {label:38s} {row['seconds']:7.3f} s  (diff {err:.1e})", flush=True)
        qs = [r["seconds"] for r in rows if r["circuit"] == name and r["what"].startswith("qsim")]
        if qs:
            for r in rows:
                if r["circuit"] == name:
                    r["ratio_to_best_qsim"] = r["seconds"] / min(qs)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qubits", type=int, default=24)
    ap.add_argument("--circuits", default=",".join(CIRCUITS), help=f"any of {', '.join(CIRCUITS)}")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--local", type=int, default=0, help="L of the plans (0: the Simulator's choice)")
    ap.add_argument("--block-bytes", type=int, default=None,
                    help="chunk bytes (default: the executor's, qsim_tc.stages.cpu.default_block_bytes)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gate-repeats", type=int, default=1, help="runs of the gate-at-a-time path (0: skip)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    args.circuits = args.circuits.split(",")
    payload: dict = {"pass_floor": pass_floor(args.qubits, args.threads)}
    print("pass floor:", payload["pass_floor"], flush=True)
    try:
        payload["qsim_order_check_max_abs_diff"] = check_qsim_order(args.threads)
        print("qsim order check (5 qubits, max |diff|):", payload["qsim_order_check_max_abs_diff"], flush=True)
    except ImportError:
        pass
    payload["timing"] = timing(args)
    payload["options"] = {"threads": args.threads, "block_bytes": args.block_bytes, "local": args.local or
                          "stage_choice.decide_cpu", "repeats": args.repeats,
                          "gate_repeats": args.gate_repeats}
    payload["cpu"] = host_cpu()
    if args.json:
        write_results(args.json, payload, module=MODULE, argv=argv)
    return 0


def host_cpu() -> dict:
    """What the kernels were built for: the CPU as LLVM names it, its vector width, its L2 and L3
    (the ratio to qsim moves with all three between hosts)."""
    from llvmlite import binding as llvm  # noqa: PLC0415

    from qsim_tc.stages import (
        cpu,  # noqa: PLC0415
        cpu_kernels,  # noqa: PLC0415
    )
    from qsim_tc.stages.host_cache import cache_sizes  # noqa: PLC0415

    sizes = cache_sizes()
    caches = {f"l{level}_bytes": sizes.get(level) for level in (2, 3)}
    costs = cpu.host_fuse_costs()
    return {"llvm_cpu": llvm.get_host_cpu_name(), "vector_bytes": cpu_kernels.VECTOR_BYTES,
            "cpus": os.cpu_count(), **caches, "fusion_costs": cpu.FUSE_COST_SOURCE,
            "fusion_cost_table": {str(k): list(v) for k, v in costs.items()}}


if __name__ == "__main__":
    raise SystemExit(main())
