"""One-qubit layers of a block of states on a GPU (:mod:`qsim_tc.batched`): one launch a gate.

The array code of :mod:`qsim_tc.batched` applies a gate to a block of states in about six
passes over it (a copy of one half, products and sums into temporaries, the stores); the kernel
of ``batched.cu`` reads and writes each amplitude pair once. A layer's matrices go to the device
in one copy. :func:`model_kernel` runs the kernel's indexing in numpy, so the host code is
tested on the CPU.
"""

from __future__ import annotations

import functools

import numpy as np

THREADS = 256
# thread blocks of a launch at most (a grid-stride loop covers the rest)
MAX_BLOCKS = 1 << 14
_KINDS = {np.dtype(np.complex128): "c128", np.dtype(np.complex64): "c64"}


def layer(psi, ms: np.ndarray, qubits) -> object:
    """Apply gate ``j`` of the layer (``ms[:, j]``, one 2x2 matrix per state) on qubit
    ``qubits[j]`` of each state of ``psi``, in place, in order.

    Args:
        psi: a cupy (B, 2^n) complex128 or complex64 block of states, C-contiguous.
        ms: (B, k, 2, 2) complex matrices (numpy), cast to the states' precision.
        qubits: k qubit indices.

    Returns:
        ``psi``.

    Raises:
        TypeError: ``psi`` is not complex128 or complex64.
        ValueError: ``psi`` not a C-contiguous (B, 2^n) block, ``ms`` not (B, k, 2, 2), or a
            qubit outside 0..n-1 (the kernel indexes the block as contiguous rows of 2^n and
            would write past a state); checked before any gate runs.
    """
    import cupy  # noqa: PLC0415 - only for device arrays

    kind = _KINDS.get(np.dtype(psi.dtype))
    if kind is None:
        raise TypeError(f"psi must be complex128 or complex64, got {psi.dtype}")
    size = psi.shape[-1] if psi.ndim else 0
    if psi.ndim != 2 or size < 2 or size & (size - 1) or not psi.flags.c_contiguous:
        raise ValueError(f"psi must be a C-contiguous (B, 2^n) block of states, got shape {tuple(psi.shape)}"
                         f"{'' if psi.flags.c_contiguous else ' (strided)'}")
    n_states = psi.shape[0]
    n = size.bit_length() - 1
    qubits = [int(q) for q in qubits]
    k = len(qubits)
    if any(not 0 <= q < n for q in qubits):
        raise ValueError(f"qubits must be qubits of 0..{n - 1}, got {qubits}")
    if np.shape(ms) != (n_states, k, 2, 2):
        raise ValueError(f"ms must have shape {(n_states, k, 2, 2)}, got {np.shape(ms)}")
    m = cupy.asarray(np.ascontiguousarray(ms, dtype=psi.dtype))
    fn = _kernel(kind)
    pairs = n_states * (size >> 1)
    blocks = max(1, min(MAX_BLOCKS, -(-pairs // THREADS)))
    for j, q in enumerate(qubits):
        fn((blocks,), (THREADS,), (psi, m, np.int32(n), np.int32(q), np.int32(j), np.int32(k), np.int64(n_states)))
    return psi


def _kernel(kind: str):
    """``one_qubit_<kind>`` on the current device, compiled once per process and device."""
    import cupy  # noqa: PLC0415 - only for device arrays

    return _loaded(cupy.cuda.Device().id, kind)


@functools.lru_cache(maxsize=None)
def _loaded(device: int, kind: str):
    from gemm.cuda.compile import raw_module  # noqa: PLC0415 - the project's one kernel loader

    return raw_module("qsim_tc", "batched.cu", ("-std=c++17",), device).get_function(f"one_qubit_{kind}")


def model_kernel(kind: str):
    """A launcher that runs ``batched.cu``'s ``one_qubit_<kind>`` in numpy, with its indexing
    (``fn(grid, block, args)`` on numpy arrays): pair ``r`` of the grid-stride loop is pair
    ``r mod 2^(n-1)`` of state ``r / 2^(n-1)``, its amplitudes that pair with a 0 inserted at
    bit q and with bit q set."""
    dtype = {"c128": np.complex128, "c64": np.complex64}[kind]

    def one_qubit(grid, block, args):
        psi, m, n, q, j, k, n_states = (a if isinstance(a, np.ndarray) else int(a) for a in args)
        assert psi.dtype == m.dtype == dtype and psi.flags.c_contiguous
        flat, u = psi.reshape(-1), m.reshape(-1)
        low = n - 1
        below = (1 << q) - 1
        r = np.arange(n_states << low, dtype=np.int64)  # every r of the grid-stride loop
        b, p = r >> low, r & ((1 << low) - 1)
        i0 = ((p & ~below) << 1) | (p & below)
        i1 = i0 | (1 << q)
        at = (b * k + j) << 2
        a0, a1 = flat[(b << n) + i0].copy(), flat[(b << n) + i1].copy()
        flat[(b << n) + i0] = u[at] * a0 + u[at + 1] * a1
        flat[(b << n) + i1] = u[at + 2] * a0 + u[at + 3] * a1

    return one_qubit
