"""The small-gate kernel's tiling, checked on the CPU by replaying its index arithmetic."""

import numpy as np
import pytest

from circuits import haar_unitary
from qsim_tc.engine.small_gate.layout import tile_layout
from qsim_tc.engine.small_gate.tables import CONFIG


def insert_zero(x, p):
    return ((x >> p) << (p + 1)) | (x & ((1 << p) - 1))


def replay(state, n, u, positions, itemsize):
    """What the kernel does, tile by tile, written with the same index formulas."""
    d = len(positions)
    lay = tile_layout(n, positions, itemsize)
    k, h = lay["k"], lay["h"]
    hi, tp = lay["hi_pos"][:h], lay["tile_pos"][:d]
    log_g = lay["log_g"]
    assert log_g == CONFIG[d][0]
    tile_size = (1 << log_g) << d
    hoff = [sum(((j >> b) & 1) << hi[b] for b in range(h)) for j in range(1 << d)]
    toff = [sum(((j >> b) & 1) << tp[b] for b in range(d)) for j in range(1 << d)]
    out = state.copy()
    seen = np.zeros(len(state), dtype=int)
    e = np.arange(tile_size)
    for tile in range(lay["n_tiles"]):
        base = tile << k
        for p in hi:
            base = insert_zero(base, p)
        addr = base | (e & ((1 << k) - 1)) | np.array(hoff)[e >> k]
        seen[addr] += 1
        buf = state[addr].copy()
        for t in range(1 << log_g):
            mine = t
            for p in tp:
                mine = insert_zero(mine, p)
            idx = [mine | toff[j] for j in range(1 << d)]
            buf[idx] = u @ buf[idx]
        out[addr] = buf
    assert (seen == 1).all()  # every amplitude in exactly one tile
    return out


@pytest.mark.parametrize("positions", [[0], [3], [10], [0, 1, 2, 3], [9, 10, 11, 12], [0, 6, 7, 12],
                                       [2, 5], [1, 3, 8], [7, 8], [4, 9, 11, 12], [0, 1, 2, 3, 4],
                                       [1, 4, 6, 8, 9, 12], [7, 8, 9, 10, 11, 12]])
def test_tiling_applies_the_gate(rng, positions):
    n = 13
    d = len(positions)
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    u = haar_unitary(1 << d, rng)
    got = replay(psi, n, u, positions, 16)
    t = psi.reshape((2,) * n)
    axes = [n - 1 - q for q in reversed(positions)]
    ref = np.moveaxis(np.tensordot(u.reshape((2,) * (2 * d)), t, axes=(list(range(d, 2 * d)), axes)),
                      list(range(d)), axes).reshape(-1)
    assert np.abs(got - ref).max() < 1e-12


@pytest.mark.parametrize("itemsize", [16, 8])
def test_swizzle_is_a_permutation(itemsize):
    mask = 7 if itemsize == 16 else 15
    for positions in ([0, 1, 2, 3], [0], [5, 9]):
        lay = tile_layout(14, positions, itemsize)
        e = np.arange((1 << CONFIG[len(positions)][0]) << len(positions))
        s = e ^ ((e >> lay["shift"]) & mask)
        assert sorted(s) == list(e)


def test_policy_picks_kernels_by_position():
    """The measured default policy: staged for d = 1, direct kernel when coalesced, staged for
    d = 2, 3 (and complex64 d = 4) with a low target, DMMA for complex128 d = 4..6; for complex64
    d = 5 the direct or tiled kernel on spread targets and CGEMM on a block of them, CGEMM for d = 6;
    the pipelined DMMA kernel for complex128 d = 5 with coalesced targets; GEMM for d > 6; nothing
    on the CPU or for emulated methods."""
    import gemm
    from qsim_tc.engine.small_gate import (
        apply_direct_gpu,
        apply_dmma_gpu,
        apply_dmma_pipe_gpu,
        apply_staged_gpu,
        apply_tiled_gpu,
        select,
    )

    native = gemm.get_method("native")
    gpu = gemm.Device("gpu", np, "test")
    assert select(native, gpu, None, 28, [12, 13], 16) is apply_direct_gpu
    assert select(native, gpu, None, 28, [12, 13, 14, 15], 16) is apply_dmma_gpu  # complex128 d = 4: DMMA
    assert select(native, gpu, None, 28, [3, 13, 14, 20, 27], 16) is apply_dmma_pipe_gpu  # coalesced from bit 3
    assert select(native, gpu, None, 28, [2, 13, 14, 20, 27], 16) is apply_dmma_gpu
    assert select(native, gpu, None, 28, [12, 13, 14, 15], 8) is apply_direct_gpu
    assert select(native, gpu, None, 28, [0, 5], 16) is apply_staged_gpu  # low and high targets mixed
    assert select(native, gpu, None, 28, [0, 5], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [1, 2, 20], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [1, 2, 20], 16) is apply_staged_gpu
    assert select(native, gpu, None, 28, [0, 14, 27], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [0, 14], 16) is apply_staged_gpu
    assert select(native, gpu, None, 28, [2], 16) is apply_staged_gpu
    assert select(native, gpu, None, 28, [3], 16) is apply_staged_gpu  # d = 1: staged everywhere
    assert select(native, gpu, None, 28, [27], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [3, 4], 16) is apply_direct_gpu
    assert select(native, gpu, None, 28, [3, 4], 8) is apply_staged_gpu  # complex64: coalesced from bit 4
    assert select(native, gpu, None, 28, [4, 5], 8) is apply_direct_gpu
    assert select(native, gpu, None, 10, [0, 1, 2], 16) is apply_staged_gpu  # a small state
    assert select(native, gpu, None, 28, [1, 3, 4], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [0, 1, 5, 9], 16) is apply_dmma_gpu
    assert select(native, gpu, None, 28, [0, 1, 5, 9], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [0], 16) is apply_staged_gpu
    assert select(native, gpu, None, 28, [0, 2], 16) is apply_staged_gpu
    assert select(native, gpu, None, 28, [0, 2], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [1, 3, 4], 16) is apply_staged_gpu
    assert select(native, gpu, None, 28, [0, 1, 2, 3], 16) is apply_dmma_gpu
    assert select(native, gpu, None, 28, [0, 1, 2, 3], 8) is apply_staged_gpu
    assert select(native, gpu, None, 28, [4, 5, 6, 7], 8) is apply_direct_gpu
    assert select(native, gpu, None, 28, [3, 4, 5, 6, 7], 16) is apply_dmma_pipe_gpu
    assert select(native, gpu, None, 28, [0, 4, 5, 6, 7], 16) is apply_dmma_gpu
    assert select(native, gpu, None, 28, [3, 5, 8, 9, 12, 20], 16) is apply_dmma_gpu  # d = 6: apply_dmma
    assert select(native, gpu, None, 28, [0, 1, 2, 3, 4], 16) is apply_dmma_gpu
    assert select(native, gpu, None, 28, [4, 5, 6, 7, 8], 8) is None  # complex64: no DMMA, CGEMM
    assert select(native, gpu, None, 28, [0, 7, 14, 21, 27], 8) is apply_tiled_gpu  # spread: no permutation
    assert select(native, gpu, None, 28, [4, 9, 14, 21, 27], 8) is apply_direct_gpu
    assert select(native, gpu, None, 28, [0, 7, 14, 21, 23, 27], 8) is None  # d = 6: CGEMM
    assert select(native, gpu, None, 28, [0, 1, 2, 3, 4], 8) is None  # together: CGEMM
    assert select(native, gpu, None, 28, [0, 1, 2, 3, 5], 8) is apply_tiled_gpu
    assert select(native, gpu, None, 28, [3, 4, 5, 6, 7, 8, 9], 16) is None
    assert select(native, gpu, True, 28, [3, 4, 5, 6, 7], 16) is apply_dmma_pipe_gpu
    assert select(native, gpu, True, 28, [4, 5, 6, 7, 8], 8) is apply_direct_gpu
    # small_gate_kernel=True takes the default kernel where there is one, the best other where not
    assert select(native, gpu, True, 28, [0, 1, 2, 3], 16) is apply_dmma_gpu
    assert select(native, gpu, True, 28, [1, 3, 4], 16) is apply_staged_gpu
    assert select(native, gpu, True, 28, [0, 2], 16) is apply_staged_gpu
    assert select(native, gpu, True, 28, [0, 1, 2, 3], 8) is apply_staged_gpu
    assert select(native, gpu, True, 28, [0, 1, 2, 3, 4], 8) is apply_tiled_gpu
    assert select(native, gpu, True, 28, [0, 1, 2, 3, 4, 5], 16) is apply_dmma_gpu
    assert select(native, gpu, True, 28, [0, 1, 2, 3, 4, 5], 8) is apply_tiled_gpu
    assert select(native, gemm.resolve_device("cpu"), None, 28, [12], 16) is None

    class Emulated:
        name = "emulated"
        direct_small_gates = False

    with pytest.raises(ValueError, match="computes every gate as its own GEMM"):
        select(Emulated(), gpu, True, 28, [12], 16)
    assert select(Emulated(), gpu, None, 28, [12], 16) is None


SHAPES = {0: (8, 4, 1, 1, 2), 1: (16, 8, 4, 2, 4), 2: (16, 16, 8, 4, 4)}  # rows, k, A, B, C per lane


def _mma(a_frag, b_frag, c_frag, shape):
    """mma.m8n8k4 / m16n8k8 / m16n8k16 .row.col.f64 from per-lane fragments, laid out as the PTX ISA
    says (g = lane / 4, t = lane % 4): a[i] = A[g + 8 (i & 1)][t + 4 (i >> 1)],
    b[j] = B[t + 4 j][g], c[e] = C[g + 8 (e >> 1)][2 t + (e & 1)]."""
    rows, k, af, bf, cf = SHAPES[shape]
    a, b = np.zeros((rows, k)), np.zeros((k, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(af):
            a[g + 8 * (i & 1), t + 4 * (i >> 1)] = a_frag[lane][i]
        for j in range(bf):
            b[t + 4 * j, g] = b_frag[lane][j]
    d = a @ b
    return [[c_frag[lane][e] + d[(lane >> 2) + 8 * (e >> 1), 2 * (lane & 3) + (e & 1)] for e in range(cf)]
            for lane in range(32)]


@pytest.mark.parametrize("shape", [0, 1, 2])
@pytest.mark.parametrize("gauss", [False, True])
@pytest.mark.parametrize("positions", [[3, 4, 5, 6], [0, 1, 2, 3, 4], [1, 2, 5, 7, 8], [0, 2, 3, 4, 6, 9]])
def test_dmma_fragment_mapping(rng, positions, gauss, shape):
    """The DMMA kernel's index arithmetic, replayed for every tile: U staged in fragment order,
    V loaded per lane, row slices stored per lane; the result must be the gate."""
    from qsim_tc.engine.small_gate.layout import dmma_shared_bytes

    d = len(positions)
    rows, kstep, af, bf, cf = SHAPES[shape]
    dim = 1 << d
    ns, kb_n = dim // rows, dim // kstep
    n = max(max(positions) + 2, d + 4)  # at least two tiles
    u = haar_unitary(dim, rng)
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    afrag = np.empty(dim * dim, dtype=complex)  # shared memory: [slice][k-step][i][lane]
    for f in range(dim * dim):
        lane, i, kb, sl = f & 31, (f >> 5) % af, (f >> 5) // af % kb_n, (f >> 5) // af // kb_n
        afrag[f] = u[sl * rows + (lane >> 2) + 8 * (i & 1), kb * kstep + (lane & 3) + 4 * (i >> 1)]
    assert dmma_shared_bytes(d) == afrag.size * 16
    off = [sum(((j >> b) & 1) << p for b, p in enumerate(positions)) for j in range(dim)]
    out = psi.copy()
    def group_base(grp):
        for p in positions:
            grp = ((grp >> p) << (p + 1)) | (grp & ((1 << p) - 1))
        return grp

    for tile in range(((1 << n) >> d) >> 3):
        v = [[psi[group_base(tile * 8 + (lane >> 2)) + off[ks * 4 + (lane & 3)]] for ks in range(dim // 4)]
             for lane in range(32)]
        for sl in range(ns):
            rr, ii, im = ([[0.0] * cf for _ in range(32)] for _ in range(3))
            for kb in range(kb_n):
                a = [[afrag[((sl * kb_n + kb) * af + i) * 32 + lane] for i in range(af)] for lane in range(32)]
                ar = [[x.real for x in row] for row in a]
                ai = [[x.imag for x in row] for row in a]
                br = [[v[lane][kb * bf + j].real for j in range(bf)] for lane in range(32)]
                bi = [[v[lane][kb * bf + j].imag for j in range(bf)] for lane in range(32)]
                rr = _mma(ar, br, rr, shape)
                ii = _mma(ai, bi, ii, shape)
                if gauss:
                    sa = [[x + y for x, y in zip(p, q)] for p, q in zip(ar, ai)]
                    sb = [[x + y for x, y in zip(p, q)] for p, q in zip(br, bi)]
                    im = _mma(sa, sb, im, shape)
                else:
                    im = _mma(ai, br, _mma(ar, bi, im, shape), shape)
            for lane in range(32):
                for e in range(cf):
                    row = sl * rows + (lane >> 2) + 8 * (e >> 1)
                    re = rr[lane][e] - ii[lane][e]
                    imv = im[lane][e] - rr[lane][e] - ii[lane][e] if gauss else im[lane][e]
                    out[group_base(tile * 8 + 2 * (lane & 3) + (e & 1)) + off[row]] = re + 1j * imv
    t = psi.reshape((2,) * n)
    axes = [n - 1 - q for q in reversed(positions)]
    ref = np.moveaxis(np.tensordot(u.reshape((2,) * (2 * d)), t, axes=(list(range(d, 2 * d)), axes)),
                      list(range(d)), axes).reshape(-1)
    assert np.abs(out - ref).max() < 1e-12


def _gate_on(psi, u, positions):
    """``u`` on ``positions`` of the state ``psi`` (bit j of u's index at positions[j])."""
    n, d = psi.size.bit_length() - 1, len(positions)
    axes = [n - 1 - q for q in reversed(positions)]
    out = np.tensordot(u.reshape((2,) * (2 * d)), psi.reshape((2,) * n), axes=(list(range(d, 2 * d)), axes))
    return np.moveaxis(out, list(range(d)), axes).reshape(-1)


def staged_replay(state, n, u, positions, itemsize, log_t):
    """What apply_staged does, block by block, with the kernel's index formulas. Returns the
    result, how often each amplitude was loaded, and the shared-memory indices of every access
    (one list per thread-parallel step: entry t is thread t's index)."""
    from qsim_tc.engine.small_gate.layout import smem_swizzle

    d, s = len(positions), 3 if itemsize == 16 else 4
    lay = tile_layout(n, positions, itemsize, log_t - d)
    k, h, hp, q = lay["k"], lay["h"], lay["hi_pos"][:lay["h"]], lay["tile_pos"][:d]
    assert k + h == log_t
    tbl = smem_swizzle(q, itemsize)

    def mask(e):
        return (tbl >> (((e >> s) & 15) << 2)) & ((1 << s) - 1)

    nt = 1 << (log_t - d)  # threads, one group each
    out, seen, accesses = state.copy(), np.zeros(len(state), dtype=int), []
    for block in range(lay["n_tiles"]):
        base = block << k
        for p in hp:
            base = insert_zero(base, p)
        buf = np.full(1 << log_t, np.nan, dtype=complex)
        addr = {}
        for i in range(1 << d):
            c = (nt * i) >> k  # element nt i's high combination: U_i = base | hoff(c) | (nt i mod 2^k)
            at = base | ((nt * i) & ((1 << k) - 1))
            for b in range(h):
                at |= ((c >> b) & 1) << hp[b]
            idx = []
            for t in range(nt):
                e = t + nt * i
                a = at + t
                # the same address as spreading e's own bits: U_i + t is exact
                ref = base | (e & ((1 << k) - 1))
                for b in range(h):
                    ref |= ((e >> (k + b)) & 1) << hp[b]
                assert a == ref
                addr[e] = a
                seen[a] += 1
                buf[e ^ mask(e)] = state[a]
                idx.append(e ^ mask(e))
            accesses.append(idx)
        offs = [o ^ mask(o) for o in (sum(((j >> b) & 1) << q[b] for b in range(d)) for j in range(1 << d))]
        groups = []  # thread t's group, as shared-memory indices: swizzled base XOR swizzled offset
        for t in range(nt):
            gb = t
            for p in q:
                gb = insert_zero(gb, p)
            g = [(gb ^ mask(gb)) ^ o for o in offs]
            assert g == [e ^ mask(e) for e in (gb | sum(((j >> b) & 1) << q[b] for b in range(d))
                                               for j in range(1 << d))]
            groups.append(g)
        for j in range(1 << d):
            accesses.append([g[j] for g in groups])
        written = np.zeros(len(buf), dtype=int)
        for g in groups:
            buf[g] = u @ buf[g]
            written[g] += 1
        assert (written == 1).all()  # every element of the tile in exactly one thread's group
        for e, a in addr.items():
            out[a] = buf[e ^ mask(e)]
    return out, seen, accesses


@pytest.mark.parametrize("itemsize", [16, 8])
@pytest.mark.parametrize("positions", [[0], [1], [3], [4], [9], [11], [0, 1], [1, 3], [0, 4], [3, 4], [0, 11],
                                       [2, 9], [10, 11], [0, 1, 2], [0, 2, 4], [1, 3, 4], [0, 1, 11], [0, 9, 11],
                                       [4, 5, 6], [9, 10, 11], [2, 6, 10], [0, 1, 2, 3], [0, 2, 4, 6],
                                       [1, 3, 5, 11], [0, 1, 10, 11], [8, 9, 10, 11], [3, 4, 5, 6]])
def test_staged_tiles_and_banks(rng, positions, itemsize):
    """apply_staged's index arithmetic, replayed for every compiled tile size: each amplitude is
    loaded once, the state comes back as the gate applied to it, and no shared-memory wavefront
    (8 threads of 16 bytes or 16 of 8 bytes) touches a bank slot twice."""
    from qsim_tc.engine.small_gate.tables import STAGED_VARIANTS

    n, d = 12, len(positions)
    lanes = 128 // itemsize
    for log_t in STAGED_VARIANTS[d]:
        psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
        u = haar_unitary(1 << d, rng)
        out, seen, accesses = staged_replay(psi, n, u, positions, itemsize, log_t)
        assert (seen == 1).all(), (positions, log_t)
        assert np.abs(out - _gate_on(psi, u, positions)).max() < 1e-12, (positions, log_t)
        for idx in accesses:
            for w in range(0, len(idx), lanes):
                slots = [i % lanes for i in idx[w:w + lanes]]
                assert len(set(slots)) == lanes, (positions, log_t, idx[w:w + lanes])


def test_fits_staged():
    from qsim_tc.engine.small_gate.layout import fits_staged
    from qsim_tc.engine.small_gate.tables import STAGED, STAGED_VARIANTS

    assert fits_staged(28, [0]) and fits_staged(28, [0, 27]) and fits_staged(8, [0, 1, 7])
    assert not fits_staged(7, [0, 1, 2]) and not fits_staged(8, [0, 1, 2], 9)  # fewer amplitudes than a tile
    assert not fits_staged(28, [1, 0]) and not fits_staged(28, [1, 1]) and not fits_staged(28, [0, 28])
    assert fits_staged(28, [0, 1, 2, 3]) and not fits_staged(28, [0, 1, 2, 3, 4]) and not fits_staged(28, [])
    assert not fits_staged(9, [0, 1, 2, 3])  # d = 4: the default tile is 2^10
    for (_, d), cfg in STAGED.items():
        assert cfg.log_t in STAGED_VARIANTS[d]


def test_gate_matrix_arg_is_the_matrix_by_value(rng):
    """The staged kernel's GateMatrix parameter: one structured element holding the matrix row by
    row, (re, im) pairs, as cplx<Real> m[DIM * DIM] lays them out."""
    from qsim_tc.engine.small_gate.layout import gate_matrix_arg

    for dtype, real in ((np.complex128, np.float64), (np.complex64, np.float32)):
        u = haar_unitary(8, rng)
        arg = gate_matrix_arg(u, dtype)
        assert arg.shape == (1,) and arg.itemsize == 64 * np.dtype(dtype).itemsize
        pairs = np.frombuffer(arg.tobytes(), dtype=real).reshape(64, 2)
        assert np.array_equal(pairs[:, 0] + 1j * pairs[:, 1], u.astype(dtype).reshape(-1))


def test_compiled_kernel_tables_agree():
    """Every direct kernel has a matrix source, every configured kernel is compiled, and the
    default module holds only what the policy can launch."""
    from qsim_tc.engine import small_gate as sg

    assert {d for _, d in sg.DIRECT} <= set(sg.DIRECT_USRC)
    assert set(sg.DIRECT_USRC.values()) <= {0, 1, 2}
    assert sg.direct_name("float", 3) == "apply_direct<float, 3, 1, false, 1, 1>"
    assert sg.direct_name("double", 2, 2) == "apply_direct<double, 2, 1, false, 1, 2>"
    default, tuning = sg.tables.default_kernel_names(), sg.tables.tuning_kernel_names()
    assert not default & tuning
    for (t, d), cfg in sg.STAGED.items():
        assert cfg.log_t in sg.STAGED_VARIANTS[d] and sg.staged_name(t, d, cfg.log_t) in default
    for d, cfg in sg.DMMA_CONFIG.items():
        assert sg.dmma_name(d, *cfg.kernel) in default
    assert all(sg.dmma_name(*v) in default | tuning for v in sg.DMMA_COMPILED)
    for d, cfg in sg.DMMA_PIPE_CONFIG.items():
        assert (d, *cfg.kernel) in sg.DMMA_PIPE_COMPILED and sg.dmma_pipe_name(d, *cfg.kernel) in default
    for d, *kernel in sg.DMMA_PIPE_COMPILED:
        cfg = sg.DmmaPipeConfig(*kernel)
        assert sg.dmma_pipe_name(d, *kernel) in default | tuning
        assert sg.dmma_pipe_shared_bytes(d, cfg) <= 227 * 1024  # the opt-in limit per block on sm_90
    assert sg.direct_name("double", 1) in tuning  # d = 1 goes to the staged kernel everywhere


def test_gate_matrix_arg_takes_any_layout(rng):
    """A non-contiguous matrix (a transposed view) is packed row by row all the same, for d = 1..4."""
    from qsim_tc.engine.small_gate.layout import gate_matrix_arg

    for d in (1, 2, 3, 4):
        u = haar_unitary(1 << d, rng)
        arg = gate_matrix_arg(u.T, np.complex128)
        assert arg.shape == (1,) and arg.itemsize == 16 << (2 * d)
        assert np.array_equal(np.frombuffer(arg.tobytes(), dtype=np.complex128), u.T.reshape(-1))


def test_check_launch_names_what_is_wrong(rng):
    """The launchers' shared contract, on host arrays: each violation is a ValueError that names
    the argument; a valid call passes."""
    from qsim_tc.engine.small_gate.launch import check_launch

    psi = np.zeros(1 << 6, dtype=np.complex128)
    u = haar_unitary(4, rng)
    check_launch("k", psi, 6, u, [1, 4])
    check_launch("k", psi.astype(np.complex64), 6, u, (0, 5))
    for data, n, m, pos, word in ((psi.real, 6, u, [1, 4], "data"), (psi, 7, u, [1, 4], "data"),
                                  (psi.reshape(8, 8), 6, u, [1, 4], "data"), (psi, 6, u, [4, 1], "positions"),
                                  (psi, 6, u, [1, 1], "positions"), (psi, 6, u, [1, 6], "positions"),
                                  (psi, 6, u, [-1, 2], "positions"), (psi, 6, u, [], "positions"),
                                  (psi, 6, u, [0, 1, 2], "matrix"), (psi, 6, u[:, :2], [1, 4], "matrix")):
        with pytest.raises(ValueError, match=word):
            check_launch("k", data, n, m, pos)


def test_staged_layout_args_match_the_layout():
    """The cached launch arguments of the staged kernel are tile_layout's and smem_swizzle's."""
    from qsim_tc.engine.small_gate.layout import smem_swizzle, staged_layout_args, tile_layout

    for positions, itemsize, log_t in (((0,), 16, 8), ((0, 27), 8, 8), ((1, 3, 20), 16, 8), ((0, 9, 18, 27), 8, 10)):
        n_tiles, args = staged_layout_args(28, positions, itemsize, log_t)
        d = len(positions)
        lay = tile_layout(28, list(positions), itemsize, log_t - d)
        hp, q = lay["hi_pos"][:lay["h"]], lay["tile_pos"][:d]
        assert n_tiles == lay["n_tiles"] == 1 << (28 - log_t)
        assert [int(a) for a in args] == [lay["k"], lay["h"], *(hp + [0] * (4 - len(hp))), *(q + [0] * (4 - d)),
                                          smem_swizzle(q, itemsize)]
        assert args[-1].dtype == np.uint64 and all(a.dtype == np.int32 for a in args[:-1])


def _pipe_map(d, warps, chunk, positions, tid):
    """apply_dmma_pipe's PipeMap for thread ``tid``, with the kernel's formulas: (slot, offset) pairs."""
    dim, low = 1 << d, 3 + chunk.bit_length() - 1
    out = []
    for i in range(chunk * dim // (4 * warps)):
        e = (i * warps + (tid >> 5)) * 32 + (tid & 31)
        off = r = gc = q = others = k = a = 0
        while k < d + low:
            target = q < d and positions[q] == a
            if target or others < low:
                bit = (e >> k) & 1
                k += 1
                off |= bit << a
                if target:
                    r |= bit << q
                else:
                    gc |= bit << others
            q, others, a = q + target, others + (not target), a + 1
        out.append((((gc >> 3) * dim + r) * 8 + ((gc & 7) ^ (2 * (r & 3))), off))
    return out


@pytest.mark.parametrize("variant", [(4, 4, 8), (4, 8, 16), (5, 8, 8), (6, 8, 4), (6, 4, 2)])
@pytest.mark.parametrize("positions", [[0, 1, 2, 3, 4, 5], [11, 12, 13, 14, 15, 16], [0, 5, 11, 16, 22, 27],
                                       [3, 4, 6, 9, 20, 27]])
def test_dmma_pipe_copies(variant, positions):
    """apply_dmma_pipe's copies fill every shared-memory slot of a stage exactly once with the
    amplitude the product reads there (tile j, row r, group gi at (j DIM + r) 8 + (gi ^ 2 (r & 3))),
    in two chunks; each warp-wide copy takes 32 consecutive amplitudes when the chunk holds address
    bits 0..4; the product's reads (lane g, t: row 4 ks + t of group g) hit 8 distinct 16-byte bank
    slots in each phase of 8 lanes."""
    d, warps, chunk = variant
    positions = positions[:d]
    dim = 1 << d
    off = [sum(((j >> b) & 1) << p for b, p in enumerate(positions)) for j in range(dim)]

    def group_base(grp):
        for p in positions:
            grp = ((grp >> p) << (p + 1)) | (grp & ((1 << p) - 1))
        return grp

    maps = [_pipe_map(d, warps, chunk, positions, tid) for tid in range(32 * warps)]
    slots = {}
    for m in maps:
        for slot, o in m:
            assert slot not in slots
            slots[slot] = o
    assert sorted(slots) == list(range(chunk * 8 * dim))
    for c in (0, 1):
        base = group_base(c * chunk * 8)
        for j in range(chunk):
            for r in range(dim):
                for gi in range(8):
                    slot = (j * dim + r) * 8 + (gi ^ (2 * (r & 3)))
                    assert base + slots[slot] == group_base(c * chunk * 8 + j * 8 + gi) + off[r]
    low = 3 + chunk.bit_length() - 1
    chunk_bits = sorted(positions + [b for b in range(64) if b not in positions][:low])
    if chunk_bits[:5] == [0, 1, 2, 3, 4]:
        for w in range(warps):
            for i in range(len(maps[0])):
                assert [maps[w * 32 + lane][i][1] for lane in range(32)] == [maps[w * 32][i][1] + lane for lane in range(32)]
    for ks in range(dim // 4):
        for phase in range(4):
            lanes = range(8 * phase, 8 * phase + 8)
            banks = {(((lane >> 2) ^ (2 * (lane & 3))) + 8 * (4 * ks + (lane & 3))) % 8 for lane in lanes}
            assert len(banks) == 8


def test_fits_dmma_pipe():
    """The pipelined kernel needs complex128 and one whole chunk of tiles (8 groups each)."""
    from qsim_tc.engine.small_gate.layout import fits_dmma_pipe
    from qsim_tc.engine.small_gate.tables import DmmaPipeConfig

    cfg = DmmaPipeConfig(1, 8, 8, 1, 3)  # chunks of 8 tiles: 2^(5 + 3 + 3) amplitudes at d = 5
    assert fits_dmma_pipe(11, [3, 4, 5, 6, 7], 16, cfg)
    assert not fits_dmma_pipe(10, [3, 4, 5, 6, 7], 16, cfg)
    assert not fits_dmma_pipe(28, [3, 4, 5, 6, 7], 8, cfg)  # complex64
    assert fits_dmma_pipe(28, [3, 4, 5, 6, 7], 16)  # DMMA_PIPE_CONFIG's d = 5
    assert not fits_dmma_pipe(28, [3, 4, 5, 6], 16)  # no default for d = 4


def test_fits_coalesced_and_target_args():
    """The remaining pure predicates and argument helpers of the layout module, without a GPU."""
    from qsim_tc.engine.small_gate.layout import coalesced, fits, fits_dmma, target_args
    from qsim_tc.engine.small_gate.tables import CONFIG, MAX_QUBITS

    for d in range(1, MAX_QUBITS + 1):
        smallest = CONFIG[d][0] + d  # one whole tile of the tiled kernel
        assert fits(smallest, d) and not fits(smallest - 1, d)
    assert not fits(28, 0) and not fits(28, MAX_QUBITS + 1)
    # neighbouring groups are runs of >= 128 bytes: from bit 3 (complex128) or bit 4 (complex64)
    assert coalesced([3, 9], 16) and not coalesced([2, 9], 16)
    assert coalesced([4, 9], 8) and not coalesced([3, 9], 8)
    assert fits_dmma([0, 1, 2, 3], 16) and fits_dmma([0, 5, 9, 12, 20, 27], 16)
    assert not fits_dmma([0, 1, 2], 16) and not fits_dmma([0, 1, 2, 3], 8)
    args = target_args([2, 7], 6)
    assert args == [2, 7, 0, 0, 0, 0] and all(a.dtype == np.int32 for a in args)
