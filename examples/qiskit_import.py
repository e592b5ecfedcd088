"""Import a Qiskit circuit (or OpenQASM text), simulate it with qsim-tc, check it, sample it.

    python examples/qiskit_import.py [--qubits 12] [--backend native] [--device auto]
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit.library import QFTGate
from qiskit.quantum_info import Statevector

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too

from circuits import from_qasm, from_qiskit  # noqa: E402
from qsim_tc import Simulator  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=12)
    p.add_argument("--backend", default="native")
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    n = args.qubits

    # any Qiskit circuit: here a GHZ-like preparation, a QFT as one gate, final measurements
    qc = QuantumCircuit(n, n)
    qc.h(0)
    for q in range(n - 1):
        qc.cx(q, q + 1)
    qc.rz(0.3, n // 2)
    qc.append(QFTGate(n).definition, range(n))
    qc.measure(range(n), range(n))

    circ = from_qiskit(qc)  # one Gate per instruction, Qiskit's qubit order, measurements recorded
    print(f"{circ}: {len(circ)} gates, widest {circ.max_gate_qubits} qubits, measured {len(circ.measured)} bits")

    sim = Simulator(args.backend, device=args.device)  # stages or fused gates, whichever is expected faster
    result = sim.run(circ)
    if "stages" in result.metadata and result.metadata["stages"]["use"]:
        how = f"as stages: {result.metadata['stages']['why']}"
    else:
        ch = sim.fusion_choice
        how = f"fused into {ch.n_blocks if ch.max_qubits else len(circ)} gates (d={ch.max_qubits})"
    print(f"{how}; {result.wall_s:.3f} s on {result.device}")

    exact = Statevector(qc.remove_final_measurements(inplace=False)).data
    err = np.abs(result.state.to_numpy() - exact).max()
    print(f"max |amplitude - Qiskit Statevector| = {err:.2e}")

    samples = result.state.sample(1000, seed=1, qubits=[q for q, _ in circ.measured])
    values, counts = np.unique(samples, return_counts=True)
    top = np.argsort(counts)[::-1][:5]
    print("most frequent outcomes:", {format(int(values[i]), f"0{n}b"): int(counts[i]) for i in top})

    # the same from OpenQASM 2 text
    text = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[3];\nh q[0];\ncx q[0],q[2];\nu3(0.1,0.2,0.3) q[1];\n'
    small = from_qasm(text)
    amplitudes = Simulator(device=args.device).run(small).state.to_numpy()
    print("from OpenQASM:", small, "amplitudes:", np.round(amplitudes, 4))


if __name__ == "__main__":
    main()
