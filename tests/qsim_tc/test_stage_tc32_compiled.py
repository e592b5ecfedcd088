"""The compiled form of the complex64 tensor-core arithmetic (:mod:`qsim_tc.stages.tc32_compiled`)
equals the numpy form (:mod:`qsim_tc.stages.tc32`) bit for bit, and the stage programs' emulation
takes it; ``emulate(..., rounded=True)``, the floor the accuracy study measures against."""

import numpy as np
import pytest
from test_stages import gate_at_a_time

from circuits import brickwork, haar_unitary
from qsim_tc.engine.permute import permute_bits
from qsim_tc.stages import tc32, tc32_compiled
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.program import build_program, emulate


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("scale", [1.0, 40.0, 1e-20, 1e-42, 3e30])
def test_the_compiled_op_is_the_numpy_op_bit_for_bit(k, scale):
    """Random groups at moduli from FP32 subnormals to 3e30, with zero groups and groups of one
    nonzero amplitude (the sparse first layers), and a diagonal matrix (zero matrix parts)."""
    rng = np.random.default_rng(k)
    for m in (haar_unitary(1 << k, rng), np.diag(np.exp(1j * rng.uniform(0, 6, 1 << k)))):
        x = ((rng.standard_normal((3000, 1 << k)) + 1j * rng.standard_normal((3000, 1 << k))) * scale)
        x = x.astype(np.complex64)
        x[:10] = 0
        x[10:40, 1:] = 0
        x[40:50] = np.complex64(0.5 + 0.5j) * np.float32(scale)  # values with few bits
        assert np.array_equal(_bits(tc32_compiled.apply_op(m, x)), _bits(tc32.apply_op(m, x)))


def test_the_compiled_op_checks_its_arguments():
    with pytest.raises(ValueError, match="2\\^k x 2\\^k"):
        tc32_compiled.apply_op(np.eye(4), np.zeros((3, 8), np.complex64))
    assert tc32_compiled.apply_op(np.eye(8), np.zeros((0, 8), np.complex64)).shape == (0, 8)


def _logical(data, prog):
    n = prog.n_qubits
    return permute_bits(data, n, list(range(n)), list(prog.final_phys), np) * np.exp(1j * prog.global_phase)


def test_rounded_programs_are_the_exact_program_rounded_per_op():
    """``rounded``: every op exact, rounded once: within complex64's rounding of the circuit, closer
    to it than numpy's complex64 products; it refuses to run with ``tensor_cores``."""
    c = brickwork(10, 2, 12, seed=3)
    psi = np.zeros(1 << 10, np.complex128)
    psi[0] = 1
    ref = gate_at_a_time(c, psi)
    prog = build_program(plan_stages(c, 8, keep_low=2), 2, fuse_qubits=3, block_qubits=3, itemsize=8, widen=True)
    err = {}
    for rounded in (False, True):
        got = _logical(emulate(prog, psi.astype(np.complex64), rounded=rounded), prog)
        err[rounded] = np.linalg.norm(got - ref)
    assert err[True] < 0.6 * err[False] and err[True] < 1e-6, err
    with pytest.raises(ValueError, match="one"):
        emulate(prog, psi.astype(np.complex64), tensor_cores=True, rounded=True)


def test_tensor_core_programs_are_at_the_rounding_floor():
    """A program whose ops all run on the tensor cores is as accurate as rounding each op's exact
    product (L2 within 10%): the arithmetic adds nothing that shows past the storage."""
    psi = np.zeros(1 << 12, np.complex128)
    psi[0] = 1
    c = brickwork(12, 3, 10, seed=4)
    ref = gate_at_a_time(c, psi)
    prog = build_program(plan_stages(c, 8, keep_low=2), 2, fuse_qubits=3, block_qubits=3, itemsize=8, widen=True)
    tc = np.linalg.norm(_logical(emulate(prog, psi.astype(np.complex64), tensor_cores=True), prog) - ref)
    floor = np.linalg.norm(_logical(emulate(prog, psi.astype(np.complex64), rounded=True), prog) - ref)
    assert tc <= 1.1 * floor, (tc, floor)
