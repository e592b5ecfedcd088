"""One plan, many bindings (qsim_tc.batched) and the Estimator's use of it, against Qiskit."""

import numpy as np
import pytest

pytest.importorskip("qiskit")

from qiskit import QuantumCircuit  # noqa: E402
from qiskit.circuit import Parameter  # noqa: E402
from qiskit.circuit.library import efficient_su2  # noqa: E402
from qiskit.primitives import StatevectorEstimator  # noqa: E402
from qiskit.quantum_info import SparsePauliOp, Statevector  # noqa: E402

import qsim_tc.batched as batched  # noqa: E402
from circuits import CircuitError  # noqa: E402
from qsim_tc import Simulator  # noqa: E402
from qsim_tc.batched import BatchedCircuit  # noqa: E402
from qsim_tc.qiskit import Estimator  # noqa: E402


def mixed_circuit():
    a, b = Parameter("a"), Parameter("b")
    qc = QuantumCircuit(4)
    qc.h(0)
    qc.rx(a, 1)
    qc.cx(0, 2)
    qc.rzz(b, 1, 3)  # a parametrized two-qubit gate: per binding
    qc.u(a, 2 * b, 0.3, 2)  # an expression
    qc.ccx(2, 0, 1)  # monomial gates, composed into one gather
    qc.cz(1, 3)
    qc.swap(0, 3)
    qc.p(a + b, 0)
    qc.r(a, b, 3)
    qc.crx(a, 3, 0)
    qc.s(2)
    qc.global_phase = a
    return qc


@pytest.mark.parametrize("low_bits", [2, 3, 9])
@pytest.mark.parametrize("kernel", ["real-form", "complex", "array-code"])
@pytest.mark.parametrize("make", [mixed_circuit, lambda: efficient_su2(5, reps=2)], ids=["mixed", "su2"])
def test_states_match_qiskit(make, kernel, low_bits, monkeypatch):
    # low qubits on tiles of 4 or 8 amplitudes (or the whole state), the high ones on tiles of one
    # or two column blocks; strides below 2 (or 4) on the low tile's transpose
    monkeypatch.setattr(batched, "LAYER_LOW_BITS", low_bits)
    monkeypatch.setattr(batched, "LAYER_HIGH_TILE", 16)
    monkeypatch.setattr(batched, "SWEEP_BINDINGS", 6)  # matrices for 6 bindings at a time: 2 blocks, then 1
    if kernel == "complex":  # the compiled layer on complex matrices, as for a matrix with no real form
        monkeypatch.setattr(batched, "_real_form", lambda ms: None)
    if kernel == "array-code":
        monkeypatch.setattr(batched, "_cpu_one_qubit", lambda: None)
        monkeypatch.setattr(batched, "_cpu_layer", lambda: None)
        monkeypatch.setattr(batched, "_cpu_product", lambda: None)
    qc = make()
    values = np.random.default_rng(1).uniform(-3, 3, (7, qc.num_parameters))
    seen = 0
    for b0, block in BatchedCircuit(qc).states(values, block=3):
        for i in range(block.shape[0]):
            want = Statevector(qc.assign_parameters(values[b0 + i])).data
            np.testing.assert_allclose(block[i], want, atol=1e-12)
        seen += block.shape[0]
    assert seen == 7


def test_one_plan_gathers_monomial_runs():
    steps = BatchedCircuit(efficient_su2(6, reps=3)).steps
    kinds = [type(s).__name__ for s in steps]
    assert kinds.count("_Monomial") == 3  # each entangling layer of 5 CX: one gather
    assert kinds == ["_Layer", "_Monomial"] * 3 + ["_Layer"]  # rotations, then one gather per CX layer
    assert all(len(s.steps) == 6 for s in steps[::2])  # ry then rz on a qubit: one 2x2 per binding


def test_estimator_sweep_matches_qiskit_without_running_the_simulator(monkeypatch):
    qc = efficient_su2(4, reps=2)
    values = np.random.default_rng(2).uniform(0, 6, (6, qc.num_parameters))
    ops = [SparsePauliOp(["ZZII", "IXXI"], [1.0, 0.5]), SparsePauliOp("YIIY")]
    want = StatevectorEstimator().run([(qc, [[o] for o in ops], values)]).result()[0].data.evs

    def no_run(*args, **kwargs):
        raise AssertionError("a binding ran through Simulator.run")

    monkeypatch.setattr(Simulator, "run", no_run)
    got = Estimator(device="cpu").run([(qc, [[o] for o in ops], values)]).result()[0].data.evs
    assert got.shape == want.shape == (2, 6)
    np.testing.assert_allclose(got, want, atol=1e-12)
    zipped = Estimator(device="cpu").run([(qc, [ops[0]] * 6, values)]).result()[0].data.evs
    np.testing.assert_allclose(zipped, want[0], atol=1e-12)


def test_non_unitary_sweeps_fall_back_to_the_simulator():
    theta = Parameter("t")
    qc = QuantumCircuit(1)
    qc.rx(theta, 0)
    qc.reset(0)
    with pytest.raises(CircuitError, match="not unitary"):
        BatchedCircuit(qc)
    with pytest.raises(CircuitError, match="reset"):
        Estimator(device="cpu").run([(qc, SparsePauliOp("Z"), [[0.1], [0.2]])]).result()


def test_bindings_are_checked():
    bc = BatchedCircuit(mixed_circuit())
    with pytest.raises(ValueError, match=r"bindings must have shape \(B, 2\)"):
        next(bc.states(np.zeros((3, 5))))
    with pytest.raises(ValueError, match="bindings lack parameter"):
        next(bc.states({bc.parameters[0]: [0.1]}))


def test_sampler_sweep_gives_the_bits_of_one_run_per_binding(monkeypatch):
    from qsim_tc.qiskit import Sampler

    qc = efficient_su2(3, reps=1)
    qc.measure_all()
    values = np.random.default_rng(4).uniform(0, 6, (2, 3, qc.num_parameters))
    batched_bits = Sampler(device="cpu", seed=9).run([(qc, values)], shots=64).result()[0].data.meas
    monkeypatch.setattr(Sampler, "_batched", lambda self, circuit, n: None)  # one Simulator run per binding
    looped_bits = Sampler(device="cpu", seed=9).run([(qc, values)], shots=64).result()[0].data.meas
    assert batched_bits.shape == (2, 3)
    np.testing.assert_array_equal(batched_bits.array, looped_bits.array)
    assert len(batched_bits.get_counts((1, 2))) > 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("layer_kernel", [False, True], ids=["array-code", "layer-kernel"])
def test_gpu_block_matches_cpu(cp, layer_kernel, dtype, monkeypatch):
    monkeypatch.setattr(batched, "GPU_LAYER_KERNEL", layer_kernel)
    qc = mixed_circuit()
    values = np.random.default_rng(5).uniform(-3, 3, (5, qc.num_parameters))
    bc = BatchedCircuit(qc)
    cpu = np.concatenate([blk for _, blk in bc.states(values, device="cpu", dtype=dtype)])
    gpu = np.concatenate([blk.get() for _, blk in bc.states(values, device="gpu", dtype=dtype)])
    np.testing.assert_allclose(gpu, cpu, atol=1e-12 if dtype == np.complex128 else 2e-6)


@pytest.mark.parametrize("workers", [1, 3])
def test_blocks_come_in_order_from_side_by_side_threads(workers, monkeypatch):
    monkeypatch.setattr(batched, "_cpu_workers", lambda: workers)
    qc = efficient_su2(4, reps=1)
    values = np.random.default_rng(3).uniform(-3, 3, (11, qc.num_parameters))
    blocks = list(BatchedCircuit(qc).states(values, block=2))
    assert [b0 for b0, _ in blocks] == list(range(0, 11, 2))
    got = np.concatenate([b for _, b in blocks])
    want = np.stack([Statevector(qc.assign_parameters(v)).data for v in values])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_real_form_of_unitaries():
    from qiskit.quantum_info import random_unitary

    rng = np.random.default_rng(11)
    ms = np.stack([random_unitary(2, seed=s).data for s in range(50)]
                  + [np.diag(np.exp(1j * rng.normal(size=2))), np.array([[0, 1j], [-1, 0]]), np.eye(2)])
    left, rs, right = batched._real_form(ms)
    assert rs.dtype == np.float64
    np.testing.assert_allclose(np.abs(left), 1, atol=1e-15)
    np.testing.assert_allclose(left[..., :, None] * rs * right[..., None, :], ms, atol=1e-14)
    # rz . ry (EfficientSU2's rotation pair): no right phases, so no right table
    theta, phi = rng.uniform(-3, 3, (2, 20))
    su2 = batched._rotation("rz", [phi]) @ batched._rotation("ry", [theta])
    left, rs, right = batched._real_form(su2)
    assert right is None
    np.testing.assert_allclose(left[..., :, None] * rs, su2, atol=1e-14)
    assert batched._real_form(np.array([[[1.0, 1j], [1.0, 1.0]]])) is None  # no phases make it real


def test_a_layer_merges_the_steps_on_one_qubit():
    a, b, c = (batched._Matrix(np.eye(2) * k) for k in (1, 2, 3))
    steps = batched._layers([batched._OneQubit(0, [a]), batched._OneQubit(1, [b]), batched._OneQubit(0, [c])])
    assert len(steps) == 1 and [one.qubit for one in steps[0].steps] == [0, 1]
    assert steps[0].steps[0].matrices == [a, c]


def test_single_precision_states_match_qiskit():
    qc = efficient_su2(11, reps=2)  # the high pass too (low tiles of 2^10 amplitudes)
    values = np.random.default_rng(6).uniform(-3, 3, (3, qc.num_parameters))
    for b0, block in BatchedCircuit(qc).states(values, dtype=np.complex64):
        assert block.dtype == np.complex64
        for i in range(block.shape[0]):
            np.testing.assert_allclose(block[i], Statevector(qc.assign_parameters(values[b0 + i])).data, atol=2e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("kernels", [False, True], ids=["array-code", "kernels"])
def test_gpu_sweep_evolves_many_states_at_once(cp, kernels, monkeypatch):
    # a 12-qubit state is far too small to fill a GPU: the bindings evolve as blocks of states
    # (2^26 amplitudes by default: all 40 at once; 16 a block below), their layers through the
    # array code or batched.cu, and the Estimator reads a block's term values in one pass (the
    # GPU pass of qsim_tc.observables_gpu, or the array code)
    import qsim_tc.observables as obs

    monkeypatch.setattr(obs, "GPU_KERNEL", kernels)
    monkeypatch.setattr(batched, "GPU_LAYER_KERNEL", kernels)
    qc = efficient_su2(12, reps=2)
    values = np.random.default_rng(7).uniform(0, 2 * np.pi, (40, qc.num_parameters))
    bc = BatchedCircuit(qc)
    (start, block), = bc.states(values, device="gpu")
    assert start == 0 and block.shape == (40, 1 << 12) and isinstance(block, cp.ndarray)
    cpu = np.concatenate([blk for _, blk in bc.states(values, device="cpu")])
    np.testing.assert_allclose(block.get(), cpu, atol=1e-12)
    monkeypatch.setitem(batched.BLOCK_ELEMENTS, "gpu", 16 << 12)
    assert [b.shape[0] for _, b in bc.states(values, device="gpu")] == [16, 16, 8]
    op = SparsePauliOp.from_sparse_list([("Z", [i], 1.0) for i in range(12)] +
                                        [("XX", [i, i + 1], 0.5) for i in range(11)] + [("YZY", [2, 3, 4], 0.25)], 12)
    got = Estimator(device="gpu").run([(qc, op, values)]).result()[0].data.evs
    want = StatevectorEstimator().run([(qc, op, values)]).result()[0].data.evs
    np.testing.assert_allclose(got, want, atol=1e-11)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_gpu_layer_host_code_with_the_kernels_model(dtype, monkeypatch):
    # batched_gpu.layer and the numpy model of batched.cu's indexing against the array code, on
    # every qubit of 1- to 6-qubit states (the kernel's pair index with a 0 inserted at bit q)
    import sys
    import types

    import qsim_tc.batched_gpu as bg

    fake = types.SimpleNamespace(asarray=np.asarray)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(bg, "_kernel", bg.model_kernel)
    rng = np.random.default_rng(8)
    for n in range(1, 7):
        b = 3
        psi = (rng.normal(size=(b, 1 << n)) + 1j * rng.normal(size=(b, 1 << n))).astype(dtype)
        qubits = list(rng.permutation(n))
        ms = rng.normal(size=(b, n, 2, 2)) + 1j * rng.normal(size=(b, n, 2, 2))
        want = psi.copy()
        for j, q in enumerate(qubits):
            want = batched._one_qubit(want, ms[:, j], q, np)
        got = bg.layer(psi.copy(), ms, qubits)
        np.testing.assert_allclose(got, want, atol=1e-12 if dtype == np.complex128 else 1e-4)
    with pytest.raises(TypeError, match="psi must be complex128 or complex64, got float64"):
        bg.layer(np.zeros((1, 4)), np.zeros((1, 1, 2, 2)), [0])
    # what the kernel would read and write out of place (a qubit past the state, a strided
    # block) is refused before any launch, the states untouched
    psi = np.ones((2, 8), dtype=np.complex128)
    ms = np.tile(np.array([[0, 1], [1, 0]], dtype=complex), (2, 1, 1, 1))
    with pytest.raises(ValueError, match=r"qubits must be qubits of 0..2, got \[0, 3\]"):
        bg.layer(psi, np.concatenate([ms, ms], axis=1), [0, 3])
    with pytest.raises(ValueError, match=r"ms must have shape \(2, 1, 2, 2\), got \(2, 2, 2, 2\)"):
        bg.layer(psi, np.concatenate([ms, ms], axis=1), [0])
    with pytest.raises(ValueError, match="psi must be a C-contiguous"):
        bg.layer(np.ones((2, 16), dtype=np.complex128)[:, ::2], ms, [0])
    with pytest.raises(ValueError, match=r"psi must be a C-contiguous \(B, 2\^n\) block of states, got shape \(8,\)"):
        bg.layer(psi[0], ms, [0])
    assert (psi == 1).all()
