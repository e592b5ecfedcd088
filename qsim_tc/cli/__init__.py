"""The ``qsim-tc`` command line. Each subcommand is a module with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import warnings

from qsim_tc.errors import SimulationError

# one module per subcommand; each defines register(subparsers) that sets ``func`` on its parser
SUBCOMMANDS = (
    "qsim_tc.cli.brickwork",
    "qsim_tc.cli.run",
    "qsim_tc.cli.gemm_accuracy",
    "qsim_tc.cli.probe",
    "qsim_tc.cli.info",
    "qsim_tc.cli.calibrate",
)

DESCRIPTION = """\
Simulate quantum circuits with every gate as one matrix product (GEMM), native or emulated on
low-precision tensor cores, and measure the accuracy of each method against double-double.

examples:
  qsim-tc brickwork --qubits 20 --gate-qubits 4 --depth 10
  qsim-tc brickwork --qubits 14 --backend native,native32 --reference dd --plot acc.png
  qsim-tc run circuit.qasm --shots 1000
  qsim-tc gemm-accuracy --test phi --plot phi.png
  qsim-tc brickwork --qubits 20 --gate-qubits 8 --depth 4 --explain
  qsim-tc calibrate
  qsim-tc info

'qsim-tc COMMAND --help' describes each command's options."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (unless it is None or False) and keeps descriptions as written."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class _SubParsers(argparse._SubParsersAction):
    def add_parser(self, name, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"][:1].upper() + kwargs["help"][1:] + ".")
        return super().add_parser(name, **kwargs)


def _version() -> str:
    from qsim_tc import __version__  # noqa: PLC0415

    return f"qsim-tc {__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qsim-tc", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    parser.register("action", "parsers", _SubParsers)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _show_warning_once(seen: dict):
    """A ``warnings.showwarning`` that prints one line per kind of warning (category and subject).

    The subject is the text before the first colon ("method 'halfhalf'"), so a warning repeated
    for every gate with other numbers prints once; ``seen`` counts the repeats.
    """

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        key = (category, text.split(":")[0])
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1:
            print(f"qsim-tc: warning: {text}", file=file or sys.stderr)

    return show


class Terminated(BaseException):
    """Raised in the main thread when the process receives SIGTERM (like KeyboardInterrupt for
    SIGINT): the run unwinds, temporary output files are removed, and the CLI exits 128 + 15."""


# a user's mistake or the machine's limits: a one-line message and exit status 2
USER_ERRORS = (ValueError, TypeError, MemoryError, RuntimeError, ImportError, OSError, ArithmeticError)


def _raise_terminated(signum, frame):
    raise Terminated


def main(argv=None) -> int:
    """Run the ``qsim-tc`` command line; the exit status.

    0 on success (a subcommand may return another status); 2 for a user error (one line on stderr,
    no traceback); 130 on SIGINT and 143 on SIGTERM (one line); 1 for an unexpected error (one line
    naming it; ``QSIM_TC_DEBUG=1`` shows the traceback).
    """
    seen: dict = {}
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    name = "qsim-tc"
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # every warning reaches show(), which prints each text once
        warnings.showwarning = _show_warning_once(seen)
        try:
            args = build_parser().parse_args(argv)  # (argparse's own errors exit 2 through SystemExit)
            name = f"qsim-tc {args.command}"
            return int(args.func(args) or 0)
        except KeyboardInterrupt:
            print(f"\n{name}: interrupted", file=sys.stderr)
            return 128 + signal.SIGINT
        except Terminated:
            print(f"\n{name}: terminated", file=sys.stderr)
            return 128 + signal.SIGTERM
        except USER_ERRORS + (SimulationError,) as exc:
            print(f"{name}: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        except Exception as exc:
            if os.environ.get("QSIM_TC_DEBUG"):
                raise
            print(f"{name}: internal error: {type(exc).__name__}: {_one_line(exc)} (please report it; "
                  "QSIM_TC_DEBUG=1 shows where)", file=sys.stderr)
            return 1
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            repeats = sum(n - 1 for n in seen.values())
            if repeats:
                print(f"qsim-tc: warning: ({repeats} repeat(s) of the warnings above not shown)", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (an OSError's without its errno tuple)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
