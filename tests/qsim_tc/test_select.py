"""backend="auto": the choice of method per block (qsim_tc.plan.select), the accuracy guard
(qsim_tc.plan.guard) and the Simulator's auto mode on the CPU."""

import warnings

import numpy as np
import pytest

import gemm
from circuits import brickwork
from qsim_tc import Simulator
from qsim_tc.plan import guard
from qsim_tc.plan.costs import CostRow, CostTable, shipped_table
from qsim_tc.plan.select import SWITCH_MARGIN, Selector, qualifying_methods


def _table(rows) -> CostTable:
    """A synthetic CPU table: rows as (method, dtype, {d: ms}, placement)."""
    return CostTable({"device": "cpu"}, tuple(
        CostRow("cpu", dt, m, 10, ms, overhead_ms=0.0, placement=pl) for m, dt, ms, pl in rows), "given")


C128, C64 = "complex128", "complex64"


def test_qualifying_methods_follow_the_precision_class():
    double, single = qualifying_methods("double"), qualifying_methods("single")
    assert "native" in double and "int8-auto" in double and "native32" not in double
    assert {"native32", "tf32tf32", "halfhalf", "tc-auto"} <= set(single)
    for name in ("tf32", "fp16", "markidis", "dd"):  # uncorrected, or the reference: never candidates
        assert name not in double and name not in single
    assert all(gemm.get_method(m).precision == "fp64" for m in double)
    with pytest.raises(ValueError, match="precision must be one of 'double', 'single', got 'half'"):
        qualifying_methods("half")


def test_picks_the_fastest_qualifying_method_per_width_and_placement():
    t = _table([("native", C128, {2: 1.0, 10: 100.0}, "any"),
                ("int8-auto", C128, {2: 50.0, 10: 40.0}, "any"),
                ("int8-auto", C128, {2: 50.0, 10: 400.0}, "top"),
                ("tf32", C64, {2: 0.001, 10: 0.001}, "any"),  # uncorrected and fastest: never chosen
                ("tc-auto", C64, {2: 9.0, 10: 10.0}, "any"),
                ("native32", C64, {2: 0.5, 10: 80.0}, "any")])
    sel = Selector(t, "double")
    assert sel.candidates == ["native", "int8-auto"]
    assert sel.choose(2, 10).method == "native"
    big = sel.choose(10, 10, "scattered")  # no scattered row: the "any" row stands in
    assert big.method == "int8-auto" and big.predicted_ms == pytest.approx(40.0)
    assert big.reason.startswith("fastest predicted; next native 100 ms (2.50x)")
    assert sel.choose(10, 10, "top").method == "native"  # a placement row overrides
    single = Selector(t, "single")
    assert single.choose(2, 10).method == "native32" and single.choose(10, 10).method == "tc-auto"
    assert single.dtype == np.complex64 and sel.dtype == np.complex128


def test_native_stays_within_the_switch_margin():
    t = _table([("native", C128, {4: 1.0}, "any"), ("native3m", C128, {4: 1.0 / (1 + SWITCH_MARGIN / 2)}, "any")])
    assert Selector(t, "double").choose(4, 10).method == "native"
    t = _table([("native", C128, {4: 1.0}, "any"), ("native3m", C128, {4: 0.5}, "any")])
    assert Selector(t, "double").choose(4, 10).method == "native3m"


def test_exclusion_falls_back_to_the_next_method():
    t = _table([("native", C128, {6: 10.0}, "any"), ("native3m", C128, {6: 2.0}, "any"),
                ("int8-auto", C128, {6: 1.0}, "any")])
    sel = Selector(t, "double")
    assert sel.choose(6, 10).method == "int8-auto"
    assert sel.choose(6, 10, without=("int8-auto",)).method == "native3m"
    sel.exclude("int8-auto", "guard fired")
    sel.exclude("native3m", "guard fired")
    ch = sel.choose(6, 10)
    assert ch.method == "native" and ch.reason == "the only candidate left"


def test_selector_rejects_tables_and_candidates_that_cannot_serve():
    t = _table([("native32", C64, {2: 1.0}, "any")])
    with pytest.raises(ValueError, match="cost table given has no row for any double-precision method"):
        Selector(t, "double")
    with pytest.raises(ValueError, match="candidate 'native32' is of precision class 'fp32'"):
        Selector(t, "double", candidates=["native32"])


def test_the_shipped_cpu_table_picks_native_for_every_block():
    table = shipped_table("cpu")
    for precision, want in (("double", "native"), ("single", "native32")):
        sel = Selector(table, precision)
        assert len(sel.candidates) > 1  # the emulated methods are measured there, and lose
        for d in range(1, 13):
            for placement in ("bottom", "middle", "top", "scattered", "any"):
                assert sel.choose(d, 24, placement).method == want, (precision, d, placement)


def test_guard_reads_the_reports_and_the_norm():
    ok = guard.check(None, [], 1.0, 1.0 + 1e-15, guard.norm_bound("double", 4))
    assert ok.ok and ok.norm_change == pytest.approx(1e-15, abs=2e-16)
    drift = guard.check(None, [], 1.0, 1.0 + 1e-9, guard.norm_bound("double", 4))
    assert not drift.ok and drift.why.startswith("norm changed by 1e-09")
    assert guard.check(None, [], 1.0, 1.0 + 1e-9, guard.norm_bound("double", 4, tolerance=1e-6)).ok

    class R:
        method = "m"
        choices = {"precision": "fp16", "fp16_fits": False}

    assert "outside FP16's range" in guard.check(R(), [], 1.0, 1.0, 1e-6).why
    R.choices = {"fallback": True}
    fell = guard.check(R(), [], 1.0, 1.0, 1e-6)
    assert fell.ok and fell.notes == ["m fell back to native for this block"]
    R.choices = {"target_met": False}
    assert not guard.check(R(), [], 1.0, 1.0, 1e-6).ok
    from gemm.tcec import FP16RangeWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("method 'halfhalf': 0.5 of a below; lose", FP16RangeWarning)
    assert "FP16RangeWarning: method 'halfhalf': 0.5 of a below" in guard.check(None, caught, 1.0, 1.0, 1e-6).why


def test_auto_equals_native_on_the_cpu():
    c = brickwork(12, 3, 6, seed=1)
    auto = Simulator(device="cpu", plan=None).run(c)  # gate by gate: one block per gate
    native = Simulator("native", device="cpu").run(c)
    assert auto.backend == "auto" and auto.state.dtype == np.complex128
    assert np.abs(auto.state.to_numpy() - native.state.to_numpy()).max() <= 1e-13
    blocks = auto.metadata["blocks"]
    assert len(blocks) == len(c) and {b["method"] for b in blocks} == {"native"}
    assert {"index", "d", "placement", "method", "predicted_ms", "measured_ms", "reason", "guard", "redone"} <= set(
        blocks[0])
    assert auto.metadata["auto"]["blocks_per_method"] == {"native": len(c)}
    single = Simulator(device="cpu", precision="single").run(c)
    assert single.state.dtype == np.complex64
    assert np.abs(single.state.to_numpy() - native.state.to_numpy()).max() < 1e-5


def test_fixed_variants_are_no_auto_candidates_beside_their_chooser():
    from qsim_tc.plan.select import auto_candidates

    single, double = auto_candidates("single"), auto_candidates("double")
    assert "tc-auto" in single and not {"halfhalf", "tf32tf32"} & set(single)
    assert "int8-auto" in double and "int8" not in double and "native" in double
    t = _table([("native32", C64, {1: 10.0}, "any"), ("halfhalf", C64, {1: 1.0}, "any")])
    assert Selector(t, "single").candidates == ["native32"]


def test_guard_redoes_a_block_with_the_next_method(monkeypatch):
    """A table that makes halfhalf the fastest (made a candidate for the test); a state whose
    amplitudes are far below FP16's range after scaling makes its guard fire, and the block is
    redone from its kept input."""
    monkeypatch.setattr("qsim_tc.plan.select.CHOSEN_BY", {})
    t = _table([("native32", C64, {1: 10.0}, "any"), ("halfhalf", C64, {1: 1.0}, "any")])
    n = 8
    amps = np.full(1 << n, 1e-30, dtype=np.complex128)
    amps[0] = 1.0
    amps /= np.linalg.norm(amps)
    from qsim_tc import StateVector

    init = StateVector.from_array(amps.astype(np.complex64), device="cpu")
    c = brickwork(n, 2, 1, seed=3)
    res = Simulator(device="cpu", precision="single", cost_table=t, plan=None).run(c, initial_state=init)
    blocks = res.metadata["blocks"]
    assert blocks[0]["redone"] and blocks[0]["redone"][0]["method"] == "halfhalf"
    assert blocks[0]["method"] == "native32" and "halfhalf" in res.metadata["auto"]["excluded"]
    ref = Simulator("native32", device="cpu").run(c, initial_state=init)
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6


def test_auto_argument_errors():
    with pytest.raises(TypeError, match="backend='auto' takes no method options"):
        Simulator(threshold=1.0)
    with pytest.raises(ValueError, match="precision='single' does not match backend 'native'"):
        Simulator("native", precision="single")
    with pytest.raises(ValueError, match="tolerance must be a positive number, got -1"):
        Simulator(tolerance=-1)
    with pytest.raises(ValueError, match="precision must be one of"):
        Simulator(precision="half")
    assert Simulator("native32").precision == "single"


def test_guarded_blocks_in_a_row_measure_the_norm_once_each(monkeypatch):
    """Consecutive guarded blocks take their input's norm from the block before (nothing changed
    the state in between): k blocks, k + 1 norms; the results are those of the method alone."""
    from qsim_tc import StateVector

    t = _table([("native32", C64, {1: 10.0}, "any"), ("tc-auto", C64, {1: 1.0}, "any")])
    c = brickwork(8, 2, 2, seed=4)
    calls = []
    norm = StateVector.norm
    monkeypatch.setattr(StateVector, "norm", lambda self: calls.append(1) or norm(self))
    res = Simulator(device="cpu", precision="single", cost_table=t, plan=None, fuse=None).run(c)
    blocks = res.metadata["blocks"]
    assert {b["method"] for b in blocks} == {"tc-auto"} and all(b["guard"]["ok"] for b in blocks)
    assert len(calls) == len(blocks) + 1
    ref = Simulator("tc-auto", device="cpu", plan=None, fuse=None).run(c)
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6


def test_norm_is_the_two_norm_for_both_dtypes():
    from qsim_tc import StateVector

    rng = np.random.default_rng(1)
    a = rng.normal(size=1 << 10) + 1j * rng.normal(size=1 << 10)
    for dt, rel in ((np.complex128, 1e-14), (np.complex64, 1e-6)):
        want = np.linalg.norm(a.astype(dt).astype(np.complex128))
        assert abs(StateVector.from_array(a.astype(dt), device="cpu").norm() - want) <= rel * want
