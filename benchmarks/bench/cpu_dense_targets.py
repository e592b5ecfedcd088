"""The CPU stage executor's 4-target dense kernel (``cpu_kernels._dense_vec``) by where its targets
sit in the chunk: does a gate whose 16 inputs lie a multiple of 4 KiB apart (targets at high
chunk bits, every input in one L1 set) run slower than one whose inputs spread over the sets?

One thread, one chunk of 2^19 amplitudes (the executor's split real and imaginary halves, 256
bytes apart), a Haar 4-qubit gate applied in place, best of 5 rounds of 4 applications; the rate
counts 4 real FMAs a complex multiply-add (2^19 x 16 of them).

    python -m benchmarks.bench.cpu_dense_targets --json benchmarks/results/cpu_dense_targets_zen5.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.bench.cpu_vs_qsim import host_cpu
from benchmarks.common import write_results
from circuits import haar_unitary
from qsim_tc.stages import cpu_kernels

CHUNK_BITS = 19
# low (inputs 256 B apart in complex64), spread, middle, high (all 128 KiB apart: one L1 set), alternate
TARGETS = ((6, 7, 8, 9), (6, 9, 12, 15), (10, 11, 12, 13), (15, 16, 17, 18), (12, 14, 16, 18))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.cpu_dense_targets", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    size = 1 << CHUNK_BITS
    rng = np.random.default_rng(0)
    rows = []
    for real in (np.float32, np.float64):
        gap = 256 // np.dtype(real).itemsize
        both = np.empty(2 * size + gap, real)
        re, im = both[:size], both[size + gap:]
        re[:], im[:] = rng.standard_normal(size), rng.standard_normal(size)
        m = haar_unitary(16, rng)
        m_re, m_im = (np.ascontiguousarray(part.astype(real)).ravel() for part in (m.real, m.imag))
        for t in TARGETS:
            offs = np.array([sum(1 << t[b] for b in range(4) if c >> b & 1) for c in range(16)], np.int64)
            fixed = np.array(sorted(t), np.int64)

            def once(offs=offs, fixed=fixed):
                cpu_kernels._dense_vec(re, im, m_re, m_im, 0, 16, offs, 0, fixed, 0, 4, 0, CHUNK_BITS)

            once()
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(4):
                    once()
                best = min(best, (time.perf_counter() - t0) / 4)
            rate = size * 16 * 4 / best / 1e9
            rows.append({"dtype": np.dtype(real).name, "targets": list(t), "ms": best * 1e3, "gfma_s": rate,
                         "input_stride_bytes": (1 << min(t)) * np.dtype(real).itemsize})
            print(f"{np.dtype(real).name:8s} targets {str(t):18s} {best * 1e3:6.3f} ms  {rate:5.1f} GFMA/s", flush=True)
    if args.json:
        write_results(args.json, {"benchmark": "cpu_dense_targets", "chunk_bits": CHUNK_BITS, "threads": 1,
                                  "cpu": host_cpu(), "rows": rows}, module="benchmarks.bench.cpu_dense_targets",
                      argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
