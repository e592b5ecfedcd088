"""qsim-tc's Sampler and Estimator where Qiskit's StatevectorSampler / StatevectorEstimator were used.

Only the import and the constructor change; PUBs, parameter sweeps, shots and results are the same.

    python examples/sampler_dropin.py [--backend native] [--device auto]
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from qiskit.circuit import ClassicalRegister, Parameter, QuantumCircuit, QuantumRegister
from qiskit.quantum_info import SparsePauliOp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too

# was: from qiskit.primitives import StatevectorSampler, StatevectorEstimator
from qsim_tc.qiskit import Estimator, Sampler  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="native", help="any qsim-tc backend (gemm.methods())")
    p.add_argument("--device", default="auto")
    args = p.parse_args()

    qreg = QuantumRegister(3)
    alpha, beta = ClassicalRegister(2, "alpha"), ClassicalRegister(1, "beta")
    circuit = QuantumCircuit(qreg, alpha, beta)
    circuit.h(0)
    circuit.cx(0, 1)
    circuit.cx(1, 2)
    circuit.ry(Parameter("a"), 0)
    circuit.rz(Parameter("b"), 0)
    circuit.cx(1, 2)
    circuit.cx(0, 1)
    circuit.h(0)
    circuit.measure([0, 1], alpha)
    circuit.measure([2], beta)

    params = np.vstack([np.linspace(-np.pi, np.pi, 100), np.linspace(-4 * np.pi, 4 * np.pi, 100)]).T

    sampler = Sampler(backend=args.backend, device=args.device, seed=7)  # was: StatevectorSampler(seed=7)
    result = sampler.run([(circuit, params)], shots=256).result()[0]
    print("alpha:", result.data.alpha.shape, "x", result.data.alpha.num_shots, "shots of",
          result.data.alpha.num_bits, "bits")
    print("counts at sweep point 22:", result.data.alpha.get_counts(22))

    estimator = Estimator(backend=args.backend, device=args.device)  # was: StatevectorEstimator()
    observables = [[SparsePauliOp(["IXX", "IIY"], [0.5, 0.5])], [SparsePauliOp("IXX")], [SparsePauliOp("IIY")]]
    unmeasured = circuit.remove_final_measurements(inplace=False)
    evs = estimator.run([(unmeasured, observables, params)]).result()[0].data.evs  # shape (3, 100)
    print("expectation values:", evs.shape, "at sweep point 22:", np.round(evs[:, 22], 6))


if __name__ == "__main__":
    main()
