"""Measured cost of one d-qubit gate, per device, method and placement: the engine's cost model,
the one table that the fusion size (:mod:`qsim_tc.plan.fusion`) and the per-block choice of
method (:mod:`qsim_tc.plan.select`) read.

A :class:`CostTable` holds :class:`CostRow` s. Each row says where it was measured. ``ms[d]`` is
the time of one d-qubit gate on a state of ``n_qubits`` qubits; other sizes scale by
2^(n - n_qubits) (every gate is a pass over the state). ``permute_ms`` is added per gate when the
row timed the product alone, and ``overhead_ms`` per gate whatever the size (Python, checks,
launches: it does not scale with the state).

Placements are the engine's paths as a cost sees them (``qsim_tc.engine.apply``): ``bottom``
(targets at bit 0: the plain or rotating product, or a small-gate kernel), ``middle`` (a
contiguous block inside: the batched product), ``top`` (the targets are the highest bits) and
``scattered`` (targets that must first be permuted to the bottom). A row with placement ``any``
was measured on random qubit sets in sequence (so it includes the permutations a lazy layout
needs on average) and stands in for every placement the table has no row for.

The table is stored as JSON (:meth:`CostTable.to_json`); tables shipped with the package, for
the machines where they were measured, live in ``qsim_tc/plan/tables/`` (:func:`shipped_table`),
and per-device tables measured by :mod:`qsim_tc.calibrate` in the user's cache. Widths
missing from a row are interpolated in log space between their neighbours, held constant below
the narrowest and grown 4x per qubit above the widest (GEMM flops grow 4x per qubit).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from importlib import resources

# the engine's fixed cost of one gate (measured: 0.13-0.16 ms per gate on a 6-qubit CPU state);
# it keeps fusion from paying matrix products for nothing on small states
PER_GATE_OVERHEAD_MS = 0.15
PLACEMENTS = ("bottom", "middle", "top", "scattered")
ANY = "any"
FORMAT = 1  # version of the JSON layout; a file of another version is recalibrated, not misread
# shipped tables: name -> file in qsim_tc/plan/tables/
SHIPPED = {"cpu": "cpu.json", "h200": "h200.json", "h100": "h100.json"}


class CostTableError(ValueError):
    """A cost table file that cannot be read as one (corrupt, another format, wrong contents)."""


@dataclass(frozen=True)
class CostRow:
    """Per-gate times of one method on one device at one placement, by gate width d."""

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
    placement: str = ANY  # one of PLACEMENTS, or ANY
    measured: tuple = ()  # the widths timed (the others of ms were extrapolated); empty: all of ms

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

    @property
    def name(self) -> str:
        """A one-line description: what, where, from what."""
        where = f", {self.placement}" if self.placement != ANY else ""
        return (f"{self.backend}/{self.device}/{self.dtype} at {self.n_qubits} qubits{where} "
                f"({self.machine}; {self.source})")

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        out["ms"] = {str(k): v for k, v in sorted(self.ms.items())}
        out["measured"] = list(self.measured)
        return out

    @classmethod
    def from_dict(cls, raw: dict) -> CostRow:
        """A row from :meth:`to_dict`'s form, every field checked for its type and range.

        Raises:
            CostTableError: a missing, unknown, wrong-typed or out-of-range field (named).
        """
        if not isinstance(raw, dict):
            raise CostTableError(f"a cost row must be an object, got {type(raw).__name__}")
        name = raw.get("backend") if isinstance(raw.get("backend"), str) else "?"
        where = f"cost row {name!r}"
        missing = [k for k in _REQUIRED if k not in raw]
        if missing:
            raise CostTableError(f"{where}: missing field(s) {', '.join(missing)}")
        unknown = sorted(str(k) for k in set(raw) - set(_ROW_FIELDS))
        if unknown:
            raise CostTableError(f"{where}: unknown field(s) {', '.join(unknown)}")
        values = {k: _check_field(where, k, v) for k, v in raw.items()}
        ms = values["ms"]
        measured = values.get("measured", ())
        if any(d not in ms for d in measured):
            raise CostTableError(f"{where}: measured widths {list(measured)} are not all widths of ms {sorted(ms)}")
        return cls(**values)


# the JSON fields of a row: (type check, range check, what is expected) per field; an absurd value
# (a negative time, a width no state reaches, a gate of a week) is refused, not used
_MAX_WIDTH = 64
_MAX_MS = 1e9  # ~12 days: any larger per-gate time is a corrupt entry


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_time(v, positive: bool) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    return (v > 0 if positive else v >= 0) and v <= _MAX_MS


def _ms_field(v) -> dict | None:
    if not isinstance(v, dict) or not v:
        return None
    out = {}
    for k, t in v.items():
        if not isinstance(k, str) or not k.isdigit() or not 1 <= int(k) <= _MAX_WIDTH or not _is_time(t, True):
            return None
        out[int(k)] = float(t)
    return dict(sorted(out.items()))


def _measured_field(v) -> tuple | None:
    if not isinstance(v, list) or not all(_is_int(d) and 1 <= d <= _MAX_WIDTH for d in v):
        return None
    return tuple(v)


_ROW_FIELDS = {
    "device": (lambda v: v if v in ("cpu", "gpu") else None, "'cpu' or 'gpu'"),
    "dtype": (lambda v: v if v in ("complex128", "complex64") else None, "'complex128' or 'complex64'"),
    "backend": (lambda v: v if isinstance(v, str) and v.strip() and len(v) <= 64 else None, "a method name"),
    "n_qubits": (lambda v: v if _is_int(v) and 1 <= v <= _MAX_WIDTH else None, f"an int in 1..{_MAX_WIDTH}"),
    "ms": (_ms_field, f"an object of widths '1'..'{_MAX_WIDTH}' to positive finite milliseconds"),
    "permute_ms": (lambda v: float(v) if _is_time(v, False) else None, "finite milliseconds >= 0"),
    "machine": (lambda v: v if isinstance(v, str) else None, "a string"),
    "source": (lambda v: v if isinstance(v, str) else None, "a string"),
    "kernel_max_d": (lambda v: v if _is_int(v) and 0 <= v <= _MAX_WIDTH else None, f"an int in 0..{_MAX_WIDTH}"),
    "overhead_ms": (lambda v: float(v) if _is_time(v, False) else None, "finite milliseconds >= 0"),
    "placement": (lambda v: v if v in PLACEMENTS + (ANY,) else None, f"one of {', '.join(PLACEMENTS + (ANY,))}"),
    "measured": (_measured_field, f"a list of widths in 1..{_MAX_WIDTH}"),
}
_REQUIRED = ("device", "dtype", "backend", "n_qubits", "ms")


def _check_field(where: str, key: str, value):
    check, expected = _ROW_FIELDS[key]
    try:
        out = check(value)
    except TypeError:  # an unhashable value tested for membership
        out = None
    if out is None:
        shown = repr(value)
        raise CostTableError(f"{where}: {key} must be {expected}, got {shown[:60]}{'...' if len(shown) > 60 else ''}")
    return out


@dataclass(frozen=True)
class CostTable:
    """The cost rows of one device, and where they come from.

    Attributes:
        key: the device identity the rows were measured on (``qsim_tc.calibrate.device_key``).
        rows: the rows.
        origin: ``"shipped:<name>"``, ``"cache:<path>"``, ``"measured"`` or ``"given"``.
        note: why this table is used (a stand-in for another device, a fallback), or "".
        elapsed_s: how long the calibration that made it took (0 when unknown).
        noise: a calibration's one-line warning that its timings scattered (``qsim_tc.plan.noise``),
            or "" (not stored in the JSON: it describes the measurement, not the costs).
    """

    key: dict
    rows: tuple[CostRow, ...]
    origin: str = "given"
    note: str = ""
    elapsed_s: float = 0.0
    noise: str = ""

    def methods(self) -> list[str]:
        """The methods that have at least one row, in the rows' order."""
        return list(dict.fromkeys(r.backend for r in self.rows))

    def row(self, method: str, placement: str = ANY) -> CostRow | None:
        """The row of ``method`` at ``placement``, else its ``any`` row, else its ``scattered``
        row (the random-qubit case), else its first row; None without any row."""
        rows = [r for r in self.rows if r.backend == method]
        for want in (placement, ANY, "scattered"):
            for r in rows:
                if r.placement == want:
                    return r
        return rows[0] if rows else None

    def gate_ms(self, method: str, d: int, n_qubits: int, placement: str = ANY) -> float | None:
        """Predicted milliseconds of a d-qubit gate of ``method`` at ``placement`` on an
        ``n_qubits`` state; None when the table has no row for ``method``."""
        r = self.row(method, placement)
        return None if r is None else r.gate_ms(d, n_qubits)

    def describe(self) -> str:
        """One line: where the table comes from and what it covers."""
        machine = self.key.get("gpu") or self.key.get("processor") or self.key.get("device", "?")
        text = f"{self.origin} ({machine}; methods {', '.join(self.methods())})"
        return text + (f"; {self.note}" if self.note else "")

    def with_origin(self, origin: str, note: str = "") -> CostTable:
        return replace(self, origin=origin, note=note)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "key": self.key, "elapsed_s": self.elapsed_s,
                           "rows": [r.to_dict() for r in self.rows]}, indent=1)

    @classmethod
    def from_json(cls, text: str, origin: str = "given") -> CostTable:
        """A table from :meth:`to_json`'s text, every field checked (:meth:`CostRow.from_dict`).

        Raises:
            CostTableError: not JSON, another format version, or a missing, unknown, wrong-typed
                or out-of-range field (named).
        """
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
            raise CostTableError(f"not JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
        if not isinstance(raw, dict):
            raise CostTableError(f"expected a JSON object, got {type(raw).__name__}")
        fmt = raw.get("format")
        if not _is_int(fmt) or fmt != FORMAT:
            raise CostTableError(f"format {fmt!r}, expected {FORMAT}")
        unknown = sorted(str(k) for k in set(raw) - {"format", "key", "elapsed_s", "rows"})
        if unknown:
            raise CostTableError(f"unknown field(s) {', '.join(unknown)}")
        key = raw.get("key", {})
        if not isinstance(key, dict) or not all(
                isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in key.values()):
            raise CostTableError("key must be an object of strings and numbers")
        elapsed = raw.get("elapsed_s", 0.0)
        if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)) or not 0 <= elapsed < 1e7:
            raise CostTableError(f"elapsed_s must be finite seconds >= 0, got {elapsed!r}")
        rows = raw.get("rows")
        if not isinstance(rows, list) or not rows:
            raise CostTableError("no rows")
        return cls(dict(key), tuple(CostRow.from_dict(r) for r in rows), origin, elapsed_s=float(elapsed))


def shipped_table(name: str) -> CostTable:
    """A table shipped with the package (``"cpu"``, ``"h200"``, ``"h100"`` where measured).

    Raises:
        ValueError: ``name`` is not shipped (the message lists those that are).
    """
    avail = shipped_names()
    if name not in avail:
        raise ValueError(f"no shipped cost table {name!r}; shipped: {', '.join(avail)}")
    text = resources.files("qsim_tc.plan").joinpath("tables", SHIPPED[name]).read_text()
    return CostTable.from_json(text, origin=f"shipped:{name}")


def shipped_names() -> list[str]:
    """The shipped tables present in this installation."""
    folder = resources.files("qsim_tc.plan").joinpath("tables")
    return [k for k, f in SHIPPED.items() if folder.joinpath(f).is_file()]


def lookup(backend: str, device: str, dtype: str, table: CostTable | None = None) -> tuple[CostRow, str]:
    """The row for ``backend`` on ``device``; else a stand-in from the native row of that dtype.

    A stand-in drops the widths the native row owes to its small-gate kernel (emulated methods
    run every gate as a GEMM), so its narrowest GEMM width holds below.

    Args:
        backend: a method name.
        device: ``"cpu"`` or ``"gpu"``.
        dtype: the state dtype name.
        table: the table to read (default: the shipped table of ``device``: ``cpu``, or ``h200``
            for ``gpu``).

    Returns:
        (row, note): ``note`` says when a stand-in row was used.

    Raises:
        ValueError: no row for ``device`` at all, or none of ``dtype`` (a given table without one
            falls back to the shipped table: rows of another precision never stand in).
    """
    given = table is not None
    if table is None:
        name = {"cpu": "cpu", "gpu": "h200"}.get(device)
        if name is None:
            raise ValueError(f"no gate cost row for device {device!r}; rows exist for ['cpu', 'gpu']")
        table = shipped_table(name)
    rows = [r for r in table.rows if r.device == device]
    if not rows:
        raise ValueError(f"no gate cost row for device {device!r}; rows exist for "
                         f"{sorted({r.device for r in table.rows})}")
    row = table.row(backend)
    if row is not None and row.device == device:
        return row, ""
    # the dtype's native row, placement-independent where there is one (a measured table has one
    # per placement and may keep an older placement-independent row of another method beside them)
    same = [r for r in rows if r.dtype == dtype]
    if not same:
        # a table measured for the other precision only (a calibration of one precision): its
        # rows time another GEMM, so the shipped table of the device stands in, never they
        if given:
            row, note = lookup(backend, device, dtype)
            return row, f"cost table {table.origin} has no {dtype} row; shipped table: {note or row.backend}"
        raise ValueError(f"no {dtype} gate cost row for device {device!r}; rows exist for "
                         f"{sorted({r.dtype for r in rows})}")
    native = sorted((r for r in same if r.backend.startswith("native")), key=lambda r: r.placement != ANY)
    row = native[0] if native else same[0]
    note = f"no cost row for {backend!r} on {device}; using {row.backend!r} ({row.dtype})"
    if row.kernel_max_d:
        row = replace(row, ms={d: v for d, v in row.ms.items() if d > row.kernel_max_d}, kernel_max_d=0)
        note += " without its small-gate kernel widths"
    return row, note
