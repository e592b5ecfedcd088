"""One sha256 over everything the stage pipeline builds on the host, and one over final states: a
check that a change of code layout left plans, programs and results bit for bit as they were.

For QFT (after H on every qubit), QuantumVolume(n, seed=7) and brickwork(n, 4, 10, seed=1) at each
width: the GPU decision (stage plan, its in-stage fusion and the kernel's program, for complex128
and complex64 with and without the widened complex128 programs; priced in reference passes, no GPU
needed) and the CPU decision with each stage as the CPU executor fuses it. Then the final states
of ``Simulator(device="cpu")`` runs on the same circuits at a small width, on every run path the
defaults and a few options reach (stages, gate path with ``backend="auto"``, a named backend,
the bounded engine), complex128 and complex64.

    python -m benchmarks.bench.program_hashes > benchmarks/results/program_hashes_before.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys

import numpy as np

from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit, qv_circuit
from circuits import brickwork
from qsim_tc import Simulator
from qsim_tc.stages.choice import decide, decide_cpu
from qsim_tc.stages.cpu import SHIPPED_FUSE_COST  # the shipped table: hashes alike on every run of a host
from qsim_tc.stages.fusion import fuse_stage


def _feed(h, obj) -> None:
    """Hash ``obj`` by value: arrays by dtype, shape and bytes; dataclasses field by field."""
    if isinstance(obj, np.ndarray):
        h.update(f"A{obj.dtype.str}{obj.shape}".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(f"D{type(obj).__name__}".encode())
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _feed(h, getattr(obj, f.name))
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for x in obj:
            _feed(h, x)
    elif isinstance(obj, dict):
        h.update(f"M{len(obj)}".encode())
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
    elif isinstance(obj, (np.generic, int, float, complex, str, bool)) or obj is None:
        h.update(repr(obj).encode())
    else:
        raise TypeError(f"cannot hash a {type(obj).__name__}")


def circuits(n: int) -> dict:
    return {f"qft{n}": prepend_hadamards(qft_circuit(n)[0]), f"qv{n}": qv_circuit(n, 7)[0],
            f"brickwork{n}": brickwork(n, 4, 10, seed=1)}


def plan_hashes(widths) -> dict[str, str]:
    out = {}
    for n in widths:
        for name, c in circuits(n).items():
            h = hashlib.sha256()
            # GPU: max_dense and block widths of the kernel (3 / 4 dense, 3 a block), sm_90 tensor cores
            for itemsize, dense, widen, wide in ((16, 3, True, None), (8, 4, False, None), (8, 4, False, (3, 3))):
                d = decide(c, dense, 1.0, 1e30, itemsize=itemsize, block_qubits=3, widen=widen, wide=wide)
                _feed(h, (d.use, d.why, d.predicted_ms, d.keep_low, d.wide, d.plan, d.program))
            for itemsize in (16, 8):
                d = decide_cpu(c, itemsize)
                _feed(h, (d.use, d.why, d.plan))
                if d.plan is not None:
                    _feed(h, [fuse_stage(s, d.plan.local_qubits, SHIPPED_FUSE_COST[itemsize]) for s in d.plan.stages])
            out[name] = h.hexdigest()
    return out


RUNS = {  # run path -> Simulator options (device="cpu")
    "default": {},
    "single": {"precision": "single"},
    "gates-auto": {"plan": None},
    "native": {"backend": "native", "plan": None},
    "native32-stages": {"backend": "native32"},
    "bounded": {"backend": "native", "plan": None, "workspace_bytes": 1 << 16},
    "fuse-3": {"fuse": 3},
}


def state_hashes(n: int) -> dict[str, str]:
    out = {}
    for name, c in circuits(n).items():
        for run, opts in RUNS.items():
            state = Simulator(device="cpu", **opts).run(c).state.to_numpy()
            out[f"{name}/{run}"] = hashlib.sha256(np.ascontiguousarray(state).tobytes()).hexdigest()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--widths", default="20,24,28", help="circuit widths of the plan hashes")
    p.add_argument("--state-qubits", type=int, default=16, help="width of the simulated circuits")
    args = p.parse_args(argv)
    plans = plan_hashes([int(w) for w in args.widths.split(",")])
    states = state_hashes(args.state_qubits)
    for k, v in {**plans, **states}.items():
        print(f"{k} {v}")
    total = hashlib.sha256("".join(f"{k}{v}" for k, v in sorted(plans.items())).encode()).hexdigest()
    print(f"plans+programs {total}")
    total = hashlib.sha256("".join(f"{k}{v}" for k, v in sorted(states.items())).encode()).hexdigest()
    print(f"states {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
