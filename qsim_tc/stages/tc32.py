"""The complex64 stage kernel's tensor-core arithmetic (``TcA`` in ``kernel.cu``), emulated in
numpy: what CI checks the numerics of the GPU's complex64 tensor-core stages with.

A dense op of k = 2 or 3 targets maps every group of 2^k amplitudes x to M x through the real form
``[[Re M, -Im M], [Im M, Re M]]`` on FP16 tensor cores (one ``m16n8k16`` for k = 3, whose real
inner dimension is 16; one ``m16n8k8`` for k = 2; k = 4, defined here for the kernel's next step,
two chained ``m16n8k16``), with the leading product exact:

- a group (the product's column) is scaled by the power of two that brings its largest real part
  just below 2^15 (no amplitude is too small or too large for FP16, whatever the state's norm) and
  cut on the grid 2^4: ``hi`` is an integer of at most 11 bits times it (an FP16 value),
  ``lo = x - hi`` (exact in FP32) rounded to FP16 as ``lo1``, and ``lo2 = FP16(lo - lo1)`` (below
  2^-8, so its product with ``a1s = a1 2^11`` is in the corrections' units);
- the matrix is scaled by 2^3 and cut from its complex128 value: a row (an output's Re or Im
  part) whose largest value has exponent e on the grid 2^(e - 8): ``a1`` (at most 9 bits; at k = 4
  the grid 2^(e - 7), 8 bits), ``a2 = FP16((a - a1) 2^11)``, ``a3 = FP16((a - a1) 2^11 - a2)``;
  ``a1s = a1 2^11`` (exact);
- ``a1 * hi`` sums at most 16 products of integers of at most 2^9 and 2^11 on one grid (32 of
  at most 2^8 and 2^11 at k = 4, two chained instructions), at most 2^24 units: the tensor core's
  FP32 sum is exact (no truncation toward zero, so no bias and nothing to debias, where
  error-corrected TF32/FP16 products lose about 3/8 of an ulp a result);
- the corrections ``a2 hi + a1s lo1 + a1s lo2 + a2 lo1 + a3 hi`` (units of 2^-11) accumulate on the tensor
  core (each instruction modelled by :func:`gemm.tcec.emulate.tc_mma`: its truncation lands near
  2^-34 of the result); ``(hh + cor 2^-11)`` is one FMA and the unscaling (the output column's
  group scale and the matrix's) one exact product.

What is left: the final FP32 rounding of each output (FP32 GEMMs and FMA loops add a rounding a
term), ``lo2``'s rounding (about 2^-34 of the group's largest part), the matrix to about 2^-33,
and the corrections' truncation: unbiased, and below a complex64 GEMM's error per op.
"""

from __future__ import annotations

import numpy as np

from gemm.tcec.emulate import tc_mma

TENSOR_K = (2, 3)  # the op widths the kernel runs on the tensor cores
# the widths this arithmetic is defined for: k = 4 (a real inner dimension of 32, two chained
# m16n8k16 a product) is the next kernel step (design notes: the split is paid once an amplitude,
# the product grows as 2^k); emulated and tested here, not yet in the kernel
DEFINED_K = (2, 3, 4)
INSTRUCTION_K = 16  # FP16 m16n8k16: a wider inner dimension chains instructions of 16
# the matrix's leading part keeps 9 bits (8 at k = 4): a1 * hi then sums 2^(k+1) products of at most
# 2^9 (2^8) and 2^11 units, at most 2^24: exact in the tensor core's FP32 sum for every k
A1_BITS = {2: 9, 3: 9, 4: 8}
MATRIX_SCALE = 8.0  # the kernel's TC_SA: a1 2^11 stays below FP16's largest value
GROUP_TOP = 14  # a group is scaled so that its largest real part has this exponent (below 2^15)
GRID = 1.5 * 2.0**27  # the kernel's magic number for the grid 2^4 of the scaled amplitudes
LO = 2.0 ** -11


def real_form(m: np.ndarray) -> np.ndarray:
    """The float64 real form of a 2^k x 2^k complex matrix, rows ``Re out 0..``, then ``Im out 0..``;
    columns ``Re x_j, Im x_j`` adjacent for each input j (the FP16 instructions' k order)."""
    m = np.asarray(m, np.complex128)
    n = m.shape[0]
    out = np.empty((2 * n, 2 * n))
    out[:n, 0::2], out[:n, 1::2] = m.real, -m.imag
    out[n:, 0::2], out[n:, 1::2] = m.imag, m.real
    return out


def _columns(x: np.ndarray) -> np.ndarray:
    """Groups (g, 2^k) complex64 as the real B operand (2^(k+1), g), ``Re x_j, Im x_j`` adjacent."""
    x = np.asarray(x, np.complex64)
    out = np.empty((2 * x.shape[1], x.shape[0]), np.float32)
    out[0::2], out[1::2] = x.real.T, x.imag.T
    return out


def _f16(x: np.ndarray) -> np.ndarray:
    """Round to FP16 (to nearest even) and back, as float32 (``cvt.rn.f16``, from float32 or float64)."""
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(np.float16).astype(np.float32)


def _exponent(x: np.ndarray, axis: int) -> np.ndarray:
    """The unbiased binary exponent of the largest ``|x|`` along ``axis`` (``floor(log2 max|x|)``;
    a very small exponent where all are zero, the kernels' floor)."""
    m = np.abs(np.asarray(x, np.float64)).max(axis=axis)
    _, e = np.frexp(m)  # m = f 2^e, f in [0.5, 1)
    return np.where(m > 0, e.astype(np.int64) - 1, -1000)


def split_matrix(a: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(a1, a1s, a2, a3)`` of a real form (float64, rows x inner) scaled by MATRIX_SCALE: the
    kernel's ``TcA::make``, each an FP16 value in float32; ``a1`` keeps :data:`A1_BITS` of the
    width (inner = 2^(k+1)) bits of each row's largest value."""
    a = np.asarray(a, np.float64) * MATRIX_SCALE
    bits = A1_BITS[a.shape[1].bit_length() - 2]
    e = np.maximum(_exponent(a, 1), 1023 - 900 - 1023)[:, None]  # the kernel's floor, unbiased
    grid = np.ldexp(1.0, e - (bits - 1))
    hi = np.round(a / grid) * grid  # the magic-number rounding: to nearest, ties to even
    r = (a - hi) * 2048.0
    a2 = _f16(r)
    return _f16(hi), _f16(hi * 2048.0), a2, _f16(r - a2.astype(np.float64))


def _group_exponents(b: np.ndarray) -> np.ndarray:
    """The biased FP32 exponent of each column's largest ``|value|``, clamped to [20, 254] as the
    kernel clamps it (subnormal and zero columns: 20)."""
    return np.clip(_exponent(np.asarray(b, np.float32), 0) + 127, 20, 254)


def split_groups(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(hi, lo1, lo2, down)`` of the B operand (float32, inner x groups): the kernel's
    ``TcA::times``. Each column is scaled by ``2^(14 - E)`` (E: its largest value's exponent) and cut
    on the grid 2^4; ``lo2`` is what FP16 left of ``lo``; ``down`` (per column) undoes
    the column's and the matrix's scales."""
    e = _group_exponents(b)
    up = np.ldexp(np.float32(1.0), GROUP_TOP - (e - 127)).astype(np.float32)
    xs = (np.asarray(b, np.float32) * up[None, :]).astype(np.float32)
    c = np.float32(GRID)
    hi = ((xs + c).astype(np.float32) - c).astype(np.float32)
    lo = (xs - hi).astype(np.float32)
    lo1 = _f16(lo)
    lo2 = _f16((lo - lo1).astype(np.float32))
    down = np.ldexp(np.float32(1.0), (e - 127) - GROUP_TOP - 3).astype(np.float32)
    return _f16(hi), lo1, lo2, down


def _products(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The operands of one instruction as :func:`~gemm.tcec.emulate.tc_mma` takes them, broadcasting
    to (rows, groups, inner)."""
    return a[:, None, :].astype(np.float64), b.T[None, :, :].astype(np.float64)


def real_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (a: float64 real form of the matrix; b: float32, inner dimension 8, 16 or 32) as the
    kernel's tile computes it (module docstring); at 32 each product is two chained instructions
    of 16 (inputs 0-7, then 8-15)."""
    inner = a.shape[1]
    if inner not in (8, 16, 32) or b.shape[0] != inner:
        raise ValueError(f"the tile's inner dimension is 8, 16 or 32 and the operands agree; got {a.shape} @ {b.shape}")
    a1, a1s, a2, a3 = split_matrix(a)
    bh, bl, bl2, down = split_groups(b)
    zero = np.zeros((a.shape[0], b.shape[1]), np.float32)
    hh = tc_mma(zero, *_products(a1, bh), group=INSTRUCTION_K)
    cor = zero
    for x, y in ((a2, bh), (a1s, bl), (a1s, bl2), (a2, bl), (a3, bh)):
        cor = tc_mma(cor, *_products(x, y), group=INSTRUCTION_K)
    with np.errstate(over="ignore", invalid="ignore"):
        d = (hh.astype(np.float64) + cor.astype(np.float64) * LO).astype(np.float32)
        return (d * down[None, :]).astype(np.float32)


def op_groups(m: np.ndarray, x) -> tuple[np.ndarray, int]:
    """``(x as complex64, k)`` for an op of matrix ``m`` on groups ``x`` (g, 2^k); ValueError where
    k is not in :data:`DEFINED_K` or ``m`` is not 2^k x 2^k."""
    x = np.asarray(x, np.complex64)
    k = x.shape[1].bit_length() - 1
    if k not in DEFINED_K or np.shape(m) != (1 << k, 1 << k):
        raise ValueError(f"a tensor-core op takes 2^k x 2^k matrices, k in {DEFINED_K}; got {np.shape(m)} "
                         f"for groups of {x.shape[1]}")
    return x, k


def apply_op(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Groups ``x`` (g, 2^k) complex64 times the op's matrix ``m`` (2^k x 2^k, complex128 as the
    program holds it; k in :data:`DEFINED_K`) as the complex64 kernel's tensor cores compute them:
    (g, 2^k) complex64."""
    x, k = op_groups(m, x)
    if not x.shape[0]:
        return x.copy()
    y = real_product(real_form(m), _columns(x))
    half = 1 << k
    return (y[0:half].T + 1j * y[half:].T).astype(np.complex64)
