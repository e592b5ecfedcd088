"""A state vector distributed over 2^g MPI ranks, each holding 2^(N-g) amplitudes.

Layout: physical bit p of the global index holds logical qubit ``phys[p]``; bits 0..L-1 (L = N - g)
index a rank's slice, bits L..N-1 are the rank number (bit L + j = bit j of the rank). A gate
acts only on qubits at local bits; a global qubit is brought in by an *index-bit swap* of a local
bit p with a global bit L + j: each rank exchanges the half of its slice whose bit p differs from
its own bit j with the rank that differs from it in bit j (half a slice sent and received per
swap). A stage's several swaps go at once (:meth:`DistributedState.swap_many`: one all-to-all,
each part of the slice straight to its destination, (2^k - 1)/2^k of a slice instead of k/2).

The slices live on the CPU (numpy, exchanged over MPI) or one GPU per rank (cupy, exchanged over
NCCL); :mod:`~qsim_tc.distributed.exchange` moves them in pieces of bounded size. Readouts work
on chunks of :data:`READ_CHUNK` amplitudes, so none needs a slice-sized temporary.
"""

from __future__ import annotations

import time

import numpy as np

from qsim_tc.distributed.exchange import DEFAULT_PIECE_BYTES, MpiExchange, NcclExchange, part_rounds
from qsim_tc.state import check_norm_squared

READ_CHUNK = 1 << 24  # amplitudes per step of a readout (256 MiB of complex128)


class DistributedState:
    """One rank's share of a distributed state.

    Attributes:
        comm: the MPI communicator (its size a power of two, at most 2^(N-1)).
        n_qubits: N. n_global: g = log2(comm size). local_qubits: L = N - g.
        data: this rank's 2^L amplitudes (numpy on the CPU, cupy on the GPU), in physical order.
        phys: ``phys[p]`` is the logical qubit at physical bit p.
        device: ``"cpu"`` or ``"gpu"`` (the rank's current cupy device).
        piece_bytes: the most bytes one message of a swap carries (two such buffers are the
            swap's memory beside the state; an all-to-all's round holds one piece a peer).
        bytes_sent: amplitudes' bytes this rank sent in swaps (the all-to-all of k swapped bits
            sends (2^k - 1)/2^k of the slice, a single swap half of it); swaps: index-bit swaps
            done; exchanges: collective exchanges done (a swap, or a swap_many of several bits);
            exchange_bits: the bits each exchange swapped, in order (theory: an exchange of k
            bits sends (1 - 2^-k) of the slice's bytes);
        exchange_s: seconds spent in swaps (device synchronised after each); compute_s: in the
            stages' local runs (set by :func:`~qsim_tc.distributed.run_distributed`).
        error: the run's error bound over all ranks (:class:`qsim_tc.error_bound.ErrorReport`,
            set by :func:`~qsim_tc.distributed.run_distributed`; None before a run).
    """

    def __init__(self, comm, n_qubits: int, dtype=np.complex128, data=None, phys=None, *, device: str = "cpu",
                 piece_bytes: int | None = None):
        size = comm.Get_size()
        g = size.bit_length() - 1
        if size & (size - 1):
            raise ValueError(f"the number of ranks must be a power of two, got {size}")
        if isinstance(n_qubits, bool) or not isinstance(n_qubits, int) or n_qubits <= g:
            raise ValueError(f"n_qubits must be an int above log2(ranks) = {g}, got {n_qubits!r}")
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
        if piece_bytes is not None and (isinstance(piece_bytes, bool) or not isinstance(piece_bytes, int)
                                        or piece_bytes < 16):
            raise ValueError(f"piece_bytes must be an int >= 16, got {piece_bytes!r}")
        self.comm = comm
        self.error = None
        self.rank = comm.Get_rank()
        self.n_qubits = n_qubits
        self.n_global = g
        self.local_qubits = n_qubits - g
        self.device = device
        if device == "gpu":
            import cupy  # noqa: PLC0415 - GPU only

            self.xp = cupy
        else:
            self.xp = np
        if data is None:
            data = self.xp.zeros(1 << self.local_qubits, dtype=dtype)
            if self.rank == 0:
                data[0] = 1.0
        elif getattr(data, "shape", None) != (1 << self.local_qubits,):
            raise ValueError(f"data must be a 1-D array of 2^{self.local_qubits} = {1 << self.local_qubits} "
                             f"amplitudes (this rank's slice), got shape {getattr(data, 'shape', type(data).__name__)}")
        self.data = data
        self.phys = list(range(n_qubits)) if phys is None else list(phys)
        self.piece_bytes = DEFAULT_PIECE_BYTES[device] if piece_bytes is None else piece_bytes
        self.bytes_sent = 0
        self.swaps = 0
        self.exchanges = 0
        self.exchange_bits: list[int] = []
        self.exchange_s = 0.0
        self.compute_s = 0.0
        self._exchange = None

    # --- layout -----------------------------------------------------------------------------

    def rank_bit(self, p: int) -> int:
        """The value of global physical bit p (>= L) on this rank."""
        return (self.rank >> (p - self.local_qubits)) & 1

    def position(self, qubit: int) -> int:
        """The physical bit holding logical ``qubit``."""
        return self.phys.index(qubit)

    def swap(self, p: int, g: int) -> None:
        """Exchange local physical bit p with global physical bit g (collective: every rank swaps,
        each with the rank that differs from it in bit g)."""
        big_l = self.local_qubits
        if not (0 <= p < big_l <= g < self.n_qubits):
            raise ValueError(f"swap needs a local bit (< {big_l}) and a global one, got {p}, {g}")
        exchange = self._exchanger()
        t0 = time.perf_counter()
        b = self.rank_bit(g)
        partner = self.rank ^ (1 << (g - big_l))
        # the half whose bit p differs from this rank's bit g leaves; the partner's half with its
        # bit p equal to this rank's bit g arrives in the same places
        half = self.data.reshape(-1, 2, 1 << p)[:, 1 - b, :]
        self.bytes_sent += exchange.trade(half, partner, max(1, self.piece_bytes // self.data.itemsize))
        self.phys[p], self.phys[g] = self.phys[g], self.phys[p]
        self.swaps += 1
        self.exchanges += 1
        self.exchange_bits.append(1)
        if self.device == "gpu":
            self.xp.cuda.get_current_stream().synchronize()
        self.exchange_s += time.perf_counter() - t0

    def swap_many(self, pairs) -> None:
        """Exchange local bits p_i with global bits g_i for every ``(p_i, g_i)`` of ``pairs`` at
        once (collective: every rank calls with the same pairs). The 2^k ranks that differ only in
        the bits g_i form a group; this rank's slice splits into 2^k parts by its bits p_i, and part
        u goes to the member whose bits g_i are u, arriving at that member's part whose bits p_i
        are this rank's bits g_i: each part moves once, straight to its destination, as one
        all-to-all (MPI ``Alltoallv`` on CPU ranks, one NCCL group of sends and receives a round
        on GPU ranks), in rounds of at most ``piece_bytes``. k swaps one after another send k/2 of
        a slice; this sends (2^k - 1)/2^k of it, counted in ``bytes_sent``.

        Raises:
            ValueError: a bit that is not local / global, or a bit named twice.
        """
        pairs = [(int(p), int(g)) for p, g in pairs]
        big_l, n = self.local_qubits, self.n_qubits
        ps, gs = [p for p, _ in pairs], [g for _, g in pairs]
        if not all(0 <= p < big_l for p in ps) or not all(big_l <= g < n for g in gs):
            raise ValueError(f"swap_many needs local bits (< {big_l}) paired with global ones, got {pairs}")
        if len(set(ps)) != len(ps) or len(set(gs)) != len(gs):
            raise ValueError(f"swap_many: a bit appears twice in {pairs}")
        if not pairs:
            return
        if len(pairs) == 1:
            self.swap(*pairs[0])
            return
        exchange = self._exchanger()
        t0 = time.perf_counter()
        k = len(pairs)
        me = sum(self.rank_bit(g) << i for i, g in enumerate(gs))
        base = self.rank & ~sum(1 << (g - big_l) for g in gs)
        members = [u for u in range(1 << k) if u != me]  # part `me` stays where it is
        peers = [base | sum(((u >> i) & 1) << (g - big_l) for i, g in enumerate(gs)) for u in members]
        rounds = part_rounds(self.data, big_l, ps, members, max(1, self.piece_bytes // self.data.itemsize))
        self.bytes_sent += exchange.all_to_all(rounds, peers)
        for p, g in pairs:
            self.phys[p], self.phys[g] = self.phys[g], self.phys[p]
        self.swaps += k
        self.exchanges += 1
        self.exchange_bits.append(k)
        if self.device == "gpu":
            self.xp.cuda.get_current_stream().synchronize()
        self.exchange_s += time.perf_counter() - t0

    def _exchanger(self):
        """The transport (made on first use: collective, every rank gets there together)."""
        if self._exchange is None:
            cls = NcclExchange if self.device == "gpu" else MpiExchange
            self._exchange = cls(self.comm, self.data.dtype)
        return self._exchange

    def relabel(self, a: int, b: int) -> None:
        """Exchange the names of the qubits at physical bits a and b (a SWAP gate: no data moves)."""
        self.phys[a], self.phys[b] = self.phys[b], self.phys[a]

    def take_local(self, local_state) -> None:
        """Take over the amplitudes of a StateVector run on this slice. Its local physical bit p
        holds its qubit ``layout.phys[p]``, which was this state's physical bit of that number.
        Every rank's slice must keep the same local order, and each rank ran a different local
        circuit (a global control skips a gate on half the ranks), so: where all ranks' layouts
        agree, the layout is absorbed into ``phys`` with no pass over the data; else each rank
        puts its slice back in the order it had before the run (collective)."""
        phys = local_state._valid()
        order = list(phys.layout.phys)
        if any(o != order for o in self.comm.allgather(order)):
            phys.canonicalize()
            order = list(range(self.local_qubits))
        self.phys[:self.local_qubits] = [self.phys[q] for q in order]
        self.data = phys.data

    def close(self) -> None:
        """Release the exchange's buffers (the NCCL communicator stays for the next state)."""
        if self._exchange is not None:
            self._exchange.close()
            self._exchange = None

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

    def _weights(self):
        """|amplitude|^2 of the slice, one chunk of :data:`READ_CHUNK` at a time: (start, weights)."""
        xp = self.xp
        for start in range(0, self.data.size, READ_CHUNK):
            a = self.data[start:start + READ_CHUNK]
            yield start, (a.real * a.real + a.imag * a.imag).astype(xp.float64)

    def norm(self) -> float:
        local = sum(float(w.sum()) for _, w in self._weights())
        return float(np.sqrt(self.comm.allreduce(local)))

    def probabilities(self, qubits) -> np.ndarray:
        """Marginal probabilities of ``qubits`` (bit i of the result index is ``qubits[i]``),
        summed per rank and reduced: no rank holds more than its slice (collective)."""
        qubits = [int(q) for q in qubits]
        if len(set(qubits)) != len(qubits) or any(not 0 <= q < self.n_qubits for q in qubits):
            raise ValueError(f"qubits must be distinct qubits of 0..{self.n_qubits - 1}, got {qubits}")
        xp = self.xp
        pos = {q: p for p, q in enumerate(self.phys)}
        big_l = self.local_qubits
        local_bits = [(i, pos[q]) for i, q in enumerate(qubits) if pos[q] < big_l]
        fixed = sum(self.rank_bit(pos[q]) << i for i, q in enumerate(qubits) if pos[q] >= big_l)
        out = xp.zeros(1 << len(qubits), dtype=xp.float64)
        for start, w in self._weights():
            ar = xp.arange(start, start + w.size, dtype=xp.int64)
            idx = xp.full(w.size, fixed, dtype=xp.int64)
            for i, p in local_bits:
                idx |= ((ar >> p) & 1) << i
            out += xp.bincount(idx, weights=w, minlength=out.size)
        result = self.comm.allreduce(_host(out))
        check_norm_squared(float(result.sum()), "probabilities")  # the same on every rank
        return result

    def expectation_value(self, operator) -> complex:
        """<psi|O|psi> for a Pauli operator, as :meth:`qsim_tc.StateVector.expectation_value`
        takes it (a label, a qiskit Pauli or SparsePauliOp, or (label, coefficient) pairs).

        Collective. Terms are grouped by their X mask: each group is one pass over the slice (its
        products formed once, each term's Z signs summed on them), and a mask with X or Y letters
        on global qubits pairs each rank with the rank holding the flipped amplitudes, the two
        trading their slices chunk by chunk (a slice's bytes each way a mask, in pieces of
        :data:`READ_CHUNK` amplitudes); one reduction across ranks carries every term's share.
        No rank gathers more than a chunk.
        """
        return complex(self.expectation_values([operator], "expectation_value")[0])

    def expectation_values(self, operators, what: str = "expectation_values") -> np.ndarray:
        """<psi|O_k|psi> for each Pauli operator O_k of ``operators`` (each as
        :meth:`expectation_value` takes it, or a dict {label: coefficient}), complex.

        Collective. The terms of all operators are grouped by X mask together: one pass over the
        slice (and at most one slice trade) a distinct mask, one reduction across ranks for every
        term of every operator; nothing is gathered.

        Raises:
            TypeError / ValueError: an operator that is not a Pauli operator of N qubits (named
                by ``what`` and its index); ValueError: a state of norm far from 1.
        """
        from qsim_tc.observables import terms_of  # noqa: PLC0415 - the parser StateVector's readout uses

        parsed = [terms_of(op, self.n_qubits, f"{what}[{k}]") for k, op in enumerate(operators)]
        check_norm_squared(self.norm() ** 2, what)  # collective: all raise or none
        xs = np.concatenate([p[0] for p in parsed]) if parsed else np.zeros(0, np.int64)
        zs = np.concatenate([p[1] for p in parsed]) if parsed else np.zeros(0, np.int64)
        groups: dict[int, list[tuple[int, int]]] = {}
        for t, (x_logical, z_logical) in enumerate(zip(xs.tolist(), zs.tolist())):
            x = z = 0
            for q in range(self.n_qubits):  # logical qubit q sits on physical bit position(q)
                p = self.position(q)
                x |= (x_logical >> q & 1) << p
                z |= (z_logical >> q & 1) << p
            groups.setdefault(x, []).append((t, z))
        shares = np.zeros(xs.size, dtype=np.complex128)
        for x, members in groups.items():  # (the same order on every rank: the same operators)
            shares[[t for t, _ in members]] = self._pauli_parts(x, [z for _, z in members])
        values = np.asarray(self.comm.allreduce(shares))
        n_y = np.array([bin(a & b).count("1") for a, b in zip(xs.tolist(), zs.tolist())], dtype=np.int64)
        per_term = values * (1j ** n_y)  # Y = i X Z
        out, start = np.zeros(len(parsed), dtype=np.complex128), 0
        for k, (_, _, coeffs) in enumerate(parsed):
            stop = start + len(coeffs)
            out[k] = np.sum(np.asarray(coeffs, dtype=np.complex128) * per_term[start:stop])
            start = stop
        return out

    def _pauli_parts(self, x: int, zs: list[int]) -> list[complex]:
        """This slice's share of sum_j conj(psi[j ^ x]) (-1)^popcount(j & z) psi[j] for each z of
        ``zs`` (physical masks), in one pass: the products conj(psi[j ^ x]) psi[j] of a chunk are
        formed once."""
        xp = self.xp
        big_l = self.local_qubits
        low = (1 << big_l) - 1
        x_loc, x_rank = x & low, x >> big_l
        size = self.data.size
        c = min(READ_CHUNK, size)
        x_hi, x_lo = x_loc & ~(c - 1), x_loc & (c - 1)
        partner = self.rank ^ x_rank
        parts = [0j] * len(zs)
        for a in range(0, size, c):
            mine = self.data[a:a + c]
            b = a ^ x_hi  # j ^ x for j in this chunk lies in the chunk at b (low bits permuted)
            other = self.data[b:b + c] if x_rank == 0 else self._exchanger().receive(self.data[b:b + c], partner)
            j = xp.arange(a, a + c, dtype=xp.int64)
            if x_lo:
                other = other[(j - a) ^ x_lo]
            prod = xp.conj(other).astype(xp.complex128) * mine
            for k, z in enumerate(zs):
                odd = j & (z & low)
                for shift in (32, 16, 8, 4, 2, 1):  # parity by folding
                    odd ^= odd >> shift
                parts[k] += complex(xp.sum(prod * (1.0 - 2.0 * (odd & 1).astype(xp.float64))))
        for k, z in enumerate(zs):
            if bin((self.rank << big_l) & z).count("1") % 2:  # the rank bits' share of the sign
                parts[k] = -parts[k]
        return parts

    def sample(self, shots: int, seed: int | None = None) -> np.ndarray:
        """``shots`` basis states (logical indices) drawn from |amplitude|^2: the shots are split
        between ranks by their slices' weights on rank 0, then each rank draws its own, chunk by
        chunk; the result is gathered on every rank (collective)."""
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:
            raise ValueError(f"shots must be an int >= 0, got {shots!r}")
        chunk_w = [float(w.sum()) for _, w in self._weights()]
        weights = self.comm.allgather(sum(chunk_w))
        check_norm_squared(sum(weights), "sample")  # every rank has the same weights: all raise or none
        counts = None
        if self.rank == 0:
            w = np.asarray(weights) / sum(weights)
            counts = np.random.default_rng(seed).multinomial(shots, w).tolist()
        counts = self.comm.bcast(counts, root=0)
        rng = np.random.default_rng(None if seed is None else [seed, self.rank + 1])
        mine = counts[self.rank]
        local = [np.zeros(0, np.int64)]
        if mine:
            per_chunk = rng.multinomial(mine, np.asarray(chunk_w) / sum(chunk_w))
            for (start, w), k in zip(self._weights(), per_chunk):
                if k:
                    p = _host(w)
                    local.append(start + rng.choice(p.size, size=int(k), p=p / p.sum()))
        phys_index = (self.rank << self.local_qubits) | np.concatenate(local).astype(np.int64)
        logical = np.zeros_like(phys_index)
        for p, q in enumerate(self.phys):
            logical |= ((phys_index >> p) & 1) << q
        return np.concatenate(self.comm.allgather(logical))

    def gather(self, root: int = 0):
        """The whole state in logical order on ``root`` (None elsewhere), as a numpy array; only
        on request."""
        parts = self.comm.gather(_host(self.data), root=root)
        if self.rank != root:
            return None
        full = np.concatenate(parts)
        n = self.n_qubits
        axes = [n - 1 - self.phys.index(q) for q in reversed(range(n))]  # logical bit order, high first
        return np.ascontiguousarray(full.reshape([2] * n).transpose(axes)).reshape(-1)


def _host(a):
    """A numpy array of ``a`` (a cupy array is copied to the host)."""
    return a.get() if hasattr(a, "get") else a
