"""A/B comparisons of the CPU stage executor, each pair alternating in one process.

``--compare chunk``: the chunk with and without the L2 cap. For each circuit and dtype, the
Simulator's plan (``stage_choice.decide_cpu``) run by ``run_stages`` at the default chunk (``stages.cpu.default_block_bytes``, which keeps a chunk to
half of a large L2: ``stages.host_cache.l2_chunk_cap``) and at the chunk the rule gave before
the cap (the same call with no L2). The repeats alternate between the two, so that a slow spell
of a shared host touches both; the minimum is kept. The states must agree (1e-4 complex64,
1e-12 complex128) before a time is reported.

``--compare canonicalize``: putting the state back into logical order after the stages, numpy's
in-place permutation against the compiled gather into the spare buffer
(``stages.cpu.canonicalize``). The plan is run once on a ``PhysicalState``; its final layout is
then undone from copies of that state, alternately by the engine's own permutation
(``PhysicalState.canonicalize`` with no spare buffer) and by the gather. Both results must
equal bit for bit.

``--compare local``: the Simulator's plan at its default chunk beside the plans of L = 12, 13, 15
and 16 local qubits, each at the smallest chunk its lanes allow (one vector of lanes): fewer
stages against a larger chunk.

``--compare load``: the Simulator's plan and chunk with the chunk load by vectors
(``stages.cpu.VECTOR_LOAD``) and the gather into logical order by a chunk that
holds the source's low qubits (``stages.cpu.CANON_SOURCE_BITS``), against the element-by-element
load through run tables and the plain chunk of low logical bits, alternating; then both again
with every stage's ops taken out (the loads and stores alone).

``--compare gather``: the same for the vectors whose amplitudes come from several places: one load
an amplitude merged by shuffles (the default) against the hardware gather
(``stages.cpu.HARDWARE_GATHER``).

``--compare gap``: the chunk's imaginary half ``stages.cpu.IM_GAP_BYTES`` after its real half's
end (the default) against right after it, as two separate arrays had put them (a multiple of 4
KiB apart).

``--compare fresh``: a run from |0...0> whose first stage makes its chunks (the default) against
one from a zeroed state that its first stage reads.

``--compare fusion``: the host's fusion costs (``stages.cpu.host_fuse_costs``: this host's
calibrated table where ``qsim-tc calibrate --device cpu`` measured one, else a shipped table for
this CPU where one was measured) against the table of its vector width alone, and against the
shipped table where the host's is calibrated.

    python -m benchmarks.bench.cpu_stage_ab --compare chunk --json benchmarks/results/stages_cpu_chunk_ab.json
    python -m benchmarks.bench.cpu_stage_ab --compare canonicalize --json benchmarks/results/stages_cpu_canonicalize_ab.json
    python -m benchmarks.bench.cpu_stage_ab --compare load --json benchmarks/results/stages_cpu_load_ab.json
    python -m benchmarks.bench.cpu_stage_ab --compare gather --json benchmarks/results/stages_cpu_gather_ab.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import gemm
from benchmarks.bench.auto import build
from benchmarks.bench.cpu_vs_qsim import host_cpu
from benchmarks.common import write_results
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages import cpu_kernels
from qsim_tc.stages.choice import decide_cpu
from qsim_tc.stages.cpu import canonicalize, default_block_bytes, run_stages
from qsim_tc.stages.host_cache import l2_chunk_cap
from qsim_tc.stages.plan import plan_stages

MODULE = "benchmarks.bench.cpu_stage_ab"
TOL = {8: 1e-4, 16: 1e-12}


def _alternate(cases: dict, dtype, n: int, threads: int, repeats: int, label: str, *,
               check: bool = True) -> dict[str, list[float]]:
    """Seconds of each case (name -> (plan, chunk bytes[, a setting applied before each run])) from
    |0...0>, the repeats alternating between the cases after one warm-up each; every state is
    checked against the first case's (unless not ``check``)."""
    item = np.dtype(dtype).itemsize

    def go(case):
        plan, chunk, *setup = case
        if setup:
            setup[0]()
        psi = np.zeros(1 << n, dtype)
        psi[0] = 1
        t0 = time.perf_counter()
        out = run_stages(psi, plan, block_bytes=chunk, threads=threads)
        return time.perf_counter() - t0, out

    first = next(iter(cases))
    ref = go(cases[first])[1].copy()
    for case in cases.values():
        go(case)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for k, case in cases.items():
            dt, out = go(case)
            err = float(np.abs(out - ref).max()) if check else 0.0
            if err > TOL[item]:
                raise SystemExit(f"{label} {np.dtype(dtype).name}: {k} differs from {first} by {err:.3g}")
            times[k].append(dt)
    return times


def compare_chunk(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    circ, desc = build(name, n)
    item = np.dtype(dtype).itemsize
    plan = decide_cpu(circ, item, always=True).plan
    chunks = {"no_l2_cap": default_block_bytes(item, plan.local_qubits, threads, l2_bytes=None),
              "default": default_block_bytes(item, plan.local_qubits, threads)}
    times = _alternate({k: (plan, c) for k, c in chunks.items()}, dtype, n, threads, repeats, desc)
    return {"circuit": name, "description": desc, "dtype": np.dtype(dtype).name, "n": n,
            "local_qubits": plan.local_qubits, "stages": plan.n_stages,
            **{f"{k}_chunk_bytes": v for k, v in chunks.items()},
            **{f"{k}_s": min(v) for k, v in times.items()}, **{f"{k}_all_s": v for k, v in times.items()},
            "ratio_default_to_no_cap": min(times["default"]) / min(times["no_l2_cap"])}


def compare_canonicalize(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    circ, desc = build(name, n)
    plan = decide_cpu(circ, np.dtype(dtype).itemsize, always=True).plan
    psi = np.zeros(1 << n, dtype)
    psi[0] = 1
    done = run_stages(PhysicalState(psi, gemm.resolve_device("cpu")), plan, threads=threads)
    layout = list(done.layout.phys)
    stored = done.data.copy()

    def state(with_spare: bool) -> PhysicalState:
        phys = PhysicalState(stored.copy(), gemm.resolve_device("cpu"))
        phys.layout.set(layout)
        if with_spare:  # as the stages leave it: allocated and written (its pages mapped)
            phys.spare = np.empty_like(stored)
            phys.spare.fill(0)
        return phys

    times: dict[str, list[float]] = {"numpy": [], "compiled": []}
    outs = {}
    for _ in range(repeats):
        for kind in times:
            phys = state(kind == "compiled")
            t0 = time.perf_counter()
            if kind == "compiled":
                assert canonicalize(phys, threads=threads)
            else:
                phys.canonicalize()
            times[kind].append(time.perf_counter() - t0)
            outs[kind] = phys.data
    if not np.array_equal(outs["numpy"], outs["compiled"]):
        raise SystemExit(f"{desc}: the two orders differ")
    return {"circuit": name, "description": desc, "dtype": np.dtype(dtype).name, "n": n, "final_layout": layout,
            **{f"{k}_s": min(v) for k, v in times.items()}, **{f"{k}_all_s": v for k, v in times.items()}}


def compare_local(name: str, dtype, n: int, threads: int, repeats: int, locals_=(12, 13, 15, 16)) -> dict:
    circ, desc = build(name, n)
    item = np.dtype(dtype).itemsize
    lane_bits = (cpu_kernels.VECTOR_BYTES // (item // 2)).bit_length() - 1
    chosen = decide_cpu(circ, item, always=True).plan
    cases = {"default": (chosen, default_block_bytes(item, chosen.local_qubits, threads))}
    for big_l in locals_:
        if big_l + lane_bits <= n:
            cases[f"L{big_l}"] = (plan_stages(circ, big_l), item << (big_l + lane_bits))
    times = _alternate(cases, dtype, n, threads, repeats, desc)
    return {"circuit": name, "description": desc, "dtype": np.dtype(dtype).name, "n": n,
            "cases": {k: {"local_qubits": p.local_qubits, "stages": p.n_stages, "chunk_bytes": c, "s": min(times[k]),
                          "all_s": times[k]} for k, (p, c) in cases.items()}}


def _compare_loads(name: str, dtype, n: int, threads: int, repeats: int, settings: dict) -> dict:
    """The Simulator's plan and chunk under two settings of the chunk load (name -> a function that
    applies it to :mod:`qsim_tc.stages.cpu`), alternating; then both again with every stage's ops
    taken out (the loads and stores alone). The first setting is the module's default: it is
    applied at the end, and the ratio is its time to the second's."""
    from qsim_tc.stages import cpu  # noqa: PLC0415

    circ, desc = build(name, n)
    item = np.dtype(dtype).itemsize
    plan = decide_cpu(circ, item, always=True).plan
    chunk = default_block_bytes(item, plan.local_qubits, threads)
    encode = cpu._encode

    def no_ops(stage, geo, real):  # the stage's load and store alone: its ops taken out
        ops = encode(stage, geo, real)
        return None if ops is None else cpu._Ops(ops.table[:0], ops.offs, ops.fixed, ops.highs, ops.m_re, ops.m_im,
                                                  ops.skip)

    def setting(key: str, ops: bool = True):
        def apply():
            settings[key]()
            cpu._encode = encode if ops else no_ops
        return apply

    first, second = settings
    try:
        times = _alternate({k: (plan, chunk, setting(k)) for k in settings}, dtype, n, threads, repeats, desc)
        loads = _alternate({k: (plan, chunk, setting(k, False)) for k in settings}, dtype, n, threads, repeats, desc,
                           check=False)
    finally:
        setting(first)()
    return {"circuit": name, "description": desc, "dtype": np.dtype(dtype).name, "n": n,
            "local_qubits": plan.local_qubits, "stages": plan.n_stages, "chunk_bytes": chunk,
            **{f"{k}_s": min(v) for k, v in times.items()}, **{f"{k}_all_s": v for k, v in times.items()},
            **{f"{k}_loads_only_s": min(v) for k, v in loads.items()},
            f"ratio_{first}_to_{second}": min(times[first]) / min(times[second])}


def compare_load(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    from qsim_tc.stages import cpu  # noqa: PLC0415

    canon = dict(cpu.CANON_SOURCE_BITS)

    def load(vector: bool):
        def apply():
            cpu.VECTOR_LOAD = vector
            cpu.CANON_SOURCE_BITS.update(canon if vector else dict.fromkeys(canon, 0))
        return apply

    return _compare_loads(name, dtype, n, threads, repeats, {"vector": load(True), "element": load(False)})


def compare_gather(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    from qsim_tc.stages import cpu  # noqa: PLC0415

    def gather(hardware: bool):
        def apply():
            cpu.HARDWARE_GATHER = hardware
        return apply

    return _compare_loads(name, dtype, n, threads, repeats, {"amplitudes": gather(False), "hardware": gather(True)})


def compare_gap(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    from qsim_tc.stages import cpu  # noqa: PLC0415

    default = cpu.IM_GAP_BYTES

    def gap(nbytes: int):
        def apply():
            cpu.IM_GAP_BYTES = nbytes
        return apply

    return _compare_loads(name, dtype, n, threads, repeats, {"gap": gap(default), "no_gap": gap(0)})


def compare_fusion(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    """The Simulator's plan and chunk with the host's fusion costs (``stages.cpu.host_fuse_costs``)
    against the table of its vector width alone (``stages.cpu._FUSE_COSTS``) and the shipped one
    where they differ, alternating."""
    from qsim_tc.stages import cpu  # noqa: PLC0415

    circ, desc = build(name, n)
    item = np.dtype(dtype).itemsize
    plan = decide_cpu(circ, item, always=True).plan
    chunk = default_block_bytes(item, plan.local_qubits, threads)
    tables = {"host": cpu.host_fuse_costs()[item], "width": cpu._FUSE_COSTS[cpu_kernels.VECTOR_BYTES][item]}
    if cpu.SHIPPED_FUSE_COST[item] not in tables.values():
        tables["shipped"] = cpu.SHIPPED_FUSE_COST[item]
    saved = dict(cpu.FUSE_COST)

    def costs(key: str):
        def apply():
            cpu.FUSE_COST[item] = tables[key]
        return apply

    try:
        times = _alternate({k: (plan, chunk, costs(k)) for k in tables}, dtype, n, threads, repeats, desc)
    finally:
        cpu.FUSE_COST.clear()
        cpu.FUSE_COST.update(saved)
    return {"circuit": name, "description": desc, "dtype": np.dtype(dtype).name, "n": n,
            "local_qubits": plan.local_qubits, "stages": plan.n_stages, "chunk_bytes": chunk,
            "host_cpu": cpu_kernels.HOST_CPU, "host_table": cpu.FUSE_COST_SOURCE,
            "tables": {k: list(v) for k, v in tables.items()},
            **{f"{k}_s": min(v) for k, v in times.items()}, **{f"{k}_all_s": v for k, v in times.items()},
            "ratio_host_to_width": min(times["host"]) / min(times["width"])}


def _line_fusion(row: dict) -> str:
    shipped = (f"  shipped table {row['shipped_s']:.3f} s ({row['host_s'] / row['shipped_s']:.3f}x)"
               if "shipped_s" in row else "")
    return (f"L {row['local_qubits']:2d}, {row['stages']:2d} stages  width table {row['width_s']:.3f} s  "
            f"{row['host_cpu']} {row.get('host_table', '')} table {row['host_s']:.3f} s  "
            f"({row['ratio_host_to_width']:.3f}x){shipped}")


def _line_pair(first: str, second: str):
    def line(row: dict) -> str:
        return (f"L {row['local_qubits']:2d}, {row['stages']:2d} stages  {second} {row[f'{second}_s']:.3f} s  {first} "
                f"{row[f'{first}_s']:.3f} s  ({row[f'ratio_{first}_to_{second}']:.3f}x); ops out: "
                f"{row[f'{second}_loads_only_s']:.3f} / {row[f'{first}_loads_only_s']:.3f} s")
    return line


def _line_local(row: dict) -> str:
    return "  ".join(f"{k} (L {v['local_qubits']}, {v['stages']} stages, {v['chunk_bytes'] >> 10} KiB) {v['s']:.3f} s"
                     for k, v in row["cases"].items())


def _line_chunk(row: dict) -> str:
    return (f"L {row['local_qubits']:2d}  {row['no_l2_cap_chunk_bytes'] >> 10:5d} KiB {row['no_l2_cap_s']:.3f} s  ->  "
            f"{row['default_chunk_bytes'] >> 10:5d} KiB {row['default_s']:.3f} s  ({row['ratio_default_to_no_cap']:.3f}x)")


def _line_canonicalize(row: dict) -> str:
    return f"numpy {row['numpy_s'] * 1e3:6.1f} ms  compiled {row['compiled_s'] * 1e3:6.1f} ms"


def compare_fresh(name: str, dtype, n: int, threads: int, repeats: int) -> dict:
    """A run from |0...0> whose first stage makes its chunks (``run_stages(fresh=True)`` on
    unwritten memory, as the Simulator runs it) against one from a zeroed state whose first stage
    reads it, alternating; the state's allocation is timed in both, the gather into logical order
    in neither."""
    circ, desc = build(name, n)
    item = np.dtype(dtype).itemsize
    plan = decide_cpu(circ, item, always=True).plan
    dev = gemm.resolve_device("cpu")

    def go(fresh: bool):
        t0 = time.perf_counter()
        if fresh:
            phys = PhysicalState(np.empty(1 << n, dtype), dev)
        else:
            data = np.zeros(1 << n, dtype)
            data[0] = 1
            phys = PhysicalState(data, dev)
        run_stages(phys, plan, threads=threads, fresh=fresh)
        dt = time.perf_counter() - t0
        phys.canonicalize()
        return dt, phys.data

    ref = go(False)[1].copy()
    if float(np.abs(go(True)[1] - ref).max()) > TOL[item]:
        raise SystemExit(f"{desc} {np.dtype(dtype).name}: the fresh run differs from the zeroed one")
    times: dict[str, list[float]] = {"fresh": [], "zeroed": []}
    for r in range(repeats):
        for key in (("fresh", "zeroed") if r % 2 == 0 else ("zeroed", "fresh")):
            times[key].append(go(key == "fresh")[0])
    return {"circuit": name, "description": desc, "dtype": np.dtype(dtype).name, "n": n,
            "local_qubits": plan.local_qubits, "stages": plan.n_stages,
            **{f"{k}_s": min(v) for k, v in times.items()}, **{f"{k}_all_s": v for k, v in times.items()},
            "ratio_fresh_to_zeroed": min(times["fresh"]) / min(times["zeroed"])}


def _line_fresh(row: dict) -> str:
    return (f"L {row['local_qubits']:2d}, {row['stages']:2d} stages  zeroed {row['zeroed_s']:.3f} s  fresh "
            f"{row['fresh_s']:.3f} s  ({row['ratio_fresh_to_zeroed']:.3f}x)")


COMPARISONS = {"chunk": (compare_chunk, _line_chunk), "canonicalize": (compare_canonicalize, _line_canonicalize),
               "local": (compare_local, _line_local), "load": (compare_load, _line_pair("vector", "element")),
               "gather": (compare_gather, _line_pair("amplitudes", "hardware")),
               "gap": (compare_gap, _line_pair("gap", "no_gap")), "fusion": (compare_fusion, _line_fusion),
               "fresh": (compare_fresh, _line_fresh)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", choices=sorted(COMPARISONS), default="chunk")
    ap.add_argument("--qubits", type=int, default=24)
    ap.add_argument("--circuits", default="qft,qv,brickwork4,brickwork2")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    print(f"L2 cap on this host: {l2_chunk_cap()}", flush=True)
    compare, line = COMPARISONS[args.compare]
    rows = []
    for name in args.circuits.split(","):
        for dtype in (np.complex64, np.complex128):
            row = compare(name, dtype, args.qubits, args.threads, args.repeats)
            rows.append(row)
            print(f"{row['description'][:30]:30s} {row['dtype']:10s} {line(row)}", flush=True)
    if args.json:
        payload = {"compare": args.compare, "cpu": host_cpu(), "l2_chunk_cap": l2_chunk_cap(), "threads": args.threads,
                   "rows": rows}
        write_results(args.json, payload, module=MODULE, argv=argv if argv is not None else sys.argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
