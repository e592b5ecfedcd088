"""The example scripts run and print what they promise (small sizes, CPU)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(script, *args):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_apply_gate_example():
    out = run("apply_gate.py")
    assert "amplitude(0b01001) = 0.707107" in out and "norm after all gates: 1.0000000000000" in out
    assert "is refused" in out


def test_brickwork_example():
    out = run("brickwork.py", "--qubits", "10", "--depth", "4", "--device", "cpu")
    assert "norm = 0.99999999999999" in out or "norm = 1.00000000000000" in out
    assert "heaviest outcomes" in out


@pytest.mark.parametrize("script,args", [("accuracy_table.py", ["--qubits", "8", "--depth", "3", "--device", "cpu",
                                                                "--backends", "native,int8-auto"])])
def test_accuracy_example(script, args):
    out = run(script, *args)
    assert "int8-auto" in out and "infidelity" in out


@pytest.mark.parametrize("script", ["qiskit_import.py", "sampler_dropin.py"])
def test_qiskit_examples(script):
    pytest.importorskip("qiskit")
    out = run(script, "--device", "cpu")
    assert out.strip()
    if script == "qiskit_import.py":
        line = next(x for x in out.splitlines() if "max |amplitude - Qiskit Statevector|" in x)
        assert float(line.split("=")[-1]) < 1e-12
