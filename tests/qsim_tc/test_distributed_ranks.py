"""The distributed state over 8 and 16 ranks without MPI: each rank is a thread holding an
in-process communicator, so global bits 2 and up (rank bit j >= 2, partners ``rank ^ 4``,
``rank ^ 8``) are exercised by the CPU suite whether or not ``mpiexec`` is installed."""

import queue
import threading

import numpy as np
import pytest

from circuits import Circuit, Gate
from qsim_tc import Simulator
from qsim_tc.distributed import state as dstate
from qsim_tc.distributed.run import run_distributed
from qsim_tc.distributed.selfcheck import random_circuit
from qsim_tc.distributed.state import DistributedState

TIMEOUT = 20  # seconds a rank waits for the others before the test fails (never a hang)


class _World:
    def __init__(self, size: int):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=TIMEOUT)
        self.slots = [None] * size
        self.mail = {(a, b): queue.Queue() for a in range(size) for b in range(size)}


class ThreadComm:
    """The part of an mpi4py communicator the distributed CPU state uses, between threads."""

    def __init__(self, world: _World, rank: int):
        self.world, self.rank = world, rank

    def Get_size(self):  # noqa: N802 - mpi4py's names
        return self.world.size

    def Get_rank(self):  # noqa: N802
        return self.rank

    def Barrier(self):  # noqa: N802
        self.world.barrier.wait()

    def allgather(self, value):
        w = self.world
        w.barrier.wait()
        w.slots[self.rank] = value
        w.barrier.wait()
        out = list(w.slots)
        w.barrier.wait()
        return out

    def allreduce(self, value, op=None):
        values = self.allgather(value)
        return max(values) if op == "max" else sum(values[1:], values[0])

    def bcast(self, value, root=0):
        return self.allgather(value)[root]

    def gather(self, value, root=0):
        values = self.allgather(value)
        return values if self.rank == root else None

    def Sendrecv_replace(self, buf, dest, sendtag, source, recvtag):  # noqa: N802
        self.world.mail[(self.rank, dest)].put(np.array(buf, copy=True))
        buf[...] = self.world.mail[(source, self.rank)].get(timeout=TIMEOUT)

    def Sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag):  # noqa: N802
        self.world.mail[(self.rank, dest)].put(np.array(sendbuf, copy=True))
        recvbuf[...] = self.world.mail[(source, self.rank)].get(timeout=TIMEOUT)

    def Alltoallv(self, send, recv):  # noqa: N802 - mpi4py's [buffer, (counts, displacements)] specs
        (sbuf, (scounts, sdispls)), (rbuf, (rcounts, rdispls)) = send, recv
        for dest, (c, d) in enumerate(zip(scounts, sdispls)):
            self.world.mail[(self.rank, dest)].put(np.array(sbuf[d:d + c], copy=True))
        for source, (c, d) in enumerate(zip(rcounts, rdispls)):
            got = self.world.mail[(source, self.rank)].get(timeout=TIMEOUT)
            assert got.size == c, f"rank {self.rank} expected {c} amplitudes from {source}, got {got.size}"
            rbuf[d:d + c] = got

    def Abort(self, code):  # noqa: N802 - returns: the exception goes on to on_ranks, which reports it
        pass

    def py2f(self):  # one handle a rank (NCCL communicators are cached by it)
        return id(self.world) * 64 + self.rank


def on_ranks(size: int, fn):
    """``fn(comm)`` on ``size`` thread ranks; the list of their results (the first error raised)."""
    world = _World(size)
    results, errors = [None] * size, []

    def body(rank):
        try:
            results[rank] = fn(ThreadComm(world, rank))
        except BaseException as exc:  # noqa: BLE001 - reported below; the others must not wait
            errors.append(exc)
            world.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * TIMEOUT)
    if errors:
        raise errors[0]
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return results


class _Solo:
    """A communicator of ``size`` ranks seen from one rank, for the layout arithmetic alone."""

    def __init__(self, size, rank):
        self.size, self.rank = size, rank

    def Get_size(self):  # noqa: N802
        return self.size

    def Get_rank(self):  # noqa: N802
        return self.rank


@pytest.mark.parametrize("size", [8, 16])
def test_rank_bits_and_owners_follow_every_global_bit(size):
    n = 7
    g = size.bit_length() - 1
    big_l = n - g
    for rank in range(size):
        st = DistributedState(_Solo(size, rank), n)
        assert (st.n_global, st.local_qubits) == (g, big_l)
        assert [st.rank_bit(big_l + j) for j in range(g)] == [(rank >> j) & 1 for j in range(g)]
        # only rank 0 holds |0...0>
        assert st.data[0] == (1.0 if rank == 0 else 0.0)
    st = DistributedState(_Solo(size, 0), n)
    rng = np.random.default_rng(1)
    st.phys = [int(q) for q in rng.permutation(n)]
    for index in rng.integers(0, 1 << n, 40):
        index = int(index)
        phys = sum(((index >> q) & 1) << p for p, q in enumerate(st.phys))
        assert st._owner_and_offset(index) == (phys >> big_l, phys & ((1 << big_l) - 1))


@pytest.mark.parametrize("size", [8, 16])
def test_each_swap_trades_with_the_partner_of_that_global_bit(size):
    """Every (local, global) bit pair: the amplitudes land where the swapped layout says."""
    n = 6
    g = size.bit_length() - 1
    big_l = n - g
    full = np.arange(1 << n, dtype=np.complex128) + 1j  # amplitude = its physical index

    def body(comm):
        r = comm.Get_rank()
        out = []
        for p in range(big_l):
            for gb in range(big_l, n):
                st = DistributedState(comm, n, data=full[r << big_l:(r + 1) << big_l].copy(), piece_bytes=16)
                st.swap(p, gb)
                out.append((p, gb, st.phys[:], st.data.copy(), st.bytes_sent))
        return out

    per_rank = on_ranks(size, body)
    for k, (p, gb, phys, _, sent) in enumerate(per_rank[0]):
        assert phys[p] == gb and phys[gb] == p
        assert sent == (1 << (big_l - 1)) * 16  # half a slice, in 16-byte pieces
        whole = np.concatenate([per_rank[r][k][3] for r in range(size)])
        # position i now holds the amplitude whose physical bits p and gb are i's exchanged
        i = np.arange(1 << n)
        src = i & ~((1 << p) | (1 << gb)) | (((i >> gb) & 1) << p) | (((i >> p) & 1) << gb)
        np.testing.assert_array_equal(whole, full[src])


@pytest.mark.parametrize("exchange_plan", ["fewest", "stages"])
@pytest.mark.parametrize(("size", "n", "seed"), [(8, 6, 0), (8, 7, 1), (16, 7, 2)])
def test_circuits_on_8_and_16_ranks_equal_the_single_process_run(size, n, seed, exchange_plan, monkeypatch):
    monkeypatch.setattr(dstate, "READ_CHUNK", 2)  # readouts and Pauli trades in many chunks
    c = random_circuit(n, 40, seed)
    # controlled, diagonal and dense gates whose controls / bits sit on the top (global) qubits
    cz = np.diag([1, 1, 1, -1]).astype(complex)
    c.append(Gate(cz, (n - 1, n - 3), "cz"))
    c.append(Gate(np.diag(np.exp(1j * np.arange(8))), (n - 1, n - 2, n - 3), "diag"))
    ref_state = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state
    ref = ref_state.to_numpy()
    top = [n - 1, n - 2, n - 3, n - 4]  # qubits that end on global bits >= 2 where not swapped in
    labels = ["XXXX" + "I" * (n - 4), "YZXY" + "Z" * (n - 4), "I" * (n - 4) + "XYXZ", "ZZZZ" + "X" * (n - 4)]

    def body(comm):
        st = run_distributed(c, comm, backend="native", device="cpu", plan=None, fuse=None,
                             exchange_plan=exchange_plan)
        i = int(np.argmax(np.abs(ref)))
        return (st.gather(root=0), st.amplitude(i), st.probabilities(top), st.norm(),
                [st.expectation_value(lb) for lb in labels], st.sample(2000, seed=seed), list(st.phys))

    per_rank = on_ranks(size, body)
    full, amp, marg, norm, ev, draws, phys = per_rank[0]
    if exchange_plan == "stages":  # (the identity start leaves one of them there)
        assert any(p >= n - (size.bit_length() - 1) + 2 for p in map(phys.index, top)), "no qubit on bit >= 2"
    np.testing.assert_allclose(full, ref, atol=1e-13)
    i = int(np.argmax(np.abs(ref)))
    assert abs(amp - ref[i]) < 1e-13 and abs(norm - 1.0) < 1e-13
    want = np.bincount(sum(((np.arange(1 << n) >> q) & 1) << k for k, q in enumerate(top)),
                       weights=np.abs(ref) ** 2, minlength=16)
    np.testing.assert_allclose(marg, want, atol=1e-13)
    for lb, v in zip(labels, ev):
        assert abs(v - ref_state.expectation_value(lb)) < 1e-12, lb
    for r in range(1, size):  # every rank reads the same
        assert per_rank[r][1] == amp and np.array_equal(per_rank[r][5], draws)
        np.testing.assert_allclose(per_rank[r][2], marg, atol=1e-15)
    idx = sum(((draws >> q) & 1) << k for k, q in enumerate(top))
    freq = np.bincount(idx, minlength=16) / draws.size
    assert np.all(np.abs(freq - want) <= 5 * np.sqrt(want * (1 - want) / draws.size) + 2e-3)


def test_a_global_control_on_a_high_bit_enables_the_gate_on_its_ranks_only():
    """X on qubit 0 controlled by qubit 5 (rank bit 2 of 8 ranks): only ranks 4-7 apply it."""
    n = 6
    c = Circuit(n)
    h = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
    c.append(Gate(h, (5,), "h"))
    cx = np.eye(4, dtype=complex)
    cx[np.ix_([1, 3], [1, 3])] = [[0, 1], [1, 0]]
    c.append(Gate(cx, (5, 0), "cx"))  # control first: bit 0 of the gate's index is qubit 5
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state.to_numpy()
    assert abs(ref[0]) > 0.7 and abs(ref[(1 << 5) | 1]) > 0.7

    full = on_ranks(8, lambda comm: run_distributed(c, comm, backend="native", plan=None,
                                                    fuse=None).gather(root=0))[0]
    np.testing.assert_allclose(full, ref, atol=1e-15)


def random_swaps(rng, k: int, big_l: int, n: int) -> list[tuple[int, int]]:
    """k distinct local bits paired with k distinct global bits, drawn at random."""
    ps = [int(p) for p in rng.choice(big_l, k, replace=False)]
    gs = [int(q) for q in rng.choice(np.arange(big_l, n), k, replace=False)]
    return list(zip(ps, gs))


@pytest.mark.parametrize("size", [4, 8, 16])
def test_swap_many_equals_the_swaps_one_by_one(size):
    """k local bits exchanged with k global bits at once (every part straight to its member) leave
    the slices bit for bit as k pairwise swaps do, and send (2^k - 1)/2^k of a slice."""
    n = 7
    g = size.bit_length() - 1
    big_l = n - g
    rng = np.random.default_rng(size)
    full = (rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)).astype(np.complex128)
    cases = []
    for k in range(2, min(g, big_l) + 1):
        for _ in range(3):
            cases.append(random_swaps(rng, k, big_l, n))

    def body(comm):
        r = comm.Get_rank()
        out = []
        for pairs in cases:
            one = DistributedState(comm, n, data=full[r << big_l:(r + 1) << big_l].copy(), piece_bytes=48)
            many = DistributedState(comm, n, data=one.data.copy(), piece_bytes=48)
            for p, gb in pairs:
                one.swap(p, gb)
            many.swap_many(pairs)
            out.append((np.array_equal(one.data, many.data), one.phys == many.phys, many.bytes_sent, many.swaps))
        return out

    per_rank = on_ranks(size, body)
    slice_bytes = (1 << big_l) * 16
    for r in range(size):
        for pairs, (same, phys, sent, swaps) in zip(cases, per_rank[r]):
            k = len(pairs)
            assert same and phys, pairs
            assert sent == slice_bytes - slice_bytes // (1 << k) and swaps == k


def test_swap_many_names_its_bad_bits():
    st = DistributedState(_Solo(4, 0), 5)
    for pairs, match in [([(0, 1)], "local bits"), ([(0, 3), (0, 4)], "twice"), ([(0, 3), (1, 3)], "twice")]:
        with pytest.raises(ValueError, match=match):
            st.swap_many(pairs)


@pytest.mark.parametrize(("size", "n", "seed"), [(2, 8, 4), (4, 9, 3), (8, 7, 1)])
def test_stages_swapping_several_global_bits_at_once_equal_one_process(size, n, seed, monkeypatch):
    """Random circuits of every gate kind on 2, 4 and 8 ranks: a stage's global swaps go at once
    (swap_many with k >= 2 where the ranks allow) and the state equals one process's to 1e-13."""
    ks = []
    swap_many = DistributedState.swap_many

    def spy(self, pairs):
        ks.append(len(pairs))
        return swap_many(self, pairs)

    monkeypatch.setattr(DistributedState, "swap_many", spy)
    c = random_circuit(n, 60, seed)
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state.to_numpy()
    per_rank = on_ranks(size, lambda comm: run_distributed(c, comm, backend="native", device="cpu", plan=None,
                                                           fuse=None).gather(root=0))
    np.testing.assert_allclose(per_rank[0], ref, atol=1e-13)
    assert max(ks) <= size.bit_length() - 1 and (size == 2 or max(ks) >= 2), ks


@pytest.mark.parametrize("size", [4, 8])
def test_many_terms_cost_one_pass_per_x_mask_across_ranks(size, monkeypatch):
    """A 40-term operator on 4 and 8 thread ranks equals one process's value; its terms share X masks, and
    each mask with letters on global qubits trades slices once (not once a term)."""
    from qiskit.quantum_info import SparsePauliOp

    from qsim_tc.distributed.exchange import MpiExchange

    n = 7
    c = random_circuit(n, 40, 5)
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state
    rng = np.random.default_rng(size)
    xs = ["".join(rng.choice(list("IX"), n)) for _ in range(5)]
    labels = []
    for k in range(40):  # eight Z patterns on each of five X patterns (X + Z = Y)
        x = xs[k % 5]
        z = "".join(rng.choice(list("IZ"), n))
        labels.append("".join({("I", "I"): "I", ("X", "I"): "X", ("I", "Z"): "Z", ("X", "Z"): "Y"}[(a, b)]
                              for a, b in zip(x, z)))
    op = SparsePauliOp(labels, coeffs=rng.standard_normal(40) + 1j * rng.standard_normal(40))
    trades = []
    receive = MpiExchange.receive

    def counted(self, send, partner):
        trades.append(partner)
        return receive(self, send, partner)

    monkeypatch.setattr(MpiExchange, "receive", counted)
    monkeypatch.setattr(dstate, "READ_CHUNK", 4)

    def body(comm):  # (only the expectation value trades through receive: the run swaps by trade)
        st = run_distributed(c, comm, backend="native", device="cpu", plan=None, fuse=None)
        return st.expectation_value(op), list(st.phys)

    per_rank = on_ranks(size, body)
    want = ref.expectation_value(op)
    value, phys = per_rank[0]
    assert abs(value - want) < 1e-12 and all(abs(r[0] - value) < 1e-15 for r in per_rank)
    big_l = n - (size.bit_length() - 1)
    global_masks = {x for x in xs if any(a == "X" and phys.index(n - 1 - i) >= big_l for i, a in enumerate(x))}
    assert global_masks, "no X on a global qubit"
    assert len(trades) == size * ((1 << big_l) // 4) * len(global_masks)  # every rank, every chunk, once a mask


def test_an_all_to_all_after_a_packed_swap_reuses_the_exchange_buffers():
    """One state: a packed pairwise swap (its piece buffer made), a readout trade (its receive
    buffer), then all-to-alls of two and three bits, larger and smaller: equal to swaps one by one."""
    n, size = 8, 8
    big_l = n - 3
    rng = np.random.default_rng(3)
    full = (rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)).astype(np.complex128)
    steps = [[(0, big_l)], [(1, big_l + 1), (3, big_l + 2)], [(0, big_l), (2, big_l + 1), (4, big_l + 2)],
             [(4, big_l + 2), (1, big_l)]]

    def body(comm):
        r = comm.Get_rank()
        one = DistributedState(comm, n, data=full[r << big_l:(r + 1) << big_l].copy(), piece_bytes=64)
        many = DistributedState(comm, n, data=one.data.copy(), piece_bytes=64)
        many._exchanger().receive(many.data[:1], r ^ 1)
        for pairs in steps:
            for p, gb in pairs:
                one.swap(p, gb)
            many.swap_many(pairs)
        return np.array_equal(one.data, many.data) and one.phys == many.phys

    assert all(on_ranks(size, body))


def test_a_slice_of_the_wrong_size_is_refused_and_a_strided_one_is_exchanged_in_place():
    """``data`` of another size than 2^L (or not 1-D) is refused when the state is made, naming
    ``data`` (it was taken, and the exchanges then traded parts cut from the wrong size); a
    strided view (every other amplitude of a buffer) is exchanged in place like a contiguous
    copy (its reshaped views are views, not copies)."""
    n, size = 5, 4
    big_l = n - 2
    full = np.arange(1 << n, dtype=np.complex128) + 1j

    def body(comm):
        r = comm.Get_rank()
        out = []
        for pairs in ([(0, big_l)], [(0, big_l), (2, big_l + 1)]):
            mine = full[r << big_l:(r + 1) << big_l]
            strided = np.zeros(2 << big_l, dtype=np.complex128)
            strided[::2] = mine
            a = DistributedState(comm, n, data=mine.copy(), piece_bytes=32)
            b = DistributedState(comm, n, data=strided[::2], piece_bytes=32)
            a.swap_many(pairs)
            b.swap_many(pairs)
            out.append(np.array_equal(a.data, b.data) and not np.array_equal(a.data, mine))
        return out

    assert all(all(r) for r in on_ranks(size, body))
    for bad in (np.zeros(4, dtype=np.complex128), np.zeros((2, 4), dtype=np.complex128)):
        with pytest.raises(ValueError, match=r"data must be a 1-D array of 2\^3 = 8 amplitudes"):
            DistributedState(_Solo(size, 0), n, data=bad)


def test_dtype_sets_autos_precision_and_a_backend_of_another_precision_is_named():
    """``dtype=complex64`` runs ``backend="auto"`` in single precision (it had run a complex128
    Simulator on the complex64 slices and failed naming initial_state); a named backend of the
    other precision is refused naming dtype."""
    c = random_circuit(7, 30, 3)
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state.to_numpy()
    got = on_ranks(2, lambda comm: run_distributed(c, comm, device="cpu", dtype=np.complex64).gather(root=0))[0]
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, ref, atol=1e-5)
    with pytest.raises(ValueError, match="dtype is complex64, but backend 'native' keeps complex128"):
        on_ranks(2, lambda comm: run_distributed(c, comm, backend="native", device="cpu", dtype=np.complex64))
    with pytest.raises(ValueError, match="dtype must be complex64 or complex128"):
        on_ranks(2, lambda comm: run_distributed(c, comm, device="cpu", dtype=np.float64))
