"""cuStateVec's applyMatrix through ctypes: the peer that apply() is compared with.

Loads ``libcustatevec.so.1`` from an unpacked custatevec wheel (``CUSTATEVEC_LIB`` or a search
of ``sys.path``). Used by the benchmarks only; not a dependency of qsim-tc.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

import numpy as np

CUDA_C_32F, CUDA_C_64F = 4, 5
LAYOUT_ROW = 1
COMPUTE = {np.dtype(np.complex128): 1 << 4, np.dtype(np.complex64): 1 << 2}


def _find_lib() -> str | None:
    env = os.environ.get("CUSTATEVEC_LIB")
    if env:
        return env
    for root in sys.path:
        hits = glob.glob(os.path.join(root, "cuquantum", "lib", "libcustatevec.so*"))
        if hits:
            return hits[0]
    return None


class CuStateVec:
    """A cuStateVec handle on the current cupy stream."""

    def __init__(self):
        import cupy  # noqa: PLC0415

        path = _find_lib()
        if path is None:
            raise ImportError("libcustatevec.so not found (unpack the custatevec-cu13 wheel on sys.path)")
        cupy.ones(4) @ cupy.ones(4)  # cupy loads cuBLAS first, as cuStateVec expects
        self.lib = ctypes.CDLL(path)
        self.handle = ctypes.c_void_p()
        self._check(self.lib.custatevecCreate(ctypes.byref(self.handle)), "create")
        self.cp = cupy
        self._ws = None

    @staticmethod
    def _check(status, what):
        if status != 0:
            raise RuntimeError(f"custatevec {what} failed with status {status}")

    def apply_matrix(self, sv, n_qubits: int, matrix: np.ndarray, targets) -> None:
        """In-place ``sv <- U sv`` on ``targets`` (targets[0] = low bit of the matrix index)."""
        cp = self.cp
        dt = CUDA_C_64F if sv.dtype == np.complex128 else CUDA_C_32F
        u = np.ascontiguousarray(matrix, dtype=sv.dtype)
        nt = len(targets)
        tg = (ctypes.c_int32 * nt)(*targets)
        size = ctypes.c_size_t()
        comp = COMPUTE[np.dtype(sv.dtype)]
        self._check(self.lib.custatevecApplyMatrixGetWorkspaceSize(
            self.handle, dt, ctypes.c_uint32(n_qubits), u.ctypes.data_as(ctypes.c_void_p), dt, LAYOUT_ROW,
            ctypes.c_int32(0), ctypes.c_uint32(nt), ctypes.c_uint32(0), comp, ctypes.byref(size)), "workspace size")
        ws_ptr = ctypes.c_void_p(0)
        if size.value:
            if self._ws is None or self._ws.nbytes < size.value:
                self._ws = cp.empty(size.value, dtype=cp.uint8)
            ws_ptr = ctypes.c_void_p(self._ws.data.ptr)
        self._check(self.lib.custatevecApplyMatrix(
            self.handle, ctypes.c_void_p(sv.data.ptr), dt, ctypes.c_uint32(n_qubits),
            u.ctypes.data_as(ctypes.c_void_p), dt, LAYOUT_ROW, ctypes.c_int32(0), tg, ctypes.c_uint32(nt),
            None, None, ctypes.c_uint32(0), comp, ws_ptr, ctypes.c_size_t(size.value)), "applyMatrix")
