"""The CPU stage executor's fusion costs measured on this host, and their cache.

In-stage fusion (:mod:`qsim_tc.stages.fusion`) prices a dense op of k targets by a table of
k = 1..4. The shipped tables (``stages.cpu``) were measured on a few hosts and keyed by LLVM's CPU
name or the vector width; another host's caches and cores can price wide ops 2x differently (a
Zen 5 against the Xeon the AVX-512 table came from: quantum volume ran 0.77-0.82x the time on its
own table). ``qsim-tc calibrate --device cpu`` measures this host's table (:func:`measure`) and
stores it in the cache folder of the cost tables; the executor reads it at its first run
(``stages.cpu.host_fuse_costs``).

The measurement (about 10-20 s): for each amplitude size and k, one stage of ``base`` and one of
``gates`` Haar-random k-qubit gates on random local qubits of a 24-qubit state (lowered to fit
memory), run by the executor unfused at its default chunk and threads; an op's cost is the
difference of the two times over the difference of the counts, which takes the stage's load and
store out. Runs alternate over k and the two counts, ``repeats`` times, and the median is kept:
a one-second variant on a state of two chunks had moved by up to 2x between runs on a noisy
host, where these stages at 24 qubits moved by about 10% (docs/results.md, section 11). A wider
op is never priced below a narrower one (noise could order two close widths wrongly).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from circuits.circuit import Circuit
from circuits.gate import Gate
from circuits.haar import haar_unitary

WIDTHS = (1, 2, 3, 4)  # the fusion tables' op widths
DEFAULT_QUBITS = 24
MIN_QUBITS = 20
DEFAULT_GATES, DEFAULT_BASE = 40, 4
DEFAULT_REPEATS = 3
FORMAT = 1  # the cache file's layout
MAX_BYTES = 64 << 10  # a table file is under 2 KB; a larger one is not one
_REPORTED: set = set()


class FuseCostWarning(UserWarning):
    """A cached fusion table could not be used (the shipped table serves; ``qsim-tc calibrate
    --device cpu`` writes a new one)."""


@dataclass
class FuseCalibration:
    """A host's measured fusion costs: ``costs[itemsize]`` ms per op of 1..4 targets."""

    key: dict
    costs: dict[int, tuple[float, ...]]
    n_qubits: int
    samples: dict = field(default_factory=dict)  # itemsize -> k -> [per-op ms of each repeat]
    elapsed_s: float = 0.0
    measured_at: str = ""

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "key": self.key, "n_qubits": self.n_qubits,
                           "costs": {str(i): list(c) for i, c in self.costs.items()},
                           "samples": {str(i): {str(k): v for k, v in s.items()} for i, s in self.samples.items()},
                           "elapsed_s": self.elapsed_s, "measured_at": self.measured_at}, indent=1)


def host_key() -> dict:
    """What a fusion table is measured for: the CPU, its cores and caches, and the kernels' code."""
    import numba  # noqa: PLC0415

    from qsim_tc import __version__  # noqa: PLC0415
    from qsim_tc.stages import cpu_kernels, host_cache  # noqa: PLC0415

    return {"device": "cpu", "cpu": cpu_kernels.HOST_CPU, "processor": platform.processor() or platform.machine(),
            "vector_bytes": int(cpu_kernels.VECTOR_BYTES), "cpu_count": os.cpu_count(),
            "caches": {str(level): size for level, size in sorted(host_cache.cache_sizes().items())},
            "qsim_tc": __version__, "numba": numba.__version__, "kernels": _kernels_digest()}


@functools.lru_cache(maxsize=1)
def _kernels_digest() -> str:
    """A digest of the executor's code: a table measured on other kernels is not this one's."""
    from qsim_tc.stages import cpu, cpu_kernels  # noqa: PLC0415

    h = hashlib.sha1()
    for mod in (cpu_kernels, cpu):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()[:12]


def cache_path(key: dict | None = None) -> Path:
    """The host's fusion table in the cost tables' cache folder (:func:`qsim_tc.calibrate.cache_dir`)."""
    from qsim_tc.calibrate import cache_dir  # noqa: PLC0415 - calibrate imports the engine

    key = host_key() if key is None else key
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir() / f"fusion-cpu-{key.get('cpu', 'cpu')}-{digest}.json"


def _valid_costs(costs) -> dict[int, tuple[float, ...]]:
    """``costs`` as {8: (...), 16: (...)}, each four positive finite rising ms; ValueError if not."""
    if not isinstance(costs, dict) or set(costs) != {"8", "16"}:
        raise ValueError("costs must name the amplitude sizes 8 and 16")
    out = {}
    for item, row in costs.items():
        if not (isinstance(row, list) and len(row) == len(WIDTHS)
                and all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in row)
                and all(a <= b for a, b in zip(row, row[1:]))):
            raise ValueError(f"costs[{item}] must be {len(WIDTHS)} positive rising numbers, got {row!r}")
        out[int(item)] = tuple(float(v) for v in row)
    return out


def load(key: dict | None = None) -> dict[int, tuple[float, ...]] | None:
    """The cached table of this host, or None (no file; a bad file is reported once, as a
    :class:`FuseCostWarning`, and ignored)."""
    key = host_key() if key is None else key
    path = cache_path(key)
    try:
        if not path.is_file():
            return None
        if path.stat().st_size > MAX_BYTES:
            raise ValueError(f"{path.stat().st_size} bytes, more than a table takes")
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a fusion table of format {FORMAT}")
        if data.get("key") != key:
            raise ValueError("measured for another host or version")
        return _valid_costs(data.get("costs"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        if (str(path), str(exc)) not in _REPORTED:
            _REPORTED.add((str(path), str(exc)))
            warnings.warn(f"fusion table {path} is not used ({exc}); the shipped table serves until "
                          "`qsim-tc calibrate --device cpu` measures a new one", FuseCostWarning, stacklevel=2)
        return None


def store(cal: FuseCalibration) -> Path:
    """Write ``cal`` to its host's cache file, whole or not at all; return the path."""
    from circuits._atomic import write_atomic  # noqa: PLC0415

    _valid_costs({str(i): list(c) for i, c in cal.costs.items()})  # both sizes, as load wants them
    path = cache_path(cal.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, cal.to_json() + "\n")
    return path


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
    import gemm  # noqa: PLC0415
    from qsim_tc.engine.storage import PhysicalState  # noqa: PLC0415
    from qsim_tc.stages.choice import CPU_LOCAL_QUBITS  # noqa: PLC0415
    from qsim_tc.stages.cpu import run_stages  # noqa: PLC0415
    from qsim_tc.stages.plan import plan_stages  # noqa: PLC0415

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
