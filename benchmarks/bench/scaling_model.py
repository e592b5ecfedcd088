"""Weak scaling of the distributed state vector: expected time and efficiency on 2^g GPUs.

Each GPU (rank) holds L local qubits, so 2^g GPUs hold N = L + g. The circuit is planned twice:
as :func:`qsim_tc.distributed.run.run_distributed` plans it now (``plan_distributed(circuit, L)``:
free relabels, chosen initial layout, widened exchanges) and as it did before (the stage planner's
plan as it is, ``exchange_plan="stages"``); nothing is simulated and no state is allocated, so
the model runs on any CPU in seconds. Per rank:

  compute  = sum over stages of sweeps(the stage's L-qubit circuit) * t_pass
  pairwise = sum over swaps of [ (half a slice) / bandwidth(swapped bit) + t_pass ]   (before)
  alltoall = sum over exchanges of
             [ bytes to other nodes / ib + bytes to this node's GPUs / nvlink + t_pass ]  (now)

t_pass is one read+write pass over the slice (2^L amplitudes); the extra t_pass per exchange is
the local copying (qsim_tc.distributed.exchange packs a strided half into piece buffers, and NCCL
receives into a buffer copied over the piece): one pass at most, half for a contiguous half. A swapped global bit j (physical bit L + j, bit j of the rank) is a node-level bit when
2^j >= GPUs per node: ranks are numbered node by node, so the low rank bits pick a GPU inside a
node. sweeps() is the project's stage model (qsim_tc.stages.choice: a pass per stage plus a
weight per kernel op, fitted on an H100) where every gate fits the stage kernel, else one pass
per gate (brickwork d = 4 at 28 qubits: 65 gates took 191 ms = 67 passes on an H100), whichever
is less. The busiest rank is modelled: every global control of the rank is 1.

Efficiencies: ``eff`` = compute / (compute + communication) at that size, the share of time spent
on the circuit; ``weak`` = T(1 GPU, L qubits) / T(2^g GPUs, L + g qubits), as read off a weak
scaling plot such as Atlas's (SC'24); it also counts the larger circuit's extra gates.

    python -m benchmarks.bench.scaling_model
    python -m benchmarks.bench.scaling_model --dtype complex64 --measured m.json --json out.json

A measured-values file (JSON) may set any of "sweep_ms", "nvlink_gbps", "ib_gbps", "gpus_per_node";
command-line options override it. docs/scaling.md explains the model and its sources.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import numpy as np

from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit
from benchmarks.common import parse_range, write_results
from circuits import Circuit, Gate, brickwork
from qsim_tc.distributed.plan import plan_distributed
from qsim_tc.stages.choice import decide
from qsim_tc.stages.plan import RELABEL
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL, classify, controlled_matrix

MODULE = "benchmarks.bench.scaling_model"

# Defaults, each overridable (docs/scaling.md cites them in full).
DEFAULTS = {
    # one read+write pass of a 28-qubit complex128 state on an H100 (cupy copy; measured)
    "sweep_ms": 2.86,
    # H100 SXM NVLink4: 450 GB/s a direction in spec, ~380 GB/s measured GPU to GPU (NVIDIA/nccl#1264)
    "nvlink_gbps": 380.0,
    # InfiniBand NDR, one 400 Gb/s NIC a GPU: NCCL's rule of thumb, 24 GB/s per 200 Gb/s NIC
    # (NVIDIA/nccl-tests#119), gives 48 GB/s
    "ib_gbps": 48.0,
    # a DGX/HGX H100 node
    "gpus_per_node": 8,
}
SWEEP_QUBITS = 28  # the size sweep_ms is given for (complex128)
MAX_DENSE = {16: 3, 8: 4}  # widest dense op of the GPU stage kernel by amplitude bytes (stage_choice)


@dataclass(frozen=True)
class Machine:
    """What the model needs of the hardware (all per GPU)."""

    sweep_ms: float  # one read+write pass of a 28-qubit complex128 state
    nvlink_gbps: float  # inside a node, one direction (exchanges are full duplex)
    ib_gbps: float  # between nodes, one direction
    gpus_per_node: int

    def pass_ms(self, local_qubits: int, itemsize: int) -> float:
        """One pass over a rank's slice: bandwidth-bound, so proportional to its bytes."""
        return self.sweep_ms * 2.0 ** (local_qubits - SWEEP_QUBITS) * itemsize / 16

    def link_gbps(self, global_bit: int) -> float:
        """Bandwidth of the exchange across rank bit ``global_bit``."""
        return self.ib_gbps if (1 << global_bit) >= self.gpus_per_node else self.nvlink_gbps


def benchmark_circuits(n: int) -> dict[str, tuple[Circuit, str]]:
    """The circuits of benchmarks.bench.stages at width n: QFT after H, brickwork d = 4 depth 10."""
    qft, src = qft_circuit(n)
    return {"qft": (prepend_hadamards(qft), f"QFT-{n} after H ({src})"),
            "brickwork": (brickwork(n, 4, 10, seed=1), f"brickwork({n}, 4, 10, seed=1)")}


def rank_circuits(plan, local_qubits: int) -> list[Circuit]:
    """Each stage's gates as the L-qubit circuit the busiest rank runs (as run.py builds them, with
    every global bit of the rank taken as 1: global controls enable their gates)."""
    big_l = local_qubits
    out = []
    for stage in plan.stages:
        circ = Circuit(big_l)
        for op in stage.ops:
            if op.kind == RELABEL:
                continue  # renames qubits, moves nothing
            s, pos = op.structure, list(op.positions)
            if op.kind == DIAGONAL:
                local = [j for j, p in enumerate(pos) if p < big_l]
                if not local:
                    continue  # a phase on the whole slice: free
                fixed = sum(1 << j for j, p in enumerate(pos) if p >= big_l)
                idx = [fixed | sum(((v >> m) & 1) << j for m, j in enumerate(local)) for v in range(1 << len(local))]
                circ.append(Gate(np.diag(np.asarray(s.diagonal)[idx]), tuple(pos[j] for j in local), "diag",
                                 check_unitary=False))
            elif op.kind == CONTROLLED:
                bits = [b for b in s.controls if pos[b] < big_l] + list(s.targets)
                circ.append(Gate(controlled_matrix(s, bits), tuple(pos[b] for b in bits), "cu", check_unitary=False))
            else:
                circ.append(Gate(np.asarray(s.target_matrix), tuple(pos), "u", check_unitary=False))
        out.append(circ)
    return out


def sweeps(circ: Circuit, itemsize: int) -> float:
    """Passes over the slice to run ``circ``: the stage model where it applies, else one a gate."""
    if not len(circ):
        return 0.0
    gate_path = float(len(circ))
    # the model's unit is a complex128 pass: in passes of this slice's own precision, 16 / itemsize
    d = decide(circ, MAX_DENSE[itemsize], 16 / itemsize, gate_path, itemsize=itemsize)
    return gate_path if d.predicted_ms is None else min(gate_path, d.predicted_ms)


def exchange_ms(bits: list[int], local_qubits: int, itemsize: int, m: Machine, batched: bool) -> tuple[float, float]:
    """(milliseconds, bytes sent by a rank) to swap the global ``bits`` (rank bits) in one stage."""
    slice_bytes = itemsize * 2.0 ** local_qubits
    t_pass = m.pass_ms(local_qubits, itemsize)
    if not bits:
        return 0.0, 0.0
    if not batched:
        # as built: one Sendrecv of half the slice with the partner across each bit, in turn
        half = slice_bytes / 2
        return sum(half / (m.link_gbps(b) * 1e9) * 1e3 + t_pass for b in bits), half * len(bits)
    # one all-to-all over the 2^k ranks that differ in these bits: a rank keeps 2^-k of its slice
    k_inter = sum((1 << b) >= m.gpus_per_node for b in bits)
    k_intra = len(bits) - k_inter
    to_other_nodes = slice_bytes * (1 - 2.0 ** -k_inter)
    to_this_node = slice_bytes * 2.0 ** -k_inter * (1 - 2.0 ** -k_intra)
    ms = (to_other_nodes / m.ib_gbps + to_this_node / m.nvlink_gbps) / 1e9 * 1e3 + t_pass
    return ms, to_other_nodes + to_this_node


@dataclass(frozen=True)
class Row:
    """One circuit at one GPU count (times in ms, bytes per rank)."""

    circuit: str
    gpus: int
    n_qubits: int
    stages: int
    swaps_intra: int
    swaps_inter: int
    stages_before: int
    exchanges_before: int
    exchanges: int
    compute_before_ms: float
    compute_ms: float
    pairwise_ms: float
    pairwise_bytes: float
    alltoall_ms: float
    alltoall_bytes: float

    def total_ms(self, batched: bool) -> float:
        """As built now (``batched``: the distributed plan, all-to-all exchanges) or before (the
        stage planner's plan, pairwise swaps)."""
        return self.compute_ms + self.alltoall_ms if batched else self.compute_before_ms + self.pairwise_ms


def model(name: str, n_qubits: int, local_qubits: int, itemsize: int, m: Machine) -> Row:
    """Plan the named circuit at N = n_qubits over 2^(N-L) ranks and price it twice: as built
    before (the stage planner's plan, a pairwise exchange a swapped bit) and now (the distributed
    plan of run_distributed, one all-to-all a stage with moves)."""
    circ, _ = benchmark_circuits(n_qubits)[name]
    structures = [classify(g.matrix) for g in circ.gates]
    before = plan_distributed(circ, local_qubits, structures=structures, search=False)
    plan = plan_distributed(circ, local_qubits, structures=structures)
    t_pass = m.pass_ms(local_qubits, itemsize)
    compute_before = sum(sweeps(c, itemsize) for c in rank_circuits(before, local_qubits)) * t_pass
    compute = sum(sweeps(c, itemsize) for c in rank_circuits(plan, local_qubits)) * t_pass
    pair_ms = pair_b = a2a_ms = a2a_b = 0.0
    for moves in before.moves:
        ms, b = exchange_ms([g - local_qubits for _, g in moves], local_qubits, itemsize, m, batched=False)
        pair_ms, pair_b = pair_ms + ms, pair_b + b
    intra = inter = 0
    for moves in plan.moves:
        bits = [g - local_qubits for _, g in moves]
        inter += sum((1 << b) >= m.gpus_per_node for b in bits)
        intra += sum((1 << b) < m.gpus_per_node for b in bits)
        ms, b = exchange_ms(bits, local_qubits, itemsize, m, batched=True)
        a2a_ms, a2a_b = a2a_ms + ms, a2a_b + b
    return Row(name, 1 << (n_qubits - local_qubits), n_qubits, len(plan.stages), intra, inter, len(before.stages),
               before.exchanges, plan.exchanges, compute_before, compute, pair_ms, pair_b, a2a_ms, a2a_b)


def machine_from(args) -> Machine:
    """Defaults, then the measured-values file, then command-line options."""
    values = dict(DEFAULTS)
    if args.measured:
        with open(args.measured) as f:
            measured = json.load(f)
        unknown = sorted(set(measured) - set(DEFAULTS))
        if unknown:
            raise SystemExit(f"--measured {args.measured}: unknown keys {unknown}; known: {sorted(DEFAULTS)}")
        values.update(measured)
    for key in DEFAULTS:
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if int(values["gpus_per_node"]) < 1 or int(values["gpus_per_node"]) & (int(values["gpus_per_node"]) - 1):
        raise SystemExit(f"gpus_per_node must be a power of two, got {values['gpus_per_node']}")
    return Machine(float(values["sweep_ms"]), float(values["nvlink_gbps"]), float(values["ib_gbps"]),
                   int(values["gpus_per_node"]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--local", type=int, default=28, help="local qubits per GPU, L (default 28)")
    p.add_argument("--dtype", default="complex128", choices=("complex128", "complex64"))
    p.add_argument("--gpus", default="1,2,8,64,512", help="GPU counts, powers of two (default 1,2,8,64,512)")
    p.add_argument("--circuits", default="qft,brickwork", help="of qft, brickwork (default both)")
    p.add_argument("--measured", metavar="FILE", help="JSON of measured values (keys: " + ", ".join(DEFAULTS) + ")")
    p.add_argument("--sweep-ms", dest="sweep_ms", type=float, help="28-qubit complex128 pass, ms (default 2.86)")
    p.add_argument("--nvlink-gbps", dest="nvlink_gbps", type=float, help="intra-node GB/s per GPU (default 380)")
    p.add_argument("--ib-gbps", dest="ib_gbps", type=float, help="inter-node GB/s per GPU (default 48)")
    p.add_argument("--gpus-per-node", dest="gpus_per_node", type=int, help="GPUs per node (default 8)")
    p.add_argument("--json", metavar="FILE", help="write the table and the machine as JSON")
    args = p.parse_args(argv)
    m = machine_from(args)
    itemsize = np.dtype(args.dtype).itemsize
    counts = parse_range(args.gpus)
    if any(c < 1 or c & (c - 1) for c in counts):
        raise SystemExit(f"--gpus must be powers of two, got {counts}")
    names = [c.strip() for c in args.circuits.split(",")]
    if any(c not in ("qft", "brickwork") for c in names):
        raise SystemExit(f"--circuits: known circuits are qft, brickwork; got {names}")

    print(f"L = {args.local} local qubits, {args.dtype}; pass {m.pass_ms(args.local, itemsize):.2f} ms, "
          f"NVLink {m.nvlink_gbps:g} GB/s, inter-node {m.ib_gbps:g} GB/s, {m.gpus_per_node} GPUs a node")
    print(f"{'circuit':10s}{'GPUs':>5s}{'N':>4s}{'stages':>7s}{'exch':>5s}{'GB/rank':>8s}{'compute':>8s}"
          f"{'pairwise':>9s}{'eff':>6s}{'weak':>6s} |{'stages':>7s}{'exch':>5s}{'bits in/out':>12s}{'GB/rank':>8s}{'compute':>8s}"
          f"{'all2all':>8s}{'eff':>6s}{'weak':>6s}")
    rows = []
    for name in names:
        base = None
        for gpus in counts:
            row = model(name, args.local + gpus.bit_length() - 1, args.local, itemsize, m)
            base = base or row  # the first count given is the weak-scaling reference (1 GPU by default)
            pw, a2a = row.total_ms(False), row.total_ms(True)
            out = asdict(row) | {"pairwise_eff": row.compute_before_ms / pw, "pairwise_weak": base.total_ms(False) / pw,
                                 "alltoall_eff": row.compute_ms / a2a, "alltoall_weak": base.total_ms(True) / a2a}
            rows.append(out)
            print(f"{name:10s}{gpus:5d}{row.n_qubits:4d}{row.stages_before:7d}{row.exchanges_before:5d}"
                  f"{row.pairwise_bytes / 1e9:8.1f}{row.compute_before_ms:8.0f}{row.pairwise_ms:9.0f}"
                  f"{out['pairwise_eff']:6.2f}{out['pairwise_weak']:6.2f} |{row.stages:7d}{row.exchanges:5d}"
                  f"{row.swaps_intra:6d}/{row.swaps_inter:<5d}{row.alltoall_bytes / 1e9:8.1f}{row.compute_ms:8.0f}"
                  f"{row.alltoall_ms:8.0f}{out['alltoall_eff']:6.2f}{out['alltoall_weak']:6.2f}")
    print("times in ms per rank. Left: before (the stage planner's plan, one pairwise exchange of half a slice "
          "per swapped bit); right: as built now (the distributed plan, one all-to-all per exchange); "
          "eff = compute / total, weak = T(first count) / T")
    if args.json:
        write_results(args.json, {"local_qubits": args.local, "dtype": args.dtype, "machine": asdict(m),
                                  "rows": rows}, module=MODULE, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
