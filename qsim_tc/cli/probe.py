"""``qsim-tc probe``: numerical behaviour of the GPU's tensor cores (TF32 and FP16 mma.sync)."""

from __future__ import annotations

import numpy as np

import gemm
from gemm.diagnostics import probe
from qsim_tc.cli.common import check_outputs, check_writable, write_json
from qsim_tc.environment import environment


def register(sub) -> None:
    p = sub.add_parser("probe", help="tensor-core numerics: exact products, subnormals, rounding, normalisation")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the findings as JSON")
    p.add_argument("--cases", default=None, metavar="PATH",
                   help="also save 8,192 random instructions a format and the GPU's results, for fitting a model "
                        "of the accumulation offline (gemm.diagnostics.probe.load_cases and model_fit): a numpy "
                        ".npz file (the suffix is added where missing)")
    p.set_defaults(func=run)


def run(args) -> int:
    if not gemm.gpu_available():
        raise RuntimeError("the probe runs mma instructions on a CUDA GPU; none is available (install cupy on a "
                           "machine with an NVIDIA GPU)")
    check_outputs(args, plot=False)
    if args.cases:
        check_writable(f"--cases {args.cases}", args.cases)
    rows = probe.probe_all()
    print(probe.format_table(rows))
    status = 0
    for r in rows:
        bad = probe.design_assumptions(r)
        for b in bad:
            print(f"warning ({r['format']}): {b}")
        status = status or (1 if bad else 0)
    if not status:
        print("the properties the error-corrected methods rely on hold")
    if args.json:
        write_json(args.json, {"environment": environment(), "probe": rows})
    if args.cases:
        rng = np.random.default_rng(7)
        path = probe.save_cases(args.cases, {fmt: probe.model_data(fmt, rng, 8192) for fmt in probe.FORMATS})
        print(f"wrote {path} (gemm.diagnostics.probe.load_cases, then model_fit)")
    return status
