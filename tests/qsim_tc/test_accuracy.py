"""Accuracy metrics on crafted states, mirror mode, and the backend table."""

import math

import numpy as np
import pytest

from circuits import brickwork
from qsim_tc import Simulator, StateVector
from qsim_tc.accuracy import accuracy_table, compare, format_table, mirror_error, plot_rows
from qsim_tc.reference import simulate_dd


def _random_state(n, rng):
    v = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    return v / np.linalg.norm(v)


def test_known_relative_errors(rng):
    ref = _random_state(6, rng)
    eps = 3e-9
    psi = ref * (1 + eps)  # every amplitude off by the same relative amount
    out = compare(psi, ref)
    assert out["max_rel"] == pytest.approx(eps, rel=1e-6)
    assert out["mean_rel"] == pytest.approx(eps, rel=1e-6)
    assert out["l2_rel"] == pytest.approx(eps, rel=1e-6)
    assert out["amp0_real_rel"] == pytest.approx(eps, rel=1e-6)
    assert out["norm_drift"] == pytest.approx(eps, rel=1e-6)
    assert abs(out["infidelity"]) < 1e-30  # a scaled state has fidelity 1
    assert out["n_qubits"] == 6 and out["n_compared"] + out["n_below_floor"] == 64


def test_known_infidelity(rng):
    ref = _random_state(5, rng)
    w = _random_state(5, rng)
    w -= np.vdot(ref, w) * ref
    w /= np.linalg.norm(w)
    t = 1e-6
    psi = math.cos(t) * ref + math.sin(t) * w
    assert compare(psi, ref)["infidelity"] == pytest.approx(math.sin(t) ** 2, rel=1e-6)


def test_tiny_infidelity_is_resolved_in_dd():
    # reference hi = |0>, lo puts 3e-17 on |1>: the rounded state misses it entirely
    hi = np.zeros(8, complex)
    hi[0] = 1
    lo = np.zeros(8, complex)
    lo[1] = 3e-17
    out = compare(hi.copy(), (hi, lo))
    assert out["infidelity"] == pytest.approx(9e-34, rel=1e-6)
    assert out["norm_drift"] == pytest.approx(-4.5e-34, rel=1e-6)
    assert out["l2_rel"] == pytest.approx(3e-17, rel=1e-9)


def test_floor_excludes_small_amplitudes(rng):
    ref = _random_state(4, rng)
    ref[[3, 7]] = 0
    psi = ref.copy()
    psi[3] = 1e-12  # error on an amplitude that is zero in the reference: no division by zero
    out = compare(psi, ref)
    assert out["n_below_floor"] == 2 and out["n_compared"] == 14
    assert out["max_rel"] == 0.0 and out["l2_rel"] == pytest.approx(1e-12, rel=1e-9)
    none = compare(psi, ref, floor=10.0)
    assert none["n_compared"] == 0 and math.isnan(none["max_rel"]) and math.isnan(none["mean_rel"])
    ref[0] = 1j * abs(ref[0])
    assert math.isnan(compare(ref, ref)["amp0_real_rel"])


def test_compare_statevector_and_ddstate(rng):
    circ = brickwork(8, 2, 4, seed=1)
    ref = simulate_dd(circ, device="cpu")
    res = Simulator("native", device="cpu").run(circ)
    out = compare(res.state, ref)
    assert 1e-18 < out["l2_rel"] < 1e-14
    assert out == compare(res, ref)
    ref_rounded = compare(ref.to_complex128(), ref)
    assert ref_rounded["l2_rel"] < 1.2e-16  # rounding the DD state to complex128 costs < 1 ulp


def test_compare_bad_input(rng):
    with pytest.raises(ValueError, match=r"state has 16 amplitudes \(4 qubits\) but reference has 32 \(5 qubits\)"):
        compare(np.ones(16, complex), np.ones(32, complex))
    with pytest.raises(ValueError, match="floor must be"):
        compare(np.ones(4, complex), np.ones(4, complex), floor=-1.0)
    with pytest.raises(TypeError, match="state must be"):
        compare([1, 0], np.ones(2, complex))
    bad = np.ones(4, complex)
    bad[2] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        compare(bad, np.ones(4, complex))
    with pytest.raises(ValueError, match="state has 4 amplitudes"):
        compare(StateVector(2, device="cpu"), np.ones(8, complex))


def test_mirror_error_separates_precisions():
    circ = brickwork(8, 3, 4, seed=3)
    m64 = mirror_error(Simulator("native", device="cpu"), circ)
    m32 = mirror_error(Simulator("native32", device="cpu"), circ)
    assert 0 < m64["l2_rel"] < 1e-13
    assert 1e-9 < m32["l2_rel"] < 1e-4
    assert m64["n_gates"] == 2 * len(circ) and m64["n_below_floor"] == 255


def test_accuracy_table_and_outputs(tmp_path):
    circ = brickwork(8, 2, 3, seed=4)
    rows = accuracy_table(circ, "native32", device="cpu", mirror=True)
    assert [r["backend"] for r in rows] == ["native", "native32", "dd (reference)"]
    assert rows[0]["speedup_vs_native"] == 1.0
    assert rows[0]["l2_rel"] < 1e-14 < 1e-9 < rows[1]["l2_rel"]
    assert rows[1]["mirror_l2_rel"] > 1e-9
    text = format_table(rows)
    assert "native32" in text and "infidelity" in text and "below the floor" in text
    path = plot_rows(rows, str(tmp_path / "acc.png"))
    assert (tmp_path / "acc.png").stat().st_size > 1000 and path.endswith(".png")
    no_ref = accuracy_table(circ, ["native"], device="cpu", reference=None)
    assert len(no_ref) == 1 and "l2_rel" not in no_ref[0]
    with pytest.raises(ValueError, match="unknown GEMM method 'nope'"):
        accuracy_table(circ, ["nope"], device="cpu")
    with pytest.raises(ValueError, match="reference='fp128'"):
        accuracy_table(circ, ["native"], device="cpu", reference="fp128")
