"""The command line meets careless input: one line and exit status 2 for every user error (never a
traceback), signals end a run with one line, outputs are checked before a run and written whole."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from circuits import Circuit, Gate
from qsim_tc import memory
from qsim_tc.cli import main
from qsim_tc.cli.common import write_json

ROOT = Path(__file__).resolve().parents[2]
BELL = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\ncreg c[2];\nh q[0];\ncx q[0],q[1];\nmeasure q -> c;\n'
PARAM = 'OPENQASM 3.0;\ninclude "stdgates.inc";\ninput float theta;\nqubit[1] q;\nrx(theta) q[0];\n'
UNWRITABLE = "/sys/qsim-tc-out.json"  # sysfs takes no new file, even from root


def _unwritable() -> bool:
    return os.path.isdir("/sys") and _mkstemp_fails("/sys")


def _mkstemp_fails(folder) -> bool:
    import tempfile

    try:
        fd, name = tempfile.mkstemp(dir=folder)
    except OSError:
        return True
    os.close(fd)
    os.unlink(name)
    return False


@pytest.fixture
def files(tmp_path):
    bell = tmp_path / "bell.qasm"
    bell.write_text(BELL)
    bad = tmp_path / "bad.qasm"
    bad.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\nfoo q[0];\n')
    folder = tmp_path / "a-folder"
    folder.mkdir()
    return {"bell": str(bell), "bad": str(bad), "folder": str(folder), "tmp": tmp_path}


BAD_INPUTS = [
    ("missing file", ["run", "{tmp}/missing.qasm"], "missing.qasm"),
    ("malformed program", ["run", "{bad}"], "bad.qasm"),
    ("fuse too wide", ["run", "{bell}", "--fuse", "99"], "--fuse must be none, auto or an int d in 1..14"),
    ("fuse not a number", ["brickwork", "--qubits", "4", "--fuse", "wide"], "--fuse"),
    ("shots negative", ["run", "{bell}", "--shots", "-1"], "--shots must be >= 0"),
    ("param malformed", ["run", "{bell}", "--param", "theta"], "--param takes NAME=VALUE"),
    ("param expression", ["run", "{bell}", "--param", "theta=__import__('os')"], "--param theta"),
    ("param division by zero", ["run", "{bell}", "--param", "theta=1/0"], "--param theta"),
    ("explain with a named backend", ["run", "{bell}", "--backend", "native", "--explain"], "--explain"),
    ("plot without reference", ["run", "{bell}", "--plot", "{tmp}/p.png"], "--plot draws the run's errors"),
    ("json is a folder", ["run", "{bell}", "--json", "{folder}"], "is a folder"),
    ("json folder missing", ["run", "{bell}", "--json", "{tmp}/no/such/r.json"], "does not exist"),
    ("unknown backend", ["brickwork", "--qubits", "4", "--backend", "nope"], "unknown GEMM method 'nope'"),
    ("zero qubits", ["brickwork", "--qubits", "0"], "--qubits must be in 1..40"),
    ("absurd qubits", ["brickwork", "--qubits", "100000"], "--qubits must be in 1..40"),
    ("absurd depth", ["brickwork", "--qubits", "4", "--depth", "10000000"], "--depth must be >= 1"),
    ("precision without auto", ["brickwork", "--qubits", "4", "--backend", "native", "--precision", "single"],
     "--precision applies to --backend auto"),
    ("calibrate placement", ["calibrate", "--placements", "left", "--no-store"], "placements must be some of"),
    ("calibrate size", ["calibrate", "--qubits", "1", "--no-store"], "n_qubits must be an int in 2..40"),
    ("gemm-accuracy phi", ["gemm-accuracy", "--test", "phi", "--phi", "x"], "--phi takes numbers"),
]


@pytest.mark.parametrize("argv, expected", [(a, e) for _, a, e in BAD_INPUTS], ids=[n for n, _, _ in BAD_INPUTS])
def test_user_errors_are_one_line_and_status_2(files, capsys, argv, expected):
    argv = [a.format(**files) for a in argv]
    if argv[0] != "gemm-accuracy":
        argv += ["--device", "cpu"]
    rc = main(argv)  # an exception escaping here would be a traceback at the command line
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip() and "warning" not in line]
    assert len(lines) == 1 and lines[0].startswith(f"qsim-tc {argv[0]}: error: "), err
    assert expected in lines[0]
    assert "Traceback" not in err


@pytest.mark.skipif(not _unwritable(), reason="needs a folder that takes no new file")
def test_an_unwritable_output_folder_fails_before_the_run(files, capsys):
    rc = main(["run", files["bell"], "--device", "cpu", "--json", UNWRITABLE])
    captured = capsys.readouterr()
    assert rc == 2 and f"--json {UNWRITABLE}: cannot write in /sys" in captured.err
    assert "norm:" not in captured.out  # nothing ran


def test_the_command_line_prints_no_traceback(files):
    """The installed entry point, in a process of its own, on a few bad inputs."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for argv in (["run", files["bad"]], ["run", files["bell"], "--fuse", "99", "--json", files["folder"]]):
        p = subprocess.run([sys.executable, "-m", "qsim_tc.cli", *argv, "--device", "cpu"], capture_output=True,
                           text=True, env=env, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr, (argv, p.stderr)


@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_signals_end_a_run_with_one_line(sig, status, word):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # a run long enough to be interrupted: the header comes before the simulation starts
    p = subprocess.Popen([sys.executable, "-u", "-m", "qsim_tc.cli", "brickwork", "--qubits", "22", "--depth", "400",
                          "--device", "cpu", "--plan", "none", "--fuse", "none"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout.readline().startswith("brickwork: 22 qubits")
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == status and f"qsim-tc brickwork: {word}" in err and "Traceback" not in err, err


def test_unexpected_errors_are_one_line_too(files, capsys, monkeypatch):
    import qsim_tc.cli.run as run_cmd

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(run_cmd, "run", broken)
    monkeypatch.delenv("QSIM_TC_DEBUG", raising=False)
    # the parser holds the function it was built with: rebuild it after the patch
    assert main(["run", files["bell"], "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "qsim-tc run: internal error: KeyError" in err and "QSIM_TC_DEBUG=1" in err


# --- outputs: written whole, or not at all ----------------------------------------------------


def test_a_failed_json_write_keeps_the_old_file(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"old": true}')

    class Unwritable:
        def item(self):
            raise RuntimeError("cannot serialize")

    with pytest.raises(RuntimeError, match="cannot serialize"):
        write_json(str(out), {"x": Unwritable()})
    assert json.loads(out.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary file left


def test_a_failed_circuit_save_keeps_the_old_file(tmp_path, monkeypatch):
    c = Circuit(1, [Gate(np.eye(2), (0,))])
    path = tmp_path / "c.npz"
    c.save(path)
    before = path.read_bytes()

    def half_written(f, **arrays):
        f.write(b"PK partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", half_written)
    with pytest.raises(OSError, match="No space left"):
        Circuit(2, [Gate(np.eye(4), (0, 1))]).save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]


def test_circuit_save_keeps_numpys_name_and_round_trips(tmp_path):
    c = Circuit(2, [Gate(np.eye(4), (0, 1), "id2")], name="t")
    c.save(tmp_path / "plain")  # numpy's rule: .npz appended
    back = Circuit.load(tmp_path / "plain.npz")
    assert back.n_qubits == 2 and back.gates[0].name == "id2" and back.name == "t"


def test_json_and_plot_are_replaced_whole(files, capsys):
    out, png = files["tmp"] / "r.json", files["tmp"] / "r.png"
    out.write_text("old")
    png.write_text("old")
    rc = main(["brickwork", "--qubits", "5", "--depth", "2", "--device", "cpu", "--backend", "native,native32",
               "--json", str(out), "--plot", str(png)])
    assert rc == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["command"] == "brickwork"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in files["tmp"].iterdir() if p.name.startswith(".")) == []


# --- the default backend in comparisons; run's new options ---------------------------------------


def test_brickwork_reference_and_mirror_with_the_default_backend(capsys):
    rc = main(["brickwork", "--qubits", "6", "--depth", "2", "--device", "cpu", "--reference", "dd", "--mirror"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    rows = [line.split()[0] for line in captured.out.splitlines()]
    assert "auto" in rows and "native" in rows and "dd" in rows
    rc = main(["brickwork", "--qubits", "6", "--depth", "2", "--device", "cpu", "--mirror", "--precision", "single"])
    assert rc == 0 and "auto" in capsys.readouterr().out


def test_accuracy_table_takes_auto_with_its_precision():
    from circuits import brickwork
    from qsim_tc.accuracy import accuracy_table

    rows = accuracy_table(brickwork(5, 2, 2, seed=1), ["auto"], device="cpu", reference="dd",
                          options_per_backend={"auto": {"precision": "single"}})
    auto = next(r for r in rows if r["backend"] == "auto")
    assert auto["precision"] == "fp32" and 1e-9 < auto["l2_rel"] < 1e-5


def test_run_param_takes_openqasm_expressions(files, capsys):
    pytest.importorskip("qiskit_qasm3_import")
    f = files["tmp"] / "p.qasm"
    f.write_text(PARAM)
    assert main(["run", str(f), "--device", "cpu", "--param", "theta=pi/2", "--fuse", "none"]) == 0
    assert f"amplitude[0] = {complex(np.cos(np.pi / 4)):.6e}" in capsys.readouterr().out
    assert main(["run", str(f), "--device", "cpu", "--param", "theta=2*asin(1)"]) == 2
    assert "--param theta: cannot evaluate '2*asin(1)'" in capsys.readouterr().err


def test_run_explain_and_plot(files, capsys):
    png = files["tmp"] / "run.png"
    rc = main(["run", files["bell"], "--device", "cpu", "--explain", "--reference", "dd", "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "block  d placement method" in out and "vs dd: max_rel" in out and f"wrote {png}" in out
    assert png.read_bytes().startswith(b"\x89PNG")


def test_memory_error_says_what_would_fit(capsys, monkeypatch):
    # 34 qubits: 256 GiB in complex128, 128 GiB in complex64; as if 200 GiB were free
    monkeypatch.setattr(memory, "available_bytes", lambda device: 200 << 30)
    assert main(["brickwork", "--qubits", "34", "--depth", "1", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "would fit: --precision single (complex64: 132.0 GiB with the bounded engine)" in err
    assert main(["brickwork", "--qubits", "34", "--depth", "1", "--device", "cpu", "--backend", "native"]) == 2
    assert "would fit: --backend native32" in capsys.readouterr().err
    monkeypatch.setattr(memory, "available_bytes", lambda device: 20 << 30)
    assert main(["brickwork", "--qubits", "34", "--depth", "1", "--device", "cpu"]) == 2
    assert "would fit" not in capsys.readouterr().err  # nothing does
