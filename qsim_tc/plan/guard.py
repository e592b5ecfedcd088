"""The online accuracy guard of ``backend="auto"``: is a block's result as accurate as asked?

A method whose products are not in the state's own arithmetic (emulation: INT8 slices or
residues, TF32/FP16 splits) is accurate only while its data fit its safe range. After such a
block the guard reads two cheap signals:

- the statistics the method reported (``gemm.Report.choices``): ``target_met`` false (the Ozaki
  CRT method could not reach its bits with its moduli), ``precision`` ``"fp16"`` with
  ``fp16_fits`` false (a forced FP16 product outside FP16's range); and any warning a ``gemm``
  module raised during the product (``FP16RangeWarning``). A ``fallback`` to native (int8-auto at
  ``max_splits``) is accurate and only noted;
- the norm: a unitary block keeps it, so a relative change beyond the precision's bound (or the
  user's ``tolerance``) means lost accuracy.

A fired guard makes the simulator redo the block from its kept input with the next method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# unit roundoff of the precision asked; the norm bound is NORM_FACTOR * u * sqrt(2^d): a
# correctly rounded product's relative error per amplitude grows like u sqrt(k), and the norm's
# relative change stays far below it (errors of independent amplitudes average out)
UNIT_ROUNDOFF = {"double": 2.0**-53, "single": 2.0**-24}
NORM_FACTOR = 64.0


def norm_bound(precision: str, d: int, tolerance: float | None = None) -> float:
    """The largest relative norm change a d-qubit block may show at ``precision``.

    Args:
        precision: ``"double"`` or ``"single"``.
        d: the block's width.
        tolerance: the user's bound; when given it replaces the precision's.

    Returns:
        The bound (a positive float).
    """
    if tolerance is not None:
        return float(tolerance)
    return NORM_FACTOR * UNIT_ROUNDOFF[precision] * math.sqrt(2.0**d)


@dataclass
class Verdict:
    """What the guard concluded about one block.

    Attributes:
        ok: the result is as accurate as asked.
        why: when not ok, the reason (one line).
        notes: remarks that do not fail the block (a method's fallback).
        norm_change: the relative norm change measured, or None when not measured.
    """

    ok: bool = True
    why: str = ""
    notes: list[str] = field(default_factory=list)
    norm_change: float | None = None

    def to_dict(self) -> dict:
        return {"ok": self.ok, "why": self.why, "notes": list(self.notes), "norm_change": self.norm_change}


def check(report, caught, norm_before: float, norm_after: float, bound: float) -> Verdict:
    """The guard's verdict on one block.

    Args:
        report: the block's ``gemm.Report`` (None when no GEMM ran).
        caught: the warnings recorded while the block ran (``warnings.catch_warnings(record=True)``).
        norm_before, norm_after: the state's norm before and after the block.
        bound: the largest relative norm change allowed (:func:`norm_bound`).

    Returns:
        The :class:`Verdict`.
    """
    v = Verdict()
    change = abs(norm_after / norm_before - 1.0) if norm_before > 0 else math.inf
    v.norm_change = change
    choices = dict(report.choices) if report is not None else {}
    if choices.get("fallback") is True:
        v.notes.append(f"{report.method} fell back to native for this block")
    failures = []
    if choices.get("target_met") is False:
        failures.append(f"{report.method} did not reach its accuracy target")
    if choices.get("precision") == "fp16" and choices.get("fp16_fits") is False:
        failures.append(f"{report.method}'s operands fall outside FP16's range")
    for w in caught:
        module = getattr(w.category, "__module__", "")
        if module.split(".")[0] == "gemm":
            failures.append(f"{w.category.__name__}: {str(w.message).split(';')[0]}")
    if not math.isfinite(change) or change > bound:
        failures.append(f"norm changed by {change:.3g} (bound {bound:.3g})")
    if failures:
        v.ok = False
        v.why = "; ".join(failures)
    return v
