"""A stage plan as the program of the GPU stage kernel, and a numpy interpreter of that program.

The stage kernel (:mod:`qsim_tc.stages.kernel`) runs one stage of a
:class:`~qsim_tc.stages.plan.StagePlan` in one pass: each thread block loads a chunk of 2^L
amplitudes into shared memory, applies the stage's ops there and writes the chunk back. The
planner's index-bit swaps are *virtual*: no amplitude moves between stages. Instead each stage
says where its *slots* live in storage: ``slot_bits[p]`` is the storage bit of slot p (the
planner's physical bit p). Slots 0..L-1 are the local ones (the chunk), slots L..N-1 are fixed
per block. A swap of slots p and g only exchanges ``slot_bits[p]`` and ``slot_bits[g]``. Slots
0..C-1 (``keep_low``, never swapped with a global slot) stay at storage bits 0..C-1, so every
chunk is read in runs of 2^C consecutive amplitudes. Where the plan rotates its low bits
(``rotate_low``), the exchange of a low slot with another local one is real: the stage before
performs it as it stores its chunk (``StageCode.store_swaps``), so the new qubit of slot p < C
then lives at storage bit p.

Two kinds of op, both in the slot index space (bit p of an index is slot p):

- ``dense``: a 2^k x 2^k matrix on k local target slots (k <= :data:`MAX_DENSE`), applied
  where every bit of ``cmask`` is 1 (controls, local or not; a block whose fixed bits miss a
  control skips the op). Dense, permutation and controlled gates become this op.
- ``phase``: a run of diagonal gates, as *terms*: the amplitude at slot index x is multiplied by
  exp(2 pi i * sum of ``turn_t / 2^64`` over the terms t with ``x & mask_t == mask_t``). A d-bit
  diagonal with entries exp(2 pi i phi_v) becomes at most 2^d terms by the Moebius transform of
  its phases over subsets of its bits (a controlled phase is one term); terms of consecutive
  diagonal gates with the same mask add. Turns are 64-bit fixed-point fractions of a full turn, so
  the sums are exact modulo one turn: no rounding accumulates over the hundreds of controlled
  phases of a QFT stage.

  The terms go to the kernel as *groups*: a term's local bits are split into a condition (all
  but one) and one linear bit, its global bits (fixed per block) into a *gate* of its
  coefficient, and the terms of equal condition form a group whose phase is
  ``[x contains cond] * (const + sum of coef_p over the set linear bits p whose gates are set)``.
  A term with one local bit needs no condition: every phase between a local and a global qubit
  lands in the one group of empty condition. The kernel tabulates a whole run of groups in two
  tables per block, F over the local bits below a split s and the condition bits above it, G
  over the bits from s up and the condition bits below it (each entry one ``sincospi`` of an
  exact turn sum), so an amplitude pays two table reads and one complex product whatever the
  number of groups; condition bits that every group of the run has are tested per amplitude
  instead. A run is cut so that its tables fit :func:`phase_table_entries` (a lone group always
  does). Conditions are chosen to make few groups and few condition bits: for the terms of two
  local bits (controlled phases) greedily, the bit that most of them share first (a vertex
  cover), so the run of controlled phases after a QFT's Hadamard (all sharing the Hadamard's
  qubit) is one group; a term of three or more local bits takes as linear bit its bit shared by
  the fewest other terms.

Diagonal entries must have modulus 1 to within :data:`UNIT_TOLERANCE` (a unitary's do); the
phase form keeps their angle only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import permutations

import numpy as np

from circuits import Circuit, Gate
from circuits.fusion import fuse
from qsim_tc.stages.fusion import commuting_blocks, full_matrix
from qsim_tc.stages.plan import RELABEL, StagePlan
from qsim_tc.stages.relabel import bank_relabel, missing_residues, pair_conflicts
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL

MAX_DENSE = 5  # the widest dense op: 2^5 amplitudes a thread
MAX_STORE_LOW = 6  # store exchanges reach low slots 0..5 (the kernel packs 5 bits a slot in an int)
# phase groups per op (the kernel's per-group sums are sized by it), and the unit of the phase
# tables' shared memory: MAX_GROUPS x (2^6 + 2^(L-6)) entries (phase_table_entries), 8 KiB in
# complex128 at L = 12, which keeps a block under a third of an SM's 228 KiB
MAX_GROUPS = 4
UNIT_TOLERANCE = 1e-9  # |abs(z) - 1| allowed for a diagonal entry
OP_DENSE, OP_PHASE = 1, 2
# int64 words of one op record. The head, which the kernel reads in three 16-byte loads at once:
# type, k, cmask, data offset, the pre-phase's group count (a dense op's diagonal run applied
# first) and the tensor-core flag (1: a 2- or 3-qubit op in the layout of :func:`_mma_layout`).
# Then: the groups' count, the pre-phase's groups offset, sorted targets [MAX_DENSE], the 2^k
# offsets of a group's amplitudes (matrix index order) [2^MAX_DENSE], the tensor-core layout's
# group bits G0, G1, G2 [3] and the mask of the targets and group bits; then the tensor-core op's
# address constants (:func:`_mma_constants`, W_MC on), so that the kernel's warps read them rather
# than derive them (ncu on an H200: bit loops and swizzles before the tile loop were as many
# instructions as the loop's own); padding to an even count
W_TYPE, W_K, W_CMASK, W_DATA, W_PCOUNT, W_MMA, W_COUNT, W_PDATA, W_SORTED = range(9)
W_OFFS = W_SORTED + MAX_DENSE
W_G = W_OFFS + (1 << MAX_DENSE)
W_FIXED = W_G + 3
# the tensor-core kernel's warps (kernel.cu dense_mma: THREADS / 32), which the address
# constants depend on
MMA_WARPS = 8
# W_MC: [tile step, warp base [MMA_WARPS], swz(in bits) [8], swz(offset) [8], swz(out bits) [4],
# swz(out bits + G0) [4]]
W_MC = W_FIXED + 1
MC_WORDS = 1 + MMA_WARPS + 8 + 8 + 4 + 4
# a pair of 3-qubit tensor-core ops on disjoint targets (W_MMA = MMA_PAIR): the first op's targets
# and group bits are the two target sets, so that the warps apply the second to the first's
# results in registers (:func:`_pair_record`). W_PAIR: [the second matrix's offset, swz(row
# offset) [8], swz(column offset) [4], swz(column offset + 1) [4]]
MMA_PAIR = 2
W_PAIR = W_MC + MC_WORDS
PAIR_WORDS = 1 + 8 + 4 + 4
OP_WORDS = W_PAIR + PAIR_WORDS + (W_PAIR + PAIR_WORDS) % 2
# the kernel reads a record's first six words as three 16-byte loads: records stay 16-byte aligned
assert OP_WORDS % 2 == 0
MMA_K = (2, 3)  # the dense ops the complex128 kernel runs on its FP64 tensor cores
# amplitude sizes whose 2-qubit dense ops become 3-qubit ones (the identity on a third local
# qubit): complex128, where a 3-qubit op takes one m16n8k16 a tile of 64 amplitudes and a 2-qubit
# one an m16n8k8 (half of it zeros) a tile of 32, the same tensor work an amplitude in twice the
# tiles. H200, 28 qubits, in one process (stage_mma_consts_h200.json): QuantumVolume 153.4 ->
# 148.0 ms, brickwork(28, 2, 20) 85.5 -> 83.9, QFT 32.0 -> 32.1. (Before the tile loop read its
# address constants from the record, the same widening measured slower: 176 -> 194 ms on QV.)
WIDEN_2_TO_3 = (16,)
_TURN = 1 << 64
# the stage model's time of an op record by amplitude size (16: complex128, its 3-qubit ops on the
# tensor cores; 8: complex64, FMA loops): dense ops by width, phase ops, and a dense op's
# pre-phase, in units of the reference pass (choice.REFERENCE_PASS_MS: one complex128
# read+write of 2^28 amplitudes on an H200). Fitted with choice.STAGE_PASSES to the time of
# every stage of QFT, quantum volume and brickwork (gate widths 1-3, and 4 in complex64) programs
# at 28 qubits on an H200 (python -m benchmarks.bench.stage_fit, stage_fit_h200.json); circuit
# totals within 0.4-7%. An H100 ran the previous kernel's programs within 1% of the H200 in
# complex64 and 2-5% slower in complex128 (stage_tiles_h100.json); the unit is the same on both
# (the kernel is bound by its SMs more than by memory, whose pass differs 1.4x). complex128's
# 2-qubit ops widen to 3 (WIDEN_2_TO_3), so none is left to fit: its weight is the 3-qubit one
# times 1.2, the ratio of the two on the tensor cores in a synthetic stage (0.52 / 0.43 ms,
# stage_mma_consts_h200.json); it has no 4-qubit ops (its widest is 3), whose weight is a
# placeholder (1.5x the 3-qubit one). A pair record (two 3-qubit ops) weighs 1.52 times a 3-qubit
# op, the ratio of the two in a fit on an H100 (stage_fit_pairs_h100.json: d3 0.151, pair 0.229;
# circuit totals within 4%); complex64 has no pairs (its entry is twice its 3-qubit weight).
OP_PASSES = {16: {1: 0.22, 2: 0.21, 3: 0.175, 4: 0.26, "phase": 0.43, "pre": 0.87, "pair": 0.265},
             8: {1: 0.17, 2: 0.33, 3: 0.33, 4: 0.46, "phase": 0.40, "pre": 0.41, "pair": 0.50}}
# complex64's 2- and 3-qubit ops and pairs above are its tensor-core ops (kernel.MMA_GPU[8], off by
# default): from the whole-program times of their first form on an H100 (FP16, 5 terms:
# QuantumVolume 151.1 ms, brickwork(28, 2, 20) 91.5, 31 and 12 stages at the complex64 stage
# weight, a pair 1.5 ops; stage_tc32_h100.json), not a per-stage fit; the exact-product form is
# unmeasured. Complex64 programs whose 2- and 3-qubit ops run on the FMA loops (widen=False: the
# default, and GPUs without the mma shapes) take these weights, fitted as above
FMA_OP_PASSES = {8: {1: 0.17, 2: 0.19, 3: 0.26, 4: 0.46, "phase": 0.40, "pre": 0.41, "pair": 0.52}}


@dataclass(frozen=True)
class StageCode:
    """One stage as the kernel reads it.

    Attributes:
        slot_bits: int32 [N], the storage bit of each slot.
        ops: int64 [n_ops, OP_WORDS] records (module docstring).
        n_gates: the circuit gates the stage applies (relabels excluded).
        store_swaps: slot pairs (p < C, q < L) whose bits the store exchanges: the amplitude at
            chunk index i goes where index i with bits p and q swapped would.
    """

    slot_bits: np.ndarray
    ops: np.ndarray
    n_gates: int
    store_swaps: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class StageProgram:
    """A plan as the kernel's program.

    Attributes:
        n_qubits, local_qubits, keep_low: N, L and C.
        stages: one :class:`StageCode` per stage.
        matrices: complex128, the dense ops' matrices (row-major, each at its op's offset).
        groups: int64 [n_groups, 4]: condition mask, constant turn (as int64 bits), offset and
            count of its linear coefficients (a phase op's groups start at its data offset).
        coef_slots: int32, the slot of each linear coefficient.
        coef_turns: uint64, its turn.
        coef_gates: int64, its gate: the global slots (a mask) that must all be 1 for it to count.
        final_phys: the storage layout after the program: storage bit s holds logical qubit
            ``final_phys[s]``.
        global_phase: radians still to apply after the last stage: the plan's, where no dense
            op without controls took it into its matrix (:func:`_fold_phase`), else 0.
    """

    n_qubits: int
    local_qubits: int
    keep_low: int
    stages: tuple[StageCode, ...]
    matrices: np.ndarray
    groups: np.ndarray
    coef_slots: np.ndarray
    coef_turns: np.ndarray
    coef_gates: np.ndarray
    final_phys: tuple[int, ...]
    global_phase: float

    @property
    def n_ops(self) -> int:
        return sum(len(s.ops) for s in self.stages)


def diagonal_terms(diagonal: np.ndarray, positions) -> dict[int, int]:
    """The phase terms of one diagonal gate: {slot mask: turn as an int in [0, 2^64)}.

    Args:
        diagonal: the 2^d entries (bit j of the index is the gate's j-th qubit).
        positions: the slot of each of the gate's qubits.

    Raises:
        ValueError: an entry's modulus is not 1.
    """
    z = np.asarray(diagonal, dtype=np.complex128)
    if np.abs(np.abs(z) - 1.0).max() > UNIT_TOLERANCE:
        raise ValueError("a diagonal gate with entries of modulus other than 1 cannot run as phases")
    # turns in [-1/2, 1/2] as 64-bit fixed point; Python ints keep the Moebius sums exact mod 2^64
    c = [int(round(float(t) * 2.0**64)) % _TURN for t in np.angle(z) / (2 * np.pi)]
    d = len(positions)
    for j in range(d):
        bit = 1 << j
        for v in range(1 << d):
            if v & bit:
                c[v] = (c[v] - c[v ^ bit]) % _TURN
    out: dict[int, int] = {}
    for v, turn in enumerate(c):
        if turn:
            mask = 0
            for j in range(d):
                if v >> j & 1:
                    mask |= 1 << positions[j]
            out[mask] = (out.get(mask, 0) + turn) % _TURN
    return out


def build_program(plan: StagePlan, keep_low: int, *, fuse_qubits: int = 0,
                  block_qubits: int | None = None, itemsize: int = 16, widen: bool | None = None,
                  pairs: bool | None = None, relabel: bool = True) -> StageProgram:
    """Translate ``plan`` (made with ``keep_low`` kept low bits) into the kernel's program.

    Within a stage, consecutive dense gates on local slots are fused into blocks of at most
    ``fuse_qubits`` qubits (:func:`circuits.fusion.fuse`; 0: no fusion), which halves the passes
    over shared memory of a brickwork or quantum-volume stage; and a run of diagonal gates that
    directly precedes a dense op becomes that op's *pre-phase* (applied to the amplitudes as the
    op loads them), which saves the run its own pass over shared memory. Where the stage model
    (:func:`op_passes` for amplitudes of ``itemsize`` bytes) prices it lower, a stage is first
    regrouped by :func:`~qsim_tc.stages.fusion.commuting_blocks` into blocks of at most
    ``block_qubits`` (default: ``fuse_qubits``) qubits. ``widen``: 2-qubit dense ops become
    3-qubit ones (default: where ``itemsize`` is in :data:`WIDEN_2_TO_3`; pass False where the
    kernel will run its FMA loops, as on GPUs without the FP64 tensor-core shapes). ``pairs``:
    3-qubit ops on disjoint targets join in pair records (default: ``widen``; the tensor-core
    kernel runs them, :func:`_paired`). ``relabel``: a stage of pairs (no phases) renames its local
    slots above the kept low bits where that spares bank conflicts
    (:func:`~qsim_tc.stages.relabel.bank_relabel`).

    Raises:
        ValueError: a dense op wider than :data:`MAX_DENSE`, a dense op on a global slot, or a
            diagonal entry of modulus other than 1.
    """
    n, big_l = plan.n_qubits, plan.local_qubits
    width = min(fuse_qubits if block_qubits is None else block_qubits, MAX_DENSE)
    widen = itemsize in WIDEN_2_TO_3 if widen is None else widen
    pairs = widen if pairs is None else pairs
    slot_bits = list(range(n))
    pools = _Pools()
    stages = []
    sigma_before = list(range(big_l))  # the previous stage's renaming of its local slots (bank_relabel)
    for index, stage in enumerate(plan.stages):
        exchanges = []
        for p, g in stage.swaps:
            if g < big_l:  # a low slot's rotation: the previous stage's store moves the amplitudes
                if not (p < keep_low <= g) or p >= MAX_STORE_LOW or not stages:
                    raise ValueError(f"the plan exchanges local slots {p} and {g}: only a kept low slot "
                                     f"(< {min(keep_low, MAX_STORE_LOW)}) with another one, after the first stage")
                exchanges.append((p, g))  # slot_bits stay: each qubit takes the other's storage bit
                continue
            if p < keep_low or g < keep_low:
                raise ValueError(f"the plan swaps slot {min(p, g)}, one of the {keep_low} kept low bits")
            slot_bits[p], slot_bits[g] = slot_bits[g], slot_bits[p]
        if exchanges:  # (in the previous stage's chunk, whose local slots it may have renamed)
            stages[-1] = replace(stages[-1], store_swaps=tuple((p, sigma_before[g]) for p, g in exchanges))
        groups = _stage_groups(_blocked(stage, big_l, fuse_qubits, width, itemsize, widen, pairs), big_l,
                               fuse_qubits, pools, widen, pairs)
        sigma = None
        if relabel and pairs and all(isinstance(it, _Dense) and not it.pre_count for g in groups for it in g):
            after = plan.stages[index + 1].low_exchanges(big_l) if index + 1 < len(plan.stages) else ()
            sigma = bank_relabel([[(it.targets, it.widen) for it in g] for g in groups], big_l, keep_low, after)
        if sigma is not None:  # the kernel's local slot sigma[p] reads what slot p names
            groups = [[it.renamed(sigma) for it in g] for g in groups]
        sigma_before = sigma or list(range(big_l))
        kernel_bits = list(slot_bits)
        for p in range(big_l):
            kernel_bits[sigma_before[p]] = slot_bits[p]
        ops = np.array(_records(groups, big_l, pools), dtype=np.int64).reshape(-1, OP_WORDS)
        stages.append(StageCode(np.array(kernel_bits, dtype=np.int32), ops, stage.n_gates))
    final_phys = [0] * n
    for p, q in enumerate(plan.final_layout):
        final_phys[slot_bits[p]] = q
    matrices = np.concatenate(pools.mats) if pools.mats else np.zeros(1, np.complex128)
    phase = _fold_phase(stages, matrices, plan.global_phase)
    return StageProgram(n, big_l, keep_low, tuple(stages), matrices,
                        np.array(pools.groups or [[0, 0, 0, 0]], dtype=np.int64).reshape(-1, 4),
                        np.array(pools.coef_slots or [0], dtype=np.int32),
                        np.array(pools.coef_turns or [0], dtype=np.uint64),
                        np.array(pools.coef_gates or [0], dtype=np.int64), tuple(final_phys), phase)


def _fold_phase(stages, matrices: np.ndarray, phase: float) -> float:
    """The global phase folded into the matrix of the first dense record without controls (every
    amplitude passes through it once; a pair's first op), in place in ``matrices``: 0.0; where the
    program has none, ``phase`` (a pass of its own after the last stage)."""
    if not phase:
        return 0.0
    for stage in stages:
        for rec in stage.ops:
            if rec[W_TYPE] == OP_DENSE and rec[W_CMASK] == 0:
                off, size = int(rec[W_DATA]), 4 ** int(rec[W_K])
                matrices[off:off + size] *= np.exp(1j * phase)
                return 0.0
    return float(phase)


def op_passes(records, itemsize: int = 16, tensor: bool = True, big_l: int | None = None) -> float:
    """The stage model's time of a stage's op records (``StageCode.ops``) for amplitudes of
    ``itemsize`` bytes, in reference passes (:data:`OP_PASSES`; ``tensor=False``: the kernel runs
    every op on its FMA loops, :data:`FMA_OP_PASSES` where measured). With ``big_l`` (the local
    qubits), a dense op with g global controls weighs 2^-g: the kernel's blocks whose fixed bits
    miss a control skip it (one record read), so it runs in 2^-g of the blocks (Toffolis and
    Fredkins with global controls are a third of controlled_random(28, 30)'s complex128 op weight)."""
    w = OP_PASSES[itemsize] if tensor else FMA_OP_PASSES.get(itemsize, OP_PASSES[itemsize])
    total = 0.0
    for rec in records:
        dense = rec[W_TYPE] == OP_DENSE
        cost = (w["pair"] if rec[W_MMA] == MMA_PAIR else w[int(rec[W_K])]) if dense else w["phase"]
        if dense and rec[W_PCOUNT]:
            cost += w["pre"]
        if dense and big_l is not None:  # (cmask is a signed int64: a control on bit 63 reads negative)
            cost *= 2.0 ** -bin(int(rec[W_CMASK]) % (1 << 64) >> big_l).count("1")
        total += cost
    return total


def _blocked(stage, big_l: int, fuse_qubits: int, width: int, itemsize: int, widen: bool = False,
             pairs: bool = False):
    """``stage``, or its :func:`~qsim_tc.stages.fusion.commuting_blocks` form where the stage
    model prices that form's ops lower (it wins where diagonal runs split the gates: QFT; the
    convex fusion of the plain form wins on dense 2-qubit layers: quantum volume)."""
    if fuse_qubits <= 1 or width <= 1:
        return stage
    alt = commuting_blocks(stage, big_l, width)
    if alt.ops == stage.ops:
        return stage
    # (priced as the stage decision prices the program: tensor-core weights where ops widen, and
    # a globally controlled op at 2^-g)
    price = [op_passes(_stage_records(s, big_l, fuse_qubits, _Pools(), widen, pairs, priced=True), itemsize, widen,
                       big_l) for s in (stage, alt)]
    return alt if price[1] < price[0] else stage


class _Pools:
    """The program's constant pools, filled stage by stage."""

    def __init__(self):
        self.mats: list[np.ndarray] = []
        self.mat_off = 0
        self.groups: list[list[int]] = []
        self.coef_slots: list[int] = []
        self.coef_turns: list[int] = []
        self.coef_gates: list[int] = []

    def add_matrix(self, m: np.ndarray) -> int:
        off = self.mat_off
        self.mats.append(np.ascontiguousarray(m, dtype=np.complex128).ravel())
        self.mat_off += m.size
        return off

    def add_groups(self, part) -> int:
        """Append one op's groups; their coefficients go in one contiguous run, group after group
        (the kernel's prepare_phases reads them in one pass)."""
        off = len(self.groups)
        for cond, const, coefs in part:
            self.groups.append([_signed(cond), _signed(const), len(self.coef_slots), len(coefs)])
            for (slot, gate), turn in coefs:
                self.coef_slots.append(slot)
                self.coef_turns.append(turn)
                self.coef_gates.append(_signed(gate))
        return off


def _stage_records(stage, big_l: int, fuse_qubits: int, pools: _Pools, widen: bool = False,
                   pairs: bool = False, priced: bool = False) -> list[list[int]]:
    """The op records of one stage (see :func:`build_program`): ``widen``, 2-qubit ops widen to
    3; ``pairs``, 3-qubit ops on disjoint targets run as one record (:func:`_paired`).
    ``priced``: dense records carry only what :func:`op_passes` reads (kind, width, pre-phase,
    pair), for pricing a stage's forms without their matrices and address constants."""
    return _records(_stage_groups(stage, big_l, fuse_qubits, pools, widen, pairs), big_l, pools, priced)


def _stage_groups(stage, big_l: int, fuse_qubits: int, pools: _Pools, widen: bool, pairs: bool) -> list[list]:
    """One stage's items (phase records and :class:`_Dense` ops) in their order, in groups of one,
    or of two ops that make a pair record (:func:`_paired`)."""
    items: list = []  # phase records, and dense ops to place
    run: dict[int, int] = {}  # the pending diagonal run's terms
    local: list[tuple[list[int], int, np.ndarray, object]] = []  # pending local dense ops

    def emit_dense(targets, cmask, matrix):
        k = len(targets)
        if k > MAX_DENSE:
            raise ValueError(f"a dense op mixes {k} qubits; the stage kernel applies at most {MAX_DENSE}")
        if max(targets) >= big_l:
            raise ValueError(f"a dense op has a target on global slot {max(targets)} (L = {big_l})")
        chunks = _chunks(_groups(run, big_l), big_l)
        # a controlled op skips the amplitudes whose controls are 0: they would miss the phases
        # (more groups than one op's tables take: the first ones go in phase ops of their own)
        pre = [] if cmask or not chunks else chunks.pop()
        flush_phases(chunks)
        # a 2-qubit op widens when it becomes a record (its pad then avoids a pair partner's slots)
        items.append(_Dense(list(targets), cmask, matrix, pools.add_groups(pre) if pre else 0, len(pre),
                            k == 2 and widen))
        run.clear()

    def flush_phases(chunks=None):
        if chunks is None:
            chunks = _chunks(_groups(run, big_l), big_l)
        for part in chunks:
            items.append(_record(OP_PHASE, data=pools.add_groups(part), count=len(part)))
        run.clear()

    def flush_local():
        if not local:
            return
        if fuse_qubits > 1 and len(local) > 1:
            mini = Circuit(big_l)
            for targets, cmask, matrix, full in local:
                mini.append(full)
            by_gate = {id(full): (targets, cmask, matrix) for targets, cmask, matrix, full in local}
            for g in fuse(mini, min(fuse_qubits, MAX_DENSE)).gates:
                if id(g) in by_gate:
                    emit_dense(*by_gate[id(g)])  # a block of one gate keeps its controlled form
                else:
                    emit_dense(list(g.qubits), 0, g.matrix)
        else:
            for targets, cmask, matrix, _ in local:
                emit_dense(targets, cmask, matrix)
        local.clear()

    for op in stage.ops:
        if op.kind == RELABEL:
            continue  # names only: the planner's layout already accounts for it
        s = op.structure
        if op.kind == DIAGONAL:
            flush_local()
            for m, t in diagonal_terms(s.diagonal, op.positions).items():
                run[m] = (run.get(m, 0) + t) % _TURN
            continue
        if op.kind == CONTROLLED:
            targets = [op.positions[b] for b in s.targets]
            cmask = 0
            for b in s.controls:
                cmask |= 1 << op.positions[b]
        else:
            targets, cmask = list(op.positions), 0
        if cmask >> big_l or any(op.positions[b] >= big_l for b in range(s.n_bits)) or run:
            flush_local()  # a fixed control, or a pending diagonal run (it becomes a pre-phase)
            emit_dense(targets, cmask, s.target_matrix)
            continue
        local.append((targets, cmask, s.target_matrix, Gate(full_matrix(s), tuple(op.positions), "g",
                                                            check_unitary=False)))
    flush_local()
    flush_phases()
    return _paired(items, big_l) if pairs else [[item] for item in items]


def _records(groups, big_l: int, pools: _Pools, priced: bool = False) -> list[list[int]]:
    """The records of a stage's groups (:func:`_stage_groups`; ``priced``: :func:`_stage_records`)."""
    records = []
    for group in groups:
        if priced and isinstance(group[0], _Dense):
            rec = _record(OP_DENSE, k=3 if len(group) == 2 else len(group[0].widened(big_l).targets))
            rec[W_MMA] = MMA_PAIR if len(group) == 2 else 0
            rec[W_PCOUNT] = group[0].pre_count
            records.append(rec)
        elif len(group) == 2:
            records.append(_pair_record(*group, big_l, pools))
        elif isinstance(group[0], _Dense):
            records.append(_dense_record(group[0], big_l, pools))
        else:
            records.append(group[0])
    return records


@dataclass
class _Dense:
    """A dense op of a stage before it becomes a record: targets (slots, matrix index order),
    control mask, matrix, and its pre-phase's groups (offset, count)."""

    targets: list
    cmask: int
    matrix: np.ndarray
    pre_data: int
    pre_count: int
    widen: bool = False  # a 2-qubit op to run as a 3-qubit one

    def pairs(self, big_l: int) -> bool:
        """Whether it may run paired: a 3-qubit tensor-core op (or a 2-qubit one to widen) with no
        controls and no pre-phase."""
        k = len(self.targets)
        return (k == 3 or k == 2 and self.widen) and not self.cmask and not self.pre_count and big_l >= 6

    def renamed(self, sigma) -> _Dense:
        """The op with local slot p renamed ``sigma[p]`` (targets and local controls)."""
        cmask = 0
        for p in _bits(self.cmask):
            cmask |= 1 << (sigma[p] if p < len(sigma) else p)
        return replace(self, targets=[sigma[p] for p in self.targets], cmask=cmask)

    def widened(self, big_l: int, avoid=()) -> _Dense:
        """The op as a 3-qubit one (the identity on a pad slot outside ``avoid``, :func:`_pad_target`)
        where it widens and a slot is free; else itself."""
        pad = _pad_target(self.targets, self.cmask, big_l, avoid) if self.widen else None
        if pad is None:
            return self
        return _Dense(self.targets + [pad], self.cmask, np.kron(np.eye(2), self.matrix), self.pre_data,
                      self.pre_count)


def _dense_record(op: _Dense, big_l: int, pools: _Pools) -> list[int]:
    op = op.widened(big_l)
    targets, matrix, k = op.targets, op.matrix, len(op.targets)
    mma = _mma_layout(targets, big_l)
    if mma is not None:
        order, _ = mma
        matrix = _reorder(matrix, order)
        targets = [targets[m] for m in order]
    rec = _record(OP_DENSE, k=k, cmask=op.cmask, data=pools.add_matrix(matrix), targets=targets)
    if mma is not None:
        gbits = mma[1]
        rec[W_MMA] = 1
        rec[W_G:W_G + 3] = gbits
        rec[W_FIXED] = sum(1 << p for p in list(targets) + list(gbits))
        rec[W_MC:W_MC + MC_WORDS] = _mma_constants(rec, big_l)
    if op.pre_count:
        rec[W_PDATA], rec[W_PCOUNT] = op.pre_data, op.pre_count
    return rec


def _paired(items, big_l: int) -> list[list]:
    """The stage's items in an order that respects their dependencies (dense ops sharing a slot,
    target or control, keep their order; a phase record or an op with a pre-phase keeps its place
    against everything), as
    groups of one, or two pairable dense ops (:meth:`_Dense.pairs`) on disjoint targets: list
    scheduling, each step the first ready item, with the first ready op it pairs with.
    Quantum volume and brickwork(28, 2, 20) at L = 12 pair about 70% and 80% of their ops."""
    n = len(items)
    # None: keeps its place against everything (a phase record, or a dense op whose pre-phase
    # acts on slots beyond its targets)
    uses = [frozenset(it.targets) | frozenset(_bits(it.cmask)) if isinstance(it, _Dense) and not it.pre_count
            else None for it in items]
    waiting = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for j in range(n):
        for i in range(j):
            if uses[i] is None or uses[j] is None or uses[i] & uses[j]:
                succs[i].append(j)
                waiting[j] += 1
    ready = [j for j in range(n) if not waiting[j]]
    out = []
    while ready:
        a = ready.pop(0)
        group = [a]
        if isinstance(items[a], _Dense) and items[a].pairs(big_l):
            for b in ready:
                if isinstance(items[b], _Dense) and items[b].pairs(big_l) and not uses[a] & uses[b]:
                    ready.remove(b)
                    group.append(b)
                    break
        for i in group:
            for j in succs[i]:
                waiting[j] -= 1
                if not waiting[j]:
                    ready.append(j)
        ready.sort()
        out.append([items[i] for i in group])
    return out


def _pair_record(first: _Dense, second: _Dense, big_l: int, pools: _Pools) -> list[int]:
    """One record for two 3-qubit ops on disjoint targets T1, T2 (the kernel's dense_mma_pair).
    The first op's group bits are T2 (G0, G1, G2): its mma leaves a lane output amplitude g of
    groups 2t, 2t + 1, which is the second op's B operand when the second takes T2 in the order
    (G1, G2, G0) with T1 as its groups; its results go to shared memory once. Orders are chosen
    so that a quarter-warp's loads (bits T1[0], T1[1], G0) and stores (T1[1], T1[2], G1) fall in
    distinct bank slots where the residues mod 3 allow."""
    first = first.widened(big_l, second.targets)
    second = second.widened(big_l, first.targets)
    t1, t2 = first.targets, second.targets
    assert len(t1) == len(t2) == 3 and not set(t1) & set(t2), (t1, t2)  # L >= 6 leaves pads (_Dense.pairs)
    o1, o2 = min(((p, q) for p in permutations(range(3)) for q in permutations(range(3))),
                 key=lambda pq: pair_conflicts([t1[m] for m in pq[0]], [t2[m] for m in pq[1]]))
    targets = [t1[m] for m in o1]
    g0, g1, g2 = (t2[m] for m in o2)
    rec = _record(OP_DENSE, k=3, data=pools.add_matrix(_reorder(first.matrix, o1)), targets=targets)
    rec[W_MMA] = MMA_PAIR
    rec[W_G:W_G + 3] = (g0, g1, g2)
    rec[W_FIXED] = sum(1 << p for p in targets + [g0, g1, g2])
    rec[W_MC:W_MC + MC_WORDS] = _mma_constants(rec, big_l)
    second_order = [t2.index(p) for p in (g1, g2, g0)]
    rows = [swizzle((m & 1) << g1 | (m >> 1 & 1) << g2 | (m >> 2) << g0) for m in range(8)]
    cols = [swizzle(rec[W_OFFS + 2 * t]) for t in range(4)]
    cols1 = [swizzle(rec[W_OFFS + 2 * t + 1]) for t in range(4)]
    rec[W_PAIR:W_PAIR + PAIR_WORDS] = [pools.add_matrix(_reorder(second.matrix, second_order)), *rows, *cols, *cols1]
    return rec


def bank_conflicts(records) -> int:
    """The 2-way shared-memory bank conflicts of a stage's tensor-core records (``StageCode.ops``):
    per record, the quarter-warp accesses whose three index bits span fewer than three residues
    mod 3 (a pair's loads T[0], T[1], G0 and stores T[1], T[2], G1; a single op's loads T[0], T[1],
    G0 and stores T[0], G1, G2), counted by residues missing."""
    total = 0
    for rec in records:
        if rec[W_TYPE] != OP_DENSE or not rec[W_MMA] or rec[W_K] != 3:
            continue
        t = [int(rec[W_OFFS + (1 << m)]).bit_length() - 1 for m in range(3)]
        g = [int(x) for x in rec[W_G:W_G + 3]]
        if rec[W_MMA] == MMA_PAIR:
            total += pair_conflicts(t, g)
        else:
            total += missing_residues((t[0], t[1], g[0])) + missing_residues((t[0], g[1], g[2]))
    return total


def pair_targets(rec) -> list[int]:
    """The second op's targets of a pair record, in its matrix index order (G1, G2, G0)."""
    return [int(rec[W_G + 1]), int(rec[W_G + 2]), int(rec[W_G])]


def _record(kind: int, *, k: int = 0, cmask: int = 0, data: int = 0, count: int = 0, targets=()) -> list[int]:
    """One op record (OP_WORDS int64): for a dense op, its sorted targets and the offsets of
    its 2^k amplitudes in matrix index order (bit m of the index is ``targets[m]``)."""
    rec = [0] * OP_WORDS
    rec[W_TYPE], rec[W_K], rec[W_CMASK], rec[W_DATA], rec[W_COUNT] = kind, k, _signed(cmask), data, count
    for m, t in enumerate(sorted(targets)):
        rec[W_SORTED + m] = t
    for j in range(1 << k if targets else 0):
        rec[W_OFFS + j] = sum(1 << t for m, t in enumerate(targets) if j >> m & 1)
    return rec


def _mma_layout(targets, big_l: int):
    """The tensor-core layout of a dense op on ``targets`` (complex128 kernel, ``dense_mma``), or
    None where the kernel keeps its FMA loop (other widths, or fewer than k + 3 local slots).

    The kernel's shared memory moves an amplitude's 16-byte bank slot by bit ``t % 3`` when index
    bit t flips (``swz`` in ``kernel.cu``). A quarter-warp loads eight amplitudes that
    differ in the op's first two targets and group bit G0, and stores eight that differ in its
    first target and group bits G1, G2: where those three bits have distinct residues mod 3 the
    eight land in eight distinct slots (no bank conflict). Returns ``(order, (G0, G1, G2))``:
    the target order to use (indices into ``targets``; the matrix follows it, :func:`_reorder`)
    and three local non-target slots.
    """
    k = len(targets)
    if k not in MMA_K or big_l < k + 3:
        return None
    order = list(range(k))
    pairs = [(a, b) for a in range(k) for b in range(k) if a != b and targets[a] % 3 != targets[b] % 3]
    if pairs:
        a, b = pairs[0]
        order = [a, b] + [m for m in range(k) if m not in (a, b)]
    ta, tb = targets[order[0]], targets[order[1]]
    free = [p for p in range(big_l) if p not in targets]

    def take(residue, used):
        for p in free:
            if p not in used and (residue is None or p % 3 == residue):
                return p
        return next(p for p in free if p not in used)

    rest = [q for q in range(3) if q != ta % 3]
    g1 = take(rest[0], ())
    g2 = take(rest[1], (g1,))
    third = [q for q in range(3) if q not in (ta % 3, tb % 3)]
    g0 = take(third[0] if third else None, (g1, g2))
    return order, (g0, g1, g2)


def _pad_target(targets, cmask: int, big_l: int, avoid=()):
    """A local slot to widen a 2-qubit op on ``targets`` with (neither a target nor a control),
    chosen so that the tensor-core layout keeps its loads and stores off shared bank conflicts
    (:func:`_mma_layout`: two targets of distinct residues mod 3): one of the residue the two
    targets miss, else any, and none of ``avoid`` (a pair partner's slots); None where the chunk
    has no room for the 3-qubit layout."""
    if big_l < 6:
        return None
    used = set(targets) | set(_bits(cmask)) | set(avoid)
    free = [p for p in range(big_l) if p not in used]
    missing = {0, 1, 2} - {t % 3 for t in targets}
    for p in free:
        if p % 3 in missing:
            return p
    return free[0] if free else None


def swizzle(i: int) -> int:
    """Where local index ``i`` lives in the complex128 tensor-core kernel's shared memory
    (``swz`` in ``kernel.cu``)."""
    return i ^ (((i >> 3) ^ (i >> 6) ^ (i >> 9) ^ (i >> 12) ^ (i >> 15)) & 7)


def deposit(x: int, mask: int) -> int:
    """The low bits of ``x`` placed at the set bits of ``mask``, from bit 0 up (a pdep)."""
    r = 0
    for p in _bits(mask):
        if x & 1:
            r |= 1 << p
        x >>= 1
    return r


def _mma_constants(rec: list[int], big_l: int) -> list[int]:
    """The address constants of a tensor-core op record (W_MC on; the kernel's dense_mma). The
    tiles are numbered by the local bits outside the targets and group bits (``free``): warp w
    takes tiles w, w + WARPS, ..., at bases deposit(tile, free), which it steps in place from its
    first. A lane (g, t) reads input amplitudes t and t + 4 of group g and writes output amplitude
    g of groups 2t and 2t + 1: as swz is linear over XOR on disjoint bits, each of its addresses
    is swz(base) XOR swz(group bits) XOR swz(offset)."""
    k, g0, g1, g2 = rec[W_K], *rec[W_G:W_G + 3]
    free = ((1 << big_l) - 1) & ~rec[W_FIXED]
    step = deposit(MMA_WARPS, free)
    wbase = [deposit(w, free) for w in range(MMA_WARPS)]
    s_in = [swizzle((g & 1) << g0 | (g >> 1 & 1) << g1 | (g >> 2) << g2) for g in range(8)]
    s_off = [swizzle(rec[W_OFFS + j]) if j < 1 << k else 0 for j in range(8)]
    s_out = [swizzle((t & 1) << g1 | (t >> 1) << g2) for t in range(4)]
    s_out1 = [swizzle((t & 1) << g1 | (t >> 1) << g2 | 1 << g0) for t in range(4)]
    return [step, *wbase, *s_in, *s_off, *s_out, *s_out1]


def _reorder(matrix: np.ndarray, order) -> np.ndarray:
    """``matrix`` on targets taken in ``order``: bit m of the new index is bit ``order[m]`` of
    the old one."""
    k = len(order)
    idx = np.arange(1 << k)
    old = np.zeros(1 << k, dtype=np.int64)
    for m, o in enumerate(order):
        old |= ((idx >> m) & 1) << o
    return matrix[np.ix_(old, old)]


def _groups(terms: dict[int, int], big_l: int) -> list[tuple[int, int, list[tuple[tuple[int, int], int]]]]:
    """The terms {mask: turn} as groups (local condition, constant turn, [((linear slot, gate), turn)]).

    A term's global bits (slots >= ``big_l``) become the gate of its coefficient; of its local
    bits, one is linear and the rest its condition. Terms of two local bits take as condition,
    greedily, the bit that most of the terms not yet placed share (a small vertex cover: few
    groups); wider ones their bit that the fewest multi-bit terms share as the linear one (ties:
    the higher slot). A term of one local bit joins the group conditioned on that bit where the
    cover made one (its linear bit then a global one, a constant per block: no group more), else
    the group of empty condition, gated; a term with no local bit is a coefficient of one of its
    global bits there.
    """
    lmask = (1 << big_l) - 1
    share: dict[int, int] = {}
    for m in terms:
        if m & lmask & (m & lmask) - 1:
            for p in _bits(m & lmask):
                share[p] = share.get(p, 0) + 1
    by_cond: dict[int, list] = {}

    def add(cond: int, lin: int, gate: int, t: int) -> None:
        g = by_cond.setdefault(cond, [0, {}])
        g[1][(lin, gate)] = (g[1].get((lin, gate), 0) + t) % _TURN

    def const(cond: int, t: int) -> None:
        g = by_cond.setdefault(cond, [0, {}])
        g[0] = (g[0] + t) % _TURN

    pairs, singles = [], []
    for m, t in terms.items():
        if not t:
            continue
        local, glob = m & lmask, m & ~lmask
        if m == 0:
            const(0, t)
        elif local == 0:
            lin = _bits(glob)[-1]
            add(0, lin, glob & ~(1 << lin), t)
        elif local & (local - 1) == 0:
            singles.append((local, glob, t))
        elif bin(local).count("1") == 2:
            pairs.append((local, glob, t))
        else:
            lin = min(_bits(local), key=lambda p: (share.get(p, 0), -p))
            add(local & ~(1 << lin), lin, glob, t)
    while pairs:  # greedy vertex cover of the two-bit terms
        degree: dict[int, int] = {}
        for local, _, _ in pairs:
            for p in _bits(local):
                degree[p] = degree.get(p, 0) + 1
        cond = max(degree, key=lambda p: (degree[p], -p))
        rest = []
        for local, glob, t in pairs:
            if local >> cond & 1:
                add(1 << cond, (local & ~(1 << cond)).bit_length() - 1, glob, t)
            else:
                rest.append((local, glob, t))
        pairs = rest
    for local, glob, t in singles:
        if local not in by_cond:
            add(0, local.bit_length() - 1, glob, t)
        elif glob:
            lin = _bits(glob)[-1]
            add(local, lin, glob & ~(1 << lin), t)
        else:
            const(local, t)
    return [(cond, const, sorted(coefs.items())) for cond, (const, coefs) in sorted(by_cond.items())]


def phase_table_entries(local_qubits: int) -> int:
    """The entries of one block's phase tables (F and G of ``prepare_phases`` in the kernel)."""
    return MAX_GROUPS * ((1 << min(6, local_qubits)) + (1 << max(local_qubits - 6, 0)))


def table_size(conds, local_qubits: int) -> int:
    """The entries the kernel's tables F and G take for groups of these local conditions: the
    bits all share are tested per amplitude, the others index the tables, split at the s that
    makes them smallest (``prepare_phases`` in ``kernel.cu`` picks the same)."""
    need = -1
    for c in conds:
        need &= c
    other = 0
    for c in conds:
        other |= c & ~need
    ones = lambda m: bin(m).count("1")  # noqa: E731
    return min((1 << (s + ones(other >> s))) + (1 << (local_qubits - s + ones(other & ((1 << s) - 1))))
               for s in range(local_qubits + 1))


def _chunks(items, big_l: int) -> list[list]:
    """Groups in runs of at most :data:`MAX_GROUPS` whose tables fit :func:`phase_table_entries`
    (a lone group always does: its condition is tested, not tabulated), in order."""
    cap = phase_table_entries(big_l)
    out: list[list] = []
    for item in items:
        if out and len(out[-1]) < MAX_GROUPS and table_size([c for c, _, _ in out[-1]] + [item[0]], big_l) <= cap:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def _bits(m: int) -> list[int]:
    return [p for p in range(m.bit_length()) if m >> p & 1]


def _signed(x: int) -> int:
    """A 64-bit pattern as the int64 that holds it."""
    return x - _TURN if x >= 1 << 63 else x


def emulate(program: StageProgram, data: np.ndarray, tensor_cores: bool = False, rounded: bool = False) -> np.ndarray:
    """Run ``program`` on a numpy state in storage order (in place), as the kernel does.

    The reference the kernel is tested against, and a check of the translation on any machine:
    each stage is applied to the whole state in slot order (gathered through ``slot_bits``) op by
    op, then scattered back. Returns ``data``. The global phase is not applied (the caller does).
    ``tensor_cores`` (a complex64 ``data``): the tensor-core records (2- and 3-qubit dense ops and
    pairs) are computed as the complex64 kernel's FP16 tiles compute them
    (:mod:`qsim_tc.stages.tc32`); other ops, and every op without it, in numpy's arithmetic.
    ``rounded``: every dense op's product in complex128, rounded once to ``data``'s dtype (the best
    any arithmetic can store per op: the floor of a program's error in that dtype).
    """
    if tensor_cores and data.dtype != np.complex64:
        raise ValueError(f"tensor_cores emulates the complex64 kernel; the state is {data.dtype}")
    if tensor_cores and rounded:
        raise ValueError("tensor_cores and rounded are two arithmetics; pass one")
    n = program.n_qubits
    x = np.arange(1 << n, dtype=np.int64)
    for stage in program.stages:
        addr = np.zeros(1 << n, dtype=np.int64)
        for p, b in enumerate(stage.slot_bits):
            addr |= ((x >> p) & 1) << int(b)
        v = data[addr]
        src = x
        for p, q in stage.store_swaps:  # the store's exchanges (StageCode.store_swaps)
            flip = ((src >> p) ^ (src >> q)) & 1
            src = src ^ ((flip << p) | (flip << q))
        for rec in stage.ops:
            if rec[W_TYPE] == OP_DENSE:
                _phases(program, v, x, int(rec[W_PDATA]), int(rec[W_PCOUNT]))
                k = int(rec[W_K])
                offs = [int(o) for o in rec[W_OFFS:W_OFFS + (1 << k)]]
                t = [offs[1 << m].bit_length() - 1 for m in range(k)]
                cmask = int(rec[W_CMASK]) % _TURN
                m = program.matrices[int(rec[W_DATA]):int(rec[W_DATA]) + (1 << 2 * k)].reshape(1 << k, 1 << k)
                tc = bool(tensor_cores and rec[W_MMA] and k in MMA_K)
                _dense(v, n, t, cmask, m, tc, rounded)
                if rec[W_MMA] == MMA_PAIR:
                    m2 = program.matrices[int(rec[W_PAIR]):int(rec[W_PAIR]) + 64].reshape(8, 8)
                    _dense(v, n, pair_targets(rec), 0, m2, tc, rounded)
            else:
                _phases(program, v, x, int(rec[W_DATA]), int(rec[W_COUNT]))
        data[addr] = v[src]
    return data


def _phases(program: StageProgram, v: np.ndarray, x: np.ndarray, first: int, count: int) -> None:
    """v <- v * the phases of groups ``first .. first + count - 1`` (v in slot order, x its indices)."""
    if not count:
        return
    acc = np.zeros(x.size, dtype=np.uint64)
    for cond, const, off, cnt in program.groups[first:first + count]:
        part = np.full(x.size, np.uint64(int(const) % _TURN))
        for p, turn, gate in zip(program.coef_slots[off:off + cnt], program.coef_turns[off:off + cnt],
                                 program.coef_gates[off:off + cnt]):
            on = ((x >> int(p)) & 1 == 1) & ((x & gate) == gate)
            part[on] += turn  # wraps modulo 2^64, as the kernel's sums do
        hit = (x & cond) == cond
        acc[hit] += part[hit]
    v *= np.exp(2j * np.pi * (acc.view(np.int64) / 2.0**64))


def _dense(v: np.ndarray, n: int, targets: list[int], cmask: int, m: np.ndarray, tensor: bool = False,
           rounded: bool = False) -> None:
    """v <- m on the target bits where the control bits are all 1 (v in slot order); ``rounded``: the
    product in complex128, rounded once to v's dtype; ``tensor``:
    in the complex64 kernel's tensor-core arithmetic (:func:`qsim_tc.stages.tc32.apply_op`, compiled:
    :mod:`qsim_tc.stages.tc32_compiled`)."""
    k = len(targets)
    others = [p for p in range(n) if p not in targets]
    base = np.zeros(1 << (n - k), dtype=np.int64)
    g = np.arange(1 << (n - k), dtype=np.int64)
    for j, p in enumerate(others):
        base |= ((g >> j) & 1) << p
    base = base[(base & cmask) == cmask]
    offs = np.zeros(1 << k, dtype=np.int64)
    for j in range(1 << k):
        for i, p in enumerate(targets):
            if j >> i & 1:
                offs[j] |= 1 << p
    idx = base[:, None] + offs[None, :]
    if tensor:
        # compiled, bit for bit the numpy form's (qsim_tc.stages.tc32), which is too slow past ~18 qubits
        from qsim_tc.stages.tc32_compiled import apply_op  # noqa: PLC0415 - emulation, for tests

        v[idx] = apply_op(m, v[idx])
    elif rounded:
        v[idx] = (v[idx].astype(np.complex128) @ m.T.astype(np.complex128)).astype(v.dtype)
    else:
        v[idx] = v[idx] @ m.T.astype(v.dtype)
