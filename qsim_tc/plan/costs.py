"""Measured cost of one d-qubit gate, per device, state dtype and backend: the engine's cost model,
the one table the choice of fusion size (:mod:`qsim_tc.plan.fusion`) reads.

Each row says where it was measured. ``ms[d]`` is the time of one d-qubit gate on a state of
``n_qubits`` qubits; other sizes scale by 2^(n - n_qubits) (every gate is a pass over the state).
``permute_ms`` is added per gate when the row timed the product alone, not a gate at a random
position (which usually costs the engine one permutation of the state as well), and
``overhead_ms`` per gate whatever the size.

Regenerate a row with ``python -m benchmarks.bench.qiskit_circuits costs`` on the machine in question
(it prints the row in this file's syntax); widths missing from a row are interpolated in log
space between their neighbours and held constant beyond the ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

# the engine's fixed cost of one gate (measured: 0.13-0.16 ms per gate on a 6-qubit CPU state);
# it keeps fusion from paying matrix products for nothing on small states
PER_GATE_OVERHEAD_MS = 0.15


@dataclass(frozen=True)
class CostRow:
    """Per-gate times of one backend on one device, by gate width d."""

    device: str  # "cpu" or "gpu"
    dtype: str  # state dtype: "complex128" or "complex64"
    backend: str  # the GEMM method measured
    n_qubits: int  # state size of the measurement
    ms: dict = field(default_factory=dict)  # d -> milliseconds per gate
    permute_ms: float = 0.0  # added per gate (0 when ms already includes the permutation)
    machine: str = ""
    source: str = ""
    kernel_max_d: int = 0  # widths served by a dedicated small-gate kernel only this backend gets
    overhead_ms: float = PER_GATE_OVERHEAD_MS  # per gate, whatever the size (Python, checks, launches)

    def gate_ms(self, d: int, n_qubits: int | None = None) -> float:
        """Estimated milliseconds of one d-qubit gate on an ``n_qubits`` state."""
        ds = sorted(self.ms)
        if d <= ds[0]:
            t = self.ms[ds[0]]
        elif d >= ds[-1]:
            t = self.ms[ds[-1]] * 4.0 ** (d - ds[-1])  # GEMM flops grow 4x per qubit at the top end
        elif d in self.ms:
            t = self.ms[d]
        else:
            lo = max(x for x in ds if x < d)
            hi = min(x for x in ds if x > d)
            w = (d - lo) / (hi - lo)
            t = math.exp((1 - w) * math.log(self.ms[lo]) + w * math.log(self.ms[hi]))
        t += self.permute_ms
        if n_qubits is not None:
            t *= 2.0 ** (n_qubits - self.n_qubits)
        return t + self.overhead_ms


# CPU: this project's engine through StateVector.apply, numpy 2.4 / OpenBLAS, 2 cores of an AMD
# EPYC, 22 qubits, Haar gates on random qubit sets in sequence (so the permutations the lazy
# layout needs are included). Each figure is the smallest of three runs' medians of 8 gates
# (bench.qiskit_circuits costs; other work on the shared machine inflated single runs by up to 3x):
# d <= 7 after commit ad6bf80 (permute rather than many small batched products), d >= 8 (GEMM
# bound) from a run at 03a6b49.
TABLE: tuple[CostRow, ...] = (
    CostRow("cpu", "complex128", "native", 22,
            {1: 16.37, 2: 17.61, 3: 18.63, 4: 24.29, 5: 35.65, 6: 48.05, 7: 69.0, 8: 123.2, 9: 218.29,
             10: 412.25},
            machine="AMD EPYC, 2 cores, 23 GiB, numpy 2.4.6",
            source="bench.qiskit_circuits costs, smallest of three medians of 8"),
)

# GPU, one H200 (cupy 14.2, cuBLAS 13.1), 28 qubits, complex128 unless said:
# - native and native32: measured by `bench.qiskit_circuits costs --device gpu --qubits 28` (Haar gates on
#   random qubit sets through the engine, permutations included; median of 8, of 4 for d >= 9;
#   benchmarks/results/gate_costs_h200.json; native d <= 8 again after the DMMA kernel took
#   complex128 d = 5, 6: gate_costs_h200_dmma.json); native d = 12 from benchmarks/results/apply_h200.json
#   (228-238 ms) plus 6 ms of permutation;
# - int8 (13 slices) and int8-auto (T = 0): benchmarks/results/ozaki_h200.json, bottom
#   orientation, plus 6 ms for the permutation a fused block on scattered qubits usually needs;
#   held constant below d = 6 (no small-gate kernel for them).
_GPU = "NVIDIA H200, cupy 14.2, cuBLAS 13.1"
TABLE += (
    CostRow("gpu", "complex128", "native", 28,
            {1: 2.53, 2: 2.51, 3: 2.51, 4: 2.49, 5: 2.65, 6: 3.12, 7: 9.72, 8: 14.9, 9: 25.29, 10: 53.33,
             12: 240.0},
            machine=_GPU, source="bench.qiskit_circuits costs: d <= 8 gate_costs_h200_dmma.json (DMMA kernel for "
                                 "d = 5, 6), d = 9, 10 gate_costs_h200.json; d=12 from apply_h200.json",
            kernel_max_d=6),
    CostRow("gpu", "complex128", "int8", 28,
            {6: 49.13 + 6, 8: 64.35 + 6, 10: 162.75 + 6},
            machine=_GPU, source="ozaki_h200.json, splits=13, bottom"),
    CostRow("gpu", "complex128", "int8-auto", 28,
            {6: 47.34 + 6, 8: 64.97 + 6, 10: 147.51 + 6},
            machine=_GPU, source="ozaki_h200.json, threshold=0, bottom"),
    CostRow("gpu", "complex64", "native32", 28,
            {1: 1.45, 2: 1.4, 3: 1.41, 4: 1.48, 5: 3.95, 6: 5.18, 7: 7.92, 8: 13.23, 9: 25.04, 10: 55.04},
            machine=_GPU, source="bench.qiskit_circuits costs (gate_costs_h200.json)", kernel_max_d=4),
)


def lookup(backend: str, device: str, dtype: str) -> tuple[CostRow, str]:
    """The row for ``backend`` on ``device``; else a stand-in from the native row of that dtype.

    A stand-in drops the widths the native row owes to its small-gate kernel (emulated methods
    run every gate as a GEMM), so its narrowest GEMM width holds below.

    Returns:
        (row, note): ``note`` says when a stand-in row was used.

    Raises:
        ValueError: no row for ``device`` at all.
    """
    for row in TABLE:
        if row.backend == backend and row.device == device:
            return row, ""
    same = [r for r in TABLE if r.device == device and r.dtype == dtype] or [r for r in TABLE if r.device == device]
    if not same:
        raise ValueError(f"no gate cost row for device {device!r}; rows exist for "
                         f"{sorted({r.device for r in TABLE})}")
    row = next((r for r in same if r.backend.startswith("native")), same[0])
    note = f"no cost row for {backend!r} on {device}; using {row.backend!r} ({row.dtype})"
    if row.kernel_max_d:
        row = replace(row, ms={d: v for d, v in row.ms.items() if d > row.kernel_max_d}, kernel_max_d=0)
        note += " without its small-gate kernel widths"
    return row, note
