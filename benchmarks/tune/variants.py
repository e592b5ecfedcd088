"""Time families of small-gate kernel variants beside ``StateVector.apply``'s default policy
and cuStateVec's applyMatrix, at placements that reach every default kernel.

    python -m benchmarks.tune.variants --family staged --max-d 3 --qubits 28 --custatevec --json staged.json
    python -m benchmarks.tune.variants --family tiled --max-d 4 --qubits 28 --custatevec --json tiled.json

Families:
  tiled     the tiled kernel (apply_small) in each TILED_VARIANTS shape, one pass and persistent;
  staged    the staged kernel (apply_staged) in each STAGED_VARIANTS tile size, d <= 4;
  direct    the direct kernel with each source of the matrix (apply_direct's USRC; coalesced placements);
  dmma      the pipelined DMMA kernel (apply_dmma_pipe) in each DMMA_PIPE_COMPILED shape, complex128
            d = 4..6 at bench.apply's four placements, beside the default DMMA kernel.

Every variant is checked against a dense reference on a state of the timed size before anything is timed; the
variants are timed in interleaved rounds (clock drift hits all of them) with the lead-call clock
of bench/apply.py.
"""

from __future__ import annotations

import argparse

import numpy as np

import gemm
from benchmarks.common import write_results
from benchmarks.gate_timing import Clock, random_state, reference_apply, targets_for
from circuits import haar_unitary
from qsim_tc.engine import small_gate


def cases(n: int, dtype, family: str = "staged") -> list[list[int]]:
    """Target lists (ascending, as the raw kernels take them) that reach each default kernel: staged (a
    target below the coalesced range, low or mixed with high ones), direct, DMMA and tiled; for the
    dmma family, d = 4..6 at bench.apply's placements."""
    if family == "dmma":
        if np.dtype(dtype) != np.complex128:
            return []
        return [targets_for(n, d, pl) for d in (4, 5, 6) for pl in ("bottom", "middle", "top", "mixed")]
    out = [[0], [2], [13], [n - 1], [0, 1], [1, 3], [13, 14], [0, n - 1], [0, 1, 2], [12, 13, 14], [0, 14, n - 1], [0, 1, n - 1], [0, 5, 9],
           [0, 1, 2, 3], [12, 13, 14, 15], [n - 4, n - 3, n - 2, n - 1], [0, 9, 18, n - 1], [0, 1, n - 2, n - 1]]
    if np.dtype(dtype) == np.complex128:
        out += [[11, 12, 13, 14, 15], [11, 12, 13, 14, 15, 16]]
    return out


def variants(family: str, dtype, d: int) -> list:
    """(label, call) pairs; call(sv, u, targets) applies u to the StateVector sv (identity layout
    for the raw kernels: they take physical positions, ascending, as ``targets`` are)."""
    out = []
    method = "native" if np.dtype(dtype) == np.complex128 else "native32"
    out.append(("engine", lambda sv, u, tg: sv.apply(u, tg, check_unitary=False, method=method)))
    if family == "direct":
        for usrc, name in enumerate(("immediate", "indexed", "shared")):
            out.append((f"direct {name}",
                        lambda sv, u, tg, usrc=usrc: small_gate.apply_direct_gpu(sv._data, sv.n_qubits, u, tg, usrc)))
        return out
    if family == "dmma":
        if d == 4:  # apply_dmma's d = 4 kernel in its default launch (one pass) and on persistent grids
            for per_sm in (small_gate.ONE_PASS, 4, 8, 16):
                cfg = small_gate.DMMA_CONFIG[d]._replace(blocks_per_sm=per_sm)
                out.append(("dmma one-pass" if per_sm == small_gate.ONE_PASS else f"dmma x{per_sm}",
                            lambda sv, u, tg, cfg=cfg: small_gate.apply_dmma_gpu(sv._data, sv.n_qubits, u, tg, cfg)))
        for v in small_gate.DMMA_PIPE_COMPILED:
            if v[0] != d:
                continue
            for per_sm in (1, 2):
                cfg = small_gate.DmmaPipeConfig(*v[1:], blocks_per_sm=per_sm)
                if per_sm * small_gate.dmma_pipe_shared_bytes(d, cfg) > 227 * 1024:
                    continue
                label = "pipe k{} w{} c{} nt{} s{} x{}".format(*v[1:6], per_sm)
                out.append((label, lambda sv, u, tg, cfg=cfg: small_gate.apply_dmma_pipe_gpu(sv._data, sv.n_qubits, u, tg,
                                                                                               cfg)))
        return out
    if family == "staged":
        for log_t in small_gate.STAGED_VARIANTS.get(d, ()):
            cfg = small_gate.StagedConfig(log_t)
            out.append((f"staged t{log_t}",
                        lambda sv, u, tg, cfg=cfg: small_gate.apply_staged_gpu(sv._data, sv.n_qubits, u, tg, cfg)))
        return out
    real = "double" if np.dtype(dtype) == np.complex128 else "float"
    for log_g, rows in small_gate.TILED_VARIANTS.get((real, d), ()):
        for per_sm in (small_gate.ONE_PASS, 16):
            cfg = small_gate.TiledConfig(log_g, rows, per_sm)
            label = f"tiled g{log_g} r{rows} {'one-pass' if per_sm == small_gate.ONE_PASS else f'x{per_sm}'}"
            out.append((label, lambda sv, u, tg, cfg=cfg: small_gate.apply_tiled_gpu(sv._data, sv.n_qubits, u, tg, cfg)))
    return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--family", choices=("tiled", "staged", "direct", "dmma"), default="staged")
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--dtype", default="complex128,complex64")
    p.add_argument("--min-d", type=int, default=1, help="skip cases of fewer targets")
    p.add_argument("--max-d", type=int, default=6, help="skip cases of more targets")
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
        from benchmarks.custatevec import CuStateVec  # noqa: PLC0415

        peer = CuStateVec()
    clock = Clock(xp, args.batch)
    rng = np.random.default_rng(3)
    rows = []
    for dtype in [np.dtype(t) for t in args.dtype.split(",")]:
        st = random_state(args.qubits, dtype, dev, 1)
        check = random_state(args.qubits, dtype, dev, 2)  # the correctness runs' state
        x_check = check._data.copy()
        tol = 1e-12 if dtype == np.complex128 else 1e-5
        for tg in [c for c in cases(args.qubits, dtype, args.family) if args.min_d <= len(c) <= args.max_d]:
            if args.family == "direct" and not (small_gate.coalesced(tg, dtype.itemsize)
                                                and (small_gate.real_type(dtype.itemsize), len(tg)) in small_gate.DIRECT):
                continue
            u = haar_unitary(1 << len(tg), rng).astype(dtype)
            ref = reference_apply(x_check, args.qubits, u, tg, xp)  # at the timed size, the same placement
            vs = variants(args.family, dtype, len(tg))
            row = {"dtype": str(dtype), "targets": tg, "ms": {}, "rounds_ms": {}, "err": {}}
            for label, call in vs:  # correctness first, every variant
                check._data = x_check.copy()
                check._layout = type(check._layout)(args.qubits)
                call(check, u, tg)
                row["err"][label] = float(xp.abs(check.data() - ref).max())
            method = "native" if dtype == np.complex128 else "native32"
            if max(row["err"].values()) > tol:
                raise SystemExit(f"{dtype} {tg}: error {row['err']} above {tol}")
            timed = list(vs) + ([("custatevec", lambda sv, u, tg: peer.apply_matrix(sv._data, sv.n_qubits, u, tg))]
                                if peer else [])
            times = {label: [] for label, _ in timed}
            for _ in range(args.rounds):
                for label, call in timed:
                    def fn(call=call):
                        call(st, u, tg)
                    fn()  # compile, and settle the layout
                    times[label] += clock.time(fn, args.repeats)
            row["path"] = st.apply(u, tg, check_unitary=False, method=method).path
            for label in times:
                row["ms"][label] = float(np.median(times[label]))
                row["rounds_ms"][label] = times[label]
            rows.append(row)
            cs = row["ms"].get("custatevec")
            print(f"{dtype} {str(tg):24s} {row['path']:12s} " + " ".join(
                f"{k}:{v:.3f}" + (f"(x{cs / v:.3f})" if cs and k != "custatevec" else "") for k, v in row["ms"].items()),
                flush=True)
        st = check = x_check = None  # free the states before the next precision
    if args.json:
        write_results(args.json, {"family": args.family, "qubits": args.qubits, "rounds": args.rounds,
                                               "repeats": args.repeats, "batch": args.batch,
                                               "clock": "lead call, then batch calls between events",
                                               "rows": rows}, module=__spec__.name, argv=argv)


if __name__ == "__main__":
    main()
