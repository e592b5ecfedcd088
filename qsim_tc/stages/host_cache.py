"""The host's cache sizes, and the chunk cap that the CPU stage path takes from its L2.

Read from sysfs (Linux); where it does not say, nothing is capped. Used by the compiled
executor (:mod:`qsim_tc.stages.cpu`) for its chunk and shown by ``qsim-tc info``.
"""

from __future__ import annotations

import functools
import os

# Where a core's L2 is at least this large, a chunk is kept to half of it. Measured on a 2-core
# AVX-512 host with 2 MiB of L2 a core (and a large shared L3 whose lines are far from the
# core): 24 qubits, 2 threads, best of 3-4 in one process, the old chunk (4 MiB complex64 at
# L = 13 or 15, 2 MiB complex128 at L = 12) against 1 MiB: see docs/results.md, section 11.
# A 2-core AVX-512 host with 1 MiB of L2 a core measured 4 and 2 MiB best, and 2-core Zen hosts
# (512 KiB of L2) the last-level-cache share, so smaller L2s keep those rules.
L2_CAP_MIN_BYTES = 2 << 20


def cache_sizes(base: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[int, int]:
    """Bytes of each data (or unified) cache level of CPU 0, from sysfs (``base``); empty where
    sysfs does not say."""
    out: dict[int, int] = {}
    try:
        entries = sorted(e for e in os.listdir(base) if e.startswith("index"))
    except OSError:
        return out
    for entry in entries:
        try:
            with open(f"{base}/{entry}/level") as f:
                level = int(f.read())
            with open(f"{base}/{entry}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{entry}/size") as f:
                text = f.read().strip()
            if kind == "Instruction" or not text:
                continue
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
            out[level] = int(text.rstrip("KMGkmg")) * scale
        except (OSError, ValueError):
            continue
    return out


@functools.lru_cache(maxsize=1)
def last_level_cache() -> int | None:
    """Bytes of the host's last-level cache that CPU 0 shares (:func:`cache_sizes`), None where
    unknown."""
    sizes = cache_sizes()
    return sizes[max(sizes)] if sizes else None


def core_l2() -> int | None:
    """Bytes of CPU 0's L2 (:func:`cache_sizes`), None where unknown."""
    return cache_sizes().get(2)


def l2_chunk_cap(l2_bytes: int | None = -1) -> int | None:
    """The largest chunk (bytes, a power of two) for a core whose L2 holds ``l2_bytes`` (-1: this
    host's): half of it where it is at least :data:`L2_CAP_MIN_BYTES`; None (no cap) otherwise
    or where unknown."""
    if l2_bytes == -1:
        l2_bytes = core_l2()
    if not l2_bytes or l2_bytes < L2_CAP_MIN_BYTES:
        return None
    return 1 << ((l2_bytes // 2).bit_length() - 1)
