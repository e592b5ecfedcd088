"""``qsim-tc brickwork``: simulate a brickwork random circuit and print time and results.

With one backend it prints the run's time and a few amplitudes (with ``--backend auto --explain``,
also the method of every block, its predicted and measured time and why). With several backends
(``--backend native,int8-auto``), a reference (``--reference dd``) or ``--mirror`` it prints one
row per backend: time, speed ratio to native in the same run, and every error metric.
"""

from __future__ import annotations

import gemm
from circuits import brickwork
from qsim_tc import Simulator, memory
from qsim_tc.accuracy import accuracy_table, format_table, plot_rows
from qsim_tc.cli.common import (
    Progress,
    add_backend_options,
    add_device,
    add_fuse,
    add_precision,
    add_tolerance,
    add_workspace,
    backend_options,
    check_options_used,
    check_outputs,
    error_steps_table,
    error_text,
    explain_table,
    fuse_option,
    methods_of,
    parse_list,
    plan_option,
    precision_option,
    print_stages,
    run_or_hint,
    time_text,
    tolerance_option,
    write_json,
    write_plot,
)
from qsim_tc.cli.distributed import launched_ranks, run_ranks
from qsim_tc.environment import environment


def register(sub) -> None:
    p = sub.add_parser("brickwork", help="simulate a brickwork circuit of Haar-random d-qubit gates")
    p.add_argument("--qubits", type=int, required=True, help="number of qubits N")
    p.add_argument("--gate-qubits", type=int, default=4, help="qubits per gate d (each layer tiles the qubits "
                   "with d-qubit blocks, every other layer shifted by d/2)")
    p.add_argument("--depth", type=int, default=10, help="number of layers of gates")
    p.add_argument("--seed", type=int, default=0, help="seed of the random gates (the same seed gives the same "
                   "circuit)")
    p.add_argument("--periodic", action="store_true", help="wrap blocks around the last qubit")
    p.add_argument("--backend", default="auto",
                   help=f"auto (per block the fastest method of --precision on this device), a GEMM method, or a "
                        f"comma list to compare them ({', '.join(gemm.methods())}); on a CPU the emulated ones take "
                        "5-200x as long as native")
    add_precision(p)
    add_tolerance(p)
    p.add_argument("--explain", action="store_true",
                   help="with --backend auto: print each block's method, predicted and measured time, and why")
    p.add_argument("--reference", choices=("dd",), default=None,
                   help="measure every backend against the double-double reference")
    p.add_argument("--mirror", action="store_true",
                   help="run the circuit then its inverse and compare with |0...0> (no reference needed)")
    p.add_argument("--plot", metavar="FILE.png", help="plot errors and times per backend (needs matplotlib, and "
                   "several backends, --reference dd or --mirror)")
    add_device(p)
    add_fuse(p)
    add_workspace(p)
    add_backend_options(p)
    p.add_argument("--json", metavar="FILE", help="write the result and per-gate statistics as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    backends = parse_list(args.backend)
    if not backends:
        raise ValueError(f"--backend names no method, got {args.backend!r}")
    check_options_used(args, methods_of(backends))  # unknown names fail here too
    compare = len(backends) > 1 or args.reference or args.mirror
    if args.explain and (compare or backends[0] != "auto"):
        raise ValueError("--explain shows the choices of one --backend auto run; drop it, or the other backends, "
                         "--reference and --mirror")
    if args.plot and not compare:
        raise ValueError("--plot compares backends: give several (--backend native,native32), --reference dd "
                         "or --mirror")
    check_outputs(args)
    _check_size(args)
    circ = brickwork(args.qubits, args.gate_qubits, args.depth, args.seed, periodic=args.periodic)
    if launched_ranks() > 1:
        if compare or args.explain or args.tolerance is not None:
            raise ValueError("under mpiexec, brickwork runs one backend (no --reference, --mirror, --explain or "
                             "--tolerance)")
        return run_ranks(args, circ, backends[0], "brickwork")
    if compare:
        return _compare(args, circ, backends)
    return _single(args, circ, backends[0])


MAX_GATES = 1_000_000  # a brickwork circuit larger than this is a typo, not a benchmark


def _check_size(args) -> None:
    """``--qubits`` and ``--depth`` within what a state and a circuit can hold, before the circuit's
    Haar gates are drawn (100,000 qubits took minutes to draw before failing)."""
    most = memory.MAX_QUBITS + max(launched_ranks() - 1, 0).bit_length()  # ranks hold 2^k slices
    if not 1 <= args.qubits <= most:
        raise ValueError(f"--qubits must be in 1..{most} (a state of N qubits holds 2^N amplitudes), got {args.qubits}")
    if not 1 <= args.gate_qubits <= args.qubits:
        raise ValueError(f"--gate-qubits must be in 1..{args.qubits} (--qubits), got {args.gate_qubits}")
    gates = args.depth * -(-args.qubits // args.gate_qubits)
    if args.depth < 1 or gates > MAX_GATES:
        raise ValueError(f"--depth must be >= 1 and give at most {MAX_GATES:,} gates, got {args.depth} "
                         f"(~{gates:,} gates)")


def _single(args, circ, backend) -> int:
    options = backend_options(args, gemm.get_method(backend)) if backend != "auto" else {}
    tolerance = tolerance_option(args, backend)
    if tolerance is not None:
        options["tolerance"] = tolerance
    sim = Simulator(backend, device=args.device, precision=precision_option(args, backend), fuse=fuse_option(args),
                    plan=plan_option(args), workspace_bytes=args.max_workspace, **options)
    print(f"brickwork: {args.qubits} qubits, d={args.gate_qubits}, depth {args.depth}, {len(circ)} gates, "
          f"backend {backend}, device {sim.device.name} ({sim.device.reason})")
    result = run_or_hint(sim, circ, args, Progress("simulating"))
    print_stages(result)
    st = result.state
    probs = st.probabilities()
    top = int(st.xp.argmax(probs))
    if result.metadata.get("fuse") is not None:
        print(f"fusion: {result.metadata['input_gates']} gates -> {result.metadata['applied_gates']} blocks "
              f"({result.metadata['fuse_s']:.3f} s)")
    print(time_text(result, len(circ)))
    if error_text(result) is not None:
        print(error_text(result))
    print(f"norm: {st.norm():.15f}")
    print(f"amplitude[0] = {st.amplitude(0):.6e}")
    print(f"most likely basis state: {top} (p = {float(probs[top]):.3e}, uniform 2^-N = {2.0**-args.qubits:.3e})")
    paths = {}
    for s in result.stats:
        paths[s.info.path] = paths.get(s.info.path, 0) + 1
    print("gate paths: " + ", ".join(f"{k} x{v}" for k, v in sorted(paths.items())))
    auto = result.metadata.get("auto")
    if auto is not None:
        print(f"auto ({auto['precision']}): " + ", ".join(f"{k} x{v}" for k, v in auto["blocks_per_method"].items())
              + f"; predicted {_ms(auto['predicted_ms'])}, measured {_ms(auto['measured_ms'])}; "
              f"cost table {auto['cost_table']}")
        if auto["excluded"]:
            print("excluded: " + "; ".join(f"{k}: {v}" for k, v in auto["excluded"].items()))
        g = auto.get("guard")
        if g is not None and (g["run_norm_change"] is not None or g["restarts"]):
            line = f"accuracy guard ({g['mode']})"
            if g["run_norm_change"] is not None:
                line += f": run norm change {g['run_norm_change']:.3g} (bound {g['run_norm_bound']:.3g})"
            print(line + "".join(f"; started again after {r['why']}" for r in g["restarts"]))
    if args.explain:
        print(explain_table(result.metadata["blocks"]))
        if error_steps_table(result) is not None:
            print(error_steps_table(result))
    if args.json:
        amp0 = st.amplitude(0)
        payload = {"command": "brickwork", "args": vars(args) | {"func": None}, "environment": environment(),
                   "result": result.to_dict(), "amp0": [amp0.real, amp0.imag], "norm": st.norm()}
        write_json(args.json, payload)
    return 0


def _ms(ms) -> str:
    return f"{ms:.1f} ms" if ms is not None else "-"


def _compare(args, circ, backends) -> int:
    print(f"brickwork: {args.qubits} qubits, d={args.gate_qubits}, depth {args.depth}, {len(circ)} gates; "
          f"backends {', '.join(backends)}; reference {args.reference or 'none'}"
          + ("; mirror" if args.mirror else ""))
    options = {b: backend_options(args, gemm.get_method(b)) for b in backends if b != "auto"}
    if "auto" in backends:
        options["auto"] = {"precision": precision_option(args, "auto")}
        if args.tolerance is not None:
            options["auto"]["tolerance"] = args.tolerance
    elif args.tolerance is not None:
        raise ValueError("--tolerance applies to --backend auto; add auto to the backends or drop --tolerance")
    elif args.precision is not None:
        raise ValueError("--precision applies to --backend auto; add auto to the backends or drop --precision")
    rows = accuracy_table(circ, backends, device=args.device, reference=args.reference, mirror=args.mirror,
                          options_per_backend=options, progress=Progress("reference"))
    print(format_table(rows))
    if args.plot:
        write_plot(args.plot, lambda tmp: plot_rows(rows, tmp, circuit=circ))
    if args.json:
        write_json(args.json, {"command": "brickwork", "args": vars(args) | {"func": None},
                               "environment": environment(), "rows": rows})
    return 0
