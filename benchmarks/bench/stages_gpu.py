"""The GPU stage kernel on whole circuits: time per circuit against the gate-at-a-time path.

For QFT-N (after H on every qubit), QuantumVolume(N, seed=7), brickwork(N, 2, depth 20) and
``ctl``, controlled_random(N, 20, seed=1) (Toffoli, Fredkin, CCZ, doubly controlled U among 1- and
2-qubit gates), at
each dtype and each (L, C) of --configs (L local qubits, C kept low bits): the plan's stages
(= passes over the state) and program ops (after in-stage fusion), the time of the stage kernel's
program (best of --repeats after a warm-up), the gate-at-a-time time of the same circuit in the
same run (``Simulator(fuse="auto", plan=None)``), the default ``Simulator()`` time (its plan
decision recorded), the pass floor (one in-place read+write of the state), the arithmetic floor
(the program's floating-point work at the GPU's peak rates, measured in the same run:
:mod:`benchmarks.bench.arith_floor`) and the largest amplitude difference from the gate-at-a-time
result (checked before any time is reported). With ``--peer``, also cuStateVec's ``applyMatrix`` on
the circuit's greedy 5-qubit fused blocks (as Aer-GPU runs it; its library from the custatevec
wheel on sys.path, :mod:`benchmarks.custatevec`), checked against the same result.

    python -m benchmarks.bench.stages_gpu --qubits 28 --json benchmarks/results/stages_gpu_h100.json
    python -m benchmarks.bench.stages_gpu --qubits 28 --circuits ctl,qv --peer --json $OUT/stages_gpu_ctl.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.bench.arith_floor import floor_seconds, measure_peaks, program_flops
from benchmarks.bench.auto import build
from benchmarks.common import write_results
from circuits import controlled_random
from circuits.fusion import fuse
from qsim_tc import Simulator
from qsim_tc.engine.permute import permute_bits
from qsim_tc.stages.kernel import block_qubits, max_dense, program_dtype, run_program, tensor_core_ops
from qsim_tc.stages.plan import DEFAULT_SEEDS, plan_stages
from qsim_tc.stages.program import build_program

CIRCUITS = {"qft": "qft", "qv": "qv", "bw2": "brickwork2", "ctl": "controlled"}
PEER_FUSION = 5  # the peer's fused block width (Aer-GPU's default fusion for cuStateVec)


def circuit(cname: str, n: int):
    """(circuit, description) of a short name of :data:`CIRCUITS`."""
    if CIRCUITS[cname] == "controlled":
        return controlled_random(n, 20, seed=1), f"controlled_random({n}, 20, seed=1)"
    return build(CIRCUITS[cname], n)


def best_time(cp, fn, repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` runs of ``fn()`` after a warm-up, wall clock to a
    device synchronize (host work between launches counts)."""
    fn()
    cp.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def time_peer(cp, peer, circ, state, ref, repeats: int) -> tuple[float, float]:
    """(seconds, largest amplitude difference from ``ref``) of cuStateVec's applyMatrix on the
    greedy :data:`PEER_FUSION`-qubit blocks of ``circ`` from |0...0> in ``state`` (the reset's own
    time taken off), the blocks' matrices converted to the state's dtype beforehand."""
    fused = fuse(circ, PEER_FUSION)
    mats = [(np.ascontiguousarray(g.matrix, dtype=state.dtype), list(g.qubits)) for g in fused.gates]

    def run():
        state.fill(0)
        state[0] = 1
        for m, qubits in mats:
            peer.apply_matrix(state, circ.n_qubits, m, qubits)

    t = best_time(cp, run, repeats) - best_time(cp, lambda: state.fill(0), repeats)
    diff = float(cp.abs(state * np.exp(1j * fused.global_phase) - cp.asarray(ref)).max())
    return t, diff


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.stages_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--circuits", default="qft,qv,bw2")
    p.add_argument("--dtypes", default="complex128,complex64")
    p.add_argument("--configs", default="12:3r", help="comma list of L:C or L:C:S, S the planner's seeds "
                   "(default: plan_stages' default), each with trailing flags: r, the kept low bits rotate "
                   "(rotate_low); s, single tensor-core ops (no pair records); w, a complex64 state on the "
                   "complex128 programs (widened in the kernel; complex128 ignores it); n, no renaming of "
                   "local slots against bank conflicts (build_program's relabel) (default 12:3r, the "
                   "default shape of complex128)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peer", action="store_true", help="also time cuStateVec applyMatrix on greedy 5-qubit blocks")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    for cname in args.circuits.split(","):
        if cname not in CIRCUITS:
            raise SystemExit(f"--circuits: unknown {cname!r}; known: {', '.join(CIRCUITS)}")
    import cupy as cp  # noqa: PLC0415

    peer = None
    if args.peer:
        from benchmarks.custatevec import CuStateVec  # noqa: PLC0415

        peer = CuStateVec()

    n = args.qubits
    configs = [tuple(int(x) for x in c.rstrip("rswn").split(":")) + ((DEFAULT_SEEDS,) if c.count(":") == 1 else ())
               + ("r" in c, "s" not in c, "w" in c, "n" not in c) for c in args.configs.split(",")]
    rows = []
    peaks = measure_peaks(cp, args.repeats)
    print("peaks (TFLOP/s): " + ", ".join(f"{k} {v * 1e-12:.1f}" for k, v in peaks.items()), flush=True)
    for dname in args.dtypes.split(","):
        dtype = np.dtype(dname)
        state = cp.zeros(1 << n, dtype=dtype)
        floor = best_time(cp, lambda: cp.multiply(state, 1, out=state), args.repeats)
        print(f"{dname}: pass floor (in-place read+write of 2^{n}) {floor * 1e3:.2f} ms", flush=True)
        backend = "native" if dtype == np.complex128 else "native32"
        for cname in args.circuits.split(","):
            circ, desc = circuit(cname, n)
            sim = Simulator(backend, device="gpu", fuse="auto", plan=None)
            ref = sim.run(circ).state.to_numpy()
            t_gate = best_time(cp, lambda: sim.run(circ), args.repeats)
            default = Simulator(device="gpu", precision="double" if dtype == np.complex128 else "single")
            t_default = best_time(cp, lambda: default.run(circ), args.repeats)
            decision = default.stage_decision.to_dict() if default.stage_decision is not None else None
            path = "stages" if decision and decision["use"] else "gates"
            print(f"  {cname}: gate-at-a-time {t_gate * 1e3:.1f} ms, default Simulator() {t_default * 1e3:.1f} ms "
                  f"on {path} ({decision['why'] if decision else 'no stage decision'})", flush=True)
            t_peer = peer_diff = None
            if peer is not None:
                t_peer, peer_diff = time_peer(cp, peer, circ, state, ref, args.repeats)
                print(f"  {cname}: cuStateVec applyMatrix on {PEER_FUSION}-qubit blocks {t_peer * 1e3:.1f} ms "
                      f"(default Simulator() x{t_peer / t_default:.2f} its speed), diff {peer_diff:.1e}", flush=True)
            for big_l, keep, seeds, rotate, pairs, wide, relabel in configs:
                wide = wide and dtype == np.complex64
                compute = program_dtype(dtype, wide)
                pairs = pairs and tensor_core_ops(compute)
                label = f"L={big_l} C={keep} S={seeds} R={rotate:d} P={pairs:d} W={wide:d} B={relabel:d}"
                row = {"circuit": desc, "dtype": dname, "n_qubits": n, "local_qubits": big_l, "keep_low": keep,
                       "seeds": seeds, "rotate_low": rotate, "pairs": pairs, "wide": wide, "relabel": relabel,
                       "gate_at_a_time_s": t_gate, "default_s": t_default, "default_decision": decision,
                       "default_path": path, "peer_fused5_s": t_peer, "peer_max_abs_diff": peer_diff,
                       "pass_floor_s": floor}
                try:
                    t_plan = time.perf_counter()
                    plan = plan_stages(circ, big_l, keep_low=keep, seeds=seeds, rotate_low=rotate)
                    prog = build_program(plan, keep, fuse_qubits=max_dense(compute), block_qubits=block_qubits(compute),
                                         itemsize=compute.itemsize, widen=tensor_core_ops(compute), pairs=pairs,
                                         relabel=relabel)
                    row["plan_s"] = time.perf_counter() - t_plan
                except ValueError as exc:
                    row["error"] = str(exc)
                    rows.append(row)
                    print(f"  {cname} {label}: {exc}", flush=True)
                    continue

                def run():
                    state[:] = 0
                    state[0] = 1
                    run_program(state, prog, wide=wide)

                # state[:] = 0 is one more pass; time it alone and take it off
                t_reset = best_time(cp, lambda: state.fill(0), args.repeats)
                t_stage = best_time(cp, run, args.repeats)
                out = permute_bits(state, n, list(range(n)), list(prog.final_phys), cp)
                out *= np.exp(1j * prog.global_phase)
                diff = float(cp.abs(out - cp.asarray(ref)).max())
                del out
                flops = program_flops(prog, tensor_core_ops(compute))
                row.update({"stages": plan.n_stages, "ops": prog.n_ops, "stage_s": t_stage - t_reset,
                            "max_abs_diff": diff, "passes_equiv": (t_stage - t_reset) / floor, "flops": flops,
                            "arith_floor_s": floor_seconds(flops, peaks, compute.itemsize)})
                rows.append(row)
                print(f"  {cname} {label}: {plan.n_stages} stages, {prog.n_ops} ops, stage "
                      f"{row['stage_s'] * 1e3:.1f} ms vs gate-at-a-time {t_gate * 1e3:.1f} ms "
                      f"(x{t_gate / row['stage_s']:.1f}; {row['passes_equiv']:.1f} passes' worth), diff {diff:.1e}",
                      flush=True)
        state = None  # free it before the next dtype
    print(f"\n{'circuit':30s} {'dtype':10s} {'L:C:S:R:P:W:B':16s} {'stages':>6s} {'ops':>4s} {'stage ms':>9s} "
          f"{'gate ms':>8s} {'default':>8s} {'path':>6s} {'peer':>7s} {'floor':>6s} {'arith':>6s}")
    for r in rows:
        if "error" in r:
            continue
        peer_ms = "-" if r["peer_fused5_s"] is None else f"{r['peer_fused5_s'] * 1e3:.1f}"
        print(f"{r['circuit'][:30]:30s} {r['dtype']:10s} {r['local_qubits']}:{r['keep_low']}:{r['seeds']}:"
              f"{r['rotate_low']:d}:{r['pairs']:d}:{r.get('wide', False):d}:{r.get('relabel', True):<3d} "
              f"{r['stages']:6d} "
              f"{r['ops']:4d} {r['stage_s'] * 1e3:9.1f} {r['gate_at_a_time_s'] * 1e3:8.1f} {r['default_s'] * 1e3:8.1f} "
              f"{r['default_path']:>6s} {peer_ms:>7s} "
              f"{r['pass_floor_s'] * 1e3:6.2f} {r['arith_floor_s'] * 1e3:6.1f}")
    if args.json:
        import cupy  # noqa: PLC0415

        dev = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        write_results(args.json, {"device": dev, "cupy": cupy.__version__, "rows": rows, "peak_flops": peaks,
                                  "max_dense": {d: max_dense(d) for d in args.dtypes.split(",")}},
                      module="benchmarks.bench.stages_gpu", argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
