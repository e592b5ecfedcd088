"""The propagation of the per-product error bounds over a run (qsim_tc.error_bound), against
double-double, and the validation benchmark's CI subset."""

import math
import warnings

import numpy as np
import pytest

from circuits import Circuit, Gate, brickwork
from circuits.fusion import fuse
from circuits.haar import haar_unitary
from qsim_tc import error_bound as eb
from qsim_tc.reference import simulate_dd
from qsim_tc.simulator import Simulator


def _state(n, rng, dtype):
    x = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    return (x / np.linalg.norm(x)).astype(dtype)


def _run_steps(circuit, method, ran=None, fused_from=None):
    sim = Simulator(backend=method, device="cpu", plan=None, fuse=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sim.run(ran or circuit)
    acc = eb.ErrorAccumulator()
    gates = (ran or circuit).gates
    for i, (st, g) in enumerate(zip(res.stats, gates)):
        acc.add(eb.gate_step(g.name, method, g.matrix, sim.dtype, choices=st.info.report.choices,
                             n_amplitudes=1 << circuit.n_qubits,
                             fused_widths=fused_from[i] if fused_from else ()))
    return res.state.to_numpy().astype(np.complex128), acc.report()


@pytest.mark.parametrize("method", ["native", "native32", "int8-crt", "tf32tf32"])
def test_run_error_within_bound(method):
    c = brickwork(8, 2, 4, seed=3)
    ref = simulate_dd(c, device="cpu")
    hi, lo = ref.to_numpy()
    x, rep = _run_steps(c, method)
    err = (x - hi) - lo
    assert rep.l2_bound is not None and rep.n_steps == len(c)
    assert np.linalg.norm(err) <= rep.l2_bound
    assert np.abs(err).max() <= rep.max_abs_bound
    assert rep.l2_estimate / 10 <= np.linalg.norm(err) <= 10 * rep.l2_estimate
    assert 0 <= rep.infidelity_bound <= 1
    assert rep.top_steps[0].bound == max(s.bound for s in rep.top_steps)


def test_fused_blocks_count_their_fusion():
    c = brickwork(8, 2, 6, seed=5)
    f = fuse(c, 4)
    widths = []
    for g in f.gates:  # fused blocks are named fused<count>; their members here are all 2-qubit gates
        widths.append((2,) * int(g.name[5:]) if g.name.startswith("fused") else ())
    hi, lo = simulate_dd(c, device="cpu").to_numpy()  # the reference runs the circuit's own gates
    x, rep = _run_steps(c, "native", ran=f, fused_from=widths)
    assert np.linalg.norm((x - hi) - lo) <= rep.l2_bound
    assert eb.fusion_error((2, 2), 4, 1.0)[0] > 0


def test_no_model_makes_no_bound():
    u = haar_unitary(4, np.random.default_rng(0))
    acc = eb.ErrorAccumulator()
    acc.add(eb.gate_step("g0", "native32", u, np.complex64))
    acc.add(eb.gate_step("g1", "markidis", u, np.complex64, choices={"precision": "tf32"}))
    rep = acc.report()
    assert rep.l2_bound is None and rep.l2_estimate is None
    assert "step 1 (g1): 'markidis' has no error model" in rep.no_bound
    assert "none" in rep.summary()


def test_steps_add_and_norm_is_carried():
    u = haar_unitary(8, np.random.default_rng(1))
    one = eb.error_report([eb.gate_step("g", "native", u, np.complex128)])
    two = eb.error_report([eb.gate_step("g", "native", u, np.complex128)] * 2)
    assert two.l2_bound == pytest.approx(2 * one.l2_bound, rel=1e-6)
    assert two.l2_estimate == pytest.approx(math.sqrt(2) * one.l2_estimate, rel=1e-9)
    # a measured norm below the carried bound scales the step down
    half = eb.error_report([eb.gate_step("g", "native", u, np.complex128, state_norm=0.5)])
    assert half.l2_bound == pytest.approx(0.5 * one.l2_bound, rel=1e-6)


def test_stage_ops():
    st = eb.stage_step("stage 0", [eb.StageOp("dense", 3), eb.StageOp("phase"), eb.StageOp("scalar")],
                       np.complex128)
    rep = eb.error_report([st])
    assert 0 < rep.l2_bound < 1e-13
    wide = eb.error_report([eb.stage_step("s", [eb.StageOp("dense", 2)], np.complex64, compute="fp64")])
    assert wide.l2_bound > 2.0 ** -24  # the store to complex64 dominates
    with pytest.raises(ValueError, match="kind must be"):
        eb.StageOp("swap")
    with pytest.raises(ValueError, match="k in 1..14"):
        eb.StageOp("dense", 0)
    with pytest.raises(ValueError, match="compute must be"):
        eb.stage_step("s", [], np.complex128, compute="fp16")
    with pytest.raises(TypeError, match="must be an error_bound.Step"):
        eb.ErrorAccumulator().add("step")


def test_phase_op_bound_holds_on_a_diagonal_gate():
    # a phase op is checked through its arithmetic: e^(i pi t) from a double turn, times an amplitude
    rng = np.random.default_rng(7)
    x = _state(12, rng, np.complex128)
    turns = rng.integers(-2 ** 63, 2 ** 63 - 1, size=x.size, dtype=np.int64)
    half = turns.astype(np.float64) * 2.0 ** -63
    y = x * np.exp(1j * np.pi * half)
    exact = x.astype(np.clongdouble) * np.exp(1j * np.pi * turns.astype(np.longdouble) * np.longdouble(2.0) ** -63)
    err = float(np.linalg.norm((y - exact).astype(np.complex128)))
    assert err <= eb.stage_op_error(eb.StageOp("phase"), np.complex128, "fp64", 1.0).bound


def test_validation_script_subset(tmp_path):
    from benchmarks.bench import error_bound_validation as v

    out, png = tmp_path / "v.json", tmp_path / "v.png"
    assert v.main(["--quick", "--kinds", "brickwork", "--limit", "2", "--out", str(out), "--plot", str(png)]) == 0
    import json

    data = json.loads(out.read_text())
    assert data["circuits"] == 2 and png.stat().st_size > 0
    assert {"native", "native32", "auto", "auto-single"} <= set(data["summary"]) and data["machine"]["cores"]
    for s in data["summary"].values():
        assert s["l2_violations"] == 0 and s["max_violations"] == 0
        assert s["estimate_within_10x"] == 1.0


def test_stage_dense_op_counts_its_fusion():
    plain = eb.stage_op_error(eb.StageOp("dense", 3), np.complex128, "fp64", 1.0)
    fused = eb.stage_op_error(eb.StageOp("dense", 3, fused_widths=(2, 2, 1)), np.complex128, "fp64", 1.0)
    assert fused.bound == pytest.approx(plain.bound + eb.fusion_error((2, 2, 1), 3, 1.0)[0])


def test_sequence_of_runs_adds_bounds_times_gains():
    from qsim_tc import run_error  # noqa: PLC0415

    u = haar_unitary(8, np.random.default_rng(2))
    a = eb.error_report([eb.gate_step("a", "native", u, np.complex128)] * 2)
    b = eb.error_report([eb.gate_step("b", "native32", u, np.complex64)])
    assert a.gain > 1.0 and a.gain == pytest.approx(1.0, abs=1e-12)
    both = run_error.sequence_report([a, b])
    assert both.l2_bound == (a.l2_bound + b.l2_bound) * a.gain * b.gain
    assert both.l2_estimate == pytest.approx(math.hypot(a.l2_estimate, b.l2_estimate), rel=1e-12)
    assert both.n_steps == 3 and both.top_steps[0].label == "run 1: b" and both.top_steps[0].index == 2
    # the whole run as one accumulation gives the same bound up to second-order terms (there the
    # last step's state norm is bounded as 1 + the earlier errors; a run continuing a state
    # measures its norm)
    whole = eb.error_report([eb.gate_step("a", "native", u, np.complex128)] * 2
                            + [eb.gate_step("b", "native32", u, np.complex64)])
    assert both.l2_bound == pytest.approx(whole.l2_bound, rel=1e-12)
    assert run_error.sequence_report([a]).top_steps[0].label == "a"
    none = run_error.sequence_report([a, None])
    assert none.l2_bound is None and none.no_bound == "run 1 of 2: it reported none"
    missing = eb.error_report([eb.gate_step("g", "markidis", u, np.complex64)])
    assert "has no error model" in run_error.sequence_report([missing, a]).no_bound
    assert run_error.sequence_report([]).l2_bound is None
    ph = run_error.phase_report(np.complex64)
    assert 2.0 ** -24 < ph.l2_bound < 2.0 ** -20


def test_signed_permutations_and_cpu_diagonals_are_modelled_as_what_they_compute():
    from gemm import error_model as em  # noqa: PLC0415
    from qsim_tc import run_error  # noqa: PLC0415

    cx = np.eye(4)[[0, 1, 3, 2]].astype(complex)
    y = np.array([[0, -1j], [1j, 0]])
    assert em.is_unit_monomial(cx) and em.is_unit_monomial(y) and em.is_unit_monomial(np.diag([1, 1, 1, -1]))
    assert not em.is_unit_monomial(np.array([[1, 1], [1, -1]]) / math.sqrt(2))
    assert not em.is_unit_monomial(np.array([[0.5, 0], [0, 1]])) and not em.is_unit_monomial(np.ones((2, 2)))
    # a product with CX is exact in any precision; with a dense gate it is not
    for dt in (np.complex128, np.complex64):
        assert eb.error_report([eb.gate_step("cx", "native", cx, dt)]).l2_bound == 0.0
        assert eb.error_report([eb.gate_step("h", "native", y + 0.5, dt)]).l2_bound > 0
    # a circuit of X, CX and SWAP from |0...0> is exact, and so is its bound
    c = Circuit(4)
    for g, q in ((np.array([[0, 1], [1, 0]], complex), (0,)), (cx, (0, 1)), (cx, (1, 2)), (np.eye(4)[[0, 2, 1, 3]], (2, 3))):
        c.append(Gate(np.asarray(g, complex), q, "perm"))
    res = Simulator("native32", device="cpu", plan=None, fuse=None).run(c)
    hi, lo = simulate_dd(c, device="cpu").to_numpy()
    assert np.array_equal(res.state.to_numpy().astype(np.complex128), hi) and not lo.any()
    assert res.error.l2_bound == 0.0
    # CPU diagonal ops: one complex product with the gate's own entry (FP64: the entry exact)
    d64 = eb.stage_op_error(eb.StageOp("diagonal"), np.complex128, "fp64", 1.0)
    p64 = eb.stage_op_error(eb.StageOp("phase"), np.complex128, "fp64", 1.0)
    assert d64.bound < p64.bound and d64.estimate < p64.estimate
    assert d64.bound == pytest.approx(math.sqrt(2) * em.gamma(2, em.U64))
    d32 = eb.stage_op_error(eb.StageOp("diagonal"), np.complex64, "fp32", 1.0)
    assert d32.bound > math.sqrt(2) * em.U32
    # a fused block's CX members add no fusion rounding
    block = fuse(c, 4)
    assert len(block) == 1 and run_error.fused_widths_of(block, [tuple(range(len(c)))], c) == [()]
    c.append(Gate(haar_unitary(2, np.random.default_rng(0)), (1,), "u"))
    assert run_error.fused_widths_of(fuse(c, 4), [tuple(range(len(c)))], c) == [(1,)]
