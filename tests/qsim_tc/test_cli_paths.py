"""Success paths of CLI options: brickwork --plot/--periodic/--fuse d, run --top, gemm-accuracy
--plot/--complex. The outputs are checked for content (JSON fields, a valid PNG file), not style."""

import json

import numpy as np
import pytest

from circuits import brickwork
from qsim_tc import Simulator
from qsim_tc.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    assert data[12:16] == b"IHDR"  # the first chunk: width and height follow, both > 0
    assert int.from_bytes(data[16:20], "big") > 0 and int.from_bytes(data[20:24], "big") > 0


def test_brickwork_compare_plot_and_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png, js = tmp_path / "b.png", tmp_path / "b.json"
    rc = main(["brickwork", "--qubits", "6", "--gate-qubits", "2", "--depth", "2", "--seed", "3", "--device", "cpu",
               "--backend", "native,native32", "--reference", "dd", "--plot", str(png), "--json", str(js)])
    assert rc == 0
    assert f"wrote {png}" in capsys.readouterr().out
    assert_png(png)
    rows = json.loads(js.read_text())["rows"]
    assert [r["backend"] for r in rows][:2] == ["native", "native32"]
    for r in rows[:2]:
        assert {"l2_rel", "max_rel", "infidelity", "norm_drift"} <= set(r)
    assert rows[0]["l2_rel"] < 1e-13 < 1e-9 < rows[1]["l2_rel"]  # FP64 and FP32 classes


def _single(tmp_path, *extra):
    js = tmp_path / "s.json"
    # 8 qubits: the periodic circuit has a gate (7, 0) on odd layers that the open one lacks
    rc = main(["brickwork", "--qubits", "8", "--gate-qubits", "2", "--depth", "4", "--seed", "2", "--device", "cpu",
               "--json", str(js), *extra])
    assert rc == 0
    return json.loads(js.read_text())


def test_brickwork_periodic_is_the_periodic_circuit(tmp_path):
    data = _single(tmp_path, "--periodic")
    assert data["args"]["periodic"] is True
    want = Simulator("native", device="cpu").run(brickwork(8, 2, 4, 2, periodic=True)).state.amplitude(0)
    plain = Simulator("native", device="cpu").run(brickwork(8, 2, 4, 2)).state.amplitude(0)
    assert abs(complex(*data["amp0"]) - want) <= 1e-14 and abs(want - plain) > 1e-6
    assert data["norm"] == pytest.approx(1.0, abs=1e-13)


def test_brickwork_fuse_d(tmp_path, capsys):
    data = _single(tmp_path, "--fuse", "3")
    meta = data["result"]["metadata"]
    assert meta["fuse"] == 3 and meta["applied_gates"] < meta["input_gates"]
    assert len(data["result"]["gates"]) == meta["applied_gates"]
    assert all(len(g["qubits"]) <= 3 for g in data["result"]["gates"])
    out = capsys.readouterr().out
    assert f"fusion: {meta['input_gates']} gates -> {meta['applied_gates']} blocks" in out
    want = Simulator("native", device="cpu").run(brickwork(8, 2, 4, 2)).state.amplitude(0)
    assert abs(complex(*data["amp0"]) - want) <= 1e-13  # fusion does not change the state


def test_run_top_prints_the_most_frequent_outcomes(tmp_path, capsys):
    pytest.importorskip("qiskit")
    qasm = tmp_path / "c.qasm"
    qasm.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[3];\ncreg c[3];\n'
                    "ry(0.4) q[0];\nry(1.1) q[1];\nh q[2];\nmeasure q -> c;\n")
    js = tmp_path / "r.json"
    rc = main(["run", str(qasm), "--device", "cpu", "--shots", "3000", "--seed", "4", "--top", "3",
               "--json", str(js)])
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, x in enumerate(out) if x.startswith("counts (3000 shots"))
    printed = [x.split() for x in out[head + 1:] if x.startswith("  ")]
    counts = json.loads(js.read_text())["counts"]
    assert len(counts) == 8 and sum(counts.values()) == 3000
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    assert [(k, int(v)) for k, v in printed] == top
    # the top outcome is the most likely basis state: q0, q1 near 0 (ry 0.4, 1.1), q2 either way
    p0, p1 = np.cos(0.2) ** 2, np.cos(0.55) ** 2
    assert {top[0][0], top[1][0]} == {"000", "100"} and p0 * p1 / 2 > 0.3


def test_gemm_accuracy_complex_with_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png, js = tmp_path / "g.png", tmp_path / "g.json"
    rc = main(["gemm-accuracy", "--test", "exp-rand", "--k", "16", "--m", "8", "--n", "8", "--methods",
               "native,native32", "--types", "1,2", "--complex", "--device", "cpu", "--plot", str(png),
               "--json", str(js)])
    assert rc == 0
    assert f"wrote {png}" in capsys.readouterr().out
    assert_png(png)
    data = json.loads(js.read_text())
    assert data["args"]["complex"] is True and data["test"] == "exp-rand"
    res = data["results"]
    assert {(r["method"], r["case"]) for r in res} == {(m, f"type {t}") for m in ("native", "native32") for t in (1, 2)}
    for r in res:
        assert "rel_fro" in r and r["rel_fro"] >= 0
    n64 = max(r["rel_fro"] for r in res if r["method"] == "native")
    n32 = min(r["rel_fro"] for r in res if r["method"] == "native32")
    assert n64 < 1e-14 < 1e-9 < n32
