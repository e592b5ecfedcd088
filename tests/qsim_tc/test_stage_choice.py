"""Choosing stages or gate-by-gate (CPU: the decision; GPU: Simulator runs with plan on and off)."""

import numpy as np
import pytest
from test_stages import random_circuit, random_pairs, random_state

from circuits import Circuit, Gate, haar_unitary
from qsim_tc import Simulator, StateVector
from qsim_tc.stages import choice as stage_choice


def test_a_gate_wider_than_the_kernel_keeps_gate_by_gate():
    c = Circuit(8)
    c.append(Gate(haar_unitary(16, np.random.default_rng(0)), (0, 1, 2, 3), "u4"))
    d = stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=100.0)
    assert not d.use and d.plan is None and "mixes 4 qubits" in d.why


def test_the_model_decides_by_predicted_time():
    c = random_circuit(14, 200, seed=1, max_width=3)
    fast = stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=1e6)
    slow = stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=1e-3)
    assert fast.use and not slow.use
    assert fast.plan.n_stages >= 1 and fast.predicted_ms == slow.predicted_ms
    assert fast.to_dict()["stages"] == fast.plan.n_stages


def test_local_qubits_follow_the_precision():
    """A block's chunk is 64 KiB either way: 2^12 complex128 or 2^13 complex64 amplitudes."""
    c = random_circuit(16, 60, seed=2, max_width=3)
    wide = stage_choice.decide(c, max_dense=4, pass_ms=1.0, gate_ms=1e6, itemsize=8)
    narrow = stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=1e6, itemsize=16)
    assert (wide.plan.local_qubits, narrow.plan.local_qubits) == (13, 12)
    assert stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=1e6, local_qubits=10).plan.local_qubits == 10


def test_complex64_prices_the_complex128_programs_where_the_gpu_has_them():
    """wide=(max_dense, block_qubits) of the complex128 programs: complex64 takes the form the
    model prices lower, the complex128 one with its L, pairs and a kept low bit; a gate wider
    than those programs' ops keeps complex64's own."""
    from qsim_tc.stages.program import MMA_PAIR, W_MMA

    c = random_pairs(16, 16, seed=3)
    own = stage_choice.decide(c, max_dense=4, pass_ms=1.0, gate_ms=1e6, itemsize=8, block_qubits=2)
    best = stage_choice.decide(c, max_dense=4, pass_ms=1.0, gate_ms=1e6, itemsize=8, block_qubits=2, wide=(3, 3))
    assert not own.wide and own.plan.local_qubits == 13
    # random pairings gain most from the tensor-core programs (quantum volume on an H200: 143.6 ->
    # 115.6 ms, stage_wide_c64_h200.json)
    assert best.wide and best.predicted_ms < own.predicted_ms
    assert best.plan.local_qubits == 12 and best.keep_low >= 1 and "widened" in best.why
    assert any((s.ops[:, W_MMA] == MMA_PAIR).any() for s in best.program.stages if s.ops.size)
    four = Circuit(16)
    four.append(Gate(haar_unitary(16, np.random.default_rng(1)), (0, 5, 9, 13), "u4"))
    assert not stage_choice.decide(four, max_dense=4, pass_ms=1.0, gate_ms=1e6, itemsize=8, wide=(3, 3)).wide
    assert not stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=1e6, itemsize=16, wide=(3, 3)).wide


def test_cpu_complex64_takes_the_wider_local_set_where_it_saves_stages():
    """complex64 plans with L = 15 as well and takes it only for >= 10% fewer stages: random
    pairings (QuantumVolume-like) do; a brickwork of nearest neighbours does not; complex128 and
    states too narrow for L = 15 and its lane bits keep their L."""
    qv = random_pairs(22, 22, seed=4)
    d64 = stage_choice.decide_cpu(qv, 8)
    base = stage_choice.plan_stages(qv, stage_choice.CPU_LOCAL_QUBITS[8])
    assert d64.plan.local_qubits == 15 and d64.plan.n_stages <= stage_choice.CPU_WIDE_FRACTION * base.n_stages
    assert "of 15 local qubits" in d64.why
    assert stage_choice.decide_cpu(qv, 16).plan.local_qubits == stage_choice.CPU_LOCAL_QUBITS[16]
    small = random_pairs(stage_choice.CPU_WIDE_LOCAL_QUBITS[8] + stage_choice.CPU_WIDE_LANE_BITS - 1, 10, seed=5)
    assert stage_choice.decide_cpu(small, 8).plan.local_qubits == stage_choice.CPU_LOCAL_QUBITS[8]
    bw = Circuit(22)
    rng = np.random.default_rng(6)
    for layer in range(10):
        for a in range(layer % 2, 21, 2):
            bw.append(Gate(haar_unitary(4, rng), (a, a + 1), "u2"))
    assert stage_choice.decide_cpu(bw, 8).plan.local_qubits == stage_choice.CPU_LOCAL_QUBITS[8]


def test_cpu_wide_local_set_matches_the_gate_path():
    """A 20-qubit complex64 run on the wide plan (4 lane bits) equals the gate-at-a-time path."""
    c = random_pairs(20, 8, seed=7)
    assert stage_choice.decide_cpu(c, 8).plan.local_qubits == 15
    staged = Simulator("native32", device="cpu").run(c).state.to_numpy()
    gate = Simulator("native32", device="cpu", plan=None).run(c).state.to_numpy()
    assert np.abs(staged - gate).max() < 2e-6


def test_plan_option_is_checked():
    with pytest.raises(ValueError, match="plan must be"):
        Simulator("native", device="cpu", plan="yes")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_backend", ["native", "native32"])
@pytest.mark.parametrize(("n", "seed"), [(3, 0), (9, 1), (14, 2), (17, 3)])
def test_gpu_stages_equal_gate_by_gate(cp, dtype_backend, n, seed):
    c = random_circuit(n, 150, seed, max_width=3)
    staged = Simulator(dtype_backend, device="gpu", plan="always").run(c)
    assert staged.metadata["stages"]["use"] and staged.stats[0].info.path == "stage"
    ref = Simulator(dtype_backend, device="gpu", plan=None).run(c)
    atol = 1e-13 if dtype_backend == "native" else 2e-5
    np.testing.assert_allclose(staged.state.to_numpy(), ref.state.to_numpy(), rtol=0, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_backend", ["native", "native32"])
def test_gpu_stage_runs_repeat_exactly(cp, dtype_backend):
    """A second run of the same circuit reuses the decision and its program on the device (no
    copies); it gives the same amplitudes, with a global phase that only some runs fold."""
    c = random_circuit(15, 120, 9, max_width=3)
    c.global_phase = 0.75
    sim = Simulator(dtype_backend, device="gpu", plan="always")
    first = sim.run(c).state.to_numpy()
    np.testing.assert_array_equal(sim.run(c).state.to_numpy(), first)
    ref = Simulator(dtype_backend, device="gpu", plan=None).run(c)
    atol = 1e-13 if dtype_backend == "native" else 2e-5
    np.testing.assert_allclose(first, ref.state.to_numpy(), rtol=0, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_backend", ["native", "native32"])
def test_gpu_stages_from_an_initial_state(cp, dtype_backend):
    """From |0...0> the first stage makes its chunks (no state read); from a given state it reads
    them: both equal the gate-by-gate path, and the given state is left as it was."""
    c = random_circuit(15, 150, 4, max_width=3)
    dtype = np.complex128 if dtype_backend == "native" else np.complex64
    psi = StateVector.from_array(random_state(15, 4, dtype), device="gpu")
    before = psi.to_numpy()
    staged = Simulator(dtype_backend, device="gpu", plan="always").run(c, initial_state=psi)
    assert staged.metadata["stages"]["use"]
    ref = Simulator(dtype_backend, device="gpu", plan=None).run(c, initial_state=psi)
    atol = 1e-13 if dtype_backend == "native" else 2e-5
    np.testing.assert_allclose(staged.state.to_numpy(), ref.state.to_numpy(), rtol=0, atol=atol)
    np.testing.assert_array_equal(psi.to_numpy(), before)


@pytest.mark.gpu
def test_gpu_default_runs_qft_as_stages_and_matches(cp):
    from benchmarks.bench.qiskit_circuits import prepend_hadamards, qft_circuit

    c = prepend_hadamards(qft_circuit(20)[0])
    res = Simulator(device="gpu").run(c)
    assert res.metadata["stages"]["use"], res.metadata["stages"]["why"]
    ref = Simulator(device="gpu", plan=None).run(c)
    np.testing.assert_allclose(res.state.to_numpy(), ref.state.to_numpy(), rtol=0, atol=1e-13)


def test_the_model_counts_in_a_unit_common_to_gpus_and_weighs_the_gate_estimate():
    """The unit follows the size and the SMs (not the device's pass), and the gate path's
    estimate is scaled by its measured bias before the comparison."""
    ref = stage_choice.reference_pass_ms(28)
    assert stage_choice.reference_pass_ms(29) == 2 * ref
    assert stage_choice.reference_pass_ms(28, 2 * stage_choice.REFERENCE_SM_GHZ) == ref / 2
    c = random_circuit(14, 200, seed=1, max_width=3)
    predicted = stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=1e6).predicted_ms
    bias = stage_choice.GATE_PATH_BIAS
    assert bias > 1
    assert stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=predicted / bias * 1.01).use
    assert not stage_choice.decide(c, max_dense=3, pass_ms=1.0, gate_ms=predicted / bias * 0.99).use
    # complex64 weights are its own (its FMA ops), not complex128's halved
    c64 = stage_choice.decide(c, max_dense=4, pass_ms=1.0, gate_ms=1e6, itemsize=8, block_qubits=2)
    assert c64.predicted_ms > 0 and c64.plan.local_qubits == 13


def test_the_stage_fit_recovers_the_weights_that_made_the_times():
    from benchmarks.bench.stage_fit import fit, op_counts
    from qsim_tc.stages.program import OP_DENSE, OP_PHASE, OP_WORDS, W_K, W_PCOUNT, W_TYPE

    rng = np.random.default_rng(3)
    truth = {"stage": 1.1, "d1": 0.2, "d2": 0.25, "d3": 0.3, "phase": 0.4, "pre": 0.8}
    rows = []
    for _ in range(40):
        recs = np.zeros((int(rng.integers(1, 12)), OP_WORDS), np.int64)
        for rec in recs:
            if rng.random() < 0.2:
                rec[W_TYPE] = OP_PHASE
            else:
                rec[W_TYPE], rec[W_K] = OP_DENSE, rng.integers(1, 4)
                rec[W_PCOUNT] = rng.random() < 0.2
        ops = op_counts(recs)
        assert sum(v for k, v in ops.items() if k != "pre") == len(recs)
        passes = truth["stage"] + sum(truth[k] * c for k, c in ops.items())
        rows.append({"ops": ops, "ms": 2.0 * passes})
    got = fit(rows, unit_ms=2.0)
    assert set(got) == set(truth)
    for k, v in truth.items():
        assert got[k] == pytest.approx(v, rel=1e-6)
