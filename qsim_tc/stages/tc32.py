"""The complex64 stage kernel's tensor-core arithmetic (``TileOp<float>`` in ``kernel.cu``),
emulated in numpy: what CI checks the numerics of the GPU's complex64 stages with.

A dense op of k = 2 or 3 targets maps every group of 2^k amplitudes x to M x through the real form
``[[Re M, -Im M], [Im M, Re M]]`` on TF32 or FP16 tensor cores with error correction (Ootomo and
Yokota, the ``ec`` scheme of :mod:`gemm.tcec`): each real operand v is split into ``hi = round(v)``
and ``lo = round((v - hi) 2^11)`` in the format (TF32: to nearest, ties away; FP16: to nearest
even, of v scaled by 2^14 for the matrix and 2^15 for the amplitudes, whose modulus is at most 1).
The real inner dimension (2^(k+1): Re and Im of each input) runs in instructions of 8 (TF32
m16n8k8: inputs 0-3, then 4-7) or 16 (FP16 m16n8k16; a 2-qubit op m16n8k8). Per output value:

- each instruction's ``hi*hi`` sum is computed from zero (the tensor core: exact products, aligned
  to the largest and cut two bits below its last bit, summed, truncated to FP32;
  :func:`gemm.tcec.emulate.tc_mma`), and the instructions' results are added in FP32 (round to
  nearest);
- a correction accumulator starts with the expected truncation loss of each ``hi*hi`` result
  (``sign(p) 2^e(p) * beta`` where p's lowest two significand bits are not both zero:
  :mod:`gemm.tcec.debias`, the per-product form with the GPU's extra loss), then takes ``mid*hi``
  and ``hi*lo`` of each instruction on the tensor core; it is added times 2^-11 in one FMA.
  ``lo*lo`` is dropped. With 5 terms (:class:`Arith`) the matrix is split in three parts and a
  second correction (2^-22) takes its third part times hi and its second times lo.

The matrix is split from its complex128 value (the residuals exact in double): three parts hold it
to 33 bits, beyond the FP32 rounding of each gate that a complex64 GEMM or FMA loop starts from.

The emulation follows the kernel step for step; the tensor core's own rounding is modelled as
:func:`~gemm.tcec.emulate.tc_mma` models it (measured to a few ulps of the hardware).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemm.tcec import debias as db
from gemm.tcec.emulate import tc_mma
from gemm.tcec.split import LO_SHIFT, mul_pow2, split, tf32_rna

TENSOR_K = (2, 3)  # the op widths the kernel runs on the tensor cores
FORMATS = ("tf32", "fp16")
KSTEP = {"tf32": 8, "fp16": 16}  # real inner values an instruction (m16n8k8 TF32, m16n8k16 FP16)
SCALE_EXP = {"tf32": (0, 0), "fp16": (14, 15)}  # (matrix, amplitudes): FP16's powers of two


@dataclass(frozen=True)
class Arith:
    """The complex64 kernel's tensor-core arithmetic: ``fmt`` (``"tf32"`` or ``"fp16"``) and
    ``terms`` (3: hi*hi, mid*hi, hi*lo; 5: the matrix in three parts, adding its third part times
    hi and its second times lo). Compile options: :meth:`options`."""

    fmt: str = "tf32"
    terms: int = 3

    def __post_init__(self):
        if self.fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {FORMATS}, not {self.fmt!r}")
        if self.terms not in (3, 5):
            raise ValueError(f"terms must be 3 or 5, not {self.terms!r}")

    def beta(self, k: int) -> float:
        """The per-product debias constant of a k-qubit op (``DEBIAS_BETA<k>``): F 2^-12 for the
        per-product fraction F of an instruction of min(2^(k+1), KSTEP) products, with the extra
        loss measured on the GPU (``hardware=True``), as a float32 value."""
        return float(db.product_debias_scale(self.fmt, 1 << (k + 1), hardware=True))

    def options(self) -> tuple[str, ...]:
        """The kernel's compile options for this arithmetic."""
        return (f"-DTC_FMT={FORMATS.index(self.fmt)}", f"-DTC_TERMS={self.terms}",
                f"-DDEBIAS_BETA2={self.beta(2)!r}f", f"-DDEBIAS_BETA3={self.beta(3)!r}f")


def real_form(m: np.ndarray) -> np.ndarray:
    """The float64 real form of a 2^k x 2^k complex matrix, rows ``Re out 0..``, then ``Im out 0..``;
    columns in fours of inputs: ``Re x_4s .. x_4s+3``, then ``Im x_4s .. x_4s+3`` (s = 0, 1 for
    k = 3): a TF32 instruction's eight columns, as the kernel's A fragments hold them. (Within one
    instruction the order of the products does not change the tensor core's result.)"""
    m = np.asarray(m, np.complex128)
    n = m.shape[0]
    re, im = m.real, m.imag
    cols = []
    for s in range(0, n, 4):
        cols.append(np.vstack([re[:, s:s + 4], im[:, s:s + 4]]))  # the Re x columns
        cols.append(np.vstack([-im[:, s:s + 4], re[:, s:s + 4]]))  # the Im x columns
    return np.hstack(cols)


def _columns(x: np.ndarray) -> np.ndarray:
    """Groups (g, 2^k) complex64 as the real B operand (2^(k+1), g) in :func:`real_form`'s order."""
    x = np.asarray(x, np.complex64)
    parts = []
    for s in range(0, x.shape[1], 4):
        parts.append(x[:, s:s + 4].real.T)
        parts.append(x[:, s:s + 4].imag.T)
    return np.vstack(parts).astype(np.float32)


def split_wide(x: np.ndarray, fmt: str, parts: int, scale_exp: int = 0) -> list[np.ndarray]:
    """``parts`` parts of float64 ``x`` (times ``2^scale_exp``) as the kernel's ``tc_split_wide``
    makes them from the complex128 matrix pool: part q rounds the residual r (TF32: through FP32;
    FP16: directly), and r becomes ``(r - part) 2^11``, exact in double. Float32 arrays."""
    r = np.asarray(x, np.float64) * 2.0**scale_exp
    out = []
    for _ in range(parts):
        with np.errstate(over="ignore", invalid="ignore"):
            part = tf32_rna(r.astype(np.float32)) if fmt == "tf32" else r.astype(np.float16).astype(np.float32)
        out.append(part)
        r = (r - part.astype(np.float64)) * 2.0**LO_SHIFT
    return out


def _lead_loss(p: np.ndarray, beta: float) -> np.ndarray:
    """``debias_lead(p) * beta`` exactly (float64): the leading bit of p where its two lowest
    significand bits are not both zero, else 0."""
    bits = p.view(np.uint32)
    lead = np.where((bits & np.uint32(3)) != 0, bits & np.uint32(0xFF800000), np.uint32(0)).astype(np.uint32)
    return lead.view(np.float32).astype(np.float64) * float(np.float32(beta))


def _products(a: np.ndarray, b: np.ndarray, s: int, kstep: int) -> np.ndarray:
    """Exact products of instruction s: (rows, groups, kstep) float64 of a (rows, K), b (K, groups)."""
    sl = slice(s * kstep, (s + 1) * kstep)
    return a[:, None, sl].astype(np.float64) * b[sl, :].T[None, :, :].astype(np.float64)


def _f32(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float32)


def real_product(a: np.ndarray, b: np.ndarray, arith: Arith = Arith(), beta: float | None = None) -> np.ndarray:
    """``a @ b`` (a: float64, the matrix; b: float32; inner dimension 8 or 16) as the kernel's
    error-corrected tile computes
    it in ``arith`` (module docstring); ``beta``: the debias constant (default ``arith``'s for the
    op width of this inner dimension)."""
    fmt, kstep = arith.fmt, KSTEP[arith.fmt]
    inner = a.shape[1]
    if inner not in (8, 16) or b.shape[0] != inner:
        raise ValueError(f"the tile's inner dimension is 8 or 16 and the operands agree; got {a.shape} @ {b.shape}")
    beta = arith.beta(inner.bit_length() - 2) if beta is None else beta
    sa, sb = SCALE_EXP[fmt]
    parts = split_wide(a, fmt, 3 if arith.terms == 5 else 2, sa)
    bh, bl = split(np.ascontiguousarray(b, np.float32), fmt, sb)
    steps = max(1, inner // kstep)
    kb = min(kstep, inner)
    zero = np.zeros((a.shape[0], b.shape[1]), np.float32)
    p = [tc_mma(zero, _products(parts[0], bh, s, kb)) for s in range(steps)]
    p1 = p[1] if steps == 2 else zero
    with np.errstate(over="ignore", invalid="ignore"):
        acc = np.float32(0.0) + (p[0] + p1)  # float32 additions, round to nearest
    cor = zero
    for q in p:
        cor = _f32(cor.astype(np.float64) + _lead_loss(q, beta))  # one FMA: lead * beta is exact
    cor2 = zero
    for s in range(steps):
        cor = tc_mma(cor, _products(parts[1], bh, s, kb))
        cor = tc_mma(cor, _products(parts[0], bl, s, kb))
        if arith.terms == 5:
            cor2 = tc_mma(cor2, _products(parts[2], bh, s, kb))
            cor2 = tc_mma(cor2, _products(parts[1], bl, s, kb))
    lo = 2.0**-LO_SHIFT
    if arith.terms == 5:
        cor = _f32(cor.astype(np.float64) + cor2.astype(np.float64) * lo)
    out = _f32(acc.astype(np.float64) + cor.astype(np.float64) * lo)
    return mul_pow2(out, -(sa + sb)) if sa + sb else out


def apply_op(m: np.ndarray, x: np.ndarray, arith: Arith = Arith(), beta: float | None = None) -> np.ndarray:
    """Groups ``x`` (g, 2^k) complex64 times the op's matrix ``m`` (2^k x 2^k, complex128 as the
    program holds it; k = 2 or 3) as the complex64 kernel's tensor cores compute them in ``arith``:
    (g, 2^k) complex64."""
    x = np.asarray(x, np.complex64)
    k = x.shape[1].bit_length() - 1
    if k not in TENSOR_K or np.shape(m) != (1 << k, 1 << k):
        raise ValueError(f"a tensor-core op takes 2^k x 2^k matrices, k in {TENSOR_K}; got {np.shape(m)} "
                         f"for groups of {x.shape[1]}")
    if not x.shape[0]:
        return x.copy()
    y = real_product(real_form(m), _columns(x), arith, beta)
    half = 1 << k
    return (y[:half].T + 1j * y[half:].T).astype(np.complex64)


DEFAULT = Arith("tf32", 3)  # the kernel's arithmetic (kernel.TC32_ARITH starts as this)
