"""The CPU stage executor's kernels one at a time: the register-blocked dense kernel (2-4 targets,
runs of at least one vector) and the chunk load that tiles runs landing in the same cache lines."""

import numpy as np
import pytest
from test_stages import gate_at_a_time, random_state

from circuits import Circuit, haar_unitary
from qsim_tc.stages import cpu as sc
from qsim_tc.stages import cpu_kernels as kernels
from qsim_tc.stages.cpu import run_stages
from qsim_tc.stages.plan import plan_stages

REAL = {np.complex128: np.float64, np.complex64: np.float32}
TOL = {np.complex128: 1e-13, np.complex64: 1e-5}


def _apply(x: np.ndarray, m: np.ndarray, targets, controls=()) -> np.ndarray:
    """numpy reference: ``m`` (bit j of its index is ``targets[j]``) where every control is 1."""
    idx = np.arange(x.size)
    tmask = sum(1 << t for t in targets)
    cmask = sum(1 << c for c in controls)
    bases = idx[((idx & tmask) == 0) & ((idx & cmask) == cmask)]
    cols = bases[:, None] + np.array([sum(((c >> j) & 1) << t for j, t in enumerate(targets))
                                      for c in range(len(m))])[None, :]
    y = x.copy()
    y[cols] = x[cols] @ m.T
    return y


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("where", ["low", "high", "mixed", "controlled"])
def test_dense_vec_against_numpy(dtype, width, where):
    """Targets at the lowest bits a vector allows, at the top of the chunk, spread, and with
    controls inside the chunk (below and between the targets)."""
    nbits, real = 12, REAL[dtype]
    lo = int(np.log2(kernels.VECTOR_BYTES // np.dtype(real).itemsize))  # the shortest run it takes
    rng = np.random.default_rng(10 * width + len(where))
    targets = {"low": list(range(lo, lo + width)), "high": list(range(nbits - width, nbits))[::-1],
               "mixed": [lo + 5, lo, nbits - 1, lo + 2][:width],
               "controlled": [lo + 1, nbits - 1, lo + 3, lo + 5][:width]}[where]
    controls = [lo, lo + 4] if where == "controlled" else []
    m = haar_unitary(1 << width, rng)
    x = random_state(nbits, width, dtype)
    offs = np.array([sum(((c >> j) & 1) << t for j, t in enumerate(targets)) for c in range(1 << width)], np.int64)
    fixed = np.array(sorted(targets + controls), np.int64)
    re, im = x.real.astype(real), x.imag.astype(real)
    m_re = np.concatenate([np.zeros(3), m.real.reshape(-1)]).astype(real)  # a matrix at offset 3
    m_im = np.concatenate([np.zeros(3), m.imag.reshape(-1)]).astype(real)
    kernels._dense_vec(re, im, m_re, m_im, 3, 1 << width, np.concatenate([[0, 0], offs]), 2, fixed, 0, fixed.size,
                       sum(1 << c for c in controls), nbits)
    want = _apply(x.astype(np.complex128), m, targets, controls)
    np.testing.assert_allclose(re + 1j * im, want, rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("block_bits", [10, 12])
def test_vector_kernel_through_run_stages(dtype, block_bits):
    """Chunks with 2^(block_bits - 6) lanes (runs long enough for the vector kernel; a control in
    a lane makes them short again: the other kernels), 2-4 targets, controls local, in lanes and
    above the chunk."""
    n, local = 13, 6
    rng = np.random.default_rng(block_bits)
    c = Circuit(n)
    for i in range(36):
        width = 2 + i % 3
        u = haar_unitary(1 << width, rng)
        if i % 4 == 3:
            m = np.eye(2 << width, dtype=complex)
            m[1 << width:, 1 << width:] = u
            c.add(m, tuple(int(q) for q in rng.choice(n, width + 1, replace=False)), f"c-haar{width}")
        else:
            c.add(u, tuple(int(q) for q in rng.choice(n, width, replace=False)), f"haar{width}")
    psi = random_state(n, block_bits, dtype)
    out = run_stages(psi.copy(), plan_stages(c, local), block_bytes=psi.itemsize << block_bits, threads=2)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("src_bit", [
    list(range(14)),  # unpermuted: one run per chunk row
    [8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13],  # lanes <-> chunk bits: tiles of 16 runs
    [3, 12, 1, 13, 2, 5, 0, 7, 8, 9, 10, 11, 4, 6],  # lanes from above the chunk and from inside
    [0, 9, 2, 3, 4, 5, 6, 7, 8, 1, 10, 11, 12, 13],  # a lane from inside the run, one from the runs
])
@pytest.mark.parametrize("gather", ["amplitudes", "hardware", None])
def test_load_permutes_like_numpy(dtype, src_bit, gather, monkeypatch):
    """``run_chunks`` with no ops is the layout change alone: new storage bit s holds old bit
    ``src_bit[s]``; chunks of 2^10 amplitudes, in place or into the spare buffer; by vectors
    (where the low bits change: one load an amplitude, or the hardware gather; or neither: then
    by runs, as on AVX2)."""
    monkeypatch.setattr(sc, "GATHER_LOAD", gather is not None)
    monkeypatch.setattr(sc, "HARDWARE_GATHER", gather == "hardware")
    n, nbits, real = 14, 10, REAL[dtype]
    psi = random_state(n, 5, dtype)
    high = np.asarray(src_bit[nbits:], np.int64)
    run_bits, src_tab, dst_tab, scatter = sc._load_tables(src_bit, nbits)
    dst = np.zeros_like(psi)
    z = np.zeros(1, np.int64)
    zr = np.zeros(8, real)
    re, im = np.empty(1 << nbits, real), np.empty(1 << nbits, real)
    kernels.run_chunks(psi.view(real), dst.view(real), 0, 1 << (n - nbits), nbits, 1, high, run_bits, src_tab,
                       dst_tab, scatter, np.zeros((0, kernels.N_COLUMNS), np.int64), z, z, z, zr, zr,
                       np.zeros(1, np.uint8), re, im, zr, zr, zr, *sc._vector_tables(src_bit, nbits, re.itemsize), z,
                       np.arange(nbits, n, dtype=np.int64))
    idx = np.arange(1 << n)
    old = np.zeros_like(idx)
    for s, b in enumerate(src_bit):
        old |= ((idx >> s) & 1) << b
    np.testing.assert_array_equal(dst, psi[old])


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("size", [1, 3, 8, 17, 64, 1000])
@pytest.mark.parametrize("offset", [0, 1, 3, 5])
def test_store_interleaves_at_any_alignment(dtype, size, offset):
    """``_store`` (non-temporal vector body between a head up to 64-byte alignment and a tail):
    every amplitude lands once, at any start and length, and nothing around it is touched; a
    buffer shifted by half an amplitude (not aligned to its size) takes the plain loop."""
    real = REAL[dtype]
    rng = np.random.default_rng(size + offset)
    re, im = rng.standard_normal(size).astype(real), rng.standard_normal(size).astype(real)
    for shift in (0, 1):  # in reals: 1 puts every amplitude off its natural alignment
        raw = np.full(2 * (size + offset + 4) + 1, -7, real)
        dst = raw[shift:shift + 2 * (size + offset + 4)]
        kernels._store(dst, offset, re, im)
        np.testing.assert_array_equal(dst[2 * offset:2 * (offset + size):2], re)
        np.testing.assert_array_equal(dst[2 * offset + 1:2 * (offset + size):2], im)
        assert (dst[:2 * offset] == -7).all() and (dst[2 * (offset + size):] == -7).all()


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize(("lanes", "fixed"), [(4, [3, 5]), (1, [0, 4]), (8, []), (2, [1])])
def test_diagonal_kernel_against_numpy(dtype, lanes, fixed):
    """Entry e (bit k: the value of row bit ``fixed[k]``) multiplies its lane vector into every
    run with those row bits; an entry flagged all-ones is skipped (its table is all ones)."""
    nbits = 6
    rng = np.random.default_rng(len(fixed) + lanes)
    n_entries = 1 << len(fixed)
    table = np.exp(2j * np.pi * rng.random(n_entries * lanes))
    skip = np.zeros(n_entries, np.uint8)
    skip[-1] = 1
    table[(n_entries - 1) * lanes:] = 1.0
    x = random_state(nbits, lanes + 7 * len(fixed), dtype)
    re, im = x.real.copy(), x.imag.copy()
    real = REAL[dtype]
    kernels._diagonal(re, im, table.real.astype(real), table.imag.astype(real), 0, skip, 0, n_entries, lanes,
                      np.asarray(fixed, np.int64), 0, len(fixed), nbits)
    i = np.arange(1 << nbits)
    e = sum(((i >> b) & 1) << k for k, b in enumerate(fixed))
    want = x * table[e * lanes + (i & (lanes - 1))].astype(dtype)
    np.testing.assert_allclose(re + 1j * im, want, atol=TOL[dtype])


@pytest.mark.parametrize("real", [np.float32, np.float64])
def test_chunk_halves_are_apart_by_the_gap(real, monkeypatch):
    """A thread's chunk: real and imaginary halves of 2^nbits each, in one buffer, the imaginary
    one ``IM_GAP_BYTES`` after the real one's end (not a multiple of 4 KiB apart), neither
    overlapping the other; with no gap they abut."""
    default = sc.IM_GAP_BYTES
    assert default % 64 == 0 and default % 4096 != 0
    for gap in (default, 0):
        monkeypatch.setattr(sc, "IM_GAP_BYTES", gap)
        s = sc._Scratch(10, real)
        assert s.re.size == s.im.size == 1 << 10 and s.re.dtype == s.im.dtype == real
        start_re, start_im = s.re.ctypes.data, s.im.ctypes.data
        assert start_im - (start_re + s.re.nbytes) == gap
