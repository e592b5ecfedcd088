"""The GEMM accuracy tests (phi / cancel / exp-rand) and the gemm-accuracy subcommand."""

import json

import numpy as np
import pytest

from gemm import registry
from gemm.diagnostics import testmats
from gemm.diagnostics.accuracy_tests import format_results, plot_results, run_accuracy_test
from qsim_tc.cli import main


def _by(out, method, case=None):
    return [r for r in out["results"] if r["method"] == method and (case is None or r["case"] == case)]


def test_phi_separates_fp64_and_fp32():
    out = run_accuracy_test("phi", 64, ["native", "native32", "dd"], m=32, n=32, device="cpu", phis=(0.1, 4.0))
    for phi in ("phi=0.1", "phi=4"):
        n64 = _by(out, "native", phi)[0]
        n32 = _by(out, "native32", phi)[0]
        assert 1e-18 < n64["mean_rel"] < 1e-13
        assert 1e-9 < n32["mean_rel"] < 1e-4  # float32 operands, measured against DD of the same
        assert _by(out, "dd", phi)[0]["mean_rel"] < 1.2e-16
    assert out["skipped"] == []
    assert "mean relative error" in format_results(out)


def test_cancel_and_exp_rand(tmp_path):
    out = run_accuracy_test("cancel", 48, ["native", "dd"], device="cpu")
    assert _by(out, "native")[0]["max_abs"] > 1e-17 and _by(out, "dd")[0]["max_abs"] < 1e-15
    ex = run_accuracy_test("exp-rand", 32, ["native32"], m=16, n=16, device="cpu", complex_operands=True)
    assert [r["case"] for r in ex["results"]] == ["type 1", "type 2", "type 3", "type 4"]
    assert all(1e-9 < r["rel_fro"] < 1e-5 for r in ex["results"])
    path = plot_results(ex, str(tmp_path / "e.png"))
    assert (tmp_path / "e.png").stat().st_size > 1000 and path.endswith("e.png")


def test_methods_that_cannot_run_are_skipped_with_reason():
    out = run_accuracy_test("phi", 16, ["native", "dd"], m=8, n=8, device="cpu", phis=(1.0,),
                            options_per_method={"dd": {"algorithm": "fma"}})
    assert [s["method"] for s in out["skipped"]] == ["dd"]
    assert "GPU only" in out["skipped"][0]["reason"]
    assert "skipped dd" in format_results(out)


def test_every_registered_method_takes_part(monkeypatch):
    monkeypatch.setitem(registry._TABLE, "native-copy", "gemm.native.method:Native")
    monkeypatch.delitem(registry._CACHE, "native-copy", raising=False)
    out = run_accuracy_test("exp-rand", 8, None, m=4, n=4, device="cpu", types=(1,))
    seen = {r["method"] for r in out["results"]} | {s["method"] for s in out["skipped"]}
    assert seen == set(registry.methods())


def test_bad_arguments():
    with pytest.raises(ValueError, match="test='psi'"):
        run_accuracy_test("psi", 8)
    with pytest.raises(ValueError, match="k must be a positive int"):
        run_accuracy_test("phi", 0)
    with pytest.raises(ValueError, match="unknown GEMM method 'nope'"):
        run_accuracy_test("phi", 8, ["nope"])


def test_testmats_shapes_and_ranges(rng):
    for t in (1, 2, 3, 4):
        a, b = testmats.exp_rand_type(t, 5, 6, 7, rng)
        (alo, ahi), (blo, bhi) = testmats.EXP_RAND_TYPES[t]
        assert a.shape == (5, 6) and b.shape == (6, 7)
        assert np.all(np.abs(a) >= 2.0**alo) and np.all(np.abs(a) < 2.0 ** (ahi + 1))
        assert np.all(np.abs(b) >= 2.0**blo) and np.all(np.abs(b) < 2.0 ** (bhi + 1))
    assert testmats.phi_matrix(3, 4, 1.0, rng, np.float32).dtype == np.float32
    assert testmats.complex_urand(2, 2, rng, dtype=np.complex64).dtype == np.complex64
    a, ainv = testmats.cancel_pair(10, rng)
    assert np.abs(a @ ainv - np.eye(10)).max() < 1e-12
    with pytest.raises(ValueError, match="exp_rand type t must be one of"):
        testmats.exp_rand_type(5, 2, 2, 2, rng)
    with pytest.raises(ValueError, match="phi must be"):
        testmats.phi_matrix(2, 2, -1.0, rng)
    with pytest.raises(ValueError, match="lo <= hi"):
        testmats.exp_rand(2, 2, 3, 1, rng)


def test_cli_gemm_accuracy(tmp_path, capsys):
    js = tmp_path / "r.json"
    rc = main(["gemm-accuracy", "--test", "exp-rand", "--k", "16", "--m", "8", "--n", "8",
               "--methods", "native,dd", "--types", "1,4", "--device", "cpu", "--json", str(js)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "type 4" in text and "||C - C_ref||_F" in text
    data = json.loads(js.read_text())
    assert data["test"] == "exp-rand" and len(data["results"]) == 4
    assert main(["gemm-accuracy", "--test", "phi", "--k", "8", "--methods", "nope", "--device", "cpu"]) == 2
