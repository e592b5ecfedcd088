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


class _Buffers:
    """Two reused 1-D buffers (pack and receive) of at most one piece each."""

    def __init__(self, xp, dtype):
        self.xp, self.dtype = xp, dtype
        self.send = self.recv = None

    def get(self, which: str, size: int):
        buf = getattr(self, which)
        if buf is None or buf.size < size:
            setattr(self, which, None)  # release the smaller one first
            buf = self.xp.empty(size, dtype=self.dtype)
            setattr(self, which, buf)
        return buf[:size]


class MpiExchange:
    """Pieces of numpy slices over MPI."""

    device = "cpu"

    def __init__(self, comm, dtype):
        self.comm = comm
        self._bufs = _Buffers(np, dtype)

    def trade(self, piece, partner: int) -> None:
        """Swap ``piece``'s contents with the partner's piece at the same place (collective over
        the pair). MPI counts are 32-bit: pieces stay far below 2^31 elements."""
        if piece.flags.c_contiguous:
            self.comm.Sendrecv_replace(piece, dest=partner, sendtag=7, source=partner, recvtag=7)
            return
        buf = self._bufs.get("send", piece.size)
        np.copyto(buf.reshape(piece.shape), piece)
        self.comm.Sendrecv_replace(buf, dest=partner, sendtag=7, source=partner, recvtag=7)
        piece[...] = buf.reshape(piece.shape)

    def close(self) -> None:
        self._bufs = None


class NcclExchange:
    """Pieces of cupy slices over NCCL, between the GPUs of the ranks of an MPI communicator."""

    device = "gpu"

    def __init__(self, comm, dtype):
        import cupy  # noqa: PLC0415 - GPU only
        from cupy.cuda import nccl  # noqa: PLC0415

        self._cp, self._nccl = cupy, nccl
        uid = nccl.get_unique_id() if comm.Get_rank() == 0 else None
        uid = comm.bcast(uid, root=0)
        self.nccl_comm = nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())
        self._bufs = _Buffers(cupy, dtype)
        self._words = np.dtype(dtype).itemsize // 8  # sent as float64 words (complex64 is one)

    def trade(self, piece, partner: int) -> None:
        """Swap ``piece``'s contents with the partner's piece at the same place (both ranks call)."""
        cp, nccl = self._cp, self._nccl
        if piece.flags.c_contiguous:
            send = piece
        else:
            send = self._bufs.get("send", piece.size).reshape(piece.shape)
            cp.copyto(send, piece)
        recv = self._bufs.get("recv", piece.size)
        stream = cp.cuda.get_current_stream().ptr
        count = piece.size * self._words
        nccl.groupStart()
        self.nccl_comm.send(send.data.ptr, count, nccl.NCCL_FLOAT64, partner, stream)
        self.nccl_comm.recv(recv.data.ptr, count, nccl.NCCL_FLOAT64, partner, stream)
        nccl.groupEnd()
        cp.copyto(piece, recv.reshape(piece.shape))  # stream-ordered after the group

    def close(self) -> None:
        self._bufs = None
        if self.nccl_comm is not None:
            self.nccl_comm.destroy()
            self.nccl_comm = None
