"""A state vector distributed over 2^g MPI ranks, each holding 2^(N-g) amplitudes.

Layout: physical bit p of the global index holds logical qubit ``phys[p]``; bits 0..L-1 (L = N - g)
index a rank's slice, bits L..N-1 are the rank number (bit L + j = bit j of the rank). A gate
acts only on qubits at local bits; a global qubit is brought in by an *index-bit swap* of a local
bit p with a global bit L + j: each rank exchanges the half of its slice whose bit p differs from
its own bit j with the rank that differs from it in bit j (half a slice sent and received per
swap, pairwise, no all-to-all).

The exchange goes through mpi4py on numpy slices (CPU ranks); messages are cut into pieces of at
most :data:`MESSAGE_ELEMENTS` amplitudes (MPI counts are 32-bit).
"""

from __future__ import annotations

import numpy as np

MESSAGE_ELEMENTS = 1 << 26  # amplitudes per message piece (1 GiB of complex128)


class DistributedState:
    """One rank's share of a distributed state.

    Attributes:
        comm: the MPI communicator (its size a power of two, at most 2^(N-1)).
        n_qubits: N. n_global: g = log2(comm size). local_qubits: L = N - g.
        data: this rank's 2^L amplitudes (numpy), in physical order.
        phys: ``phys[p]`` is the logical qubit at physical bit p.
        bytes_sent: amplitudes' bytes this rank sent in swaps; swaps: swaps done.
    """

    def __init__(self, comm, n_qubits: int, dtype=np.complex128, data=None, phys=None):
        size = comm.Get_size()
        g = size.bit_length() - 1
        if size & (size - 1):
            raise ValueError(f"the number of ranks must be a power of two, got {size}")
        if isinstance(n_qubits, bool) or not isinstance(n_qubits, int) or n_qubits <= g:
            raise ValueError(f"n_qubits must be an int above log2(ranks) = {g}, got {n_qubits!r}")
        self.comm = comm
        self.rank = comm.Get_rank()
        self.n_qubits = n_qubits
        self.n_global = g
        self.local_qubits = n_qubits - g
        if data is None:
            data = np.zeros(1 << self.local_qubits, dtype=dtype)
            if self.rank == 0:
                data[0] = 1.0
        self.data = data
        self.phys = list(range(n_qubits)) if phys is None else list(phys)
        self.bytes_sent = 0
        self.swaps = 0

    # --- layout -----------------------------------------------------------------------------

    def rank_bit(self, p: int) -> int:
        """The value of global physical bit p (>= L) on this rank."""
        return (self.rank >> (p - self.local_qubits)) & 1

    def swap(self, p: int, g: int) -> None:
        """Exchange local physical bit p with global physical bit g (collective over the pair)."""
        big_l = self.local_qubits
        if not (0 <= p < big_l <= g < self.n_qubits):
            raise ValueError(f"swap needs a local bit (< {big_l}) and a global one, got {p}, {g}")
        b = self.rank_bit(g)
        partner = self.rank ^ (1 << (g - big_l))
        # the half whose bit p differs from this rank's bit g leaves; the partner's half with its
        # bit p equal to this rank's bit g arrives in the same places
        half = self.data.reshape(-1, 2, 1 << p)[:, 1 - b, :]
        buf = np.ascontiguousarray(half).reshape(-1)
        for start in range(0, buf.size, MESSAGE_ELEMENTS):
            piece = buf[start:start + MESSAGE_ELEMENTS]
            self.comm.Sendrecv_replace(piece, dest=partner, sendtag=7, source=partner, recvtag=7)
        half[...] = buf.reshape(half.shape)
        self.phys[p], self.phys[g] = self.phys[g], self.phys[p]
        self.bytes_sent += buf.nbytes
        self.swaps += 1

    def relabel(self, a: int, b: int) -> None:
        """Exchange the names of the qubits at physical bits a and b (a SWAP gate: no data moves)."""
        self.phys[a], self.phys[b] = self.phys[b], self.phys[a]

    # --- reading results without gathering ----------------------------------------------------

    def _owner_and_offset(self, logical_index: int) -> tuple[int, int]:
        phys_index = 0
        for p, q in enumerate(self.phys):
            phys_index |= ((logical_index >> q) & 1) << p
        return phys_index >> self.local_qubits, phys_index & ((1 << self.local_qubits) - 1)

    def amplitude(self, logical_index: int) -> complex:
        """The amplitude of basis state ``logical_index`` (collective: every rank gets it)."""
        if not 0 <= int(logical_index) < (1 << self.n_qubits):
            raise ValueError(f"logical_index must be in [0, 2^{self.n_qubits}), got {logical_index}")
        owner, off = self._owner_and_offset(int(logical_index))
        value = complex(self.data[off]) if self.rank == owner else None
        return self.comm.bcast(value, root=owner)

    def norm(self) -> float:
        local = float(np.vdot(self.data, self.data).real)
        return float(np.sqrt(self.comm.allreduce(local)))

    def probabilities(self, qubits) -> np.ndarray:
        """Marginal probabilities of ``qubits`` (bit i of the result index is ``qubits[i]``),
        summed per rank and reduced: no rank holds more than its slice (collective)."""
        qubits = [int(q) for q in qubits]
        if len(set(qubits)) != len(qubits) or any(not 0 <= q < self.n_qubits for q in qubits):
            raise ValueError(f"qubits must be distinct qubits of 0..{self.n_qubits - 1}, got {qubits}")
        pos = {q: p for p, q in enumerate(self.phys)}
        big_l = self.local_qubits
        p2 = np.abs(self.data) ** 2
        local_bits = [(i, pos[q]) for i, q in enumerate(qubits) if pos[q] < big_l]
        fixed = sum(self.rank_bit(pos[q]) << i for i, q in enumerate(qubits) if pos[q] >= big_l)
        idx = np.full(p2.size, fixed, dtype=np.int64)
        ar = np.arange(p2.size, dtype=np.int64)
        for i, p in local_bits:
            idx |= ((ar >> p) & 1) << i
        out = np.bincount(idx, weights=p2, minlength=1 << len(qubits))
        return self.comm.allreduce(out)

    def sample(self, shots: int, seed: int | None = None) -> np.ndarray:
        """``shots`` basis states (logical indices) drawn from |amplitude|^2: the shots are split
        between ranks by their slices' weights on rank 0, then each rank draws its own; the
        result is gathered on every rank (collective)."""
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:
            raise ValueError(f"shots must be an int >= 0, got {shots!r}")
        p2 = np.abs(self.data) ** 2
        weights = self.comm.allgather(float(p2.sum()))
        counts = None
        if self.rank == 0:
            w = np.asarray(weights) / sum(weights)
            counts = np.random.default_rng(seed).multinomial(shots, w).tolist()
        counts = self.comm.bcast(counts, root=0)
        rng = np.random.default_rng(None if seed is None else [seed, self.rank + 1])
        mine = counts[self.rank]
        local = rng.choice(p2.size, size=mine, p=p2 / p2.sum()) if mine else np.zeros(0, np.int64)
        phys_index = (self.rank << self.local_qubits) | local.astype(np.int64)
        logical = np.zeros_like(phys_index)
        for p, q in enumerate(self.phys):
            logical |= ((phys_index >> p) & 1) << q
        return np.concatenate(self.comm.allgather(logical))

    def gather(self, root: int = 0):
        """The whole state in logical order on ``root`` (None elsewhere); only on request."""
        parts = self.comm.gather(self.data, root=root)
        if self.rank != root:
            return None
        full = np.concatenate(parts)
        n = self.n_qubits
        axes = [n - 1 - self.phys.index(q) for q in reversed(range(n))]  # logical bit order, high first
        return np.ascontiguousarray(full.reshape([2] * n).transpose(axes)).reshape(-1)
