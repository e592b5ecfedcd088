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

ARITHS = [tc32.Arith("tf32", 3), tc32.Arith("fp16", 3), tc32.Arith("fp16", 5), tc32.Arith("tf32", 5)]


def test_arith_names_its_bad_argument():
    with pytest.raises(ValueError, match="fmt"):
        tc32.Arith("bf16", 3)
    with pytest.raises(ValueError, match="terms"):
        tc32.Arith("fp16", 4)
    with pytest.raises(ValueError, match="2\\^k x 2\\^k"):
        tc32.apply_op(np.eye(4), np.zeros((3, 8), np.complex64))
    opts = tc32.Arith("fp16", 5).options()
    assert "-DTC_FMT=1" in opts and "-DTC_TERMS=5" in opts


@pytest.mark.parametrize("fmt, scale", [("tf32", 0), ("fp16", 14)])
def test_the_matrix_split_from_double_holds_it_to_33_bits(fmt, scale):
    """Three parts of a matrix value hold it to 2^-33 (beyond its FP32 rounding, 2^-24), two to
    about 2^-23; each part is a value of the format."""
    v = np.random.default_rng(1).uniform(-1, 1, 4000)
    for parts, tol in ((2, 2.0**-23), (3, 2.0**-33)):
        got = tc32.split_wide(v, fmt, parts, scale)
        back = sum(p.astype(np.float64) * 2.0**(-11 * q) for q, p in enumerate(got)) * 2.0**-scale
        assert np.abs(back - v).max() <= tol
        for p in got:
            if fmt == "fp16":
                assert np.array_equal(p.astype(np.float16).astype(np.float32), p)
            else:
                assert not (p.view(np.uint32) & np.uint32(0x1FFF)).any()


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("arith", ARITHS, ids=str)
def test_one_op_is_fp32_class(k, arith):
    """One op on 20,000 random groups: the relative L2 error against the exact product of the
    complex128 matrix stays within 1.6x a complex64 GEMM's (which starts from the matrix rounded
    to FP32); five terms come within 1.05x of it (0.8-1.1x measured)."""
    rng = np.random.default_rng(k)
    m = haar_unitary(1 << k, rng)
    x = ((rng.standard_normal((20000, 1 << k)) + 1j * rng.standard_normal((20000, 1 << k))) * 1e-3).astype(np.complex64)
    exact = x.astype(np.complex128) @ m.T
    rel = lambda y: np.linalg.norm(y - exact) / np.linalg.norm(exact)  # noqa: E731
    gemm32 = rel(x @ m.astype(np.complex64).T)
    err = rel(tc32.apply_op(m, x, arith))
    assert err <= (1.05 if arith.terms == 5 else 1.6) * max(gemm32, 6e-8)


def test_fp16_keeps_small_amplitudes_in_absolute_terms():
    """FP16 scales the amplitudes by 2^15 (modulus at most 1): amplitudes down to 1e-12 keep an
    error below 2^-22 of themselves or 2^-48 absolute, whichever is larger."""
    rng = np.random.default_rng(5)
    m = haar_unitary(8, rng)
    mag = 10.0 ** rng.uniform(-12, 0, (4000, 1))
    x = (mag * np.exp(2j * np.pi * rng.uniform(size=(4000, 8))) / np.sqrt(8)).astype(np.complex64)
    exact = x.astype(np.complex128) @ m.T
    y = tc32.apply_op(m, x, tc32.Arith("fp16", 5)).astype(np.complex128)
    bound = np.maximum(2.0**-22 * np.abs(x).max(axis=1, keepdims=True) * np.sqrt(8), 2.0**-48)
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
    (fused into 3-qubit ops and pairs), the five-term FP16 arithmetic's L2 error and infidelity
    against complex128 are no worse than complex64 gate by gate (summed over the circuits;
    measured 0.88x and 0.70x at 14 qubits)."""
    n = 11
    l2 = {"tc": 0.0, "gates": 0.0}
    infid = dict(l2)
    for c in (brickwork(n, 2, 16, seed=1), brickwork(n, 3, 10, seed=2), brickwork(n, 2, 12, seed=3)):
        psi = np.zeros(1 << n, np.complex128)
        psi[0] = 1
        ref = gate_at_a_time(c, psi)
        prog = build_program(plan_stages(c, 8, keep_low=2), 2, fuse_qubits=fuse_width(4, 3, True), block_qubits=3,
                             itemsize=8, widen=True)
        tc = _logical(emulate(prog, psi.astype(np.complex64), tensor_cores=tc32.Arith("fp16", 5)), prog)
        for name, v in (("tc", tc), ("gates", _gates_c64(c, psi))):
            v = v.astype(np.complex128)
            l2[name] += np.linalg.norm(v - ref)
            infid[name] += 1 - abs(np.vdot(ref, v)) ** 2 / np.vdot(v, v).real
    assert l2["tc"] <= l2["gates"] and infid["tc"] <= infid["gates"], (l2, infid)


def test_emulated_tensor_core_programs_equal_the_circuit():
    """Every arithmetic, on random circuits with controls, phases and pre-phases: the stage
    program's tensor-core emulation equals the circuit to complex64 accuracy."""
    for seed, arith in enumerate(ARITHS):
        c = random_circuit(10, 60, seed, max_width=3)
        psi = random_state(10, seed)
        prog = build_program(plan_stages(c, 8, keep_low=2, rotate_low=True), 2, fuse_qubits=3, itemsize=8, widen=True)
        got = _logical(emulate(prog, psi.astype(np.complex64), tensor_cores=arith), prog)
        np.testing.assert_allclose(got, gate_at_a_time(c, psi), rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="complex64"):
        emulate(prog, psi.copy(), tensor_cores=True)


def test_fp16_gives_way_to_tf32_where_a_state_may_leave_its_range(monkeypatch):
    """FP16 holds amplitudes of modulus below 2 (scaled by 2^15): a state whose norm may exceed
    kernel.FP16_MAX_NORM runs the same number of terms in TF32."""
    from qsim_tc.stages import kernel

    monkeypatch.setattr(kernel, "TC32_ARITH", tc32.Arith("fp16", 5))
    assert kernel.arith_for(None) == kernel.arith_for(1.0) == tc32.Arith("fp16", 5)
    assert kernel.arith_for(3.0) == kernel.arith_for(float("nan")) == tc32.Arith("tf32", 5)
    monkeypatch.setattr(kernel, "TC32_ARITH", tc32.Arith("tf32", 3))
    assert kernel.arith_for(3.0) == tc32.Arith("tf32", 3)
