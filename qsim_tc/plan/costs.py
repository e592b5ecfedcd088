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
        """A row from :meth:`to_dict`'s form.

        Raises:
            CostTableError: a missing or malformed field (named).
        """
        if not isinstance(raw, dict):
            raise CostTableError(f"a cost row must be an object, got {type(raw).__name__}")
        try:
            ms = {int(k): float(v) for k, v in raw["ms"].items()}
            row = cls(**{**raw, "ms": ms, "measured": tuple(int(d) for d in raw.get("measured", ()))})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CostTableError(f"malformed cost row {raw.get('backend', '?')!r}: {exc}") from None
        if not ms or any(v <= 0 or not math.isfinite(v) for v in ms.values()) or min(ms) < 1:
            raise CostTableError(f"cost row {row.backend!r}: ms must map widths >= 1 to positive times, got {ms}")
        if row.placement not in PLACEMENTS + (ANY,):
            raise CostTableError(f"cost row {row.backend!r}: placement {row.placement!r} is not one of "
                                 f"{', '.join(PLACEMENTS + (ANY,))}")
        return row


@dataclass(frozen=True)
class CostTable:
    """The cost rows of one device, and where they come from.

    Attributes:
        key: the device identity the rows were measured on (``qsim_tc.calibrate.device_key``).
        rows: the rows.
        origin: ``"shipped:<name>"``, ``"cache:<path>"``, ``"measured"`` or ``"given"``.
        note: why this table is used (a stand-in for another device, a fallback), or "".
        elapsed_s: how long the calibration that made it took (0 when unknown).
    """

    key: dict
    rows: tuple[CostRow, ...]
    origin: str = "given"
    note: str = ""
    elapsed_s: float = 0.0

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
        """A table from :meth:`to_json`'s text.

        Raises:
            CostTableError: not JSON, another format version, or a malformed row.
        """
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise CostTableError(f"not JSON ({exc})") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
            raise CostTableError(f"format {got!r}, expected {FORMAT}")
        rows = raw.get("rows")
        if not isinstance(rows, list) or not rows:
            raise CostTableError("no rows")
        return cls(dict(raw.get("key") or {}), tuple(CostRow.from_dict(r) for r in rows), origin,
                   elapsed_s=float(raw.get("elapsed_s", 0.0)))


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
