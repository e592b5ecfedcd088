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

It runs in one of two modes (:func:`qsim_tc.runners.auto.run_auto`):

- **run** (the default): the statistics are read after every block, the norm once at the end of
  the run, against :func:`run_bound` of the blocks' bounds. No copy of the state and no host
  synchronisation per block: on an H100 the per-block copy, the two norms and the
  synchronisation (which exposes the next block's host work) cost 1.7-2.2x tc-auto's own time on
  brickwork(28, 8 and 10, 4) in complex64. A block whose statistics fail makes the run start again
  from its initial state without that method; a failed run norm makes it start again in the
  per-block mode, which finds the block.
- **per block** (``in_place`` runs, whose start state cannot be made again, and after a failed
  run norm): the block's input is kept (a copy), the norm is measured before and after it, and a
  fired guard redoes the block from the kept input with the next method.
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


def run_bound(bounds: list[float]) -> float:
    """The largest relative norm change a run of guarded blocks may show, from their bounds.

    The root of the sum of squares: rounding errors of independent blocks add like a random walk,
    and with it one block that breaks its own bound by a factor of sqrt(blocks) still fails the run
    (a plain sum would let a single bad block hide among many good ones)."""
    return math.sqrt(sum(b * b for b in bounds))


def norm_change(before: float, after: float) -> float:
    """The relative change of the norm (inf when ``before`` is not positive)."""
    return abs(after / before - 1.0) if before > 0 else math.inf


def check(report, caught, norm_before: float | None, norm_after: float | None, bound: float) -> Verdict:
    """The guard's verdict on one block.

    Args:
        report: the block's ``gemm.Report`` (None when no GEMM ran).
        caught: the warnings recorded while the block ran (``warnings.catch_warnings(record=True)``).
        norm_before, norm_after: the state's norm before and after the block; None in the run
            mode (the norm is checked once for the run).
        bound: the largest relative norm change allowed (:func:`norm_bound`).

    Returns:
        The :class:`Verdict`.
    """
    v = Verdict()
    change = None if norm_before is None else norm_change(norm_before, norm_after)
    v.norm_change = change
    choices = dict(report.choices) if report is not None else {}
    if choices.get("fallback") is True:
        v.notes.append(f"{report.method} fell back to native for this block")
    failures = []
    if choices.get("target_met") is False:
        failures.append(f"{report.method} did not reach its accuracy target")
    if choices.get("precision") == "fp16" and choices.get("fp16_fits") is False:
        failures.append(f"{report.method}'s operands fall outside FP16's range")
    if choices.get("tf32_fits") is False:
        failures.append(f"{report.method}'s operands fall outside the range where TF32 splits keep FP32 accuracy")
    for w in caught:
        module = getattr(w.category, "__module__", "")
        if module.split(".")[0] == "gemm":
            failures.append(f"{w.category.__name__}: {str(w.message).split(';')[0]}")
    if change is not None and (not math.isfinite(change) or change > bound):
        failures.append(f"norm changed by {change:.3g} (bound {bound:.3g})")
    if failures:
        v.ok = False
        v.why = "; ".join(failures)
    return v
