"""``qsim-tc gemm-accuracy``: the literature's GEMM accuracy tests over every method, against DD."""

from __future__ import annotations

import sys

import gemm
from gemm.diagnostics.accuracy_tests import (
    DEFAULT_PHIS,
    DEFAULT_TYPES,
    EXP_RAND_DESCRIPTIONS,
    TESTS,
    format_results,
    plot_results,
    run_accuracy_test,
)
from qsim_tc.cli.common import add_device, check_outputs, parse_list, write_json, write_plot
from qsim_tc.environment import environment
from qsim_tc.progress import CPU_SLOWDOWN, Progress, is_emulated

# sizes by device: the GPU's are the literature's; the CPU's finish every method in seconds
SIZES = {"gpu": {"k": 1024, "m": 256, "n": 256}, "cpu": {"k": 256, "m": 64, "n": 64}}
TYPES_HELP = "; ".join(f"{t} = {d}" for t, d in EXP_RAND_DESCRIPTIONS.items())


def register(sub) -> None:
    p = sub.add_parser("gemm-accuracy", help="phi / cancel / exp-rand accuracy tests of every GEMM method vs DD")
    p.add_argument("--test", required=True, choices=TESTS,
                   help="phi: entries spread by phi (Ozaki et al.); cancel: A times its numerical inverse; "
                        "exp-rand: operands with random exponents of four ranges (Ootomo and Yokota)")
    for key, what in (("k", "inner dimension (cancel: the matrix size)"), ("m", "rows of A (phi, exp-rand)"),
                      ("n", "columns of B (phi, exp-rand)")):
        p.add_argument(f"--{key}", type=int, default=None,
                       help=f"{what} (default: {SIZES['gpu'][key]} on a GPU, {SIZES['cpu'][key]} on a CPU)")
    p.add_argument("--methods", default=None,
                   help=f"comma-separated methods (default: all registered: {', '.join(gemm.methods())})")
    p.add_argument("--phi", default=",".join(f"{x:g}" for x in DEFAULT_PHIS), help="phi values of the phi test")
    p.add_argument("--types", default=",".join(str(t) for t in DEFAULT_TYPES),
                   help=f"exp-rand types, exponent ranges of A and B: {TYPES_HELP}")
    p.add_argument("--complex", action="store_true", help="complex operands (default real)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random operands")
    add_device(p)
    p.add_argument("--plot", metavar="FILE.png", help="plot the errors per method and case (needs matplotlib)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    methods = parse_list(args.methods) if args.methods else None
    try:
        phis = tuple(float(x) for x in parse_list(args.phi))
        types = tuple(int(x) for x in parse_list(args.types))
    except ValueError:
        raise ValueError(f"--phi takes numbers and --types integers, got --phi {args.phi!r} --types {args.types!r}")
    for name in methods or ():
        gemm.get_method(name)  # unknown names fail before any work
    check_outputs(args)
    dev = gemm.resolve_device(args.device)
    sizes = SIZES["gpu" if dev.is_gpu else "cpu"]
    k, m, n = (getattr(args, key) if getattr(args, key) is not None else sizes[key] for key in ("k", "m", "n"))
    emulated = [name for name in (methods or gemm.methods()) if is_emulated(gemm.get_method(name))]
    if not dev.is_gpu and emulated:
        print(f"note: on a CPU the emulated methods ({', '.join(emulated)}) reproduce tensor-core arithmetic bit "
              f"for bit, for validation; they take {CPU_SLOWDOWN} as long as native", file=sys.stderr)
    out = run_accuracy_test(args.test, k, methods, m=m, n=n, device=dev, seed=args.seed,
                            complex_operands=args.complex, phis=phis, types=types,
                            progress=Progress(f"{args.test} test", unit="methods"))
    print(format_results(out))
    if args.plot:
        write_plot(args.plot, lambda tmp: plot_results(out, tmp))
    if args.json:
        write_json(args.json, {"command": "gemm-accuracy", "args": vars(args) | {"func": None},
                               "environment": environment(), **out})
    return 0
