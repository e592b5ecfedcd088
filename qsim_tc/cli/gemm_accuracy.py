"""``qsim-tc gemm-accuracy``: the literature's GEMM accuracy tests over every method, against DD."""

from __future__ import annotations

import gemm
from gemm.diagnostics.accuracy_tests import (
    DEFAULT_PHIS,
    DEFAULT_TYPES,
    TESTS,
    format_results,
    plot_results,
    run_accuracy_test,
)
from qsim_tc.cli.common import add_device, parse_list, write_json
from qsim_tc.environment import environment


def register(sub) -> None:
    p = sub.add_parser("gemm-accuracy", help="phi / cancel / exp-rand accuracy tests of every GEMM method vs DD")
    p.add_argument("--test", required=True, choices=TESTS, help="which test")
    p.add_argument("--k", type=int, default=1024, help="inner dimension (cancel: the matrix size)")
    p.add_argument("--m", type=int, default=256, help="rows of A (phi, exp-rand)")
    p.add_argument("--n", type=int, default=256, help="columns of B (phi, exp-rand)")
    p.add_argument("--methods", default=None,
                   help=f"comma-separated methods (default: all registered: {', '.join(gemm.methods())})")
    p.add_argument("--phi", default=",".join(f"{x:g}" for x in DEFAULT_PHIS), help="phi values of the phi test")
    p.add_argument("--types", default=",".join(str(t) for t in DEFAULT_TYPES), help="exp-rand types (1-4)")
    p.add_argument("--complex", action="store_true", help="complex operands (default real)")
    p.add_argument("--seed", type=int, default=0)
    add_device(p)
    p.add_argument("--plot", metavar="FILE.png", help="plot the errors per method and case")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    methods = parse_list(args.methods) if args.methods else None
    try:
        phis = tuple(float(x) for x in parse_list(args.phi))
        types = tuple(int(x) for x in parse_list(args.types))
    except ValueError:
        raise ValueError(f"--phi takes numbers and --types integers, got --phi {args.phi!r} --types {args.types!r}")
    out = run_accuracy_test(args.test, args.k, methods, m=args.m, n=args.n, device=args.device, seed=args.seed,
                            complex_operands=args.complex, phis=phis, types=types)
    print(format_results(out))
    if args.plot:
        print(f"wrote {plot_results(out, args.plot)}")
    if args.json:
        write_json(args.json, {"command": "gemm-accuracy", "args": vars(args) | {"func": None},
                               "environment": environment(), **out})
    return 0
