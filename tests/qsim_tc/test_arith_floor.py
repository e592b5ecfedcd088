"""The arithmetic floor of stage programs (benchmarks.bench.arith_floor): its flop count follows the
kernel's execution of each record, and on a GPU the floor lies below the program's measured time."""

import numpy as np
import pytest
from test_stages import random_pairs

from benchmarks.bench.arith_floor import floor_seconds, measure_peaks, program_flops
from circuits import Circuit, haar_unitary
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.program import MMA_PAIR, OP_DENSE, W_CMASK, W_MMA, W_TYPE, build_program

N, L = 10, 6


def program(c: Circuit, itemsize: int = 16, keep_low: int = 2):
    plan = plan_stages(c, L, keep_low=keep_low)
    return build_program(plan, keep_low, fuse_qubits=0, itemsize=itemsize, widen=itemsize == 16)


def dense_records(prog):
    return [r for s in prog.stages for r in s.ops if r[W_TYPE] == OP_DENSE]


def test_a_three_qubit_op_is_one_mma_tile_an_amplitude_or_its_complex_products():
    rng = np.random.default_rng(1)
    prog = program(Circuit(N).add(haar_unitary(8, rng), (2, 5, 7)))
    (rec,) = dense_records(prog)
    assert rec[W_MMA] == 1
    # tensor cores: the real 16 x 16 form, 2 * 16 flops an amplitude's two real parts
    assert program_flops(prog, tensor=True) == {"tensor": 64.0 * 2**N, "fma": 0.0}
    # FMA loops: 8 complex multiply-adds an amplitude, 8 flops each
    assert program_flops(prog, tensor=False) == {"tensor": 0.0, "fma": 64.0 * 2**N}


def test_a_pair_counts_both_ops_and_a_fixed_control_halves_an_op():
    rng = np.random.default_rng(2)
    c = Circuit(N).add(haar_unitary(8, rng), (0, 1, 2)).add(haar_unitary(8, rng), (3, 4, 5))
    prog = program(c)
    (rec,) = dense_records(prog)
    assert rec[W_MMA] == MMA_PAIR
    assert program_flops(prog, tensor=True)["tensor"] == 128.0 * 2**N
    # a controlled 2-qubit gate whose control stays outside the chunk: the blocks where it is 0 skip
    u = np.eye(8, dtype=complex)
    u[4:, 4:] = haar_unitary(4, rng)  # control: the gate's last qubit (the index's high bit)
    c = Circuit(N).add(haar_unitary(8, rng), tuple(range(L))[:3]).add(u, (0, 1, N - 1))
    prog = program(c, itemsize=8)
    assert sum(1 for r in dense_records(prog) if r[W_CMASK] >> L) == 1  # the control is fixed
    assert program_flops(prog, tensor=False)["fma"] == (64.0 + 0.5 * 32.0) * 2**N
    # complex128: the 2-qubit op widens to a 3-qubit tensor-core op, run by half the blocks
    assert program_flops(program(c), tensor=True)["tensor"] == (64.0 + 0.5 * 64.0) * 2**N


def test_the_floor_takes_the_slower_unit():
    peaks = {"dmma": 2.0, "fma64": 1.0, "fma32": 4.0}
    flops = {"tensor": 8.0, "fma": 2.0}
    assert floor_seconds(flops, peaks, 16) == 4.0  # tensor 4 s, FP64 FMA 2 s
    assert floor_seconds({"tensor": 0.0, "fma": 8.0}, peaks, 8) == 2.0  # FP32 FMA
    # complex64 tensor-core ops: each term a full product in the format's instructions
    peaks.update({"tf32mma": 8.0, "fp16mma": 16.0})
    assert floor_seconds({"tensor": 64.0, "fma": 8.0}, peaks, 8, "tf32") == 8.0
    assert floor_seconds({"tensor": 64.0, "fma": 8.0}, peaks, 8, "fp16") == 4.0


def test_complex64_tensor_terms_multiply_the_tensor_work():
    rng = np.random.default_rng(3)
    prog = program(Circuit(N).add(haar_unitary(8, rng), (2, 5, 7)), itemsize=8)
    assert program_flops(prog, tensor=True, terms=5) == {"tensor": 5 * 64.0 * 2**N, "fma": 0.0}


@pytest.mark.gpu
def test_peaks_are_measured_and_the_floor_lies_below_a_run(cp):
    from qsim_tc.stages.kernel import block_qubits, max_dense, run_program, tensor_core_ops

    peaks = measure_peaks(cp, repeats=1)
    assert all(np.isfinite(v) and v > 1e9 for v in peaks.values()), peaks
    n = 22
    c = random_pairs(n, 8, seed=3)
    plan = plan_stages(c, 10, keep_low=3, rotate_low=True)
    mma = tensor_core_ops(np.complex128)
    prog = build_program(plan, 3, fuse_qubits=max_dense(np.complex128), block_qubits=block_qubits(np.complex128),
                         itemsize=16, widen=mma)
    state = cp.zeros(1 << n, dtype=cp.complex128)
    state[0] = 1
    run_program(state, prog)  # warm-up (compiles)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    run_program(state, prog)
    stop.record()
    stop.synchronize()
    elapsed = cp.cuda.get_elapsed_time(start, stop) * 1e-3
    floor = floor_seconds(program_flops(prog, mma), peaks, 16)
    assert 0 < floor < elapsed, (floor, elapsed)
