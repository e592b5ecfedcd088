"""int8-crt's residue stage A/B in one process: the FP32 digit kernel (``crt_residues_J``,
``gpu.RESIDUES = "fp32"``) against the INT8 tensor-core one (``crt_residues_mma``, ``"mma"``), with
native ZGEMM in the same run.

1. **check**: ``gpu.residues`` with both kernels and ``cpu.residues`` on small operands (every form
   and role, K-major and strided lines, 2..20 moduli, zero and subnormal lines) byte for byte, and
   whole int8-crt products with each kernel bit for bit at d = 8 and 10.
2. **time**, per gate size d (default 8, 10, 12) at ``--qubits`` (default 28): a complex128 state
   ``(2^(n-d), 2^d)`` times ``U.T`` of a Haar-random gate. ZGEMM (CUDA events, one warm-up, median
   of ``--repeats``); int8-crt with each residue kernel (the same), its stages from one more call's
   report, its output against the other kernel's bit for bit at full size; and the residue
   kernels alone on the state's first block of lines (the launch int8-crt makes, CUDA events).

A table comes last; with ``$OUT`` set the JSON (device, versions, commit) goes to
``$OUT/crt_residues_ab.json`` (or ``--out``). About a minute on an H100 or H200 at 28 qubits.

Usage (from the repository root)::

    PYTHONPATH=$PWD python -m benchmarks.bench.crt_residues_ab
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import numpy as np

KERNELS = ("fp32", "mma")


def _with(gpu, kernel, fn):
    old = gpu.RESIDUES
    gpu.RESIDUES = kernel
    try:
        return fn()
    finally:
        gpu.RESIDUES = old


def _device_name(cp):
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else name


def check(cp, rng):
    """Byte-for-byte residues and bit-for-bit products of the two kernels: ``(cases, failures)``."""
    import gemm
    from gemm.ozaki.crt import cpu, gpu, method
    from gemm.ozaki.crt.moduli import Moduli, dot_length, family_for

    cases, bad = 0, []
    # a module per form and word count is compiled (NVRTC, seconds each): these pairs take five,
    # the smallest count, the default's and 20 (lines of subnormals past 2^64 at 20 general moduli)
    for form, n in ((None, 20), ("2m", 2), ("2m", 17), ("2m", 20), ("3m", 17), ("4m", 20)):
        cplx = form is not None
        mods = Moduli.first(n, family_for(form))
        for K, strided in ((37, False), (1024, False), (69, True), (256, True)):
            x = rng.standard_normal((45, K)) * np.exp2(rng.integers(-40, 40, (45, K)))
            if cplx:
                x = x + 1j * rng.standard_normal((45, K))
            x[0] = 0
            x[3] = 5e-324 * rng.integers(-5, 6, K)
            xd = cp.asfortranarray(cp.asarray(x)) if strided else cp.asarray(x)
            X = method._as_lines(xd, "a")
            E, _, _ = gpu.line_exponents(cp, X, X, cplx, False)
            kp = -(-dot_length(form, K) // 16) * 16
            for role, bits in (("a", mods.alpha), ("b", mods.beta)):
                r = [gpu.residues(cp, X, E, bits, 2, 41, mods, form, role, kp, kernel=k) for k in KERNELS]
                want = cpu.residues(np, method._as_lines(x, "a"), cp.asnumpy(E).astype(np.int64), bits, 2, 41, mods,
                                    form, role, kp).astype(np.int8)
                cases += 1
                if not (bool(cp.array_equal(r[0], r[1])) and np.array_equal(cp.asnumpy(r[1]), want)):
                    bad.append(f"residues form={form} n={n} K={K} strided={strided} role={role}")
    from circuits.haar import haar_unitary

    for d, M in ((8, 4099), (10, 1027)):
        u = cp.asarray(haar_unitary(1 << d, rng))
        s = cp.asarray(rng.standard_normal((M, 1 << d)) + 1j * rng.standard_normal((M, 1 << d)))
        for form in ("2m", "3m", "4m"):
            for a, b in ((s, u.T), (u, s.T)):
                c = [_with(gpu, k, lambda: gemm.matmul(a, b, method="int8-crt", complex_form=form)) for k in KERNELS]
                cases += 1
                if not bool(cp.array_equal(c[0], c[1])):
                    bad.append(f"product d={d} M={M} form={form} shape={a.shape}x{b.shape}")
    return cases, bad


def time_gate(cp, n, d, repeats, rng):
    """The rows of one gate size: ZGEMM, then int8-crt with each residue kernel."""
    import gemm
    from benchmarks.gate_timing import event_times
    from circuits.haar import haar_unitary
    from gemm.ozaki.crt import gpu, method
    from gemm.ozaki.crt.moduli import Moduli, family_for

    D, M = 1 << d, 1 << (n - d)
    u = cp.asarray(haar_unitary(D, rng))
    a = (cp.random.standard_normal((M, D)) + 1j * cp.random.standard_normal((M, D))).astype(cp.complex128)
    a /= cp.linalg.norm(a)
    b = u.T
    zgemm, z_all = event_times(cp, lambda: cp.matmul(a, b), repeats)
    rows = [{"d": d, "method": "zgemm", "median_ms": zgemm, "times_ms": z_all}]
    print(f"d={d} ZGEMM {zgemm:.2f} ms", flush=True)
    outs = {}
    for kernel in KERNELS:
        row = {"d": d, "method": f"int8-crt/{kernel}"}
        rows.append(row)
        try:
            ms, all_ms = _with(gpu, kernel, lambda: event_times(cp, lambda: gemm.matmul(a, b, method="int8-crt"),
                                                                 repeats))
            c, rep = _with(gpu, kernel, lambda: gemm.matmul(a, b, method="int8-crt", return_report=True))
            outs[kernel] = c
            ch, st = rep.choices, rep.stages
            assert ch["residues_kernel"] == kernel
            # the residue launch alone: the state's first block of lines, as int8-crt makes it
            mods = Moduli.first(ch["moduli"], family_for(ch["complex_form"]))
            XA = method._as_lines(a, "a")
            EA, _, _ = gpu.line_exponents(cp, XA, method._as_lines(b, "b"), True, False)
            sz = method._Sizes(M, D, D, ch["complex_form"], True, ch["moduli"], "gpu",
                               ch["product_kernel"] == "wgmma")
            nb, kp = sz.block_lines(), sz.kp
            res_ms, _ = event_times(cp, lambda: gpu.residues(cp, XA, EA, mods.alpha, 0, nb, mods, ch["complex_form"],
                                                            "a", kp, kernel=kernel), repeats)
            ops = 2.0 * M * D * D * ch["moduli"] * ch["int8_products_per_modulus"]
            prod = st.get("int8_gemm")
            row.update({"median_ms": ms, "times_ms": all_ms, "x_zgemm": ms / zgemm, "stages_ms": st,
                        "moduli": ch["moduli"], "complex_form": ch["complex_form"], "blocks": ch["blocks"],
                        "residue_launch_ms": res_ms, "residue_launch_lines": nb,
                        "int8_tops": ops / (prod * 1e-3) / 1e12 if prod else None,
                        "outside_products_share": 1.0 - prod / sum(st.values()) if prod else None})
            print(f"  {kernel}: {ms:.2f} ms x{ms / zgemm:.3f} ZGEMM, moduli {ch['moduli']}, residue launch "
                  f"{res_ms:.2f} ms ({nb} lines), stages { {k: round(v, 2) for k, v in st.items()} }", flush=True)
            del c
        except Exception as e:  # noqa: BLE001 - recorded, the other kernel still runs
            row["error"] = f"{type(e).__name__}: {e}"[-2000:]
            print(f"  {kernel} FAILED: {row['error']}", flush=True)
            traceback.print_exc()
    if len(outs) == 2:
        same = bool(cp.array_equal(outs["fp32"], outs["mma"]))
        for r in rows[1:]:
            r["bit_identical_fp32_mma"] = same
    a = b = outs = None  # released before the next size
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--dims", default="8,10,12")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--out", default=None, help="JSON path (default $OUT/crt_residues_ab.json when OUT is set)")
    args = p.parse_args(argv)
    import cupy as cp

    rng = np.random.default_rng(52)
    t0 = time.time()
    payload = {"timing": f"CUDA events, one warm-up, median of {args.repeats}", "qubits": args.qubits,
               "device": _device_name(cp)}
    out = args.out or (os.path.join(os.environ["OUT"], "crt_residues_ab.json") if os.environ.get("OUT") else None)

    def save():
        if out:
            from benchmarks.common import write_results

            write_results(out, {**payload, "elapsed_s": time.time() - t0},
                          module=__spec__.name if __spec__ else "benchmarks.bench.crt_residues_ab", argv=argv)

    if not args.skip_check:
        try:
            cases, bad = check(cp, rng)
            payload["check"] = {"cases": cases, "mismatches": bad}
            print(f"== check: {cases - len(bad)}/{cases} bit-identical {bad[:5] if bad else ''}", flush=True)
        except Exception as e:  # noqa: BLE001 - recorded, the timings still run
            payload["check"] = {"error": f"{type(e).__name__}: {e}"[-2000:]}
            traceback.print_exc()
        save()
    payload["gates"] = []
    for d in (int(x) for x in args.dims.split(",")):
        try:
            payload["gates"] += time_gate(cp, args.qubits, d, args.repeats, rng)
        except Exception as e:  # noqa: BLE001 - recorded, the next size still runs
            payload["gates"].append({"d": d, "error": f"{type(e).__name__}: {e}"[-2000:]})
            traceback.print_exc()
        save()
    print(f"\n{payload['device']}, {args.qubits} qubits, check: {payload.get('check', 'skipped')}")
    print(" d  method            ms     xZGEMM  scale  resid  prod   recon  res-launch  TOPS  outside  same")
    for r in payload["gates"]:
        if "median_ms" not in r:
            print(f"{r['d']:2d}  {r.get('method', '?'):16s} FAILED {r.get('error', '')[:120]}")
            continue
        st = r.get("stages_ms") or {}
        tops, share = r.get("int8_tops"), r.get("outside_products_share")
        print(f"{r['d']:2d}  {r['method']:16s} {r['median_ms']:7.2f}  {r.get('x_zgemm', 1.0):6.3f}  "
              f"{st.get('scale', 0):5.2f}  {st.get('residues', 0):5.2f}  {st.get('int8_gemm', 0):5.2f}  "
              f"{st.get('reconstruct', 0):5.2f}  {r.get('residue_launch_ms', 0):10.2f}  "
              f"{'-' if tops is None else round(tops):>4}  {'' if share is None else f'{share:.2f}':>7}  "
              f"{str(r.get('bit_identical_fp32_mma', '')):5s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
