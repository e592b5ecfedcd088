"""The ``qsim-tc`` command line. Each subcommand is a module with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import sys

# one module per subcommand; each defines register(subparsers) that sets ``func`` on its parser
SUBCOMMANDS = (
    "qsim_tc.cli.brickwork",
    "qsim_tc.cli.info",
    "qsim_tc.cli.gemm_accuracy",
    "qsim_tc.cli.probe",
    "qsim_tc.cli.run",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qsim-tc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, MemoryError, RuntimeError) as exc:
        print(f"qsim-tc {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
