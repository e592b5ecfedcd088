"""Accuracy of every backend on a 20-qubit brickwork circuit, against the double-double reference.

    python examples/accuracy_table.py                       # native, native32 (and, on a GPU, int8-auto, tc-auto)
    python examples/accuracy_table.py --backends native,int8-auto --mirror --plot acc.png

Prints one row per backend: time, speed relative to native, and the errors against the DD
reference (relative error of Re(amplitude 0), max / mean relative amplitude error, relative L2
error, infidelity, norm drift); with --mirror also the error of circuit + inverse vs |0...0>.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gemm  # noqa: E402
from circuits import brickwork  # noqa: E402
from qsim_tc.accuracy import accuracy_table, describe_circuit, format_table, plot_rows  # noqa: E402

# on a CPU the emulated methods reproduce tensor-core arithmetic bit for bit, 5-200x slower than native:
# the default there keeps to the native ones (name others with --backends)
DEFAULT = {"gpu": ("native", "native32", "int8-auto", "tc-auto"), "cpu": ("native", "native32")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qubits", type=int, default=20)
    p.add_argument("--gate-qubits", type=int, default=4)
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backends", default=None,
                   help=f"comma-separated GEMM methods ({', '.join(gemm.methods())}); default "
                        f"{','.join(DEFAULT['gpu'])} on a GPU, {','.join(DEFAULT['cpu'])} on a CPU")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    p.add_argument("--mirror", action="store_true", help="also run circuit + inverse and compare with |0...0>")
    p.add_argument("--plot", help="write a PNG of errors and times per backend")
    args = p.parse_args()

    dev = gemm.resolve_device(args.device)
    backends = args.backends.split(",") if args.backends else list(DEFAULT["gpu" if dev.is_gpu else "cpu"])
    circ = brickwork(args.qubits, args.gate_qubits, args.depth, seed=args.seed)
    print(f"{describe_circuit(circ)}: {len(circ)} gates; reference: double-double")
    rows = accuracy_table(circ, backends, device=dev, reference="dd", mirror=args.mirror, progress=True)
    print(format_table(rows))
    if args.plot:
        print(f"wrote {plot_rows(rows, args.plot, circuit=circ)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
