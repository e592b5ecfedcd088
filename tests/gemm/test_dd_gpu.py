"""GPU double-double: the split algorithm matches the CPU bit for bit, the FMA kernel to 1e-30."""

import numpy as np
import pytest

from circuits import brickwork
from gemm import dd
from gemm.dd import arith as dd_arith
from gemm.diagnostics import testmats
from qsim_tc.reference import simulate_dd

pytestmark = pytest.mark.gpu


def test_gpu_split_matches_cpu_bitwise(cp, rng):
    for m, k, n in ((1000, 16, 16), (300, 256, 40), (64, 1024, 64)):
        a = testmats.complex_phi_matrix(m, k, 1.0, rng)
        alo = testmats.complex_urand(m, k, rng) * 2.0**-60
        b = testmats.complex_urand(k, n, rng)
        chi, clo = dd.matmul_pair((a, alo), b)
        ghi, glo = dd.matmul_pair((cp.asarray(a), cp.asarray(alo)), cp.asarray(b))
        assert np.array_equal(ghi.get(), chi) and np.array_equal(glo.get(), clo)
    x = testmats.urand(50, 30, rng)
    y = testmats.urand(30, 20, rng)
    assert np.array_equal(dd.matmul_pair(cp.asarray(x), cp.asarray(y))[1].get(), dd.matmul_pair(x, y)[1])


def _dd_diff(ghi, glo, chi, clo):
    dre = dd_arith.dd_add(ghi.real, glo.real, -chi.real, -clo.real)[0]
    dim = dd_arith.dd_add(ghi.imag, glo.imag, -chi.imag, -clo.imag)[0]
    return np.hypot(dre, dim)


def test_gpu_fma_kernel_matches_cpu(cp, rng):
    for m, k, n in ((200, 16, 16), (130, 256, 70), (64, 1024, 64), (33, 7, 5)):
        a = testmats.complex_urand(m, k, rng)
        alo = testmats.complex_urand(m, k, rng) * 2.0**-60
        b = testmats.complex_urand(k, n, rng)
        chi, clo = dd.matmul_pair((a, alo), b)
        ghi, glo = dd.matmul_pair((cp.asarray(a), cp.asarray(alo)), cp.asarray(b), algorithm="fma")
        ghi, glo = ghi.get(), glo.get()
        diff = _dd_diff(ghi, glo, chi, clo)
        # relative to the size of the terms (row of |a| times column max of |b|) and normwise
        scale = np.abs(a).sum(axis=1)[:, None] * np.abs(b).max(axis=0)[None, :]
        assert float((diff / scale).max()) < 1e-30
        assert float(np.linalg.norm(diff) / np.linalg.norm(chi)) < 1e-30
        assert np.abs(ghi - chi).max() <= 2 * np.spacing(np.abs(chi)).max()


def test_gpu_reference_matches_cpu_bitwise():
    circ = brickwork(14, 4, 4, seed=2)
    cpu = simulate_dd(circ, device="cpu")
    gpu = simulate_dd(circ, device="gpu")
    hi, lo = gpu.to_numpy()
    assert np.array_equal(hi, cpu.hi) and np.array_equal(lo, cpu.lo)
    fma = simulate_dd(circ, device="gpu", algorithm="fma")
    fh, fl = fma.to_numpy()
    assert float(np.linalg.norm(_dd_diff(fh, fl, cpu.hi, cpu.lo))) < 1e-30
