"""One error-corrected gate product for a profiler (``ncu -k tcec_gemm``): 26 qubits, d = 10, complex64.

    ncu --section SpeedOfLight --section WarpStateStats -k tcec_gemm -c 1 \
        python benchmarks/profile_tcec.py tf32tf32 [tile]
"""

import sys

import cupy as cp

import gemm
from gemm import tcec_gpu

method = sys.argv[1] if len(sys.argv) > 1 else "tf32tf32"
if len(sys.argv) > 2:
    tcec_gpu.SQUARE_TILE = sys.argv[2]
d, n = 10, 26
s = (cp.random.standard_normal((1 << (n - d), 1 << d), dtype=cp.float32)
     + 1j * cp.random.standard_normal((1 << (n - d), 1 << d), dtype=cp.float32)).astype(cp.complex64)
u = cp.asarray(cp.linalg.qr(cp.random.standard_normal((1 << d, 1 << d)))[0].astype(cp.complex64))
for _ in range(2):
    gemm.matmul(s, u.T, method=method)
cp.cuda.Device().synchronize()
