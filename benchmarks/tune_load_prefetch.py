"""Time the small-gate kernels with each L2 prefetch size on their state loads
(small_gate.LOAD_PREFETCH: PTX ``.L2::64B/128B/256B``, or none), through ``StateVector.apply``'s
default policy, beside cuStateVec's applyMatrix, at placements that reach every kernel.

    python benchmarks/tune_load_prefetch.py --qubits 28 --custatevec --json prefetch.json

Every prefetch size is checked against a dense reference at 16 qubits before anything is timed;
the variants are timed in interleaved rounds (clock drift hits all of them) with the lead-call
clock of bench_apply.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_apply import Clock, random_state, reference_apply  # noqa: E402

import gemm  # noqa: E402
from circuits import haar_unitary  # noqa: E402
from qsim_tc import small_gate  # noqa: E402
from qsim_tc.cli.common import environment  # noqa: E402


def cases(n: int, dtype) -> list[list[int]]:
    """Target lists (any order, as a user passes them) that reach each default kernel: lanes
    (low), lanes through shared memory, direct, lanes with high targets, DMMA and widened DMMA."""
    out = [[0], [2], [13], [n - 1], [0, 1], [1, 3], [13, 14], [0, n - 1], [0, 1, 2], [12, 13, 14], [0, 14, n - 1],
           [0, 1, 2, 3], [12, 13, 14, 15], [n - 4, n - 3, n - 2, n - 1]]
    if np.dtype(dtype) == np.complex128:
        out += [[11, 12, 13, 14, 15], [11, 12, 13, 14, 15, 16]]
    return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--dtype", default="complex128,complex64")
    p.add_argument("--prefetch", default="0,64,128,256", help="L2 prefetch sizes to compare")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--custatevec", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    dev = gemm.resolve_device("gpu")
    xp = dev.xp
    peer = None
    if args.custatevec:
        from custatevec_peer import CuStateVec  # noqa: PLC0415

        peer = CuStateVec()
    sizes = [int(x) for x in args.prefetch.split(",")]
    clock = Clock(xp, args.batch)
    rng = np.random.default_rng(3)
    rows = []
    for dtype in [np.dtype(t) for t in args.dtype.split(",")]:
        st = random_state(args.qubits, dtype, dev, 1)
        small = random_state(16, dtype, dev, 2)
        x_small = small._data.copy()
        tol = 1e-12 if dtype == np.complex128 else 1e-5
        for tg in cases(args.qubits, dtype):
            u = haar_unitary(1 << len(tg), rng).astype(dtype)
            stg = [q if q < 8 else q - args.qubits + 16 if q >= args.qubits - 4 else q - 4 for q in tg]
            ref = reference_apply(x_small, 16, u, stg, xp)
            row = {"dtype": str(dtype), "targets": tg, "ms": {}, "rounds_ms": {}, "err": {}}
            for pf in sizes:  # correctness first, every prefetch size
                small_gate.LOAD_PREFETCH = pf
                small._data = x_small.copy()
                small._layout = type(small._layout)(16)
                info = small.apply(u, stg, check_unitary=False)
                row["err"][str(pf)] = float(xp.abs(small.data() - ref).max())
                row["path_16q"] = info.path
            if max(row["err"].values()) > tol:
                raise SystemExit(f"{dtype} {tg}: error {row['err']} above {tol}")
            labels = [str(pf) for pf in sizes] + (["custatevec"] if peer else [])
            times = {k: [] for k in labels}
            for _ in range(args.rounds):
                for k in labels:
                    if k == "custatevec":
                        fn = lambda: peer.apply_matrix(st._data, args.qubits, u, tg)  # noqa: E731
                    else:
                        small_gate.LOAD_PREFETCH = int(k)
                        fn = lambda: st.apply(u, tg, check_unitary=False)  # noqa: E731
                    fn()  # compile, and settle the layout
                    times[k] += clock.time(fn, args.repeats)
            small_gate.LOAD_PREFETCH = 0
            row["path"] = st.apply(u, tg, check_unitary=False).path
            for k in labels:
                row["ms"][k] = float(np.median(times[k]))
                row["rounds_ms"][k] = times[k]
            rows.append(row)
            cs = row["ms"].get("custatevec")
            print(f"{dtype} {str(tg):24s} {row['path']:12s} " + " ".join(
                f"{k}:{v:.3f}" + (f"(x{cs / v:.3f})" if cs and k != "custatevec" else "") for k, v in row["ms"].items()),
                flush=True)
        st = small = None  # free the state before the next precision
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(sys.argv), "environment": environment(),
                                               "qubits": args.qubits, "rounds": args.rounds, "repeats": args.repeats,
                                               "batch": args.batch, "clock": "lead call, then batch calls between events",
                                               "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
