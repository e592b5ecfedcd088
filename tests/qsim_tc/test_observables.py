"""Grouped Pauli expectation values (qsim_tc.observables) against Qiskit's Statevector."""

import numpy as np
import pytest

pytest.importorskip("qiskit")

from qiskit.quantum_info import Pauli, SparsePauliOp, random_pauli_list, random_statevector  # noqa: E402

import qsim_tc.observables as obs  # noqa: E402
import qsim_tc.observables_gpu as obs_gpu  # noqa: E402
from qsim_tc import StateVector  # noqa: E402


def grouped_op(n, seed):
    """A Hamiltonian with several terms per X mask (as Jordan-Wigner ones have) and phases."""
    rng = np.random.default_rng(seed)
    labels = []
    for _ in range(6):
        x = rng.integers(0, 2, n)
        for _ in range(5):
            z = rng.integers(0, 2, n)
            labels.append("".join("IZXY"[2 * a + b] for a, b in zip(x[::-1], z[::-1])))
    labels += ["I" * n, "Z" * n]
    return SparsePauliOp(labels, rng.normal(size=len(labels)) + 0.1j * rng.normal(size=len(labels)))


@pytest.mark.parametrize("kernel", [True, False], ids=["compiled", "array-code"])
@pytest.mark.parametrize("low_bits,chunk", [(10, 1 << 19), (3, 16), (2, 4)])
@pytest.mark.parametrize("n", [1, 4, 9])
def test_values_match_qiskit(n, low_bits, chunk, kernel, monkeypatch):
    monkeypatch.setattr(obs, "LOW_BITS", low_bits)
    monkeypatch.setitem(obs.CHUNK_ELEMENTS, "cpu", chunk)
    # the compiled pass: columns and blocks of rows as small as one row, or whole states
    monkeypatch.setattr(obs, "CPU_LOW_BITS", low_bits - 2 if low_bits < 10 else 8)
    monkeypatch.setattr(obs, "CPU_BLOCK_ELEMENTS", chunk)
    if not kernel:
        monkeypatch.setattr(obs, "_cpu_group_sums", lambda: None)
    sv = random_statevector(2**n, seed=n)
    st = StateVector.from_array(sv.data, device="cpu")
    pl = random_pauli_list(n, 25, seed=n, phase=True)
    ops = [grouped_op(n, n), SparsePauliOp(pl, np.linspace(-1, 1, 25)), pl[3], pl[7].to_label(),
           {"I" * n: 2.0}, [("X" * n, 0.5), ("Y" * n, -1j)]]
    want = [sv.expectation_value(o if not isinstance(o, (str, dict, list)) else
                                 (Pauli(o) if isinstance(o, str) else SparsePauliOp.from_list(list(dict(o).items()))))
            for o in ops]
    got = obs.expectation_values(st, ops)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert abs(st.expectation_value(ops[0]) - want[0]) < 1e-12


def test_one_compiled_pass_runs_every_x_mask(monkeypatch):
    n = 8
    op = grouped_op(n, 3)
    masks = {int(np.dot(p.x, 1 << np.arange(n))) for p in op.paulis}
    calls = []
    kernel = obs._cpu_group_sums()
    assert kernel is not None  # numba is a dependency

    def counting(a2, rows, block, g_xh, g_xl, *rest):
        calls.append((g_xh << obs.CPU_LOW_BITS) | g_xl)
        return kernel(a2, rows, block, g_xh, g_xl, *rest)

    monkeypatch.setattr(obs, "_cpu_group_sums", lambda: counting)
    monkeypatch.setattr(obs, "CPU_LOW_BITS", 4)
    st = StateVector.from_array(random_statevector(2**n, seed=1).data, device="cpu")
    obs.expectation_values(st, [op])
    # one call for the whole observable; each X mask one group of it, in ascending order
    assert len(calls) == 1
    assert calls[0].tolist() == sorted(masks)
    assert len(op) > 3 * len(masks - {0})


def test_a_complex64_state_and_errors():
    sv = random_statevector(2**5, seed=4)
    st = StateVector.from_array(sv.data.astype(np.complex64), device="cpu")
    op = grouped_op(5, 2)
    assert abs(st.expectation_value(op) - sv.expectation_value(op)) < 1e-5
    with pytest.raises(ValueError, match=r"observable 1: operator acts on 3 qubits"):
        obs.expectation_values(st, ["XXXXX", "XYZ"])
    with pytest.raises(TypeError, match="observable 0 must be a Pauli label"):
        obs.expectation_values(st, [np.eye(2)])
    with pytest.raises(ValueError, match="unknown phase prefix"):
        obs.expectation_values(st, ["--XXXXX"])
    assert obs.expectation_values(st, []).shape == (0,)


@pytest.mark.gpu
def test_gpu_values_match_cpu(cp):
    n = 12
    sv = random_statevector(2**n, seed=6)
    op = grouped_op(n, 5)
    cpu = StateVector.from_array(sv.data, device="cpu")
    gpu = StateVector.from_array(sv.data, device="gpu")
    want = sv.expectation_value(op)
    assert abs(obs.expectation_values(gpu, [op])[0] - want) < 1e-12
    assert abs(gpu.expectation_value(op) - cpu.expectation_value(op)) < 1e-12


@pytest.mark.parametrize("chunk", [1 << 19, 64, 8])
def test_a_block_of_states_gives_each_states_values(chunk, monkeypatch):
    n = 7
    monkeypatch.setattr(obs, "LOW_BITS", 3)
    monkeypatch.setattr(obs, "CPU_LOW_BITS", 3)
    monkeypatch.setattr(obs, "CPU_BLOCK_ELEMENTS", chunk)
    states = np.stack([random_statevector(2**n, seed=s).data for s in range(3)])
    terms, _ = obs.collect([grouped_op(n, 8)], n)
    block = obs.term_values(states, terms, chunk_elements=chunk)
    assert block.shape == (3, len(terms.x))
    for i in range(3):
        np.testing.assert_allclose(block[i], obs.term_values(states[i], terms), atol=1e-13)


class _DeviceArray(np.ndarray):
    """A host array standing in for a cupy one (``get`` copies it back)."""

    def get(self):
        return np.asarray(self).copy()


def _fake_cupy(monkeypatch):
    """cupy's few calls of the GPU pass's host code on host arrays, its kernels run by the model."""
    import sys
    import types

    def dev(fn):
        return lambda *a, **k: np.asarray(fn(*a, **k)).view(_DeviceArray)

    fake = types.SimpleNamespace(ascontiguousarray=dev(np.ascontiguousarray), asarray=dev(np.asarray),
                                 zeros=dev(np.zeros))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(obs_gpu, "_kernels", obs_gpu.model_kernels)


def mixed_terms(n, seed):
    """Every kind of term: identity, one-qubit letters on the lowest and highest qubit, masks on
    both ends, all-X/Y/Z, random strings and groups of several terms per X mask."""
    rng = np.random.default_rng(seed)
    ends = {0, n - 1}
    labels = ["I" * n, "X" * n, "Y" * n, "Z" * n]
    for q in sorted(ends):
        for letter in "XYZ":
            labels.append("".join(letter if k == q else "I" for k in reversed(range(n))))
    if n > 1:
        labels += ["".join(a if k == n - 1 else b if k == 0 else "I" for k in reversed(range(n)))
                   for a in "XY" for b in "XYZ"]
    labels += ["".join(rng.choice(list("IXYZ"), n)) for _ in range(12)]
    return [SparsePauliOp(labels), grouped_op(n, seed)]


# (qubits, tile bits, threads): tiles of two amplitudes to a whole state, threads without
# amplitudes (tile < threads), one to 16 amplitudes a thread, high parts up to 6 bits
MODEL_SHAPES = [(1, 3, 4), (2, 1, 2), (3, 2, 2), (5, 3, 2), (8, 4, 4), (11, 6, 8), (14, 8, 16)]


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("n,tile_bits,threads", MODEL_SHAPES)
def test_gpu_pass_model_matches_the_cpu_pass(n, tile_bits, threads, dtype, monkeypatch):
    # the host code and the model of observables.cu's indexing against the CPU pass, on random
    # operators; few thread blocks (each owning several tiles) and launches of 7 terms, so groups
    # and segments are cut across launches
    _fake_cupy(monkeypatch)
    kind = "c128" if dtype == np.complex128 else "c64"
    monkeypatch.setitem(obs_gpu.TILE_BITS, kind, tile_bits)
    monkeypatch.setattr(obs_gpu, "THREADS", threads)
    monkeypatch.setattr(obs_gpu, "BLOCKS", 6)
    monkeypatch.setattr(obs_gpu, "LAUNCH_TERMS", 7)
    states = np.stack([random_statevector(2**n, seed=s).data for s in range(2)]).astype(dtype)
    terms, _ = obs.collect(mixed_terms(n, n), n)
    got = obs._term_values_gpu(states.view(_DeviceArray), terms)
    want = obs.term_values(states, terms)
    tol = 1e-12 if dtype == np.complex128 else 1e-5
    np.testing.assert_allclose(got, want, atol=tol)
    np.testing.assert_allclose(obs._term_values_gpu(states[1].view(_DeviceArray), terms), want[1], atol=tol)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_gpu_pass_model_shares_keys_among_terms(dtype, monkeypatch):
    # a chemistry-shaped operator (Z, ZZ, hopping X Z..Z X and Y Z..Z Y) on tiles of 3 bits: most
    # terms differ from others only above the tile, so they share a key's sum and take their own
    # signs above it; the model of the kernel against the CPU pass
    _fake_cupy(monkeypatch)
    kind = "c128" if dtype == np.complex128 else "c64"
    monkeypatch.setitem(obs_gpu.TILE_BITS, kind, 3)
    monkeypatch.setattr(obs_gpu, "THREADS", 2)
    monkeypatch.setattr(obs_gpu, "BLOCKS", 3)
    n = 9
    labels = []
    for p in range(n):
        labels.append("".join("Z" if k == p else "I" for k in reversed(range(n))))
        for q in range(p + 1, n):
            labels.append("".join("Z" if k in (p, q) else "I" for k in reversed(range(n))))
            for a in "XY":
                labels.append("".join(a if k in (p, q) else "Z" if p < k < q else "I" for k in reversed(range(n))))
    terms, _ = obs.collect([SparsePauliOp(labels)], n)
    order = np.concatenate(obs._x_groups(terms))
    (launch,) = obs_gpu.launches(terms, order, 3)
    distinct = {(int(x), int(z) & 7, int(ny) % 2) for x, z, ny in zip(terms.x, terms.z, terms.ny)}
    assert launch.n_keys == len(distinct) < 0.6 * len(labels) and np.diff(launch.u_t).max() >= 8
    states = np.stack([random_statevector(2**n, seed=s).data for s in range(2)]).astype(dtype)
    tol = 1e-12 if dtype == np.complex128 else 1e-5
    np.testing.assert_allclose(obs._term_values_gpu(states.view(_DeviceArray), terms), obs.term_values(states, terms),
                               atol=tol)


def test_gpu_pass_segments_follow_the_high_parts():
    # a segment per distinct x >> tb with its top bit; groups in order, each group's terms by key
    # (Z mask within the tile, part), terms that differ only above the tile sharing a key
    n = 9
    labels = ["IIIIIIIXZ", "IIIIIIIYY", "IIIIIIIXX", "IIIIIIXII", "IXIIIIIII", "IXIIIIIIX", "XIIIIXIII",
              "ZIIIIIIIZ", "IIIIIIIIZ", "ZIIIIIIII", "IIIIIIIXY"]
    terms, _ = obs.collect([SparsePauliOp(labels)], n)
    order = np.concatenate(obs._x_groups(terms))
    (launch,) = obs_gpu.launches(terms, order, 3)
    assert launch.g_x.tolist() == [0, 2, 3, 4, 1 << 7, (1 << 7) | 1, (1 << 8) | (1 << 3)]
    assert launch.seg_d.tolist() == [0, 1 << 4, (1 << 5) | 1] and launch.seg_top.tolist() == [0, 4, 5]
    assert launch.seg_g.tolist() == [0, 4, 6, 7]
    kernel_order = order[launch.positions]
    assert sorted(launch.positions.tolist()) == list(range(len(labels)))
    z, ny = terms.z[kernel_order], terms.ny[kernel_order]
    # x = 0: Z on qubit 8 alone (key 0), then Z0 and Z8 Z0 (key 1, their signs apart above the
    # tile); x = 3: XX (key 0), YY (key 3), XY (key 1 | KEY_IM: the imaginary part)
    im = obs_gpu.KEY_IM
    assert launch.u_key.tolist() == [0, 1, 1, 0, 3, 1 | im, 0, 0, 0, 0]
    assert launch.g_u.tolist() == [0, 2, 3, 6, 7, 8, 9, 10]
    assert launch.u_t.tolist() == [0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert launch.t_u.tolist() == [0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert z[:3].tolist() == [1 << 8, 1, (1 << 8) | 1]  # a key's terms in the input's order
    assert launch.t_zh.tolist() == (z >> 3).tolist()
    assert ((launch.u_key[launch.t_u] & ~im) == z & 7).all()
    assert ((launch.u_key[launch.t_u] & im != 0) == (ny % 2 == 1)).all()
    # the kernel's 16-byte records: int64 words low first, the keys' end beside the parts
    seg_rec, g_rec = launch.segment_records(), launch.group_records()
    assert seg_rec.dtype == g_rec.dtype == np.int32
    assert (seg_rec[:-1, 0] + (seg_rec[:-1, 1].astype(np.int64) << 32)).tolist() == launch.seg_d.tolist()
    assert seg_rec[:-1, 2].tolist() == launch.seg_top.tolist() and seg_rec[:, 3].tolist() == launch.seg_g.tolist()
    assert (g_rec[:, 0] + (g_rec[:, 1].astype(np.int64) << 32)).tolist() == launch.g_x.tolist()
    bits = obs_gpu.REC_KEY_BITS
    assert (g_rec[:, 2] & ((1 << bits) - 1)).tolist() == launch.g_u[:-1].tolist()
    assert g_rec[:, 3].tolist() == launch.g_u[1:].tolist()
    # each group's first key of the imaginary parts: x = 3's XY, after XX and YY; the end elsewhere
    assert (g_rec[:, 2] >> bits).tolist() == [2, 3, 5, 7, 8, 9, 10]
    assert obs_gpu.LAUNCH_TERMS < 1 << bits  # a key index fits in half a word
    assert obs_gpu.shared_limit_terms("c128", 232448) >= obs_gpu.LAUNCH_TERMS  # an H100's opt-in limit
    assert obs_gpu.blocks_per_sm_fit("c128", 233472) >= obs_gpu.BLOCKS_PER_SM  # an H100's multiprocessor
    assert obs_gpu.blocks_per_sm_fit("c64", 233472) >= obs_gpu.BLOCKS_PER_SM


def test_gpu_pass_constants_are_the_kernels():
    # the host code sizes tiles, shared memory and doubling from its own copies of
    # observables.cu's constants: a difference would give wrong sums on a GPU only
    import re
    from pathlib import Path

    src = Path(obs_gpu.__file__).with_name("observables.cu").read_text()
    define = {m[1]: int(m[2]) for m in re.finditer(r"^#define (\w+) (\d+)", src, re.M)}
    assert define["THREADS"] == obs_gpu.THREADS == 1 << define["LOG_THREADS"]
    assert define["REC_KEY_BITS"] == obs_gpu.REC_KEY_BITS
    assert re.search(r"^#define KEY_IM \(1 << 30\)", src, re.M) and obs_gpu.KEY_IM == 1 << 30
    assert obs_gpu.STATIC_SHARED == 2 * (define["THREADS"] // 32) * define["STAGE"] * 8  # stage[2][WARPS][STAGE]
    tiles = {m[1]: int(m[2]) for m in re.finditer(r"^GROUP_PASS\(group_pass_(\w+), \w+, (\d+)\)", src, re.M)}
    assert tiles == obs_gpu.TILE_BITS
    assert f"__launch_bounds__(THREADS, {obs_gpu.BLOCKS_PER_SM})" in src


@pytest.mark.parametrize("capability,runs", [("75", False), ("80", True), ("90", True), ("120", True)])
def test_gpu_pass_runs_from_sm80(capability, runs, monkeypatch):
    # the pass copies its tiles with cp.async: older GPUs keep the array code
    import sys
    import types

    device = types.SimpleNamespace(compute_capability=capability)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda: device))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert obs_gpu.pass_runs_on_current_device() is runs
    assert obs._gpu_pass_runs() is runs


def test_gpu_pass_of_a_block_of_no_states(monkeypatch):
    # a block of zero states has no values, as on the CPU (its thread blocks per state were a
    # division by the number of states); with no terms too
    _fake_cupy(monkeypatch)
    monkeypatch.setattr(obs_gpu, "BLOCKS", 6)
    terms, _ = obs.collect([SparsePauliOp(["XZI", "YYX", "III"])], 3)
    empty = np.zeros((0, 8), dtype=np.complex128)
    assert obs.term_values(empty, terms).shape == (0, 3)
    assert obs._term_values_gpu(empty.view(_DeviceArray), terms).shape == (0, 3)
    none = obs.PauliTerms(3, *(np.zeros(0, dtype=np.int64) for _ in range(3)))
    assert obs._term_values_gpu(empty.view(_DeviceArray), none).shape == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("n", [1, 5, 12, 20])
def test_gpu_pass_matches_the_array_code_and_the_cpu(cp, n, dtype, monkeypatch):
    monkeypatch.setattr(obs, "GPU_KERNEL", True)
    n_states = 3 if n < 20 else 1
    states = np.stack([random_statevector(2**n, seed=s).data for s in range(n_states)]).astype(dtype)
    terms, _ = obs.collect(mixed_terms(n, 10 + n), n)
    dev = cp.asarray(states)
    tol = 1e-12 if dtype == "complex128" else 1e-5
    kernel = obs.term_values(dev, terms)
    np.testing.assert_allclose(kernel, obs.term_values(states, terms), atol=tol)
    np.testing.assert_allclose(obs.term_values(dev[0], terms), kernel[0], atol=tol)
    if n <= 12:
        np.testing.assert_allclose(kernel, obs.term_values(dev, terms, compiled=False), atol=tol)
    again = obs.term_values(dev, terms)
    np.testing.assert_array_equal(again, kernel)  # the thread blocks' sums are added in a fixed order
    for lag in (-1, 0):  # no pacing, the tightest: the same tiles a thread block, the same sums
        monkeypatch.setattr(obs_gpu, "PACE_LAG", lag)
        np.testing.assert_array_equal(obs.term_values(dev, terms), kernel)


@pytest.mark.gpu
def test_gpu_pass_is_accurate_to_its_float64_summation(cp, monkeypatch):
    # each value is a sum of 2^n products |w_b| <= |psi_b| |psi_b^x|, so sum_b |w_b| <= |psi|^2 = 1;
    # the kernel adds each in a chain of at most `depth` roundings (a thread's K amplitudes, the
    # warp's and block's trees, the tiles of a thread block, the thread blocks), each at most
    # 2^-53 of a partial sum, and each product rounds within 2^-52 |w_b|: against the correctly
    # rounded sum of the products (math.fsum) the error is within (depth + 4) 2^-53
    import math

    monkeypatch.setattr(obs, "GPU_KERNEL", True)
    n = 20
    psi = random_statevector(2**n, seed=21).data
    terms, _ = obs.collect(mixed_terms(n, 5), n)
    got = obs.term_values(cp.asarray(psi), terms)
    tb = obs_gpu.TILE_BITS["c128"]
    grid_x = obs_gpu.grid_blocks(n, tb, 1, obs_gpu.total_blocks(2 * (1 << tb) * 16 + 8 * len(terms.x)))
    depth = (1 << tb) // obs_gpu.THREADS + 5 + obs_gpu.THREADS // 32 + -(-(1 << (n - tb)) // grid_x) + grid_x
    b = np.arange(2**n)
    worst = 0.0
    for t in range(0, len(terms.x), max(1, len(terms.x) // 12)):
        x, z, ny = int(terms.x[t]), int(terms.z[t]), int(terms.ny[t])
        w = np.conj(psi[b ^ x]) * psi * (1 - 2 * obs._parity(b & z, np))
        part = w.imag if ny % 2 else w.real
        exact = math.fsum(part) * obs._FACTOR[ny % 4]
        worst = max(worst, abs(got[t] - exact))
    assert worst <= (depth + 4) * 2.0**-53, (worst, depth)
