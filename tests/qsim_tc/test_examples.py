"""The example scripts run and print what they promise (small sizes, CPU)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
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
    # a staged run reports the circuit's gates and its stages, with a measured time per stage
    from circuits import brickwork

    n_gates = len(brickwork(10, 4, 4, seed=1))
    assert re.search(rf"{n_gates} gates in [1-9]\d* stages, \d+\.\d\d ms per stage", out), out
    assert "0.00 ms per gate" not in out


@pytest.mark.parametrize("script,args", [("accuracy_table.py", ["--qubits", "8", "--depth", "3", "--device", "cpu",
                                                                "--backends", "native,int8-auto"])])
def test_accuracy_example(script, args):
    out = run(script, *args)
    assert "int8-auto" in out and "infidelity" in out


def test_qiskit_import_example():
    pytest.importorskip("qiskit")
    out = run("qiskit_import.py", "--device", "cpu")
    line = next(x for x in out.splitlines() if "max |amplitude - Qiskit Statevector|" in x)
    assert float(line.split("=")[-1]) < 1e-12


def _dropin_circuit():
    """The example's circuit (examples/sampler_dropin.py), its sweep point 22 bound."""
    from qiskit.circuit import ClassicalRegister, Parameter, QuantumCircuit, QuantumRegister

    qreg = QuantumRegister(3)
    alpha, beta = ClassicalRegister(2, "alpha"), ClassicalRegister(1, "beta")
    qc = QuantumCircuit(qreg, alpha, beta)
    qc.h(0)
    qc.cx(0, 1)
    qc.cx(1, 2)
    qc.ry(Parameter("a"), 0)
    qc.rz(Parameter("b"), 0)
    qc.cx(1, 2)
    qc.cx(0, 1)
    qc.h(0)
    params = np.vstack([np.linspace(-np.pi, np.pi, 100), np.linspace(-4 * np.pi, 4 * np.pi, 100)]).T
    return qc.assign_parameters(params[22])


def test_sampler_dropin_example_prints_the_right_values():
    pytest.importorskip("qiskit")
    from qiskit.quantum_info import SparsePauliOp, Statevector
    from scipy.stats import chisquare

    out = run("sampler_dropin.py", "--device", "cpu").splitlines()
    assert out[0] == "alpha: (100,) x 256 shots of 2 bits"
    assert out[1].startswith("counts at sweep point 22: ") and out[2].startswith("expectation values: (3, 100) ")
    counts = ast.literal_eval(out[1].split(": ", 1)[1])
    assert sum(counts.values()) == 256 and set(counts) <= {"00", "01", "10", "11"}
    sv = Statevector(_dropin_circuit())
    probs = sv.probabilities([0, 1])  # alpha = (qubit 1, qubit 0), bit 0 rightmost
    observed = [counts.get(format(i, "02b"), 0) for i in range(4)]
    assert chisquare(observed, probs * 256).pvalue > 1e-3  # seeded: the same samples every run
    evs = [float(x) for x in out[2].split("[")[1].rstrip("]").split()]
    exact = [sv.expectation_value(SparsePauliOp(["IXX", "IIY"], [0.5, 0.5])).real,
             sv.expectation_value(SparsePauliOp("IXX")).real, sv.expectation_value(SparsePauliOp("IIY")).real]
    assert np.abs(np.array(evs) - exact).max() <= 5e-7 + 1e-12  # printed rounded to 6 decimals
