"""Qiskit-circuit benchmark: quantum volume and QFT through qsim-tc, beside Qiskit Aer on the CPU.

Modes:

  cpu    N-qubit quantum_volume (default 24) with qsim-tc (fuse="auto" and any --fuse d) and with
         Qiskit Aer's statevector method (its default fusion), the same circuit in the same run;
         the final states are compared before any time is reported.

            python -m benchmarks.bench.qiskit_circuits cpu --qubits 24 --json benchmarks/results/qiskit_cpu.json

  gpu    quantum_volume and QFT (after H on every qubit) at --qubits (default 28 30) for every
         registered backend (gemm.methods(), or --backends), fuse="auto", on --device (gpu).
         Each result is checked against the first backend's state of the same run on 65536
         sampled amplitudes (max abs error; the norm is recorded too); speed is also given as a
         ratio to native. A run that would overrun --budget-s (guess: x4 per 2 qubits) is
         skipped and listed. Needs no qiskit-aer. The circuits come from qiskit when it imports
         (qiskit is carried to the GPU machine as wheels in .whl/:
         pip install --no-index --find-links .whl qiskit), else from an equivalent built-in
         generator (Haar SU(4) on random pairs, n layers; H + controlled phases + swaps); each
         row says which.

            export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
            pip install --no-index --find-links .whl qiskit     # optional, see above
            python -m benchmarks.bench.qiskit_circuits gpu --qubits 28 30 --json $OUT/qiskit_gpu.json

  costs  per-gate time of d-qubit Haar gates on random qubit sets for d = 1..--max-d through the
         engine, for each --backends entry on --device; prints rows in circuits/gate_costs.py
         syntax, to paste into that table.

            python -m benchmarks.bench.qiskit_circuits costs --device gpu --qubits 28 --backends native native32

Every result file records the device, library versions and the command line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import gemm
from benchmarks.common import write_results
from circuits import Circuit, Gate, haar_unitary
from circuits.fusion import fuse
from qsim_tc import Simulator, StateVector
from qsim_tc.environment import environment
from qsim_tc.plan import choose_fusion as choose

# --- circuits ------------------------------------------------------------------------------


def qiskit_available() -> bool:
    try:
        import qiskit  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def qv_circuit(n: int, seed: int):
    """(Circuit, source): Qiskit's quantum_volume(n, seed=seed), or the built-in equivalent."""
    if qiskit_available():
        from qiskit.circuit.library import quantum_volume  # noqa: PLC0415

        from circuits import from_qiskit  # noqa: PLC0415

        return from_qiskit(quantum_volume(n, seed=seed)), "qiskit.circuit.library.quantum_volume"
    rng = np.random.default_rng(seed)
    c = Circuit(n, name=f"qv{n}")
    for _ in range(n):
        perm = rng.permutation(n)
        for k in range(n // 2):
            c.append(Gate(haar_unitary(4, rng), (int(perm[2 * k]), int(perm[2 * k + 1])), "su4", check_unitary=False))
    return c, "built-in (Haar SU(4) on random pairs, n layers)"


def qft_circuit(n: int):
    """(Circuit, source): Qiskit's full QFT synthesis (H, CP, swaps), or the built-in equivalent."""
    if qiskit_available():
        from qiskit.synthesis import synth_qft_full  # noqa: PLC0415

        from circuits import from_qiskit  # noqa: PLC0415

        # a superposition input, so the QFT does not act on a basis state only
        qc = synth_qft_full(n)
        return from_qiskit(qc), "qiskit.synthesis.synth_qft_full"
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    c = Circuit(n, name=f"qft{n}")
    for j in reversed(range(n)):
        c.append(Gate(h, (j,), "h", check_unitary=False))
        for k in reversed(range(j)):
            lam = np.pi / 2 ** (j - k)
            c.append(Gate(np.diag([1, 1, 1, np.exp(1j * lam)]), (j, k), "cp", check_unitary=False))
    sw = np.eye(4)[[0, 2, 1, 3]]
    for k in range(n // 2):
        c.append(Gate(sw, (k, n - 1 - k), "swap", check_unitary=False))
    return c, "built-in (H, CP, swaps)"


def prepend_hadamards(c: Circuit) -> Circuit:
    """H on every qubit first, so a QFT starts from a state with all amplitudes nonzero."""
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    pre = [Gate(h, (q,), "h", check_unitary=False) for q in range(c.n_qubits)]
    return Circuit(c.n_qubits, pre + c.gates, global_phase=c.global_phase, name=c.name)


# --- timing ----------------------------------------------------------------------------------


def run_qsim(circ: Circuit, backend: str, device: str, fuse_opt):
    """Simulate once; return (result, seconds to fuse, seconds to simulate, fusion info)."""
    sim = Simulator(backend, device=device)
    t0 = time.perf_counter()
    info = {"fuse": fuse_opt}
    if fuse_opt == "auto":
        ch = choose(circ, backend, sim.device.name, str(np.dtype(sim.dtype)))
        info.update(ch.to_dict())
        fused = circ if ch.max_qubits is None else fuse(circ, ch.max_qubits, min_qubits=ch.min_qubits)
    elif fuse_opt is None:
        fused = circ
    else:
        fused = fuse(circ, int(fuse_opt))
    t_fuse = time.perf_counter() - t0
    info["gates_after_fusion"] = len(fused)
    t0 = time.perf_counter()
    res = sim.run(fused)
    gemm.device.synchronize(sim.device.xp)
    t_sim = time.perf_counter() - t0
    by_path: dict = {}
    for st in res.stats:
        by_path[st.info.path] = by_path.get(st.info.path, 0.0) + st.info.time_ms
    info["ms_by_path"] = {k: round(v, 1) for k, v in sorted(by_path.items())}
    # where the time goes: the GEMM stages the methods report, and the rest (permutations, kernels)
    stages: dict = {}
    for st in res.stats:
        rep = st.info.report
        for k, v in (rep.to_dict().get("stages_ms", {}) if rep is not None else {}).items():
            stages[k] = stages.get(k, 0.0) + v
    info["gemm_stages_ms"] = {k: round(v, 1) for k, v in stages.items()}
    # (None for a GPU stage run: its stages are not timed one by one)
    info["outside_gemm_ms"] = None if res.gate_time_ms is None else round(res.gate_time_ms - sum(stages.values()), 1)
    return res, t_fuse, t_sim, info


def aer_statevector(circ_qiskit):
    """(state as numpy, seconds, Aer's own time_taken and fusion metadata)."""
    from qiskit_aer import AerSimulator  # noqa: PLC0415

    qc = circ_qiskit.copy()
    qc.save_statevector()
    sim = AerSimulator(method="statevector")
    t0 = time.perf_counter()
    res = sim.run(qc).result()
    dt = time.perf_counter() - t0
    r = res.results[0]
    return np.asarray(res.get_statevector()), dt, {"time_taken": r.time_taken, "fusion": r.metadata.get("fusion")}


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    """Max amplitude error and infidelity of a against b (both host arrays)."""
    fid = abs(np.vdot(b, a)) ** 2 / (np.vdot(a, a).real * np.vdot(b, b).real)
    return {"max_abs_error": float(np.abs(a - b).max()), "infidelity": float(max(0.0, 1.0 - fid))}


# --- modes ---------------------------------------------------------------------------------


def mode_cpu(args) -> dict:
    from qiskit.circuit.library import quantum_volume  # noqa: PLC0415

    from circuits import from_qiskit  # noqa: PLC0415

    n = args.qubits[0]
    qc = quantum_volume(n, seed=args.seed)
    t0 = time.perf_counter()
    circ = from_qiskit(qc)
    t_import = time.perf_counter() - t0
    print(f"quantum_volume({n}, seed={args.seed}): {len(circ)} gates, import {t_import:.2f} s", flush=True)
    options = ["auto"] + [int(x) for x in args.fuse]
    runs: dict = {"aer": []} | {f: [] for f in options}
    infos: dict = {}
    # interleaved repeats: on a shared machine the best of several runs is the comparable figure
    for rep in range(args.cpu_repeats):
        ref, t_aer, aer_meta = aer_statevector(qc)
        runs["aer"].append(t_aer)
        infos["aer"] = aer_meta
        print(f"[{rep}] aer statevector: {t_aer:.2f} s (its time_taken {aer_meta['time_taken']:.2f} s)", flush=True)
        for f in options:
            res, t_fuse, t_sim, info = run_qsim(circ, "native", "cpu", f)
            err = compare(res.state.to_numpy(), ref)
            del res
            if err["max_abs_error"] > 1e-10:
                raise SystemExit(f"qsim-tc and Aer disagree: {err}")
            total = t_import + t_fuse + t_sim
            runs[f].append(total)
            infos[f] = info | {"vs_aer": err, "import_s": t_import, "fuse_s": t_fuse}
            print(f"[{rep}] qsim-tc native fuse={f}: {total:.2f} s (fuse {t_fuse:.2f}, simulate {t_sim:.2f}), "
                  f"{info['gates_after_fusion']} gates (d={info.get('max_qubits', f)}, "
                  f"min {info.get('min_qubits', 1)}); "
                  f"ms by path {info['ms_by_path']}, in GEMM stages {info['gemm_stages_ms']}, outside "
                  f"{info['outside_gemm_ms']}; vs aer max err {err['max_abs_error']:.1e}", flush=True)
    rows = []
    best_aer = min(runs["aer"])
    for key, times in runs.items():
        name = "qiskit-aer statevector (default fusion)" if key == "aer" else f"qsim-tc native fuse={key}"
        rows.append({"simulator": name, "seconds_all": times, "seconds_best": min(times),
                     "seconds_median": float(np.median(times)), "best_vs_aer": min(times) / best_aer, **infos[key]})
    print(f"\n{'simulator':42s}{'best s':>9s}{'median s':>10s}{'/ aer':>8s}")
    for r in rows:
        print(f"{r['simulator']:42s}{r['seconds_best']:9.2f}{r['seconds_median']:10.2f}{r['best_vs_aer']:8.2f}")
    return {"circuit": f"quantum_volume({n}, seed={args.seed})", "n_qubits": n, "n_gates": len(circ),
            "repeats": args.cpu_repeats, "rows": rows}


def _free_pool(xp) -> None:
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


def mode_gpu(args) -> dict:
    device = gemm.resolve_device(args.device)
    backends = args.backends or gemm.methods()
    rows = []
    t_start = time.perf_counter()
    sample_rng = np.random.default_rng(12345)
    last_time: dict = {}  # (circuit, backend) -> seconds at the previous size
    for n in args.qubits:
        idx = np.sort(sample_rng.choice(1 << n, size=min(1 << n, 1 << 16), replace=False))
        for kind in args.circuits:
            circ, source = qv_circuit(n, args.seed) if kind == "qv" else qft_circuit(n)
            if kind == "qft":
                circ = prepend_hadamards(circ)
            ref = None
            for b in backends:
                base = {"circuit": kind, "source": source, "n_qubits": n, "n_gates": len(circ), "backend": b}
                left = args.budget_s - (time.perf_counter() - t_start)
                guess = 4.0 ** (n - last_time[(kind, b)][0]) * last_time[(kind, b)][1] if (kind, b) in last_time else 0
                if left <= 0 or guess > left:
                    rows.append(base | {"error": f"skipped: {left:.0f} s of --budget-s left, expected {guess:.0f} s"})
                    print(f"{kind} {n} {b}: skipped (budget)", flush=True)
                    continue
                try:
                    method = gemm.get_method(b)
                    small, _ = qv_circuit(12, 0)
                    run_qsim(small, b, device, "auto")  # warm-up: kernels, handles
                    best = None
                    for _ in range(args.gpu_repeats):
                        res, t_fuse, t_sim, info = run_qsim(circ, b, device, args.fuse_mode)
                        if best is None or t_sim < best[2]:
                            best = (None, t_fuse, t_sim, info)
                        vals = res.state.data()[device.xp.asarray(idx)]
                        vals = vals.get() if device.is_gpu else vals
                        norm = res.state.norm()
                        gate_ms = res.gate_time_ms
                        del res
                        _free_pool(device.xp)
                except Exception as exc:  # noqa: BLE001 - report and go on with the other backends
                    rows.append(base | {"error": f"{type(exc).__name__}: {exc}"})
                    print(f"{kind} {n} {b}: {type(exc).__name__}: {exc}", flush=True)
                    _free_pool(device.xp)
                    continue
                _, t_fuse, t_sim, info = best
                last_time[(kind, b)] = (n, t_sim)
                row = base | {"precision": method.precision, "device": device.name, "fuse_s": t_fuse,
                              "simulate_s": t_sim, "gate_time_ms": gate_ms, "norm": norm, "fusion": info}
                if ref is None:
                    ref = (b, vals.astype(np.complex128))
                else:
                    err = float(np.abs(vals.astype(np.complex128) - ref[1]).max())
                    row["vs_first"] = {"backend": ref[0], "amplitudes_compared": int(idx.size),
                                       "max_abs_error": err, "max_abs_error_over_mean_amplitude": err * 2 ** (n / 2)}
                rows.append(row)
                print(f"{kind} {n} {b}: simulate {t_sim:.3f} s, fuse {t_fuse:.2f} s, "
                      f"{info['gates_after_fusion']} gates (d={info.get('max_qubits', args.fuse_mode)}), "
                      f"norm {norm:.12f} {row.get('vs_first', '')}", flush=True)
    return {"rows": rows}


def mode_costs(args) -> dict:
    backends = args.backends or ["native"]
    n = args.qubits[0]
    dev = gemm.resolve_device(args.device)
    rng = np.random.default_rng(args.seed)
    out = {}
    for b in backends:
        method = gemm.get_method(b)
        ms = {}
        kernel_max_d = 0
        for d in range(1, args.max_d + 1):
            st = StateVector(n, dtype=method.state_dtype, device=dev)
            reps = args.repeats if d <= 8 else max(3, args.repeats // 2)
            gates = [(haar_unitary(1 << d, rng), tuple(int(x) for x in rng.choice(n, d, replace=False)))
                     for _ in range(reps + 2)]
            for m, q in gates[:2]:  # warm-up
                st.apply(m, q, method=b, check_unitary=False)
            times, paths = [], []
            for m, q in gates[2:]:
                gemm.device.synchronize(dev.xp)
                t0 = time.perf_counter()
                info = st.apply(m, q, method=b, check_unitary=False)
                gemm.device.synchronize(dev.xp)
                times.append((time.perf_counter() - t0) * 1e3)
                paths.append(info.path)
            ms[d] = round(float(np.median(times)), 2)
            if paths.count("kernel") * 2 > len(paths):
                kernel_max_d = d
            print(f"{b} d={d}: {ms[d]} ms (median of {reps}); paths {sorted(set(paths))}", flush=True)
        out[b] = ms
        kern = f", kernel_max_d={kernel_max_d}" if kernel_max_d else ""
        row = (f'    CostRow("{dev.name}", "{np.dtype(method.state_dtype)}", "{b}", {n},\n'
               f"            {ms},\n"
               f'            machine="<machine>", source="bench.qiskit_circuits costs, median of {args.repeats}"{kern}),')
        print(row)
    return {"n_qubits": n, "device": dev.name, "ms": out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("cpu", "gpu", "costs"), help="what to measure (see above)")
    p.add_argument("--qubits", type=int, nargs="+", default=None,
                   help="sizes (cpu: 24; gpu: 28 30; costs: 22 on the CPU, 28 on the GPU)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fuse", nargs="*", default=[], help="cpu: fixed fusion widths to time beside 'auto'")
    p.add_argument("--fuse-mode", default="auto", help="gpu: 'auto' or an int d")
    p.add_argument("--circuits", nargs="+", default=["qv", "qft"], choices=("qv", "qft"), help="gpu: circuits")
    p.add_argument("--backends", nargs="+", default=None, help="gpu/costs: methods (default: all registered)")
    p.add_argument("--device", default="gpu", choices=("auto", "cpu", "gpu"), help="gpu/costs: device")
    p.add_argument("--gpu-repeats", type=int, default=1, help="gpu: runs per backend and circuit (best kept)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="gpu: start no run that would end after this many seconds (x4 per 2 qubits guess)")
    p.add_argument("--cpu-repeats", type=int, default=3, help="cpu: interleaved repeats (best and median reported)")
    p.add_argument("--max-d", type=int, default=10, help="costs: widest gate")
    p.add_argument("--repeats", type=int, default=8, help="costs: gates timed per width")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args(argv)
    if args.qubits is None:
        args.qubits = {"cpu": [24], "gpu": [28, 30]}.get(args.mode, [22 if args.device == "cpu" else 28])
    if args.fuse_mode != "auto":
        args.fuse_mode = int(args.fuse_mode)
    env = environment()
    env["cpu_count"] = __import__("os").cpu_count()
    for mod in ("qiskit", "qiskit_aer"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = None
    t0 = time.perf_counter()
    result = {"cpu": mode_cpu, "gpu": mode_gpu, "costs": mode_costs}[args.mode](args)
    payload = {"mode": args.mode, "environment": env, "wall_s": time.perf_counter() - t0, **result}
    if args.mode == "gpu":
        print(f"\n{'circuit':8s}{'n':>4s} {'backend':11s}{'simulate s':>11s}{'x native':>9s}{'fuse s':>8s}"
              f"{'gates':>7s}  max err vs first (sampled, / mean |amp|)")
        native = {(r["circuit"], r["n_qubits"]): r["simulate_s"] for r in result["rows"]
                  if r["backend"] == "native" and "simulate_s" in r}
        for r in result["rows"]:
            if "error" in r:
                print(f"{r['circuit']:8s}{r['n_qubits']:4d} {r['backend']:11s} {r['error'][:70]}")
                continue
            nat = native.get((r["circuit"], r["n_qubits"]))
            ratio = f"{r['simulate_s'] / nat:9.2f}" if nat else f"{'':9s}"
            vs = r.get("vs_first")
            vs_s = f"{vs['max_abs_error']:.2e} ({vs['max_abs_error_over_mean_amplitude']:.1e})" if vs else ""
            print(f"{r['circuit']:8s}{r['n_qubits']:4d} {r['backend']:11s}{r['simulate_s']:11.3f}{ratio}"
                  f"{r['fuse_s']:8.2f}{r['fusion']['gates_after_fusion']:7d}  {vs_s}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_results(args.json, payload, module=__spec__.name, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
