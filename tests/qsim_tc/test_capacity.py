"""The bounded-workspace engine on the CPU: in-place bit swaps, blocked products, the workspace
bound, the memory check's message and failures half-way through a gate."""

import tracemalloc

import numpy as np
import pytest

import gemm
from circuits import brickwork, haar_unitary
from qsim_tc import InsufficientMemoryError, StateInvalidError, StateVector, memory
from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.swap import SwapInterrupted, pairs_between, permute_in_place, swap_bits


def random_state(n, rng, dtype=np.complex128):
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    return (psi / np.linalg.norm(psi)).astype(dtype)


# --- in-place swaps --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_swapped_bit_pairs_equal_permute_bits(seed):
    """Random disjoint pairs, random chunk sizes: the in-place exchange is the permutation that
    exchanges the pairs' bits."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(2, 13))
        bits = [int(b) for b in rng.permutation(n)[: 2 * int(rng.integers(1, n // 2 + 1))]]
        pairs = list(zip(bits[::2], bits[1::2]))
        x = random_state(n, rng)
        new = list(range(n))
        for p, q in pairs:
            new[p], new[q] = new[q], new[p]
        want = permute_bits(x, n, new, list(range(n)), np)
        swap_bits(x, n, pairs, np, chunk_elements=1 << int(rng.integers(2, 10)))
        assert np.array_equal(x, want), pairs


@pytest.mark.parametrize("seed", range(4))
def test_permute_in_place_equals_permute_bits(seed):
    """Any permutation: at most two in-place passes (one when it is an involution)."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(1, 13))
        old, new = [int(q) for q in rng.permutation(n)], [int(q) for q in rng.permutation(n)]
        x = random_state(n, rng, np.complex64)
        want = permute_bits(x, n, new, old, np)
        passes = permute_in_place(x, n, new, old, np, chunk_elements=1 << int(rng.integers(2, 10)))
        assert np.array_equal(x, want)
        sigma = [new.index(q) for q in old]
        involution = all(sigma[sigma[p]] == p for p in range(n))
        assert passes == (0 if sigma == list(range(n)) else 1 if involution else 2)


def test_swap_checks_its_pairs():
    with pytest.raises(ValueError, match="pairs must be disjoint bits in 0..3"):
        swap_bits(np.zeros(16, complex), 4, [(0, 1), (1, 2)], np)
    with pytest.raises(ValueError, match="pairs must be disjoint"):
        swap_bits(np.zeros(16, complex), 4, [(0, 4)], np)


def test_pairs_between_is_at_most_two_involutions():
    assert pairs_between([0, 1, 2], [0, 1, 2]) == []
    assert pairs_between([0, 1, 2, 3], [1, 0, 3, 2]) == [[(0, 1), (2, 3)]]
    assert len(pairs_between([0, 1, 2, 3, 4], [1, 2, 3, 4, 0])) == 2


# --- blocked products against the double-buffer engine ----------------------------------------

def _pair_of_states(n, rng, dtype, workspace_bytes):
    psi = random_state(n, rng, dtype)
    return (StateVector(n, dtype=dtype, device="cpu", data=psi, workspace_bytes=workspace_bytes, double_buffer=False),
            StateVector(n, dtype=dtype, device="cpu", data=psi, double_buffer=True))


@pytest.mark.parametrize("method,dtype", [("native", np.complex128), ("native32", np.complex64)])
@pytest.mark.parametrize("d,qubits", [(2, [0, 1]), (3, [9, 10, 11]), (5, [0, 1, 2, 3, 4]), (4, [7, 8, 9, 10]),
                                      (2, [6, 7]), (8, list(range(8)))])
def test_blocked_products_agree_with_the_whole_state_product_to_one_dot_products_rounding(method, dtype, d, qubits,
                                                                                          monkeypatch):
    """Contiguous targets (bottom, top, batched): each block's rows or columns are the same dot
    products as in one GEMM over the state. BLAS may pick another kernel (another summation order)
    for a block's shape than for the whole state's (OpenBLAS has small-matrix paths), so the two
    agree within twice the rounding bound of a 2^d-term complex dot product, elementwise:
    |a - b| <= 2 sqrt(2) gamma_(k+2) (|U| |psi|), gamma_n = n u / (1 - n u) (Higham, ch. 3)."""
    import qsim_tc.engine.apply as apply_mod

    monkeypatch.setitem(apply_mod.ROTATE_D, "cpu", frozenset())  # the same orientation on both sides
    rng = np.random.default_rng(d)
    n = 12
    bounded, old = _pair_of_states(n, rng, dtype, 1 << 14)  # blocks of at most 2^10 amplitudes
    u = haar_unitary(1 << d, rng)
    info = bounded.apply(u, qubits, method=method)
    info_old = old.apply(u, qubits, method=method)
    assert info.path == info_old.path and info.blocks > 1
    # |U| |psi| in float64, through the same engine: the magnitudes each output element sums
    psi = random_state(n, np.random.default_rng(d), dtype)  # the start state of both (same draws)
    mags = StateVector(n, dtype=np.complex128, device="cpu", data=np.abs(psi).astype(np.complex128))
    mags.apply(np.abs(u).astype(complex), qubits, method="native", check_unitary=False)
    k, unit = 1 << d, np.finfo(dtype).eps / 2
    gamma = (k + 2) * unit / (1 - (k + 2) * unit)
    bound = 2 * np.sqrt(2) * gamma * np.abs(mags.to_numpy())
    diff = np.abs(bounded.to_numpy().astype(np.complex128) - old.to_numpy())
    assert np.all(diff <= bound), float(np.max(diff / np.maximum(bound, 1e-300)))


@pytest.mark.parametrize("seed", range(3))
def test_swapped_paths_match_the_double_buffer_engine(seed):
    """Scattered targets: swaps in place instead of a permutation into a spare buffer. Where the
    swaps leave the targets in another order, the matrix's rows and columns are permuted the
    same way and the sums run in another order: equal to rounding (1e-15 relative), not bit
    for bit."""
    rng = np.random.default_rng(seed)
    n = 11
    bounded, old = _pair_of_states(n, rng, np.complex128, 1 << 14)
    for _ in range(12):
        d = int(rng.integers(1, 6))
        qs = [int(q) for q in rng.choice(n, d, replace=False)]
        nxt = [int(q) for q in rng.choice(n, 2, replace=False)]
        u = haar_unitary(1 << d, rng)
        bounded.apply(u, qs, next_qubits=nxt)
        old.apply(u, qs, next_qubits=nxt)
    a, b = bounded.to_numpy(), old.to_numpy()
    assert np.abs(a - b).max() <= 1e-15 * 8 * np.abs(b).max() + 1e-15


@pytest.mark.parametrize("method,dtype", [("int8", np.complex128), ("tf32tf32", np.complex64)])
def test_emulated_methods_on_blocks(method, dtype):
    """Methods that allocate their own output: blocks of their result copied back."""
    rng = np.random.default_rng(3)
    n = 10
    bounded, old = _pair_of_states(n, rng, dtype, None)
    bounded._phys.workspace_limit = memory.gate_block(gemm.get_method(method), n, 4, dtype, {}, device="cpu",
                                                      limit=1 << 14)[1]  # the smallest block + 16 KiB
    u = haar_unitary(1 << 4, rng)
    for qs in ([0, 1, 2, 3], [6, 7, 8, 9], [1, 4, 7, 8]):
        info = bounded.apply(u, qs, method=method)
        old.apply(u, qs, method=method)
        assert info.blocks >= 1
    tol = 1e-13 if dtype == np.complex128 else 1e-5
    assert np.abs(bounded.to_numpy() - old.to_numpy()).max() < tol


def test_brickwork_bounded_equals_double_buffer():
    circ = brickwork(12, 3, 6, seed=5)
    states = [StateVector(12, device="cpu", workspace_bytes=1 << 13), StateVector(12, device="cpu", double_buffer=True)]
    for st in states:
        gates = circ.gates
        for i, g in enumerate(gates):
            st.apply(g.matrix, g.qubits, next_qubits=gates[i + 1].qubits if i + 1 < len(gates) else None)
    a, b = (st.to_numpy() for st in states)
    assert np.abs(a - b).max() < 1e-14


# --- the workspace bound ----------------------------------------------------------------------

@pytest.mark.parametrize("method,dtype,d,limit", [("native", np.complex128, 2, 1 << 17),
                                                  ("native", np.complex128, 6, 1 << 17),
                                                  ("native32", np.complex64, 4, 1 << 17),
                                                  ("int8", np.complex128, 4, 1 << 18),
                                                  ("tf32tf32", np.complex64, 3, 300 << 20)])
def test_workspace_bound_is_honoured(method, dtype, d, limit):
    """tracemalloc's peak over a gate (scattered: swaps and blocks) stays within workspace_bytes
    (tf32tf32's CPU emulation declares 256 MiB of chunks whatever the block)."""
    n = 16
    rng = np.random.default_rng(d)
    st = StateVector(n, dtype=dtype, device="cpu", data=random_state(n, rng, dtype), workspace_bytes=limit)
    qs = [int(q) for q in rng.choice(n, d, replace=False)]
    u = haar_unitary(1 << d, rng)
    for _ in range(2):  # the workspace has its size after the first round: measure the second
        work = st._phys.work.nbytes if st._phys.work is not None else 0
        tracemalloc.start()
        info = st.apply(u, qs, method=method)
        st.data()  # and reading it in logical order (in place)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        qs = list(reversed(qs))
    assert st._phys.work is None or st._phys.work.nbytes <= limit
    # new allocations beside the kept workspace: 64 KiB for reports and index tables, and the
    # gate matrix's forms (reordered, cast, transposed: a few copies of 2^d x 2^d, not state-sized)
    assert work + peak <= limit + (64 << 10) + 4 * u.nbytes, (info.path, work, peak)


def test_default_workspace():
    assert memory.default_workspace_bytes(31, np.complex64) == (16 << 30) // 16
    assert memory.default_workspace_bytes(36, np.complex128) == 4 << 30
    assert memory.default_workspace_bytes(10, np.complex128) == 1 << 20
    assert StateVector(12, device="cpu").workspace_bytes == 1 << 20
    assert StateVector(12, device="cpu", workspace_bytes=5000).workspace_bytes == 5000


@pytest.mark.parametrize("value,err,match", [
    (1.5, TypeError, "workspace_bytes must be an int"),
    (True, TypeError, "workspace_bytes must be an int"),
    (100, ValueError, "workspace_bytes must be at least 4096 bytes, got 100"),
])
def test_workspace_bytes_checked(value, err, match):
    with pytest.raises(err, match=match):
        StateVector(4, device="cpu", workspace_bytes=value)


def test_workspace_too_small_for_one_block_names_the_option():
    st = StateVector(12, device="cpu", workspace_bytes=4096)
    with pytest.raises(InsufficientMemoryError, match="through workspace_bytes=4,096.*raise workspace_bytes"):
        st.apply(haar_unitary(1 << 10, np.random.default_rng(0)), list(range(10)))
    assert st.is_valid


# --- the memory check ------------------------------------------------------------------------

def test_memory_message_names_the_largest_state_that_fits(monkeypatch):
    avail = (1 << 30) + (1 << 28)  # 1.25 GiB
    monkeypatch.setattr(memory, "available_bytes", lambda device: avail)
    with pytest.raises(InsufficientMemoryError, match=r"a 27-qubit complex128 state needs 2,147,483,648 bytes .*"
                                                      r"at most 26 qubits fit with complex128 on the cpu"):
        StateVector(27, device="cpu")
    dev = gemm.resolve_device("cpu")
    native = gemm.get_method("native")
    # 26 qubits complex128: 1 GiB + 64 MiB of workspace fits; double buffer needs 2 GiB
    memory.check_state_fits("x", 26, np.complex128, dev, native, 4)
    with pytest.raises(InsufficientMemoryError, match=r"at most 25 qubits fit with 'native' \(complex128\)"):
        memory.check_state_fits("x", 26, np.complex128, dev, native, 4, double_buffer=True)
    with pytest.raises(InsufficientMemoryError, match=r"at most 27 qubits fit with 'native32' \(complex64\)"):
        memory.check_state_fits("x", 28, np.complex64, dev, gemm.get_method("native32"), 4)


def test_gate_extra_bytes_is_bounded():
    native = gemm.get_method("native")
    for d in (2, 6, 10):
        extra = memory.gate_extra_bytes(native, 31, d, np.complex64, {}, device="cpu")
        assert extra <= 1 << 30
        extra = memory.gate_extra_bytes(native, 32, d, np.complex128, {}, device="gpu")
        assert extra <= 4 << 30
    old = memory.gate_extra_bytes(native, 20, 4, np.complex128, {}, device="cpu", double_buffer=True)
    assert old >= memory.state_bytes(20, np.complex128)


# --- failures half-way --------------------------------------------------------------------------

def _failing_matmul(monkeypatch, k):
    """gemm.matmul raising on its k-th call (1-based)."""
    real = gemm.matmul
    calls = {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == k:
            raise RuntimeError(f"injected failure in block {k}")
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm, "matmul", failing)
    return calls


@pytest.mark.parametrize("qubits", [[0, 1], [10, 11], [1, 5]])
def test_failure_in_the_first_block_leaves_the_state_valid(monkeypatch, qubits):
    rng = np.random.default_rng(1)
    st = StateVector(12, device="cpu", data=random_state(12, rng), workspace_bytes=1 << 13)
    before = st.to_numpy()
    _failing_matmul(monkeypatch, 1)
    with pytest.raises(RuntimeError, match="injected failure in block 1"):
        st.apply(haar_unitary(4, rng), qubits)
    assert st.is_valid
    assert np.array_equal(st.to_numpy(), before)  # swapped bits, if any, are in the layout


@pytest.mark.parametrize("qubits", [[0, 1], [10, 11], [1, 5], [4, 5]])
def test_failure_after_a_block_was_written_invalidates_the_state(monkeypatch, qubits):
    rng = np.random.default_rng(2)
    st = StateVector(12, device="cpu", data=random_state(12, rng), workspace_bytes=1 << 13)
    _failing_matmul(monkeypatch, 3)
    with pytest.raises(StateInvalidError, match=r"the 2-qubit gate on qubits \[.*\] with 'native' failed after 2 "
                                                r"block\(s\).*injected failure in block 3.*no longer valid") as exc:
        st.apply(haar_unitary(4, rng), qubits)
    assert isinstance(exc.value.__cause__, RuntimeError)
    assert not st.is_valid
    monkeypatch.undo()
    for use in (st.to_numpy, st.norm, lambda: st.amplitude(0), lambda: st.sample(1), st.copy, st.probabilities,
                lambda: st.apply(np.eye(2), [0]), lambda: st.apply_global_phase(0.1)):
        with pytest.raises(StateInvalidError, match=r"no longer valid .*reset\(\) it"):
            use()
    st.reset()
    assert st.is_valid and st.amplitude(0) == 1 and st.norm() == 1
    st.apply(haar_unitary(4, rng), qubits)


def test_failure_inside_a_swap_invalidates_the_state(monkeypatch):
    import qsim_tc.engine.swap as swap_mod

    rng = np.random.default_rng(3)
    st = StateVector(12, device="cpu", data=random_state(12, rng), workspace_bytes=1 << 13)
    real = swap_mod._swap_chunk
    calls = {"n": 0}

    def failing(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("injected in a swap chunk")
        return real(*args)

    monkeypatch.setattr(swap_mod, "_swap_chunk", failing)
    with pytest.raises(StateInvalidError, match=r"failed while swapping index bits .*injected in a swap chunk"):
        st.apply(haar_unitary(4, rng), [1, 6])
    assert not st.is_valid


def test_failure_before_the_swap_moves_anything_leaves_the_state(monkeypatch):
    import qsim_tc.engine.swap as swap_mod

    rng = np.random.default_rng(4)
    st = StateVector(12, device="cpu", data=random_state(12, rng), workspace_bytes=1 << 13)
    before = st.to_numpy()
    monkeypatch.setattr(swap_mod, "_swap_cpu", lambda *a, **k: (_ for _ in ()).throw(MemoryError("no temporaries")))
    with pytest.raises(MemoryError, match="no temporaries"):
        st.apply(haar_unitary(4, rng), [1, 6])
    assert st.is_valid and np.array_equal(st.to_numpy(), before)


def test_swap_interrupted_is_raised_after_movement(monkeypatch):
    import qsim_tc.engine.swap as swap_mod

    monkeypatch.setattr(swap_mod, "_swap_chunk", lambda *a: (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(SwapInterrupted, match="began to move"):
        swap_bits(np.zeros(1 << 10, complex), 10, [(0, 9)], np, chunk_elements=16)


def test_double_buffer_engine_still_restores_on_failure(monkeypatch):
    rng = np.random.default_rng(5)
    st = StateVector(10, device="cpu", data=random_state(10, rng), double_buffer=True)
    st.apply(np.eye(4), [0, 1])
    before = st.to_numpy()
    _failing_matmul(monkeypatch, 1)
    with pytest.raises(RuntimeError, match="injected"):
        st.apply(haar_unitary(4, rng), [0, 5])
    assert st.is_valid and np.array_equal(st.to_numpy(), before)


def test_auto_leaves_out_methods_whose_smallest_block_exceeds_the_workspace_asked_for():
    """backend="auto" with a small workspace_bytes: a method that cannot run within it is excluded
    before the run (named, with the reason), and the run goes on with one that fits."""
    from circuits import brickwork
    from qsim_tc import Simulator

    res = Simulator(device="cpu", workspace_bytes=16384, plan=None).run(brickwork(9, 3, 4, seed=1))
    auto = res.metadata["auto"]
    assert set(auto["blocks_per_method"]) == {"native"}
    assert "int8-auto" in auto["excluded"] and "does not fit the workspace" in auto["excluded"]["int8-auto"]
    want = Simulator("native", device="cpu", plan=None).run(brickwork(9, 3, 4, seed=1)).state.to_numpy()
    assert np.allclose(res.state.to_numpy(), want, atol=1e-12)
