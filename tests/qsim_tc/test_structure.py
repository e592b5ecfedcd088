"""Gate structure read from the matrix: diagonal, controlled-U, permutation, dense (exact tests)."""

import numpy as np
import pytest

from circuits import haar_unitary
from qsim_tc.stages.structure import CONTROLLED, DENSE, DIAGONAL, PERMUTATION, classify

qiskit = pytest.importorskip("qiskit")
lib = qiskit.circuit.library


def matrix(gate) -> np.ndarray:
    return np.asarray(qiskit.quantum_info.Operator(gate).data, dtype=np.complex128)


@pytest.mark.parametrize("gate", [lib.CZGate(), lib.CPhaseGate(0.3), lib.RZGate(1.1), lib.TGate(),
                                  lib.RZZGate(0.7), lib.CCZGate()])
def test_diagonal_gates_store_their_diagonal(gate):
    m = matrix(gate)
    s = classify(m)
    assert s.kind == DIAGONAL
    assert s.targets == () and s.controls == ()
    np.testing.assert_array_equal(s.diagonal, np.diagonal(m))


def test_crx_has_one_control_and_the_rx_target():
    theta = 0.9
    s = classify(matrix(lib.CRXGate(theta)))  # qiskit: qubit 0 (bit 0) is the control
    assert s.kind == CONTROLLED
    assert s.controls == (0,) and s.targets == (1,)
    np.testing.assert_array_equal(s.target_matrix, matrix(lib.RXGate(theta)))


def mcx(n_controls: int) -> np.ndarray:
    """X on the top bit when all lower bits are 1, built exactly."""
    dim = 1 << (n_controls + 1)
    perm = np.arange(dim)
    ones = (1 << n_controls) - 1
    perm[[ones, ones | 1 << n_controls]] = perm[[ones | 1 << n_controls, ones]]
    return np.eye(dim, dtype=complex)[perm]


@pytest.mark.parametrize("n_controls", [1, 2, 3, 4])
def test_multi_controlled_x(n_controls):
    s = classify(mcx(n_controls))
    assert s.kind == CONTROLLED
    assert s.controls == tuple(range(n_controls)) and s.targets == (n_controls,)
    np.testing.assert_array_equal(s.target_matrix, [[0, 1], [1, 0]])


def test_synthesized_mcx_with_rounding_noise_is_dense():
    # qiskit builds MCX(3) through a synthesis; its entries carry ~1e-16 noise, so the exact
    # test calls it dense rather than approximating it by a controlled gate
    m = matrix(lib.MCXGate(3))
    assert np.abs(m - mcx(3)).max() < 1e-12
    assert classify(m).kind in (CONTROLLED, DENSE)


def test_toffoli_is_controlled():
    s = classify(matrix(lib.CCXGate()))
    assert (s.kind, s.controls, s.targets) == (CONTROLLED, (0, 1), (2,))


def test_control_in_the_middle_and_a_two_qubit_target():
    u = haar_unitary(4, np.random.default_rng(1))
    m = np.eye(8, dtype=complex)
    # control = bit 1; targets = bits 0 and 2 (target index bit 0 = bit 0, bit 1 = bit 2)
    sub = [0b010, 0b011, 0b110, 0b111]
    m[np.ix_(sub, sub)] = u
    s = classify(m)
    assert (s.kind, s.controls, s.targets) == (CONTROLLED, (1,), (0, 2))
    np.testing.assert_array_equal(s.target_matrix, u)


def test_swap_is_a_qubit_exchange():
    s = classify(matrix(lib.SwapGate()))
    assert s.kind == PERMUTATION
    assert s.qubit_swap == (0, 1)
    np.testing.assert_array_equal(s.permutation, [0, 2, 1, 3])


def test_iswap_is_a_permutation_with_phases_not_an_exchange():
    s = classify(matrix(lib.iSwapGate()))
    assert s.kind == PERMUTATION and s.qubit_swap is None
    np.testing.assert_array_equal(s.phases, [1, 1j, 1j, 1])


def test_x_is_a_permutation():
    s = classify(matrix(lib.XGate()))
    assert s.kind == PERMUTATION and s.qubit_swap is None


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_haar_gates_are_dense(d):
    s = classify(haar_unitary(1 << d, np.random.default_rng(d)))
    assert s.kind == DENSE and s.targets == tuple(range(d))


def test_near_diagonal_is_dense():
    m = np.diag(np.exp(1j * np.arange(4))).astype(complex)
    m[1, 2] = 1e-12
    assert classify(m).kind == DENSE
    m[1, 2] = 1e-300  # any nonzero: the test is exact, so no approximation changes a result
    assert classify(m).kind == DENSE


def test_near_controlled_is_not_controlled():
    m = matrix(lib.CRXGate(0.4))
    m[0, 0] = 1 - 1e-15  # the control-0 block must be exactly the identity
    assert classify(m).kind == DENSE
    m = matrix(lib.CRXGate(0.4))
    m[0, 1] = 1e-14  # a leak between control values
    assert classify(m).kind == DENSE


def test_bad_shape_is_rejected():
    with pytest.raises(ValueError, match="matrix must be"):
        classify(np.eye(3))
    with pytest.raises(ValueError, match="matrix must be"):
        classify(np.ones((1, 1)))


def test_controlled_matrix_rebuilds_the_gate_and_drops_known_controls():
    import pytest

    from qsim_tc.stages.structure import classify, controlled_matrix

    x = np.array([[0, 1], [1, 0]], dtype=complex)
    ccx = np.eye(8, dtype=complex)
    ccx[6:, 6:] = x  # controls on matrix bits 1 and 2, target bit 0
    s = classify(ccx)
    assert s.kind == "controlled"
    np.testing.assert_array_equal(controlled_matrix(s, range(3)), ccx)
    cx = np.eye(4, dtype=complex)
    cx[np.ix_([2, 3], [2, 3])] = x  # bit 0 the target, bit 1 the control kept
    np.testing.assert_array_equal(controlled_matrix(s, [0, 2]), cx)
    np.testing.assert_array_equal(controlled_matrix(s, [0]), x)
    with pytest.raises(ValueError, match="every target"):
        controlled_matrix(s, [1, 2])
