"""One stage of a default ``Simulator`` program, launched on its own for a profiler.

Runs the circuit once through ``Simulator(precision=...)`` (the stage kernel form under test set
first), then launches stage ``--stage`` of the program it chose ``--launches`` times on a state of
the same size, between ``cudaProfilerStart`` and ``cudaProfilerStop``, so a profiler started with
collection off sees only those:

    ncu --profile-from-start off --clock-control none --kernel-name stage_kernel --launch-count 1 \\
        --section SpeedOfLight --section InstructionStats --section MemoryWorkloadAnalysis_Tables \\
        python -m benchmarks.bench.stage_profile --circuit qv --form tc --stage 5
"""

from __future__ import annotations

import argparse

from benchmarks.bench.auto import build


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.stage_profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=28)
    p.add_argument("--circuit", default="qv")
    p.add_argument("--precision", default="single")
    p.add_argument("--form", default="default",
                   help="'default', 'fma' (complex64 tensor-core ops off) or 'tc' (on)")
    p.add_argument("--stage", type=int, default=5)
    p.add_argument("--launches", type=int, default=3)
    args = p.parse_args(argv)
    import cupy as cp  # noqa: PLC0415

    from qsim_tc import Simulator  # noqa: PLC0415
    from qsim_tc.stages import kernel  # noqa: PLC0415

    if args.form == "fma":
        kernel.MMA_GPU[8] = False
    elif args.form == "tc":
        kernel.MMA_GPU[8] = True
    circ, desc = build(args.circuit, args.qubits)
    sim = Simulator(precision=args.precision)
    sim.run(circ)
    d = sim.stage_decision
    if d is None or not d.use:
        raise SystemExit(f"{desc} did not run as stages: {d.why if d else 'no decision'}")
    program = d.program
    stage = min(args.stage, len(program.stages) - 1)
    state = cp.zeros(1 << args.qubits, dtype=sim.dtype)
    state[: 1 << 12] = 1.0 / 64
    pools = kernel.upload(program, state.dtype, d.wide)
    print(f"{desc}: {d.why}; the run launched {len(program.stages)} stage kernels; profiling stage {stage} "
          f"({len(program.stages[stage].ops)} ops), launches {len(program.stages)} .. "
          f"{len(program.stages) + args.launches - 1}", flush=True)
    cp.cuda.Device().synchronize()
    # only these launches are profiled under ``ncu --profile-from-start off``
    cp.cuda.profiler.start()
    for _ in range(args.launches):
        kernel.run_stage(state, program, stage, pools)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
