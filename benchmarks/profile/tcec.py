"""One TF32/FP16 gate product for a profiler: 26 qubits, d = 10, complex64.

    ncu --section SpeedOfLight --section WarpStateStats -k regex:tcec_gemm -c 1 \
        python -m benchmarks.profile.tcec tf32tf32 [--tile square16] [--kernel mma] [--wg n128] [--chain 2]

``--kernel`` picks the product kernel (auto: wgmma on sm_90), ``--wg`` one wgmma configuration
(gemm.tcec_gpu.WG_CONFIGS) for every mode and width, ``--chain`` the k-steps per hi*hi product
of the wgmma kernel.
"""

import argparse

import cupy as cp

import gemm
from gemm.tcec import gpu as tcec_gpu

p = argparse.ArgumentParser()
p.add_argument("method", nargs="?", default="tf32tf32")
p.add_argument("--tile", default=None, help="square tile of the mma.sync kernel (gemm.tcec_gpu.TILES)")
p.add_argument("--kernel", default="auto", choices=("auto", "wgmma", "mma"))
p.add_argument("--wg", default=None, help="wgmma configuration (gemm.tcec_gpu.WG_CONFIGS) for every mode and width")
p.add_argument("--chain", type=int, default=None)
args = p.parse_args()
if args.tile:
    tcec_gpu.SQUARE_TILE = args.tile
if args.wg:
    tcec_gpu.WG_CHOICE.update({m: (None, args.wg) for m in tcec_gpu.WG_MODES})
if args.chain:
    tcec_gpu.WG_CONFIGS = {k: c._replace(chain=args.chain) for k, c in tcec_gpu.WG_CONFIGS.items()}
d, n = 10, 26
s = (cp.random.standard_normal((1 << (n - d), 1 << d), dtype=cp.float32)
     + 1j * cp.random.standard_normal((1 << (n - d), 1 << d), dtype=cp.float32)).astype(cp.complex64)
u = cp.asarray(cp.linalg.qr(cp.random.standard_normal((1 << d, 1 << d)))[0].astype(cp.complex64))
for _ in range(2):
    gemm.matmul(s, u.T, method=args.method, product_kernel=args.kernel)
cp.cuda.Device().synchronize()
