"""The native method: the library GEMM of the array module (cuBLAS through cupy, BLAS through numpy)."""

from __future__ import annotations

from gemm.method import Method


class Native(Method):
    """``a @ b`` in the operands' own precision: ZGEMM/CGEMM/DGEMM/SGEMM."""

    name = "native"
    precision = "fp64"
    description = "cuBLAS (GPU) or BLAS (CPU) GEMM in the operands' precision"
    options = {"out": None}

    def _run(self, ops, report, timer, *, out=None):
        with timer.stage("gemm"):
            c = ops.xp.matmul(ops.a, ops.b, out=out)
        report.choices["library"] = "cublas" if report.device == "gpu" else "blas"
        return c


class Native32(Native):
    """Native GEMM with an FP32-class state (CGEMM/SGEMM); the reference point of the FP32 methods."""

    name = "native32"
    precision = "fp32"
    description = "cuBLAS/BLAS GEMM, simulator keeps a complex64 state"
