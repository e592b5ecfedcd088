"""circuits.from_qasm: OpenQASM 2 text and files against Qiskit's Statevector; parser errors."""

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qiskit")

from qiskit import QuantumCircuit  # noqa: E402
from qiskit.quantum_info import Statevector  # noqa: E402

from circuits import CircuitError, from_qasm  # noqa: E402
from qsim_tc import Simulator  # noqa: E402

PROGRAM = """OPENQASM 2.0;
include "qelib1.inc";
// a custom gate, standard gates with parameters, multi-qubit gates on scattered qubits
gate mix(theta) a, b { cx a, b; ry(theta) b; cx a, b; u3(theta, pi/3, -pi/5) a; }
qreg q[6];
qreg r[2];
creg c[4];
h q;
mix(0.37) q[4], q[1];
cu1(pi/7) q[0], q[5];
ccx q[2], q[5], q[3];
u2(0.1, 0.2) r[1];
swap q[3], r[0];
rzz(0.9) q[1], r[1];
sx q[2];
cswap r[1], q[0], q[4];
barrier q;
measure q[0] -> c[0];
measure r[1] -> c[3];
"""


def reference(text):
    qc = QuantumCircuit.from_qasm_str(text)
    return Statevector(qc.remove_final_measurements(inplace=False)).data


def simulate(circ):
    return Simulator("native", device="cpu").run(circ).state.to_numpy()


def test_qasm2_text_matches_statevector():
    c = from_qasm(PROGRAM)
    assert c.n_qubits == 8
    assert np.abs(simulate(c) - reference(PROGRAM)).max() <= 1e-12
    assert c.measured == [(0, 0), (7, 3)] and c.n_clbits == 4


def test_qasm2_file_with_local_include(tmp_path):
    (tmp_path / "mine.inc").write_text("gate flip a, b { x a; cz a, b; h b; }\n")
    text = 'OPENQASM 2.0;\ninclude "qelib1.inc";\ninclude "mine.inc";\nqreg q[3];\nh q[0];\nflip q[0], q[2];\n'
    f = tmp_path / "prog.qasm"
    f.write_text(text)
    expanded = text.replace('include "mine.inc";\n', "gate flip a, b { x a; cz a, b; h b; }\n")
    for src in (f, str(f)):
        c = from_qasm(src)
        assert c.name == "prog"
        assert np.abs(simulate(c) - reference(expanded)).max() <= 1e-12


def test_syntax_error_gives_the_parsers_line():
    bad = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\nh q[0]\ncx q[0],q[1];\n'
    with pytest.raises(CircuitError, match=r"OpenQASM 2 syntax error in <input>: <input>:5,0: needed ';'"):
        from_qasm(bad)


def test_syntax_error_in_a_file_names_the_file(tmp_path):
    f = tmp_path / "bad.qasm"
    f.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\nfoo q[0];\n')
    with pytest.raises(CircuitError, match=r"syntax error in .*bad\.qasm: .*4,0: 'foo' is not defined"):
        from_qasm(f)


def test_reset_and_classical_control_in_qasm_are_rejected():
    reset = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\nh q[0];\nreset q[0];\n'
    with pytest.raises(CircuitError, match=r"instruction 1 \('reset' on qubit\(s\) \[0\]\) is a reset"):
        from_qasm(reset)
    cond = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\ncreg c[1];\nmeasure q[0] -> c[0];\nif (c==1) x q[1];\n'
    with pytest.raises(CircuitError, match=r"instruction 1 \('if_else' on qubit\(s\) \[1\]\) is classical control"):
        from_qasm(cond)
    mid = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\ncreg c[1];\nmeasure q[0] -> c[0];\nh q[0];\n'
    with pytest.raises(CircuitError, match=r"mid-circuit measurement: qubit 0 is measured by instruction 0"):
        from_qasm(mid)


def test_test_extra_installs_the_qasm3_parser():
    """CI installs ".[test]": the parser must be in that extra, or the OpenQASM 3 tests below skip."""
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    test_extra = re.search(r"^test = \[(.*?)\]", text, re.MULTILINE | re.DOTALL).group(1)
    assert re.search(r'"qiskit-qasm3-import[>=<~ 0-9.]*"', test_extra), test_extra


def test_qasm3_without_its_parser_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "qiskit_qasm3_import", None)  # as if not installed: import fails
    with pytest.raises(ImportError, match=r"OpenQASM 3 import needs the qiskit-qasm3-import package: "
                                          r'install the qasm3 extra: pip install "\.\[qasm3\]" \(or pip install qiskit-qasm3-import\)'):
        from_qasm('OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nh q[0];\n')


HAS_QASM3 = importlib.util.find_spec("qiskit_qasm3_import") is not None


@pytest.mark.skipif(not HAS_QASM3, reason="needs qiskit-qasm3-import")
def test_qasm3_matches_statevector_and_keeps_measurements():
    text = ('OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[3] q;\nbit[3] c;\nh q[0];\ncx q[0], q[2];\n'
            'rz(0.3) q[1];\ncrx(0.7) q[2], q[1];\nc[1] = measure q[2];\n')
    from qiskit import qasm3

    c = from_qasm(text)
    qc = qasm3.loads(text).remove_final_measurements(inplace=False)
    assert np.abs(simulate(c) - Statevector(qc).data).max() <= 1e-12
    assert c.measured == [(2, 1)]


@pytest.mark.skipif(not HAS_QASM3, reason="needs qiskit-qasm3-import")
def test_qasm3_errors():
    with pytest.raises(CircuitError,
                       match=r"OpenQASM 3 syntax error in <input>: line 5, column 0: missing ';' at 'cx'"):
        from_qasm('OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nh q[0]\ncx q[0], q[1];\n')
    with pytest.raises(CircuitError, match=r"OpenQASM 3 error in <input>: .*4,0: gate 'foo' is not defined"):
        from_qasm('OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nfoo q[0];\n')
    with pytest.raises(CircuitError, match=r"1 unbound parameter\(s\): theta"):
        from_qasm('OPENQASM 3.0;\ninclude "stdgates.inc";\ninput float theta;\nqubit[1] q;\nrx(theta) q[0];\n')
    cond = ('OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\nc[0] = measure q[0];\n'
            'if (c[0]) x q[1];\n')
    with pytest.raises(CircuitError, match=r"instruction 2 \('if_else' on qubit\(s\) \[1\]\) is classical control"):
        from_qasm(cond)


def test_bad_sources():
    with pytest.raises(CircuitError, match=r"OPENQASM 4 in <input> is not supported; expected version 2 or 3"):
        from_qasm("OPENQASM 4.0;\nqreg q[1];\n")
    with pytest.raises(FileNotFoundError, match=r"'no_such_file.qasm' is not OpenQASM text .* and no such file"):
        from_qasm("no_such_file.qasm")
    with pytest.raises(TypeError, match="source must be OpenQASM text or a path, got int"):
        from_qasm(3)


# --- qsim-tc run -------------------------------------------------------------------------------


def test_cli_run_samples_and_compares(tmp_path, capsys):
    import json

    from qsim_tc.cli import main

    f = tmp_path / "prog.qasm"
    f.write_text(PROGRAM)
    out = tmp_path / "r.json"
    rc = main(["run", str(f), "--device", "cpu", "--shots", "500", "--seed", "3", "--fuse", "auto",
               "--reference", "dd", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "8 qubits, 14 gates, 2 measured bit(s)" in text and "vs dd: max_rel" in text
    payload = json.loads(out.read_text())
    assert sum(payload["counts"].values()) == 500
    assert all(len(k) == 4 and k[1:3] == "00" for k in payload["counts"])  # clbits 1, 2 are never written
    assert payload["reference"]["l2_rel"] <= 1e-14
    # an 8-qubit circuit of 1-2 qubit gates runs as stages on a CPU by default
    assert payload["stages"]["use"] and payload["stages"]["stages"] >= 1


def test_cli_run_errors(tmp_path, capsys):
    from qsim_tc.cli import main

    f = tmp_path / "bad.qasm"
    f.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\nh q[0]\n')
    assert main(["run", str(f), "--device", "cpu"]) == 2
    assert "qsim-tc run: error: OpenQASM 2 syntax error in" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.qasm"), "--device", "cpu"]) == 2
    assert "no such file exists" in capsys.readouterr().err
    g = tmp_path / "ok.qasm"
    g.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\nh q[0];\n')
    assert main(["run", str(g), "--device", "cpu", "--fuse", "wide"]) == 2
    assert "--fuse must be none, auto or an int d in 1..14 (the widest fused block), got 'wide'" in capsys.readouterr().err
