"""Careless numeric input to states and circuits: nothing non-finite enters a state, a state of
NaN or zero norm is refused by what reads probabilities from it, initial amplitudes must have
norm 1 (or ask to be normalized), and shots are checked before any work."""

import warnings

import numpy as np
import pytest

from circuits import Circuit, CircuitError, Gate, haar_unitary
from qsim_tc import InsufficientMemoryError, Simulator, StateNormError, StateVector


def _plus(n=2):
    return StateVector.from_array(np.full(1 << n, (1 << n) ** -0.5), device="cpu")


# --- non-finite phases ----------------------------------------------------------------------------

@pytest.mark.parametrize("phase", [np.inf, -np.inf, np.nan, float("1e999")])
def test_apply_global_phase_refuses_non_finite_and_leaves_the_state(phase):
    st = _plus()
    before = st.to_numpy()
    with pytest.raises(ValueError, match="phase must be a finite number of radians"):
        st.apply_global_phase(phase)
    assert np.array_equal(st.to_numpy(), before)


def test_apply_global_phase_refuses_non_real():
    st = _plus()
    with pytest.raises(TypeError, match="phase must be a real number"):
        st.apply_global_phase(1j)
    with pytest.raises(TypeError, match="phase must be a real number"):
        st.apply_global_phase("0.5")
    st.apply_global_phase(np.float32(0.5))  # numpy reals are reals
    assert abs(st.amplitude(0) - 0.5 * np.exp(0.5j)) < 1e-7


@pytest.mark.parametrize("phase", [np.inf, np.nan, -np.inf])
def test_circuit_refuses_non_finite_global_phase_however_built(phase):
    with pytest.raises(CircuitError, match="global_phase must be a finite number"):
        Circuit(1, global_phase=phase)
    c = Circuit(1)
    with pytest.raises(CircuitError, match="global_phase must be a finite number"):
        c.global_phase = phase
    assert c.global_phase == 0.0


def test_circuit_phase_overflowing_in_composition_is_refused():
    a = Circuit(1, global_phase=1e308)
    with pytest.raises(CircuitError, match="global_phase must be a finite number of radians, got inf"):
        a.then(a)
    with pytest.raises(TypeError, match="global_phase must be a real number"):
        Circuit(1, global_phase="pi")


def test_qiskit_circuit_with_infinite_phase_is_refused():
    qiskit = pytest.importorskip("qiskit")
    from circuits import from_qiskit

    qc = qiskit.QuantumCircuit(1, global_phase=float("inf"))
    qc.h(0)
    with pytest.raises(CircuitError, match="global_phase"):
        from_qiskit(qc)


def test_circuit_measured_must_be_int_pairs_in_range():
    with pytest.raises(TypeError, match="measured qubit must be an int"):
        Circuit(2, measured=[(0.5, 0)])
    with pytest.raises(CircuitError, match="measured qubit 2 is outside range"):
        Circuit(2, measured=[(2, 0)])
    with pytest.raises(CircuitError, match="measured must hold"):
        Circuit(2, measured=[1])
    with pytest.raises(CircuitError, match="n_clbits must be >= 0"):
        Circuit(2, n_clbits=-1)
    assert Circuit(2, measured=[(np.int64(1), 3)]).n_clbits == 4


# --- states of NaN or zero norm -----------------------------------------------------------------

def _zero_norm_state():
    st = _plus()
    st.apply(np.zeros((2, 2)), [0], check_unitary=False)
    return st


def _infinite_state():
    st = _plus()
    with np.errstate(over="ignore", invalid="ignore"):  # the point of the exercise
        for _ in range(3):
            st.apply(1e200 * np.eye(2), [1], check_unitary=False)
    return st


@pytest.mark.parametrize("make", [_zero_norm_state, _infinite_state])
def test_reading_probabilities_refuses_nan_or_zero_norm(make):
    st = make()
    with pytest.raises(StateNormError, match="sample needs a state of finite, nonzero norm"):
        st.sample(10, seed=1)
    with pytest.raises(StateNormError, match="probabilities needs a state of finite, nonzero norm"):
        st.probabilities()
    with pytest.raises(StateNormError, match="probabilities needs"):
        st.probabilities([0])
    with pytest.raises(StateNormError, match="expectation_value needs"):
        st.expectation_value("ZZ")


def test_adopted_nan_data_is_refused_when_read():
    data = np.full(4, 0.5, dtype=np.complex128)
    st = StateVector.from_array(data, copy=False, device="cpu")
    st._data[1] = np.nan  # copy=False scans nothing: the reading side must catch it
    with pytest.raises(StateNormError):
        st.sample(5)


# --- initial amplitudes ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda d: StateVector.from_array(d, device="cpu"),
    lambda d: StateVector(2, device="cpu", data=d),
])
def test_unnormalized_data_is_refused(make):
    with pytest.raises(ValueError, match=r"data has norm 2, not 1.*normalize=True"):
        make(np.ones(4))
    with pytest.raises(ValueError, match="data is all zero"):
        make(np.zeros(4))


def test_normalize_scales_data_to_norm_one():
    st = StateVector.from_array([3, 4j], device="cpu", normalize=True)
    assert np.allclose(st.to_numpy(), [0.6, 0.8j], atol=1e-15)
    # squares that would under- or overflow float64
    for scale in (1e-200, 1e200):
        st = StateVector.from_array(np.array([3, 4]) * scale, device="cpu", normalize=True)
        assert np.allclose(st.to_numpy(), [0.6, 0.8], atol=1e-15)
    st = StateVector(1, dtype=np.complex64, device="cpu", data=[1e-30, 0], normalize=True)
    assert st.to_numpy()[0] == 1
    with pytest.raises(ValueError, match="data is all zero"):
        StateVector.from_array(np.zeros(4), device="cpu", normalize=True)
    with pytest.raises(ValueError, match="normalize=True needs copy=True"):
        StateVector.from_array(np.ones(4, dtype=np.complex128), copy=False, device="cpu", normalize=True)
    with pytest.raises(TypeError, match="normalize must be True or False"):
        StateVector.from_array(np.ones(4), device="cpu", normalize="yes")


def test_normalized_single_precision_data_is_accepted(rng):
    psi = (rng.standard_normal(1 << 16) + 1j * rng.standard_normal(1 << 16)).astype(np.complex64)
    psi /= np.linalg.norm(psi)  # normalized in float32 arithmetic
    assert abs(StateVector.from_array(psi, device="cpu").norm() - 1) < 1e-5
    # and complex128 data normalized in float64, stored as complex64
    psi = rng.standard_normal(1 << 10) + 0j
    StateVector.from_array(psi / np.linalg.norm(psi), dtype=np.complex64, device="cpu")
    # a near miss in complex128 is not rounding
    with pytest.raises(ValueError, match="data has norm"):
        StateVector.from_array(psi / np.linalg.norm(psi) * (1 + 1e-6), device="cpu")


# --- shots ------------------------------------------------------------------------------------------

def test_sample_shots_are_checked_first():
    st = _plus()
    with pytest.raises(InsufficientMemoryError, match=r"sampling shots=1,099,511,627,776 needs"):
        st.sample(2**40)
    with pytest.raises(TypeError, match=r"shots must be an int, got 1.5 \(float\)"):
        st.sample(1.5)
    with pytest.raises(TypeError, match="shots must be an int"):
        st.sample(True)
    with pytest.raises(ValueError, match="shots must be >= 1, got 0"):
        st.sample(0)
    with pytest.raises(ValueError, match="shots must be >= 1, got -3"):
        st.sample(-3)
    with pytest.raises(ValueError, match="out of range"):
        st.sample(5, qubits=[7])
    assert st.sample(np.int64(20), seed=3).shape == (20,)


# --- qiskit circuits of every class -----------------------------------------------------------------

@pytest.mark.parametrize("make", ["QuantumVolume", "QFT"])
def test_quantum_circuit_subclasses_run(make):
    qiskit = pytest.importorskip("qiskit")
    from qiskit.circuit import library
    from qiskit.quantum_info import Statevector

    with warnings.catch_warnings():  # the library classes are deprecated for functions, not gone
        warnings.simplefilter("ignore", DeprecationWarning)
        qc = library.QuantumVolume(4, seed=3) if make == "QuantumVolume" else library.QFT(4)
    assert type(qc) is not qiskit.QuantumCircuit and isinstance(qc, qiskit.QuantumCircuit)
    got = Simulator("native", device="cpu").run(qc).state.to_numpy()
    assert np.abs(got - Statevector(qc).data).max() < 1e-12


def test_other_objects_are_still_refused():
    with pytest.raises(TypeError, match="circuit must be a circuits.Circuit or a qiskit.QuantumCircuit, got list"):
        Simulator("native", device="cpu").run([Gate(haar_unitary(2, np.random.default_rng(1)), [0])])


# --- options that would carry a non-finite value into a result --------------------------------------

def test_non_finite_options_are_refused():
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="tolerance must be a finite positive number"):
            Simulator(tolerance=bad)


def test_estimator_refuses_infinite_precision():
    qiskit = pytest.importorskip("qiskit")
    from qsim_tc.qiskit import Estimator

    with pytest.raises(ValueError, match="default_precision must be a finite float >= 0, got inf"):
        Estimator(default_precision=float("inf"))
    qc = qiskit.QuantumCircuit(1)
    qc.h(0)
    with pytest.raises(ValueError, match="precision of PUB 0 must be finite, got inf"):
        Estimator(backend="native", device="cpu").run([(qc, "X")], precision=float("inf"))


def test_openqasm3_gphase_overflow_is_refused(tmp_path):
    pytest.importorskip("qiskit_qasm3_import")
    from circuits import from_qasm

    path = tmp_path / "phase.qasm"
    path.write_text('OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[1] q;\ngphase(1e999);\nh q[0];\n')
    with pytest.raises(CircuitError, match="global_phase.*finite number"):
        from_qasm(path)


def test_reference_initial_state_must_have_norm_one():
    from circuits import brickwork
    from qsim_tc.reference import simulate_dd

    c = brickwork(3, 2, 1, seed=0)
    with pytest.raises(ValueError, match="initial_state has norm 2.82843, not 1"):
        simulate_dd(c, device="cpu", initial_state=np.ones(8))
    with pytest.raises(ValueError, match="initial_state is all zero"):
        simulate_dd(c, device="cpu", initial_state=np.zeros(8))
    start = np.zeros(8)
    start[5] = 1
    assert simulate_dd(c, device="cpu", initial_state=start).n_qubits == 3


@pytest.mark.parametrize("atol,err", [(float("nan"), ValueError), (float("inf"), ValueError), (-1e-3, ValueError),
                                      ("1e-3", TypeError)])
def test_unitarity_tolerance_must_be_finite(atol, err):
    with pytest.raises(err, match="atol must be a"):
        Gate(5 * np.eye(2), [0], atol=atol)  # a NaN tolerance used to pass any matrix
    qiskit = pytest.importorskip("qiskit")
    from circuits import from_qiskit

    qc = qiskit.QuantumCircuit(1)
    qc.h(0)
    with pytest.raises(err, match="atol must be a"):
        from_qiskit(qc, atol=atol)


def test_distributed_state_refuses_zero_norm_on_every_rank():
    """One process (COMM_SELF): the check follows the collective, so every rank decides alike."""
    mpi = pytest.importorskip("mpi4py.MPI")
    from qsim_tc.distributed.state import DistributedState

    st = DistributedState(mpi.COMM_SELF, 3, data=np.zeros(8, dtype=np.complex128))
    for read in (lambda: st.sample(5, seed=1), lambda: st.probabilities([0]), lambda: st.expectation_value("ZZZ")):
        with pytest.raises(StateNormError, match="needs a state of finite, nonzero norm"):
            read()
    good = DistributedState(mpi.COMM_SELF, 3)
    assert good.sample(4, seed=1).tolist() == [0, 0, 0, 0]


def test_cli_checks_shots_before_the_run(tmp_path, capsys):
    from qsim_tc.cli import main

    path = tmp_path / "bell.qasm"
    path.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\nh q[0];\ncx q[0],q[1];\n')
    rc = main(["run", str(path), "--shots", str(2**40), "--backend", "native", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert rc == 2 and "sampling --shots=1,099,511,627,776 needs" in err and "counts" not in out
    assert "time:" not in out  # refused before anything ran


def test_sampler_checks_shots_before_simulating():
    qiskit = pytest.importorskip("qiskit")
    from qsim_tc.qiskit import Sampler

    qc = qiskit.QuantumCircuit(2)
    qc.h(0)
    qc.measure_all()
    with pytest.raises(InsufficientMemoryError, match=r"sampling PUB 0's shots=1,099,511,627,776 needs"):
        Sampler(backend="native", device="cpu").run([qc], shots=2**40)


def test_initial_state_must_be_a_state_vector():
    from circuits import brickwork

    with pytest.raises(TypeError, match=r"initial_state must be a StateVector \(StateVector.from_array"):
        Simulator("native", device="cpu").run(brickwork(2, 2, 1, seed=0), initial_state=np.array([1, 0, 0, 0]))


def test_sample_checks_its_probability_table_fits(monkeypatch):
    from qsim_tc import memory

    st = StateVector(23, device="cpu")  # a 128 MiB table
    monkeypatch.setattr(memory, "available_bytes", lambda device: 64 << 20)
    with pytest.raises(InsufficientMemoryError, match="sample's probability table for 23 qubits needs 134,217,728"):
        st.sample(10)
