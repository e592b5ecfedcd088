"""The engine on the GPU: the small-gate kernel and every GEMM path against the CPU engine."""

import numpy as np
import pytest

from circuits import Circuit, brickwork, haar_unitary
from qsim_tc import Simulator, StateVector
from qsim_tc.engine.small_gate import DMMA_PIPE_COMPILED

pytestmark = pytest.mark.gpu


def random_psi(n, rng):
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    return psi / np.linalg.norm(psi)


@pytest.mark.parametrize("dtype,tol", [(np.complex128, 1e-13), (np.complex64, 2e-6)])
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6])
def test_small_gate_kernel_matches_cpu(cp, rng, d, dtype, tol):
    n = 12
    psi = random_psi(n, rng)
    for trial in range(4):
        qs = [int(q) for q in rng.choice(n, d, replace=False)]
        u = haar_unitary(1 << d, rng)
        g = StateVector(n, dtype=dtype, device="gpu", data=psi)
        info = g.apply(u, qs, method="native" if dtype == np.complex128 else "native32", small_gate_kernel=True)
        assert info.path == "kernel"
        c = StateVector(n, dtype=np.complex128, device="cpu", data=psi)
        c.apply(u, qs)
        assert np.abs(g.to_numpy() - c.to_numpy()).max() < tol


@pytest.mark.parametrize("d", [1, 3, 5, 7])
def test_gemm_paths_match_cpu(cp, rng, d):
    n = 13
    psi = random_psi(n, rng)
    u = haar_unitary(1 << d, rng)
    for qs in (list(range(d)), list(range(n - d, n)), list(range(4, 4 + d)), list(range(n - d - 1, n - 1)),
               [int(q) for q in rng.choice(n, d, replace=False)]):
        g = StateVector(n, device="gpu", data=psi)
        g.apply(u, qs, small_gate_kernel=False)
        c = StateVector(n, device="cpu", data=psi)
        c.apply(u, qs)
        assert np.abs(g.to_numpy() - c.to_numpy()).max() < 1e-13


def test_brickwork_gpu_matches_cpu(cp):
    for d in (2, 4, 6):
        circ = brickwork(14, d, 5, seed=d, periodic=True)
        g = Simulator(device="gpu").run(circ).state.to_numpy()
        c = Simulator(device="cpu").run(circ).state.to_numpy()
        assert np.abs(g - c).max() < 1e-12


def test_sampling_same_on_both_devices(cp, rng):
    psi = random_psi(6, rng)
    g = StateVector(6, device="gpu", data=psi).sample(1000, seed=4)
    c = StateVector(6, device="cpu", data=psi).sample(1000, seed=4)
    assert np.mean(g == c) > 0.99  # identical uniforms; only ties at cdf edges may differ


def test_mixed_circuit_gpu(cp, rng):
    n = 11
    circ = Circuit(n)
    for _ in range(30):
        d = int(rng.integers(1, 8))
        circ.add(haar_unitary(1 << d, rng), [int(q) for q in rng.choice(n, d, replace=False)])
    g = Simulator(device="gpu").run(circ).state.to_numpy()
    c = Simulator(device="cpu").run(circ).state.to_numpy()
    assert np.abs(g - c).max() < 1e-12


def test_bottom_rotate_on_gpu(cp, rng, monkeypatch):
    import qsim_tc.engine.apply as apply_mod

    monkeypatch.setitem(apply_mod.ROTATE_D, "gpu", frozenset(range(1, 40)))
    circ = brickwork(14, 7, 4, seed=2)
    g = Simulator(device="gpu").run(circ)
    assert "bottom-rotate" in {s.info.path for s in g.stats}
    c = Simulator(device="cpu").run(circ).state.to_numpy()
    assert np.abs(g.state.to_numpy() - c).max() < 1e-12


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_direct_cublas_layouts(cp, rng, dtype):
    from gemm.cuda import cublas

    def mk(*shape):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return cp.asarray(x.astype(dtype))

    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    a, b = mk(300, 64), mk(64, 48)
    for x, y in ((a, b), (a, b.T.copy().T), (cp.asfortranarray(a), b), (mk(64, 300).T, mk(48, 64).T)):
        assert cublas.supported(x, y)
        ref = cp.asnumpy(x).astype(np.complex128) @ cp.asnumpy(y).astype(np.complex128)
        assert np.abs(cp.asnumpy(cublas.matmul(x, y)) - ref).max() < tol * np.abs(ref).max()
    u, s3 = mk(16, 16), mk(50, 16, 40)
    ref = cp.asnumpy(u).astype(np.complex128) @ cp.asnumpy(s3).astype(np.complex128)
    assert np.abs(cp.asnumpy(cublas.matmul(u, s3)) - ref).max() < tol * np.abs(ref).max()


def test_native3m_close_to_native(cp, rng):
    circ = brickwork(14, 8, 3, seed=5)
    a = Simulator("native3m", device="gpu").run(circ)
    b = Simulator("native", device="gpu").run(circ)
    assert any(s.info.report is not None and s.info.report.choices.get("form") == "gemm3m" for s in a.stats)
    assert np.abs(a.state.to_numpy() - b.state.to_numpy()).max() < 1e-13


@pytest.mark.parametrize("dtype,tol", [(np.complex128, 1e-13), (np.complex64, 2e-6)])
def test_low_target_kernels_match_cpu(cp, rng, dtype, tol):
    """Targets among the lowest bits through the engine: the staged kernel (d <= 3, and complex64
    d = 4; complex128 d = 4: DMMA)."""
    n = 14
    psi = random_psi(n, rng)
    for qs in ([0], [1, 0], [0, 2, 4], [4, 3], [0, 6], [2, 9, 1], [0, 1, 2, 3], [13, 0, 6, 1]):
        u = haar_unitary(1 << len(qs), rng)
        g = StateVector(n, dtype=dtype, device="gpu", data=psi)
        info = g.apply(u, qs, method="native" if dtype == np.complex128 else "native32")
        assert info.path == "kernel", qs
        c = StateVector(n, dtype=np.complex128, device="cpu", data=psi)
        c.apply(u, qs)
        assert np.abs(g.to_numpy() - c.to_numpy()).max() < tol, qs


@pytest.mark.parametrize("kernel", [(2, False, 1, False, 1, 0), (1, True, 1, False, 1, 0), (2, True, 1, False, 1, 0),
                                    (1, False, 1, True, 1, 1), (1, True, 1, True, 1, 1), (2, True, 1, False, 1, 1),
                                    (1, True, 1, False, 1, 2), (1, True, 1, True, 1, 2), (2, True, 1, False, 1, 2)])
@pytest.mark.parametrize("d", [4, 5, 6])
def test_dmma_kernel_matches_cpu(cp, rng, d, kernel):
    """The FP64 tensor-core kernel in several variants (three mma shapes, prefetch, Gauss, two
    tiles), at targets at the bottom, in the middle and scattered among the low bits, on states
    with few tiles per warp and a tail."""
    from qsim_tc.engine.small_gate import DMMA_COMPILED, DmmaConfig, apply_dmma_gpu

    if (d, *kernel) not in DMMA_COMPILED:
        pytest.skip("variant not compiled for this d")
    config = DmmaConfig(*kernel, threads=128, blocks_per_sm=1)
    for n, qs in ((12, list(range(3, 3 + d))), (13, [3, 5, 6, 8, 10, 12][:d]), (d + 3, list(range(3, 3 + d))),
                  (11, list(range(d))), (12, [0, 2, 3, 7, 9, 11][:d]), (13, [1, 4, 6, 7, 10, 12][:d]), (d + 3, list(range(d)))):
        psi = random_psi(n, rng)
        u = haar_unitary(1 << d, rng)
        g = cp.asarray(psi)
        apply_dmma_gpu(g, n, u, qs, config)
        c = StateVector(n, device="cpu", data=psi)
        c.apply(u, qs)
        assert np.abs(g.get() - c.to_numpy()).max() < 1e-13, (n, qs)
    # a persistent grid of one warp per block and SM: every warp loops over many tiles (and the
    # prefetch variants load ahead), with a tail inside the loop
    n, qs = 18, [0, 2, 3, 7, 9, 11][:d]
    psi = random_psi(n, rng)
    u = haar_unitary(1 << d, rng)
    g = cp.asarray(psi)
    apply_dmma_gpu(g, n, u, qs, config._replace(threads=32, blocks_per_sm=1))
    c = StateVector(n, device="cpu", data=psi)
    c.apply(u, qs)
    assert np.abs(g.get() - c.to_numpy()).max() < 1e-13, "persistent loop"


@pytest.mark.parametrize("variant", DMMA_PIPE_COMPILED)
def test_dmma_pipe_kernel_matches_cpu(cp, rng, variant):
    """The pipelined DMMA kernel in every compiled variant: targets low, in the middle, high and
    scattered; a state of exactly one chunk; and 21-qubit states of 512 chunks or more, where each
    block of the persistent grid loops over several chunks and reuses its stages (one and two
    blocks per SM)."""
    from qsim_tc.engine.small_gate import DmmaPipeConfig, apply_dmma_pipe_gpu

    d, kernel = variant[0], variant[1:]
    config = DmmaPipeConfig(*kernel)
    one_chunk = d + 3 + config.chunk.bit_length() - 1
    cases = ((14, list(range(d)), config), (14, list(range(5, 5 + d)), config), (14, list(range(14 - d, 14)), config),
             (15, [0, 2, 5, 7, 11, 14][:d], config), (one_chunk, list(range(one_chunk - d, one_chunk)), config),
             (21, [1, 3, 4, 8, 12, 20][:d], config), (21, [0, 4, 6, 9, 13, 15][:d], config._replace(blocks_per_sm=2)))
    check = _kernel_checker(cp, rng, np.complex128, 1e-13, apply_dmma_pipe_gpu)
    for n, qs, cfg in cases:
        check(n, qs, cfg)


def test_dmma_is_the_default_for_wide_gates(cp, rng):
    n = 14
    psi = random_psi(n, rng)
    for qs in ([3, 4, 5, 6, 7], [13, 4, 9, 6, 11, 8], [0, 1, 2, 3, 4], [5, 0, 2, 9, 1, 13], [7, 8, 9, 10], [0, 13, 2, 6]):
        u = haar_unitary(1 << len(qs), rng)
        g = StateVector(n, device="gpu", data=psi)
        info = g.apply(u, qs)
        assert info.path == "kernel"
        c = StateVector(n, device="cpu", data=psi)
        c.apply(u, qs)
        assert np.abs(g.to_numpy() - c.to_numpy()).max() < 1e-13


def _kernel_checker(cp, rng, dtype, tol, apply_fn):
    """check(n, qs, config=None): a random state and Haar gate through ``apply_fn(state, n, u, qs,
    config)`` on the GPU, against the CPU engine."""

    def check(n, qs, config=None):
        psi = random_psi(n, rng)
        u = haar_unitary(1 << len(qs), rng)
        g = cp.asarray(psi.astype(dtype))
        apply_fn(g, n, u, qs, config)
        c = StateVector(n, device="cpu", data=psi)
        c.apply(u, qs)
        assert np.abs(g.get() - c.to_numpy()).max() < tol, (n, qs, config)

    return check


@pytest.mark.parametrize("dtype,tol", [(np.complex128, 1e-13), (np.complex64, 2e-6)])
def test_direct_kernel_matches_cpu(cp, rng, dtype, tol):
    """The direct kernel in every compiled (d, matrix source) for this precision, at coalesced and
    strided targets, on a state whose groups do not fill the last block (and, for two groups per
    thread, leave a tail); bad input is refused with the state unchanged."""
    from qsim_tc.engine.small_gate import DIRECT, apply_direct_gpu

    check = _kernel_checker(cp, rng, dtype, tol, apply_direct_gpu)
    real = "double" if dtype == np.complex128 else "float"
    for d in sorted(dd for t, dd in DIRECT if t == real):
        for usrc in (0, 1, 2):
            if usrc == 0 and d >= 4:
                continue  # unrolled rows at d >= 4: compiled, but 8x slower (tune_direct_h200.json)
            check(15, list(range(4, 4 + d)), usrc)  # coalesced, many blocks
            check(d + 8, list(range(4, 4 + d)), usrc)  # 256 groups: with two per thread, half the second ones past the end
            check(13, [0, 2, 5, 7, 9][:d], usrc)  # strided gathers
            check(13, list(range(13 - d, 13)), usrc)
    psi = cp.asarray(random_psi(10, rng).astype(dtype))
    before = psi.copy()
    with pytest.raises(ValueError, match="positions"):
        apply_direct_gpu(psi, 10, haar_unitary(4, rng), [5, 3])
    with pytest.raises(ValueError, match="positions"):
        apply_direct_gpu(psi, 10, haar_unitary(4, rng), [3, 10])
    with pytest.raises(ValueError, match="matrix"):
        apply_direct_gpu(psi, 10, haar_unitary(2, rng), [3, 4])
    with pytest.raises(ValueError, match="data"):
        apply_direct_gpu(psi, 11, haar_unitary(2, rng), [3])
    with pytest.raises(ValueError, match="usrc"):
        apply_direct_gpu(psi, 10, haar_unitary(2, rng), [3], True)
    assert bool((psi == before).all())


@pytest.mark.parametrize("dtype,tol", [(np.complex128, 1e-13), (np.complex64, 2e-6)])
def test_staged_kernel_matches_cpu(cp, rng, dtype, tol):
    """The staged kernel against the CPU engine for d = 1..4 at low, high and mixed targets, in
    every compiled tile size, on a state of one tile and on larger ones; bad input is refused with
    the state unchanged."""
    from qsim_tc.engine.small_gate import STAGED_VARIANTS, StagedConfig, apply_staged_gpu

    check = _kernel_checker(cp, rng, dtype, tol, apply_staged_gpu)
    placements = ([0], [2], [4], [5], [9], [15], [0, 1], [1, 3], [0, 5], [3, 4], [0, 15], [14, 15], [0, 1, 2],
                  [0, 2, 4], [1, 3, 5], [0, 1, 15], [0, 8, 15], [4, 5, 6], [13, 14, 15], [0, 1, 2, 3],
                  [0, 2, 9, 15], [1, 3, 5, 7], [12, 13, 14, 15], [0, 1, 14, 15])
    for d, log_ts in STAGED_VARIANTS.items():
        for log_t in log_ts:
            for qs in (q for q in placements if len(q) == d):
                check(16, qs, StagedConfig(log_t))
            check(log_t, list(range(log_t - d, log_t)), StagedConfig(log_t))  # one tile, top targets
    for qs in (q for q in placements if len(q) <= 3):
        check(20, qs)  # the default tile sizes
    psi = cp.asarray(random_psi(7, rng).astype(dtype))
    before = psi.copy()
    with pytest.raises(ValueError, match="at least log_t"):
        apply_staged_gpu(psi, 7, haar_unitary(8, rng), [0, 1, 2])  # 128 amplitudes < one tile of 256
    with pytest.raises(ValueError, match="ascending"):
        apply_staged_gpu(psi, 7, haar_unitary(4, rng), [3, 0])
    with pytest.raises(ValueError, match="no compiled"):
        apply_staged_gpu(psi, 7, haar_unitary(2, rng), [0], StagedConfig(5))
    assert bool((psi == before).all())


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_permute_bits_gpu_matches_cpu(cp, rng, dtype):
    """The GPU bit permutation (one gather kernel) against the CPU transpose, for random layouts,
    into a given buffer and into a new one; the source is left as it was."""
    from qsim_tc.engine.permute import permute_bits

    n = 14
    psi = random_psi(n, rng).astype(dtype)
    for _ in range(6):
        old = rng.permutation(n).tolist()
        new = rng.permutation(n).tolist()
        want = permute_bits(psi, n, new, old, np)
        g = cp.asarray(psi)
        got = permute_bits(g, n, new, old, cp)
        assert np.array_equal(got.get(), want)
        buf = cp.empty_like(g)
        assert permute_bits(g, n, new, old, cp, out=buf) is not g
        assert np.array_equal(buf.get(), want)
        assert np.array_equal(g.get(), psi)

