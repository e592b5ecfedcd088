"""How close the CPU emulations come to the GPU kernels, amplitude by amplitude (GPU only).

The emulations of the tensor-core methods (:mod:`gemm.tcec.emulate`, and
:mod:`qsim_tc.stages.tc32` for the complex64 stage ops) model each ``mma.sync`` instruction with
:func:`gemm.tcec.emulate.tc_mma`. Where that model is the hardware's bit for bit and the kernels'
other arithmetic is mirrored, the two give the same bits. This script measures it:

1. **products**: ``tf32tf32`` and ``halfhalf`` on Haar gates of d = 2..5 (4,096 state rows,
   complex64), through the mma.sync fused product and through the default choice, against
   ``gemm.matmul`` on the CPU;
2. **stage ops**: the complex64 stage programs with their dense 3-qubit ops on the FP16 tensor
   cores (``stages.kernel.MMA_GPU[8]`` switched on for the run) on brickworks of 10-16 qubits, at
   state norms 1, 40 and 1e-20, against ``stages.program.emulate(..., tensor_cores=True)``, and
   both against the complex128 emulation.

Per case: the share of amplitudes (real and imaginary parts) equal bit for bit, and the relative
L2 difference (for the stage ops also the emulation's own error, which the GPU test asks the
difference to stay a tenth of). A short table comes last; with ``$OUT`` set the JSON goes to
``$OUT/emulation_identity.json`` (or ``--json``).

    PYTHONPATH=$PWD python -m benchmarks.bench.emulation_identity_gpu
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np

import gemm
from benchmarks.common import write_results
from circuits import brickwork, haar_unitary

MODULE = "benchmarks.bench.emulation_identity_gpu"
STAGE_CASES = ((10, 8, 2, 2, 1, False), (12, 10, 3, 3, 2, True), (14, 12, 3, 2, 3, False), (16, 13, 3, 3, 4, True))


def _compare(got: np.ndarray, want: np.ndarray) -> dict:
    g, w = got.view(np.float32), want.view(np.float32)
    return {"bit_equal_share": float(np.mean(g == w)),
            "rel_diff": float(np.linalg.norm(got.astype(np.complex128) - want) / np.linalg.norm(want))}


def products(cp, rng) -> list[dict]:
    rows = []
    for d in (2, 3, 4, 5):
        dim = 1 << d
        a = ((rng.standard_normal((4096, dim)) + 1j * rng.standard_normal((4096, dim))) / 64).astype(np.complex64)
        u = haar_unitary(dim, rng).astype(np.complex64)
        for method in ("tf32tf32", "halfhalf"):
            for kw in ({"ec_product": "fused", "product_kernel": "mma"}, {}):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    g, rep = gemm.matmul(cp.asarray(a), cp.asarray(u), method=method, return_report=True, **kw)
                    c = gemm.matmul(a, u, method=method)
                rows.append({"case": f"d={d} {method}", "kernel": f"{rep.choices.get('product_kernel')} "
                                                                    f"{rep.choices.get('ec_product')}",
                             **_compare(g.get(), c)})
    return rows


def stage_ops(cp) -> list[dict]:
    from qsim_tc.stages import kernel
    from qsim_tc.stages.kernel import run_program, tensor_core_ops
    from qsim_tc.stages.plan import plan_stages
    from qsim_tc.stages.program import build_program, emulate

    rows = []
    saved = kernel.MMA_GPU[8]
    kernel.MMA_GPU[8] = True
    try:
        if not tensor_core_ops(np.complex64):
            return [{"case": "stage ops", "skipped": "no complex64 tensor-core ops on this GPU"}]
        for n, local, keep_low, d, seed, rotate in STAGE_CASES:
            for scale in (1.0, 40.0, 1e-20):
                rng = np.random.default_rng(seed)
                psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
                psi = (psi / np.linalg.norm(psi) * scale).astype(np.complex64)
                plan = plan_stages(brickwork(n, d, 8, seed=seed), local, keep_low=keep_low, rotate_low=rotate)
                prog = build_program(plan, keep_low, itemsize=8, widen=True, fuse_qubits=3)
                data = cp.asarray(psi)
                run_program(data, prog)
                got = data.get()
                emulated = emulate(prog, psi.copy(), tensor_cores=True)
                exact = emulate(prog, psi.astype(np.complex128))
                err = float(np.linalg.norm(emulated.astype(np.complex128) - exact) / np.linalg.norm(exact))
                rows.append({"case": f"n={n} L={local} d={d} scale={scale:g}", "kernel": "stage tc32",
                             **_compare(got, emulated), "emulation_rel_err": err})
    finally:
        kernel.MMA_GPU[8] = saved
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not gemm.gpu_available():
        raise SystemExit("this comparison needs a CUDA GPU (cupy)")
    import cupy as cp

    rows = products(cp, np.random.default_rng(1)) + stage_ops(cp)
    print(f"{'case':34s} {'kernel':26s} {'bit-equal':>10s} {'rel diff':>10s} {'emul err':>10s}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['case']:34s} skipped: {r['skipped']}")
            continue
        err = f"{r['emulation_rel_err']:.2e}" if "emulation_rel_err" in r else ""
        print(f"{r['case']:34s} {r['kernel']:26s} {r['bit_equal_share']:10.4f} {r['rel_diff']:10.2e} {err:>10s}")
    path = args.json or (os.path.join(os.environ["OUT"], "emulation_identity.json") if os.environ.get("OUT") else None)
    if path:
        write_results(path, {"rows": rows}, module=MODULE, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
