"""Measured cost of one d-qubit gate, per device, state dtype and backend: the one table fusion reads.

Each row says where it was measured. ``ms[d]`` is the time of one d-qubit gate on a state of
``n_qubits`` qubits; other sizes scale by 2^(n - n_qubits) (every gate is a pass over the state).
``permute_ms`` is added per gate when the row timed the product alone, not a gate at a random
position (which usually costs the engine one permutation of the state as well).

Regenerate a row with ``python benchmarks/bench_qiskit.py costs`` on the machine in question
(it prints the row in this file's syntax); widths missing from a row are interpolated in log
space between their neighbours and held constant beyond the ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


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
        return t


# CPU: this project's engine (commit 03a6b49) through StateVector.apply, numpy 2.4 / OpenBLAS, 2
# cores of an AMD EPYC, 22 qubits, Haar gates on random qubit sets in sequence (so the
# permutations the lazy layout needs are included), median of 8 gates (4 for d >= 9).
# GPU: DESIGN.md's measured ceilings (one H200, cupy 14.2, cuBLAS 13.1, 28 qubits): the ZGEMM /
# CGEMM of one gate, plus 6 ms for the permutation a gate at a random position usually needs.
TABLE: tuple[CostRow, ...] = (
    CostRow("cpu", "complex128", "native", 22,
            {1: 23.82, 2: 44.93, 3: 43.65, 4: 45.33, 5: 52.81, 6: 63.64, 7: 93.69, 8: 123.2, 9: 224.58,
             10: 412.25},
            machine="AMD EPYC, 2 cores, 23 GiB, numpy 2.4.6", source="bench_qiskit.py costs, median of 8 (4 for d >= 9)"),
    CostRow("gpu", "complex128", "native", 28,
            {2: 26.7, 4: 6.8, 6: 4.3, 8: 12.8, 10: 40.5, 12: 165.0}, permute_ms=6.0,
            machine="NVIDIA H200, cupy 14.2, cuBLAS 13.1", source="DESIGN.md measured ceilings (ZGEMM gate)"),
    CostRow("gpu", "complex64", "native32", 28,
            {6: 3.2, 8: 10.2, 10: 39.9}, permute_ms=3.0,
            machine="NVIDIA H200, cupy 14.2, cuBLAS 13.1", source="DESIGN.md measured ceilings (CGEMM gate)"),
)


def lookup(backend: str, device: str, dtype: str) -> tuple[CostRow, str]:
    """The row for ``backend`` on ``device``; else the native row of the same device and dtype.

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
    row = same[0]
    return row, f"no cost row for {backend!r} on {device}; using {row.backend!r} ({row.dtype})"
