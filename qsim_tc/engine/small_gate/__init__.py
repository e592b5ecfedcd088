"""Gates of 1 to 6 qubits on the GPU: dedicated in-place kernels instead of a GEMM.

A GEMM with k = n = 2^d <= 64 runs below the memory rate (cuBLAS ZGEMM took 26.7 ms for
d = 2 at 28 qubits where one pass over the state takes 2.1 ms, and 3.3-4.8 ms at d = 5, 6). The
kernels in ``small_gate.cu`` read each amplitude once and write it once:

* ``apply_direct``: thread = group of 2^d amplitudes gathered straight from global memory.
  Coalesced when the lowest target is at bit 3 or above (neighbouring groups are neighbours).
  The matrix comes by value; DIRECT_USRC says where the row products read it.
* ``apply_staged``: 1..4 targets anywhere; a block loads a tile of 2^8 amplitudes (2^10 for
  complex64 d = 4; whole groups) into shared memory, coalesced, each of its 2^(8 - d) threads
  multiplies one group with the matrix
  passed by value (FMA operands from the constant bank), the tile goes back. The default for
  d = 1 everywhere and for d = 2, 3 (complex64: 2..4) wherever the direct kernel's loads would
  not be coalesced: at cuStateVec's rate, 2.022-2.071 ms in
  complex128 and 1.006-1.048 ms in complex64 (benchmarks/results/tune_staged_h200.json). It
  replaced three kernels that each served part of those layouts 1-10% slower (a warp-shuffle
  kernel, a per-warp shared-memory kernel, a bulk-copy-engine kernel) and a complex128 path that
  applied 3-qubit gates as 4-qubit DMMA ones; their measurements stay in benchmarks/results/
  (tune_lanes_*, tune_bulk_*, tune_widened_h200.json).
* ``apply_small`` (tiled): tiles staged through shared memory, R rows per thread; for complex64
  gates of 5 qubits on spread targets below the coalesced range (and 6-qubit ones when a kernel
  is forced).
* ``apply_dmma``: complex128 gates of 4..6 qubits on the FP64 tensor cores (``mma.sync`` f64),
  at any target positions; a warp multiplies U by the 2^d x 8 block of 8 neighbouring groups
  held in its registers. On the CUDA cores d = 5, 6 are bound by the FP64 FMA rate
  (2.1 and 4.1 ms at 28 qubits).
* ``apply_dmma_pipe``: the same product fed through shared memory by asynchronous copies, several
  chunks in flight while one is multiplied; complex128 d = 5 with coalesced targets
  (DMMA_PIPE_CONFIG).

They compute the same sums of products as the native method (the DMMA kernel's default forms
the imaginary part from three real products, (Ur + Ui)(Vr + Vi) - Ur Vr - Ui Vi: errors of a
few ulp, like ZGEMM's), so they stand in for it; emulated methods (whose arithmetic differs)
always get their GEMM.

Choices below were measured on an H200 at 28 qubits (benchmarks/tune/small_gate.py,
tune/variants.py and benchmarks/results/apply_*.json, tune_dmma_h200.json, tune_grid_h200.json,
tune_staged_h200.json): direct kernel 2.03-2.05 ms for d = 1..3 and 2.1 ms for d = 4 (complex128,
one pass per thread), staged kernel 2.02-2.07 ms for d = 1..3 with a low target, tiled 2.3-3.9
ms; DMMA 2.1-2.3 ms at d = 4 with low targets, 2.3-2.6 ms at d = 5 and 2.9-3.5 ms at d = 6
against cuBLAS's 2.7, 3.3 and 4.7 ms. Complex64 gates of 5 qubits keep CGEMM on a block of
targets and take the direct or tiled kernel on spread ones (which a GEMM reaches only through a
permutation), 6 qubits keep CGEMM (no FP32 tensor-core product is exact enough to stand in).

The package: ``tables`` (the measured tuning tables and the kernel names), ``layout`` (pure layout
arithmetic: launch arguments and which kernel fits), ``launch`` (compilation, the launchers and
their argument check) and ``policy`` (which kernel for which gate, dtype and placement).
"""

from qsim_tc.engine.small_gate.launch import (
    apply_direct_gpu,
    apply_dmma_gpu,
    apply_dmma_pipe_gpu,
    apply_staged_gpu,
    apply_tiled_gpu,
    check_launch,
    kernel_source,
    launch_blocks,
)
from qsim_tc.engine.small_gate.layout import (
    coalesced,
    dmma_pipe_shared_bytes,
    dmma_shared_bytes,
    fits,
    fits_dmma,
    fits_dmma_pipe,
    fits_staged,
    gate_matrix_arg,
    smem_swizzle,
    staged_layout_args,
    target_args,
    tile_layout,
)
from qsim_tc.engine.small_gate.policy import select
from qsim_tc.engine.small_gate.tables import (
    CONFIG,
    DIRECT,
    DIRECT_USRC,
    DMMA_COMPILED,
    DMMA_CONFIG,
    DMMA_DEFAULT_D,
    DMMA_PIPE_COMPILED,
    DMMA_PIPE_CONFIG,
    KERNEL_MAX_D,
    MAX_QUBITS,
    ONE_PASS,
    STAGED,
    STAGED_EVERYWHERE_D,
    STAGED_VARIANTS,
    TILED_VARIANTS,
    DmmaConfig,
    DmmaPipeConfig,
    StagedConfig,
    TiledConfig,
    direct_name,
    dmma_name,
    dmma_pipe_name,
    real_type,
    staged_name,
    tiled_name,
)

__all__ = [
    "CONFIG", "DIRECT", "DIRECT_USRC", "DMMA_COMPILED", "DMMA_CONFIG", "DMMA_DEFAULT_D", "DMMA_PIPE_COMPILED",
    "DMMA_PIPE_CONFIG", "KERNEL_MAX_D", "MAX_QUBITS", "ONE_PASS", "STAGED", "STAGED_EVERYWHERE_D", "STAGED_VARIANTS",
    "TILED_VARIANTS", "DmmaConfig", "DmmaPipeConfig", "StagedConfig", "TiledConfig", "apply_direct_gpu",
    "apply_dmma_gpu", "apply_dmma_pipe_gpu", "apply_staged_gpu", "apply_tiled_gpu", "check_launch", "coalesced",
    "direct_name", "dmma_name", "dmma_pipe_name", "dmma_pipe_shared_bytes", "dmma_shared_bytes", "fits",
    "fits_dmma", "fits_dmma_pipe", "fits_staged", "gate_matrix_arg", "kernel_source", "launch_blocks",
    "real_type", "select", "smem_swizzle", "staged_layout_args", "staged_name", "target_args", "tile_layout",
    "tiled_name",
]
