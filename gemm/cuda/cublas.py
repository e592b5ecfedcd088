"""cuBLAS calls of the GEMM layer: the handle, the enums of ``gemmEx``, and direct products.

Direct products for the shapes the engine produces, without the copies cupy.matmul makes.

``cupy.matmul`` copies a transposed (F-contiguous) operand into C order before calling cuBLAS,
and runs a 2-D operand broadcast against a 3-D one through a pointer-array batched GEMM. Here a
transposed view becomes cuBLAS's ``T`` flag, and the broadcast operand gets stride 0 in a
strided-batched GEMM. Row-major products are issued as their col-major transposes:
C = A @ B  <=>  C^T = B^T @ A^T.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

# enums of cublas_api.h and library_types.h used by the gemmEx calls of the families
OP_N, OP_T = 0, 1
CUDA_R_32F, CUDA_R_16F, CUDA_R_8I, CUDA_R_32I = 0, 2, 3, 10
COMPUTE_32F, COMPUTE_32I, COMPUTE_32F_FAST_TF32 = 68, 72, 77
GEMM_DEFAULT = -1
_N, _T = OP_N, OP_T
_I32_ONE, _I32_ZERO = np.array(1, dtype=np.int32), np.array(0, dtype=np.int32)


def host_scalar_handle():
    """The current device's cuBLAS handle, set to read alpha and beta from host memory."""
    from cupy.cuda import cublas, device  # noqa: PLC0415 - optional dependency

    handle = device.get_cublas_handle()
    cublas.setPointerMode(handle, 0)  # host scalars
    return handle


def gemm_s8(m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc) -> None:
    """C (m x n, column-major, INT32) = A^T B with A (k x m) and B (k x n) INT8, column-major
    (the TN layout: both operands K-major). ``lda``, ``ldb``, ``ldc`` multiples of 4."""
    from cupy.cuda import cublas  # noqa: PLC0415 - optional dependency

    handle = host_scalar_handle()
    cublas.gemmEx(handle, OP_T, OP_N, int(m), int(n), int(k), _I32_ONE.ctypes.data, int(a_ptr), CUDA_R_8I,
                  int(lda), int(b_ptr), CUDA_R_8I, int(ldb), _I32_ZERO.ctypes.data, int(c_ptr), CUDA_R_32I,
                  int(ldc), COMPUTE_32I, GEMM_DEFAULT)


def _routine(dtype, batched: bool, gauss: bool = False):
    """The cuBLAS entry point; ``gauss`` picks the 3M (three real products) variant of a complex GEMM."""
    from cupy.cuda import cublas  # noqa: PLC0415

    prefix = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
              np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}[np.dtype(dtype)]
    if gauss and prefix in "cz" and not batched:
        return _gemm3m(prefix)
    return getattr(cublas, prefix + ("gemmStridedBatched" if batched else "gemm"))


def _gemm3m(prefix: str):
    """cublas{C,Z}gemm3m: from cupy's bindings when they have it, else from the loaded libcublas."""
    from cupy.cuda import cublas  # noqa: PLC0415

    fn = getattr(cublas, prefix + "gemm3m", None)
    if fn is not None:
        return fn
    return _ctypes_gemm3m(prefix)


def _ctypes_gemm3m(prefix: str):
    lib = None
    for name in ("libcublas.so.13", "libcublas.so.12", ctypes.util.find_library("cublas")):
        if name:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
    if lib is None:
        raise RuntimeError("cuBLAS gemm3m is not reachable: libcublas could not be loaded")
    fn = getattr(lib, f"cublas{prefix.upper()}gemm3m")
    vp, i = ctypes.c_void_p, ctypes.c_int
    fn.argtypes = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
    fn.restype = i

    def call(handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        status = fn(handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        if status != 0:
            raise RuntimeError(f"cublas{prefix.upper()}gemm3m failed with status {status}")

    return call


def _layout(x, name):
    """(flag, leading dimension) of a 2-D operand seen as the col-major transpose cuBLAS wants."""
    rows, cols = x.shape
    if x.flags.c_contiguous:
        return _N, cols
    if x.flags.f_contiguous:
        return _T, rows
    raise ValueError(f"{name} must be C- or F-contiguous for a direct cuBLAS call")


def supported(a, b) -> bool:
    """True when :func:`matmul` handles these operands (same dtype, contiguous layouts)."""
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64, np.complex64, np.complex128):
        return False
    if a.ndim == 2 and b.ndim == 2:
        return (a.flags.c_contiguous or a.flags.f_contiguous) and (b.flags.c_contiguous or b.flags.f_contiguous)
    return a.ndim == 2 and b.ndim == 3 and a.flags.c_contiguous and b.flags.c_contiguous


def matmul(a, b, out=None, gauss: bool = False):
    """``a @ b`` for 2-D @ 2-D (C- or F-contiguous) or 2-D @ 3-D (C-contiguous), one cuBLAS call.

    ``gauss``: complex 2-D products through cuBLAS's 3M routine (Gauss's three real products:
    a quarter fewer flops, slightly larger error in the imaginary part).
    """
    import cupy  # noqa: PLC0415

    handle = cupy.cuda.device.get_cublas_handle()
    one = np.ones(1, dtype=a.dtype)
    zero = np.zeros(1, dtype=a.dtype)
    if a.ndim == 2 and b.ndim == 2:
        # a transposed *small* operand (the gate) is copied to C order: cuBLAS picks slow kernels
        # for T against a huge N dimension at k = n = 32 (69 ms against 4 ms measured at 28 qubits)
        if not b.flags.c_contiguous and b.size <= a.size:
            b = cupy.ascontiguousarray(b)
        elif not a.flags.c_contiguous and a.size <= b.size:
            a = cupy.ascontiguousarray(a)
        m, k = a.shape
        n = b.shape[1]
        c = out if out is not None else cupy.empty((m, n), dtype=a.dtype)
        tb, ldb = _layout(b, "b")
        ta, lda = _layout(a, "a")
        _routine(a.dtype, False, gauss)(handle, tb, ta, n, m, k, one.ctypes.data, b.data.ptr, ldb,
                                 a.data.ptr, lda, zero.ctypes.data, c.data.ptr, n)
        return c
    # (m, k) @ (p, k, n): the left operand is shared by every batch (stride 0)
    p, k, n = b.shape
    m = a.shape[0]
    c = out if out is not None else cupy.empty((p, m, n), dtype=a.dtype)
    _routine(a.dtype, True)(handle, _N, _N, n, m, k, one.ctypes.data, b.data.ptr, n, k * n,
                            a.data.ptr, k, 0, zero.ctypes.data, c.data.ptr, n, m * n, p)
    return c


def gemm_s8_batched(m, n, k, a_ptr, lda, stride_a, b_ptr, ldb, stride_b, c_ptr, ldc, stride_c, batch) -> None:
    """``batch`` products of :func:`gemm_s8` in one cuBLAS call (``gemmStridedBatchedEx``): product
    ``i`` reads A and B ``i * stride_a`` and ``i * stride_b`` INT8 elements on and writes C
    ``i * stride_c`` INT32 elements on (strides in elements, as cuBLAS takes them)."""
    from cupy.cuda import cublas  # noqa: PLC0415 - optional dependency

    handle = host_scalar_handle()
    cublas.gemmStridedBatchedEx(handle, OP_T, OP_N, int(m), int(n), int(k), _I32_ONE.ctypes.data, int(a_ptr),
                                CUDA_R_8I, int(lda), int(stride_a), int(b_ptr), CUDA_R_8I, int(ldb), int(stride_b),
                                _I32_ZERO.ctypes.data, int(c_ptr), CUDA_R_32I, int(ldc), int(stride_c), int(batch),
                                COMPUTE_32I, GEMM_DEFAULT)
