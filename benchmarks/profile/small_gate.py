"""One launch each of the small-gate kernels and of cuStateVec's applyMatrix on a 28-qubit state,
for ``ncu`` to compare (DRAM bytes and throughput of each):

    ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
dram__throughput.avg.pct_of_peak_sustained_elapsed python -m benchmarks.profile.small_gate

Each case runs twice (the first launch compiles and warms up); ncu lists every kernel launch.
"""

from __future__ import annotations

import sys

import numpy as np

import gemm
from circuits import haar_unitary
from qsim_tc.engine import small_gate


def main():
    import cupy as cp

    n = 28
    rng = np.random.default_rng(0)
    x = cp.random.RandomState(1).standard_normal(2 << n, dtype=cp.float64).view(cp.complex128)
    try:
        from benchmarks.custatevec import CuStateVec  # noqa: PLC0415

        peer = CuStateVec()
    except ImportError:
        peer = None
    cases = ((1, [13]), (1, [0]), (2, [13, 14]), (2, [0, 1]), (2, [0, 27]), (3, [0, 1, 2]), (3, [0, 14, 27]),
             (3, [0, 1, 27]), (6, [13, 14, 15, 16, 17, 18]))
    if len(sys.argv) > 1:  # a subset: indices into the list above, e.g. 5,6,7
        cases = [cases[int(i)] for i in sys.argv[1].split(",")]
    for d, pos in cases:
        u = haar_unitary(1 << d, rng)
        kern = small_gate.select(gemm.get_method("native"), gemm.resolve_device("gpu"), None, n, pos, 16)
        for _ in range(2):
            kern(x, n, u, pos)
            if peer is not None:
                peer.apply_matrix(x, n, u, pos)
        cp.cuda.Device().synchronize()
        print(f"d={d} {pos}: {kern.__name__}" + (" and custatevec" if peer else ""), flush=True)
    for _ in range(2):
        x *= 1.0  # an in-place streaming pass: the copy rate
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
