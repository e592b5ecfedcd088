"""Getting the CPU stage kernels ready before a run is timed.

The CPU stage executor's kernels are compiled by numba on first use, once per state dtype, and
cached on disk: the first run on a machine compiles them (~20-30 s on 2 cores), every later process
loads them (~1 s). Both are costs of the process, not of the circuit, so :func:`ensure_ready` pays
them on a tiny state before the simulator's timer starts, and says so when it compiles.
"""

from __future__ import annotations

import sys
import time

import numpy as np

_READY: set = set()  # the state dtypes whose kernels this process has compiled or loaded
COMPILE_MESSAGE = "compiling CPU kernels, once (about 20-30 s; later runs load them from the cache)"


def ensure_ready(dtype, *, say=None) -> float:
    """Compile or load the CPU stage kernels for states of ``dtype``; the seconds it took.

    Args:
        dtype: the state dtype (complex64 or complex128).
        say: called with one line when the kernels must be compiled (default: print to stderr).

    Returns:
        Seconds spent (0.0 when this process already has them).
    """
    dt = np.dtype(dtype)
    if dt in _READY:
        return 0.0
    t0 = time.perf_counter()
    from qsim_tc.stages import cpu_kernels as kernels  # noqa: PLC0415 - imports numba
    from qsim_tc.stages.cpu import run_stages  # noqa: PLC0415
    from qsim_tc.stages.plan import plan_stages  # noqa: PLC0415

    if not _on_disk(kernels.run_chunks, np.float32 if dt == np.complex64 else np.float64):
        (say or (lambda text: print(f"qsim-tc: {text}", file=sys.stderr, flush=True)))(COMPILE_MESSAGE)
    circ = _circuit()
    state = np.zeros(1 << circ.n_qubits, dtype=dt)
    state[0] = 1
    run_stages(state, plan_stages(circ, circ.n_qubits))  # every kernel is typed at its first call
    _READY.add(dt)
    return time.perf_counter() - t0


def _circuit():
    """A 3-qubit circuit of a dense 2-qubit gate and a diagonal one (the kernel's two op kinds)."""
    from circuits import Circuit, Gate  # noqa: PLC0415

    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    return Circuit(3, [Gate(np.kron(h, h), (0, 1)), Gate(np.diag(np.exp(1j * np.arange(4))), (1, 2))])


def _on_disk(dispatcher, real) -> bool:
    """Whether numba's disk cache holds ``dispatcher`` compiled for arrays of ``real`` on this CPU.

    Reads numba's cache index (not a public interface): where that fails, False (the message is
    then shown though a load may follow, never hidden before a compilation).
    """
    try:
        magic = dispatcher.targetctx.codegen().magic_tuple()
        index = dispatcher._cache._cache_file._load_index()
        want = str(np.dtype(real))
        return any(key[1] == magic and str(key[0][0].dtype) == want for key in index)
    except Exception:  # noqa: BLE001 - any change in numba's internals: assume a compilation
        return False
