"""Timing one gate: where its targets sit, a CUDA-event clock that times gates as a circuit
issues them, random states, and a dense reference product to check each timed result."""

from __future__ import annotations

import statistics
import time

import numpy as np

from qsim_tc import StateVector


def targets_for(n: int, d: int, placement: str) -> list[int]:
    """bottom, middle, top: d consecutive targets there; mixed: targets spread evenly from bit 0
    to bit n - 1 (low and high ones together: 1 qubit, the middle bit)."""
    if placement == "bottom":
        return list(range(d))
    if placement == "top":
        return list(range(n - d, n))
    if placement == "mixed":
        return [n // 2] if d == 1 else sorted({round(i * (n - 1) / (d - 1)) for i in range(d)})
    if placement != "middle":
        raise ValueError(f"placement {placement!r}: expected bottom, middle, top or mixed")
    start = (n - d) // 2
    return list(range(start, start + d))


class Clock:
    """Time per call of a callable: CUDA events on the GPU, perf_counter on the CPU.

    On the GPU each sample times ``batch`` calls issued back to back between two events (as
    gates are issued in a circuit, where the host prepares the next gate while the GPU runs
    this one) and divides. One untimed call, the lead call, is issued before the first event, so that
    the GPU is busy while the host prepares the timed calls: the sample is the per-gate time of a
    circuit in flight. Without it the host's work for the first call counted as GPU idle time
    (about 100 us in 4 calls of 2 ms, a 1% handicap for whichever peer has more host work).
    Where the host's work per call exceeds the GPU's, the idle time still counts.
    """

    def __init__(self, xp, batch: int = 1):
        self.xp = xp
        self.gpu = xp is not np
        self.batch = max(1, batch)

    def time(self, fn, repeats: int, before=None) -> list[float]:
        out = []
        for _ in range(repeats):
            if self.gpu:
                s, e = self.xp.cuda.Event(), self.xp.cuda.Event()
                if before is not None:
                    before()
                fn()  # the lead call
                s.record()
                for _ in range(self.batch):
                    if before is not None:
                        before()
                    fn()
                e.record()
                e.synchronize()
                out.append(self.xp.cuda.get_elapsed_time(s, e) / self.batch)
            else:
                if before is not None:
                    before()
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
        return out


def native_for(dtype) -> str:
    """The native method of a state's precision: cuBLAS/numpy ZGEMM or CGEMM."""
    return "native32" if np.dtype(dtype) == np.complex64 else "native"


def random_state(n, dtype, dev, seed):
    xp = dev.xp
    if dev.is_gpu:
        rs = xp.random.RandomState(seed)
        real = np.float64 if dtype == np.complex128 else np.float32
        v = rs.standard_normal(2 << n, dtype=real).view(dtype)
    else:
        rng = np.random.default_rng(seed)
        v = (rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)).astype(dtype)
    v /= xp.linalg.norm(v)
    return StateVector(n, dtype=dtype, device=dev, data=v)


def reference_apply(x0, n, u, targets, xp):
    """A dense reference with tensordot over a (2,)*n view (slow, memory-hungry, obviously right)."""
    d = len(targets)
    t = x0.reshape((2,) * n)
    axes = [n - 1 - q for q in reversed(targets)]  # C-order axis of each matrix index bit, high first
    g = xp.asarray(u).reshape((2,) * (2 * d))
    out = xp.tensordot(g, t, axes=(list(range(d, 2 * d)), axes))
    # out axes: gate row bits (high first), then the remaining state axes in order
    rest = [a for a in range(n) if a not in axes]
    order = [0] * n
    for i, a in enumerate(axes):
        order[a] = i
    for i, a in enumerate(rest):
        order[a] = d + i
    return xp.ascontiguousarray(out.transpose(order)).reshape(-1)


def event_times(cp, fn, repeats):
    """Median milliseconds of ``fn()`` over ``repeats`` runs (CUDA events), after one warm-up."""
    fn()
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times), times
