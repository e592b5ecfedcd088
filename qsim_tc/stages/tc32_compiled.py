"""The complex64 tensor-core stage arithmetic of :mod:`qsim_tc.stages.tc32`, compiled (numba).

The numpy emulation spells each FP16 instruction out over float64 arrays (its operands broadcast
to rows x groups x inner): a QuantumVolume(18) took about 100 s, which kept the accuracy study of
the complex64 tensor-core stages at 20-24 qubits off a CPU. This module computes the same numbers
per group in one loop, without temporaries: the same splits of each group (scale to the exponent
14, the grid 2^4, ``lo1``, ``lo2``), the same six instructions per output (each instruction's terms
cut toward zero two bits below the largest exponent sum's last bit, summed exactly, truncated to
FP32), the same final FMA and unscaling. It must equal :func:`qsim_tc.stages.tc32.real_product` bit
for bit (tests/qsim_tc/test_stage_tc32_compiled.py); the numpy form stays the readable definition.

Why each step is exact here as there: the operands are FP16 values (at most 11 significant bits,
normal in float64), so their products are exact in float64 and their exponents are the float64
exponent fields; a cut term lies on the grid 2^(lead - 25) below 2^(lead + 2), so 17 of them
(16 products and the accumulator) sum exactly in float64, in any order.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from gemm.tcec import debias as db
from qsim_tc.stages import tc32

# no fastmath: every rounding here must be the IEEE one the numpy form takes
_jit = njit(cache=True, nogil=True, parallel=True, error_model="numpy")
_NONE = -100000  # tc_mma's exponent of a zero term
_CUT = 23 + db.TC_EXTRA_BITS  # a term is cut on the grid 2^(lead - _CUT)
INSTRUCTION_K = tc32.INSTRUCTION_K


@njit(cache=True, nogil=True, inline="always")
def _exp(x):
    """floor(log2 |x|) of a nonzero float64 that is normal (as FP16 and FP32 values are)."""
    return math.frexp(x)[1] - 1


@njit(cache=True, nogil=True, inline="always")
def _f16(x):
    """x (float64, or float32 widened) rounded to FP16, to nearest even, as a float64 value
    (``astype(float16)``: FP16 subnormals on the grid 2^-24, overflow to infinity)."""
    if x == 0.0 or not np.isfinite(x):
        return x
    q = math.ldexp(1.0, max(_exp(x), -14) - 10)
    r = np.rint(x / q) * q
    if abs(r) > 65504.0:
        return np.inf if r > 0 else -np.inf
    return r


@njit(cache=True, nogil=True, inline="always")
def _rz32(s):
    """float64 -> float32 rounded toward zero (tc_mma's ``_rz``)."""
    r = np.float32(s)
    if abs(np.float64(r)) > abs(s):
        r = np.nextafter(r, np.float32(0.0))
    return r


@njit(cache=True, nogil=True, inline="always")
def _instruction(c, a, ea, b, eb, n):
    """``tc_mma(c, a[:n], b[:n])`` for one output: a and b FP16 values (float64), ea and eb their
    exponents (_NONE for a zero), c the FP32 accumulator."""
    c64 = np.float64(c)
    lead = _exp(c64) if c64 != 0.0 and np.isfinite(c64) else _NONE
    for j in range(n):
        if ea[j] != _NONE and eb[j] != _NONE:
            lead = max(lead, ea[j] + eb[j])
    e = max(lead - _CUT, -1074)
    q = math.ldexp(1.0, e)
    s = np.trunc(c64 / q) * q if np.isfinite(c64) else c64
    if e > -1000:  # 1/q is a normal power of two: the product by it is the exact quotient
        inv = math.ldexp(1.0, -e)
        for j in range(n):
            p = a[j] * b[j]
            s += np.trunc(p * inv) * q if np.isfinite(p) else p
    else:
        for j in range(n):
            p = a[j] * b[j]
            s += np.trunc(p / q) * q if np.isfinite(p) else p
    return _rz32(s)


@njit(cache=True, nogil=True, inline="always")
def _product(c, a, ea, b, eb, inner):
    """One product of the tile for one output: one instruction, or at an inner dimension of 32 two
    chained ones of 16 (the first's FP32 result the second's accumulator)."""
    if inner <= INSTRUCTION_K:
        return _instruction(c, a, ea, b, eb, inner)
    c = _instruction(c, a[:INSTRUCTION_K], ea[:INSTRUCTION_K], b[:INSTRUCTION_K], eb[:INSTRUCTION_K], INSTRUCTION_K)
    return _instruction(c, a[INSTRUCTION_K:], ea[INSTRUCTION_K:], b[INSTRUCTION_K:], eb[INSTRUCTION_K:],
                        inner - INSTRUCTION_K)


@_jit
def _apply(parts, exps, xr, xi, out_r, out_i):
    """The groups (rows of xr/xi, complex64 parts) times the op: ``parts`` (4, 2h, 2h) the
    matrix's a1, a1s, a2, a3 (FP16 values), ``exps`` their exponents; out (g, h) float32 each."""
    h = xr.shape[1]
    inner = 2 * h
    grid = np.float32(tc32.GRID)
    for g in prange(xr.shape[0]):
        b = np.empty(inner, np.float32)
        for j in range(h):
            b[2 * j], b[2 * j + 1] = xr[g, j], xi[g, j]
        top = 0.0
        for j in range(inner):
            top = max(top, abs(np.float64(b[j])))
        e = min(max((_exp(top) if top > 0.0 else -1000) + 127, 20), 254)
        up = np.float32(math.ldexp(1.0, tc32.GROUP_TOP - (e - 127)))
        down = np.float32(math.ldexp(1.0, (e - 127) - tc32.GROUP_TOP - 3))
        split = np.empty((3, inner))  # hi, lo1, lo2
        es = np.empty((3, inner), np.int64)
        for j in range(inner):
            xs = np.float32(b[j] * up)
            hi = np.float32(np.float32(xs + grid) - grid)
            lo = np.float32(xs - hi)
            lo1 = _f16(np.float64(lo))
            split[0, j] = _f16(np.float64(hi))
            split[1, j] = lo1
            split[2, j] = _f16(np.float64(np.float32(lo - np.float32(lo1))))
            for t in range(3):
                es[t, j] = _exp(split[t, j]) if split[t, j] != 0.0 else _NONE
        for r in range(inner):
            hh = _product(np.float32(0.0), parts[0, r], exps[0, r], split[0], es[0], inner)
            cor = np.float32(0.0)
            # a2 hi, a1s lo1, a1s lo2, a2 lo1, a3 hi: the numpy form's order
            cor = _product(cor, parts[2, r], exps[2, r], split[0], es[0], inner)
            cor = _product(cor, parts[1, r], exps[1, r], split[1], es[1], inner)
            cor = _product(cor, parts[1, r], exps[1, r], split[2], es[2], inner)
            cor = _product(cor, parts[2, r], exps[2, r], split[1], es[1], inner)
            cor = _product(cor, parts[3, r], exps[3, r], split[0], es[0], inner)
            d = np.float32(np.float64(hh) + np.float64(cor) * tc32.LO)
            if r < h:
                out_r[g, r] = np.float32(d * down)
            else:
                out_i[g, r - h] = np.float32(d * down)


def apply_op(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:func:`qsim_tc.stages.tc32.apply_op`, compiled: the same (g, 2^k) complex64, bit for bit."""
    x, _ = tc32.op_groups(m, x)
    if not x.shape[0]:
        return x.copy()
    parts = np.stack([p.astype(np.float64) for p in tc32.split_matrix(tc32.real_form(m))])
    with np.errstate(divide="ignore"):
        exps = np.where(parts != 0, np.floor(np.log2(np.abs(parts))), _NONE).astype(np.int64)
    out_r = np.empty(x.shape, np.float32)
    out_i = np.empty(x.shape, np.float32)
    _apply(parts, exps, np.ascontiguousarray(x.real), np.ascontiguousarray(x.imag), out_r, out_i)
    return (out_r + 1j * out_i).astype(np.complex64)
