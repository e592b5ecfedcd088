"""The small-gate kernel's tiling, checked on the CPU by replaying its index arithmetic."""

import numpy as np
import pytest

from circuits import haar_unitary
from qsim_tc.small_gate import CONFIG, tile_layout


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
    """The measured default policy: direct kernel when coalesced, tiled for low targets, GEMM
    for four targets at the bottom and for d > 4; nothing on the CPU or for emulated methods."""
    import gemm
    from qsim_tc.small_gate import apply_direct_gpu, apply_lanes_gpu, apply_tiled_gpu, select

    native = gemm.get_method("native")
    gpu = gemm.Device("gpu", np, "test")
    assert select(native, gpu, None, 28, [12, 13], 16) is apply_direct_gpu
    assert select(native, gpu, None, 28, [0, 5], 16) is apply_tiled_gpu
    assert select(native, gpu, None, 28, [0, 2], 16) is apply_lanes_gpu
    assert select(native, gpu, None, 28, [1, 3, 4], 16) is apply_lanes_gpu
    assert select(native, gpu, None, 28, [0, 1, 2, 3], 16) is None
    assert select(native, gpu, None, 28, [3, 4, 5, 6, 7], 16) is None
    assert select(native, gpu, True, 28, [3, 4, 5, 6, 7], 16) is apply_direct_gpu
    assert select(native, gpu, True, 28, [0, 1, 2, 3, 4, 5], 16) is apply_tiled_gpu
    assert select(native, gemm.resolve_device("cpu"), None, 28, [12], 16) is None

    class Emulated:
        name = "emulated"

    with pytest.raises(ValueError, match="computes every gate as its own GEMM"):
        select(Emulated(), gpu, True, 28, [12], 16)
    assert select(Emulated(), gpu, None, 28, [12], 16) is None


@pytest.mark.parametrize("positions", [[0], [4], [0, 1], [1, 3], [0, 2, 4], [2, 3, 4]])
def test_lanes_shuffle_sources(rng, positions):
    """The lanes kernel's index arithmetic, replayed: lane l computes row ``row(l)`` of its group
    from the lanes ``src[j]``; over one round of 32 amplitudes that must be the gate."""
    d = len(positions)
    tmask = sum(1 << p for p in positions)
    u = haar_unitary(1 << d, rng)
    v = rng.standard_normal(32) + 1j * rng.standard_normal(32)
    out = np.empty_like(v)
    for lane in range(32):
        row = sum(((lane >> p) & 1) << b for b, p in enumerate(positions))
        src = [(lane & ~tmask) | sum(((j >> b) & 1) << p for b, p in enumerate(positions)) for j in range(1 << d)]
        out[lane] = sum(u[row, j] * v[src[j]] for j in range(1 << d))
    t = v.reshape((2,) * 5)
    axes = [4 - q for q in reversed(positions)]
    ref = np.moveaxis(np.tensordot(u.reshape((2,) * (2 * d)), t, axes=(list(range(d, 2 * d)), axes)),
                      list(range(d)), axes).reshape(-1)
    assert np.abs(out - ref).max() < 1e-12
