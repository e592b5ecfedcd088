"""The GPU exchange's logic (NCCL groups, pack / link / copy streams, slots) without a GPU: the
thread ranks of test_distributed_ranks hold numpy "device" arrays through a stand-in for cupy and
for its NCCL binding that moves bytes at the arrays' addresses and checks each stream's events.
The offsets, counts, peers and buffer reuse of :class:`NcclExchange` are then the same code that
runs on GPUs; the order it gives the streams is checked, not raced."""

import ctypes
import queue
import sys
import threading
import types

import numpy as np
import pytest
from test_distributed_ranks import TIMEOUT, on_ranks, random_swaps

from qsim_tc.distributed import exchange
from qsim_tc.distributed.exchange import part_rounds
from qsim_tc.distributed.state import DistributedState


class _Event:
    def __init__(self, stream, index):
        self.stream, self.index = stream, index


class _Stream:
    """Records how far each stream has come: an event is a stream's work count when recorded."""

    ptr = 0

    def __init__(self, non_blocking=False):
        self.work = 0
        self.waits = []

    def record(self):
        return _Event(self, self.work)

    def wait_event(self, event):
        assert isinstance(event, _Event)
        self.waits.append(event)

    def synchronize(self):
        pass

    def __enter__(self):
        self.work += 1
        return self

    def __exit__(self, *exc):
        return False


class _Comm:
    """One rank's NCCL communicator: sends and receives of a group happen at groupEnd."""

    def __init__(self, nccl, size, uid, rank):
        self.nccl, self.mail, self.rank = nccl, uid, rank

    def send(self, ptr, count, dtype, peer, stream):
        assert dtype == _Nccl.NCCL_FLOAT64
        self.nccl.pending().append(("send", self, ptr, count, peer))

    def recv(self, ptr, count, dtype, peer, stream):
        assert dtype == _Nccl.NCCL_FLOAT64
        self.nccl.pending().append(("recv", self, ptr, count, peer))


class _Nccl(types.ModuleType):
    NCCL_FLOAT64 = 7

    def __init__(self):
        super().__init__("cupy.cuda.nccl")
        self.local = threading.local()
        self.groups = 0

    def pending(self):
        if not hasattr(self.local, "ops"):
            self.local.ops = None
        assert self.local.ops is not None, "NCCL send / recv outside a group"
        return self.local.ops

    def get_unique_id(self):
        return {(a, b): queue.Queue() for a in range(16) for b in range(16)}

    def NcclCommunicator(self, size, uid, rank):  # noqa: N802 - cupy's name
        return _Comm(self, size, uid, rank)

    def groupStart(self):  # noqa: N802
        assert getattr(self.local, "ops", None) is None, "nested group"
        self.local.ops = []

    def groupEnd(self):  # noqa: N802
        ops, self.local.ops = self.local.ops, None
        self.groups += 1
        for kind, comm, ptr, count, peer in ops:
            if kind == "send":
                comm.mail[(comm.rank, peer)].put(ctypes.string_at(ptr, count * 8))
        for kind, comm, ptr, count, peer in ops:
            if kind == "recv":
                data = comm.mail[(peer, comm.rank)].get(timeout=TIMEOUT)
                assert len(data) == count * 8
                ctypes.memmove(ptr, data, len(data))


@pytest.fixture
def fake_gpu(monkeypatch):
    """cupy and cupy.cuda.nccl stand-ins (numpy arrays; addresses for NCCL's pointers)."""
    nccl = _Nccl()
    current = _Stream()
    cuda = types.ModuleType("cupy.cuda")
    cuda.Stream = _Stream
    cuda.get_current_stream = lambda: current
    cuda.Device = lambda *a: types.SimpleNamespace(id=0, use=lambda: None)
    cuda.nccl = nccl
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    cupy.empty, cupy.zeros, cupy.copyto = np.empty, np.zeros, np.copyto
    cupy.ascontiguousarray, cupy.arange, cupy.conj = np.ascontiguousarray, np.arange, np.conj
    cupy.int64, cupy.float64, cupy.complex128, cupy.sum = np.int64, np.float64, np.complex128, np.sum
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    monkeypatch.setattr(exchange, "device_ptr", lambda a: a.ctypes.data)
    monkeypatch.setattr(exchange, "_NCCL_COMMS", {})
    return nccl


@pytest.mark.parametrize(("size", "piece_bytes", "dtype"), [(2, 48, np.complex128), (4, 16, np.complex128),
                                                       (8, 64, np.complex128), (8, 1 << 20, np.complex128),
                                                       (4, 24, np.complex64)])
def test_nccl_swaps_and_all_to_all_equal_the_cpu_swaps(fake_gpu, size, piece_bytes, dtype):
    """Single swaps (contiguous and packed halves) and all-to-alls of k = 2..g bits through the
    NCCL exchanger leave every slice as the CPU's pairwise swaps do and send what theory says:
    half a slice a swap, (2^k - 1)/2^k of it an all-to-all, one NCCL group a round; complex64
    amplitudes go as one float64 word each."""
    n = 7
    g = size.bit_length() - 1
    big_l = n - g
    rng = np.random.default_rng(size)
    full = (rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)).astype(dtype)
    cases = [[(0, big_l)], [(big_l - 1, n - 1)]]  # bit 0: packed pieces; the top local bit: contiguous
    if g >= 2:  # the top local bits: every part's pieces contiguous, sent unpacked
        cases.append([(big_l - 1 - j, big_l + j) for j in range(g)])
    for k in range(2, g + 1):
        cases.append(random_swaps(rng, k, big_l, n))

    def body(comm):
        r = comm.Get_rank()
        out = []
        for pairs in cases:
            cpu = DistributedState(comm, n, data=full[r << big_l:(r + 1) << big_l].copy(), piece_bytes=piece_bytes)
            gpu = DistributedState(comm, n, data=cpu.data.copy(), device="gpu", piece_bytes=piece_bytes)
            for p, gb in pairs:
                cpu.swap(p, gb)
            gpu.swap_many(pairs)
            streams = gpu._exchange._streams
            out.append((np.array_equal(cpu.data, gpu.data), cpu.phys == gpu.phys, gpu.bytes_sent, gpu.exchanges,
                        [len(s.waits) for s in streams], streams[0].work))
        return out

    per_rank = on_ranks(size, body)
    slice_bytes = (1 << big_l) * np.dtype(dtype).itemsize
    for r in range(size):
        for pairs, (same, phys, sent, exchanges, waits, packed) in zip(cases, per_rank[r]):
            k = len(pairs)
            assert same and phys, pairs
            assert sent == slice_bytes - slice_bytes // (1 << k) and exchanges == 1
            assert all(w >= 1 for w in waits)  # every stream waited for the state (the caller's event)
            if sorted(p for p, _ in pairs) == list(range(big_l - k, big_l)):
                assert packed == 0, pairs  # contiguous pieces go as they are
            if pairs == [(0, big_l)] and piece_bytes >= 2 * np.dtype(dtype).itemsize:
                assert packed > 0, pairs  # every other amplitude: packed first


def test_packing_runs_on_its_own_stream_ahead_of_the_copy_back(fake_gpu):
    """An all-to-all of many rounds: the pack stream does each round's packing and waits only for
    the link (a slot's send buffer free), never for the copy-back; the link waits for the copy
    stream only to reuse a receive buffer, two rounds on."""
    n, size = 8, 4
    big_l = n - 2

    def body(comm):
        st = DistributedState(comm, n, device="gpu", piece_bytes=16 * 6)  # two amplitudes a peer a round
        st.swap_many([(0, big_l), (3, big_l + 1)])
        return st._exchange._streams

    pack_s, link, copy = on_ranks(size, body)[0]
    rounds = (1 << (big_l - 2)) // 2
    assert pack_s.work == rounds and copy.work == rounds
    assert {e.stream for e in pack_s.waits[1:]} == {link}  # after the start event: sent buffers only
    assert {e.stream for e in link.waits[1:]} == {pack_s, copy}
    assert sum(e.stream is copy for e in link.waits) == rounds - 2  # receive slots reused after two rounds


@pytest.mark.parametrize(("n_bits", "swapped", "piece"), [(6, [0, 3], 8), (6, [5, 1], 1), (7, [2, 4, 6], 1 << 10),
                                                          (5, [0, 1, 2, 3, 4], 4)])
def test_part_rounds_cover_each_part_once_within_the_bound(n_bits, swapped, piece):
    data = np.arange(1 << n_bits)
    members = list(range(1, 1 << len(swapped)))
    seen = {u: [] for u in members}
    for views in part_rounds(data, n_bits, swapped, members, piece):
        assert len(views) == len(members) and len({v.shape for v in views}) == 1
        assert views[0].size * len(members) <= max(piece, len(members))
        for u, v in zip(members, views):
            assert np.shares_memory(v, data)  # views, not copies
            seen[u].extend(v.reshape(-1).tolist())
    for u in members:
        want = [i for i in range(1 << n_bits) if sum(((i >> b) & 1) << j for j, b in enumerate(swapped)) == u]
        assert seen[u] == want  # in increasing order: element bit j is the j-th lowest free bit


def test_pauli_trade_of_a_strided_slice_sends_its_amplitudes(fake_gpu, monkeypatch):
    """An X on a global qubit trades slices chunk by chunk (``receive``); a slice given as a
    strided view sends its own amplitudes, not the bytes at its first address onward."""
    from qsim_tc.distributed import state as dstate

    monkeypatch.setattr(dstate, "READ_CHUNK", 4)
    n, size = 5, 2
    big_l = n - 1
    rng = np.random.default_rng(5)
    full = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    full /= np.linalg.norm(full)
    labels = ["X" + "I" * (n - 1), "Y" + "Z" * (n - 2) + "X", "XXIIY"]

    def body(comm):
        r = comm.Get_rank()
        mine = full[r << big_l:(r + 1) << big_l]
        strided = np.zeros(2 << big_l, dtype=np.complex128)
        strided[::2] = mine
        values = []
        for data in (mine.copy(), strided[::2]):
            values.append(DistributedState(comm, n, data=data, device="gpu").expectation_values(labels))
        return values

    from qiskit.quantum_info import SparsePauliOp, Statevector

    want = [Statevector(full).expectation_value(SparsePauliOp(lb)) for lb in labels]
    for contiguous, strided in on_ranks(size, body):
        np.testing.assert_allclose(contiguous, want, atol=1e-12)
        np.testing.assert_allclose(strided, want, atol=1e-12)
