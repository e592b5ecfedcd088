"""Time apply() for d = 1..12 at the bottom, middle and top of an N-qubit state, and whole
brickwork circuits; beside cuStateVec's applyMatrix (GPU, when its library is on sys.path) and
Qiskit Aer's statevector method (CPU, when qiskit-aer is installed), in the same run.

    python -m benchmarks.bench.apply --device gpu --qubits 28 --custatevec --json out.json
    python -m benchmarks.bench.apply --device cpu --qubits 24 --d 1-8 --brickwork 24:4:10 --aer

GPU times are CUDA-event medians after a warm-up; CPU times are perf_counter medians. Every
timed apply is first checked against the peer (cuStateVec) or a reference product.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gemm
from benchmarks.common import parse_range, write_results
from benchmarks.gate_timing import Clock, native_for, random_state, reference_apply, targets_for
from circuits import brickwork, haar_unitary
from qsim_tc import Simulator
from qsim_tc.layout import Layout


def bench_gates(args, dev, peer, clock, rows):
    dtype = np.dtype(args.dtype)
    st = random_state(args.qubits, dtype, dev, 1)
    x0 = st._data.copy()
    rng = np.random.default_rng(2)
    for d in parse_range(args.d):
        u = haar_unitary(1 << d, rng)
        for placement in args.placements.split(","):
            tg = targets_for(args.qubits, d, placement)
            row = {"d": d, "placement": placement, "targets": [tg[0], tg[-1]]}

            def reset_layout():
                # timing only: each repeat starts from the identity layout, so a permuting path
                # pays its permutation every time (the amplitudes are scrambled, their cost is not)
                st._layout = Layout(args.qubits)

            # correctness first: one apply from x0 against the peer (or a dense reference)
            st._data = x0.copy()
            reset_layout()
            info = st.apply(u, tg, check_unitary=False, method=native_for(dtype))
            row["path"] = info.path
            ours = st.data()
            if peer is not None:
                ref = x0.copy()
                peer.apply_matrix(ref, args.qubits, u, tg)
            else:
                ref = reference_apply(x0, args.qubits, u, tg, dev.xp)
            err = float(dev.xp.abs(ours - ref).max())
            row["max_abs_diff_vs_ref"] = err
            ok_tol = 1e-12 if dtype == np.complex128 else 1e-5
            row["checked"] = err < ok_tol
            del ref, ours
            # ours and the peer in interleaved rounds: a clock that is still recovering from the
            # reference check (or any drift) hits both alike
            ts, tc = [], []
            sv = st._data
            if peer is not None:
                peer.apply_matrix(sv, args.qubits, u, tg)  # warm-up
            for _ in range(args.rounds):
                ts += clock.time(lambda: st.apply(u, tg, check_unitary=False, method=native_for(dtype)), args.repeats,
                                 before=reset_layout)
                if peer is not None:
                    tc += clock.time(lambda: peer.apply_matrix(sv, args.qubits, u, tg), args.repeats)
            row["ms"] = float(np.median(ts))
            row["rounds_ms"] = ts
            if args.compare_paths:
                alt = alternatives(args, st, u, tg, d, placement, clock, reset_layout)
                row.update(alt)
            for m in args.extra_methods.split(",") if args.extra_methods else []:
                if d >= args.extra_min_d:
                    ts = clock.time(lambda: st.apply(u, tg, check_unitary=False, method=m), args.repeats,
                                    before=reset_layout)
                    row[f"{m}_ms"] = float(np.median(ts))
            if peer is not None:
                row["custatevec_ms"] = float(np.median(tc))
                row["custatevec_rounds_ms"] = tc
                row["ratio_vs_custatevec"] = row["custatevec_ms"] / row["ms"]
            rows.append(row)
            alts = "".join(f"  {k[:-3]} {v:.3f}" for k, v in row.items()
                           if k.endswith("_ms") and k != "custatevec_ms" and "rounds" not in k)
            print(f"d={d:2d} {placement:6s} {info.path:15s} {row['ms']:9.3f} ms{alts}"
                  + (f"  cuStateVec {row['custatevec_ms']:9.3f} ms  x{row['ratio_vs_custatevec']:.2f}"
                     if peer is not None else "") + f"  err {err:.1e}", flush=True)


def alternatives(args, st, u, tg, d, placement, clock, reset_layout) -> dict:
    """Times of the paths the planner did not take: the GEMM for kernel-sized gates, and the
    rotating orientation for bottom targets."""
    import qsim_tc.engine.apply as apply_mod  # noqa: PLC0415
    from qsim_tc.engine import small_gate  # noqa: PLC0415

    out = {}
    if clock.gpu and small_gate.fits(args.qubits, d):
        ts = clock.time(lambda: st.apply(u, tg, check_unitary=False, small_gate_kernel=False, method=native_for(st.dtype)), args.repeats,
                        before=reset_layout)
        out["gemm_ms"] = float(np.median(ts))
        ts = clock.time(lambda: st.apply(u, tg, check_unitary=False, small_gate_kernel=True, method=native_for(st.dtype)), args.repeats,
                        before=reset_layout)
        out["kernel_ms"] = float(np.median(ts))
    if placement == "bottom" and 1 < d < args.qubits:
        dev = "gpu" if clock.gpu else "cpu"
        saved = apply_mod.ROTATE_D[dev]
        apply_mod.ROTATE_D[dev] = frozenset({d})
        try:
            ts = clock.time(lambda: st.apply(u, tg, check_unitary=False, small_gate_kernel=False, method=native_for(st.dtype)), args.repeats,
                            before=reset_layout)
        finally:
            apply_mod.ROTATE_D[dev] = saved
        out["rotate_ms"] = float(np.median(ts))
    return out


def bench_brickwork(args, dev, rows):
    for spec in args.brickwork:
        n, d, depth = (int(x) for x in spec.split(":"))
        circ = brickwork(n, d, depth, seed=7)
        row = {"qubits": n, "d": d, "depth": depth, "gates": len(circ), "backend": "native"}
        sim = Simulator("native", device=dev)
        # warm-up: kernels, handles, plans, and the memory pool's state-sized blocks (the first
        # 28-qubit run of a process paid ~0.1 s of allocation: d = 2 0.387 s cold, 0.281 s warm)
        sim.run(brickwork(n, d, 1, seed=1))
        res = sim.run(circ)
        row["s"] = res.wall_s
        row["paths"] = _count(s.info.path for s in res.stats)
        if args.aer and not dev.is_gpu:
            aer_s, fid = run_aer(circ, res.state)
            row["aer_s"] = aer_s
            row["speedup_vs_aer"] = aer_s / res.wall_s
            row["fidelity_vs_aer"] = fid
        rows.append(row)
        extra = (f"  Aer {row['aer_s']:.3f} s  x{row['speedup_vs_aer']:.2f}  fidelity {row['fidelity_vs_aer']:.15f}"
                 if "aer_s" in row else "")
        print(f"brickwork N={n} d={d} depth={depth} ({len(circ)} gates): {res.wall_s:.3f} s{extra}", flush=True)


def run_aer(circ, state):
    from qiskit import QuantumCircuit  # noqa: PLC0415
    from qiskit.circuit.library import UnitaryGate  # noqa: PLC0415
    from qiskit_aer import AerSimulator  # noqa: PLC0415

    qc = QuantumCircuit(circ.n_qubits)
    for g in circ:
        # a writable copy: qiskit-aer 0.18 misreads read-only matrices (our Gate.matrix is frozen)
        qc.append(UnitaryGate(np.array(g.matrix), check_input=False), list(g.qubits))
    qc.save_statevector()
    sim = AerSimulator(method="statevector")
    t0 = time.perf_counter()
    res = sim.run(qc).result()
    aer_s = time.perf_counter() - t0
    sv = np.asarray(res.get_statevector())
    fid = abs(np.vdot(sv, state.to_numpy())) ** 2
    return aer_s, float(fid)


def _count(items):
    out = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    p.add_argument("--qubits", type=int, default=None, help="N for the per-gate table (default 28 GPU, 22 CPU)")
    p.add_argument("--d", default="1-12", help="gate sizes, e.g. 1-12 or 2,4,6")
    p.add_argument("--placements", default="bottom,middle,top", help="comma list of bottom, middle, top, mixed")
    p.add_argument("--dtype", default="complex128", choices=("complex128", "complex64"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3,
                   help="GPU gates: rounds of `repeats` samples, ours and cuStateVec's interleaved")
    p.add_argument("--batch", type=int, default=4, help="GPU: calls issued back to back per timed sample")
    p.add_argument("--custatevec", action="store_true", help="compare with cuStateVec applyMatrix (GPU)")
    p.add_argument("--aer", action="store_true", help="compare brickwork times with Qiskit Aer (CPU)")
    p.add_argument("--brickwork", action="append", default=[], metavar="N:d:depth")
    p.add_argument("--skip-gates", action="store_true", help="only the brickwork circuits")
    p.add_argument("--compare-paths", action="store_true",
                   help="also time the paths not chosen (GEMM vs kernel for small d, rotating bottom GEMM)")
    p.add_argument("--extra-methods", default="", help="comma list of other GEMM methods to time per gate")
    p.add_argument("--extra-min-d", type=int, default=7, help="time the extra methods from this d on")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    dev = gemm.resolve_device(args.device)
    if args.qubits is None:
        args.qubits = 28 if dev.is_gpu else 22
    clock = Clock(dev.xp, args.batch)
    peer = None
    if args.custatevec and dev.is_gpu:
        from benchmarks.custatevec import CuStateVec  # noqa: PLC0415

        peer = CuStateVec()
    rows, brick = [], []
    print(f"device: {dev.name} ({dev.reason})", flush=True)
    if not args.skip_gates:
        bench_gates(args, dev, peer, clock, rows)
    bench_brickwork(args, dev, brick)
    payload = {"device": dev.name,
               "qubits": args.qubits, "dtype": args.dtype, "repeats": args.repeats, "rounds": args.rounds, "batch": args.batch,
               "gates": rows, "brickwork": brick}
    if args.json:
        payload = write_results(args.json, payload, module=__spec__.name, argv=argv)
    return payload


if __name__ == "__main__":
    main()
