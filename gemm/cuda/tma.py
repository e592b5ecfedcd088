"""Tensor maps for Hopper's tensor memory accelerator, and launching a kernel that takes them.

A tensor map (``CUtensorMap``, 128 bytes) describes a global array to the TMA copy engine: its
dimensions, strides, the box one copy moves and the shared-memory swizzle it writes. The driver
encodes it (``cuTensorMapEncodeTiled``); cupy exposes neither that call nor by-value struct
arguments, so both go through ctypes here: the encode through the driver library, the launch
through cupy's ``launchKernel`` binding with a parameter array built by hand.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

_UINT32 = 2  # CU_TENSOR_MAP_DATA_TYPE_UINT32: the workspaces' words, whatever they pack
_INTERLEAVE_NONE = 0
_SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B: chunk c of row r at c ^ (r % 8), as wgmma reads it
_L2_PROMOTION_256B = 3
_OOB_FILL_NONE = 0


class TensorMap(ctypes.Structure):
    """An encoded ``CUtensorMap`` (opaque, 128 bytes)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


@functools.lru_cache(maxsize=None)
def _encode_tiled():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise RuntimeError("TMA tensor maps need the CUDA driver library (libcuda.so.1)") from e
    f = lib.cuTensorMapEncodeTiled
    f.restype = ctypes.c_int
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    f.argtypes = [ctypes.POINTER(TensorMap), ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return f


def words_map(ptr: int, batch: int, rows: int, words: int, box_rows: int, box_words: int = 32) -> TensorMap:
    """Map of a C-contiguous ``(batch, rows, words)`` array of 32-bit words at device address
    ``ptr``; one copy moves ``box_words x box_rows`` of one batch, 128-byte swizzled."""
    if box_words * 4 != 128 or not 1 <= box_rows <= 256:
        raise ValueError(f"box of {box_words} words x {box_rows} rows: the 128-byte swizzle takes 32 words "
                         "and at most 256 rows")
    if words * 4 % 16 or ptr % 16:
        raise ValueError("tensor map: rows and the base address must be 16-byte aligned")
    dims = (ctypes.c_uint64 * 3)(words, rows, batch)
    strides = (ctypes.c_uint64 * 2)(words * 4, rows * words * 4)
    box = (ctypes.c_uint32 * 3)(box_words, box_rows, 1)
    elem = (ctypes.c_uint32 * 3)(1, 1, 1)
    m = TensorMap()
    rc = _encode_tiled()(ctypes.byref(m), _UINT32, 3, ptr, dims, strides, box, elem, _INTERLEAVE_NONE,
                         _SWIZZLE_128B, _L2_PROMOTION_256B, _OOB_FILL_NONE)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {rc}) for {batch} x {rows} x {words} words")
    return m


_CTYPES = {np.int64: ctypes.c_int64, np.int32: ctypes.c_int32, np.float32: ctypes.c_float}


def _as_ctype(x):
    if isinstance(x, ctypes.Structure):
        return x
    if hasattr(x, "data") and hasattr(x.data, "ptr"):  # a cupy array
        return ctypes.c_void_p(x.data.ptr)
    for t, c in _CTYPES.items():
        if isinstance(x, t):
            return c(x.item())
    raise TypeError(f"kernel argument of type {type(x).__name__}: pass a cupy array, a TensorMap or a numpy "
                    "int64/int32/float32 scalar")


def launch(kernel, grid, block: int, shared_mem: int, args) -> None:
    """Launch a cupy ``RawKernel`` on the current stream with ``args`` (cupy arrays, numpy scalars
    and TensorMaps, in the kernel's parameter order); ``grid`` an int or up to three ints."""
    import cupy  # noqa: PLC0415
    from cupy_backends.cuda.api import driver  # noqa: PLC0415

    held = [_as_ctype(a) for a in args]  # kept alive until the launch has copied them
    params = (ctypes.c_void_p * len(held))(*[ctypes.addressof(h) for h in held])
    gx, gy, gz = (tuple(grid) + (1, 1))[:3] if isinstance(grid, (tuple, list)) else (grid, 1, 1)
    driver.launchKernel(kernel.kernel.ptr, gx, gy, gz, block, 1, 1, shared_mem,
                        cupy.cuda.get_current_stream().ptr, ctypes.addressof(params), 0)
