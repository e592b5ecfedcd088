"""The double-double reference simulation against native and an mpmath state vector."""

import mpmath
import numpy as np
import pytest

import qsim_tc
from circuits import Circuit, Gate, brickwork
from circuits.haar import haar_unitary
from qsim_tc import Simulator, memory
from qsim_tc.reference import bytes_needed, simulate_dd


def _random_circuit(n, n_gates, rng, max_d=3, phase=0.0):
    c = Circuit(n, global_phase=phase)
    for _ in range(n_gates):
        d = int(rng.integers(1, max_d + 1))
        qs = tuple(int(q) for q in rng.choice(n, size=d, replace=False))  # any order, not contiguous
        c.append(Gate(haar_unitary(1 << d, rng), qs, check_unitary=False))
    return c


@pytest.mark.parametrize("case", ["brick2", "brick3", "random"])
def test_matches_native(rng, case):
    if case == "random":
        circ = _random_circuit(8, 25, rng, phase=0.7)
    else:
        d = 2 if case == "brick2" else 3
        circ = brickwork(9, d, 6, seed=5, periodic=True)
    ref = simulate_dd(circ, device="cpu")
    nat = Simulator("native", device="cpu").run(circ).state.to_numpy()
    out = ref.to_complex128()
    assert out.dtype == np.complex128 and ref.hi.shape == (1 << circ.n_qubits,)
    assert np.abs(out - nat).max() < 1e-13
    assert np.abs(out - nat).max() > 0  # native rounds; the reference does not round the same way


def _mp_state(circ):
    mpmath.mp.prec = 250
    n = circ.n_qubits
    psi = [mpmath.mpc(0)] * (1 << n)
    psi[0] = mpmath.mpc(1)
    for g in circ:
        qs, d = g.qubits, len(g.qubits)
        u = [[mpmath.mpc(complex(x)) for x in row] for row in g.matrix]
        new = [mpmath.mpc(0)] * (1 << n)
        for idx in range(1 << n):
            col = sum(((idx >> q) & 1) << j for j, q in enumerate(qs))
            base = idx & ~sum(1 << q for q in qs)
            for row in range(1 << d):
                tgt = base | sum(((row >> j) & 1) << q for j, q in enumerate(qs))
                new[tgt] += u[row][col] * psi[idx]
        psi = new
    ph = mpmath.mpc(complex(circ.phase_factor))  # the phase factor is an exact double too
    return [ph * a for a in psi]


def test_matches_mpmath_to_1e28(rng):
    circ = _random_circuit(6, 14, rng, max_d=3, phase=0.3)
    ref = simulate_dd(circ, device="cpu")
    exact = _mp_state(circ)
    worst = 0.0
    for i, e in enumerate(exact):
        got = mpmath.mpc(complex(ref.hi[i])) + mpmath.mpc(complex(ref.lo[i]))
        worst = max(worst, float(abs(got - e)))
    assert worst < 1e-28
    assert float(np.abs(ref.lo).max()) > 0  # the low parts carry information


def test_initial_state_pair_and_metadata(rng):
    circ = _random_circuit(5, 6, rng)
    full = simulate_dd(circ.then(circ.inverse()), device="cpu")
    # the double matrices are unitary to ~1e-16 only, so U^dagger U is not exactly I in DD
    assert 1e-20 < abs(full.to_complex128()[0] - 1) < 1e-14
    first = simulate_dd(circ, device="cpu")
    back = simulate_dd(circ.inverse(), device="cpu", initial_state=(first.hi, first.lo))
    assert np.abs((back.hi - full.hi) + (back.lo - full.lo)).max() < 1e-28
    assert first.metadata["n_gates"] == 6 and first.metadata["dd"]["algorithm"] == "split"


def test_rejects_nan_gate(rng):
    circ = _random_circuit(4, 3, rng)
    bad = np.array(circ.gates[1].matrix)
    bad[0, 0] = np.nan
    object.__setattr__(circ.gates[1], "matrix", bad)  # Gate() itself refuses NaN; force one in
    with pytest.raises(ValueError, match=r"gate 1 .* NaN or Inf"):
        simulate_dd(circ, device="cpu")


def test_too_large_reports_bytes(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    with pytest.raises(qsim_tc.InsufficientMemoryError, match=f"{bytes_needed(10):,} bytes"):
        simulate_dd(brickwork(10, 2, 1, seed=0), device="cpu")


def test_bad_arguments(rng):
    with pytest.raises(TypeError, match="circuit must be a circuits.Circuit"):
        simulate_dd("x", device="cpu")
    with pytest.raises(ValueError, match="initial_state has 8 amplitudes"):
        simulate_dd(brickwork(4, 2, 1, seed=0), device="cpu", initial_state=np.ones(8))
    with pytest.raises(TypeError, match="unknown option"):
        simulate_dd(brickwork(4, 2, 1, seed=0), device="cpu", splits=2)
