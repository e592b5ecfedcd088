"""Per-stage timers: CUDA events on the GPU, perf_counter on the CPU.

GPU stage times are resolved lazily (when the report is read), so timing a stage never
adds a host synchronisation to the hot path.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np


class StageTimer:
    """Collects named stage durations in milliseconds.

    Stages with the same name accumulate. Use as ``with timer.stage("split"): ...``.
    """

    def __init__(self, xp=np):
        self._gpu = xp is not np
        self._xp = xp
        self._cpu: dict[str, float] = {}
        self._events: list[tuple[str, object, object]] = []

    @contextlib.contextmanager
    def stage(self, name: str):
        if self._gpu:
            start = self._xp.cuda.Event()
            end = self._xp.cuda.Event()
            start.record()
            try:
                yield
            finally:
                end.record()
                self._events.append((name, start, end))
        else:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._cpu[name] = self._cpu.get(name, 0.0) + (time.perf_counter() - t0) * 1e3

    def result(self) -> dict[str, float]:
        """Stage name -> milliseconds (synchronises on the last GPU event if any)."""
        out = dict(self._cpu)
        if self._events:
            self._events[-1][2].synchronize()
            for name, start, end in self._events:
                ms = self._xp.cuda.get_elapsed_time(start, end)
                out[name] = out.get(name, 0.0) + ms
            self._events.clear()
            self._cpu = dict(out)
        return out
