"""``qsim-tc probe``: numerical behaviour of the GPU's tensor cores (TF32 and FP16 mma.sync)."""

from __future__ import annotations

import gemm
from gemm.diagnostics import probe
from qsim_tc.cli.common import check_outputs, write_json
from qsim_tc.environment import environment


def register(sub) -> None:
    p = sub.add_parser("probe", help="tensor-core numerics: exact products, subnormals, rounding, normalisation")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the findings as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    if not gemm.gpu_available():
        raise RuntimeError("the probe runs mma instructions on a CUDA GPU; none is available (install cupy on a "
                           "machine with an NVIDIA GPU)")
    check_outputs(args, plot=False)
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
    return status
