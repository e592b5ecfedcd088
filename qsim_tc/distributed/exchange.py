"""Trading parts of a slice with other ranks (half with one partner, or an all-to-all), in pieces
of bounded size.

An index-bit swap of local bit p with a global bit sends the half of a slice whose bit p differs
from the rank's global bit, and receives the partner's matching half into the same places. That
half is a 2-D view ``(rows, 2^p)``: rows of 2^p contiguous amplitudes. It goes in pieces of at most
``piece_elements`` amplitudes, so the memory beside the state is two pieces, never half a slice
(a rank holding 64 GiB has no room for a 32 GiB message buffer):

* ``2^p >= piece_elements``: each piece is a contiguous run inside one row, sent as it is;
* else: a piece is a block of whole rows (strided), packed into a buffer before it goes.

Two transports take a piece and a partner and trade the piece's contents:

* :class:`MpiExchange`: host (numpy) slices over MPI (``Sendrecv_replace``: one buffer);
* :class:`NcclExchange`: GPU (cupy) slices over NCCL (cupy's binding; its communicator is
  bootstrapped by broadcasting NCCL's unique id over MPI). NCCL sends and receives in one group
  on a link stream; the receive goes to a buffer (NCCL does not trade in place), copied over the
  piece on a copy stream once the group is done; strided pieces are packed on a third stream.

Several index-bit swaps at once (k local bits with k global bits) are an all-to-all among the 2^k
ranks that differ only in those global bits: a slice splits into 2^k parts by its swapped local
bits, and part u goes to the member whose swapped global bits are u, arriving at the same places
(:func:`part_rounds` cuts the parts into rounds of pieces, one piece a member a round). Both
transports take the rounds through ``all_to_all``: MPI ``Alltoallv`` (each round packed into one
buffer, received into another), NCCL one group of sends and receives a round, packing on its own
stream, pipelined with the transfer and the copy-back.
"""

from __future__ import annotations

import numpy as np

DEFAULT_PIECE_BYTES = {"cpu": 64 << 20, "gpu": 256 << 20}


def half_pieces(half, piece_elements: int):
    """The views of ``half`` (``(rows, run)``) to trade one after another: contiguous runs of at
    most ``piece_elements`` inside a row when rows are that long, else blocks of whole rows."""
    rows, run = half.shape
    if run >= piece_elements:
        for r in range(rows):
            for c in range(0, run, piece_elements):
                yield half[r, c:c + piece_elements]
    else:
        step = max(1, piece_elements // run)
        for r in range(0, rows, step):
            yield half[r:r + step]


def bit_view(data, n_bits: int, fixed: dict[int, int]):
    """A view of the 2^n_bits amplitudes of ``data`` with index bit b fixed to ``fixed[b]`` for
    each b of ``fixed``. Its C order runs over the other bits, lowest fastest: element number
    bit j is the j-th lowest free bit. Runs of free bits are merged into one axis each, so the view
    has at most 2 len(fixed) + 1 axes (a fixed bit keeps an axis of length 1)."""
    shape, index = [], []
    run = 0
    for b in range(n_bits - 1, -1, -1):  # C order: the high bits first
        if b in fixed:
            if run:
                shape.append(1 << run)
                index.append(slice(None))
                run = 0
            shape.append(2)
            index.append(slice(fixed[b], fixed[b] + 1))
        else:
            run += 1
    if run or not shape:
        shape.append(1 << run)
        index.append(slice(None))
    return data.reshape(shape)[tuple(index)]


def part_rounds(data, n_bits: int, swapped: list[int], members: list[int], piece_elements: int):
    """The rounds of an all-to-all over the swapped local bits ``swapped`` of a slice of 2^n_bits
    amplitudes: each round a list of views, one per entry u of ``members`` (the value of the
    swapped bits, bit i of u for ``swapped[i]``), all of one shape, together at most
    ``piece_elements`` amplitudes (one amplitude a member at least). A piece fixes the highest
    free bits to the round number, so every rank cuts the same part the same way: round t of
    member u here pairs with round t of this rank's part at that member."""
    free = [b for b in range(n_bits) if b not in swapped]
    per_member = max(1, piece_elements // max(1, len(members)))
    low = min(len(free), max(0, per_member.bit_length() - 1))  # free bits inside one piece
    top = free[low:]  # the bits a round number fixes
    for t in range(1 << len(top)):
        fixed_top = {b: (t >> j) & 1 for j, b in enumerate(top)}
        yield [bit_view(data, n_bits, {**fixed_top, **{b: (u >> i) & 1 for i, b in enumerate(swapped)}})
               for u in members]


class MpiExchange:
    """Pieces of numpy slices over MPI."""

    device = "cpu"

    def __init__(self, comm, dtype):
        self.comm = comm
        self._buf = self._recv = None

    def trade(self, half, partner: int, piece_elements: int) -> int:
        """Swap the contents of ``half`` with the partner's half at the same places, piece by
        piece (collective over the pair); returns the bytes sent. MPI counts are 32-bit: pieces
        stay far below 2^31 elements."""
        sent = 0
        for piece in half_pieces(half, piece_elements):
            if piece.flags.c_contiguous:
                buf = piece
            else:
                if self._buf is None or self._buf.size < piece.size:
                    self._buf = np.empty(piece.size, dtype=piece.dtype)
                buf = self._buf[:piece.size].reshape(piece.shape)
                np.copyto(buf, piece)
            self.comm.Sendrecv_replace(buf, dest=partner, sendtag=7, source=partner, recvtag=7)
            if buf is not piece:
                piece[...] = buf
            sent += piece.nbytes
        return sent

    def receive(self, send, partner: int):
        """The partner's contiguous block at the same places as ``send`` (this rank's block goes
        to it in the same call; collective over the pair), in a reused buffer."""
        if self._recv is None or self._recv.size < send.size:
            self._recv = np.empty(send.size, dtype=send.dtype)
        recv = self._recv[:send.size]
        self.comm.Sendrecv(np.ascontiguousarray(send), dest=partner, sendtag=8, recvbuf=recv, source=partner,
                           recvtag=8)
        return recv

    def all_to_all(self, rounds, peers: list[int]) -> int:
        """Trade each round's views with ``peers`` (view i with rank ``peers[i]``, which sends the
        view's contents back into the same places): one ``Alltoallv`` a round over the whole
        communicator, zero counts for the ranks outside the group (collective over every rank).
        Returns the bytes sent. Memory: a round's send and receive buffers."""
        size = self.comm.Get_size()
        sent = 0
        for views in rounds:
            piece = views[0].size
            total = piece * len(views)
            # (trade and receive size these buffers for themselves: either may be short or absent)
            if self._buf is None or self._buf.size < total:
                self._buf = None  # (the old one first, so two never coexist)
                self._buf = np.empty(total, dtype=views[0].dtype)
            if self._recv is None or self._recv.size < total:
                self._recv = None
                self._recv = np.empty(total, dtype=views[0].dtype)
            send, recv = self._buf[:total], self._recv[:total]
            counts, displs = [0] * size, [0] * size
            for i, (view, peer) in enumerate(zip(views, peers)):
                np.copyto(send[i * piece:(i + 1) * piece].reshape(view.shape), view)
                counts[peer], displs[peer] = piece, i * piece
            self.comm.Alltoallv([send, (counts, displs)], [recv, (counts, displs)])
            for i, view in enumerate(views):
                np.copyto(view, recv[i * piece:(i + 1) * piece].reshape(view.shape))
            sent += send.nbytes
        return sent

    def close(self) -> None:
        self._buf = self._recv = None


# NCCL communicators by (MPI communicator, GPU): creating one costs about a second, so every
# DistributedState on the same ranks and GPU shares it for the life of the process.
_NCCL_COMMS: dict = {}


class NcclExchange:
    """Pieces of cupy slices over NCCL, between the GPUs of the ranks of an MPI communicator.

    Three streams pipeline the rounds of a trade (a swap's pieces, or an all-to-all's rounds of
    one piece a peer): the pack stream copies round i's strided pieces into a send buffer while
    round i - 1 crosses the link (the link stream: one NCCL group of a send and a receive a peer)
    and round i - 2 is copied from its receive buffer into place (the copy stream). Two slots of
    buffers alternate; events order each buffer's reuse: a send buffer once the link has sent it,
    a receive buffer once the copy-back has read it. A contiguous piece goes as it is (no pack).
    Memory: two rounds to receive into, two to pack.
    """

    device = "gpu"

    def __init__(self, comm, dtype):
        import cupy  # noqa: PLC0415 - GPU only
        from cupy.cuda import nccl  # noqa: PLC0415

        self._cp, self._nccl = cupy, nccl
        key = (comm.py2f(), cupy.cuda.Device().id)
        if key not in _NCCL_COMMS:
            uid = nccl.get_unique_id() if comm.Get_rank() == 0 else None
            uid = comm.bcast(uid, root=0)
            _NCCL_COMMS[key] = nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())
        self.nccl_comm = _NCCL_COMMS[key]
        self._dtype = np.dtype(dtype)
        self._words = self._dtype.itemsize // 8  # sent as float64 words (complex64 is one)
        self._recv = [None, None]
        self._pack = [None, None]
        self._streams = tuple(cupy.cuda.Stream(non_blocking=True) for _ in range(3))  # pack, link, copy

    def _slot(self, bufs, i: int, size: int):
        if bufs[i] is None or bufs[i].size < size:
            bufs[i] = None
            bufs[i] = self._cp.empty(size, dtype=self._dtype)
        return bufs[i][:size]

    def trade(self, half, partner: int, piece_elements: int) -> int:
        """Swap the contents of ``half`` with the partner's half at the same places (both ranks
        call); returns the bytes sent. Ends synchronised with the caller's stream."""
        return self.all_to_all(([piece] for piece in half_pieces(half, piece_elements)), [partner])

    def all_to_all(self, rounds, peers: list[int]) -> int:
        """Trade each round's views with ``peers`` (view i with rank ``peers[i]``, whose view
        comes back into the same places): one NCCL group a round of a send and a receive a peer,
        on the link stream (every rank of the group calls). Returns the bytes sent; the work is
        ordered before the caller's stream's next work."""
        cp, nccl = self._cp, self._nccl
        pack_s, link, copy = self._streams
        caller = cp.cuda.get_current_stream()
        start = caller.record()
        for s in self._streams:  # the state is ready (its last kernel ran on the caller's stream)
            s.wait_event(start)
        sent_ev = [None, None]  # per slot: the link has sent its pack buffer
        done = [None, None]  # per slot: the copy-back has read its receive buffer
        sent = 0
        for r, views in enumerate(rounds):
            k = r % 2
            piece = views[0].size
            recv = self._slot(self._recv, k, piece * len(views))
            sends = list(views)  # a contiguous view is sent as it is, a strided one packed first
            strided = [i for i, view in enumerate(views) if not view.flags.c_contiguous]
            if strided:
                pack = self._slot(self._pack, k, piece * len(strided))
                if sent_ev[k] is not None:
                    pack_s.wait_event(sent_ev[k])
                with pack_s:
                    for j, i in enumerate(strided):
                        sends[i] = pack[j * piece:(j + 1) * piece]
                        cp.copyto(sends[i].reshape(views[i].shape), views[i])
                link.wait_event(pack_s.record())
            if done[k] is not None:
                link.wait_event(done[k])
            count = piece * self._words
            nccl.groupStart()
            for i, peer in enumerate(peers):
                self.nccl_comm.send(device_ptr(sends[i]), count, nccl.NCCL_FLOAT64, peer, link.ptr)
                self.nccl_comm.recv(device_ptr(recv[i * piece:]), count, nccl.NCCL_FLOAT64, peer, link.ptr)
            nccl.groupEnd()
            sent_ev[k] = link.record()
            copy.wait_event(sent_ev[k])
            with copy:
                for i, view in enumerate(views):
                    cp.copyto(view, recv[i * piece:(i + 1) * piece].reshape(view.shape))
            done[k] = copy.record()
            sent += piece * len(views) * self._dtype.itemsize
        caller.wait_event(copy.record())  # (the copy stream's last work follows every link group)
        return sent

    def receive(self, send, partner: int):
        """The partner's contiguous block at the same places as ``send`` (this rank's block goes
        to it in the same call; both ranks call), in a reused buffer, ready on the caller's stream."""
        cp, nccl = self._cp, self._nccl
        recv = self._slot(self._recv, 0, send.size)
        send = send if send.flags.c_contiguous else cp.ascontiguousarray(send)  # NCCL reads from its address on
        stream = cp.cuda.get_current_stream().ptr
        count = send.size * self._words
        nccl.groupStart()
        self.nccl_comm.send(device_ptr(send), count, nccl.NCCL_FLOAT64, partner, stream)
        self.nccl_comm.recv(device_ptr(recv), count, nccl.NCCL_FLOAT64, partner, stream)
        nccl.groupEnd()
        return recv

    def close(self) -> None:
        self._recv = [None, None]
        self._pack = [None, None]


def device_ptr(a) -> int:
    """The device address of a cupy array's first element (the one place NCCL's pointers are read)."""
    return a.data.ptr
