"""The complex64 stage kernel's tensor-core arithmetic, through its numpy emulation
(:mod:`qsim_tc.stages.tc32`): its parts, its error per op, and whole stage programs against
complex64 gate-by-gate products (the GPU kernel is checked against this emulation in
test_stage_program.py)."""

import numpy as np
import pytest
from test_stages import gate_at_a_time, random_circuit, random_state

from circuits import brickwork, haar_unitary
from qsim_tc.engine.permute import permute_bits
from qsim_tc.stages import tc32
from qsim_tc.stages.choice import fuse_width
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.program import build_program, emulate


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="2\\^k x 2\\^k"):
        tc32.apply_op(np.eye(4), np.zeros((3, 8), np.complex64))
    with pytest.raises(ValueError, match="inner dimension"):
        tc32.real_product(np.zeros((16, 12)), np.zeros((12, 3), np.float32))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_the_matrix_split_holds_it_to_32_bits_and_the_leading_part_to_9(k):
    """a = (a1 + (a2 + a3) 2^-11) / 8 to 2^-33 of the row's largest value (2^-32 at k = 4); a1 is an
    integer of at most 9 bits (8 at k = 4) on its row's grid; every part is an FP16 value; a1s =
    a1 2^11."""
    a = tc32.real_form(haar_unitary(1 << k, np.random.default_rng(1)))
    a1, a1s, a2, a3 = tc32.split_matrix(a)
    bits = tc32.A1_BITS[k]
    back = (a1.astype(np.float64) + (a2.astype(np.float64) + a3.astype(np.float64)) * 2.0**-11) / tc32.MATRIX_SCALE
    row = np.abs(a).max(axis=1, keepdims=True)
    assert (np.abs(back - a) <= 2.0 ** -(24 + bits) * row).all()
    grid = 2.0 ** (np.floor(np.log2(row * tc32.MATRIX_SCALE)) - (bits - 1))
    ints = a1 / grid
    assert np.array_equal(ints, np.round(ints)) and np.abs(ints).max() <= 2**bits
    for p in (a1, a1s, a2, a3):
        assert np.array_equal(p.astype(np.float16).astype(np.float32), p)
    assert np.array_equal(a1s, a1 * 2048)


@pytest.mark.parametrize("k", [3, 4])
def test_the_leading_product_is_exact(k):
    """hi on the scaled group's grid 2^4 (11 bits) times a1 on the row's (9 bits; 8 at k = 4): the
    2^(k+1) products sum to at most 2^24 grid units, so the tensor core's FP32 sum (two chained
    instructions at k = 4) equals the exact one, also where every product takes its largest value;
    each group's scale is a power of two that puts its largest part in [2^14, 2^15)."""
    from gemm.tcec.emulate import tc_mma

    rng = np.random.default_rng(2)
    a = tc32.real_form(haar_unitary(1 << k, rng))
    x = (rng.standard_normal((500, 1 << k)) + 1j * rng.standard_normal((500, 1 << k))).astype(np.complex64) * 1e-3
    a1 = tc32.split_matrix(a)[0]
    b = tc32._columns(x)
    bh, _, _, down = tc32.split_groups(b)
    top = np.abs(b).max(axis=0) / (down * tc32.MATRIX_SCALE)
    assert ((top >= 2.0**14) & (top < 2.0**15)).all()
    x, y = a1[:, None, :].astype(np.float64), bh.T[None, :, :].astype(np.float64)
    exact = (x * y).sum(axis=-1)
    got = tc_mma(np.zeros(exact.shape, np.float32), x, y, group=tc32.INSTRUCTION_K)
    assert np.array_equal(got.astype(np.float64), exact)
    # the worst case: every product the largest the bounds allow, all of one sign
    inner = 2 << k
    big_a = np.full((1, 1, inner), float(2 ** tc32.A1_BITS[k]))
    big_b = np.full((1, 1, inner), 2.0**11)
    worst = tc_mma(np.zeros((1, 1), np.float32), big_a, big_b, group=tc32.INSTRUCTION_K)
    assert float(worst[0, 0]) == inner * 2.0 ** (tc32.A1_BITS[k] + 11) <= 2.0**24


@pytest.mark.parametrize("k", [2, 3, 4])
def test_one_op_is_within_a_rounding_of_the_exact_product(k):
    """One op on 20,000 random groups: the relative L2 error against the exact product of the
    complex128 matrix is that of rounding the exact result to complex64 (within 1.25x), at most
    half a complex64 GEMM's (which starts from the matrix rounded to FP32 and rounds a term), and
    the norm is unbiased."""
    rng = np.random.default_rng(k)
    m = haar_unitary(1 << k, rng)
    x = ((rng.standard_normal((20000, 1 << k)) + 1j * rng.standard_normal((20000, 1 << k))) * 1e-3).astype(np.complex64)
    exact = x.astype(np.complex128) @ m.T
    rel = lambda y: np.linalg.norm(y - exact) / np.linalg.norm(exact)  # noqa: E731
    y = tc32.apply_op(m, x)
    assert rel(y) <= 1.25 * rel(exact.astype(np.complex64))
    assert rel(y) <= 0.5 * rel(x @ m.astype(np.complex64).T)
    drift = np.linalg.norm(y.astype(np.complex128)) ** 2 / np.linalg.norm(exact) ** 2 - 1
    assert abs(drift) < 2e-9


@pytest.mark.parametrize("k", [3, 4])
def test_small_and_unnormalised_amplitudes_keep_their_accuracy(k):
    """Groups of moduli from 1e-30 to 1e6 in one op (each group takes its own scale): every output
    stays within two FP32 roundings of the exact result (relative to its group's largest)."""
    rng = np.random.default_rng(5)
    dim = 1 << k
    m = haar_unitary(dim, rng)
    mag = 10.0 ** rng.uniform(-30, 6, (4000, 1))
    x = (mag * np.exp(2j * np.pi * rng.uniform(size=(4000, dim))) / np.sqrt(dim)).astype(np.complex64)
    exact = x.astype(np.complex128) @ m.T
    y = tc32.apply_op(m, x).astype(np.complex128)
    bound = 2 * 2.0**-24 * np.abs(exact).max(axis=1, keepdims=True) * np.sqrt(2)
    assert (np.abs(y - exact) <= bound).all()


def _logical(data, prog):
    n = prog.n_qubits
    return permute_bits(data, n, list(range(n)), list(prog.final_phys), np) * np.exp(1j * prog.global_phase)


def _gates_c64(c, psi):
    """complex64 gate by gate (each gate's matrix rounded to complex64, one product a gate), as the
    native32 gate path computes it."""
    n = c.n_qubits
    v = psi.astype(np.complex64)
    for g in c.gates:
        k = len(g.qubits)
        axes = [n - 1 - q for q in g.qubits][::-1]
        t = np.moveaxis(v.reshape([2] * n), axes, list(range(k)))
        shape = t.shape
        t = (g.matrix.astype(np.complex64) @ t.reshape(1 << k, -1)).reshape(shape)
        v = np.moveaxis(t, list(range(k)), axes).reshape(-1)
    return v


def test_tensor_core_programs_are_no_less_accurate_than_complex64_gates():
    """The accuracy bar of the complex64 tensor-core stages: on brickworks of 2- and 3-qubit gates
    (fused into 3-qubit ops and pairs), the tensor-core arithmetic's L2 error and infidelity
    against complex128 are no worse than complex64 gate by gate (summed over the circuits)."""
    n = 11
    l2 = {"tc": 0.0, "gates": 0.0}
    infid = dict(l2)
    for c in (brickwork(n, 2, 16, seed=1), brickwork(n, 3, 10, seed=2), brickwork(n, 2, 12, seed=3)):
        psi = np.zeros(1 << n, np.complex128)
        psi[0] = 1
        ref = gate_at_a_time(c, psi)
        prog = build_program(plan_stages(c, 8, keep_low=2), 2, fuse_qubits=fuse_width(4, 3, True), block_qubits=3,
                             itemsize=8, widen=True)
        tc = _logical(emulate(prog, psi.astype(np.complex64), tensor_cores=True), prog)
        for name, v in (("tc", tc), ("gates", _gates_c64(c, psi))):
            v = v.astype(np.complex128)
            l2[name] += np.linalg.norm(v - ref)
            infid[name] += 1 - abs(np.vdot(ref, v)) ** 2 / np.vdot(v, v).real
    assert l2["tc"] <= l2["gates"] and infid["tc"] <= infid["gates"], (l2, infid)


def test_emulated_tensor_core_programs_equal_the_circuit():
    """On random circuits with controls, phases and pre-phases, the stage program's tensor-core
    emulation equals the circuit to complex64 accuracy."""
    for seed in range(3):
        c = random_circuit(10, 60, seed, max_width=3)
        psi = random_state(10, seed)
        prog = build_program(plan_stages(c, 8, keep_low=2, rotate_low=True), 2, fuse_qubits=3, itemsize=8, widen=True)
        got = _logical(emulate(prog, psi.astype(np.complex64), tensor_cores=True), prog)
        np.testing.assert_allclose(got, gate_at_a_time(c, psi), rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="complex64"):
        emulate(prog, psi.copy(), tensor_cores=True)


def test_a_k4_product_is_two_chained_instructions():
    """At k = 4 (inner 32) every product is two FP16 m16n8k16 instructions, inputs 0-7 then 8-15,
    the first's FP32 result the second's accumulator: what the kernel's k = 4 tile will issue."""
    from gemm.tcec.emulate import tc_mma

    rng = np.random.default_rng(9)
    a = tc32.real_form(haar_unitary(16, rng))
    x = (rng.standard_normal((300, 16)) + 1j * rng.standard_normal((300, 16))).astype(np.complex64)
    b = tc32._columns(x)
    a1, a1s, a2, a3 = tc32.split_matrix(a)
    bh, bl, bl2, down = tc32.split_groups(b)

    def chained(c, p, q):
        for lo in (0, 16):
            c = tc_mma(c, p[:, None, lo:lo + 16].astype(np.float64), q[lo:lo + 16].T[None].astype(np.float64))
        return c

    zero = np.zeros((32, 300), np.float32)
    hh = chained(zero, a1, bh)
    cor = zero
    for p, q in ((a2, bh), (a1s, bl), (a1s, bl2), (a2, bl), (a3, bh)):
        cor = chained(cor, p, q)
    want = ((hh.astype(np.float64) + cor.astype(np.float64) * tc32.LO).astype(np.float32) * down[None, :])
    assert np.array_equal(tc32.real_product(a, b).view(np.uint32), want.astype(np.float32).view(np.uint32))
    one = tc_mma(zero, a2[:, None, :].astype(np.float64), bh.T[None].astype(np.float64))  # one 32-wide sum
    assert not np.array_equal(one.view(np.uint32), chained(zero, a2, bh).view(np.uint32))  # (the test can tell)
