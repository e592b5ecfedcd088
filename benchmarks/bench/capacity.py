"""Capacity: the bounded-workspace engine against the double-buffer one, and the largest states.

One call does, each run in its own subprocess (so that peak memory is per run):

  compare   at --compare-qubits (GPU default 28, complex128 ``native``): brickwork d = 2, 4, 6, 10
            and QFT with the double-buffer engine and the bounded one in the same process
            order, interleaved; each bounded state is checked against the double-buffer one at
            64 amplitudes and the norm before its time is reported; the ratio bounded / old.
  capacity  the large states: --capacity "32:native,33:native32" on the GPU (complex128 at 32,
            complex64 at 33: both 64 GiB), brickwork d = 2, 4, 10 and QFT, bounded engine only.

Each run records wall time (gates applied, device synchronised), peak memory (CPU: VmHWM,
the resident high-water mark; GPU: cupy's pool high-water mark) and its ratio to the state's
size. A table is printed last.

    python -m benchmarks.bench.capacity                            # the GPU targets of the issue
    python -m benchmarks.bench.capacity --device cpu --compare-qubits 24 --capacity 31:native32 \\
        --capacity-circuits bw2,bw8 --depth 2 --json benchmarks/results/capacity_cpu.json

Circuits: ``bwD`` = brickwork(n, D, depth, seed=1) (--depth; d = 10 uses --depth-large),
``qft`` = QFT with H on every qubit first. Gates are fused as ``Simulator(fuse="auto")`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import write_results

MODULE = "benchmarks.bench.capacity"


def build_circuit(name: str, n: int, depth: int, depth_large: int):
    """A circuit by short name (module docstring)."""
    from circuits import brickwork  # noqa: PLC0415

    if name == "qft":
        from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit  # noqa: PLC0415

        return prepend_hadamards(qft_circuit(n)[0])
    if name.startswith("bw"):
        d = int(name[2:])
        return brickwork(n, d, depth_large if d >= 8 else depth, seed=1)
    raise ValueError(f"circuit must be qft or bwD, got {name!r}")


def peak_rss_bytes() -> int:
    """The process's resident high-water mark (VmHWM; ru_maxrss as a fallback)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_one(args) -> dict:
    """One circuit on one engine, in this process; returns the measurements."""
    import gemm  # noqa: PLC0415
    from qsim_tc import Simulator, StateVector  # noqa: PLC0415

    dev = gemm.resolve_device(args.device)
    sim = Simulator(args.backend, device=dev, fuse=args.fuse)
    circ = sim._fused(build_circuit(args.circuit, args.qubits, args.depth, args.depth_large))
    kw = {"double_buffer": args.engine == "double-buffer"}
    if args.workspace_bytes:
        kw["workspace_bytes"] = args.workspace_bytes
    if args.warmup:
        # one untimed run of the same circuit first: kernel loading, cuBLAS plans and the pool's
        # first allocations would otherwise land in the timed run of whichever engine goes first
        warm = StateVector(args.qubits, dtype=sim.dtype, device=dev, **kw)
        for i, g in enumerate(circ.gates):
            nxt = circ.gates[i + 1].qubits if i + 1 < len(circ.gates) else None
            warm.apply(g.matrix, g.qubits, method=args.backend, check_unitary=False, next_qubits=nxt)
        gemm.device.synchronize(dev.xp)
        del warm
    t_alloc = time.perf_counter()
    st = StateVector(args.qubits, dtype=sim.dtype, device=dev, **kw)
    gemm.device.synchronize(dev.xp)
    alloc_s = time.perf_counter() - t_alloc
    gates = circ.gates
    paths: dict[str, int] = {}
    t0 = time.perf_counter()
    for i, g in enumerate(gates):
        nxt = gates[i + 1].qubits if i + 1 < len(gates) else None
        info = st.apply(g.matrix, g.qubits, method=args.backend, check_unitary=False, next_qubits=nxt)
        paths[info.path] = paths.get(info.path, 0) + 1
    if circ.global_phase:
        st.apply_global_phase(circ.global_phase)
    gemm.device.synchronize(dev.xp)
    gate_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    data = st.data()  # in logical order (the last permutation counts: a user reads the state)
    gemm.device.synchronize(dev.xp)
    read_s = time.perf_counter() - t1
    # indices drawn without building an array of 2^n candidates (that alone is the size of a
    # complex64 state, and choice(replace=False) permutes a copy of it)
    idx = np.r_[0, np.random.default_rng(0).integers(1, 1 << args.qubits, 63)]
    sample = data[dev.xp.asarray(idx)]
    sample = sample.get() if dev.is_gpu else np.asarray(sample)
    out = {"circuit": args.circuit, "qubits": args.qubits, "engine": args.engine, "backend": args.backend,
           "dtype": str(np.dtype(sim.dtype)), "device": dev.name, "gates": len(gates), "paths": paths,
           "workspace_bytes": st.workspace_bytes if args.engine == "bounded" else None,
           "alloc_s": alloc_s, "gate_s": gate_s, "read_s": read_s, "wall_s": gate_s + read_s,
           "state_bytes": st.nbytes, "norm": st.norm(),
           "sample_re": sample.real.tolist(), "sample_im": sample.imag.tolist()}
    if dev.is_gpu:
        import cupy  # noqa: PLC0415

        pool = cupy.get_default_memory_pool()
        out["peak_bytes"] = int(pool.total_bytes())  # the pool keeps what it ever held
        out["gpu_name"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    else:
        out["peak_bytes"] = peak_rss_bytes()
    out["peak_over_state"] = out["peak_bytes"] / out["state_bytes"]
    return out


def spawn(base: list[str], **kw) -> dict:
    """Run one measurement in a fresh interpreter and return its result (or the error)."""
    cmd = [sys.executable, "-m", MODULE, "--one", *base]
    for k, v in kw.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {**kw, "error": " | ".join(tail)}
    return json.loads(lines[-1])


def agree(a: dict, b: dict, tol: float) -> bool:
    """Two runs of one circuit give the same amplitudes at the sampled indices."""
    x = np.array(a["sample_re"]) + 1j * np.array(a["sample_im"])
    y = np.array(b["sample_re"]) + 1j * np.array(b["sample_im"])
    # against the typical amplitude too: a concentrated state (QFT of H|0>) samples mostly
    # rounding noise, which two correct orders of summation need not share
    scale = max(np.abs(y).max(), 2.0 ** (-a["qubits"] / 2))
    return bool(np.abs(x - y).max() <= tol * scale and abs(a["norm"] - b["norm"]) <= tol)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="gpu", choices=["cpu", "gpu"])
    p.add_argument("--compare-qubits", type=int, default=28, help="0: skip the comparison")
    p.add_argument("--compare-backend", default="native")
    p.add_argument("--compare-circuits", default="bw2,bw4,bw6,bw10,qft")
    p.add_argument("--capacity", default="32:native,33:native32",
                   help="QUBITS:BACKEND,... for the bounded engine alone ('' to skip)")
    p.add_argument("--capacity-circuits", default="bw2,bw4,bw10,qft")
    p.add_argument("--depth", type=int, default=10, help="brickwork depth for d < 8")
    p.add_argument("--depth-large", type=int, default=4, help="brickwork depth for d >= 8")
    p.add_argument("--fuse", default="auto", help="as Simulator(fuse=): auto, none or a qubit count")
    p.add_argument("--workspace-bytes", type=int, default=0, help="0: the default bound")
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds of the comparison")
    p.add_argument("--json", default=None)
    # one measurement (used by the subprocesses)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--circuit", help=argparse.SUPPRESS)
    p.add_argument("--qubits", type=int, help=argparse.SUPPRESS)
    p.add_argument("--engine", default="bounded", help=argparse.SUPPRESS)
    p.add_argument("--backend", default="native", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fuse == "none":
        args.fuse = None
    elif args.fuse not in (None, "auto"):
        args.fuse = int(args.fuse)
    if args.one:
        print(json.dumps(run_one(args)))
        return
    base = ["--device", args.device, "--depth", str(args.depth), "--depth-large", str(args.depth_large),
            "--fuse", str(args.fuse if args.fuse is not None else "none"),
            "--workspace-bytes", str(args.workspace_bytes)]
    runs, table = [], []
    if args.compare_qubits:
        for name in args.compare_circuits.split(","):
            pair = {"double-buffer": [], "bounded": []}
            for _ in range(args.repeats):
                for engine in ("double-buffer", "bounded"):
                    r = spawn(base, circuit=name, qubits=args.compare_qubits, engine=engine,
                              backend=args.compare_backend, warmup=1)
                    print(_line(r), flush=True)
                    runs.append(r)
                    pair[engine].append(r)
            old, new = pair["double-buffer"], pair["bounded"]
            if all("error" not in r for r in old + new):
                tol = 1e-10 if new[0]["dtype"] == "complex128" else 1e-4
                ok = all(agree(a, old[0], tol) for a in new)
                t_old = float(np.median([r["wall_s"] for r in old]))
                t_new = float(np.median([r["wall_s"] for r in new]))
                table.append((name, args.compare_qubits, new[0]["dtype"], t_old, t_new, t_new / t_old,
                              old[0]["peak_over_state"], new[0]["peak_over_state"], "agree" if ok else "DIFFER"))
    for spec in filter(None, args.capacity.split(",")):
        n, backend = spec.split(":")
        for name in args.capacity_circuits.split(","):
            r = spawn(base, circuit=name, qubits=int(n), engine="bounded", backend=backend)
            print(_line(r), flush=True)
            runs.append(r)
            if "error" not in r:
                table.append((name, int(n), r["dtype"], None, r["wall_s"], None, None, r["peak_over_state"], "ran"))
            else:
                table.append((name, int(n), backend, None, None, None, None, None, "FAILED: " + r["error"][:80]))
    if args.json:
        write_results(args.json, {"runs": runs, "table": table}, module=MODULE, argv=argv)
    print(f"\n{'circuit':8} {'n':>3} {'dtype':10} {'double-buf s':>12} {'bounded s':>10} {'ratio':>6} "
          f"{'peak/state old':>14} {'peak/state new':>14}  check")
    for name, n, dt, t_old, t_new, ratio, p_old, p_new, check in table:
        def f(x, fmt):
            return format(x, fmt) if x is not None else "-"
        print(f"{name:8} {n:>3} {dt:10} {f(t_old, '12.3f')} {f(t_new, '10.3f')} {f(ratio, '6.2f')} "
              f"{f(p_old, '14.3f')} {f(p_new, '14.3f')}  {check}")


def _line(r: dict) -> str:
    if "error" in r:
        return f"  {r.get('circuit')} n={r.get('qubits')} {r.get('engine')}: ERROR {r['error']}"
    return (f"  {r['circuit']} n={r['qubits']} {r['dtype']} {r['engine']}: {r['wall_s']:.3f} s "
            f"({r['gates']} gates, {r['paths']}), peak {r['peak_bytes'] / 2**30:.2f} GiB = "
            f"{r['peak_over_state']:.3f} x state")


if __name__ == "__main__":
    main()
