"""Result.error on every run path (qsim_tc.run_error): present, never below the measured error
against double-double, carried by the CLI's JSON; and Simulator(tolerance=...) choosing methods by
their predicted bounds, or refusing."""

import json
import warnings

import numpy as np
import pytest

from circuits import brickwork, from_qiskit
from qsim_tc import Simulator, run_error
from qsim_tc.plan.costs import CostRow, CostTable
from qsim_tc.reference import simulate_dd
from qsim_tc.state import StateVector

C64 = "complex64"


def _table(rows) -> CostTable:
    return CostTable({"device": "cpu"}, tuple(
        CostRow("cpu", dt, m, 10, ms, overhead_ms=0.0, placement="any") for m, dt, ms in rows), "given")


def _measured(result, circuit):
    hi, lo = simulate_dd(circuit, device="cpu").to_numpy()
    err = (result.state.to_numpy().astype(np.complex128) - hi) - lo
    return float(np.linalg.norm(err)), float(np.abs(err).max())


@pytest.mark.parametrize("kw, kind", [
    ({"plan": "always"}, "stage"),
    ({"plan": "always", "precision": "single"}, "stage"),
    ({"plan": None, "fuse": None}, "gate"),
    ({"plan": None, "fuse": 3}, "gate"),
    ({"backend": "native32", "plan": None}, "gate"),
    ({"backend": "int8-crt", "plan": None, "fuse": None}, "gate"),
    ({"backend": "int8-auto", "plan": None, "fuse": None, "workspace_bytes": 1 << 16}, "gate"),
    ({"plan": None, "fuse": None, "workspace_bytes": 1 << 16}, "gate"),
])
def test_every_path_bounds_its_measured_error(kw, kind):
    c = brickwork(9, 2, 5, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = Simulator(device="cpu", **kw).run(c)
    assert res.step_kind == kind
    rep = res.error
    assert rep is not None and rep.l2_bound is not None and rep.n_steps >= 1
    l2, mx = _measured(res, c)
    assert 0 < l2 <= rep.l2_bound and mx <= rep.max_abs_bound
    assert 0 <= rep.infidelity_bound < 1e-6
    d = res.to_dict(gates=False)["error"]
    assert d["l2_bound"] == rep.l2_bound and d["top_steps"][0]["bound"] > 0


def test_bounded_engine_keeps_every_blocks_choices():
    c = brickwork(8, 2, 2, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = Simulator("int8-auto", device="cpu", plan=None, fuse=None, workspace_bytes=1 << 16).run(c)
    blocked = [s.info for s in res.stats if s.info.blocks > 1]
    assert blocked and all(len(i.block_choices) >= 1 for i in blocked)
    # the report's last block is one of the block choices the bound was evaluated for
    assert all(i.report.choices in i.block_choices for i in blocked)


def test_stage_bound_with_qft_phases_and_an_initial_state():
    from qiskit.synthesis import synth_qft_full

    c = from_qiskit(synth_qft_full(8))  # controlled phases: the stage's phase ops
    rng = np.random.default_rng(4)
    amps = rng.standard_normal(256) + 1j * rng.standard_normal(256)
    init = StateVector.from_array(amps / np.linalg.norm(amps), device="cpu")
    res = Simulator(device="cpu", plan="always").run(c, initial_state=init)
    assert res.step_kind == "stage"
    hi, lo = simulate_dd(c, device="cpu", initial_state=init.to_numpy()).to_numpy()
    err = np.linalg.norm((res.state.to_numpy() - hi) - lo)
    assert err <= res.error.l2_bound
    plain = Simulator(device="cpu", plan="always").run(c).error.l2_bound
    # the measured start norm, with its rounding's bound, is at least |0...0>'s 1
    assert plain <= res.error.l2_bound <= plain * (1 + 2e-9)  # (NORM_SLACK on the measured norm)


def test_tolerance_refuses_before_running_when_no_method_meets_it():
    c = brickwork(8, 2, 4, seed=3)
    sim = Simulator(device="cpu", precision="single", tolerance=1e-9, plan=None)
    with pytest.raises(run_error.ToleranceError, match=r"tolerance=1e-09.*the best bound is [0-9.e-]+ \((native32|tc-auto)\)"):
        sim.run(c)


def test_tolerance_steers_the_choice_away_from_a_cheaper_looser_method(monkeypatch):
    monkeypatch.setattr("qsim_tc.plan.select.CHOSEN_BY", {})
    c = brickwork(8, 2, 4, seed=3)
    t = _table([("native32", C64, {1: 10.0}), ("tc-auto", C64, {1: 1.0})])
    bounds = run_error.predicted_bounds(c, ["native32", "tc-auto"], np.complex64)
    assert bounds["native32"] < bounds["tc-auto"]
    tol = (bounds["native32"] * bounds["tc-auto"]) ** 0.5
    opts = dict(device="cpu", precision="single", cost_table=t, plan=None, fuse=None)
    free = Simulator(**opts).run(c)
    assert set(free.metadata["auto"]["blocks_per_method"]) == {"tc-auto"}
    held = Simulator(tolerance=tol, **opts).run(c)
    auto = held.metadata["auto"]
    assert set(auto["blocks_per_method"]) == {"native32"}
    assert "predicted error bound" in auto["excluded"]["tc-auto"]
    assert auto["predicted_bounds"]["tc-auto"] == pytest.approx(bounds["tc-auto"])
    assert held.error.l2_bound <= tol


def test_tolerance_drops_stages_whose_bound_misses_it():
    c = brickwork(8, 2, 4, seed=3)
    stage = Simulator(device="cpu", plan="always").run(c)
    gate = Simulator(device="cpu", plan=None, fuse=None).run(c)
    assert gate.error.l2_bound < stage.error.l2_bound
    tol = (gate.error.l2_bound * stage.error.l2_bound) ** 0.5
    res = Simulator(device="cpu", plan="always", fuse=None, tolerance=tol).run(c)
    assert res.step_kind == "gate" and "exceeds tolerance" in res.metadata["stages"]["why"]
    assert res.error.l2_bound <= tol


def test_cli_prints_the_bound_and_writes_it_to_json(tmp_path, capsys):
    from qsim_tc.cli import main

    out = tmp_path / "bw.json"
    assert main(["brickwork", "--qubits", "8", "--gate-qubits", "2", "--depth", "3", "--device", "cpu",
                 "--explain", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "error vs double-double: L2 <= " in text and "largest error-bound steps" in text
    err = json.loads(out.read_text())["result"]["error"]
    assert err["l2_bound"] > 0 and err["l2_estimate"] > 0 and err["max_abs_bound"] > 0
    assert err["infidelity_bound"] >= 0 and err["top_steps"] and err["no_bound"] is None


def test_predicted_bound_is_the_reported_one_for_the_method_that_ran():
    c = brickwork(9, 2, 6, seed=5)
    res = Simulator(device="cpu", plan=None, fuse=3, tolerance=1e-6).run(c)  # fused blocks: their fusion counts
    auto = res.metadata["auto"]
    assert set(auto["blocks_per_method"]) == {"native"}  # the shipped CPU table
    # the prediction takes the state dense; the run's report counts the sparse start from |0...0>
    applied = Simulator(device="cpu", plan=None, fuse=3)._fuse(c)
    dense = run_error.gate_run_report(*applied[:1], res.stats, applied[1], c, np.complex128)
    assert auto["predicted_bounds"]["native"] == pytest.approx(dense.l2_bound, rel=1e-9, abs=0)
    assert res.error.l2_bound < dense.l2_bound


def test_kept_stage_steps_give_the_report_of_a_fresh_computation():
    """A repeated GPU stage run reuses its plan's error steps; accumulated from any start norm
    they give exactly the report computed afresh."""
    from circuits import brickwork
    from qsim_tc.run_error import report_of, stage_run_report, stage_steps
    from qsim_tc.stages.plan import plan_stages

    plan = plan_stages(brickwork(10, 2, 6, seed=4), 6)
    steps = stage_steps(plan, np.complex64, max_dense=3, compute="fp32")
    for norm in (1.0, 0.5):
        fresh = stage_run_report(plan, np.complex64, max_dense=3, compute="fp32", initial_norm=norm)
        assert report_of(steps, norm) == fresh and fresh.l2_bound > 0


def test_first_gate_on_zero_state_is_exact_in_fp64_and_the_sparse_start_is_counted():
    # one 10-qubit gate on |0...0>: FP64 copies the gate's column exactly; FP32 only rounds it
    c = brickwork(10, 10, 1, seed=3)
    exact = Simulator("native", device="cpu", plan=None, fuse=None).run(c)
    assert exact.error.l2_bound == 0.0 and exact.error.l2_estimate == 0.0
    assert _measured(exact, c) == (0.0, 0.0)
    single = Simulator("native32", device="cpu", plan=None, fuse=None).run(c)
    l2, _ = _measured(single, c)
    assert 0 < l2 <= single.error.l2_bound < 2.0 ** -24 * 33  # u32 || |U| ||_2, not gamma_2048
    assert 0.1 <= l2 / single.error.l2_estimate <= 10
    # from a given state nothing is known of its zeros: the dense bound
    start = StateVector(10, dtype=np.complex64)
    given = Simulator("native32", device="cpu", plan=None, fuse=None).run(c, initial_state=start)
    assert given.error.l2_bound > 100 * single.error.l2_bound
    # a few layers on: the bound still holds, below the dense one
    c = brickwork(10, 3, 3, seed=4)
    res = Simulator("native32", device="cpu", plan=None, fuse=None).run(c)
    dense = run_error.gate_run_report(c, res.stats, None, c, np.complex64)
    assert _measured(res, c)[0] <= res.error.l2_bound < dense.l2_bound


def test_guard_norms_measured_per_block_feed_the_bound(monkeypatch):
    """An in-place auto run guards per block: the norm measured before each guarded block (and
    after it, for the next) is in the block records and in the steps of the run's bound."""
    monkeypatch.setattr("qsim_tc.plan.select.CHOSEN_BY", {})
    c = brickwork(8, 2, 3, seed=6)
    t = _table([("native", "complex128", {2: 10.0}), ("int8-crt", "complex128", {2: 1.0})])
    state = StateVector(8)
    seen = {}
    real = run_error.gate_run_report

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_error, "gate_run_report", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = Simulator(device="cpu", cost_table=t, plan=None, fuse=None).run(c, initial_state=state, in_place=True)
    blocks = res.metadata["blocks"]
    assert res.metadata["auto"]["guard"]["mode"] == "per-block" and {b["method"] for b in blocks} == {"int8-crt"}
    norms = run_error.guard_norms(res.metadata)
    assert sorted(norms) == list(range(len(c))) and all(v == pytest.approx(1.0, abs=1e-12) for v in norms.values())
    assert seen["state_norms"] == norms and seen["norm_u"] == 2.0 ** -53
    assert _measured(res, c)[0] <= res.error.l2_bound
    # a measured norm below the carried bound scales that step's bound down
    half = run_error.gate_run_report(c, res.stats, None, c, np.complex128, state_norms={1: 0.5})
    full = run_error.gate_run_report(c, res.stats, None, c, np.complex128)
    assert half.l2_bound < full.l2_bound
    # a complex64 state's norm summed in FP32 on the CPU carries its rounding: it never lowers the bound
    assert run_error.norm_unit_roundoff(np.complex64, False) == 2.0 ** -24
    assert run_error.norm_unit_roundoff(np.complex64, True) == 2.0 ** -53
    c64 = Simulator("native32", device="cpu", plan=None, fuse=None).run(c)
    assert run_error.gate_run_report(c, c64.stats, None, c, np.complex64, state_norms={1: 1.0},
                                     norm_u=2.0 ** -24) == run_error.gate_run_report(c, c64.stats, None, c,
                                                                                      np.complex64)
