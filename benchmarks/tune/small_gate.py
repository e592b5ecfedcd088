"""Tune the small-gate kernels: time every (kernel, d, groups per thread, grid) variant at N
qubits on the GPU, after checking each against a CPU reference at 16 qubits.

    python -m benchmarks.tune.small_gate --qubits 28 --json tune.json
    python -m benchmarks.tune.small_gate --qubits 28 --d 4,5,6 --only dmma --custatevec --json dmma.json

Grid labels: xN is a persistent grid of N blocks per SM, x1048576 one pass (as many blocks as
work, each thread one pass: small_gate.ONE_PASS; the label is the one earlier results carry).
``--only dmma`` times the DMMA kernel's variants with cuBLAS and cuStateVec beside them. The staged
kernel (targets below the coalesced range) has its own tuner, tune/variants.py --family staged,
and so do the direct kernel's matrix sources (--family direct): the direct variants here read the
matrix from shared memory (USRC 2), the engine's choice for d >= 4 only. Timings here are one call
per CUDA-event pair, without bench.apply's lead call; "rounds_ms" holds one median per round.
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from benchmarks.common import write_results
from circuits import haar_unitary
from qsim_tc import StateVector
from qsim_tc.engine.small_gate import (
    CONFIG,
    DMMA_COMPILED,
    DMMA_CONFIG,
    ONE_PASS,
    DmmaConfig,
    apply_dmma_gpu,
    gate_matrix_arg,
    kernel_source,
    launch_blocks,
    target_args,
    tile_layout,
)

MINBS = (4, 8)  # register caps tried: blocks of 256 threads per SM (ncu: 24% warps active at GPT 4)
def grid_label(per_sm: int) -> str:
    """xN: a persistent grid of N blocks per SM; one pass keeps the label of earlier results (2^20 per SM)."""
    return f"x{1 << 20 if per_sm == ONE_PASS else per_sm}"


def main():
    import cupy as cp

    p = argparse.ArgumentParser()
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json")
    p.add_argument("--d", default="1,2,3,4,5", help="gate sizes to tune")
    p.add_argument("--only", choices=("all", "dmma"), default="all",
                   help="dmma: the DMMA kernel's variants with cuBLAS and cuStateVec beside them")
    p.add_argument("--custatevec", action="store_true", help="time cuStateVec applyMatrix too")
    p.add_argument("--match", help="keep only the variants whose label matches this regular expression")
    p.add_argument("--rounds", type=int, default=1,
                   help="time the whole variant list this many times, interleaved; report the median")
    args = p.parse_args()
    peer = None
    if args.custatevec:
        from benchmarks.custatevec import CuStateVec  # noqa: PLC0415

        peer = CuStateVec()
    code = kernel_source()
    direct = [(t, d, g) for t in ("double", "float") for d in (1, 2, 3, 4, 5) for g in (1, 2, 4)
              if not (d >= 4 and g == 4) and not (d == 5 and g > 1)]
    names = [f"apply_direct<{t}, {d}, {g}, {h}>" for t, d, g in direct for h in ("false", "true")]
    names += [f"apply_direct<{t}, {d}, {g}, false, {mb}>" for t, d, g in direct for mb in MINBS]
    names += [f"apply_small<{t}, {d}, {CONFIG[d][0]}, {CONFIG[d][1]}>" for t in ("double", "float") for d in CONFIG]
    mod = cp.RawModule(code=code, options=("-std=c++17",), name_expressions=names)
    rng = np.random.default_rng(0)

    def run_direct(st, n, u_h, pos, g, per_sm, hint="false", minb=1):
        d = len(pos)
        t = "double" if st.dtype == np.complex128 else "float"
        k = mod.get_function(f"apply_direct<{t}, {d}, {g}, {hint}{'' if minb == 1 else f', {minb}'}>")
        grid = launch_blocks(-(-((1 << n) >> d) // (256 * g)), per_sm)
        k((grid,), (256,), (gate_matrix_arg(u_h, st.dtype), st, np.int64((1 << n) >> d), *target_args(pos, 6)))

    def run_tiled(st, n, u, pos, per_sm):
        d = len(pos)
        t = "double" if st.dtype == np.complex128 else "float"
        log_g, r = CONFIG[d]
        k = mod.get_function(f"apply_small<{t}, {d}, {log_g}, {r}>")
        lay = tile_layout(n, list(pos), st.dtype.itemsize)
        grid = launch_blocks(lay["n_tiles"], per_sm)
        i32 = np.int32
        k((grid,), ((1 << log_g) * ((1 << d) // r),),
          (st, u, np.int64(lay["n_tiles"]), i32(lay["k"]), i32(lay["h"]), *(i32(x) for x in lay["hi_pos"]),
           *(i32(x) for x in lay["tile_pos"]), i32(lay["shift"])))

    def older_kernel_variants(d, dtype, u, u_h, mid, bot):
        real = "double" if dtype == np.complex128 else "float"
        out = []
        for g in (1, 2, 4):
            if f"apply_direct<{real}, {d}, {g}, false>" in names:
                for gm in (4, 8, ONE_PASS):
                    x = grid_label(gm)
                    for hint in ("false", "true"):
                        out.append((f"direct{'-cs' if hint == 'true' else ''} g{g} {x}", mid,
                                    lambda st, nn, pos, g=g, gm=gm, hint=hint: run_direct(st, nn, u_h, pos, g, gm, hint)))
                    out.append((f"direct-bottom g{g} {x}", bot,  # uncoalesced: strided group gathers
                                lambda st, nn, pos, g=g, gm=gm: run_direct(st, nn, u_h, pos, g, gm)))
                    for mb in MINBS:
                        out.append((f"direct g{g} mb{mb} {x}", mid,
                                    lambda st, nn, pos, g=g, gm=gm, mb=mb: run_direct(st, nn, u_h, pos, g, gm,
                                                                                      "false", mb)))
        if d in CONFIG:
            for name, pos in (("tiled-bottom", bot), ("tiled-mid", mid)):
                for gm in (32, ONE_PASS):
                    out.append((f"{name} {grid_label(gm)}", pos,
                                lambda st, nn, pos, gm=gm: run_tiled(st, nn, u, pos, gm)))
        return out

    engines = {}

    def engine_gemm(u_h, kernel=False):
        """The engine's GEMM path (small_gate_kernel=False; None: its default policy) on a state of
        its own per size. A permutation the first call makes stays (the lazy layout), so repeated
        calls time the product alone, as a circuit would see it."""
        c128 = u_h.dtype == np.complex128  # a complex64 matrix is unitary to ~1e-7 only: unchecked

        def fn(st, nn, pos):
            sv = engines.get((nn, st.dtype))
            if sv is None or nn < 20:
                sv = engines[nn, st.dtype] = StateVector(nn, device="gpu", data=st, dtype=st.dtype)
            sv.apply(u_h, pos, method="native" if c128 else "native32", check_unitary=c128, small_gate_kernel=kernel)
            if nn < 20:  # the correctness run: hand the result back
                st[...] = sv.data()
        return fn

    def engine_apply(u_h):
        return engine_gemm(u_h, kernel=None)

    def reference(psi, n, u, pos):
        d = len(pos)
        t = psi.reshape((2,) * n)
        axes = [n - 1 - q for q in reversed(pos)]
        out = np.tensordot(u.reshape((2,) * (2 * d)), t, axes=(list(range(d, 2 * d)), axes))
        return np.moveaxis(out, list(range(d)), axes).reshape(-1)

    def timed(fn, reps):
        fn()
        ts = []
        for _ in range(reps):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(cp.cuda.get_elapsed_time(s, e))
        return float(np.median(ts))

    rows = []
    n = args.qubits
    for dtype in (np.complex128, np.complex64):
        real = np.float64 if dtype == np.complex128 else np.float32
        big = cp.random.RandomState(1).standard_normal(2 << n, dtype=real).view(dtype)
        small_n = 16
        psi = (rng.standard_normal(1 << small_n) + 1j * rng.standard_normal(1 << small_n)).astype(dtype)
        tol = 1e-12 if dtype == np.complex128 else 1e-4
        for d in [int(x) for x in args.d.split(",")]:
            u_h = haar_unitary(1 << d, rng).astype(dtype)
            u = cp.asarray(u_h)
            mid = list(range(12, 12 + d))
            bot = list(range(d))
            variants = []
            if dtype == np.complex128 and d in (4, 5, 6) and args.only in ("all", "dmma"):
                for key in [k[1:] for k in DMMA_COMPILED if k[0] == d]:
                    for th, per_sm in ((128, 8), (256, 4), (256, 16), (256, ONE_PASS)):
                        cfg = DmmaConfig(*key, threads=th, blocks_per_sm=per_sm)
                        label = (f"dmma{('', ' k8', ' k16')[cfg.shape]} nt{cfg.tiles}{' gauss' if cfg.gauss else ''}"
                                 f" mb{cfg.min_blocks}{' pf' if cfg.prefetch else ''} s{cfg.slices} t{th}"
                                 f" {grid_label(per_sm)}")
                        variants.append((label, mid, lambda st, nn, pos, cfg=cfg: apply_dmma_gpu(st, nn, u_h, pos, cfg)))
                variants.append(("cublas (engine, no kernel)", mid, engine_gemm(u_h)))
                if peer is not None:
                    variants.append(("custatevec", mid, lambda st, nn, pos: peer.apply_matrix(st, nn, u_h, pos)))
                # the default DMMA variant against the engine's other paths where targets sit low
                for where, pos in (("bottom", bot), ("mixed", [0, 2, 4, 7, 9, 11][:d]), ("middle", mid),
                                   ("upper", list(range(args.qubits - 3 - d, args.qubits - 3)))):
                    variants.append((f"dmma default {where}", pos,
                                     lambda st, nn, pos: apply_dmma_gpu(st, nn, u_h, pos)))
                    one_pass = DMMA_CONFIG[d]._replace(blocks_per_sm=ONE_PASS)
                    variants.append((f"dmma default one-pass {where}", pos,
                                     lambda st, nn, pos, c=one_pass: apply_dmma_gpu(st, nn, u_h, pos, c)))
                    variants.append((f"engine {where}", pos, engine_apply(u_h)))
                    variants.append((f"cublas {where}", pos, engine_gemm(u_h)))
                    if peer is not None:
                        variants.append((f"custatevec {where}", pos,
                                         lambda st, nn, pos: peer.apply_matrix(st, nn, u_h, pos)))
            if args.only == "all":
                variants += older_kernel_variants(d, dtype, u, u_h, mid, bot)
            if args.match:
                variants = [v for v in variants if re.search(args.match, v[0])]
            errs, times = {}, {name: [] for name, _, _ in variants}
            for name, pos, fn in variants:
                # the same shape of positions at 16 qubits: the top three bits stay on top
                spos = [q - n + small_n if q >= n - 3 else (q - 12 + 3 if q >= 12 else q) for q in pos]
                x = cp.asarray(psi)
                fn(x, small_n, spos)
                errs[name] = float(np.abs(cp.asnumpy(x) - reference(psi, small_n, u_h, spos)).max())
            for _ in range(args.rounds):  # interleaved, so that drifts of the clock hit every variant
                for name, pos, fn in variants:
                    times[name].append(timed(lambda: fn(big, n, pos), args.repeats))
            for name, _, _ in variants:
                ms, err = float(np.median(times[name])), errs[name]
                rows.append({"dtype": str(np.dtype(dtype)), "d": d, "variant": name, "ms": ms, "err": err,
                             "ok": err < tol, "rounds_ms": times[name]})
                print(f"{np.dtype(dtype)} d={d} {name:40s} {ms:8.3f} ms  err {err:.1e}  rounds "
                      + " ".join(f"{t:.3f}" for t in times[name]), flush=True)
    if args.json:
        write_results(args.json, {"qubits": n, "rows": rows}, module=__spec__.name)
    best = {}
    for r in rows:
        if r["ok"]:
            at = r["variant"].split("@")[1] if "@" in r["variant"] else ""  # the placement, where the label names one
            key = (r["dtype"], r["d"], r["variant"].split()[0], at)
            if key not in best or r["ms"] < best[key]["ms"]:
                best[key] = r
    print("\nbest per (dtype, d, kernel):")
    for key in sorted(best):
        print(key, best[key]["variant"], f"{best[key]['ms']:.3f} ms")


if __name__ == "__main__":
    main()
