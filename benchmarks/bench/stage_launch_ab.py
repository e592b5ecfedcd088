"""Stage launches with and without per-launch copies, in one process (complex128, 28 qubits).

Each of QFT-28, QuantumVolume(28, seed=7) and brickwork(28, 2, 20) runs its default program
(L = 12, C = 3 rotating, pairs) two ways: every launch first copies its stage's op records and
slot maps from host memory (as launches did before :class:`~qsim_tc.stages.kernel.Pools`),
and the program uploaded once. Best of two rounds of five after a warm-up.

    python -m benchmarks.bench.stage_launch_ab --qubits 28
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from benchmarks.bench.auto import build
from benchmarks.bench.stages_gpu import best_time
from qsim_tc.stages import kernel as sk
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.program import build_program


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.stage_launch_ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=28)
    args = p.parse_args(argv)
    import cupy as cp  # noqa: PLC0415

    n, big_l = args.qubits, 12
    state = cp.zeros(1 << n, np.complex128)

    for cname in ("qft", "qv", "brickwork2"):
        circ, _ = build(cname, n)
        prog = build_program(plan_stages(circ, big_l, keep_low=3, rotate_low=True), 3, fuse_qubits=3, block_qubits=3,
                             itemsize=16, widen=True)

        def once(prog=prog):
            pools = sk.upload(prog, np.complex128)
            for i in range(len(prog.stages)):
                sk.run_stage(state, prog, i, pools, fresh=i == 0)

        def copied(prog=prog):
            pools = sk.upload(prog, np.complex128)
            for i, stage in enumerate(prog.stages):
                at = pools.ints_at[i]
                ops = pools.ops[pools.ops_at[i]:pools.ops_at[i] + max(stage.ops.size, 2)].get()
                ints = pools.ints[at:at + 3 * n - 2 * big_l].get()
                mine = dataclasses.replace(pools, ops=cp.asarray(ops), ints=cp.asarray(ints),
                                           ops_at=(0,) * len(prog.stages), ints_at=(0,) * len(prog.stages))
                sk.run_stage(state, prog, i, mine, fresh=i == 0)

        a, b, a2, b2 = (best_time(cp, fn, 5) * 1e3 for fn in (copied, once, copied, once))
        print(f"{cname:12s} per-launch copies {min(a, a2):7.2f} ms  uploaded once {min(b, b2):7.2f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
