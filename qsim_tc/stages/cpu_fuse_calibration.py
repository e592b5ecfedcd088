"""The CPU stage executor's fusion costs measured on this host: their record and cache.

In-stage fusion (:mod:`qsim_tc.stages.fusion`) prices a dense op of k targets by a table of
k = 1..4. The shipped tables (``stages.cpu``) were measured on a few hosts and keyed by LLVM's CPU
name or the vector width; another host's caches and cores can price wide ops 2x differently (a
Zen 5 against the Xeon the AVX-512 table came from: quantum volume ran 0.77-0.82x the time on its
own table). ``qsim-tc calibrate --device cpu`` measures this host's table
(:mod:`qsim_tc.stages.cpu_fuse_measure`) and stores it here (:func:`store`), in the cache folder
of the cost tables, keyed by the CPU, its cores and caches, numba's version and a digest of the
executor's code; the executor reads it at its first run (``stages.cpu.host_fuse_costs``, through
:func:`load`, which trusts a file only when it is whole and of this host).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from circuits._atomic import write_atomic
from qsim_tc.cache_folder import keyed_path
from qsim_tc.stages import cpu_kernels, host_cache

WIDTHS = (1, 2, 3, 4)  # the fusion tables' op widths
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

    return {"device": "cpu", "cpu": cpu_kernels.HOST_CPU, "processor": platform.processor() or platform.machine(),
            "vector_bytes": int(cpu_kernels.VECTOR_BYTES), "cpu_count": os.cpu_count(),
            "caches": {str(level): size for level, size in sorted(host_cache.cache_sizes().items())},
            "numba": numba.__version__, "kernels": _kernels_digest()}


@functools.lru_cache(maxsize=1)
def _kernels_digest() -> str:
    """A digest of the executor's code (``cpu_kernels.py``, ``cpu.py``): a table measured on other
    kernels is not this one's."""
    h = hashlib.sha1()
    for name in ("cpu_kernels.py", "cpu.py"):
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:12]


def cache_path(key: dict | None = None) -> Path:
    """The host's fusion table in the cost tables' cache folder (:func:`qsim_tc.cache_folder.keyed_path`)."""
    key = host_key() if key is None else key
    return keyed_path("fusion-cpu", key.get("cpu", "cpu"), key)


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
    _valid_costs({str(i): list(c) for i, c in cal.costs.items()})  # both sizes, as load wants them
    path = cache_path(cal.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, cal.to_json() + "\n")
    return path
