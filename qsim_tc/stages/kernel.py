"""Runs a stage program (:mod:`qsim_tc.stages.program`) on a GPU state: one kernel launch,
one pass over the state, per stage, in place (the kernel: ``kernel.cu``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gemm.cuda.compile import raw_module
from qsim_tc.stages.program import (
    MAX_DENSE,
    MAX_GROUPS,
    MAX_STORE_LOW,
    MMA_PAIR,
    MMA_WARPS,
    OP_PHASE,
    W_MMA,
    W_PCOUNT,
    W_TYPE,
    StageProgram,
    phase_table_entries,
)

THREADS = 256
MAX_LOCAL = 16  # the kernel's LMAX: per-bit phase sums of a chunk of at most 2^16 amplitudes
# the widest dense op per precision: complex128 at 4 targets needs 128 registers a thread (two
# blocks an SM), at 3 it needs 80 (three blocks); complex64 fits 4 in 128
MAX_DENSE_GPU = {8: 4, 16: 3}
# blocks an SM the registers must allow (__launch_bounds__): shared memory admits three blocks of
# 2^12 complex128 or 2^13 complex64 amplitudes (about 74 KiB each), and the phase-factor tables
# took the kernel past the 85 registers a thread of three 256-thread blocks (107-109 unbounded;
# 80 with a 48-byte spill)
MIN_BLOCKS = {8: 3, 16: 3}
# the widest dense op that applies its pre-phase as it loads its amplitudes (wider: a sweep of its
# own); complex128 at 2 spilled under the 80-register bound
PRE_MAX_K = {8: 2, 16: 1}
# complex128 dense ops of 2 and 3 qubits on the FP64 tensor cores (mma m16n8k8 / m16n8k16), the
# chunk swizzled in shared memory against bank conflicts (kernel.cu dense_mma), in the
# stages that have such ops. H200, 28 qubits (stage_mma_h200.json, with m8n8k4): QuantumVolume
# 293 -> 262 ms, brickwork(28, 2, 20) 183 -> 144; the sm_90 shapes run at twice m8n8k4's rate
# (stage_tiles_h200.json: QV 191 -> 179, brickwork 111 -> 98). The swizzle alone would cost QFT's
# one-qubit stages 2-4%, so stages without such ops keep the plain kernel
# complex64 dense ops of 2 and 3 qubits (and pairs) on the FP16 tensor cores with an exact leading
# product (kernel.cu TcA; :mod:`qsim_tc.stages.tc32` emulates it), in a complex64 chunk of 2^13
# amplitudes swizzled as complex128's: off by default, being slower than the complex128 programs
# widened for a complex64 state, which the model takes for these circuits. On an H100 at 28 qubits
# (stage_tc32_h100.json; error-corrected TF32 / FP16 forms, since replaced by this one for their
# bias) they ran QuantumVolume in 137.7-187.5 ms against 117.2, brickwork(28, 2, 20) 83.6-116.0
# against 59.9, QFT 25.3-28.6 against 24.2 on the FMA loops, though their arithmetic floors are
# 19-39, 12-25 and 1.5-3 ms: a tile costs 70-90 instructions a lane (splits, grids, accumulator
# sums) against ~15 for an FP64 mma, and 8-byte amplitudes under complex128's swizzle meet 2-way
# bank conflicts. FP16 mma needs sm_80; FP64 m16n8k16 sm_90
MMA_GPU = {8: False, 16: True}
MMA_MIN_CC = {8: 80, 16: 90}

# A complex64 state may run the complex128 programs (``wide``): the kernel widens each chunk to
# complex128 in shared memory as it loads and rounds it back as it stores (STATE_C64), so complex64
# gets the tensor-core ops, pairs and rotating low bits at half complex128's memory traffic. The
# widening keeps half a chunk in registers (WIDE_L_MAX in the kernel) and copies two amplitudes a
# 16-byte copy (C >= 1)
WIDE_MAX_LOCAL = 12


# the widest block of the stage program's commuting blocks (program.build_program): the
# complex128 tensor-core ops take 3 qubits at the cost of 1; complex64's FMA loops cost more per
# target. H200, 28 qubits, QFT (stage_blocks_h200.json): complex128 72.4 ms unblocked, 62.7 at
# width 2, 49.7 at 3; complex64 46.4 unblocked, 38.1 at 2, 39.8 at 3, 41.1 at 4. Since its ops with
# a pre-phase became cheaper (split table indices), complex64 gains from 3 as well: QFT-28 25.6 ms
# at 2, 24.7 at 3, 26.4 at 4; its own quantum volume and brickwork programs unchanged within 0.3%
# (stage_blocks_c64_h200.json)
BLOCK_QUBITS = {8: 3, 16: 3}


def tensor_core_ops(dtype, compute_capability: int | None = None) -> bool:
    """Whether the stage kernel runs the dense ops of a state of ``dtype`` on its tensor cores on a
    GPU of ``compute_capability`` (default: the current GPU's; FP64 mma in the shapes m16n8k8 /
    m16n8k16 needs sm_90, FP16 m16n8k16 sm_80: older GPUs take the FMA loops). Programs for it widen
    2-qubit ops to 3 and pair 3-qubit ops (pass ``widen=`` this to program.build_program), which
    would double an FMA loop's work."""
    item = np.dtype(dtype).itemsize
    if not MMA_GPU.get(item, False):
        return False
    if compute_capability is None:
        try:
            import cupy  # noqa: PLC0415 - optional dependency

            compute_capability = int(cupy.cuda.Device().compute_capability)
        except Exception:  # no cupy or no GPU
            return False
    return compute_capability >= MMA_MIN_CC[item]


def block_qubits(dtype) -> int:
    """The widest commuting block of the stage program for a state of ``dtype``."""
    return BLOCK_QUBITS[np.dtype(dtype).itemsize]


def sm_ghz() -> float:
    """The current GPU's SM count times its clock in GHz (the stage model scales by it)."""
    import cupy  # noqa: PLC0415 - optional dependency

    attrs = cupy.cuda.Device().attributes
    clock_khz = attrs.get("ClockRate") or 1.98e6  # (kHz; the H100 / H200 boost where not reported)
    return float(attrs["MultiProcessorCount"]) * float(clock_khz) * 1e-6


def max_dense(dtype) -> int:
    """The widest dense op the stage kernel applies for a state of ``dtype``."""
    return MAX_DENSE_GPU[np.dtype(dtype).itemsize]


LOG_THREADS = 8  # the kernel's: a thread's amplitudes share their index bits below it
assert THREADS == 1 << LOG_THREADS, "the kernel's LOG_THREADS"


def shared_bytes(local_qubits: int, itemsize: int) -> int:
    """Dynamic shared memory of one block: the chunk, the offset table of its high index bits,
    one dense op's matrix, the phase sweeps' step table (16 bytes a step of THREADS amplitudes) and
    the phase groups' tables (phase factors in the state's precision)."""
    steps = 1 << max(local_qubits - LOG_THREADS, 0)
    offsets = 8 * max(steps, 2)  # (even: the matrix stays 16-byte aligned)
    matrix = itemsize << (2 * MAX_DENSE_GPU[itemsize])
    tables = 16 * steps + itemsize * phase_table_entries(local_qubits)
    return (itemsize << local_qubits) + offsets + matrix + tables


@functools.lru_cache(maxsize=None)
def _kernel(device_id: int, itemsize: int, mma: bool = False, phases: bool = True, wide: bool = False,
            min_blocks: int | None = None):
    # itemsize: the chunk's amplitudes (the program's precision); wide: the state is complex64
    real = "double" if itemsize == 16 else "float"
    options = (f"-DREAL={real}", f"-DMAX_K={MAX_DENSE_GPU[itemsize]}", f"-DMAX_DENSE={MAX_DENSE}",
               f"-DMAX_GROUPS={MAX_GROUPS}", f"-DTHREADS={THREADS}", f"-DMIN_BLOCKS={min_blocks or MIN_BLOCKS[itemsize]}",
               f"-DPRE_MAX_K={PRE_MAX_K[itemsize]}", f"-DSTAGE_MMA={int(mma)}", f"-DSTAGE_PHASES={int(phases)}",
               f"-DMMA_WARPS={MMA_WARPS}", f"-DSTATE_C64={int(wide)}", "-std=c++17")
    return raw_module(__package__, "kernel.cu", options, device_id).get_function("stage_kernel")


def program_dtype(dtype, wide: bool = False) -> np.dtype:
    """The precision a state of ``dtype`` runs its stage program in: complex128 where ``wide``
    (a complex64 state on the complex128 programs), else its own."""
    dtype = np.dtype(dtype)
    if wide and dtype != np.complex64:
        raise ValueError(f"wide: only a complex64 state runs the complex128 programs, not {dtype}")
    return np.dtype(np.complex128) if wide else dtype


@dataclass(frozen=True)
class Pools:
    """A program on the device: its constant pools (matrices in the state's precision, groups,
    coefficient slots, turns and gates) and every stage's op records and slot maps, each kind
    in one array, so that a stage's launch copies nothing (a copy from pageable host memory
    waits for the stream: a stage's copies had left the GPU idle between stages)."""

    mats: object
    wmats: object  # the matrices in complex128 (the same array as mats for a complex128 program)
    groups: object
    coef_slots: object
    coef_turns: object
    coef_gates: object
    ops: object  # int64: the stages' records, one after another
    ints: object  # int32: each stage's slot_bits, then its global slots and their storage bits
    ops_at: tuple[int, ...]
    ints_at: tuple[int, ...]
    wide: bool = False  # a complex64 state on a complex128 program (WIDE_MAX_LOCAL)


def upload(program: StageProgram, dtype, wide: bool = False) -> Pools:
    """``program`` on the device for a state of ``dtype`` (:class:`Pools`); ``wide``: the state is
    complex64 and the program runs in complex128 (:func:`program_dtype`)."""
    import cupy  # noqa: PLC0415 - optional dependency

    wmats = cupy.asarray(program.matrices)  # complex128: the complex64 tensor-core ops split from it
    mats = wmats if program_dtype(dtype, wide) == np.complex128 else wmats.astype(np.complex64)
    big_l = program.local_qubits
    # (words 0, 1: a valid pointer for a stage without ops; the kernel reads records in 16-byte
    # loads, so each stage's start stays 16-byte aligned: OP_WORDS is even)
    ops, ints, ops_at, ints_at = [np.zeros(2, np.int64)], [], [], []
    n_ops, n_ints = 2, 0
    for stage in program.stages:
        slot_bits = np.asarray(stage.slot_bits, np.int32)
        order = np.argsort(slot_bits[big_l:], kind="stable")
        part = np.concatenate([slot_bits, (big_l + order).astype(np.int32), slot_bits[big_l:][order]])
        ops_at.append(n_ops if stage.ops.size else 0)
        ints_at.append(n_ints)
        ops.append(stage.ops.reshape(-1).astype(np.int64))
        ints.append(part)
        n_ops += stage.ops.size
        n_ints += part.size
    return Pools(mats, wmats, cupy.asarray(program.groups), cupy.asarray(program.coef_slots),
                 cupy.asarray(program.coef_turns), cupy.asarray(program.coef_gates), cupy.asarray(np.concatenate(ops)),
                 cupy.asarray(np.concatenate(ints) if ints else np.zeros(1, np.int32)), tuple(ops_at), tuple(ints_at),
                 wide)


def has_phases(ops: np.ndarray) -> bool:
    """Whether a stage's op records apply phase groups (a phase op, or a dense op's pre-phase):
    stages without take the kernel compiled without the phase code (STAGE_PHASES=0)."""
    return bool(ops.size) and bool(((ops[:, W_TYPE] == OP_PHASE) | (ops[:, W_PCOUNT] > 0)).any())


def store_exchanges(store_swaps) -> int:
    """``StageCode.store_swaps`` as the kernel's ``store_x``: the partner of low slot p in bits
    5p .. 5p + 4 (0: none)."""
    x = 0
    for p, q in store_swaps:
        if not 0 <= p < MAX_STORE_LOW or not p < q < 32:
            raise ValueError(f"store exchange ({p}, {q}): the kernel takes low slots < {MAX_STORE_LOW} "
                             "with a higher partner")
        x |= q << (5 * p)
    return x


def run_stage(data, program: StageProgram, index: int, pools, fresh: bool = False) -> None:
    """Apply stage ``index`` of ``program`` to ``data`` (1-D cupy array of 2^N amplitudes, storage
    order), in place. ``fresh``: ``data`` is not written yet and stands for |0...0>; the stage
    makes its chunks instead of reading them (a pass fewer than zeroing the state first).
    ``pools``: the program on the device (:func:`upload`)."""
    n, big_l, c = program.n_qubits, program.local_qubits, program.keep_low
    if big_l > MAX_LOCAL:
        raise ValueError(f"the stage kernel takes at most {MAX_LOCAL} local qubits, the program has {big_l}")
    stage = program.stages[index]
    wide = pools.wide
    if wide and (data.dtype != np.complex64 or big_l > WIDE_MAX_LOCAL or c < 1):
        raise ValueError(f"a wide program runs a complex64 state with at most {WIDE_MAX_LOCAL} local qubits "
                         f"and a kept low bit; got {data.dtype}, L = {big_l}, C = {c}")
    compute = program_dtype(data.dtype, wide)
    item = compute.itemsize
    shared = shared_bytes(big_l, item)
    tensor = tensor_core_ops(compute, int(data.device.compute_capability))
    if not tensor and stage.ops.size and bool((stage.ops[:, W_MMA] == MMA_PAIR).any()):
        raise ValueError("the program pairs tensor-core ops, which this kernel (complex64, or a GPU before "
                         "sm_90) runs one at a time: build it with widen=False")
    mma = tensor and bool(stage.ops.size) and bool(stage.ops[:, W_MMA].any())
    kern = _kernel(data.device.id, item, mma, has_phases(stage.ops), wide, MIN_BLOCKS[item])
    # the attribute belongs to the function, shared by every L: set it for this launch
    kern.max_dynamic_shared_size_bytes = shared
    ops = pools.ops[pools.ops_at[index]:]
    at = pools.ints_at[index]
    slot_bits, gslot, gbit = pools.ints[at:at + n], pools.ints[at + n:], pools.ints[at + 2 * n - big_l:]
    kern((1 << (n - big_l),), (THREADS,),
         (data, np.int32(n), np.int32(big_l), np.int32(c), slot_bits, gslot, gbit, ops, np.int32(len(stage.ops)),
          pools.mats, pools.wmats, pools.groups, pools.coef_slots, pools.coef_turns, pools.coef_gates,
          np.int32(store_exchanges(stage.store_swaps)), np.int32(bool(fresh))),
         shared_mem=shared)


def run_program(data, program: StageProgram, fresh: bool = False, wide: bool = False) -> None:
    """Apply every stage of ``program`` to ``data`` in place (no global phase); ``fresh``: the
    first stage starts from |0...0> instead of reading ``data`` (:func:`run_stage`); ``wide``: a
    complex64 ``data`` on a complex128 program (:func:`program_dtype`)."""
    pools = upload(program, data.dtype, wide)
    for i in range(len(program.stages)):
        run_stage(data, program, i, pools, fresh=fresh and i == 0)
