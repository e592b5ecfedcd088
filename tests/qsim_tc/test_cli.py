"""The command line: brickwork and info run, print results, write JSON, and reject bad input."""

import importlib.util
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
    res = payload["result"]
    # n_gates: the circuit's (brickwork(8, 2, 3): 4 + 3 + 4 gates); each step, a stage here, covers some
    assert res["n_gates"] == 11 and res["step_kind"] == "stage"
    assert res["n_steps"] == len(res["gates"]) == len(res["steps"]) > 0
    assert sorted(i for st in res["steps"] for i in st["gates"]) == list(range(11))
    assert res["gate_time_ms"] == sum(st["time_ms"] for st in res["steps"]) > 0
    assert "11 gates in" in text
    assert payload["environment"]["numpy"]


def test_info_lists_methods(capsys):
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    assert "native" in text and "device:" in text
    assert "CPU stages:" in text and "-bit vectors" in text and "chunk complex64" in text  # no GPU here
    assert "fusion costs" in text


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
    assert "--fuse must be none, auto or an int d in 1..14" in capsys.readouterr().err


# --- what a user meets: version, help, checks before a run, parameters, tables -----------------

import builtins  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

from qsim_tc import __version__  # noqa: E402
from qsim_tc.cli import build_parser  # noqa: E402


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"qsim-tc {__version__}"


def test_top_level_help_is_for_users(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "register(subparsers)" not in text and "Each subcommand is a module" not in text
    assert "qsim-tc brickwork --qubits 20" in text and "gemm-accuracy" in text


@pytest.mark.parametrize("command", ["brickwork", "run", "gemm-accuracy", "probe", "info", "calibrate"])
def test_every_option_of_every_subcommand_has_help(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    for action in sub._actions:
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["brickwork", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "number of layers of gates (default: 10)" in text
    assert "seed of the random gates" in text and "(default: 0)" in text


def test_plot_with_one_backend_is_refused_before_running(tmp_path, capsys):
    rc = main(["brickwork", "--qubits", "4", "--device", "cpu", "--plot", str(tmp_path / "a.png")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--plot compares backends" in err and "--reference dd" in err
    assert not (tmp_path / "a.png").exists()


@pytest.mark.parametrize("opt", ["--plot", "--json"])
def test_output_into_a_missing_folder_fails_before_simulating(tmp_path, capsys, opt):
    target = tmp_path / "missing" / "out.file"
    rc = main(["brickwork", "--qubits", "4", "--device", "cpu", "--backend", "native,native32", opt, str(target)])
    assert rc == 2
    captured = capsys.readouterr()
    assert f"{opt} {target}: the folder {target.parent} does not exist" in captured.err
    assert "infidelity" not in captured.out and "native32" not in captured.out  # nothing ran


def test_plot_without_matplotlib_fails_before_simulating(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    rc = main(["gemm-accuracy", "--test", "phi", "--device", "cpu", "--plot", str(tmp_path / "p.png")])
    assert rc == 2
    captured = capsys.readouterr()
    assert "--plot needs matplotlib" in captured.err and 'pip install ".[plot]"' in captured.err
    assert "phi test" not in captured.out


def test_vs_native_reads_as_slower_or_faster(capsys, monkeypatch):
    from qsim_tc import progress
    from qsim_tc.accuracy import format_table

    table = format_table([{"backend": "native", "time_s": 0.1, "speedup_vs_native": 1.0},
                          {"backend": "int8", "time_s": 23.2, "speedup_vs_native": 0.1 / 23.2},
                          {"backend": "native32", "time_s": 0.05, "speedup_vs_native": 2.0}])
    assert "232x slower" in table and "2x faster" in table and "0.00x" not in table
    monkeypatch.setattr(progress, "_warned", set())
    rc = main(["brickwork", "--qubits", "6", "--gate-qubits", "2", "--depth", "2", "--device", "cpu",
               "--backend", "native,int8", "--mirror"])
    assert rc == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    int8 = next(ln for ln in lines if ln.startswith("int8"))
    assert int8.split()[3] in ("slower", "faster")
    assert "mirror time s" in captured.out
    # the emulation warning: once, one line, no Python source line
    warn = [ln for ln in captured.err.splitlines() if "warning" in ln]
    assert warn == [ln for ln in warn if ln.startswith("qsim-tc: warning: method 'int8' runs on the CPU")]
    assert len(warn) == 1 and "warnings.warn" not in captured.err


def test_gemm_accuracy_header_and_exp_rand_types(capsys):
    rc = main(["gemm-accuracy", "--test", "cancel", "--k", "24", "--methods", "native", "--device", "cpu"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "A (24 x 24) times its numerical inverse" in out and "n=256" not in out
    rc = main(["gemm-accuracy", "--test", "exp-rand", "--k", "16", "--m", "4", "--n", "4", "--methods", "native",
               "--device", "cpu", "--types", "2,4"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "2 = B tiny" in out and "4 = A and B beyond FP16's range" in out


QASM3 = """OPENQASM 3.0;
include "stdgates.inc";
input float theta;
input float phi;
qubit[2] q;
rx(theta) q[0];
rz(phi) q[0];
cx q[0], q[1];
"""


def test_run_binds_parameters(tmp_path, capsys):
    pytest.importorskip("qiskit_qasm3_import")
    f = tmp_path / "p.qasm"
    f.write_text(QASM3)
    rc = main(["run", str(f), "--device", "cpu"])
    assert rc == 2
    assert "--param NAME=VALUE" in capsys.readouterr().err
    rc = main(["run", str(f), "--device", "cpu", "--param", "theta=0.5", "--param", "phi=0.25", "--fuse", "none"])
    assert rc == 0
    out = capsys.readouterr().out
    import cmath
    import math
    amp0 = math.cos(0.25) * cmath.exp(-0.125j)
    assert f"amplitude[0] = {amp0:.6e}" in out
    assert main(["run", str(f), "--device", "cpu", "--param", "x=1", "--param", "theta=1"]) == 2
    assert "--param names x, not parameters" in capsys.readouterr().err
    assert main(["run", str(f), "--device", "cpu", "--param", "theta"]) == 2
    assert "--param takes NAME=VALUE, got 'theta'" in capsys.readouterr().err


DYNAMIC_QASM = """OPENQASM 2.0;
include "qelib1.inc";
qreg q[3];
creg c[3];
h q[0];
measure q[0] -> c[0];
reset q[0];
if(c==1) x q[2];
measure q[1] -> c[1];
measure q[2] -> c[2];
"""


DYNAMIC_QASM3 = """OPENQASM 3.0;
include "stdgates.inc";
input float theta;
qubit[2] q;
bit[2] c;
rx(theta) q[0];
c[0] = measure q[0];
if (c[0]) x q[1];
c[1] = measure q[1];
"""


def test_run_takes_a_dynamic_program_with_shots(tmp_path, capsys):
    """A file that measures mid-circuit, resets and branches on its bits runs with shot branching:
    c[2] copies the coin in c[0], c[1] reads 0; without --shots, or with a reference, a clear
    error; the JSON holds the counts."""
    pytest.importorskip("qiskit")
    f = tmp_path / "dyn.qasm"
    f.write_text(DYNAMIC_QASM)
    out = tmp_path / "dyn.json"
    assert main(["run", str(f), "--device", "cpu", "--shots", "2000", "--seed", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "dynamic" in text and "state(s) held at once" in text
    counts = json.loads(out.read_text())["counts"]
    assert set(counts) == {"000", "101"} and sum(counts.values()) == 2000
    assert 800 < counts["101"] < 1200
    assert main(["run", str(f), "--device", "cpu"]) == 2
    assert "give --shots N" in capsys.readouterr().err
    assert main(["run", str(f), "--device", "cpu", "--shots", "5", "--reference", "dd"]) == 2
    assert "not --reference" in capsys.readouterr().err
    g = tmp_path / "dyn_param.qasm"  # an unbound angle: named, with the way to bind it
    g.write_text(DYNAMIC_QASM3)
    if importlib.util.find_spec("qiskit_qasm3_import"):
        assert main(["run", str(g), "--device", "cpu", "--shots", "10"]) == 2
        assert "--param NAME=VALUE" in capsys.readouterr().err
        assert main(["run", str(g), "--device", "cpu", "--shots", "10", "--param", "theta=0"]) == 0
        assert "00 10" in capsys.readouterr().out


def test_auto_is_the_default_backend_of_the_commands(capsys, tmp_path):
    """brickwork and run default to --backend auto (double precision), which on a CPU runs native
    arithmetic: gate by gate, or (the default plan, for gates of up to 3 qubits) as stages."""
    rc = main(["brickwork", "--qubits", "6", "--gate-qubits", "2", "--depth", "2", "--device", "cpu"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "backend auto" in out and "auto (double): stage-cpu x" in out
    rc = main(["brickwork", "--qubits", "6", "--gate-qubits", "2", "--depth", "2", "--device", "cpu", "--plan", "none"])
    assert rc == 0 and "auto (double): native x" in capsys.readouterr().out
    q = tmp_path / "bell.qasm"
    q.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\nh q[0];\ncx q[0],q[1];\n')
    assert main(["run", str(q), "--device", "cpu", "--precision", "single", "--json", str(tmp_path / "r.json")]) == 0
    assert "auto (single): stage-cpu x" in capsys.readouterr().out
    import json

    meta = json.loads((tmp_path / "r.json").read_text())["result"]["metadata"]
    assert meta["precision"] == "single" and meta["blocks"][0]["method"] == "stage-cpu"
    assert main(["run", str(q), "--device", "cpu", "--precision", "single", "--plan", "none"]) == 0
    assert "auto (single): native32 x" in capsys.readouterr().out
