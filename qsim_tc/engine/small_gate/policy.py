"""Which small-gate kernel applies a gate, or none (the GEMM path): the measured default policy.

The kernels compute the same sums of products as the native method, so they stand in only for a
method that declares ``direct_small_gates``; emulated methods (whose arithmetic differs) always get
their GEMM. The measurements behind each branch are with the tables (``tables.py``).
"""

from __future__ import annotations

from qsim_tc.engine.small_gate.launch import (
    apply_direct_gpu,
    apply_dmma_gpu,
    apply_dmma_pipe_gpu,
    apply_staged_gpu,
    apply_tiled_gpu,
)
from qsim_tc.engine.small_gate.layout import coalesced, fits, fits_dmma, fits_dmma_pipe, fits_staged
from qsim_tc.engine.small_gate.tables import (
    CONFIG,
    DIRECT,
    DMMA_DEFAULT_D,
    KERNEL_MAX_D,
    MAX_QUBITS,
    SPREAD_KERNEL_D,
    STAGED,
    STAGED_EVERYWHERE_D,
    real_type,
)


def select(method, device, want, n_qubits: int, positions, itemsize: int):
    """The kernel for a gate on sorted physical ``positions``, or None for the GEMM path.

    Args:
        method: the gemm Method; only one with ``direct_small_gates`` may be replaced.
        device: the state's gemm.Device.
        want: None (the measured default policy), True (require a kernel) or False (never).
        n_qubits: width of the state.
        positions: physical target bits, ascending.
        itemsize: bytes per amplitude (16 or 8).

    Raises:
        ValueError: ``want`` is True but no kernel can stand in for this method or size.
    """
    if want is False:
        return None
    d = len(positions)
    allowed = method.direct_small_gates
    possible = allowed and device.is_gpu and fits(n_qubits, d)
    if not possible:
        if want is True:
            why = (f"method {method.name!r} computes every gate as its own GEMM" if not allowed
                   else f"the kernels handle 1..{MAX_QUBITS} targets on the GPU, on states of at least "
                        f"{CONFIG.get(d, (7,))[0]} + d qubits (got d={d}, {n_qubits} qubits, on the {device.name})")
            raise ValueError(f"small_gate_kernel=True cannot be honoured: {why}")
        return None
    chosen = _default_kernel(d, n_qubits, positions, itemsize)
    if chosen is None and want is True:  # where the default prefers a GEMM (d >= 5), the best kernel there
        direct = (real_type(itemsize), d) in DIRECT and coalesced(positions, itemsize)
        return apply_direct_gpu if direct else apply_tiled_gpu
    return chosen


def default_kernel_max_d(itemsize: int) -> int:
    """The widest gate that :func:`_default_kernel` gives a kernel at every placement: the DMMA
    kernel's widths for complex128, the CUDA-core kernels' for complex64 (whose d = 5 kernel
    serves spread targets only). The cost tables' ``kernel_max_d``."""
    return max(KERNEL_MAX_D, *DMMA_DEFAULT_D) if itemsize == 16 else KERNEL_MAX_D


def _default_kernel(d: int, n_qubits: int, positions, itemsize: int):
    """The measured default policy for a gate the kernels can serve; None where a GEMM is faster."""
    if d in DMMA_DEFAULT_D and fits_dmma(positions, itemsize):
        if coalesced(positions, itemsize) and fits_dmma_pipe(n_qubits, positions, itemsize):
            return apply_dmma_pipe_gpu
        return apply_dmma_gpu
    if d > KERNEL_MAX_D:
        if d in SPREAD_KERNEL_D and positions[-1] - positions[0] != d - 1 and (real_type(itemsize), d) in DIRECT:
            # spread targets, which a GEMM reaches only through a permutation pass
            return apply_direct_gpu if coalesced(positions, itemsize) else apply_tiled_gpu
        return None
    staged = STAGED.get((real_type(itemsize), d))
    if staged and d in STAGED_EVERYWHERE_D and fits_staged(n_qubits, positions, staged.log_t):
        return apply_staged_gpu
    if coalesced(positions, itemsize):
        return apply_direct_gpu
    if staged and fits_staged(n_qubits, positions, staged.log_t):
        return apply_staged_gpu
    return apply_tiled_gpu  # not reached while select() requires fits(): every staged tile fits then
