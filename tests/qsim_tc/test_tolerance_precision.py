"""Simulator(tolerance=...) running int8-crt with the fewest moduli whose error bound meets the
tolerance (qsim_tc.run_error.tune_precision): the count falls with a looser tolerance, the
measured error against double-double stays within the bound and the tolerance, the selector
prices the reduced count, and runs without a tolerance are unchanged."""

import numpy as np
import pytest

from circuits import brickwork
from gemm.ozaki.crt.moduli import MAX_MODULI, MIN_MODULI
from qsim_tc import Simulator, run_error
from qsim_tc.plan.costs import CostRow, CostTable
from qsim_tc.plan.select import Selector
from qsim_tc.reference import simulate_dd

C128 = "complex128"


def _table(crt_ms: float) -> CostTable:
    """native at 10 ms a gate, int8-crt at ``crt_ms`` (its default moduli count)."""
    return CostTable({"device": "cpu"}, tuple(
        CostRow("cpu", C128, m, 10, {1: ms}, overhead_ms=0.0, placement="any")
        for m, ms in (("native", 10.0), ("int8-crt", crt_ms))), "given")


def _run(c, table, **kw):
    return Simulator(device="cpu", cost_table=table, plan=None, fuse=None, **kw).run(c)


def _moduli_ran(res):
    """The moduli count each int8-crt block's products used (from their reports)."""
    return {int(ch["moduli"]) for s in res.stats if s.info.method == "int8-crt" for ch in s.info.block_choices}


def _measured_l2(res, c):
    hi, lo = simulate_dd(c, device="cpu").to_numpy()
    return float(np.linalg.norm((res.state.to_numpy() - hi) - lo))


def test_a_looser_tolerance_takes_fewer_moduli():
    c = brickwork(8, 4, 3, seed=1)
    counts = {}
    for tol in (1e-8, 1e-10, 1e-14):
        t = run_error.tune_precision(c, "int8-crt", np.complex128, tol)
        assert t is not None and t.met and t.bound <= tol
        (d, s), = t.settings.items()
        assert d == 4 and s.options == {"moduli": s.choices["moduli"]}
        counts[tol] = s.options["moduli"]
        # the fewest: one modulus less misses the tolerance (the model's own bound)
        if counts[tol] > MIN_MODULI:
            fewer = run_error.tune_precision(c, "int8-crt", np.complex128, t.bound * 0.999)
            assert fewer.settings[4].options["moduli"] > counts[tol]
    assert counts[1e-8] < counts[1e-10] < counts[1e-14] <= MAX_MODULI
    # methods without an accuracy knob are not tuned
    assert run_error.tune_precision(c, "native", np.complex128, 1e-10) is None


@pytest.mark.parametrize("seed, d, tol", [(1, 4, 1e-10), (2, 3, 1e-8), (3, 5, 1e-12)])
def test_reduced_count_runs_and_its_measured_error_is_within_bound_and_tolerance(seed, d, tol):
    c = brickwork(8, d, 3, seed=seed)
    default = run_error.predicted_bounds(c, ["int8-crt"], np.complex128)["int8-crt"]
    res = _run(c, _table(5.0), tolerance=tol)
    auto = res.metadata["auto"]
    assert set(auto["blocks_per_method"]) == {"int8-crt"}
    setting = auto["precision_settings"]["int8-crt"][str(d)]
    n = setting["options"]["moduli"]
    assert _moduli_ran(res) == {n}  # every product ran the tuned count
    assert f"{n} moduli at d={d}" in setting["why"] and f"tolerance={tol:.3g}" in setting["why"]
    assert all(f"{n} moduli" in b["reason"] and b["options"] == {"moduli": n} for b in res.metadata["blocks"])
    assert res.error.l2_bound <= auto["predicted_bounds"]["int8-crt"] <= tol
    if default < tol:  # the tolerance allowed fewer moduli than the data chose: a larger bound, still within
        assert auto["predicted_bounds"]["int8-crt"] > default
    assert _measured_l2(res, c) <= res.error.l2_bound <= tol
    assert any(f"int8-crt: {len(c)} blocks ran at {n} moduli at d={d}" in note for note in res.error.notes)
    assert res.to_dict(gates=False)["error"]["notes"] == res.error.notes


def test_the_selector_prices_the_reduced_count():
    c = brickwork(8, 4, 3, seed=1)
    # int8-crt measured 15% dearer than native at its default count: not chosen
    table = _table(11.5)
    assert set(_run(c, table).metadata["auto"]["blocks_per_method"]) == {"native"}
    res = _run(c, table, tolerance=1e-8)  # 10 moduli of the default 16: cheaper than native now
    auto = res.metadata["auto"]
    assert set(auto["blocks_per_method"]) == {"int8-crt"}
    rel = auto["precision_settings"]["int8-crt"]["4"]["relative_cost"]
    assert rel < 1 / 1.15
    sel = Selector(table)
    base = sel.gate_ms("int8-crt", 4, 8)
    run_error.apply_tolerance(sel, c, 1e-8)
    assert sel.gate_ms("int8-crt", 4, 8) == pytest.approx(base * rel)
    assert sel.options_for("int8-crt", 4) == {"moduli": auto["precision_settings"]["int8-crt"]["4"]["options"]["moduli"]}
    assert sel.options_for("native", 4) == {}
    assert res.metadata["blocks"][0]["predicted_ms"] == pytest.approx(base * rel)


def test_without_tolerance_the_data_chooses_the_count_as_before():
    c = brickwork(8, 4, 2, seed=4)
    res = _run(c, _table(5.0))
    auto = res.metadata["auto"]
    assert auto["precision_settings"] == {} and res.error.notes == []
    assert all(b["options"] == {} for b in res.metadata["blocks"])
    named = Simulator("int8-crt", device="cpu", plan=None, fuse=None).run(c)
    assert np.array_equal(res.state.to_numpy(), named.state.to_numpy())
    assert _moduli_ran(res) == _moduli_ran(named)


def test_a_tolerance_tighter_than_the_default_takes_more_moduli_or_refuses():
    c = brickwork(8, 4, 3, seed=1)
    default = run_error._probe_choices("int8-crt", 4, np.complex128)[0]["moduli"]
    res = _run(c, _table(5.0), tolerance=1e-15)
    n = res.metadata["auto"]["precision_settings"]["int8-crt"]["4"]["options"]["moduli"]
    assert n > default and res.error.l2_bound <= 1e-15
    assert "native" in res.metadata["auto"]["excluded"]
    with pytest.raises(run_error.ToleranceError, match=r"tolerance=1e-17.*best bound is [0-9.e-]+ \(int8-crt\)"):
        _run(c, _table(5.0), tolerance=1e-17)


@pytest.mark.parametrize("bad", [0, -1e-10, float("nan"), float("inf"), True, "1e-10"])
def test_bad_tolerances_keep_their_errors(bad):
    with pytest.raises(ValueError, match="tolerance must be a finite positive number"):
        Simulator(device="cpu", tolerance=bad)


def test_a_mix_with_a_method_looser_on_other_widths_stays_within_the_tolerance():
    from circuits import Circuit
    from qsim_tc.state import StateVector

    # native prices cheaper on the 6-qubit blocks, int8-crt on the 2-qubit ones; tuned alone
    # (the 6-qubit blocks' moduli cheap), int8-crt's 2-qubit blocks would take the tolerance's
    # whole room and native's 6-qubit blocks would add theirs
    c = Circuit(8, list(brickwork(8, 2, 10, seed=1).gates) + list(brickwork(8, 6, 4, seed=2).gates))
    table = CostTable({"device": "cpu"}, tuple(
        CostRow("cpu", C128, m, 10, ms, overhead_ms=0.0, placement="any")
        for m, ms in (("native", {2: 10.0, 6: 0.1}), ("int8-crt", {2: 5.0, 6: 0.5}))), "given")
    tol = 7e-13
    dt = np.dtype(np.complex128)
    alone = run_error.tune_precision(c, "int8-crt", dt, tol, None, lambda d: table.gate_ms("int8-crt", d, 8))
    nat = run_error._block_steps(c.gates, 8, "native", dt, None, lambda d: run_error._probe_choices("native", d, dt))
    crt = run_error._block_steps(c.gates, 8, "int8-crt", dt, None, lambda d: (dict(alone.settings[d].choices),))
    mixed = [s if len(g.qubits) == 2 else n for g, s, n in zip(c.gates, crt, nat)]
    assert alone.met and run_error._run_bound(mixed) > tol  # what the tuning against the mix prevents
    rng = np.random.default_rng(0)
    v = rng.standard_normal(256) + 1j * rng.standard_normal(256)
    res = Simulator(device="cpu", cost_table=table, plan=None, fuse=None, tolerance=tol).run(
        c, initial_state=StateVector.from_array(v / np.linalg.norm(v), device="cpu"))
    auto = res.metadata["auto"]
    assert auto["blocks_per_method"] == {"int8-crt": 35, "native": 2}
    assert "mixed with native" in auto["precision_settings"]["int8-crt"]["2"]["why"]
    assert res.error.l2_bound <= tol


def test_every_count_a_tolerance_may_choose_keeps_its_measured_error_within_its_bound():
    # the model was validated at the data-chosen counts (16-20); a tolerance may pick any
    c = brickwork(7, 3, 3, seed=6)
    hi, lo = simulate_dd(c, device="cpu").to_numpy()
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        res = Simulator("int8-crt", device="cpu", plan=None, fuse=None, moduli=n).run(c)
        assert _moduli_ran(res) == {n}
        l2 = float(np.linalg.norm((res.state.to_numpy() - hi) - lo))
        assert l2 <= res.error.l2_bound, n
        assert float(np.abs((res.state.to_numpy() - hi) - lo).max()) <= res.error.max_abs_bound, n


def test_cli_tolerance_explains_the_moduli_that_ran(monkeypatch, capsys):
    from qsim_tc.cli import main

    monkeypatch.setattr("qsim_tc.simulator.table_for", lambda *a, **k: _table(5.0))
    assert main(["brickwork", "--qubits", "8", "--gate-qubits", "4", "--depth", "3", "--device", "cpu",
                 "--plan", "none", "--fuse", "none", "--tolerance", "1e-10", "--explain"]) == 0
    text = capsys.readouterr().out
    n = run_error.tune_precision(brickwork(8, 4, 3, seed=0), "int8-crt", np.complex128, 1e-10).settings[4]
    n = n.options["moduli"]
    assert f"int8-crt[moduli={n}]" in text
    assert f"precision: int8-crt: 5 blocks ran at {n} moduli at d=4" in text
    rc = main(["brickwork", "--qubits", "4", "--gate-qubits", "2", "--depth", "1", "--device", "cpu",
               "--backend", "native", "--tolerance", "1e-10"])
    assert rc == 2 and "--tolerance applies to --backend auto; backend 'native'" in capsys.readouterr().err


def test_methods_whose_bounds_rank_differently_by_width_are_kept_only_where_any_mix_meets_it():
    """complex64: native32's bound is the tightest on 2-qubit blocks, halfhalf's on 6-qubit ones;
    with the tolerance just above both totals, halfhalf on the 2-qubit blocks and native32 on the
    6-qubit ones would exceed it, so the loosest overall (native32) goes."""
    from circuits import Circuit

    c = Circuit(8, list(brickwork(8, 2, 10, seed=1).gates) + list(brickwork(8, 6, 4, seed=2).gates))
    dt = np.dtype(np.complex64)
    alone = run_error.predicted_bounds(c, ["native32", "halfhalf"], dt)
    steps = {m: run_error._block_steps(c.gates, 8, m, dt, None, lambda d, m=m: run_error._probe_choices(m, d, dt))
             for m in alone}
    worst_mix = [h if len(g.qubits) == 2 else n for g, h, n in zip(c.gates, steps["halfhalf"], steps["native32"])]
    tol = 1.01 * max(alone.values())
    assert alone["native32"] > alone["halfhalf"] and run_error._run_bound(worst_mix) > tol
    table = CostTable({"device": "cpu"}, tuple(
        CostRow("cpu", "complex64", m, 10, {2: 1.0, 6: 1.0}, overhead_ms=0.0, placement="any")
        for m in ("native32", "halfhalf")), "given")
    sel = Selector(table, "single", candidates=["native32", "halfhalf"])
    run_error.apply_tolerance(sel, c, tol)
    assert "native32" in sel.excluded and "mixed block by block with halfhalf" in sel.excluded["native32"]
    assert "halfhalf" not in sel.excluded
    # a tolerance both mixes meet keeps both
    sel = Selector(table, "single", candidates=["native32", "halfhalf"])
    run_error.apply_tolerance(sel, c, 1.01 * run_error._run_bound(worst_mix))
    assert not sel.excluded
