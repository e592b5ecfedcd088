"""Runs a stage plan (:mod:`qsim_tc.stages.plan`) on a numpy state, one cache-sized chunk at a time.

Per stage, one pass over the state: compiled kernels (:mod:`qsim_tc.stages.cpu_kernels`)
load a chunk of 2^B amplitudes, apply every gate of the stage to it while it is in cache, and
store it. The index-bit swaps that bring the stage's layout in are folded into the load: a chunk
of the new layout is gathered from wherever the old layout holds it, and the pass writes into
the state's spare buffer (in place when no chunk changes place). Both cores (``threads``) take
contiguous ranges of chunks.

Where the qubits are stored (``_Placement``, per stage): the L local qubits at chunk bits
W .. B-1, W = B - L global qubits at the chunk's low bits (*lanes*), the other global qubits
above the chunk. Every target of a gate is then a chunk bit >= W, so each gate loops over runs
of at least 2^W consecutive amplitudes, long enough to vectorize. A global qubit can still be a
control or a diagonal bit: in a lane by the lane vectors of the diagonal kernel and by short
runs of the dense ones, above the chunk as fixed per chunk (a control there enables or skips the
gate for the whole chunk; a diagonal's bits there select its entries). The state's layout is
left as the last stage stored it (``PhysicalState.layout`` says how; an array input is
canonicalized at the end).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import gemm
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages import cpu_kernels as kernels
from qsim_tc.stages.fusion import fuse_stage
from qsim_tc.stages.host_cache import l2_chunk_cap, last_level_cache
from qsim_tc.stages.plan import RELABEL, Stage, StagePlan
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL

# The chunk (2^B amplitudes) by itemsize. 24 qubits, 2 cores, against the chunk of 4 MiB in one
# run: complex128 at 2 MiB QFT 0.99 -> 0.82 s, QuantumVolume 3.29 -> 3.10 s, brickwork(24, 4, 10)
# 1.85 -> 1.46 s; complex64 at 2 MiB won QFT (0.52 -> 0.46 s) and QV (1.64 -> 1.57 s) but lost
# brickwork d = 4 (0.81 -> 1.03 s), so it keeps 4 MiB.
DEFAULT_BLOCK_BYTES = {8: 4 << 20, 16: 2 << 20}
# ... unless the threads' chunks would fill the last-level cache: a thread's chunk (its split
# real and imaginary halves) is kept to half its share of it, the rest for the lines streaming
# through the load and store. On a 2-core Zen 1 with 8 MiB of L3 two 4 MiB complex64 chunks
# filled it: at 2 MiB, 24 qubits, quantum volume 3.61 -> 3.43 s, brickwork(24, 4, 10) 2.37 ->
# 2.18, QFT 0.879 -> 0.868 (a Zen 3 with a larger L3 ran 2 and 4 MiB alike). Never below
# 2^(L + lane bits) amplitudes: the lanes must fill one vector (1 MiB, 2 lane bits for L = 15,
# took quantum volume to 7.4 s). Where a core's L2 is large (>= 2 MiB), a chunk is also kept to
# half of it (host_cache.l2_chunk_cap): on a 2-core AVX-512 host with 2 MiB of L2 a core, 24
# qubits, 1 MiB against 4 MiB (complex64) and 2 MiB (complex128), QFT 0.89x / 0.96x the time,
# brickwork(24, 4, 10) 0.80x / 0.92x, brickwork(24, 2, 20) complex128 0.93x, QuantumVolume
# complex128 1.01x (the wider complex64 plans keep their 4 MiB floor; results.md section 11).
# In-stage fusion (qsim_tc.stages.fusion): the time of one k-target dense op (k = 1 .. 4) over
# a 24-qubit state at the default chunk, ms, 2 threads, one stage of 40 Haar gates on random local
# qubits, by the kernels' vector width (cpu_kernels.VECTOR_BYTES). AVX-512 (2-core Xeon): a chunk
# in cache makes small ops cheap for their width: two 2-qubit gates that share a qubit cost 9.4 ms
# apart and 6.6 fused (complex64). AVX2 (2-core Zen 3): wide ops cost more for their width (the
# 256-bit strips hold fewer rows; 4 targets 4.7x one target, against 2.4x), and the AVX-512 table
# there over-fused: same run, 24 qubits, complex64 / complex128, AVX-512 table / this one / no
# fusion: QuantumVolume 2.80 / 2.36 / 2.44 s, 5.00 / 4.33 / 4.46 s; brickwork(24, 2, 20) 2.02 /
# 1.80 / 1.72 s, 3.20 / 3.05 / 2.92 s; brickwork(24, 4, 10) 1.77 / 1.77 / 1.75 s, 3.10 / 2.87 / 3.00 s.
_FUSE_COSTS = {64: {8: (4.07, 4.70, 6.63, 9.94), 16: (6.30, 7.42, 12.66, 19.30)},
               32: {8: (4.01, 6.02, 10.80, 18.80), 16: (6.06, 9.21, 20.38, 34.57)}}
# Hosts whose op costs the vector-width table misstates, by LLVM's name for the CPU
# (cpu_kernels.HOST_CPU), measured as above (the mean of two runs; a stage's ops on a state of random
# amplitudes). A 2-core AVX-512 Zen 5 (EPYC, 1 MiB L2 a core, 32 MiB L3): one-target ops are cheap
# for their width there (a 4 MiB chunk streams from L3 quickly), so wide ops cost 3-6x one target
# where the Xeon's table says 1.6-3x, and that table over-fused. Same process, alternating, best
# of 3, 24 qubits, time against the AVX-512 table, complex64 / complex128: quantum volume 0.773x /
# 0.817x, brickwork(24, 2, 20) 0.911x / 0.928x, brickwork(24, 4, 10) 0.977x / 0.895x, QFT 1.022x /
# 0.990x (docs/results.md, section 11; benchmarks.bench.cpu_stage_ab --compare fusion)
_FUSE_COSTS_BY_CPU = {"znver5": {8: (1.08, 1.62, 3.16, 6.55), 16: (2.08, 3.14, 5.82, 13.26)}}
FUSE_COST_OWN = kernels.HOST_CPU in _FUSE_COSTS_BY_CPU  # this CPU fuses by a table measured on it
SHIPPED_FUSE_COST = dict(_FUSE_COSTS_BY_CPU[kernels.HOST_CPU] if FUSE_COST_OWN else _FUSE_COSTS[kernels.VECTOR_BYTES])
# what the executor fuses by: the shipped table, replaced at the first run by this host's own where
# `qsim-tc calibrate --device cpu` measured one (cpu_fuse_calibration; host_fuse_costs)
FUSE_COST = dict(SHIPPED_FUSE_COST)
_SHIPPED_SOURCE = "cpu" if FUSE_COST_OWN else "vector"  # which shipped table: this CPU's or the vector width's
FUSE_COST_SOURCE = _SHIPPED_SOURCE  # "calibrated" once a measured table is read
_FUSE_COST_READ = False


def host_fuse_costs() -> dict[int, tuple[float, ...]]:
    """:data:`FUSE_COST`, with this host's calibrated table put in at the first call (its cache file,
    :mod:`qsim_tc.stages.cpu_fuse_calibration`; a bad file is reported once and the shipped table
    kept). Later changes to FUSE_COST (A/B runs) are left alone."""
    global _FUSE_COST_READ, FUSE_COST_SOURCE
    if not _FUSE_COST_READ:
        _FUSE_COST_READ = True
        from qsim_tc.stages import cpu_fuse_calibration  # noqa: PLC0415 - reads the cache folder

        measured = cpu_fuse_calibration.load()
        if measured is not None:
            FUSE_COST.update(measured)
            FUSE_COST_SOURCE = "calibrated"
    return FUSE_COST


def forget_fuse_costs() -> None:
    """Go back to the shipped table; the next run reads the cache again (after a calibration)."""
    global _FUSE_COST_READ, FUSE_COST_SOURCE
    FUSE_COST.clear()
    FUSE_COST.update(SHIPPED_FUSE_COST)
    FUSE_COST_SOURCE = _SHIPPED_SOURCE
    _FUSE_COST_READ = False


_MAX_ACC = 1024  # a wide dense gate accumulates two output runs of _MAX_ACC / 2 at once (kernels._dense_any)
# the storage bits whose qubits the gather into logical order keeps in its chunk (canonicalize,
# ``_canonical_chunk``): 24 qubits, 2-core AVX-512 host, the final layouts of QuantumVolume, QFT
# and brickwork(24, 4, 10), 0 / 3 / 6 bits: complex64 34.9 / 20.9 / 17.6 ms, 23.1 / 23.0 / 18.0,
# 69.9 / 17.3 / 16.6; complex128 54.4 / 45.0 / 25.8, 40.6 / 40.5 / 33.8, 23.2 / 21.8 / 21.8 (2, 4
# and 5 bits between)
CANON_SOURCE_BITS = {8: 6, 16: 6}
# the chunk load by vectors (``_vector_tables``); False: the element-by-element load through run
# tables alone (``_load_tables``), kept for chunks narrower than a vector and for A/B runs
VECTOR_LOAD = True
# the load by vectors also where a vector's amplitudes come from several places (each amplitude
# loaded on its own, or by the hardware gather: HARDWARE_GATHER), else the run tables there. On
# AVX-512 hosts: docs/results.md, section 11. For AVX2 hosts the 256-bit build was run on the Zen 5
# in their place (no AVX2 host measured): 24 qubits, 2 threads, best of 3 alternating, against the
# run tables, quantum volume 0.948x / 0.954x the time (complex64 / complex128), brickwork(24, 4,
# 10) 0.957x / 0.957x, QFT 1.028x / 0.987x
GATHER_LOAD = True
# the hardware gather for such vectors instead of one load an amplitude: slower on a Zen 5 in both
# dtypes (cpu_kernels._gather_load), kept for A/B runs (benchmarks.bench.cpu_stage_ab --compare gather)
HARDWARE_GATHER = False
# where the chunk's imaginary half starts after its real half's end, bytes. Two separate large
# arrays start a multiple of 4 KiB apart, so a dense op's inputs 2^10 or more amplitudes apart put
# their real and imaginary lines in one L1 set (2^(k+1) lines for k targets, over its 12 ways on
# the Zen 5 and the Xeon). Measured alone on the Zen 5 (docs/results.md, section 11): a 3-target
# op on a 4 MiB complex64 chunk 64 -> 101-117 GFMA/s with targets from bit 10, complex128 at
# bits 12-14 42-47 -> 53-59
IM_GAP_BYTES = 256
_MAX_VECTOR_TABLE_BITS = 20  # the vector load's tables: 2 x 8 bytes a vector (16 MiB at most)
_MAX_RUN_BITS = 12  # the load reads runs of at most 2^12 contiguous amplitudes (its scatter table in L1)
_THREADS = max(1, min(8, os.cpu_count() or 1))


def run_stages(state, plan: StagePlan, *, block_bytes: int | None = None, threads: int | None = None,
               fuse_cost=None, on_stage=None, executed: list | None = None, fresh: bool = False):
    """Apply ``plan`` to a state.

    Args:
        state: a :class:`~qsim_tc.engine.storage.PhysicalState` on the CPU (changed in place:
            data, layout and spare buffer; its layout is left as the last stage needs it,
            lazily), or a 1-D numpy complex array in logical order (used as storage and
            overwritten).
        plan: from :func:`~qsim_tc.stages.plan.plan_stages` for a circuit of the state's width.
        block_bytes: the size of a chunk (default: :data:`DEFAULT_BLOCK_BYTES` for the state's
            itemsize), 2^B amplitudes (rounded down to a power of two, at
            least 2^L, at most the state); its B - L low bits are lanes.
        threads: worker threads over chunks (default: the CPU count, at most 8).
        fuse_cost: the relative cost of a dense op of 1, 2, ... targets, by which each stage's
            runs of local gates are fused (:func:`~qsim_tc.stages.fusion.fuse_stage`;
            default :func:`host_fuse_costs` of the state's itemsize; ``()``: no fusion).
        on_stage: called as ``on_stage(done, total)`` after each stage.
        executed: a list to which each stage is appended as the executor runs it (its runs of
            local gates fused): what the run's error bound reads.
        fresh: the state holds no amplitudes yet (allocated, not written) and stands for
            |0...0>: the first stage makes its chunks instead of reading them, in its own layout
            (|0...0> is the same in every layout), so a run from |0...0> takes no pass to zero
            the state and none to read it in the first stage.

    Returns:
        The PhysicalState, or for an array input the final amplitudes in logical order (a numpy
        array that may be the input array or a new one).

    Raises:
        TypeError: ``state`` is neither, or holds a non-complex dtype.
        ValueError: the widths of state and plan differ, or an array state is not 1-D of a
            power-of-two length, contiguous and writeable (nothing is changed).
    """
    if isinstance(state, PhysicalState):
        phys, as_array = state, False
    elif isinstance(state, np.ndarray):
        if state.ndim != 1 or state.size < 2 or state.size & (state.size - 1):
            raise ValueError(f"state must be 1-D with a power-of-two length >= 2, got shape {state.shape}")
        if not state.flags.c_contiguous or not state.flags.writeable:
            # the kernels read and write the array's memory as interleaved real parts, in place
            raise ValueError("state must be a contiguous, writeable array (got a "
                             f"{'strided view' if not state.flags.c_contiguous else 'read-only array'}); "
                             "pass np.ascontiguousarray(state) or a copy")
        phys, as_array = PhysicalState(state, gemm.resolve_device("cpu")), True
    else:
        raise TypeError(f"state must be a PhysicalState or a numpy array, got {type(state).__name__}")
    if phys.data.dtype not in (np.complex64, np.complex128):
        raise TypeError(f"state dtype must be complex64 or complex128, got {phys.data.dtype}")
    if not isinstance(phys.data, np.ndarray):
        raise TypeError("run_stages runs on the CPU; the state is not a numpy array")
    if phys.n_qubits != plan.n_qubits:
        raise ValueError(f"the plan is for {plan.n_qubits} qubits, the state has {phys.n_qubits}")
    n, big_l, item = plan.n_qubits, plan.local_qubits, phys.data.dtype.itemsize
    phys.reorder = canonicalize  # reading the state in logical order: a gather into the spare buffer
    n_threads = min(_THREADS if threads is None else max(1, int(threads)), 1 << max(0, n - big_l))
    if block_bytes is None:
        block_bytes = default_block_bytes(item, big_l, n_threads)
    nbits = min(n, max(big_l, int(max(block_bytes // item, 1)).bit_length() - 1))
    n_threads = min(n_threads, 1 << (n - nbits))
    cost = host_fuse_costs().get(item, ()) if fuse_cost is None else tuple(fuse_cost)
    real = np.float32 if phys.data.dtype == np.complex64 else np.float64
    scratch = [_Scratch(nbits, real) for _ in range(n_threads)]
    pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
    try:
        next_local = _next_local(plan)
        unset = fresh
        for i, stage in enumerate(plan.stages):
            geo = _Placement(phys.layout.phys, stage.layout, big_l, nbits, next_local[i + 1])
            ran = fuse_stage(stage, big_l, cost)
            if executed is not None:
                executed.append(ran)
            ops = _encode(ran, geo, real)
            if unset and ops is not None:
                phys.layout.set(list(geo.layout))  # |0...0> in the stage's layout: nothing to move
            if ops is not None:
                try:  # chunks are written back one by one: any failure or interruption leaves a mix
                    _run_stage(phys, geo, ops, scratch, pool, fresh=unset)
                except BaseException as exc:
                    if unset:
                        phys.invalid = (f"stage {i + 1} of the CPU stage executor, which makes |0...0>, stopped "
                                        f"({type(exc).__name__})")
                        raise
                    phys.mark_invalid(f"stage {i + 1} of {plan.n_stages} of the CPU stage executor stopped "
                                      f"half-way ({type(exc).__name__})", exc)
                unset = False
            _rename(phys, stage)  # the stage's relabels (SWAPs) moved no amplitude
            if on_stage is not None:
                on_stage(i + 1, plan.n_stages)
        if unset:  # no stage had ops: |0...0> still to be written
            phys.data.fill(0)
            phys.data[0] = 1
    finally:
        if pool is not None:
            pool.shutdown()
    if plan.global_phase:
        phys.data *= phys.data.dtype.type(np.exp(1j * plan.global_phase))
    if as_array:
        phys.canonicalize()
        return phys.data
    return phys


def default_block_bytes(itemsize: int, local_qubits: int, threads: int, cache_bytes: int | None = -1,
                        l2_bytes: int | None = -1) -> int:
    """The chunk of the CPU executor: :data:`DEFAULT_BLOCK_BYTES`, at most half of each thread's
    share of the last-level cache and at most the L2 cap (:func:`~qsim_tc.stages.host_cache.l2_chunk_cap`),
    at least 2^(local_qubits + lane bits) amplitudes.

    Args:
        itemsize: bytes of an amplitude (8 or 16).
        local_qubits: the plan's L.
        threads: the worker threads, each with a chunk of its own.
        cache_bytes: the last-level cache shared by the threads (-1: the host's, None: unknown,
            no cap).
        l2_bytes: a core's L2 (-1: the host's, None: unknown, no cap).
    """
    block = DEFAULT_BLOCK_BYTES.get(itemsize, 4 << 20)
    if cache_bytes == -1:
        cache_bytes = last_level_cache()
    if cache_bytes:
        share = cache_bytes // max(1, threads)
        block = min(block, 1 << max(0, (share // 2).bit_length() - 1))  # a power of two
    cap = l2_chunk_cap(l2_bytes)
    if cap:
        block = min(block, cap)
    lane_bits = max(0, (kernels.VECTOR_BYTES // (itemsize // 2)).bit_length() - 1)  # one vector of lanes
    return max(block, itemsize << (local_qubits + lane_bits))


def _next_local(plan: StagePlan) -> list[dict[int, int]]:
    """For each stage i (and one past the end), the first stage >= i in which each qubit is
    local (qubits never local again are absent)."""
    out: list[dict[int, int]] = [{}]
    for i in range(plan.n_stages - 1, -1, -1):
        d = dict(out[-1])
        for q in plan.stages[i].layout[:plan.local_qubits]:
            d[q] = i
        out.append(d)
    return out[::-1]


def _rename(phys: PhysicalState, stage: Stage) -> None:
    """Apply the stage's relabels to the storage layout: the qubit named ``layout[p]`` at the
    stage's start is named ``end_layout[p]`` at its end, wherever it is stored."""
    start, end = stage.layout, stage.end_layout
    if start != end:
        rename = dict(zip(start, end))
        phys.layout.set([rename[q] for q in phys.layout.phys])


class _Placement:
    """Where a stage keeps each qubit in storage: the stage's L local qubits at chunk bits
    W .. B-1, W global qubits at the chunk's low bits (lanes), the other global qubits above.

    A qubit already in a place of its class stays there; each local qubit that is not is
    exchanged with a global qubit held at chunk bits W .. B-1, so the layout change is as small
    as the stage's swaps allow. A lane left by a qubit that became local takes, of those
    global qubits, the one whose next stage as a local qubit is latest: a lane that changes
    makes the load a gather of short runs, so lanes should change rarely.
    """

    def __init__(self, stored, layout, big_l: int, nbits: int, next_local: dict[int, int]):
        n = len(layout)
        self.n, self.nbits = n, nbits
        self.w = w = nbits - big_l
        self.lanes = 1 << w
        local = set(layout[:big_l])
        new = list(stored)
        incoming = [s for s, q in enumerate(stored) if q in local and not w <= s < nbits]
        outgoing = [s for s in range(w, nbits) if stored[s] not in local]
        outgoing.sort(key=lambda s: -next_local.get(stored[s], n << 20))  # latest next use first
        for a, b in zip(sorted(incoming), outgoing):  # lane slots (lowest) first
            new[a], new[b] = new[b], new[a]
        self.layout = tuple(new)  # storage bit -> qubit
        where = {q: s for s, q in enumerate(new)}
        self.plan_bit = [where[q] for q in layout]  # plan bit -> storage bit, for the whole stage

    def bit(self, p: int) -> int:
        """The storage bit of plan bit p."""
        return self.plan_bit[p]


# --- one stage ------------------------------------------------------------------------------


class _Scratch:
    """One thread's chunk (split real and imaginary halves), wide-gate accumulators (two output
    runs) and the wide gates' copy of their input runs (``xs``, grown to the stage's widest)."""

    def __init__(self, nbits: int, real):
        size = 1 << nbits
        gap = IM_GAP_BYTES // np.dtype(real).itemsize
        both = np.empty(2 * size + gap, real)  # one buffer: the gap between the halves is ours to set
        self.re, self.im = both[:size], both[size + gap:]
        acc = min(size, _MAX_ACC)
        self.acc_re = np.empty(acc, real)
        self.acc_im = np.empty(acc, real)
        self.xs = np.empty(1, real)

    def reserve(self, dim: int) -> None:
        """Make ``xs`` hold the input runs of a dense gate of dimension ``dim``."""
        need = 2 * dim * (self.acc_re.size // 2 + kernels.XS_PAD)
        if self.xs.size < need:
            self.xs = np.empty(need, self.xs.dtype)


class _Ops:
    """A stage's gates as the kernels' tables (see ``cpu_kernels``)."""

    def __init__(self, table, offs, fixed, highs, m_re, m_im, skip):
        self.table, self.offs, self.fixed, self.highs = table, offs, fixed, highs
        self.m_re, self.m_im, self.skip = m_re, m_im, skip


def _encode(stage: Stage, geo: _Placement, real) -> _Ops | None:
    """The stage's gates in storage bits; None for a stage of relabels only."""
    rows: list[list[int]] = []
    offs: list[int] = []
    fixed: list[int] = []
    highs: list[int] = []
    m_re: list[np.ndarray] = []
    m_im: list[np.ndarray] = []
    skip: list[np.ndarray] = []
    n_data = 0
    for op in stage.ops:
        if op.kind == RELABEL:
            continue
        s = op.structure
        bits = [geo.bit(p) for p in op.positions]
        row = [0] * kernels.N_COLUMNS
        if op.kind == DIAGONAL:
            table, mask = _diagonal_table(s.diagonal, bits, geo)
            row_bits = sorted(b for b in bits if geo.w <= b < geo.nbits)
            high = [b - geo.nbits for b in bits if b >= geo.nbits]
            row[kernels.K_KIND] = kernels.DIAGONAL_OP
            row[kernels.K_DIM] = 1 << len(row_bits)
            row[kernels.K_OFFS] = sum(x.size for x in skip)
            skip.append(mask)
            row[kernels.K_HIGH], row[kernels.K_NHIGH] = len(highs), len(high)
            highs += high
            row[kernels.K_FIX], row[kernels.K_NFIX] = len(fixed), len(row_bits)
            fixed += row_bits
            row[kernels.K_DATA] = n_data
            m_re.append(table.real)
            m_im.append(table.imag)
            n_data += table.size
        else:
            if op.kind == CONTROLLED:
                targets = [bits[b] for b in s.targets]
                controls = [bits[b] for b in s.controls]
            else:
                targets, controls = bits, []
            low_controls = [c for c in controls if c < geo.nbits]
            row[kernels.K_KIND] = kernels.DENSE_OP
            row[kernels.K_DIM] = 1 << len(targets)
            row[kernels.K_OFFS] = len(offs)
            offs += [sum(((c >> i) & 1) << t for i, t in enumerate(targets)) for c in range(1 << len(targets))]
            row[kernels.K_FIX], row[kernels.K_NFIX] = len(fixed), len(targets) + len(low_controls)
            fixed += sorted(targets + low_controls)
            row[kernels.K_CMASK] = sum(1 << c for c in low_controls)
            row[kernels.K_HMASK] = sum(1 << (c - geo.nbits) for c in controls if c >= geo.nbits)
            row[kernels.K_DATA] = n_data
            m = np.asarray(s.target_matrix).reshape(-1)
            m_re.append(m.real)
            m_im.append(m.imag)
            n_data += m.size
        rows.append(row)
    if not rows:
        return None

    def cat(parts, dtype):
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(1, dtype)

    return _Ops(np.array(rows, dtype=np.int64), cat([np.asarray(offs, np.int64)], np.int64),
                cat([np.asarray(fixed, np.int64)], np.int64), cat([np.asarray(highs, np.int64)], np.int64),
                cat(m_re, real), cat(m_im, real), cat(skip, np.uint8))


def _diagonal_table(diag: np.ndarray, bits: list[int], geo: _Placement) -> tuple[np.ndarray, np.ndarray]:
    """A diagonal gate's entries as the kernel reads them: for each value of its bits above the
    chunk (high, as rows of blocks) and of its row bits (chunk bits >= W, ascending), the lane
    vector of 2^W entries; and per (high, row) value whether that vector is all ones."""
    row_bits = sorted(b for b in bits if geo.w <= b < geo.nbits)
    high = [b for b in bits if b >= geo.nbits]
    nh, nr, w = len(high), len(row_bits), geo.w
    hv = np.arange(1 << nh)[:, None, None]
    rv = np.arange(1 << nr)[None, :, None]
    lv = np.arange(1 << w)[None, None, :]
    index = np.zeros((1 << nh, 1 << nr, 1 << w), dtype=np.int64)
    for j, b in enumerate(bits):  # bit j of the gate's diagonal index is the value of storage bit b
        if b >= geo.nbits:
            v = (hv >> high.index(b)) & 1
        elif b >= w:
            v = (rv >> row_bits.index(b)) & 1
        else:
            v = (lv >> b) & 1
        index = index | (v << j)
    table = np.asarray(diag)[index]
    ones = (table == 1).all(axis=2)
    return table.reshape(-1), ones.reshape(-1).astype(np.uint8)


def _run_stage(phys: PhysicalState, geo: _Placement, ops: _Ops, scratch: list[_Scratch], pool, *,
               fresh: bool = False) -> None:
    """One pass: every chunk loaded from the state as it is stored (the change to ``layout``
    folded into the load), the ops applied, stored contiguously in ``layout``; ``fresh``: made
    as |0...0> instead of loaded (``run_chunks``)."""
    where = {q: s for s, q in enumerate(phys.layout.phys)}
    src_bit = [where[q] for q in geo.layout]  # the old storage bit of each new storage bit
    wide = ops.table[(ops.table[:, kernels.K_KIND] == kernels.DENSE_OP) & (ops.table[:, kernels.K_DIM] > 4)]
    if wide.size:
        for sc in scratch:
            sc.reserve(int(wide[:, kernels.K_DIM].max()))
    _gather(phys, src_bit, geo.nbits, geo.lanes, ops, scratch, pool, fresh=fresh)
    phys.layout.set(list(geo.layout))


def _gather(phys: PhysicalState, src_bit: list[int], nbits: int, lanes: int, ops: _Ops, scratch: list[_Scratch],
            pool, *, in_place_ok: bool = True, dst_bit: list[int] | None = None, fresh: bool = False) -> None:
    """Chunk by chunk of 2^nbits amplitudes: new storage bit s takes old storage bit
    ``src_bit[s]``, the ops are applied, the chunk is stored. In place where every chunk keeps
    its place (and ``in_place_ok``), else into the spare buffer (allocated if missing), which
    then becomes the data; the layout is the caller's to set.

    ``dst_bit`` (a permutation of the storage bits; default: the identity) says where each
    bit of the chunk and chunk index goes instead: chunk bit s (s < nbits) and bit s - nbits
    of the chunk index are new storage bit ``dst_bit[s]``, which takes old storage bit
    ``src_bit[s]``. Chunk bits 0 .. a-1 must be new storage bits 0 .. a-1 for some a (each
    chunk is stored as 2^(nbits - a) runs of 2^a amplitudes)."""
    n = len(src_bit)
    dst_bit = list(range(n)) if dst_bit is None else list(dst_bit)
    a = 0
    while a < nbits and dst_bit[a] == a:
        a += 1
    if a == 0 and nbits:
        raise ValueError("dst_bit must keep chunk bit 0 in place")
    s_tab = _bit_table(dst_bit[a:nbits])
    s_high = np.asarray(dst_bit[nbits:], dtype=np.int64)
    high_src = np.asarray(src_bit[nbits:], dtype=np.int64)
    v_lane, v_stab, v_dtab, v_mode = _vector_tables(src_bit, nbits, scratch[0].re.itemsize)
    if v_lane.size:  # the load by vectors: the run tables go unread (one run stands for them)
        one = np.zeros(1, np.int64)
        run_bits, src_tab, dst_tab, scatter = nbits, one, one, np.zeros(0, np.int64)
    else:
        run_bits, src_tab, dst_tab, scatter = _load_tables(src_bit, nbits)
    in_place = in_place_ok and all(b == d for b, d in zip(src_bit[nbits:], dst_bit[nbits:]))
    src = phys.data
    if in_place:
        dst = src
    else:
        if phys.spare is None or phys.spare.shape != src.shape or phys.spare.dtype != src.dtype:
            phys.spare = np.empty_like(src)
        dst = phys.spare
    real = scratch[0].re.dtype
    x_src, x_dst = src.view(real), dst.view(real)
    n_chunks = 1 << (len(src_bit) - nbits)

    def work(t: int) -> None:
        sc = scratch[t]
        c0, c1 = t * n_chunks // len(scratch), (t + 1) * n_chunks // len(scratch)
        kernels.run_chunks(x_src, x_dst, c0, c1, nbits, lanes, high_src, run_bits, src_tab, dst_tab, scatter,
                           ops.table, ops.offs, ops.fixed, ops.highs, ops.m_re, ops.m_im, ops.skip, sc.re, sc.im,
                           sc.acc_re, sc.acc_im, sc.xs, v_lane, v_stab, v_dtab, v_mode, s_tab, s_high, fresh)

    if pool is None:
        work(0)
    else:
        list(pool.map(work, range(len(scratch))))
    if not in_place:
        phys.spare, phys.data = src, dst


def canonicalize(phys: PhysicalState, *, threads: int | None = None, block_bytes: int | None = None) -> bool:
    """Bring a CPU state into logical order in one compiled pass: the stage load with no gates,
    into the spare buffer that the stages left (none is allocated here). Where the state has
    none, or is not a complex numpy array, nothing is done and False is returned (the caller
    then takes its own path).

    A state left by the stage executor sits in the layout of its last stage; numpy's in-place
    permutation of it took 50-150 ms at 24 qubits on a 2-core AVX-512 host (QFT, quantum volume,
    brickworks; complex64 and complex128), up to 15% of the run, and this gather 21-106 ms less
    in 7 of 8 cases (docs/results.md, section 11). The gather writes
    only into the spare buffer and swaps the buffers at the end, so an interruption leaves the
    data as they were (still valid, in the old layout)."""
    data = phys.data
    if (phys.layout.is_identity or not isinstance(data, np.ndarray) or data.dtype not in (np.complex64, np.complex128)
            or phys.spare is None or phys.spare.shape != data.shape or phys.spare.dtype != data.dtype):
        return phys.layout.is_identity
    n, item = phys.n_qubits, data.dtype.itemsize
    n_threads = min(_THREADS if threads is None else max(1, int(threads)), 1 << max(0, n - 1))
    block = default_block_bytes(item, 0, n_threads) if block_bytes is None else block_bytes
    nbits = min(n, max(1, int(block // item).bit_length() - 1))
    n_threads = min(n_threads, 1 << (n - nbits))
    real = np.float32 if data.dtype == np.complex64 else np.float64
    scratch = [_Scratch(nbits, real) for _ in range(n_threads)]
    where = {q: s for s, q in enumerate(phys.layout.phys)}
    dst_bit = _canonical_chunk(phys.layout.phys, nbits, item)
    src_bit = [where[q] for q in dst_bit]
    none = _Ops(np.zeros((0, kernels.N_COLUMNS), np.int64), *(np.zeros(1, np.int64) for _ in range(3)),
                np.zeros(1, real), np.zeros(1, real), np.zeros(1, np.uint8))
    if n_threads > 1:
        with ThreadPoolExecutor(n_threads) as pool:
            _gather(phys, src_bit, nbits, 1, none, scratch, pool, in_place_ok=False, dst_bit=dst_bit)
    else:
        _gather(phys, src_bit, nbits, 1, none, scratch, None, in_place_ok=False, dst_bit=dst_bit)
    phys.layout.set(list(range(n)))
    return True


def _vector_tables(src_bit: list[int], nbits: int, real_bytes: int):
    """The chunk load by vectors (``kernels._gather_load``): (lane, stab, dtab, mode).

    A vector is the chunk's V = ``VECTOR_BYTES`` / ``real_bytes`` elements that differ in chunk
    bits 0 .. v-1; ``lane[j]`` is the source offset of its element j; ``mode`` is
    ``kernels.LOAD_CONTIGUOUS`` where those are 0 .. V-1, else one load an amplitude
    (``kernels.LOAD_AMPLITUDES``; the hardware gather with ``HARDWARE_GATHER``). The vectors are visited with the chunk bits above v ordered by the source bit
    each holds, lowest first (``stab``: the vector's source offset, ``dtab``: its place in the
    chunk), so consecutive vectors read neighbouring source lines and a line's amplitudes are
    gathered while it is in L1. Empty tables where the chunk is narrower than a vector, and where
    the low bits change without ``GATHER_LOAD``: the loads through ``_load_tables`` then serve."""
    v = (kernels.VECTOR_BYTES // real_bytes).bit_length() - 1
    if not VECTOR_LOAD or nbits < v or nbits - v > _MAX_VECTOR_TABLE_BITS:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    contig = all(src_bit[k] == k for k in range(v))
    if not contig and not GATHER_LOAD:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    order = sorted(range(v, nbits), key=lambda s: src_bit[s])
    mode = kernels.LOAD_CONTIGUOUS if contig else (kernels.LOAD_HARDWARE_GATHER if HARDWARE_GATHER
                                                   else kernels.LOAD_AMPLITUDES)
    return _bit_table(src_bit[:v]), _bit_table([src_bit[s] for s in order]), _bit_table(order), mode


def _canonical_chunk(stored, nbits: int, itemsize: int) -> list[int]:
    """The chunk of the gather into logical order (``dst_bit`` of ``_gather``): logical bits
    0 .. a-1 and the logical bits of the qubits at the lowest ``CANON_SOURCE_BITS`` storage bits
    (those of them at a or above; at most nbits / 2 of them), a + their count = nbits; then the
    other logical bits.

    A chunk of logical bits 0 .. nbits-1 alone reads each source line once for every chunk that
    holds one of its amplitudes: where the stages left high qubits in the low storage bits
    (their lanes), up to 8 chunks a line. Holding the qubits of the source's low bits makes
    every line read whole by one chunk (and runs of several lines), which is then stored as a
    few runs of 2^a.
    """
    n = len(stored)
    low = list(stored[:min(n, CANON_SOURCE_BITS.get(itemsize, 6), nbits // 2)])  # a >= nbits / 2
    a = nbits
    while True:
        extra = sorted(q for q in low if q >= a)
        if nbits - len(extra) == a:
            break
        a = nbits - len(extra)
    chunk = list(range(a)) + extra
    held = set(chunk)
    return chunk + [q for q in range(n) if q not in held]


def _bit_table(bits) -> np.ndarray:
    """For each index i < 2^len(bits), the offset whose bit ``bits[k]`` is bit k of i (int64)."""
    i = np.arange(1 << len(bits), dtype=np.int64)
    out = np.zeros_like(i)
    for k, b in enumerate(bits):
        out |= ((i >> k) & 1) << b
    return out


def _load_tables(src_bit: list[int], nbits: int):
    """The chunk load as runs of contiguous source amplitudes (see ``kernels.run_chunks``).

    The run covers the source bits 0 .. r-1 (r as large as the chunk holds them, at most
    ``_MAX_RUN_BITS``): read in order, they land at the chunk bits that hold them now
    (``scatter``, empty when those are bits 0 .. r-1 themselves). The other chunk bits index
    the runs: ``src_tab`` (where the run starts in the source) and ``dst_tab`` (in the chunk),
    ordered by source address.
    """
    new_of = {b: s for s, b in enumerate(src_bit)}
    run_bits = 0
    while run_bits < min(nbits, _MAX_RUN_BITS) and new_of[run_bits] < nbits:
        run_bits += 1
    placed = [new_of[k] for k in range(run_bits)]
    # runs in source order, so that consecutive runs are near each other in memory
    others = sorted((s for s in range(nbits) if s not in placed), key=lambda s: src_bit[s])
    src_tab, dst_tab = _bit_table([src_bit[s] for s in others]), _bit_table(others)
    scatter = np.zeros(0, dtype=np.int64) if placed == list(range(run_bits)) else _bit_table(placed)
    return run_bits, src_tab, dst_tab, scatter
