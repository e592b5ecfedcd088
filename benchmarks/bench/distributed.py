"""The state over several GPUs (or CPU ranks): time per circuit against one device, swap volume
and exchange bandwidth.

Run under plain python; it starts ``mpiexec -n R`` for each R in --ranks (each in its own
processes, so memory is per run) and prints a table last:

    python -m benchmarks.bench.distributed --ranks 1,2 --qubits 30 --circuits bw4 --depth 10
    python -m benchmarks.bench.distributed --ranks 2 --qubits 33 --circuits bw2,bw4,qft --depth 4 --repeats 1

Per R and circuit (every rank computes; rank 0 reports):

* R = 1: the plain ``Simulator()`` (the one-device baseline) and its amplitudes at 8 indices;
* R >= 2: :func:`qsim_tc.distributed.run_distributed` for each ``--exchange-plan`` (``fewest``:
  the distributed plan; ``stages``: the stage planner's plan as it is), its wall time, the time
  in exchanges, exchanges, swapped bits and bytes each rank sent (checked against the theory:
  1 - 2^-k of a slice for an exchange of k bits), the same 8 amplitudes and the norm; the ratio
  to R = 1 when both ran.
* ``--bandwidth``: one swap of the top local bit (contiguous halves, sent as they are), one of
  bit 0 (every other amplitude: packed pieces) with a global bit, and one all-to-all of bits
  0..g-1 with every global bit, GB/s each rank sent.

A warm-up run of the same circuit at --warmup-qubits compiles the kernels first.
Circuits: ``bwD`` = brickwork(n, D, depth, seed=1), ``qft`` = QFT with H on every qubit first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.common import write_results
from qsim_tc.distributed.launcher import find_mpiexec

MODULE = "benchmarks.bench.distributed"
PROBES = 8  # amplitudes compared between runs


def build_circuit(name: str, n: int, depth: int):
    from benchmarks.bench.capacity import build_circuit as build  # noqa: PLC0415

    return build(name, n, depth, depth)


def _probe_indices(n: int) -> list[int]:
    return [int(i) for i in np.random.default_rng(5).integers(0, 1 << n, PROBES)]


def rank_main(args) -> None:
    """One R: every rank runs this under mpiexec; rank 0 writes one JSON line per circuit."""
    from mpi4py import MPI  # noqa: PLC0415

    from qsim_tc.distributed import abort_on_error, run_distributed  # noqa: PLC0415

    comm = MPI.COMM_WORLD
    rows = []
    with abort_on_error(comm):
        for name in args.circuits.split(","):
            warm = build_circuit(name, args.warmup_qubits, args.depth)
            circ = build_circuit(name, args.qubits, args.depth)
            idx = _probe_indices(args.qubits)
            if comm.Get_size() == 1:
                rows.append(_one_device(args, name, warm, circ, idx))
                continue
            st = run_distributed(warm, comm, device=args.device)
            st.close()
            del st
            for how in args.exchange_plan.split(","):
                times = []
                st = None
                for _ in range(args.repeats):
                    if st is not None:
                        st.close()
                    st = None  # the last run's slice is freed before the next one is allocated
                    comm.Barrier()
                    t0 = time.perf_counter()
                    st = run_distributed(circ, comm, device=args.device, exchange_plan=how)
                    _sync(args.device)
                    comm.Barrier()
                    times.append(time.perf_counter() - t0)
                amps = [st.amplitude(i) for i in idx]
                norm = st.norm()
                row = {"circuit": name, "exchange_plan": how, "ranks": comm.Get_size(), "qubits": args.qubits,
                       "local_qubits": st.local_qubits, "wall_s": min(times), "walls_s": times,
                       "exchanges": comm.gather(st.exchanges), "exchange_bits": list(st.exchange_bits),
                       "swaps": comm.gather(st.swaps), "bytes_sent": comm.gather(st.bytes_sent),
                       "exchange_s": comm.gather(st.exchange_s), "compute_s": comm.gather(st.compute_s),
                       "slice_bytes": st.data.nbytes, "norm": norm, "amplitudes": [[a.real, a.imag] for a in amps]}
                if args.bandwidth:
                    row["bandwidth"] = _bandwidth(st)
                st.close()
                del st
                if comm.Get_rank() == 0:
                    rows.append(row)
    if comm.Get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(rows, f)


def _one_device(args, name, warm, circ, idx) -> dict:
    from qsim_tc import Simulator  # noqa: PLC0415

    sim = Simulator(device=args.device)
    sim.run(warm)
    times = []
    for _ in range(args.repeats):
        res = None
        res = sim.run(circ)
        times.append(res.wall_s)
    st = res.state
    return {"circuit": name, "ranks": 1, "qubits": args.qubits, "wall_s": min(times), "walls_s": times,
            "norm": st.norm(), "amplitudes": [[st.amplitude(i).real, st.amplitude(i).imag] for i in idx],
            "methods": sorted({s.info.method for s in res.stats}), "blocks": len(res.stats)}


def _bandwidth(st) -> dict:
    """GB/s this rank sent in one swap of the top local bit, one of bit 0, and one all-to-all of
    bits 0..g-1 with the g global bits (each done twice, the second timed, so the state ends
    where it was)."""
    out = {}
    g = st.local_qubits  # the lowest global bit: partner = rank ^ 1
    every = [(j, st.local_qubits + j) for j in range(st.n_global)]
    for label, pairs in (("contiguous", [(st.local_qubits - 1, g)]), ("packed", [(0, g)]),
                         (f"alltoall_{len(every)}_bits", every)):
        st.swap_many(pairs)
        t0, b0 = st.exchange_s, st.bytes_sent
        st.swap_many(pairs)
        out[label + "_gbps"] = (st.bytes_sent - b0) / (st.exchange_s - t0) / 1e9
    return out


def _sync(device: str) -> None:
    if device == "gpu":
        import cupy  # noqa: PLC0415

        cupy.cuda.Device().synchronize()


def driver(args, argv) -> int:
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("no mpiexec on PATH: pip install '.[mpi]'")
    results = []
    for r in (int(x) for x in args.ranks.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.json")
            cmd = [mpiexec, "-n", str(r), sys.executable, "-m", MODULE, "--rank-main", "--out", out, *argv]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            if proc.returncode != 0:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                results.append({"ranks": r, "error": proc.stderr[-2000:], "elapsed_s": time.perf_counter() - t0})
                continue
            with open(out) as f:
                results.extend(json.load(f))
    base = {row["circuit"]: row for row in results if row.get("ranks") == 1 and "wall_s" in row}
    for row in results:
        ref = base.get(row.get("circuit"))
        if ref is not None and row["ranks"] > 1:
            row["ratio_to_1"] = row["wall_s"] / ref["wall_s"]
            row["max_amp_diff_vs_1"] = float(np.max(np.abs(np.array(row["amplitudes"]) - np.array(ref["amplitudes"]))))
        if "swaps" in row:  # every rank takes part in every exchange: k bits send (1 - 2^-k) of a slice
            theory = sum(row["slice_bytes"] - (row["slice_bytes"] >> k) for k in row["exchange_bits"])
            row["bytes_theory"] = theory
            row["bytes_as_theory"] = all(b == theory for b in row["bytes_sent"])
    if args.json:
        write_results(args.json, {"rows": results}, module=MODULE, argv=argv)
    print(f"{'circuit':<8}{'plan':>7}{'ranks':>6}{'qubits':>7}{'wall s':>9}{'x 1 dev':>9}{'exch':>5}{'bits':>5}"
          f"{'exch s':>8}{'comp s':>8}{'GB/rank':>9}{'theory':>7}{'norm':>18}{'amp diff':>10}")
    for row in results:
        if "error" in row:
            print(f"{'-':<8}{row['ranks']:>6}  FAILED: {row['error'].strip().splitlines()[-1] if row['error'] else ''}")
            continue
        sw = max(row.get("swaps", [0]))
        n_ex = max(row.get("exchanges", [0]))
        ex = max(row.get("exchange_s", [0.0]))
        cs = max(row.get("compute_s", [0.0]))
        gb = max(row.get("bytes_sent", [0])) / 1e9
        ratio = row.get("ratio_to_1")
        print(f"{row['circuit']:<8}{row.get('exchange_plan', '-'):>7}{row['ranks']:>6}{row['qubits']:>7}"
              f"{row['wall_s']:>9.3f}{'' if ratio is None else f'{ratio:.3f}':>9}{n_ex:>5}{sw:>5}"
              f"{ex:>8.3f}{cs:>8.3f}{gb:>9.2f}"
              f"{str(row.get('bytes_as_theory', '')):>7}{row['norm']:>18.14f}"
              f"{row.get('max_amp_diff_vs_1', float('nan')):>10.1e}")
        if "bandwidth" in row:
            print(f"    swap bandwidth per rank: {row['bandwidth']}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="1,2", help="comma list of rank counts (1 = the plain Simulator)")
    p.add_argument("--qubits", type=int, default=30)
    p.add_argument("--circuits", default="bw4", help="comma list: bwD, qft")
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--device", default="gpu", choices=("cpu", "gpu"))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--exchange-plan", default="fewest",
                   help="comma list of run_distributed's exchange_plan: fewest (default), stages")
    p.add_argument("--warmup-qubits", type=int, default=20)
    p.add_argument("--bandwidth", action="store_true", help="also time single swaps (GB/s per rank)")
    p.add_argument("--timeout", type=float, default=580)
    p.add_argument("--json", default=None)
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank_main:
        rank_main(args)
        return 0
    return driver(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
