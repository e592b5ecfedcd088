"""Measure the CPU stage executor's fusion costs on this host (``qsim-tc calibrate --device cpu``);
:mod:`qsim_tc.stages.cpu_fuse_calibration` keeps the result.

About 10-20 s: for each amplitude size and k = 1..4, one stage of ``base`` and one of ``gates``
Haar-random k-qubit gates on random local qubits of a 24-qubit state (lowered to fit memory), run
by the executor unfused at its default chunk and threads; an op's cost is the difference of the
two times over the difference of the counts, which takes the stage's load and store out. Runs
alternate over k and the two counts, ``repeats`` times, and the median is kept: a one-second
variant on a state of two chunks had moved by up to 2x between runs on a noisy host, where these
stages at 24 qubits moved by about 10% (docs/results.md, section 11). A wider op is never priced
below a narrower one (noise could order two close widths wrongly).
"""

from __future__ import annotations

import os
import time

import numpy as np

import gemm
from circuits.circuit import Circuit
from circuits.gate import Gate
from circuits.haar import haar_unitary
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages.choice import CPU_LOCAL_QUBITS
from qsim_tc.stages.cpu import run_stages
from qsim_tc.stages.cpu_fuse_calibration import WIDTHS, FuseCalibration, host_key
from qsim_tc.stages.plan import plan_stages

DEFAULT_QUBITS = 24
MIN_QUBITS = 20
DEFAULT_GATES, DEFAULT_BASE = 40, 4
DEFAULT_REPEATS = 3


def _fits(n: int, itemsize: int) -> bool:
    """The state, the executor's spare buffer and room besides fit in the memory available now."""
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return True
    return 3 * (itemsize << n) <= avail


def _stage_circuit(n: int, local: int, k: int, count: int, rng) -> Circuit:
    """``count`` Haar k-qubit gates on random qubits among the top ``local`` (one stage's worth)."""
    pool = np.arange(n - local, n)
    gates = [Gate(haar_unitary(1 << k, rng), tuple(int(q) for q in rng.choice(pool, k, replace=False)),
                  f"u{k}", check_unitary=False) for _ in range(count)]
    return Circuit(n, gates)


def measure(*, itemsizes=(8, 16), n_qubits: int | None = None, gates: int = DEFAULT_GATES, base: int = DEFAULT_BASE,
            repeats: int = DEFAULT_REPEATS, seed: int = 0, progress=None) -> FuseCalibration:
    """Measure this host's fusion costs (module docstring); ms per op of 1..4 targets by itemsize.

    Raises:
        ValueError: bad counts (``gates`` must exceed ``base`` >= 1; ``repeats`` >= 1), an
            itemsize other than 8 and 16, or too little memory for a state of MIN_QUBITS.
    """

    if not (isinstance(base, int) and isinstance(gates, int) and 1 <= base < gates):
        raise ValueError(f"gates must exceed base >= 1, got gates={gates!r}, base={base!r}")
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not itemsizes or set(itemsizes) - {8, 16}:
        raise ValueError(f"itemsizes must be 8 (complex64) and/or 16 (complex128), got {itemsizes!r}")
    t_start = time.perf_counter()
    rng = np.random.default_rng(seed)
    dev = gemm.resolve_device("cpu")
    costs, samples = {}, {}
    n_used = 0
    for item in itemsizes:
        n = DEFAULT_QUBITS if n_qubits is None else int(n_qubits)
        while n_qubits is None and n > MIN_QUBITS and not _fits(n, item):
            n -= 1
        if not _fits(n, item):
            raise ValueError(f"too little memory for a {n}-qubit state of {item}-byte amplitudes (three of its size)")
        n_used = max(n_used, n)
        dtype = np.complex64 if item == 8 else np.complex128
        local = min(CPU_LOCAL_QUBITS[item], n)
        plans = {(k, c): plan_stages(_stage_circuit(n, local, k, c, rng), local) for k in WIDTHS for c in (base, gates)}
        data = (rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)).astype(dtype)
        data /= np.linalg.norm(data)
        phys = PhysicalState(data, dev)
        for p in plans.values():  # warm-up: kernels typed, pages touched, the stage layout reached
            run_stages(phys, p, fuse_cost=())
        per_op: dict[int, list[float]] = {k: [] for k in WIDTHS}
        for _ in range(repeats):
            for k in WIDTHS:
                t = {}
                for c in (base, gates):
                    t0 = time.perf_counter()
                    run_stages(phys, plans[k, c], fuse_cost=())
                    t[c] = time.perf_counter() - t0
                per_op[k].append(1e3 * (t[gates] - t[base]) / (gates - base))
        row, last = [], 0.0
        for k in WIDTHS:
            ms = max(float(np.median(per_op[k])), 1e-6)
            last = max(ms, last)  # a wider op never cheaper than a narrower one
            row.append(float(f"{last:.4g}"))
        costs[item] = tuple(row)
        samples[item] = {k: [float(f"{v:.4g}") for v in per_op[k]] for k in WIDTHS}
        del phys, data
        if progress is not None:
            progress(f"complex{item * 8}: " + " / ".join(f"{v:.2f}" for v in row) + f" ms an op of 1..4 targets "
                     f"({n} qubits)")
    return FuseCalibration(host_key(), costs, n_used, samples, round(time.perf_counter() - t_start, 2),
                           time.strftime("%Y-%m-%dT%H:%M:%S%z"))
