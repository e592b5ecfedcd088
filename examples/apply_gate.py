"""Apply gates by hand and inspect amplitudes: a Bell pair, a Toffoli on scattered qubits, and
a Haar-random 3-qubit gate, with the path the engine chose for each.

    python examples/apply_gate.py

Qubit order is Qiskit's: qubit 0 is the least significant bit of a basis-state index, and the
first qubit listed for a gate is the least significant bit of its matrix index.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from circuits import haar_unitary  # noqa: E402
from qsim_tc import StateVector  # noqa: E402

H = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
CX = np.array([[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0]])  # control = first qubit listed
CCX = np.eye(8)
CCX[[3, 7]] = CCX[[7, 3]]  # flips the third listed qubit when the first two are 1


def show(state: StateVector, label: str) -> None:
    amps = state.to_numpy()
    nz = np.flatnonzero(np.abs(amps) > 1e-12)
    terms = " + ".join(f"({amps[i]:.3f})|{i:0{state.n_qubits}b}>" for i in nz[:8])
    print(f"{label:32s} {terms}{' + ...' if len(nz) > 8 else ''}")


def main() -> int:
    st = StateVector(5, device="cpu")
    info = st.apply(H, [0])
    show(st, f"H on q0 ({info.path})")
    info = st.apply(CX, [0, 3])
    show(st, f"CX q0 -> q3 ({info.path})")
    print(f"  amplitude(0b01001) = {st.amplitude(0b01001):.6f}, P = {st.probabilities()[0b01001]:.3f}")

    st.apply(np.array([[0, 1], [1, 0]]), [4])  # X on q4
    info = st.apply(CCX, [4, 0, 2])            # Toffoli: controls q4, q0; target q2
    show(st, f"X q4, CCX (q4,q0)->q2 ({info.path})")

    u = haar_unitary(8, np.random.default_rng(0))
    info = st.apply(u, [3, 1, 4])
    show(st, f"Haar 3-qubit on (3,1,4) ({info.path})")
    print(f"  norm after all gates: {st.norm():.15f}")
    print(f"  GEMM report of the last gate: {info.report.to_dict() if info.report else None}")

    try:
        st.apply(np.ones((2, 2)), [0])
    except ValueError as exc:
        print(f"  a non-unitary matrix is refused: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
