"""Every bad input named in the foundation issue gets a clear error and leaves the state unchanged."""

import numpy as np
import pytest

import gemm
from circuits import CircuitError, Gate
from qsim_tc import InsufficientMemoryError, QubitError, Simulator, StateVector, memory


@pytest.fixture
def state(rng):
    psi = rng.standard_normal(32) + 1j * rng.standard_normal(32)
    return StateVector.from_array(psi / np.linalg.norm(psi), device="cpu")


def unchanged(state, before):
    return np.array_equal(state.to_numpy(), before)


@pytest.mark.parametrize("qubits,match", [
    ([5], r"out of range for a 5-qubit state"),
    ([-1], r"out of range"),
    ([1, 1], r"repeat a qubit"),
    ([], r"empty"),
])
def test_bad_qubits(state, qubits, match):
    before = state.to_numpy()
    d = max(len(qubits), 1)
    with pytest.raises(QubitError, match=match):
        state.apply(np.eye(1 << d), qubits)
    assert unchanged(state, before)


def test_qubits_of_wrong_type(state):
    with pytest.raises(TypeError, match="qubits must be ints"):
        state.apply(np.eye(2), [1.5])


def test_matrix_shape_mismatch(state):
    before = state.to_numpy()
    with pytest.raises(QubitError, match=r"matrix has shape \(4, 4\), but 1 target qubit\(s\) need \(2, 2\)"):
        state.apply(np.eye(4), [0])
    assert unchanged(state, before)


def test_non_unitary_rejected_with_opt_out(state):
    before = state.to_numpy()
    m = np.array([[1, 1], [0, 1]])
    with pytest.raises(ValueError, match="not unitary.*check_unitary=False"):
        state.apply(m, [2])
    assert unchanged(state, before)
    state.apply(m, [2], check_unitary=False)  # the opt-out applies it
    assert not unchanged(state, before)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_inf_matrix(state, bad):
    before = state.to_numpy()
    m = np.eye(2, dtype=complex)
    m[0, 1] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        state.apply(m, [0], check_unitary=False)
    assert unchanged(state, before)


def test_nan_in_gate_and_data():
    with pytest.raises(CircuitError, match="NaN or Inf"):
        Gate(np.array([[np.nan, 0], [0, 1]]), [0])
    with pytest.raises(ValueError, match="data holds NaN or Inf"):
        StateVector(1, device="cpu", data=np.array([np.nan, 0]))


def test_unknown_method_lists_valid(state):
    with pytest.raises(ValueError, match=r"unknown GEMM method 'fast'; valid methods: native"):
        state.apply(np.eye(2), [0], method="fast")
    with pytest.raises(ValueError, match="unknown GEMM method"):
        Simulator("fast")


def test_unknown_device_lists_valid():
    with pytest.raises(ValueError, match=r"device='tpu' is not valid; expected one of auto, cpu, gpu"):
        Simulator(device="tpu")
    with pytest.raises(ValueError, match="device="):
        StateVector(2, device="tpu")


@pytest.mark.skipif(gemm.gpu_available(), reason="checks the no-GPU message")
def test_gpu_requested_without_gpu():
    with pytest.raises(gemm.DeviceError, match="device='gpu' requested but"):
        StateVector(2, device="gpu")


def test_unknown_backend_option():
    with pytest.raises(TypeError, match=r"method 'native' got unknown option\(s\) threshold"):
        Simulator("native", threshold=1)


def test_memory_check_before_allocation(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    with pytest.raises(InsufficientMemoryError, match=r"needs 16,384 bytes .* only 1,000 bytes"):
        StateVector(10, device="cpu")
    from circuits import brickwork

    with pytest.raises(InsufficientMemoryError, match="simulating 10 qubits"):
        Simulator(device="cpu").run(brickwork(10, 2, 1, seed=0))


def test_memory_check_on_apply(monkeypatch, state):
    before = state.to_numpy()
    monkeypatch.setattr(memory, "available_bytes", lambda device: 10)
    with pytest.raises(InsufficientMemoryError, match="applying a 1-qubit gate"):
        state.apply(np.eye(2), [0])
    assert unchanged(state, before)


def test_state_too_wide():
    with pytest.raises(ValueError, match=r"n_qubits must be an int in 1..40"):
        StateVector(64, device="cpu")


def test_mismatched_dtype_for_method(state):
    with pytest.raises(ValueError, match="works on complex64 states"):
        state.apply(np.eye(2), [0], method="native32")


def test_circuit_gate_out_of_range():
    from circuits import Circuit

    with pytest.raises(CircuitError, match=r"outside range\(0, 2\)"):
        Circuit(2).add(np.eye(2), [2])


def test_failure_inside_the_gemm_leaves_state_unchanged(state, monkeypatch):
    """A product that fails after the engine permuted the state into its spare buffer must not
    leave the state half-changed (the data buffer is about to receive the output)."""
    import gemm as gemm_mod

    state.apply(np.eye(4), [0, 1])  # creates the spare buffer
    before = state.to_numpy()
    calls = {"n": 0}
    real = gemm_mod.matmul

    def failing(*args, **kwargs):
        calls["n"] += 1
        raise RuntimeError("device lost")

    monkeypatch.setattr(gemm_mod, "matmul", failing)
    with pytest.raises(RuntimeError, match="device lost"):
        state.apply(np.eye(4), [0, 3])  # scattered: permute first
    monkeypatch.setattr(gemm_mod, "matmul", real)
    assert calls["n"] == 1
    assert unchanged(state, before)


@pytest.mark.parametrize("double_buffer", [False, True], ids=["bounded", "double-buffer"])
@pytest.mark.parametrize("method,dtype", [("int8", np.complex128), ("tf32tf32", np.complex64),
                                          ("native", np.complex128)])
def test_memory_estimate_covers_the_real_peak(method, dtype, double_buffer):
    """The bytes the engine checks before a gate are at least what the gate then allocates."""
    import tracemalloc

    import gemm as gemm_mod

    n, d = 16, 4
    rng = np.random.default_rng(0)
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    st = StateVector(n, dtype=dtype, device="cpu", data=psi / np.linalg.norm(psi), double_buffer=double_buffer)
    from circuits import haar_unitary

    u = haar_unitary(1 << d, rng)
    meth = gemm_mod.get_method(method)
    estimate = memory.gate_extra_bytes(meth, n, d, dtype, {}, spare_allocated=False, device="cpu",
                                       double_buffer=double_buffer)
    tracemalloc.start()
    st.apply(u, [1, 5, 9, 12], method=method)  # scattered: a permutation as well as the product
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # small per-call allocations (the gate's matrix forms, reports) are not state-sized
    assert peak <= estimate + (256 << 10), (peak / st.nbytes, estimate / st.nbytes)



@pytest.mark.parametrize("data,err,match", [
    (np.zeros(0), ValueError, "length 0 is not a power of two"),
    (np.eye(2), ValueError, "must be 1-D"),
    ([1, 0, 0], ValueError, "length 3 is not a power of two"),
    (np.array(["a", "b"]), TypeError, "must be numeric"),
])
def test_from_array_bad_data(data, err, match):
    with pytest.raises(err, match=match):
        StateVector.from_array(data, device="cpu")


def test_from_array_list_and_overflow_in_complex64():
    assert StateVector.from_array([0, 1], device="cpu").amplitude(1) == 1
    with pytest.raises(ValueError, match="NaN or Inf"):
        StateVector(1, dtype=np.complex64, device="cpu", data=np.array([1e39, 0]))


def test_next_qubits_checked(state):
    before = state.to_numpy()
    with pytest.raises(QubitError, match="out of range"):
        state.apply(np.eye(2), [0], next_qubits=[9])
    assert unchanged(state, before)
