"""The circuit model, brickwork generator, Haar sampling and npz persistence."""

import numpy as np
import pytest

from circuits import Circuit, CircuitError, Gate, brickwork, haar_unitary


def test_brickwork_layout():
    c = brickwork(10, 4, 3, seed=1)
    assert [g.qubits for g in c] == [(0, 1, 2, 3), (4, 5, 6, 7), (2, 3, 4, 5), (6, 7, 8, 9),
                                     (0, 1, 2, 3), (4, 5, 6, 7)]
    p = brickwork(10, 4, 2, seed=1, periodic=True)
    assert [g.qubits for g in p][:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    for layer in ([g.qubits for g in p][:2], [g.qubits for g in p][2:]):
        flat = [q for qs in layer for q in qs]
        assert len(flat) == len(set(flat))  # gates of one layer are disjoint


def test_brickwork_periodic_wraps():
    c = brickwork(8, 4, 2, seed=0, periodic=True)
    assert (6, 7, 0, 1) in [g.qubits for g in c]


def test_brickwork_is_reproducible_and_unitary():
    a, b = brickwork(8, 3, 4, seed=5), brickwork(8, 3, 4, seed=5)
    for ga, gb in zip(a, b):
        assert np.array_equal(ga.matrix, gb.matrix)
        assert np.abs(ga.matrix.conj().T @ ga.matrix - np.eye(8)).max() < 1e-13


@pytest.mark.parametrize("kw,match", [
    (dict(n_qubits=4, gate_qubits=5, depth=1), "gate_qubits must be in 1..n_qubits=4"),
    (dict(n_qubits=4, gate_qubits=2, depth=0), "depth must be >= 1"),
])
def test_brickwork_bad_args(kw, match):
    with pytest.raises(CircuitError, match=match):
        brickwork(**kw)


def test_haar_spectrum_looks_haar():
    """Eigenphases of Haar unitaries are uniform on the circle, and repel (CUE level spacing).

    Loose statistical checks: the mean of e^{i theta} over many eigenvalues vanishes, and the
    fraction of small nearest-neighbour spacings is far below a Poisson spectrum's.
    """
    rng = np.random.default_rng(0)
    dim, n = 16, 400
    phases, spacings = [], []
    for _ in range(n):
        th = np.sort(np.angle(np.linalg.eigvals(haar_unitary(dim, rng))))
        phases.append(th)
        s = np.diff(np.concatenate([th, [th[0] + 2 * np.pi]])) * dim / (2 * np.pi)
        spacings.append(s)
    th = np.concatenate(phases)
    assert abs(np.mean(np.exp(1j * th))) < 0.02  # ~1/sqrt(6400) scale
    s = np.concatenate(spacings)
    # CUE: P(s < 0.1) ~ 0.001; Poisson: ~0.095
    assert np.mean(s < 0.1) < 0.01
    # without the phase correction QR is not Haar: LAPACK's Householder QR gives R a real
    # diagonal of fixed sign, which biases the phases of Q
    z = rng.standard_normal((4000, 2, 2)) + 1j * rng.standard_normal((4000, 2, 2))
    q = np.linalg.qr(z)[0]
    assert abs(np.mean(q[:, 0, 0].real)) > 0.3


def test_haar_unitary_moments():
    """E|U_00|^2 = 1/d and E|U_00|^4 = 2/(d(d+1)) for Haar unitaries."""
    rng = np.random.default_rng(1)
    d = 4
    u00 = np.array([haar_unitary(d, rng)[0, 0] for _ in range(20000)])
    assert abs(np.mean(np.abs(u00) ** 2) - 1 / d) < 0.01
    assert abs(np.mean(np.abs(u00) ** 4) - 2 / (d * (d + 1))) < 0.01
    assert abs(np.mean(u00.real)) < 0.01  # no phase bias


def test_save_load_roundtrip(tmp_path):
    c = brickwork(6, 2, 3, seed=2)
    c.global_phase = 0.3
    c.measured = [(0, 0), (3, 1)]
    c.n_clbits = 2
    path = tmp_path / "c.npz"
    c.save(path)
    d = Circuit.load(path)
    assert d.n_qubits == 6 and len(d) == len(c) and d.global_phase == 0.3
    assert d.measured == [(0, 0), (3, 1)]
    for ga, gb in zip(c, d):
        assert ga.qubits == gb.qubits and ga.name == gb.name and np.array_equal(ga.matrix, gb.matrix)


def test_gate_matrix_read_only_and_inverse(rng):
    g = Gate(haar_unitary(4, rng), [3, 1], "u")
    with pytest.raises(ValueError):
        g.matrix[0, 0] = 0
    assert np.allclose(g.inverse().matrix @ g.matrix, np.eye(4))


def test_gate_errors():
    with pytest.raises(CircuitError, match=r"repeat a qubit"):
        Gate(np.eye(4), [1, 1])
    with pytest.raises(CircuitError, match=r"matrix of gate .* on qubits \(0, 1\) has shape \(2, 2\), but 2 target qubit\(s\) need \(4, 4\)"):
        Gate(np.eye(2), [0, 1])
    with pytest.raises(CircuitError, match="not unitary"):
        Gate(np.ones((2, 2)), [0])
