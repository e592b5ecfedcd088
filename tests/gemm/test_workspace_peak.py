"""``workspace_bytes`` of dd, halfhalf and int8-auto against the peak of the allocations that a CPU
product really makes (tracemalloc sees numpy's buffers): the estimate must not fall below it.

The simulator's memory check (qsim_tc.memory.gate_extra_bytes) adds the output and a permuted copy
of the state to ``workspace_bytes``, so the bound compared here is the peak less the output.
The shapes are the engine's: a d-qubit gate at the bottom (state rows @ U^T: (M, 2^d) @ (2^d, 2^d))
and at the top (U @ state columns: (2^d, 2^d) @ (2^d, M)).
"""

import tracemalloc
import warnings

import numpy as np
import pytest

import gemm
from gemm import ozaki

SHAPES = {"bottom d=4": (4096, 16, 16), "top d=4": (16, 16, 4096), "bottom d=5": (2048, 32, 32),
          "real 300x200x100": (300, 200, 100)}
# shapes whose estimate is known to fall short, marked strict xfail so a fix shows up here: none.
# The TF32/FP16 emulation's chunk temporaries bind only from M ~ 16384 rows (too slow under
# tracemalloc for this suite); measured there once: 0.77-0.84 of the estimate.
UNDER: set = set()


def _operands(method, shape, rng):
    m, k, n = shape
    real = np.float32 if gemm.get_method(method).state_dtype == np.complex64 else np.float64
    cplx = not shape == SHAPES["real 300x200x100"]

    def draw(s):
        x = rng.standard_normal(s)
        return (x + 1j * rng.standard_normal(s) if cplx else x).astype(np.result_type(real, np.complex64) if cplx
                                                                        else real)

    return draw((m, k)), draw((k, n))


def _peak_less_output(method, a, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # halfhalf's range warnings are not under test here
        gemm.matmul(a, b, method=method)  # module-level caches (kernels, tables) are not workspace
        ozaki.CACHE.clear()  # the gate's slices are workspace: let them be counted
        tracemalloc.start()
        try:
            c = gemm.matmul(a, b, method=method)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peak - c.nbytes


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("method", ["dd", "halfhalf", "int8-auto"])
def test_workspace_bytes_bounds_the_peak(method, shape, rng, request):
    if (method, shape) in UNDER:
        request.applymarker(pytest.mark.xfail(strict=True, reason="workspace_bytes under-counts this shape"))
    a, b = _operands(method, SHAPES[shape], rng)
    used = _peak_less_output(method, a, b)
    ws = gemm.get_method(method).workspace_bytes(*SHAPES[shape], a.dtype, device="cpu")
    assert used > 0
    assert used <= ws, f"{method} {shape}: {used} bytes allocated beyond the output, estimate {ws}"
