"""Benchmark of int8-crt (Ozaki scheme II) against native ZGEMM on the GPU, at gate shapes.

For each d (default 8 and 10) at n qubits (default 28): A = the state as ``(2^(n-d), 2^d)``
complex128, B = ``U.T`` of a Haar-random ``2^d x 2^d`` unitary (the engine's ``S @ U.T``). In one
run on one device: native ZGEMM (cuBLAS through cupy.matmul), then int8-crt for each complex form
(2m, 3m, 4m) at every moduli count asked for (default 12..20) and at the default ``bits=53``.
Every result is checked against ZGEMM before it is timed: elementwise
``|C - Z| <= (crt bound + native bound) ||a_i|| ||b_j|| + 4u |Z|`` from the reported bounds.
Times are CUDA events after one warm-up, median of repeats; the stage breakdown comes from one
more call's report.

``--kernels auto,cublas`` times each configuration with the fused wgmma products and with cuBLAS's
INT32 products; ``--cublas-emulation`` adds cuBLAS's own FP64 emulation (EAGER, cuBLAS 12.9+) on
the same shape, timed in a child process with ``CUBLAS_EMULATE_DOUBLE_PRECISION=1``.

Usage::

    python -m benchmarks.bench.crt --dims 8,10,12 --kernels auto,cublas --cublas-emulation \
        --out benchmarks/results/crt_<gpu>.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import parse_range, write_results
from benchmarks.gate_timing import event_times as _events


def _check(cp, c, ref, na, nb, coeff):
    """(max of |C - Z| / (||a_i|| ||b_j||), whether it is within ``coeff`` + 4u |Z|), row blocks."""
    worst, ok = 0.0, True
    step = 1 << 14
    for r0 in range(0, c.shape[0], step):
        d = cp.abs(c[r0:r0 + step] - ref[r0:r0 + step])
        scale = na[r0:r0 + step, None] * nb[None, :]
        worst = max(worst, float((d / scale).max()))
        ok &= bool((d <= coeff * scale + 4 * 2.0 ** -53 * cp.abs(ref[r0:r0 + step])).all())
    return worst, ok


# cuBLAS's own FP64 emulation (Ozaki scheme I on INT8), switched on for a whole process by
# environment variables (cuBLAS 12.9+): a ZGEMM of the gate's shape timed in a child process
_EMULATION_ENV = {"CUBLAS_EMULATE_DOUBLE_PRECISION": "1", "CUBLAS_EMULATION_STRATEGY": "eager"}
_EMULATION_CHILD = """
import json, sys
import cupy as cp
import numpy as np
from benchmarks.gate_timing import event_times
M, D, reps = (int(x) for x in sys.argv[1:4])
a = (cp.random.standard_normal((M, D)) + 1j * cp.random.standard_normal((M, D))).astype(cp.complex128)
b = (cp.random.standard_normal((D, D)) + 1j * cp.random.standard_normal((D, D))).astype(cp.complex128)
version = cp.cuda.cublas.getVersion(cp.cuda.device.get_cublas_handle())
if version < 120900:  # older cuBLAS ignores the variables: the time would be plain ZGEMM's
    print(json.dumps({"error": f"cuBLAS {version} has no FP64 emulation (12.9 or later needed)", "cublas": version}))
    sys.exit(0)
ms, all_ms = event_times(cp, lambda: cp.matmul(a, b), reps)
print(json.dumps({"median_ms": ms, "times_ms": all_ms, "cublas": version}))
"""


def cublas_emulation_ms(M: int, D: int, repeats: int) -> dict:
    """cuBLAS's FP64 emulation (EAGER) on a ``(M, D) @ (D, D)`` complex128 product, or why not."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the child imports benchmarks
    env = {**os.environ, **_EMULATION_ENV, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    try:
        out = subprocess.run([sys.executable, "-c", _EMULATION_CHILD, str(M), str(D), str(repeats)], env=env,
                             capture_output=True, text=True, timeout=300, check=True)
        return {**json.loads(out.stdout.strip().splitlines()[-1]), "env": _EMULATION_ENV}
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        return {"error": f"{type(e).__name__}: {getattr(e, 'stderr', '') or e}"[-500:], "env": _EMULATION_ENV}


def bench_gate(cp, gemm, n, d, configs, repeats, rng, emulation=False):
    from circuits.haar import haar_unitary

    D, M = 1 << d, 1 << (n - d)
    u = cp.asarray(haar_unitary(D, rng))
    state = (cp.random.standard_normal((M, D)) + 1j * cp.random.standard_normal((M, D))).astype(cp.complex128)
    state /= cp.linalg.norm(state)
    a, b = state, u.T
    ref = cp.matmul(a, b)
    na, nb = cp.linalg.norm(a, axis=1), cp.linalg.norm(b, axis=0)
    # native: the project's cuBLAS ZGEMM path (a transposed operand becomes cuBLAS's T flag);
    # cupy.matmul beside it for reference. Ratios are to the faster of the two.
    native_ms, native_all = _events(cp, lambda: gemm.matmul(a, b, method="native"), repeats)
    cupy_ms, cupy_all = _events(cp, lambda: cp.matmul(a, b), repeats)
    rows = [{"n_qubits": n, "d": d, "method": "native", "options": {}, "median_ms": native_ms, "times_ms": native_all,
             "checked": True},
            {"n_qubits": n, "d": d, "method": "cupy.matmul", "options": {}, "median_ms": cupy_ms, "times_ms": cupy_all,
             "checked": True}]
    if emulation:
        emu = cublas_emulation_ms(M, D, repeats)
        rows.append({"n_qubits": n, "d": d, "method": "cublas-fp64-emulation", "options": emu.get("env"),
                     "checked": None, **emu})
        print(f"d={d} cuBLAS FP64 emulation (eager): {emu.get('median_ms', emu.get('error'))}", flush=True)
    native_ms = min(native_ms, cupy_ms)
    for r in rows:
        if "median_ms" not in r:
            continue
        r["ratio_to_native"] = r["median_ms"] / native_ms
    print(f"d={d} ZGEMM: gemm native {rows[0]['median_ms']:.2f} ms, cupy.matmul {cupy_ms:.2f} ms", flush=True)
    for opts in configs:
        c, rep = gemm.matmul(a, b, method="int8-crt", return_report=True, **opts)
        ch = rep.choices
        err, ok = _check(cp, c, ref, na, nb, ch["error_bound"] + ch["native_bound"])
        del c
        row = {"n_qubits": n, "d": d, "method": "int8-crt", "options": opts, "checked": ok,
               "max_err_over_norms": err, "moduli": ch["moduli"], "complex_form": ch["complex_form"],
               "p_bits": ch["p_bits"], "error_bound": ch["error_bound"], "native_bound": ch["native_bound"],
               "int8_gemms": ch["int8_gemms"], "blocks": ch["blocks"], "workspace_bytes": rep.workspace_bytes}
        if not ok:
            print(f"  CHECK FAILED {opts}: max |C - Z| / norms {err:.3g}", flush=True)
            rows.append(row)
            continue
        ms, all_ms = _events(cp, lambda: gemm.matmul(a, b, method="int8-crt", **opts), repeats)
        _, rep = gemm.matmul(a, b, method="int8-crt", return_report=True, **opts)
        stages = rep.stages
        products = ch["moduli"] * ch["int8_products_per_modulus"]
        ops = 2.0 * M * D * D * products  # 4m: one (M x 2D) @ (2D x 2D) product = four real ones
        row.update({"median_ms": ms, "times_ms": all_ms, "ratio_to_native": ms / native_ms, "stages_ms": stages,
                    "int8_tops": ops / (stages["int8_gemm"] * 1e-3) / 1e12 if stages.get("int8_gemm") else None})
        rows.append(row)
        row["product_kernel"] = ch.get("product_kernel")
        print(f"  {str(opts):38s} m={ch['moduli']:2d} {ms:8.2f} ms  x{ms / native_ms:5.2f} (ZGEMM/crt "
              f"{native_ms / ms:4.2f})  err/norms {err:.1e}  "
              f"stages { {k: round(v, 2) for k, v in stages.items()} }", flush=True)
    a = b = ref = state = u = na = nb = None  # free the device memory before the next d
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--dims", default="8,10")
    p.add_argument("--moduli", default="12-20", help="moduli counts, e.g. 12-20 or 14,16")
    p.add_argument("--forms", default="2m,3m,4m")
    p.add_argument("--kernels", default="auto", help="product_kernel values, e.g. auto,cublas")
    p.add_argument("--cublas-emulation", action="store_true",
                   help="also time cuBLAS's own FP64 emulation (EAGER) on the same shape, in a child process")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import cupy as cp

    import gemm

    forms = [f for f in args.forms.split(",") if f]
    kernels = [k for k in args.kernels.split(",") if k]
    configs = [{"complex_form": f, "product_kernel": k} for k in kernels for f in forms]  # bits=53: count from the data
    configs += [{"complex_form": f, "moduli": n, "product_kernel": k} for k in kernels for f in forms
                for n in parse_range(args.moduli)]
    rng = np.random.default_rng(2026)
    payload = {"timing": f"CUDA events, one warm-up, median of {args.repeats}", "gates": []}
    t0 = time.time()
    for d in parse_range(args.dims):
        payload["gates"] += bench_gate(cp, gemm, args.qubits, d, configs, args.repeats, rng, args.cublas_emulation)
    payload["elapsed_s"] = time.time() - t0
    if args.out:
        payload = write_results(args.out, payload, module=__spec__.name, argv=argv)
    print("\n d  form  moduli  median_ms  x_native  checked  scale/residues/int8_gemm/reconstruct ms")
    for r in payload["gates"]:
        st = r.get("stages_ms", {})
        ms = r.get("median_ms")
        print(f"{r['d']:2d}  {str(r.get('complex_form') or r['method']):6s} {str(r.get('moduli', '')):>6s}  "
              f"{ms if ms is None else round(ms, 2)!s:>9s}  {r.get('ratio_to_native', float('nan')):8.2f}  "
              f"{str(r['checked']):7s}  {st.get('scale', 0):.1f}/{st.get('residues', 0):.1f}/"
              f"{st.get('int8_gemm', 0):.1f}/{st.get('reconstruct', 0):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
