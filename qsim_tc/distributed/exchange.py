"""Trading half a slice with a partner rank, in pieces of bounded size.

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
  on the current stream; the receive goes to a buffer (NCCL does not trade in place), copied
  over the piece once the group is done.
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

    def close(self) -> None:
        self._buf = self._recv = None


# NCCL communicators by (MPI communicator, GPU): creating one costs about a second, so every
# DistributedState on the same ranks and GPU shares it for the life of the process.
_NCCL_COMMS: dict = {}


class NcclExchange:
    """Pieces of cupy slices over NCCL, between the GPUs of the ranks of an MPI communicator.

    Two slots pipeline the pieces: while piece i crosses the link (the communication stream),
    piece i - 1 is copied from its receive buffer into place (the copy stream); events order each
    buffer's reuse. Memory: two pieces to receive into, two to pack. Packing shares the copy
    stream, so a strided piece is packed only after the previous copy-back: on two H100s packed
    swaps ran at 162 GB/s per GPU, contiguous ones at 255.
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
        self._streams = (cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True))

    def _slot(self, bufs, i: int, size: int):
        if bufs[i] is None or bufs[i].size < size:
            bufs[i] = None
            bufs[i] = self._cp.empty(size, dtype=self._dtype)
        return bufs[i][:size]

    def trade(self, half, partner: int, piece_elements: int) -> int:
        """Swap the contents of ``half`` with the partner's half at the same places (both ranks
        call); returns the bytes sent. Ends synchronised with the caller's stream."""
        cp, nccl = self._cp, self._nccl
        link, copy = self._streams
        caller = cp.cuda.get_current_stream()
        start = caller.record()
        link.wait_event(start)  # the state is ready (its last kernel ran on the caller's stream)
        copy.wait_event(start)
        done = [None, None]  # per slot: the copy-back that frees its buffers
        sent = 0
        for i, piece in enumerate(half_pieces(half, piece_elements)):
            k = i % 2
            if done[k] is not None:
                link.wait_event(done[k])
                copy.wait_event(done[k])
            recv = self._slot(self._recv, k, piece.size).reshape(piece.shape)
            send = piece
            if not piece.flags.c_contiguous:
                send = self._slot(self._pack, k, piece.size).reshape(piece.shape)
                with copy:
                    cp.copyto(send, piece)
                link.wait_event(copy.record())
            count = piece.size * self._words
            nccl.groupStart()
            self.nccl_comm.send(send.data.ptr, count, nccl.NCCL_FLOAT64, partner, link.ptr)
            self.nccl_comm.recv(recv.data.ptr, count, nccl.NCCL_FLOAT64, partner, link.ptr)
            nccl.groupEnd()
            copy.wait_event(link.record())
            with copy:
                cp.copyto(piece, recv)
            done[k] = copy.record()
            sent += piece.nbytes
        caller.wait_event(copy.record())
        return sent

    def receive(self, send, partner: int):
        """The partner's contiguous block at the same places as ``send`` (this rank's block goes
        to it in the same call; both ranks call), in a reused buffer, ready on the caller's stream."""
        cp, nccl = self._cp, self._nccl
        recv = self._slot(self._recv, 0, send.size)
        stream = cp.cuda.get_current_stream().ptr
        count = send.size * self._words
        nccl.groupStart()
        self.nccl_comm.send(send.data.ptr, count, nccl.NCCL_FLOAT64, partner, stream)
        self.nccl_comm.recv(recv.data.ptr, count, nccl.NCCL_FLOAT64, partner, stream)
        nccl.groupEnd()
        return recv

    def close(self) -> None:
        self._recv = [None, None]
        self._pack = [None, None]
