"""int8-crt with the reconstruction's word sums on the INT8 tensor cores (``crt_reconstruct_mma``,
``QSIM_TC_CRT_RECONSTRUCT=mma``) against the FP64 reconstruction (``crt_reconstruct_r8``) and
native ZGEMM: bit-identity checks, then stage-by-stage timings at gate shapes.

1. **check** (a child process): the tensor-core reconstruction against the FP64 kernel on random
   INT8 residues (real, 2m, 3m; 2..20 moduli; odd shapes; the extremes -128 and 127); whole
   int8-crt products with ``mma`` against ``fp64`` bit for bit for d = 8, 10, 12 gates (Haar
   and random complex gates, random real ones, the 2m and 3m forms, state rows from 1 to 2^14 + 3
   in both orientations S @ U.T and U @ S^T); and against the CPU path (``gemm.ozaki.crt.cpu``)
   at small sizes.
2. **time** (a child process per d): at ``--qubits`` (default 28) a complex128 state
   ``(2^(n-d), 2^d)`` times ``U.T`` of a Haar-random gate: native ZGEMM, int8-crt with the FP64
   reconstruction and with the tensor-core one (their outputs compared bit for bit at full size,
   and against ZGEMM within the reported bounds), CUDA events, one warm-up, median of
   ``--repeats``; the stages (scale, residues, products, reconstruction) from one more call's
   report, the INT8 TOPS of the products and the share of the time outside them.

Every child runs under a timeout and its failure (a compile error, a crash, a mismatch) is
printed and recorded; the other parts still run. A short table comes last; with ``$OUT`` set the
JSON goes to ``$OUT/crt_fused.json`` (or ``--out``).

Usage (from the repository root)::

    PYTHONPATH=$PWD python -m benchmarks.bench.crt_fused_gpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = ("fp64", "mma")


# ------------------------------------------------------------------------------------------ check


def _check_kernels(cp, rng, out):
    """crt_reconstruct_mma against crt_reconstruct_r8 on random residues."""
    from gemm.ozaki.crt import gpu
    from gemm.ozaki.crt.moduli import Moduli

    for form, n in [(None, 9), (None, 17), ("2m", 2), ("2m", 16), ("2m", 17), ("2m", 20), ("3m", 16), ("3m", 20)]:
        mods = Moduli.first(n, "split" if form == "2m" else "general")
        G = {None: 1, "2m": 2, "3m": 3}[form]
        for rows, cols in [(1, 16), (7, 200), (129, 33), (1000, 1024), (3, 4099)]:
            ld = -(-cols // 16) * 16
            R8 = rng.integers(-128, 128, (n, G, rows, ld), dtype=np.int8)
            R8[..., :4] = -128
            R8[..., 4:8] = 127
            R8 = cp.asarray(R8)
            E_a = cp.asarray(rng.integers(-3, 4, rows).astype(np.int32))
            E_b = cp.asarray(rng.integers(-3, 4, cols).astype(np.int32))
            dtype = np.float64 if form is None else np.complex128
            ref = cp.full((rows, cols), np.nan, dtype=dtype)
            got = cp.full((rows, cols), np.nan, dtype=dtype)
            gpu.reconstruct_r8(cp, R8, mods, form, E_a, E_b, 0, 0, cols, ref)
            gpu.reconstruct_mma(cp, R8, mods, form, E_a, E_b, 0, 0, cols, got)
            ok = bool(cp.array_equal(got, ref))
            out.append({"case": "kernel", "form": form, "moduli": n, "rows": rows, "cols": cols, "equal": ok})
            if not ok:
                print(f"  MISMATCH kernel form={form} n={n} {rows}x{cols}", flush=True)


def _operands(cp, rng, d, M, kind, orient):
    from circuits.haar import haar_unitary

    D = 1 << d
    if kind == "real":
        s = cp.asarray(rng.standard_normal((M, D)))
        u = cp.asarray(rng.standard_normal((D, D)) / np.sqrt(D))
    else:
        s = cp.asarray(rng.standard_normal((M, D)) + 1j * rng.standard_normal((M, D)))
        s /= cp.linalg.norm(s)
        if kind == "haar":
            u = cp.asarray(haar_unitary(D, rng))
        else:
            u = cp.asarray((rng.standard_normal((D, D)) + 1j * rng.standard_normal((D, D))) / np.sqrt(2 * D))
    return (s, u.T) if orient == "bottom" else (u, s.T)


def _with(gpu, kernel, fn):
    old = gpu.RECONSTRUCT
    gpu.RECONSTRUCT = kernel
    try:
        return fn()
    finally:
        gpu.RECONSTRUCT = old


def _check_products(cp, rng, out):
    """Whole int8-crt products: mma against fp64, bit for bit."""
    import gemm
    from gemm.ozaki.crt import gpu

    for d, rows_list in [(8, (1, 37, 4099, 1 << 14)), (10, (1, 1027, 1 << 13)), (12, (3, 1 << 11))]:
        for M in rows_list:
            for kind, form in [("haar", "2m"), ("random", "2m"), ("haar", "3m"), ("real", None)]:
                for orient in ("bottom", "top"):
                    if orient == "top" and M > 4099:
                        continue
                    a, b = _operands(cp, rng, d, M, kind, orient)
                    opts = {} if form is None else {"complex_form": form}
                    c0 = _with(gpu, "fp64", lambda: gemm.matmul(a, b, method="int8-crt", **opts))
                    c1, rep = _with(gpu, "mma", lambda: gemm.matmul(a, b, method="int8-crt", return_report=True,
                                                                   **opts))
                    ok = bool(cp.array_equal(c0, c1)) and rep.choices["reconstruct_kernel"] == "mma"
                    out.append({"case": "product", "d": d, "rows": M, "kind": kind, "form": form, "orient": orient,
                                "moduli": rep.choices["moduli"], "equal": ok})
                    if not ok:
                        print(f"  MISMATCH product d={d} M={M} {kind} {form} {orient}: max |diff| "
                              f"{float(cp.abs(c0 - c1).max())}", flush=True)
                    a = b = c0 = c1 = None  # released before the next size (the lambdas above read a and b)
        cp.get_default_memory_pool().free_all_blocks()


def _check_cpu(cp, rng, out):
    """The GPU with mma against the CPU path (numpy operands) at small sizes."""
    import gemm
    from gemm.ozaki.crt import gpu

    for d, M in [(6, 5), (8, 64), (10, 16)]:
        for kind, form in [("haar", "2m"), ("random", "3m"), ("real", None)]:
            a, b = _operands(cp, rng, d, M, kind, "bottom")
            opts = {} if form is None else {"complex_form": form}
            c_cpu = gemm.matmul(cp.asnumpy(a), cp.asnumpy(b), method="int8-crt", **opts)
            c_gpu = _with(gpu, "mma", lambda: gemm.matmul(a, b, method="int8-crt", **opts))
            ok = bool(np.array_equal(cp.asnumpy(c_gpu), c_cpu))
            out.append({"case": "cpu", "d": d, "rows": M, "kind": kind, "form": form, "equal": ok})
            if not ok:
                print(f"  MISMATCH against the CPU d={d} M={M} {kind} {form}", flush=True)


def child_check(path):
    import cupy as cp

    rng = np.random.default_rng(48)
    res = {"cases": [], "errors": []}
    for name, fn in (("kernels", _check_kernels), ("products", _check_products), ("cpu", _check_cpu)):
        t0 = time.time()
        try:
            fn(cp, rng, res["cases"])
        except Exception as e:  # noqa: BLE001 - recorded, the other checks still run
            res["errors"].append(f"{name}: {type(e).__name__}: {e}"[-2000:])
            print(f"  check {name} FAILED: {type(e).__name__}: {str(e)[-1500:]}", flush=True)
            traceback.print_exc()
        print(f"  check {name}: {time.time() - t0:.1f} s", flush=True)
        # written after every part: a child stopped by its timeout leaves what it had checked
        res["done"] = res.get("done", []) + [name]
        res["all_equal"] = not res["errors"] and all(c["equal"] for c in res["cases"]) and len(res["done"]) == 3
        res["n_cases"] = len(res["cases"])
        with open(path, "w") as f:
            json.dump(res, f)


# ------------------------------------------------------------------------------------------- time


def child_time(path, n, d, repeats):
    import cupy as cp

    import gemm
    from benchmarks.bench.crt import _check
    from benchmarks.gate_timing import event_times
    from circuits.haar import haar_unitary
    from gemm.ozaki.crt import gpu

    rng = np.random.default_rng(2026 + d)
    D, M = 1 << d, 1 << (n - d)
    u = cp.asarray(haar_unitary(D, rng))
    state = (cp.random.standard_normal((M, D)) + 1j * cp.random.standard_normal((M, D))).astype(cp.complex128)
    state /= cp.linalg.norm(state)
    a, b = state, u.T
    rows = []
    native_ms, native_all = event_times(cp, lambda: gemm.matmul(a, b, method="native"), repeats)
    cupy_ms, _ = event_times(cp, lambda: cp.matmul(a, b), repeats)
    zgemm = min(native_ms, cupy_ms)
    rows.append({"d": d, "method": "zgemm", "median_ms": zgemm, "native_ms": native_ms, "cupy_ms": cupy_ms,
                 "times_ms": native_all})
    print(f"d={d} ZGEMM {zgemm:.2f} ms (gemm native {native_ms:.2f}, cupy.matmul {cupy_ms:.2f})", flush=True)
    ref = cp.matmul(a, b)
    na, nb = cp.linalg.norm(a, axis=1), cp.linalg.norm(b, axis=0)
    outs = {}
    for kernel in KERNELS:
        row = {"d": d, "method": f"int8-crt/{kernel}"}
        rows.append(row)
        try:
            c, rep = _with(gpu, kernel, lambda: gemm.matmul(a, b, method="int8-crt", return_report=True))
            ch = rep.choices
            err, ok = _check(cp, c, ref, na, nb, ch["error_bound"] + ch["native_bound"])
            outs[kernel] = c
            ms, all_ms = _with(gpu, kernel, lambda: event_times(cp, lambda: gemm.matmul(a, b, method="int8-crt"),
                                                                 repeats))
            _, rep = _with(gpu, kernel, lambda: gemm.matmul(a, b, method="int8-crt", return_report=True))
            st = rep.stages
            ops = 2.0 * M * D * D * ch["moduli"] * ch["int8_products_per_modulus"]
            prod = st.get("int8_gemm")
            row.update({"median_ms": ms, "times_ms": all_ms, "x_zgemm": ms / zgemm, "stages_ms": st,
                        "checked_vs_zgemm": ok, "max_err_over_norms": err, "moduli": ch["moduli"],
                        "complex_form": ch["complex_form"], "reconstruct_kernel": ch.get("reconstruct_kernel"),
                        "product_kernel": ch.get("product_kernel"), "blocks": ch["blocks"],
                        "int8_tops": ops / (prod * 1e-3) / 1e12 if prod else None,
                        "outside_products_share": 1.0 - prod / sum(st.values()) if prod else None})
            print(f"  {kernel}: {ms:.2f} ms x{ms / zgemm:.3f} ZGEMM, moduli {ch['moduli']}, checked {ok} "
                  f"(err/norms {err:.2e}), stages { {k: round(v, 2) for k, v in st.items()} }", flush=True)
        except Exception as e:  # noqa: BLE001 - recorded, the other kernel still runs
            row["error"] = f"{type(e).__name__}: {e}"[-2000:]
            print(f"  {kernel} FAILED: {row['error']}", flush=True)
            traceback.print_exc()
    if len(outs) == 2:
        same = bool(cp.array_equal(outs["fp64"], outs["mma"]))
        for r in rows[1:]:
            r["bit_identical_fp64_mma"] = same
        print(f"  fp64 and mma outputs bit-identical at full size: {same}", flush=True)
    with open(path, "w") as f:
        json.dump({"rows": rows}, f)


# ----------------------------------------------------------------------------------------- parent


def _run_child(args, timeout):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH"))))}
    cmd = [sys.executable, "-m", "benchmarks.bench.crt_fused_gpu", *args, "--child-out", path]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = None
    finally:
        os.unlink(path)
    return res, rc, time.time() - t0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--dims", default="10,12,8", help="gate sizes, timed in this order")
    p.add_argument("--budget", type=float, default=570.0,
                   help="seconds for the whole run: each child's timeout is cut to what is left")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--out", default=None, help="JSON path (default $OUT/crt_fused.json when OUT is set)")
    p.add_argument("--child", choices=("check", "time"), help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    p.add_argument("--d", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "check":
        return child_check(args.child_out)
    if args.child == "time":
        return child_time(args.child_out, args.qubits, args.d, args.repeats)

    payload = {"timing": f"CUDA events, one warm-up, median of {args.repeats}", "qubits": args.qubits}
    t0 = time.time()
    dims = [int(x) for x in args.dims.split(",")]
    out = args.out or (os.path.join(os.environ["OUT"], "crt_fused.json") if os.environ.get("OUT") else None)

    def save():  # after every child: a run stopped from outside keeps what it had
        if out:
            from benchmarks.common import write_results

            write_results(out, {**payload, "elapsed_s": time.time() - t0},
                          module=__spec__.name if __spec__ else "benchmarks.bench.crt_fused_gpu", argv=argv)

    def left(reserve):
        return max(30.0, args.budget - (time.time() - t0) - reserve)

    if not args.skip_check:
        print("== check: tensor-core reconstruction against the FP64 kernel and the CPU", flush=True)
        res, rc, s = _run_child(["--child", "check"], min(300.0, left(90.0 * len(dims))))
        payload["check"] = res or {"error": f"child exited {rc} with no result"}
        payload["check_rc"], payload["check_s"] = rc, s
        if res is None:
            print(f"== check FAILED (exit {rc}): the mma path did not run to the end", flush=True)
        else:
            bad = [c for c in res["cases"] if not c["equal"]]
            print(f"== check: {res['n_cases'] - len(bad)}/{res['n_cases']} cases bit-identical, "
                  f"parts done {res.get('done')}, errors {res['errors'] or 'none'} ({s:.0f} s, exit {rc})",
                  flush=True)
    payload["gates"] = []
    save()
    for i, d in enumerate(dims):
        print(f"== time d={d} at {args.qubits} qubits", flush=True)
        res, rc, s = _run_child(["--child", "time", "--qubits", str(args.qubits), "--d", str(d),
                                 "--repeats", str(args.repeats)], min(240.0, left(60.0 * (len(dims) - i - 1))))
        if res is None:
            print(f"== time d={d} FAILED (exit {rc})", flush=True)
            payload["gates"].append({"d": d, "error": f"child exited {rc} with no result"})
        else:
            payload["gates"] += res["rows"]
        save()
    chk = payload.get("check") or {}
    print("\ncheck: " + ("skipped" if args.skip_check else
                         f"all bit-identical = {chk.get('all_equal')}, cases {chk.get('n_cases')}, "
                         f"errors {chk.get('errors') or chk.get('error')}"))
    print(" d  method          ms     xZGEMM  scale  resid  prod   recon  TOPS   outside  ok   same")
    for r in payload["gates"]:
        if "error" in r or "median_ms" not in r:
            print(f"{r['d']:2d}  {r.get('method', '?'):14s} FAILED {r.get('error', '')[:120]}")
            continue
        st = r.get("stages_ms") or {}
        tops = r.get("int8_tops")
        share = r.get("outside_products_share")
        print(f"{r['d']:2d}  {r['method']:14s} {r['median_ms']:7.2f}  {r.get('x_zgemm', 1.0):6.3f}  "
              f"{st.get('scale', 0):5.2f}  {st.get('residues', 0):5.2f}  {st.get('int8_gemm', 0):5.2f}  "
              f"{st.get('reconstruct', 0):5.2f}  {'-' if tops is None else round(tops):>5}  "
              f"{'' if share is None else f'{share:.2f}':>7}  {str(r.get('checked_vs_zgemm', '')):5s}"
              f"{str(r.get('bit_identical_fp64_mma', '')):5s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
