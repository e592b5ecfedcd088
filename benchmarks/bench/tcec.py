"""Speed of the error-corrected TF32/FP16 methods against native CGEMM/SGEMM (cuBLAS), on the GPU.

Cases: a 28-qubit complex64 gate at d = 8, 10, 11 (bottom orientation ``S @ U.T``, and the top
orientation ``U @ S`` at d = 10), and square 8192 SGEMM and CGEMM. Every result is checked against
a complex128 product of a slice of rows before it is timed. Times: CUDA events around the whole
call, after a warm-up, median of repeats; the stages of the method's own report beside them.

    python -m benchmarks.bench.tcec --out results.json [--quick] [--variants]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np

from benchmarks.common import command, write_results

METHODS = ("native32", "tf32tf32", "halfhalf", "tc-auto", "tf32", "fp16", "markidis")


def _cases(quick: bool):
    out = []
    for d in ((10,) if quick else (8, 10, 11)):
        out.append((f"gate28 d={d} bottom", "bottom", 28, d))
    if not quick:
        out.append(("gate28 d=10 top", "top", 28, 10))
    out.append(("sgemm 8192", "square-real", 8192, None))
    out.append(("cgemm 8192", "square-complex", 8192, None))
    return out


def _operands(cp, kind, n, d, rng):
    if kind in ("bottom", "top"):
        dim = 1 << d
        m = 1 << (n - d)
        s = (cp.random.standard_normal((m * dim,), dtype=cp.float32)
             + 1j * cp.random.standard_normal((m * dim,), dtype=cp.float32)).astype(cp.complex64)
        s *= np.float32(2.0 ** (-n / 2) / np.sqrt(2))
        u, _ = np.linalg.qr(rng.standard_normal((dim, dim)) + 1j * rng.standard_normal((dim, dim)))
        u = cp.asarray(u.astype(np.complex64))
        if kind == "bottom":
            return s.reshape(m, dim), u.T
        return u, s.reshape(dim, m)
    if kind == "square-real":
        return (cp.random.uniform(-1, 1, (n, n), dtype=cp.float32), cp.random.uniform(-1, 1, (n, n), dtype=cp.float32))
    a = (cp.random.uniform(-1, 1, (n, n), dtype=cp.float32) + 1j * cp.random.uniform(-1, 1, (n, n), dtype=cp.float32))
    b = (cp.random.uniform(-1, 1, (n, n), dtype=cp.float32) + 1j * cp.random.uniform(-1, 1, (n, n), dtype=cp.float32))
    return a.astype(cp.complex64), b.astype(cp.complex64)


def _check(cp, a, b, c, kind):
    """Relative error of ``c`` on a slice, against a complex128 product."""
    if kind == "top":
        cols = slice(0, 4096)
        ref = a.astype(cp.complex128) @ b[:, cols].astype(cp.complex128)
        got = c[:, cols]
    else:
        rows = slice(0, 512)
        ref = a[rows].astype(cp.complex128 if a.dtype.kind == "c" else cp.float64) @ b.astype(
            cp.complex128 if b.dtype.kind == "c" else cp.float64)
        got = c[rows]
    return float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))


def _time(cp, fn, repeats):
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e))
    return statistics.median(times), times


def run(quick=False, variants=False, repeats=5, methods=METHODS):
    import cupy as cp

    import gemm
    from gemm.tcec import gpu as tcec_gpu

    rng = np.random.default_rng(0)
    rows = []
    for label, kind, n, d in _cases(quick):
        a, b = _operands(cp, kind, n, d, rng)
        flops = (8.0 if a.dtype.kind == "c" else 2.0) * a.shape[0] * a.shape[1] * b.shape[1]
        native_ms = None
        # (method, options, wgmma configurations by mode: gemm.tcec_gpu.WG_CHOICE)
        wg0 = dict(tcec_gpu.WG_CHOICE)
        todo = [(m, {}, wg0) for m in methods]
        if variants and kind == "bottom" and d == 10:
            todo += [("tf32tf32", {"debias": False}, wg0), ("halfhalf", {"debias": False}, wg0),
                     ("tf32tf32", {"ec_product": "fused"}, wg0), ("halfhalf", {"ec_product": "fused"}, wg0)]
            todo += [(m, {"product_kernel": "mma"}, wg0) for m in ("tf32tf32", "halfhalf", "tf32", "fp16")]
            todo += [(m, {"ec_product": "fused", "product_kernel": "mma"}, wg0) for m in ("tf32tf32", "halfhalf")]
            for other, cfg in tcec_gpu.WG_CONFIGS.items():  # each configuration where the width allows
                pair = (None, other) if cfg.bn == 128 else (other, "n128")
                if cfg.parts == 2:  # the fused error-corrected product
                    todo += [(m, {"ec_product": "fused"}, {**wg0, "ec": pair}) for m in ("tf32tf32", "halfhalf")]
                else:
                    wg = {**wg0, "plain": pair, "ec-hybrid": pair}
                    todo += [(m, {}, wg) for m in ("tf32tf32", "halfhalf", "tf32", "fp16")]
        for method, opts, wg in todo:
            tcec_gpu.WG_CHOICE.update(wg)
            changed = [pair for m, pair in wg.items() if pair != wg0[m]]
            label_opts = {**opts, "wgmma": changed[0][0] or changed[0][1]} if changed else opts
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c, rep = gemm.matmul(a, b, method=method, return_report=True, **opts)
                err = _check(cp, a, b, c, kind)
                del c
                ms, all_ms = _time(cp, lambda: gemm.matmul(a, b, method=method, **opts), repeats)
                _, rep = gemm.matmul(a, b, method=method, return_report=True, **opts)
            if method == "native32":
                native_ms = ms
            tcec_gpu.WG_CHOICE.update(wg0)
            row = {"case": label, "method": method, "options": label_opts, "raster_l2_bytes": tcec_gpu.RASTER_L2_BYTES,
                   "ms": ms, "all_ms": all_ms,
                   "tflops": flops / ms / 1e9, "speedup_vs_native": (native_ms / ms) if native_ms else None,
                   "rel_err_slice": err, "stages_ms": rep.stages, "choices": rep.choices,
                   "workspace_bytes": rep.workspace_bytes}
            rows.append(row)
            print(f"{label:22s} {method:9s} {str(label_opts):18s} {ms:9.2f} ms {row['tflops']:7.1f} TFLOP/s "
                  f"x{row['speedup_vs_native'] or 0:5.2f} err {err:.1e} "
                  + " ".join(f"{k}={v:.2f}" for k, v in rep.stages.items()), flush=True)
            cp.get_default_memory_pool().free_all_blocks()
        a = b = None  # free the device memory before the next case
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def compare_tiles():
    """Median time of tf32tf32 and halfhalf on a 28-qubit d=10 gate with each square tile."""
    import cupy as cp

    import gemm
    from gemm.tcec import gpu as tcec_gpu

    rng = np.random.default_rng(0)
    a, b = _operands(cp, "bottom", 28, 10, rng)
    total = {}
    for tile in ("square", "square16"):
        tcec_gpu.SQUARE_TILE = tile
        total[tile] = 0.0
        for method in ("tf32tf32", "halfhalf"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c = gemm.matmul(a, b, method=method)
                err = _check(cp, a, b, c, "bottom")
                del c
                ms, _ = _time(cp, lambda: gemm.matmul(a, b, method=method), 3)
            total[tile] += ms
            print(f"tile {tile:9s} {method:9s} {ms:8.2f} ms err {err:.1e}", flush=True)
    tcec_gpu.SQUARE_TILE = "square"
    return min(total, key=total.get)


def sweep():
    """tf32tf32 and halfhalf on a 28-qubit d=10 gate for each square tile and hi*hi chain length:
    median time, error on a slice, registers of the product kernel."""
    import cupy as cp

    import gemm
    from gemm.tcec import debias as db
    from gemm.tcec import gpu as tcec_gpu

    rng = np.random.default_rng(0)
    a, b = _operands(cp, "bottom", 28, 10, rng)
    rows = []
    old = (tcec_gpu.SQUARE_TILE, db.HH_CHAIN)
    for tile in ("square", "square16", "half2"):
        for chain in (1, 2):
            tcec_gpu.SQUARE_TILE, db.HH_CHAIN = tile, chain
            for method in ("tf32tf32", "halfhalf"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    c, rep = gemm.matmul(a, b, method=method, return_report=True)
                    err = _check(cp, a, b, c, "bottom")
                    del c
                    ms, _ = _time(cp, lambda: gemm.matmul(a, b, method=method), 3)
                    _, rep = gemm.matmul(a, b, method=method, return_report=True)
                fmt = "tf32" if method == "tf32tf32" else "fp16"
                k = tcec_gpu.mma_kernel(cp.cuda.Device().id, fmt, "ec", tile)
                row = {"tile": tile, "chain": chain, "method": method, "ms": ms, "rel_err_slice": err,
                       "product_ms": rep.stages.get("product", 0.0), "regs": getattr(k, "num_regs", -1),
                       "spill_bytes": getattr(k, "local_size_bytes", -1)}
                rows.append(row)
                print(f"sweep {tile:9s} chain={chain} {method:9s} {ms:8.2f} ms product "
                      f"{row['product_ms']:8.2f} err {err:.2e} regs {row['regs']} local {row['spill_bytes']}",
                      flush=True)
                cp.get_default_memory_pool().free_all_blocks()
    tcec_gpu.SQUARE_TILE, db.HH_CHAIN = old
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--variants", action="store_true",
                   help="also time debias=False, ec_product='fused' and product_kernel='mma' at d=10")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--square-tile", default=None, help="tile of large products (gemm.tcec_gpu.TILES)")
    p.add_argument("--compare-tiles", action="store_true", help="time d=10 with each square tile, print the best")
    p.add_argument("--sweep", action="store_true", help="also time d=10 for each square tile and hi*hi chain")
    p.add_argument("--wg-chain", type=int, default=None, help="k-steps per hi*hi product of the wgmma kernel")
    p.add_argument("--wg-wide", default=None, help="wgmma configuration (every mode) where the width allows "
                   "256 columns ('none': the narrow one everywhere)")
    p.add_argument("--raster-l2", default=None,
                   help="comma list of L2 budgets in MB for the tile raster (gemm.tcec_gpu.RASTER_L2_BYTES): "
                        "the cases run once per budget")
    p.add_argument("--wg-narrow", default=None, help="wgmma configuration (every mode) elsewhere (128 columns)")
    args = p.parse_args(argv)
    from gemm.tcec import debias as db
    from gemm.tcec import gpu as tcec_gpu

    if args.compare_tiles:
        best = compare_tiles()
        print(f"best_tile={best}")
        return
    if args.square_tile:
        tcec_gpu.SQUARE_TILE = args.square_tile
    if args.wg_wide or args.wg_narrow:
        for m, (wide, narrow) in list(tcec_gpu.WG_CHOICE.items()):
            tcec_gpu.WG_CHOICE[m] = ((None if args.wg_wide == "none" else args.wg_wide) if args.wg_wide else wide,
                                     args.wg_narrow or narrow)
    if args.wg_chain:
        tcec_gpu.WG_CONFIGS = {k: c._replace(chain=args.wg_chain) for k, c in tcec_gpu.WG_CONFIGS.items()}
    t0 = time.time()
    sweep_rows = sweep() if args.sweep else None
    rows = []
    for mb in (args.raster_l2.split(",") if args.raster_l2 else [None]):
        if mb is not None:
            tcec_gpu.RASTER_L2_BYTES = int(float(mb) * (1 << 20))
            print(f"raster L2 budget {mb} MB", flush=True)
        rows += run(args.quick, args.variants, args.repeats, tuple(args.methods.split(",")))
    given = list(argv or sys.argv[1:])
    if args.out:  # record where the file is committed, not where the run wrote it
        given = [("benchmarks/results/" + os.path.basename(a)) if a == args.out else a for a in given]
    payload = {"command": command(__spec__.name, given),
               "square_tile": tcec_gpu.SQUARE_TILE,
               "timing": "CUDA events around the whole gemm.matmul call, 1 warm-up, median of repeats",
               "hh_chain": db.HH_CHAIN, "wg_configs": {k: c._asdict() for k, c in tcec_gpu.WG_CONFIGS.items()},
               "wg_choice": tcec_gpu.WG_CHOICE, "debias_mode": db.DEBIAS_MODE, "debias_beta": db.debias_beta(),
               "rows": rows, "sweep": sweep_rows, "wall_s": time.time() - t0}
    if args.out:
        write_results(args.out, payload, module=__spec__.name, argv=argv)


if __name__ == "__main__":
    main()
