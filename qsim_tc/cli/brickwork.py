"""``qsim-tc brickwork``: simulate a brickwork random circuit and print time and results."""

from __future__ import annotations


import gemm
from circuits import brickwork
from qsim_tc import Simulator
from qsim_tc.cli.common import Progress, add_backend_options, add_device, backend_options, environment, write_json


def register(sub) -> None:
    p = sub.add_parser("brickwork", help="simulate a brickwork circuit of Haar-random d-qubit gates")
    p.add_argument("--qubits", type=int, required=True, help="number of qubits N")
    p.add_argument("--gate-qubits", type=int, default=4, help="qubits per gate d")
    p.add_argument("--depth", type=int, default=10, help="number of layers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--periodic", action="store_true", help="wrap blocks around the last qubit")
    p.add_argument("--backend", default="native", help=f"GEMM method ({', '.join(gemm.methods())})")
    add_device(p)
    add_backend_options(p)
    p.add_argument("--json", metavar="FILE", help="write the result and per-gate statistics as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    circ = brickwork(args.qubits, args.gate_qubits, args.depth, args.seed, periodic=args.periodic)
    method = gemm.get_method(args.backend)
    sim = Simulator(args.backend, device=args.device, **backend_options(args, method))
    print(f"brickwork: {args.qubits} qubits, d={args.gate_qubits}, depth {args.depth}, {len(circ)} gates, "
          f"backend {args.backend}, device {sim.device.name} ({sim.device.reason})")
    result = sim.run(circ, progress=Progress("simulating"))
    st = result.state
    probs = st.probabilities()
    top = int(st.xp.argmax(probs))
    print(f"time: {result.wall_s:.3f} s wall, {result.gate_time_ms:.1f} ms in gates "
          f"({result.gate_time_ms / max(len(circ), 1):.2f} ms/gate)")
    print(f"norm: {st.norm():.15f}")
    print(f"amplitude[0] = {st.amplitude(0):.6e}")
    print(f"most likely basis state: {top} (p = {float(probs[top]):.3e}, uniform 2^-N = {2.0**-args.qubits:.3e})")
    paths = {}
    for s in result.stats:
        paths[s.info.path] = paths.get(s.info.path, 0) + 1
    print("gate paths: " + ", ".join(f"{k} x{v}" for k, v in sorted(paths.items())))
    if args.json:
        payload = {"command": "brickwork", "args": vars(args) | {"func": None}, "environment": environment(),
                   "result": result.to_dict(), "amp0": [st.amplitude(0).real, st.amplitude(0).imag],
                   "norm": st.norm()}
        write_json(args.json, payload)
    return 0
