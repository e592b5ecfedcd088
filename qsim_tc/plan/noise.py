"""How much a calibration's timings scatter: the spread of each point's repeated runs.

A calibration (:func:`qsim_tc.calibrate.calibrate`) times every point (method, width,
placement) several times and keeps the median. On a busy machine the repeats of one point differ
by tens of percent and the table that comes out misleads ``backend="auto"`` and fusion for as
long as it is cached. :class:`Spread` collects the relative spread of every point's runs, and
:meth:`Spread.verdict` says, in one line, when too many points scattered for the table to be
trusted.
"""

from __future__ import annotations

import statistics

NOISY_SPREAD = 0.25  # a point is noisy when (slowest - fastest) / median of its runs exceeds this
NOISY_SHARE = 0.2  # the table is noisy when more than this share of its points are


class Spread:
    """The relative spreads of a calibration's points (each ``(max - min) / median`` of its runs)."""

    def __init__(self) -> None:
        self.spreads: list[float] = []

    def add(self, times) -> None:
        """Record one point's timed runs (fewer than two: nothing to compare, not recorded)."""
        times = [float(t) for t in times]
        if len(times) < 2:
            return
        mid = statistics.median(times)
        if mid > 0:
            self.spreads.append((max(times) - min(times)) / mid)

    @property
    def noisy(self) -> int:
        """How many points scattered by more than :data:`NOISY_SPREAD`."""
        return sum(s > NOISY_SPREAD for s in self.spreads)

    def verdict(self) -> str:
        """One line when more than :data:`NOISY_SHARE` of the points are noisy, else ""."""
        n = len(self.spreads)
        if not n or self.noisy <= NOISY_SHARE * n:
            return ""
        return (f"noisy timings: {self.noisy} of {n} points varied by more than {NOISY_SPREAD:.0%} between "
                f"repeats (median spread {statistics.median(self.spreads):.0%}); the machine is busy, and the "
                "table may mislead backend=auto and fusion: calibrate again when it is idle, or with more --repeats")
