"""``qsim-tc calibrate``: measure this device's cost table (every method, gate width and placement)
and store it in the cache, where ``backend="auto"`` and ``fuse="auto"`` find it; on a CPU also the
stage executor's fusion costs (:mod:`qsim_tc.stages.cpu_fuse_measure`), which its next run
fuses by."""

from __future__ import annotations

import json
import sys
import time

import gemm
from qsim_tc import calibrate as cal
from qsim_tc.cli.common import add_device, check_outputs, parse_list, write_json
from qsim_tc.plan.costs import PLACEMENTS


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this device's gate costs for backend=auto and fuse=auto, "
                                         "and store them in the cache")
    add_device(p)
    p.add_argument("--precision", default="double,single",
                   help="precisions whose methods to measure (double: FP64-class methods, single: FP32-class)")
    p.add_argument("--methods", default=None, metavar="LIST",
                   help="measure only these methods (comma list; default: every method of the precisions)")
    p.add_argument("--qubits", type=int, default=None,
                   help=f"state size of the measurement (default: {cal.DEFAULT_QUBITS['gpu']} on a GPU, lowered "
                        f"until it fits; {cal.DEFAULT_QUBITS['cpu']} on a CPU)")
    p.add_argument("--max-gate-qubits", type=int, default=None,
                   help=f"widest gate measured (default: {cal.DEFAULT_MAX_GATE_QUBITS['gpu']} on a GPU, "
                        f"{cal.DEFAULT_MAX_GATE_QUBITS['cpu']} on a CPU); wider ones are extrapolated")
    p.add_argument("--placements", default=",".join(PLACEMENTS),
                   help="where the targets sit: bottom, middle, top, scattered (random qubits)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help=f"wall time of the calibration, shared by the methods (default: {cal.DEFAULT_BUDGET_S['gpu']:.0f} s on a "
                        f"GPU, {cal.DEFAULT_BUDGET_S['cpu']:.0f} s on a CPU)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per point (the median is kept)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random gates and qubit sets")
    p.add_argument("--no-store", action="store_true", help="measure and print, but leave the cache as it is")
    p.add_argument("--verbose", action="store_true", help="print every method and width as it is measured")
    p.add_argument("--json", metavar="FILE", help="also write the table as JSON to FILE")
    p.add_argument("--part", choices=PARTS, default="all",
                   help="what to measure: all; gates (the gate cost table); stages (on a CPU: the stage executor's "
                        "fusion costs alone, about 15-30 s)")
    p.set_defaults(func=run)


PARTS = ("all", "gates", "stages")


def run(args) -> int:
    check_outputs(args, plot=False)
    dev = gemm.resolve_device(args.device)
    if args.part == "stages" and dev.is_gpu:
        raise ValueError("--part stages measures the CPU stage executor's fusion costs; pass --device cpu")
    out = {"command": "calibrate"}
    if args.part != "stages":
        out.update(_gates(args))
    if not dev.is_gpu and args.part != "gates":
        out["stage_fusion"] = _stage_fusion(args)
    if args.json:
        write_json(args.json, out)
    return 0


def _stage_fusion(args) -> dict:
    """Measure and (unless --no-store) cache the CPU stage executor's fusion costs."""
    from qsim_tc.stages import cpu, cpu_fuse_calibration, cpu_fuse_measure  # noqa: PLC0415 - numba, only here

    print("measuring the CPU stage executor's fusion costs (ms an op of 1..4 targets; a 24-qubit state, "
          "fewer qubits where memory is short)")
    cal = cpu_fuse_measure.measure(seed=args.seed, progress=print)
    print(f"stage fusion costs measured in {cal.elapsed_s:.1f} s")
    if not args.no_store:
        print(f"stored {cpu_fuse_calibration.store(cal)}")
        cpu.forget_fuse_costs()
    return json.loads(cal.to_json())


def _gates(args) -> dict:
    """The gate cost table (every method of the precisions asked), stored unless --no-store."""
    precisions = tuple(parse_list(args.precision))
    if not precisions:
        raise ValueError(f"--precision names no precision, got {args.precision!r}")
    t0 = time.perf_counter()
    table = cal.calibrate(args.device, precisions=precisions,
                          methods=parse_list(args.methods) if args.methods else None, n_qubits=args.qubits,
                          max_gate_qubits=args.max_gate_qubits, placements=tuple(parse_list(args.placements)),
                          budget_s=args.budget, repeats=args.repeats, seed=args.seed,
                          progress=print if args.verbose else None)
    wall = time.perf_counter() - t0
    print(f"calibrated {table.key.get('gpu') or table.key.get('processor', table.key['device'])}: "
          f"{len(table.rows)} rows in {wall:.1f} s (measuring {table.elapsed_s:.1f} s)")
    if table.note:
        print(table.note)
    if table.noise:
        print(f"qsim-tc: warning: {table.noise}", file=sys.stderr)
    print(format_table(table))
    if not args.no_store:
        try:
            old = cal.load_cached(table.key)
        except cal.CostTableError as exc:
            print(f"{exc}; replaced by this calibration")
            old = None
        if old is not None:
            table = cal.merge(old, table)
        print(f"stored {cal.store(table)}")
        cal.forget()
    return {"wall_s": wall, "table": table.to_json()}


def format_table(table) -> str:
    """One line per row: method, placement, state size, and ms per width (* extrapolated)."""
    widths = sorted({d for r in table.rows for d in r.ms})
    lines = [f"{'method':10s} {'placement':9s} {'N':>3s} " + " ".join(f"{'d=' + str(d):>8s}" for d in widths)]
    for r in table.rows:
        cells = []
        for d in widths:
            text = f"{r.gate_ms(d):.3g}" + ("" if not r.measured or d in r.measured else "*")
            cells.append(f"{text:>8s}")
        lines.append(f"{r.backend:10s} {r.placement:9s} {r.n_qubits:3d} " + " ".join(cells))
    lines.append("(ms per gate at N qubits, per-gate overhead included; * extrapolated)")
    return "\n".join(lines)
