"""``qsim-tc run``: simulate an OpenQASM file on a backend; sample it, compare with a reference."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import numpy as np

import gemm
from circuits import Circuit, from_qiskit
from circuits.errors import CircuitError
from circuits.qasm import parse_qasm
from qsim_tc import Simulator, accuracy
from qsim_tc.accuracy import plot_rows, precision_class
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
from qsim_tc.cli.expression import evaluate
from qsim_tc.dynamic import DYNAMIC_NO_BOUND, Runner, compile_circuit, needs_runner
from qsim_tc.environment import environment
from qsim_tc.reference import simulate_dd
from qsim_tc.state import SAMPLE_BYTES_PER_SHOT, check_shots


def register(sub) -> None:
    p = sub.add_parser("run", help="simulate an OpenQASM 2 (or 3) file")
    p.add_argument("file", metavar="FILE.qasm", help="OpenQASM program")
    p.add_argument("--backend", default="auto", help=f"auto (per block the fastest method of --precision on this "
                   f"device) or a GEMM method ({', '.join(gemm.methods())}); on a CPU the emulated ones take 5-200x as "
                   "long as native")
    add_precision(p)
    add_tolerance(p)
    add_device(p)
    p.add_argument("--shots", type=int, default=0,
                   help="sample this many shots of the measured bits (all qubits if nothing is measured)")
    p.add_argument("--seed", type=int, default=None, help="seed of the samples (default: fresh entropy)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="bind the circuit parameter NAME (an OpenQASM 3 'input float NAME;') to VALUE, a number "
                        "or an OpenQASM expression (pi/2, -3*tau/8, sqrt(2)/2); repeat for each parameter")
    p.add_argument("--reference", default=None, metavar="METHOD",
                   help="also simulate with METHOD (dd: the double-double reference) and report the errors")
    p.add_argument("--explain", action="store_true",
                   help="with --backend auto: print each block's method, predicted and measured time, and why")
    p.add_argument("--plot", metavar="FILE.png", help="plot the errors and time of the run against --reference "
                   "(needs matplotlib and --reference)")
    add_fuse(p)
    add_workspace(p)  # imported circuits are mostly small gates: fusing pays
    p.add_argument("--top", type=int, default=10, help="how many of the most frequent outcomes to print")
    add_backend_options(p)
    p.add_argument("--json", metavar="FILE", help="write the result, errors and counts as JSON")
    p.set_defaults(func=run)


def _parse_params(items) -> dict[str, float]:
    """``["theta=0.5", ...]`` -> ``{"theta": 0.5}``; a clear error for a malformed item."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--param takes NAME=VALUE, got {item!r}")
        try:
            out[name] = evaluate(value)
        except ValueError as exc:
            raise ValueError(f"--param {name}: {exc}") from None
    return out


def _load(path: str, params: dict):
    """The circuit of an OpenQASM file, with ``params`` bound (through Qiskit) when given: a
    :class:`circuits.Circuit`, or a :class:`qsim_tc.dynamic.Program` where it measures
    mid-circuit, resets or branches on classical bits."""
    try:
        if params and not os.path.isfile(path):
            raise FileNotFoundError(f"no such file: {path}")
        qc = parse_qasm(Path(path) if params else path)  # the checks and includes of from_qasm
        if params:
            by_name = {p.name: p for p in qc.parameters}
            unknown = sorted(set(params) - set(by_name))
            if unknown:
                raise ValueError(f"--param names {', '.join(unknown)}, not parameters of {path}; its parameters: "
                                 f"{', '.join(sorted(by_name)) or 'none'}")
            qc = qc.assign_parameters({by_name[k]: v for k, v in params.items()})
            qc.name = Path(path).stem
        return compile_circuit(qc) if needs_runner(qc) else from_qiskit(qc)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from exc
    except CircuitError as exc:
        if "unbound parameter" in str(exc):
            raise ValueError(f"{exc}; on the command line: --param NAME=VALUE for each") from exc
        raise
    except ImportError as exc:  # OpenQASM 3 without its parser: the message says what to install
        raise RuntimeError(str(exc)) from exc


def _run_dynamic(args, program, sim) -> int:
    """A program with mid-circuit measurements, resets or classical control: all ``--shots`` shots
    with shot branching (:class:`qsim_tc.dynamic.Runner`, as ``QsimTcBackend`` runs it)."""
    unsupported = [flag for flag, on in (("--reference", args.reference), ("--explain", args.explain),
                                         ("--plot", args.plot), ("--tolerance", args.tolerance is not None)) if on]
    if unsupported:
        raise ValueError(f"{args.file} measures mid-circuit, resets or branches on classical bits; it runs with "
                         f"--shots only, not {', '.join(unsupported)}")
    if not args.shots:
        raise ValueError(f"{args.file} measures mid-circuit, resets or branches on classical bits: its outcome is "
                         "a distribution of shots; give --shots N")
    print(f"{args.file}: {program.n_qubits} qubits, {program.n_clbits} classical bits, dynamic (mid-circuit "
          f"measurement, reset or classical control); backend {args.backend}, device {sim.device.name} "
          f"({sim.device.reason})")
    t0 = time.perf_counter()
    runner = Runner(sim, np.random.default_rng(args.seed))
    outcome = runner.run(program, args.shots)
    wall = time.perf_counter() - t0
    width = max(1, program.n_clbits)
    counts = Counter(format(int(v), f"0{width}b") for v in outcome.clbits)
    print(f"{args.shots} shots in {wall:.3f} s, at most {outcome.branches} state(s) held at once")
    print(f"error: no bound ({DYNAMIC_NO_BOUND})")
    print(f"counts ({args.shots} shots, measured clbits, bit 0 rightmost):")
    key_width = max(len(k) for k in counts)
    for key, c in counts.most_common(args.top):
        print(f"  {key:>{key_width}s} {c}")
    if args.json:
        write_json(args.json, {"command": "run", "args": vars(args) | {"func": None}, "environment": environment(),
                               "dynamic": True, "wall_s": wall, "branches": outcome.branches,
                               "error": {"l2_bound": None, "no_bound": DYNAMIC_NO_BOUND}, "counts": dict(counts)})
    return 0


def run(args) -> int:
    if args.shots < 0:
        raise ValueError(f"--shots must be >= 0, got {args.shots}")
    if args.shots:  # before the run: the samples and their counts must fit in memory
        check_shots(args.shots, "--shots", bytes_per_shot=2 * SAMPLE_BYTES_PER_SHOT)
    params = _parse_params(args.param)
    methods = methods_of([args.backend])
    check_options_used(args, methods)
    precision = precision_option(args, args.backend)
    tolerance = tolerance_option(args, args.backend)
    if args.explain and args.backend != "auto":
        raise ValueError(f"--explain shows the choices of --backend auto; backend {args.backend!r} makes none")
    if args.plot and not args.reference:
        raise ValueError("--plot draws the run's errors against a reference: add --reference dd (or a method)")
    check_outputs(args)
    circ = _load(args.file, params)
    dynamic = not isinstance(circ, Circuit)
    if launched_ranks() > 1:
        if dynamic:
            raise ValueError(f"{args.file} measures mid-circuit, resets or branches on classical bits; under "
                             "mpiexec, run takes unitary circuits only")
        if args.shots or args.reference or args.explain or args.tolerance is not None:
            raise ValueError("under mpiexec, run simulates the circuit only (no --shots, --reference, --explain or "
                             "--tolerance yet)")
        return run_ranks(args, circ, args.backend, args.file)
    options = backend_options(args, methods[0]) if methods else {}
    tol = {} if tolerance is None else {"tolerance": tolerance}
    sim = Simulator(args.backend, device=args.device, precision=precision, fuse=fuse_option(args),
                    plan=plan_option(args), workspace_bytes=args.max_workspace, **tol, **options)
    if dynamic:
        return _run_dynamic(args, circ, sim)
    print(f"{args.file}: {circ.n_qubits} qubits, {len(circ)} gates, {len(circ.measured)} measured bit(s); "
          f"backend {args.backend}, device {sim.device.name} ({sim.device.reason})")
    result = run_or_hint(sim, circ, args, Progress(f"{args.backend}"))
    print_stages(result)
    st = result.state
    if sim.fusion_choice is not None:
        ch = sim.fusion_choice
        print(f"fusion: auto -> d={ch.max_qubits}, min width {ch.min_qubits} ({ch.n_blocks} blocks, "
              f"estimated {ch.estimated_ms:.0f} ms vs {ch.unfused_ms:.0f} ms unfused)"
              + (f"; {ch.note}" if ch.note else ""))
    print(time_text(result, len(circ)))
    if "auto" in result.metadata:
        auto = result.metadata["auto"]
        print(f"auto ({auto['precision']}): " + ", ".join(f"{k} x{v}" for k, v in auto["blocks_per_method"].items()))
    if error_text(result) is not None:
        print(error_text(result))
    print(f"norm: {st.norm():.15f}")
    print(f"amplitude[0] = {st.amplitude(0):.6e}")
    payload = {"command": "run", "args": vars(args) | {"func": None}, "environment": environment(),
               "result": result.to_dict(gates=False, steps=True), "norm": st.norm(),
               "amp0": [st.amplitude(0).real, st.amplitude(0).imag]}
    if sim.fusion_choice is not None:
        payload["fusion"] = sim.fusion_choice.to_dict()
    if sim.stage_decision is not None:
        payload["stages"] = sim.stage_decision.to_dict()
    if args.explain:
        print(explain_table(result.metadata["blocks"]))
        if error_steps_table(result) is not None:
            print(error_steps_table(result))
    if args.reference:
        metrics, ref_s = _compare(st, circ, args)
        payload["reference"] = {"method": args.reference, **metrics}
        if args.plot:
            row = {"backend": args.backend, "precision": precision_class(sim), "device": sim.device.name,
                   "time_s": result.wall_s, **metrics}
            rows = [row] + ([{"backend": "dd (reference)", "precision": "dd", "device": sim.device.name,
                              "time_s": ref_s}] if args.reference == "dd" else [])
            write_plot(args.plot, lambda tmp: plot_rows(rows, tmp, circuit=circ))
    if args.shots:
        counts = _counts(st, circ, args.shots, args.seed)
        width = max(len(k) for k in counts)
        print(f"counts ({args.shots} shots, {'measured clbits' if circ.measured else 'all qubits'}, "
              f"bit 0 rightmost):")
        for key, c in counts.most_common(args.top):
            print(f"  {key:>{width}s} {c}")
        payload["counts"] = dict(counts)
    if args.json:
        write_json(args.json, payload)
    return 0


def _compare(state, circ, args) -> tuple[dict, float]:
    """The error metrics of ``state`` against the reference run, and that run's seconds."""
    if args.reference == "dd":
        ref = simulate_dd(circ, device=args.device)
        ref_s = ref.wall_s
    else:
        res = Simulator(args.reference, device=args.device).run(circ)
        ref, ref_s = res.state.data(), res.wall_s
    m = accuracy.compare(state, ref)
    print(f"vs {args.reference}: max_rel {m['max_rel']:.3e}, l2_rel {m['l2_rel']:.3e}, "
          f"infidelity {m['infidelity']:.3e}, amp0_real_rel {m['amp0_real_rel']:.3e}")
    return m, ref_s


def _counts(state, circ, shots: int, seed) -> Counter:
    """Counts of the measured classical bits (Qiskit's bit strings: clbit 0 rightmost)."""
    if circ.measured:
        qargs = sorted({q for q, _ in circ.measured})
        slot = {q: i for i, q in enumerate(qargs)}
        samples = state.sample(shots, seed=seed, qubits=qargs)
        values = np.zeros(shots, dtype=object)
        for q, c in circ.measured:
            values = values + (((samples >> slot[q]) & 1).astype(object) << c)
        width = circ.n_clbits
    else:
        values = state.sample(shots, seed=seed)
        width = circ.n_qubits
    return Counter(format(int(v), f"0{width}b") for v in values)
