"""The command line: brickwork and info run, print results, write JSON, and reject bad input."""

import json

from qsim_tc.cli import main


def test_brickwork_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["brickwork", "--qubits", "8", "--gate-qubits", "2", "--depth", "3", "--seed", "1",
               "--device", "cpu", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "norm: 1.0000000000000" in text and "time:" in text
    payload = json.loads(out.read_text())
    assert payload["result"]["n_gates"] == len(payload["result"]["gates"]) > 0
    assert payload["environment"]["numpy"]


def test_info_lists_methods(capsys):
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    assert "native" in text and "device:" in text


def test_bad_backend_is_a_clear_error(capsys):
    rc = main(["brickwork", "--qubits", "4", "--backend", "nope", "--device", "cpu"])
    assert rc == 2
    assert "unknown GEMM method 'nope'" in capsys.readouterr().err


def test_brickwork_compare_rows_against_dd(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = main(["brickwork", "--qubits", "8", "--gate-qubits", "2", "--depth", "3", "--device", "cpu",
               "--backend", "native,native3m", "--reference", "dd", "--mirror", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "native3m" in text and "infidelity" in text and "dd (reference)" in text
    rows = json.loads(out.read_text())["rows"]
    native = next(r for r in rows if r["backend"] == "native")
    assert native["l2_rel"] < 1e-14 and native["mirror_l2_rel"] < 1e-14



def test_option_no_backend_takes_is_an_error(capsys):
    rc = main(["brickwork", "--qubits", "4", "--backend", "native", "--splits", "9", "--device", "cpu"])
    assert rc == 2
    assert "--splits is not an option of native" in capsys.readouterr().err
    rc = main(["brickwork", "--qubits", "4", "--fuse", "-1", "--device", "cpu"])
    assert rc == 2
    assert "--fuse must be none, auto or an int d >= 1" in capsys.readouterr().err
