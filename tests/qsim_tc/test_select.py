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
ANY_ = "any"


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


def _far_below_fp16(n):
    """A complex64 state whose amplitudes but one lie far below FP16's range after scaling."""
    from qsim_tc import StateVector

    amps = np.full(1 << n, 1e-30, dtype=np.complex128)
    amps[0] = 1.0
    amps /= np.linalg.norm(amps)
    return StateVector.from_array(amps.astype(np.complex64), device="cpu")


def test_guard_redoes_a_block_with_the_next_method(monkeypatch):
    """A table that makes halfhalf the fastest (made a candidate for the test); a state whose
    amplitudes are far below FP16's range after scaling makes its guard fire. Guarded per block
    (an in_place run), the block is redone from its kept input."""
    monkeypatch.setattr("qsim_tc.plan.select.CHOSEN_BY", {})
    t = _table([("native32", C64, {1: 10.0}, "any"), ("halfhalf", C64, {1: 1.0}, "any")])
    c = brickwork(8, 2, 1, seed=3)
    ref = Simulator("native32", device="cpu").run(c, initial_state=_far_below_fp16(8))
    res = Simulator(device="cpu", precision="single", cost_table=t, plan=None).run(
        c, initial_state=_far_below_fp16(8), in_place=True)
    blocks = res.metadata["blocks"]
    assert res.metadata["auto"]["guard"]["mode"] == "per-block" and not res.metadata["auto"]["guard"]["restarts"]
    assert blocks[0]["redone"] and blocks[0]["redone"][0]["method"] == "halfhalf"
    assert blocks[0]["method"] == "native32" and "halfhalf" in res.metadata["auto"]["excluded"]
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6


def test_guard_run_mode_starts_again_without_a_failing_method(monkeypatch):
    """The default run mode keeps no copy: halfhalf's statistics fail on the first block, the run
    starts again from its (unchanged) initial state without halfhalf, and says so."""
    monkeypatch.setattr("qsim_tc.plan.select.CHOSEN_BY", {})
    t = _table([("native32", C64, {1: 10.0}, "any"), ("halfhalf", C64, {1: 1.0}, "any")])
    c = brickwork(8, 2, 1, seed=3)
    init = _far_below_fp16(8)
    before = init.to_numpy().copy()
    res = Simulator(device="cpu", precision="single", cost_table=t, plan=None).run(c, initial_state=init)
    g = res.metadata["auto"]["guard"]
    assert g["mode"] == "run" and len(g["restarts"]) == 1
    assert g["restarts"][0]["block"] == 0 and g["restarts"][0]["method"] == "halfhalf"
    assert "FP16" in g["restarts"][0]["why"]
    assert {b["method"] for b in res.metadata["blocks"]} == {"native32"} and len(res.metadata["blocks"]) == len(c)
    assert "halfhalf" in res.metadata["auto"]["excluded"]
    assert np.array_equal(init.to_numpy(), before)  # the initial state is not changed
    ref = Simulator("native32", device="cpu").run(c, initial_state=init)
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6


def test_guard_run_norm_failure_runs_again_per_block(monkeypatch):
    """A method whose statistics pass but whose results lose norm: the run's one norm check
    fails, the run starts again guarded per block, which finds the block and routes it."""
    import gemm.tcec.method as tm

    t = _table([("native32", C64, {1: 10.0}, "any"), ("tc-auto", C64, {1: 1.0}, "any")])
    run = tm.TCAuto._run
    monkeypatch.setattr(tm.TCAuto, "_run", lambda self, *a, **k: run(self, *a, **k) * np.float32(0.99))
    c = brickwork(8, 2, 2, seed=4)
    res = Simulator(device="cpu", precision="single", cost_table=t, plan=None, fuse=None).run(c)
    g = res.metadata["auto"]["guard"]
    assert g["mode"] == "per-block" and len(g["restarts"]) == 1 and g["restarts"][0]["block"] is None
    assert "run's norm changed" in g["restarts"][0]["why"]
    blocks = res.metadata["blocks"]
    assert blocks[0]["redone"][0]["method"] == "tc-auto" and {b["method"] for b in blocks} == {"native32"}
    ref = Simulator("native32", device="cpu", plan=None, fuse=None).run(c)
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6


def test_tf32_fits_bounds():
    from gemm.tcec.split import exponent_range, tf32_fits

    one = exponent_range(np.array([1.0, 0.5], np.float32))
    tiny = exponent_range(np.array([2.0**-100], np.float32))
    huge = exponent_range(np.array([2.0**100], np.float32))
    zero = exponent_range(np.zeros(2, np.float32))
    nan = exponent_range(np.array([np.nan, 1.0], np.float32))
    assert tf32_fits(one, one, 1024) and tf32_fits(zero, tiny, 4) and tf32_fits(nan, huge, 4)
    assert not tf32_fits(tiny, one, 4)  # lo parts below FP32's normal range lose accuracy
    assert not tf32_fits(huge, huge, 4) and tf32_fits(huge, one, 1024)  # sums that could overflow


def test_auto_argument_errors():
    with pytest.raises(TypeError, match="backend='auto' takes no method options"):
        Simulator(threshold=1.0)
    with pytest.raises(ValueError, match="precision='single' does not match backend 'native'"):
        Simulator("native", precision="single")
    with pytest.raises(ValueError, match="tolerance must be a finite positive number, got -1"):
        Simulator(tolerance=-1)
    with pytest.raises(ValueError, match="precision must be one of"):
        Simulator(precision="half")
    assert Simulator("native32").precision == "single"


def test_guarded_blocks_measure_the_norm_once_a_run_or_once_each(monkeypatch):
    """The run mode measures one norm (the end state's; |0...0> has norm 1) and copies nothing;
    per block, consecutive guarded blocks take their input's norm from the block before (k
    blocks, k + 1 norms). The results are those of the method alone."""
    from qsim_tc import StateVector

    t = _table([("native32", C64, {1: 10.0}, "any"), ("tc-auto", C64, {1: 1.0}, "any")])
    c = brickwork(8, 2, 2, seed=4)
    calls, copies = [], []
    norm, copy = StateVector.norm, StateVector.copy
    monkeypatch.setattr(StateVector, "norm", lambda self: calls.append(1) or norm(self))
    monkeypatch.setattr(StateVector, "copy", lambda self: copies.append(1) or copy(self))
    sim = Simulator(device="cpu", precision="single", cost_table=t, plan=None, fuse=None)
    res = sim.run(c)
    blocks = res.metadata["blocks"]
    assert {b["method"] for b in blocks} == {"tc-auto"} and all(b["guard"]["ok"] for b in blocks)
    g = res.metadata["auto"]["guard"]
    assert len(calls) == 1 and not copies and g["mode"] == "run" and not g["restarts"]
    assert 0 <= g["run_norm_change"] <= g["run_norm_bound"]
    ref = Simulator("tc-auto", device="cpu", plan=None, fuse=None).run(c)
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6
    calls.clear()
    start = StateVector(8, dtype=np.complex64, device="cpu")
    per_block = sim.run(c, initial_state=start, in_place=True)
    assert per_block.metadata["auto"]["guard"]["mode"] == "per-block"
    assert len(calls) == len(blocks) + 1 and len(copies) == len(blocks)
    assert np.abs(per_block.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6


def test_norm_is_the_two_norm_for_both_dtypes():
    from qsim_tc import StateVector

    rng = np.random.default_rng(1)
    a = rng.normal(size=1 << 10) + 1j * rng.normal(size=1 << 10)
    for dt, rel in ((np.complex128, 1e-14), (np.complex64, 1e-6)):
        want = np.linalg.norm(a.astype(dt).astype(np.complex128))
        # copy=False: the state takes the (unnormalized) amplitudes over as they are
        assert abs(StateVector.from_array(a.astype(dt), copy=False, device="cpu").norm() - want) <= rel * want


@pytest.mark.gpu
def test_gpu_guard_run_mode_reads_one_norm_and_matches_the_method(monkeypatch, cp):
    """On the GPU: tc-auto blocks (d = 6, GEMM paths) under the run-mode guard copy nothing, read
    one norm, and give tc-auto's own amplitudes; a failing norm starts the run again per block."""
    import gemm.tcec.method as tm
    from qsim_tc import StateVector

    t = CostTable({"device": "gpu"}, (CostRow("gpu", C64, "native32", 16, {1: 10.0}, overhead_ms=0.0),
                                      CostRow("gpu", C64, "tc-auto", 16, {1: 1.0}, overhead_ms=0.0)), "given")
    c = brickwork(16, 6, 2, seed=5)
    calls, copies = [], []
    norm, copy = StateVector.norm, StateVector.copy
    monkeypatch.setattr(StateVector, "norm", lambda self: calls.append(1) or norm(self))
    monkeypatch.setattr(StateVector, "copy", lambda self: copies.append(1) or copy(self))
    res = Simulator(device="gpu", precision="single", cost_table=t, plan=None, fuse=None).run(c)
    assert {b["method"] for b in res.metadata["blocks"]} == {"tc-auto"} and len(calls) == 1 and not copies
    ref = Simulator("tc-auto", device="gpu", plan=None, fuse=None).run(c)
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() < 1e-6
    run = tm.TCAuto._run
    monkeypatch.setattr(tm.TCAuto, "_run", lambda self, *a, **k: run(self, *a, **k) * np.float32(0.99))
    bad = Simulator(device="gpu", precision="single", cost_table=t, plan=None, fuse=None).run(c)
    g = bad.metadata["auto"]["guard"]
    assert g["mode"] == "per-block" and g["restarts"][0]["block"] is None
    assert {b["method"] for b in bad.metadata["blocks"]} == {"native32"}
    native = Simulator("native32", device="gpu", plan=None, fuse=None).run(c)
    assert np.abs(bad.state.to_numpy() - native.state.to_numpy()).max() < 1e-6


def test_choice_counts_the_next_block_where_layouts_differ():
    """Within the switch margin the first candidate keeps a block; priced with the next block
    (which lands cheaper after the other candidate's layout), the other one takes it."""
    t = _table([("native32", C64, {8: 10.7}, "middle"), ("native32", C64, {8: 10.0}, "top"),
                ("tc-auto", C64, {8: 10.5}, "middle"), ("tc-auto", C64, {8: 6.3}, "top")])
    sel = Selector(t, "single")
    assert sel.choose(8, 10, "middle").method == "native32"  # 10.7 <= 10.5 * (1 + SWITCH_MARGIN)
    then = {"native32": (8, "middle"), "tc-auto": (8, "top")}
    ch = sel.choose(8, 10, "middle", then=then)
    assert ch.method == "tc-auto" and ch.predicted_ms == pytest.approx(10.5)  # its own cost only
    assert "with the next block" in ch.reason
    assert sel.choose(8, 10, "middle", then={"native32": (8, "top"), "tc-auto": (8, "top")}).method == "native32"


def test_shipped_h200_table_takes_int8_crt_where_it_wins():
    # measured on an H200: int8-crt 110-120 ms at d = 12 against native's 195-214, and native is
    # cheaper at d <= 8 (the table of an overhead-inflated calibration had never chosen int8-crt)
    sel = Selector(shipped_table("h200"), "double")
    for placement in ("bottom", "middle", "top", "scattered"):
        assert sel.choose(12, 28, placement).method == "int8-crt"
        assert sel.choose(8, 28, placement).method in ("native", "native3m")


def test_the_next_block_is_priced_with_its_cheapest_method_not_the_candidate():
    """tc-auto leaves the next block at the bottom, where native32 (not tc-auto) is cheapest: the
    next block runs with native32 there, so tc-auto's lookahead is 0.2 + 5, not 0.2 + 40."""
    t = _table([("native32", C64, {8: 10.0}, "middle"), ("native32", C64, {8: 20.0}, "top"),
                ("native32", C64, {8: 5.0}, "bottom"),
                ("tc-auto", C64, {8: 10.2}, "middle"), ("tc-auto", C64, {8: 20.0}, "top"),
                ("tc-auto", C64, {8: 40.0}, "bottom")])
    sel = Selector(t, "single")
    then = {"native32": (8, "top"), "tc-auto": (8, "bottom")}
    ch = sel.choose(8, 10, "middle", then=then)
    assert ch.method == "tc-auto" and ch.predicted_ms == pytest.approx(10.2)
    assert ch.costs == {"native32": pytest.approx(10.0), "tc-auto": pytest.approx(10.2)}
    assert "next native32 30 ms" in ch.reason  # 10 + min(20, 20)
    assert "(1.97x)" in ch.reason  # against 10.2 + min(5, 40) = 15.2
    # the width and placement of the next block are read per candidate
    assert sel.choose(8, 10, "middle", then={"native32": (8, "bottom"), "tc-auto": (8, "top")}).method == "native32"
    # a candidate absent from ``then`` adds nothing for the next block
    ch = sel.choose(8, 10, "middle", then={"native32": (8, "top")})
    assert ch.method == "tc-auto" and "next native32 30 ms" in ch.reason


def test_the_next_blocks_cheapest_method_is_an_allowed_one():
    """An excluded method prices neither this block nor the next one."""
    t = _table([("native32", C64, {8: 10.0}, "middle"), ("native32", C64, {8: 20.0}, "top"),
                ("native32", C64, {8: 30.0}, "bottom"),
                ("tc-auto", C64, {8: 10.2}, "middle"), ("tc-auto", C64, {8: 20.0}, "top"),
                ("tc-auto", C64, {8: 40.0}, "bottom"),
                ("halfhalf", C64, {8: 50.0}, "middle"), ("halfhalf", C64, {8: 50.0}, "top"),
                ("halfhalf", C64, {8: 1.0}, "bottom")])
    sel = Selector(t, "single", candidates=["native32", "tc-auto", "halfhalf"])
    then = {"native32": (8, "top"), "tc-auto": (8, "bottom"), "halfhalf": (8, "top")}
    assert sel.choose(8, 10, "middle", then=then).method == "tc-auto"  # 10.2 + 1 (halfhalf next)
    sel.exclude("halfhalf", "guard fired")
    ch = sel.choose(8, 10, "middle", then=then)
    assert ch.method == "native32" and set(ch.costs) == {"native32", "tc-auto"}  # 30 against 10.2 + 30
    assert sel.choose(8, 10, "middle", then=then, without=("native32",)).method == "tc-auto"


def test_the_switch_margin_is_measured_against_the_first_candidate():
    t = _table([("native32", C64, {4: 1.0 + SWITCH_MARGIN}, ANY_), ("tc-auto", C64, {4: 1.0}, ANY_)])
    assert Selector(t, "single").choose(4, 10).method == "native32"  # exactly at the margin: stays
    t = _table([("native32", C64, {4: 1.0 + 2 * SWITCH_MARGIN}, ANY_), ("tc-auto", C64, {4: 1.0}, ANY_)])
    assert Selector(t, "single").choose(4, 10).method == "tc-auto"
    t = _table([("native32", C64, {4: 1.0}, ANY_), ("tc-auto", C64, {4: 1.0}, ANY_)])
    assert Selector(t, "single", candidates=["tc-auto", "native32"]).choose(4, 10).method == "tc-auto"
    # a tie between two non-first candidates goes to the one that needs no guard
    t = _table([("int8-auto", C128, {4: 9.0}, ANY_), ("native3m", C128, {4: 1.0}, ANY_),
                ("int8-crt", C128, {4: 1.0}, ANY_)])
    assert Selector(t, "double", candidates=["int8-auto", "int8-crt", "native3m"]).choose(4, 10).method == "native3m"
