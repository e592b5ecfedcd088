"""Per-device calibration (qsim_tc.calibrate): measuring, keying, the cache, fallbacks, and
the CLI subcommands around it."""

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest

import gemm
from circuits import brickwork
from qsim_tc import Simulator
from qsim_tc import calibrate as cal
from qsim_tc.cli import main
from qsim_tc.plan.costs import PLACEMENTS, CostRow, CostTable, CostTableError, lookup, shipped_names, shipped_table
from qsim_tc.plan.select import Selector


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QSIM_TC_CACHE", str(tmp_path))
    cal.forget()
    yield tmp_path
    cal.forget()


def _tiny(device="cpu", **kw):
    """A calibration small enough for the CPU suite: native on 8 qubits, d <= 3."""
    return cal.calibrate(device, precisions=("double",), methods=["native"], n_qubits=8, max_gate_qubits=3,
                         repeats=1, budget_s=5.0, **kw)


def test_calibration_measures_every_placement_and_round_trips(cache):
    t0 = time.perf_counter()
    table = _tiny()
    assert time.perf_counter() - t0 < 10
    assert table.origin == "measured" and table.key == cal.device_key(gemm.resolve_device("cpu"))
    assert {r.placement for r in table.rows} == set(PLACEMENTS)
    for r in table.rows:
        assert r.backend == "native" and r.n_qubits == 8 and r.measured == (1, 2, 3) or r.placement == "middle"
        assert all(v > 0 for v in r.ms.values()) and r.overhead_ms > 0
    again = CostTable.from_json(table.to_json())
    assert again.rows == table.rows and again.key == table.key
    path = cal.store(table)
    assert path.parent == cache and path.name.startswith("costs-cpu-")
    assert cal.load_cached(table.key).rows == table.rows


def test_keying_reuse_and_fallback(cache):
    dev = gemm.resolve_device("cpu")
    key = cal.device_key(dev)
    # no cached table: a CPU never calibrates on its own, it falls back to the shipped table
    msgs = []
    fallback = cal.table_for(dev, "double", message=msgs.append)
    assert fallback.origin == "shipped:cpu" and "no table measured on this CPU" in fallback.note and not msgs
    cal.store(_tiny())
    cal.forget()
    used = cal.table_for(dev, "double")
    assert used.origin.startswith("cache:") and used.methods() == ["native"]
    # another key (a driver or library update) does not read this file
    other = dict(key, numpy="0.0")
    assert cal.cache_path(other) != cal.cache_path(key) and cal.load_cached(other) is None
    # a GPU without a shipped table of its own gets the nearest, and is told so
    h = cal.nearest_shipped({"device": "gpu", "gpu": "NVIDIA A100-SXM4-40GB"})
    assert h.origin.startswith("shipped:h") and "no shipped table for NVIDIA A100-SXM4-40GB" in h.note
    assert cal.nearest_shipped({"device": "gpu", "gpu": "NVIDIA H200"}).origin == "shipped:h200"
    assert set(shipped_names()) >= {"cpu", "h200"}
    with pytest.raises(ValueError, match="no shipped cost table 'tpu'; shipped: cpu"):
        shipped_table("tpu")


def test_corrupt_file_says_so_and_recalibrates(cache):
    dev = gemm.resolve_device("cpu")
    path = cal.cache_path(cal.device_key(dev))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    with pytest.raises(CostTableError, match=r"cost table .*costs-cpu-.*\.json is unreadable: not JSON"):
        cal.load_cached(cal.device_key(dev))
    msgs = []
    shipped = cal.table_for(dev, "double", message=msgs.append)
    assert shipped.origin == "shipped:cpu" and msgs[0].endswith("; using a shipped table (qsim-tc calibrate replaces it)")
    msgs.clear()
    cal.forget()
    orig = cal.calibrate

    def quick(device, **kw):
        return orig(device, methods=["native"], n_qubits=8, max_gate_qubits=2, repeats=1, budget_s=3.0,
                    precisions=kw.get("precisions", ("double",)))

    cal.calibrate = quick
    try:
        fresh = cal.table_for(dev, "double", calibrate_missing=True, message=msgs.append)
    finally:
        cal.calibrate = orig
    assert msgs[0].endswith("; recalibrating") and "calibrating once" in msgs[1]
    assert fresh.origin == f"cache:{path}" and json.loads(path.read_text())["format"] == 1
    path.write_text(json.dumps({"format": 99, "rows": []}))
    with pytest.raises(CostTableError, match="format 99, expected 1"):
        cal.load_cached(cal.device_key(dev))


def _row(backend, dtype, placement, ms, n=28, measured=None):
    from qsim_tc.plan.costs import CostRow

    return CostRow("gpu", dtype, backend, n, dict(ms), placement=placement, source="test",
                   measured=tuple(sorted(ms)) if measured is None else measured)


def test_complete_borrows_the_unmeasured_widths_and_methods_scaled():
    ref = CostTable({"device": "gpu"}, (
        _row("native", "complex128", "bottom", {1: 3.0, 2: 3.0, 4: 4.0, 8: 10.0, 12: 160.0}),
        _row("native", "complex128", "middle", {1: 4.0, 12: 200.0}),
        _row("int8-crt", "complex128", "bottom", {8: 30.0, 10: 40.0}),
        _row("native32", "complex64", "bottom", {1: 1.5, 12: 80.0})), origin="shipped:h100")
    # measured at 27 qubits (half the state of ref's 28), d = 1 and 2, twice as slow as ref
    fresh = CostTable({"device": "gpu"}, (
        _row("native", "complex128", "bottom", {1: 3.0, 2: 3.0}, n=27),
        _row("native", "complex128", "top", {1: 5.0}, n=27)), origin="measured")
    out = cal.complete(fresh, ref, precisions=("double",))
    bottom = next(r for r in out.rows if r.backend == "native" and r.placement == "bottom")
    assert bottom.measured == (1, 2) and bottom.ms[1] == 3.0
    assert bottom.ms[4] == pytest.approx(4.0) and bottom.ms[12] == pytest.approx(160.0)  # x 2 x 2^-1
    assert "widths 4,8,12 from the h100 table x 2" in bottom.source
    assert bottom.gate_ms(12) == pytest.approx(160.0 + bottom.overhead_ms)  # was 3 * 4^10 before
    # a placement that ref lacks (top) has no reference row: left as measured
    top = next(r for r in out.rows if r.placement == "top")
    assert top.ms == {1: 5.0}
    # int8-crt (a double candidate) was not measured: ref's rows, scaled by native's ratio
    crt = [r for r in out.rows if r.backend == "int8-crt"]
    assert len(crt) == 1 and crt[0].n_qubits == 27 and crt[0].ms == {8: pytest.approx(30.0), 10: pytest.approx(40.0)}
    assert crt[0].source.startswith("not measured: the h100 table x 2")
    # native32 is not a double candidate; precisions=() adds no method (another GPU model's table)
    assert "native32" not in out.methods()
    assert cal.complete(fresh, ref, precisions=()).methods() == ["native"]
    # nothing missing: the same table back
    assert cal.complete(out, ref, precisions=("double",)) is out


def test_brief_calibration_is_completed_from_the_shipped_table(cache, monkeypatch):
    """The first-use calibration (calibrate_missing) that measured d = 1 only gets the other
    widths from the shipped table, not 4x per qubit above d = 1."""
    dev = gemm.resolve_device("cpu")
    orig = cal.calibrate
    monkeypatch.setattr(cal, "calibrate", lambda device, **kw: orig(
        device, methods=["native"], n_qubits=8, max_gate_qubits=1, repeats=1, budget_s=3.0,
        precisions=kw.get("precisions", ("double",))))
    table = cal.table_for(dev, "double", calibrate_missing=True, message=lambda text: None)
    shipped = shipped_table("cpu")
    for r in table.rows:
        ref = shipped.row("native", r.placement)
        assert r.measured == (1,) and set(r.ms) == {1} | set(ref.ms), r
        assert r.gate_ms(10) < r.gate_ms(1) * 4.0 ** 9 / 10  # read from the table, not 4x per qubit
    assert table.origin.startswith("cache:") and cal.load_cached(table.key).rows == table.rows


def test_calibrate_argument_errors():
    with pytest.raises(ValueError, match="placements must be some of bottom, middle, top, scattered"):
        cal.calibrate("cpu", placements=("left",))
    with pytest.raises(ValueError, match="repeats must be an int >= 1, got 0"):
        cal.calibrate("cpu", repeats=0)
    with pytest.raises(ValueError, match=r"methods \['native32'\] are not of precision double"):
        cal.calibrate("cpu", precisions=("double",), methods=["native32"])


def test_simulator_uses_a_given_table_for_fusion_and_choice(cache):
    table = _tiny()
    c = brickwork(8, 2, 4, seed=2)
    res = Simulator(device="cpu", fuse="auto", cost_table=table, plan=None).run(c)  # the gate path
    assert "measured" in res.metadata["auto"]["cost_table"]
    assert "auto/double: native from measured" in res.metadata["fusion_choice"]["cost_row"]
    ref = Simulator("native", device="cpu").run(c)
    assert np.abs(res.state.to_numpy() - ref.state.to_numpy()).max() <= 1e-13


def test_cli_calibrate_info_and_explain(cache, capsys, tmp_path):
    assert main(["calibrate", "--device", "cpu", "--precision", "double", "--methods", "native", "--qubits", "8",
                 "--max-gate-qubits", "2", "--part", "gates", "--repeats", "1", "--budget", "3", "--json",
                 str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "calibrated" in out and "stored " in out and "native     bottom" in out
    assert main(["info", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "cost table: cache:" in out
    assert main(["brickwork", "--qubits", "8", "--gate-qubits", "2", "--depth", "2", "--device", "cpu",
                 "--plan", "none", "--explain", "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "auto (double): native x" in out and "block  d placement" in out
    blocks = json.loads((tmp_path / "b.json").read_text())["result"]["metadata"]["blocks"]
    assert blocks and all(b["method"] == "native" and "measured_ms" in b for b in blocks)
    assert main(["brickwork", "--qubits", "8", "--backend", "native", "--explain", "--device", "cpu"]) == 2
    assert "--explain shows the choices of one --backend auto run" in capsys.readouterr().err
    assert main(["brickwork", "--qubits", "8", "--backend", "native", "--precision", "single",
                 "--device", "cpu"]) == 2
    assert "--precision applies to --backend auto" in capsys.readouterr().err
    # the default plan runs the 8-qubit brickwork as stages, and explains that too
    assert main(["brickwork", "--qubits", "8", "--gate-qubits", "2", "--depth", "2", "--device", "cpu",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    assert "stages: yes" in out and "stage-cpu" in out


@pytest.mark.gpu
def test_gpu_calibration_under_a_minute(cache):
    t0 = time.perf_counter()
    table = cal.calibrate("gpu")
    elapsed = time.perf_counter() - t0
    assert elapsed < 60, f"calibration took {elapsed:.1f} s"
    assert {"native", "native32"} <= set(table.methods())
    assert max(max(r.ms) for r in table.rows) >= 10


@pytest.mark.gpu
def test_gpu_auto_on_brickwork_d10_chooses_valid_methods(cache):
    c = brickwork(24, 10, 4, seed=1)
    res = Simulator(device="gpu").run(c)
    allowed = set(res.metadata["auto"]["candidates"])
    assert {b["method"] for b in res.metadata["blocks"]} <= allowed
    ref = Simulator("native", device="gpu").run(c)
    err = np.linalg.norm(res.state.to_numpy() - ref.state.to_numpy())
    assert err < 1e-11


def test_width_order_spans_the_range_for_native_and_starts_large_for_emulated():
    """A share that runs out early must still leave native rows spanning d = 1..max (the widths
    between are interpolated) and emulated rows measured where they can win (large d)."""
    from qsim_tc.calibrate import _width_order

    for max_d in (10, 11, 12):
        native = _width_order(gemm.get_method("native"), max_d)
        assert sorted(native) == list(range(1, max_d + 1))
        first = native[: (max_d + 4) // 2]
        assert first[0] == 1 and max_d in first and 10 in first
        emulated = _width_order(gemm.get_method("tc-auto"), max_d)
        assert emulated[0] == 10 and sorted(emulated) == list(range(1, max_d + 1))
        # then 8 and 9 (what brickwork circuits fuse to), the widest, and the rest downwards
        head = list(dict.fromkeys((10, 8, 9, max_d)))
        assert emulated == head + [d for d in range(max_d, 0, -1) if d not in head]
    assert _width_order(gemm.get_method("tc-auto"), 6) == [6, 5, 4, 3, 2, 1]


@pytest.mark.parametrize("gate_ms, all_placements", [(10.0, True), (500.0, False)])
def test_emulated_first_widths_finish_past_the_share_while_cheap(monkeypatch, gate_ms, all_placements):
    """An emulated method whose share went before its first widths were done (tc-auto compiling
    its kernels) still measures d = 10 and 8 at every placement while its gates are cheap; an
    expensive one (an INT8 method's seconds a gate) stops at its share after one placement."""
    import types

    skew = [0.0]  # the calibration's clock runs this far ahead: tc-auto's share spent, no sleeping
    monkeypatch.setattr(cal, "time", types.SimpleNamespace(perf_counter=lambda: time.perf_counter() + skew[0],
                                                           strftime=time.strftime))

    def overhead(method, dev, dtype, rng):
        if method == "tc-auto":
            skew[0] += 160.0  # its whole share (budget 300 s over two methods; the rest is real time)
        return 0.01

    monkeypatch.setattr(cal, "_overhead", overhead)
    monkeypatch.setattr(cal, "_time_gate", lambda state, method, u, *a, **k: gate_ms)
    table = cal.calibrate("cpu", methods=["native32", "tc-auto"], n_qubits=14, max_gate_qubits=10, budget_s=300.0,
                          repeats=1)
    widths = {r.placement: set(r.measured) for r in table.rows if r.backend == "tc-auto"}
    if all_placements:
        # (no middle placement of 10 qubits among 14)
        assert set(widths) == set(PLACEMENTS) and all(8 in w for w in widths.values())
        assert {p for p, w in widths.items() if 10 in w} == {"bottom", "top", "scattered"}
    else:
        assert sum(10 in w for w in widths.values()) == 1 and not any(8 in w for w in widths.values())
    assert table.row("native32", "bottom") is not None  # the natives still get their widths


def test_cpu_calibration_leaves_the_emulated_methods_out_unless_named():
    """On a CPU the emulated methods are no candidates of auto (one of their d = 10 gates at 20
    qubits ran for minutes); a calibration measures them only when they are named."""
    t0 = time.perf_counter()
    table = cal.calibrate("cpu", n_qubits=8, max_gate_qubits=3, repeats=1, budget_s=5.0)
    assert time.perf_counter() - t0 < 15
    assert set(table.methods()) == {"native", "native3m", "native32"}
    named = cal.calibrate("cpu", methods=["native32", "tc-auto"], n_qubits=8, max_gate_qubits=3, repeats=1,
                          budget_s=5.0)
    assert "tc-auto" in named.methods()


class _ScriptedState:
    """A stand-in state whose gates take the scripted times (ms), one per apply."""

    def __init__(self, times):
        self.times = list(times)
        self.applied = 0

    def data(self):
        return None

    def apply(self, u, qubits, method, check_unitary):
        t = self.times[self.applied]
        self.applied += 1
        return SimpleNamespace(time_ms=t)


def test_a_slow_gate_gets_a_second_run_and_the_faster_counts():
    # warm-up, then a run that compiled a kernel variant (3.5 s) and the gate's own time: one run
    # kept the compilation, and as int8-crt's overhead it went into every width of its row
    rng = np.random.default_rng(0)
    st = _ScriptedState([4000.0, 3500.0, 60.0, 61.0])
    assert cal._time_gate(st, "m", np.eye(2), [0], 3, warm=True, rng=rng) == 60.0
    assert st.applied == 3
    fast = _ScriptedState([5.0, 1.0, 3.0, 2.0])
    assert cal._time_gate(fast, "m", np.eye(2), [0], 3, warm=True, rng=rng) == 2.0  # the median of 3


def test_the_overhead_is_the_fastest_of_five_runs(monkeypatch):
    st = _ScriptedState([900.0, 3500.0, 3.0, 1.0, 2.0, 1.5, 4.0])
    monkeypatch.setattr(cal, "StateVector", lambda *a, **k: st)
    assert cal._overhead("m", gemm.resolve_device("cpu"), np.complex128, np.random.default_rng(0)) == 1.0
    assert st.applied == 7  # the warm-up, then five timings: 3500 ms is slow, so it took a second run


def _stored_table(rows):
    """A cached table of this CPU's key holding ``rows`` as (method, dtype, ms per gate)."""
    key = cal.device_key(gemm.resolve_device("cpu"))
    table = CostTable(key, tuple(CostRow("cpu", dt, m, 10, {1: ms, 2: ms}, placement=pl)
                                 for m, dt, ms in rows for pl in PLACEMENTS), "measured")
    cal.store(table)
    cal.forget()
    return table


def test_a_cached_table_of_one_precision_never_serves_the_other(cache):
    """A cache measured for double only, asked for single (a CPU never calibrates on its own):
    the shipped table serves, and says why; asked for double, the cache serves."""
    dev = gemm.resolve_device("cpu")
    _stored_table([("native", "complex128", 7.0)])
    msgs = []
    single = cal.table_for(dev, "single", message=msgs.append)
    assert single.origin == "shipped:cpu" and "has no single-precision rows" in single.note
    assert single.note.startswith("cache:") and not msgs
    sel = Selector(single, "single")
    assert all(single.row(m).dtype == "complex64" for m in sel.candidates)
    assert cal.table_for(dev, "double").origin.startswith("cache:")
    assert cal.table_for(dev, "single").origin == "shipped:cpu"  # the memo keeps the answer
    # without a precision (a fixed method's fusion) the cache serves, and lookup falls back per dtype
    both = cal.table_for(dev)
    assert both.origin.startswith("cache:")
    row, note = lookup("native32", "cpu", "complex64", both)
    assert row.dtype == "complex64" and "has no complex64 row" in note
    # the run: auto in single precision reads the shipped table, a fixed native32 run its rows
    c = brickwork(8, 2, 2, seed=1)
    res = Simulator("auto", device="cpu", precision="single").run(c)
    assert res.metadata["auto"]["cost_table"].startswith("shipped:cpu")
    fused = Simulator("native32", device="cpu", plan=None, fuse="auto").run(c)
    assert "complex64" in fused.metadata["fusion_choice"]["cost_row"]


def test_a_cached_single_table_never_serves_double(cache):
    dev = gemm.resolve_device("cpu")
    _stored_table([("native32", "complex64", 3.0), ("tc-auto", "complex64", 9.0)])
    double = cal.table_for(dev, "double")
    assert double.origin == "shipped:cpu" and "has no double-precision rows" in double.note
    assert {double.row(m).dtype for m in Selector(double, "double").candidates} == {"complex128"}
    assert cal.table_for(dev, "single").origin.startswith("cache:")


def test_a_gpu_cache_missing_a_precision_is_completed_not_borrowed(cache, monkeypatch):
    """Where calibration is allowed, the missing precision is measured (here: a stand-in for the
    measurement) and merged; the precision already cached keeps its rows."""
    dev = gemm.resolve_device("cpu")
    _stored_table([("native", "complex128", 7.0)])
    measured = []

    def fake_calibrate(device, *, precisions, budget_s):
        measured.append(precisions)
        key = cal.device_key(device)
        return CostTable(key, tuple(CostRow("cpu", "complex64", "native32", 10, {1: 2.0, 2: 2.0}, placement=pl)
                                    for pl in PLACEMENTS), "measured")

    monkeypatch.setattr(cal, "calibrate", fake_calibrate)
    msgs = []
    t = cal.table_for(dev, "single", calibrate_missing=True, message=msgs.append)
    assert measured == [("single",)] and msgs and "single precision" in msgs[0]
    assert t.origin.startswith("cache:")
    assert t.row("native32").dtype == "complex64" and t.row("native").ms[1] == 7.0
    assert cal.table_for(dev, "double").origin.startswith("cache:")
