"""The native method: the library GEMM of the array module (cuBLAS through cupy, BLAS through numpy)."""

from __future__ import annotations

import math

import numpy as np

from gemm import error_model as em
from gemm.cuda import cublas
from gemm.method import Method
from gemm.options import Option, array_or_none

# OpenBLAS runs a complex (M, k) @ (k, n) with huge M and small k, n far below its real rate
# (measured 264 ms for k = n = 16 at M = 2^20 on 2 cores, against 42 ms for the same product
# as one real DGEMM of the interleaved view). Use the real form up to this n.
REAL_FORM_MAX_N = 16


def real_form(b: np.ndarray) -> np.ndarray:
    """The (2k, 2n) real matrix R with ``view_real(a @ b) == view_real(a) @ R`` for complex a, b.

    A complex row vector a (re/im interleaved) times b: [ar, ai] @ [[br, bi], [-bi, br]].
    """
    k, n = b.shape
    r = np.empty((k, 2, n, 2), dtype=b.real.dtype)
    r[:, 0, :, 0] = b.real
    r[:, 0, :, 1] = b.imag
    r[:, 1, :, 0] = -b.imag
    r[:, 1, :, 1] = b.real
    return r.reshape(2 * k, 2 * n)


def _use_real_form(a, b) -> bool:
    return (
        isinstance(a, np.ndarray)
        and a.ndim == 2
        and b.ndim == 2
        and a.dtype.kind == "c"
        and a.dtype == b.dtype
        and a.flags.c_contiguous
        and b.shape[1] <= REAL_FORM_MAX_N
        and a.shape[0] >= 4 * b.shape[0]
    )


class Native(Method):
    """``a @ b`` in the operands' own precision: ZGEMM/CGEMM/DGEMM/SGEMM."""

    name = "native"
    precision = "fp64"
    description = "cuBLAS (GPU) or BLAS (CPU) GEMM in the operands' precision"
    option_specs = {"out": Option(None, array_or_none(), "array the product is written into")}
    # the engine may apply gates of 1-6 qubits with a direct kernel: same arithmetic as this method
    direct_small_gates = True

    def workspace_bytes(self, m: int, k: int, n: int, dtype, *, device: str = "gpu", **options) -> int:
        """The real form of B on the CPU (``(2k, 2n)`` real, complex products of n <= 16); on the
        GPU a C-ordered copy of a transposed small operand (at most ``k * n`` elements)."""
        self.check_options(options)
        item = np.dtype(dtype).itemsize
        if device == "cpu":
            small_complex = np.dtype(dtype).kind == "c" and n <= REAL_FORM_MAX_N
            return 2 * int(k) * int(n) * item if small_complex else 0
        return int(k) * int(n) * item

    def error_model(self, ctx):
        """BLAS/cuBLAS (and the direct small-gate kernels, same sums): every operation rounded to
        nearest in the state's precision, any order (:func:`gemm.error_model.fp_gemm`)."""
        return em.fp_gemm(ctx)

    def _run(self, ops, report, timer, *, out=None):
        a, b = ops.a, ops.b
        with timer.stage("gemm"):
            if _use_real_form(a, b):
                r = real_form(b)
                real_out = None if out is None else out.view(a.real.dtype)
                c = np.matmul(a.view(a.real.dtype), r, out=real_out).view(a.dtype)
                report.choices["form"] = "real-interleaved"
            elif report.device == "gpu" and cublas.supported(a, b):
                c = cublas.matmul(a, b, out=out)
                report.choices["form"] = "cublas-direct"
            else:
                c = ops.xp.matmul(a, b, out=out)
        report.choices["library"] = "cublas" if report.device == "gpu" else "blas"
        return c


class Native32(Native):
    """Native GEMM with an FP32-class state (CGEMM/SGEMM); the reference point of the FP32 methods."""

    name = "native32"
    precision = "fp32"
    description = "cuBLAS/BLAS GEMM, simulator keeps a complex64 state"


class Native3M(Native):
    """Complex GEMM by Gauss's three real products (cuBLAS ZGEMM3M/CGEMM3M) on the GPU.

    A quarter fewer multiplications than ZGEMM; the error of the real part is unchanged and the
    imaginary part's bound grows by a small constant. Batched products (no 3M routine for
    complex128 in cuBLAS) and the CPU run the ordinary GEMM; the report says which ran.
    """

    name = "native3m"
    precision = "fp64"
    # Declared, not inherited by accident: as for batched products, gates the small-gate kernels
    # serve take the ordinary four-product arithmetic; 3M is a property of cuBLAS's large GEMMs.
    direct_small_gates = True
    description = "cuBLAS ZGEMM3M (three real products) on the GPU; ordinary GEMM elsewhere"

    def error_model(self, ctx):
        """The ordinary GEMM's model where the report says the 3M routine did not run; for Gauss's
        form (``form == "gemm3m"``): Re = P1 - P2 as before, Im = P3 - P1 - P2 with
        ``P3 = (Ar + Ai)(Br + Bi)`` (its operand sums rounded first): per
        entry ``|dIm| <= (2 gamma_(k+1) + 2 gamma_k + 4 gamma_2 (1 + gamma_(k+1))) (|U||X|)``
        (``|ar| + |ai| <= sqrt(2) |a|``), ``|dRe| <= gamma_(k+1) (|U||X|)``."""
        if ctx.choices.get("form") != "gemm3m":
            return em.fp_gemm(ctx)
        u, k = ctx.u, ctx.k
        g2 = em.gamma(2, u)
        c_im = 2.0 * em.gamma(k + 1, u) * (1.0 + u) ** 2 + 2.0 * em.gamma(k, u) + 4.0 * g2 * (1.0 + em.gamma(k + 1, u))
        c_re = em.gamma(k + 1, u)
        gb, ge = em.rounded_gate(ctx)
        prod = math.hypot(c_re, c_im) * (1.0 + u) * ctx.abs_norm * ctx.x_norm
        est = em.RMS_ROUNDING * u * math.sqrt(2 * k + 4) * ctx.op_norm * ctx.x_norm
        return em.ProductError(prod + gb, math.hypot(est, ge), {"gemm3m": prod, "gate_rounding": gb})

    def _run(self, ops, report, timer, *, out=None):
        a, b = ops.a, ops.b
        if report.device == "gpu" and ops.is_complex and a.ndim == 2 and b.ndim == 2 and cublas.supported(a, b):
            with timer.stage("gemm"):
                c = cublas.matmul(a, b, out=out, gauss=True)
            report.choices.update(library="cublas", form="gemm3m")
            return c
        report.notes.append("3M routine not used for this call (CPU, real, or batched operands)")
        return super()._run(ops, report, timer, out=out)
