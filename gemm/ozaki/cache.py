"""Slices of operands used again (the gate, in the simulator), kept across calls.

The operand with fewer lines has its slices stored with a copy of the operand; a later call whose
operand is equal element by element, on the same device and with the same plan sizes, reuses
them. ``gemm.ozaki.CACHE.clear()`` frees them.
"""

from __future__ import annotations

import collections

import numpy as np

from gemm.ozaki.plan import Plan

CACHE_BYTES = 1 << 30  # slices kept for operands used again (both devices together)
CACHE_MAX_ELEMENTS = 4096 * 4096  # larger operands are never cached


class SliceCache:
    """Slices of operands used again, keyed by device and shape, validated by exact comparison."""

    def __init__(self, limit: int):
        self.limit = limit
        self.entries: collections.OrderedDict = collections.OrderedDict()

    @staticmethod
    def key(xp, role, X, plan: Plan):
        dev = -1 if xp is np else xp.cuda.Device().id
        return (plan.device, dev, role, tuple(X.shape), str(X.dtype), plan.kk, plan.Kp, plan.b)

    def candidate(self, key):
        return self.entries.get(key)

    def store(self, key, copy, slices, s):
        nbytes = int(copy.nbytes) + int(slices.nbytes)
        self.entries.pop(key, None)
        if nbytes > self.limit:
            return
        while self.entries and sum(e["bytes"] for e in self.entries.values()) + nbytes > self.limit:
            self.entries.popitem(last=False)
        self.entries[key] = {"copy": copy, "slices": slices, "s": s, "bytes": nbytes}

    def touch(self, key):
        self.entries.move_to_end(key)

    def clear(self):
        self.entries.clear()


CACHE = SliceCache(CACHE_BYTES)
