"""OpenQASM import under careless or hostile input: includes confined to the program's folder,
every malformed program a CircuitError naming its line, sizes checked before work grows."""

import importlib.util
import os
import time

import numpy as np
import pytest

pytest.importorskip("qiskit")

from qiskit import QuantumCircuit  # noqa: E402
from qiskit.circuit import Gate as QiskitGate  # noqa: E402

from circuits import CircuitError, from_qasm, from_qiskit, limits  # noqa: E402
from circuits.qasm import parse_qasm  # noqa: E402

HAS_QASM3 = importlib.util.find_spec("qiskit_qasm3_import") is not None
needs_qasm3 = pytest.mark.skipif(not HAS_QASM3, reason="needs qiskit-qasm3-import")
HEAD2 = 'OPENQASM 2.0;\ninclude "qelib1.inc";\n'
HEAD3 = 'OPENQASM 3.0;\ninclude "stdgates.inc";\n'


def program(folder, text, name="prog.qasm"):
    path = folder / name
    path.write_text(text)
    return path


# --- class 5: includes --------------------------------------------------------------------------


@pytest.fixture
def secret(tmp_path):
    """A file outside the program's folder whose first word must never reach a message."""
    (tmp_path / "secret.inc").write_text("secrettoken q;\n")
    (tmp_path / "prog").mkdir()
    return tmp_path


@pytest.mark.parametrize("target", ["ABS", "../secret.inc", "sub/../../secret.inc", "/proc/self/environ",
                                    "/etc/passwd"])
def test_include_outside_the_folder_is_refused_without_quoting_it(secret, target):
    target = str(secret / "secret.inc") if target == "ABS" else target
    f = program(secret / "prog", f'{HEAD2}include "{target}";\nqreg q[1];\n')
    with pytest.raises(CircuitError, match=r"prog\.qasm, line 3: include .* must name a file inside the "
                                           r"program's folder \(no absolute path, no '\.\.'\)") as info:
        from_qasm(f)
    assert "secrettoken" not in str(info.value) and "root:" not in str(info.value)


def test_include_through_a_link_out_of_the_folder_is_refused(secret):
    os.symlink(secret / "secret.inc", secret / "prog" / "link.inc")
    f = program(secret / "prog", f'{HEAD2}include "link.inc";\nqreg q[1];\n')
    with pytest.raises(CircuitError, match=r"line 3: include 'link.inc' is not a file inside the program's "
                                           r"folder") as info:
        from_qasm(f)
    assert "secrettoken" not in str(info.value)


def test_program_text_includes_only_the_standard_library(secret, monkeypatch):
    monkeypatch.chdir(secret)  # the working directory is no include path
    with pytest.raises(CircuitError, match=r"<input>, line 3: include 'secret.inc' names a file, but the program "
                                           r"was given as text"):
        from_qasm(f'{HEAD2}include "secret.inc";\nqreg q[1];\n')


def test_error_in_an_included_file_names_it_but_never_quotes_it(tmp_path):
    (tmp_path / "mine.inc").write_text("gate flip a { x a; }\nsecretword a;\n")
    f = program(tmp_path, f'{HEAD2}include "mine.inc";\nqreg q[1];\n')
    with pytest.raises(CircuitError, match=r"OpenQASM 2 syntax error in .*prog\.qasm: in included file 'mine.inc', "
                                           r"line 2, column 0") as info:
        from_qasm(f)
    assert "secretword" not in str(info.value)


def test_nested_and_recursive_includes(tmp_path):
    (tmp_path / "a.inc").write_text('include "b.inc";\n')
    (tmp_path / "b.inc").write_text('gate flip a { x a; }\n')
    f = program(tmp_path, f'{HEAD2}include "a.inc";\nqreg q[1];\nflip q[0];\n')
    assert len(from_qasm(f)) == 1
    (tmp_path / "b.inc").write_text('include "a.inc";\n')
    with pytest.raises(CircuitError, match=r"included file 'b.inc', line 1: included file 'a.inc' includes itself"):
        from_qasm(f)
    (tmp_path / "b.inc").write_text('include "/etc/passwd";\n')
    with pytest.raises(CircuitError, match=r"included file 'b.inc', line 1: an include must name a file inside"):
        from_qasm(f)


def test_cli_param_path_confines_includes_too(secret, capsys):
    from qsim_tc.cli import main

    f = program(secret / "prog", f'OPENQASM 3.0;\ninclude "{secret / "secret.inc"}";\ninput float t;\nqubit q;\n')
    assert main(["run", str(f), "--device", "cpu", "--param", "t=0.1"]) == 2
    err = capsys.readouterr().err
    assert "qsim-tc run: error:" in err and "secrettoken" not in err and "Traceback" not in err
    g = program(secret / "prog", f'{HEAD2}include "../secret.inc";\nqreg q[1];\n', "two.qasm")
    assert main(["run", str(g), "--device", "cpu", "--param", "t=0.1"]) == 2
    err = capsys.readouterr().err
    assert "must name a file inside the program's folder" in err and "secrettoken" not in err


# --- class 6: every malformed program a CircuitError naming the line --------------------------

MALFORMED3 = [
    ("qubit[2] q;\nh q[5];\n", r"4,0: an index is out of range"),  # the commonest mistake
    ("qubit[1] q;\nrx(1/0) q[0];\n", r"4,0: ZeroDivisionError"),
    ("qubit[2] q;\nh q[18446744073709551616];\n", r"line 4: the integer 18446744073709551616 does not fit 64 bits"),
    ("qubit[18446744073709551616] q;\n", r"line 3: the integer 18446744073709551616 does not fit 64 bits"),
    ("qubit[2] q;\nqubit[63] r;\n", r"line 4: 65 qubits declared, more than the 64 a state vector can hold"),
    ("qubit[2] q;\nbit[70000] c;\n", r"line 4: 70000 classical bits declared, more than the limit of 1024"),
    ("qubit[2] q;\nbit[70000 + 0] c;\n", r"4,0: 70,000 classical bits declared, more than the limit of 1,024"),
    ("qubit[70 - 6] q;\nqubit[1] r;\n", r"4,0: 65 qubits declared, more than the limit of 64"),
    ("qubit q;\n" + "".join(f"bit c{i};\n" for i in range(5000)), r"line 1028: 1025 classical bits declared"),
    ("h $99999999;\n", r"line 3: physical qubit \$99999999 needs 100000000 qubits, more than the 64"),
    ("qubit[1] q;\nrx(" + "(" * 200 + "1" + ")" * 200 + ") q[0];\n", r"line 4: brackets nested more than 64 deep"),
    ("gphase(1e999);\nqubit[1] q;\n", r"global_phase of .* is nan; a phase must be a finite number"),
]


@needs_qasm3
@pytest.mark.parametrize("body,message", MALFORMED3)
def test_malformed_openqasm3_raises_circuit_error_with_the_line(body, message):
    with pytest.raises(CircuitError, match=message):
        from_qasm(HEAD3 + body)


MALFORMED2 = [
    ("qreg q[18446744073709551616];\n", r"line 3: the integer 18446744073709551616 does not fit 64 bits"),
    ("qreg q[1];\nrx(0x1ffffffffffffffff) q[0];\n", r"line 4: the integer 0x1ffffffffffffffff does not fit"),
    ("qreg q[1];\nrx(1/0) q[0];\n", r"<input>:4,4: cannot divide by zero"),
    ("qreg q[1];\nrx(" + "(" * 100000 + "1" + ")" * 100000 + ") q[0];\n", r"line 4: brackets nested more than 64"),
]


@pytest.mark.parametrize("body,message", MALFORMED2)
def test_malformed_openqasm2_raises_circuit_error_with_the_line(body, message, capfd):
    with pytest.raises(CircuitError, match=message):
        from_qasm(HEAD2 + body)
    assert "panicked" not in capfd.readouterr().err  # the Rust parser never reached the literal


class FakePanic(BaseException):
    """As qiskit's Rust PanicException: a BaseException, not an Exception."""


@pytest.mark.parametrize("exc", [FakePanic("boom"), IndexError("list index out of range"), OverflowError("big"),
                                 TypeError("bad"), RecursionError("deep")])
def test_any_parser_failure_is_a_circuit_error(monkeypatch, exc):
    from qiskit import qasm2

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(qasm2, "loads", fail)
    with pytest.raises(CircuitError, match=r"OpenQASM 2 program <input> (could not be parsed: "
                                           rf"{type(exc).__name__}|is nested too deeply)"):
        from_qasm(HEAD2 + "qreg q[1];\n")


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interruptions_are_not_caught(monkeypatch, exc):
    from qiskit import qasm2

    def fail(*args, **kwargs):
        raise exc()

    monkeypatch.setattr(qasm2, "loads", fail)
    with pytest.raises(exc):
        from_qasm(HEAD2 + "qreg q[1];\n")


def test_from_qiskit_wraps_what_an_instruction_raises():
    class Broken(QiskitGate):
        def __init__(self):
            super().__init__("broken", 1, [])

        def _define(self):
            raise IndexError("tuple index out of range")

    qc = QuantumCircuit(2)
    qc.h(0)
    qc.append(Broken(), [1])
    with pytest.raises(CircuitError, match=r"instruction 1 \('broken'\) cannot be converted: IndexError: tuple index"):
        from_qiskit(qc)


def test_from_qasm_keeps_type_errors_of_its_own_arguments():
    with pytest.raises(TypeError, match=r"from_qasm: .*unexpected keyword argument 'bogus'"):
        from_qasm(HEAD2 + "qreg q[1];\n", bogus=1)


# --- class 7: sizes checked before the work grows ------------------------------------------------


def doubling(head, levels, reg, params=False):
    p, a = ("(t)", "(t)") if params else ("", "")
    lines = [head.rstrip("\n"), f"gate g0{p} a {{ {'rx(t)' if params else 'h'} a; }}"]
    lines += [f"gate g{i}{p} a {{ g{i - 1}{a} a; g{i - 1}{a} a; }}" for i in range(1, levels + 1)]
    lines += [reg, f"g{levels}{'(0.1)' if params else ''} q[0];"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("head,reg", [(HEAD2, "qreg q[1];"), pytest.param(HEAD3, "qubit[1] q;", marks=needs_qasm3)])
def test_doubling_gate_definitions_are_refused_at_once(head, reg):
    t0 = time.perf_counter()
    with pytest.raises(CircuitError, match=r"line 18: gate 'g15' expands to 32,768 instructions, more than the "
                                           r"limit of 16,384 per definition"):
        from_qasm(doubling(head, 30, reg))
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("head,reg", [(HEAD2, "qreg q[1];"), pytest.param(HEAD3, "qubit[1] q;", marks=needs_qasm3)])
def test_nested_definitions_within_the_limit_cost_one_product_per_definition(head, reg):
    """12 doublings of h: 4,096 h gates in one 1-qubit gate, the identity; Operator(definition)
    took 47 s here, one matrix per distinct definition takes milliseconds."""
    t0 = time.perf_counter()
    c = from_qasm(doubling(head, 12, reg))
    assert time.perf_counter() - t0 < 10
    assert len(c) == 1 and np.abs(c.gates[0].matrix - np.eye(2)).max() < 1e-12


@pytest.mark.parametrize("head,reg", [(HEAD2, "qreg q[1];"), pytest.param(HEAD3, "qubit[1] q;", marks=needs_qasm3)])
def test_parameter_binding_through_nested_definitions_is_bounded(head, reg):
    with pytest.raises(CircuitError, match=r"calls up to this one of 'g1[0-9]' bind parameters into [0-9,]+ nested "
                                           r"gate instructions, more than the limit of 2,048"):
        from_qasm(doubling(head, 12, reg, params=True))
    c = from_qasm(doubling(head, 6, reg, params=True))  # 64 rotations by 0.1: one rotation by 6.4
    want = QuantumCircuit(1)
    want.rx(6.4, 0)
    from qiskit.quantum_info import Operator

    assert np.abs(c.gates[0].matrix - Operator(want).data).max() < 1e-12


@pytest.mark.parametrize("text", [HEAD2 + "qreg q[1000000];\nh q;\n", HEAD2 + "qreg q[40];\nqreg r[40];\nh q;\n",
                                  pytest.param(HEAD3 + "qubit[100000] q;\nh q;\n", marks=needs_qasm3)])
def test_wide_registers_are_refused_before_any_broadcast(text):
    t0 = time.perf_counter()
    with pytest.raises(CircuitError, match=r"line [34]: [0-9]+ qubits declared, more than the 64 a state vector "
                                           r"can hold"):
        from_qasm(text)
    assert time.perf_counter() - t0 < 5


def test_from_qiskit_checks_width_and_expanded_size():
    with pytest.raises(CircuitError, match=r"has 100 qubits, more than the limit of 64"):
        from_qiskit(QuantumCircuit(100))
    inner = QuantumCircuit(12)
    inner.h(range(12))
    gate = QiskitGate("g0", 12, [])
    gate.definition = inner
    for level in range(1, 18):  # 12 * 2^17 h gates once the 12-qubit gates are inlined
        outer = QuantumCircuit(12)
        outer.append(gate, range(12), copy=False)
        outer.append(gate, range(12), copy=False)
        gate = QiskitGate(f"g{level}", 12, [])
        gate.definition = outer  # shared, not copied: the circuit is small, its expansion is not
    qc = QuantumCircuit(12)
    qc.append(gate, range(12))
    t0 = time.perf_counter()
    with pytest.raises(CircuitError, match=r"expands to more than 1,048,576 instructions \(the limit\) once "
                                           r"definitions are inlined, by instruction 0"):
        from_qiskit(qc)
    assert time.perf_counter() - t0 < 5


def test_limits_are_what_the_messages_say():
    assert limits.MAX_QUBITS == 64 and limits.MAX_INSTRUCTIONS == 1 << 20 and limits.MAX_DEFINITION_SIZE == 1 << 14


def test_parse_qasm_gives_qiskits_circuit_named_after_the_file(tmp_path):
    qc = parse_qasm(program(tmp_path, HEAD2 + "qreg q[2];\ncx q[0], q[1];\n"))
    assert isinstance(qc, QuantumCircuit) and qc.name == "prog" and qc.num_qubits == 2


# --- the CLI: one line, no traceback ---------------------------------------------------------------

CLI_CASES = [
    HEAD2 + "qreg q[100000];\nh q;\n",
    HEAD2 + "qreg q[18446744073709551616];\n",
    HEAD2 + 'include "/proc/self/environ";\nqreg q[1];\n',
    doubling(HEAD2, 30, "qreg q[1];"),
    pytest.param(HEAD3 + "qubit[2] q;\nh q[5];\n", marks=needs_qasm3),
    pytest.param(HEAD3 + "qubit[1] q;\nrx(1/0) q[0];\n", marks=needs_qasm3),
]


@pytest.mark.parametrize("text", CLI_CASES)
def test_cli_prints_one_line_for_a_hostile_program(tmp_path, capfd, text):
    from qsim_tc.cli import main

    f = program(tmp_path, text)
    assert main(["run", str(f), "--device", "cpu"]) == 2
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and "warning" not in ln.lower()]
    assert len(lines) == 1 and lines[0].startswith("qsim-tc run: error: "), err


@needs_qasm3
@pytest.mark.parametrize("modifier,levels", [("inv @ ", 13), ("pow(2) @ ", 13), ("pow(0.5) @ ", 13),
                                             ("ctrl @ ", 13), ("negctrl @ inv @ pow(-3) @ ", 4),
                                             ("ctrl(2) @ pow(1.5) @ ", 4)])
def test_modifiers_on_nested_definitions_are_exact_and_cheap(modifier, levels):
    """inv/pow/ctrl of a defined gate: Qiskit's own inverse(), power() and control() expand every
    nested definition (8 s for 10 doublings); annotations over the shared matrix take milliseconds."""
    from qiskit import qasm3
    from qiskit.quantum_info import Statevector

    from qsim_tc import Simulator

    qubits = "q[1], q[2], q[0]" if "ctrl(2)" in modifier else "q[1], q[0]" if "ctrl" in modifier else "q[0]"
    lines = [HEAD3.rstrip("\n"), "gate d0 a { h a; t a; }"]
    lines += [f"gate d{i} a {{ d{i - 1} a; d{i - 1} a; }}" for i in range(1, levels + 1)]
    lines += ["qubit[3] q;", "h q;", "ry(0.4) q[1];", f"{modifier}d{levels} {qubits};"]
    text = "\n".join(lines) + "\n"
    t0 = time.perf_counter()
    c = from_qasm(text)
    assert time.perf_counter() - t0 < 5
    if levels <= 4:  # small enough for Qiskit's own expansion to be the reference
        got = Simulator("native", device="cpu").run(c).state.to_numpy()
        assert np.abs(got - Statevector(qasm3.loads(text)).data).max() < 1e-12


@needs_qasm3
def test_openqasm3_syntax_errors_print_nothing_themselves(capfd):
    with pytest.raises(CircuitError, match=r"OpenQASM 3 syntax error in <input>: line 4"):
        from_qasm(HEAD3 + "qubit[2] q;\nh q[0]é;\n")
    assert capfd.readouterr().err == ""
