"""The bounded-workspace engine on the GPU: the in-place swap kernel, blocked products (row
blocks, rotating blocks, column blocks through a contiguous copy) against the CPU engine, the
workspace bound on the device pool, and failures half-way."""

import numpy as np
import pytest

import gemm
from circuits import brickwork, haar_unitary
from qsim_tc import StateInvalidError, StateVector
from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.swap import permute_in_place, swap_bits

pytestmark = pytest.mark.gpu


def random_psi(n, rng):
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    return psi / np.linalg.norm(psi)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_swap_kernel_matches_cpu(cp, rng, dtype):
    for _ in range(30):
        n = int(rng.integers(2, 16))
        bits = [int(b) for b in rng.permutation(n)[: 2 * int(rng.integers(1, n // 2 + 1))]]
        pairs = list(zip(bits[::2], bits[1::2]))
        x = random_psi(n, rng).astype(dtype)
        g = cp.asarray(x)
        swap_bits(x, n, pairs, np)
        swap_bits(g, n, pairs, cp)
        assert np.array_equal(g.get(), x), pairs


def test_permute_in_place_gpu_equals_permute_bits(cp, rng):
    for _ in range(20):
        n = int(rng.integers(2, 16))
        old, new = [int(q) for q in rng.permutation(n)], [int(q) for q in rng.permutation(n)]
        x = random_psi(n, rng)
        g = cp.asarray(x)
        permute_in_place(g, n, new, old, cp)
        assert np.array_equal(g.get(), permute_bits(x, n, new, old, np))


@pytest.mark.parametrize("method,dtype,tol", [("native", np.complex128, 1e-13), ("native32", np.complex64, 2e-6)])
@pytest.mark.parametrize("d", [2, 4, 5, 7, 8, 10])
def test_blocked_paths_match_cpu(cp, rng, method, dtype, tol, d):
    """Small workspaces force many blocks: bottom, bottom-rotate (d = 4, 5, 10), top and batched
    (column blocks copied to a contiguous buffer), and swaps; no small-gate kernel."""
    n = 16
    psi = random_psi(n, rng)
    # on the GPU the GEMM's operand U (2^2d amplitudes) lives in the workspace too: room for it and
    # for output blocks of 1/8 of the state (a contiguous input copy beside each), so many blocks run
    item = np.dtype(dtype).itemsize
    ws = (1 << 2 * d) * item + 2 * ((1 << n) * item // 8)
    g = StateVector(n, dtype=dtype, device="gpu", data=psi, workspace_bytes=ws)
    c = StateVector(n, dtype=np.complex128, device="cpu", data=psi)
    paths = set()
    for qs in (list(range(d)), list(range(n - d, n)), list(range(5, 5 + d)),
               [int(q) for q in rng.choice(n, d, replace=False)]):
        u = haar_unitary(1 << d, rng)
        info = g.apply(u, qs, method=method, small_gate_kernel=False)
        c.apply(u, qs)
        paths.add(info.path)
        assert info.blocks >= 1
    assert np.abs(g.to_numpy() - c.to_numpy()).max() < tol, paths


def test_brickwork_bounded_matches_double_buffer_on_gpu(cp):
    circ = brickwork(20, 10, 3, seed=2)
    out = []
    for kw in ({"double_buffer": False}, {"double_buffer": True}):
        st = StateVector(20, device="gpu", **kw)
        gates = circ.gates
        for i, gt in enumerate(gates):
            st.apply(gt.matrix, gt.qubits, next_qubits=gates[i + 1].qubits if i + 1 < len(gates) else None)
        out.append(st.to_numpy())
    assert np.abs(out[0] - out[1]).max() < 1e-13


def test_workspace_bound_on_the_device_pool(cp, rng):
    """The pool's growth over a d = 10 gate (GEMM blocks, cuBLAS operands) stays within the bound."""
    n, limit = 22, (1 << 24) + (1 << 22)  # 64 MiB state; the 16 MiB gate operand and 4 MiB of blocks
    st = StateVector(n, device="gpu", data=random_psi(n, rng), workspace_bytes=limit)
    u = haar_unitary(1 << 10, rng)
    qs = [int(q) for q in rng.choice(n, 10, replace=False)]
    st.apply(u, qs)
    cp.cuda.Device().synchronize()
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.total_bytes()
    st.apply(u, list(reversed(qs)))
    st.apply(u, list(range(12, 22)))  # top: column blocks with the contiguous copy
    cp.cuda.Device().synchronize()
    assert pool.total_bytes() - before <= limit + (1 << 21)  # + the gate matrix forms


def test_failure_in_a_later_block_invalidates_the_gpu_state(cp, rng, monkeypatch):
    # the 1 MiB gate operand and output blocks of 1/16 of the 256 KiB state
    st = StateVector(14, device="gpu", data=random_psi(14, rng), workspace_bytes=(1 << 20) + (1 << 15))
    real, calls = gemm.matmul, {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected cuBLAS failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm, "matmul", failing)
    with pytest.raises(StateInvalidError, match="injected cuBLAS failure"):
        st.apply(haar_unitary(1 << 8, rng), list(range(8)))
    assert not st.is_valid
    monkeypatch.undo()
    st.reset()
    assert st.amplitude(0) == 1


def test_32_qubit_complex128_state_fits_an_80gb_gpu(cp):
    """The capacity the bounded engine exists for: 64 GiB of state, 4 GiB of workspace."""
    free, _ = cp.cuda.runtime.memGetInfo()
    if free < (68 << 30):
        pytest.skip("needs a GPU with 68 GiB free")
    st = StateVector(32, device="gpu")
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    st.apply(np.kron(h, h), [0, 31], small_gate_kernel=False)  # scattered: a swap pass, then blocks
    st.apply(haar_unitary(1 << 10, np.random.default_rng(0)), list(range(11, 21)))
    assert abs(st.norm() - 1) < 1e-10
