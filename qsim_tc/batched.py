"""One plan for a parametrized circuit, many bindings: the states of a parameter sweep.

:class:`BatchedCircuit` reads a parametrized ``QuantumCircuit`` once and turns it into steps
whose structure does not depend on the parameter values:

- runs of one-qubit gates on a qubit become one 2x2 matrix per binding (rotations ``rx``,
  ``ry``, ``rz``, ``p``, ``u`` and ``r`` computed for all bindings at once; other gates per
  binding);
- runs of gates that map basis states to basis states (``cx``, ``swap``, ``cz``, ``x``, Toffoli,
  any fixed monomial matrix) become one gather and phase over the state;
- any other gate is one batched matrix product on its qubits.

:meth:`BatchedCircuit.states` then evolves a block of bindings at once (one array of shape
``(bindings, 2^n)``), so the per-gate Python and planning cost is paid once per block rather
than once per binding. The code is written against the array module (numpy or cupy).
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from circuits.errors import CircuitError
from circuits.qiskit_import import require_qiskit

# amplitudes (bindings x 2^n) of one block: bounds the memory of a sweep
BLOCK_ELEMENTS = {"cpu": 1 << 18, "gpu": 1 << 26}
_ROTATIONS = frozenset({"rx", "ry", "rz", "p", "u1", "u", "u3", "r"})


@dataclass
class _Matrix:
    """A gate's matrix: fixed, or a function of the bindings' values (B x P) -> (B, 2^k, 2^k)."""

    fixed: np.ndarray | None
    make: object = None

    def batch(self, values: np.ndarray) -> np.ndarray:
        if self.fixed is not None:
            return np.broadcast_to(self.fixed, (values.shape[0],) + self.fixed.shape)
        return self.make(values)


@dataclass
class _OneQubit:
    qubit: int
    matrices: list  # _Matrix, in the order applied


@dataclass
class _Layer:
    """Consecutive one-qubit steps, applied in one call per block (each state's passes back to back)."""

    steps: list  # _OneQubit


@dataclass
class _Monomial:
    index: np.ndarray  # new psi[i] = phase[i] * psi[index[i]]
    phase: np.ndarray | None


@dataclass
class _Dense:
    qubits: tuple
    matrix: _Matrix


class BatchedCircuit:
    """A parametrized circuit prepared once for many bindings.

    Args:
        qc: a ``qiskit.QuantumCircuit`` of unitary instructions (barriers are skipped; final
            measurements are not part of the state and are ignored).

    Raises:
        CircuitError: a non-unitary instruction (a reset, a mid-circuit measurement, control
            flow), named with its index.
    """

    def __init__(self, qc):
        qiskit = require_qiskit("qsim_tc.batched")
        if not isinstance(qc, qiskit.QuantumCircuit):
            raise TypeError(f"qc must be a qiskit.QuantumCircuit, got {type(qc).__name__}")
        self.n_qubits = qc.num_qubits
        self.parameters = list(qc.parameters)
        self._column = {p: k for k, p in enumerate(self.parameters)}
        self._phase = qc.global_phase
        self.measured: list = []  # (qubit, clbit) of the final measurements, by clbit (as from_qiskit)
        self.steps = self._compile(qc, qiskit)

    # --- compile ------------------------------------------------------------------------------

    def _compile(self, qc, qiskit) -> list:
        n = self.n_qubits
        qmap = {bit: i for i, bit in enumerate(qc.qubits)}
        steps: list = []
        pending: dict[int, list] = {}  # one-qubit gates not yet placed, per qubit
        mono: list = []  # fixed monomial gates (qubits, matrix) not yet placed
        measured = set()
        clbits: dict = {}  # clbit -> the qubit measured into it (the last measurement wins)

        def flush_qubits(qs):
            flush_mono()
            for q in qs:
                if q in pending:
                    steps.append(_OneQubit(q, pending.pop(q)))

        def flush_mono():
            if mono:
                steps.append(_monomial(n, list(mono)))
                mono.clear()

        for index, inst in enumerate(qc.data):
            op = inst.operation
            qs = tuple(qmap[q] for q in inst.qubits)
            where = f"instruction {index} ({op.name!r} on qubit(s) {list(qs)})"
            if op.name in ("barrier", "delay"):
                continue
            if op.name == "measure":
                measured.update(qs)
                clbits[qc.find_bit(inst.clbits[0]).index] = qs[0]
                continue
            if measured.intersection(qs):
                raise CircuitError(f"{where} acts on a measured qubit; batched bindings take unitary circuits "
                                   "with final measurements only")
            if inst.clbits or isinstance(op, qiskit.circuit.ControlFlowOp) or op.name == "reset":
                raise CircuitError(f"{where} is not unitary; batched bindings take unitary circuits only")
            matrix = self._matrix(op, where, qiskit)
            if len(qs) == 1:
                if mono and qs[0] in {q for g in mono for q in g[0]}:
                    flush_mono()
                pending.setdefault(qs[0], []).append(matrix)
            elif matrix.fixed is not None and _is_monomial(matrix.fixed):
                for q in qs:  # (no pending monomial gate touches q: they commute, and go after)
                    if q in pending:
                        steps.append(_OneQubit(q, pending.pop(q)))
                mono.append((qs, matrix.fixed))
            else:
                flush_qubits(qs)
                steps.append(_Dense(qs, matrix))
        flush_qubits(sorted(pending))
        flush_mono()
        self.measured = sorted(((q, c) for c, q in clbits.items()), key=lambda qc_: qc_[1])
        return _layers(steps)

    def _values(self, param, where):
        """A function (B x P values) -> B floats for one instruction parameter."""
        qiskit = require_qiskit()
        if isinstance(param, qiskit.circuit.Parameter):
            k = self._column[param]
            return lambda v: v[:, k]
        if isinstance(param, qiskit.circuit.ParameterExpression):
            if not param.parameters:
                c = float(param)
                return lambda v: np.full(v.shape[0], c)
            cols = [(p, self._column[p]) for p in param.parameters]
            return lambda v: np.array([float(param.bind({p: float(row[k]) for p, k in cols})) for row in v])
        c = float(param)
        return lambda v: np.full(v.shape[0], c)

    def _matrix(self, op, where, qiskit) -> _Matrix:
        params = list(getattr(op, "params", []))
        symbolic = any(isinstance(p, qiskit.circuit.ParameterExpression) and p.parameters for p in params)
        if not symbolic:
            try:
                m = op.to_matrix() if hasattr(op, "to_matrix") else qiskit.quantum_info.Operator(op).data
            except Exception:  # noqa: BLE001 - no __array__: through Operator
                try:
                    m = qiskit.quantum_info.Operator(op).data
                except Exception as exc:  # noqa: BLE001
                    raise CircuitError(f"{where} has no unitary matrix: {exc}") from exc
            return _Matrix(np.asarray(m, dtype=np.complex128))
        fns = [self._values(p, where) for p in params]
        if op.name in _ROTATIONS:
            name = op.name
            return _Matrix(None, lambda v: _rotation(name, [f(v) for f in fns]))

        def per_binding(v, op=op):
            out = []
            for row in np.stack([f(v) for f in fns], axis=1):
                g = op.to_mutable()
                g.params = [float(x) for x in row]
                out.append(np.asarray(g.to_matrix() if hasattr(g, "to_matrix") else
                                      qiskit.quantum_info.Operator(g).data, dtype=np.complex128))
            return np.stack(out)

        return _Matrix(None, per_binding)

    # --- run ----------------------------------------------------------------------------------

    def values_array(self, bindings) -> np.ndarray:
        """Bindings as a (B, P) float array, columns in ``self.parameters`` order.

        Args:
            bindings: a (B, P) array (columns in that order), or a dict {Parameter: values}.
        """
        if isinstance(bindings, dict):
            missing = [p.name for p in self.parameters if p not in bindings]
            if missing:
                raise ValueError(f"bindings lack parameter(s) {', '.join(missing)}")
            cols = [np.atleast_1d(np.asarray(bindings[p], dtype=np.float64)) for p in self.parameters]
            return np.stack(cols, axis=1) if cols else np.zeros((1, 0))
        values = np.asarray(bindings, dtype=np.float64)
        if values.ndim == 1:
            values = values[None, :]
        if values.ndim != 2 or values.shape[1] != len(self.parameters):
            raise ValueError(f"bindings must have shape (B, {len(self.parameters)}), got {values.shape}")
        return values

    def states(self, bindings, *, dtype=np.complex128, device="cpu", block: int | None = None) -> Iterator:
        """The final states of the bindings, a block at a time.

        Args:
            bindings: see :meth:`values_array`.
            dtype: complex128 or complex64.
            device: ``"cpu"`` or ``"gpu"`` (or a resolved ``gemm.Device``).
            block: bindings per block (default: :data:`BLOCK_ELEMENTS` amplitudes per block).

        Yields:
            (start, array of shape (b, 2^n) in logical order) for consecutive blocks of bindings,
            in order. On the CPU, up to numba's thread count of blocks evolve side by side, each
            on one thread, while the caller works on the block yielded.
        """
        import gemm  # noqa: PLC0415

        dev = gemm.resolve_device(device)
        xp = dev.xp
        values = self.values_array(bindings)
        n = self.n_qubits
        if block is None:
            block = max(1, BLOCK_ELEMENTS[dev.name] >> n)
        steps = self.steps
        # the first layer acts on |0...0>: its state is the product of the matrices' first columns
        product_first = bool(steps) and isinstance(steps[0], _Layer) and \
            len({one.qubit for one in steps[0].steps}) == len(steps[0].steps)

        kernel = _cpu_layer() if xp is np else None
        product = _cpu_product() if xp is np else None
        # the product state and the gather after it, in one pass that writes the gathered state
        gather_first = product is not None and product_first and len(steps) > 1 and isinstance(steps[1], _Monomial)

        local = threading.local()  # a thread's spare block of states: the input of its last gather

        def spare(b: int) -> np.ndarray:
            """A (b, 2^n) host array to write a block into: the thread's spare one where it fits,
            so that a gather neither allocates a block nor touches its memory for the first time."""
            out, local.spare = getattr(local, "spare", None), None
            return out if out is not None and out.shape[0] == b else np.empty((b, 1 << n), dtype=dtype)

        def evolve(v, block_mats):
            first = 1 if product_first else 0
            if product is not None and product_first:
                gather = steps[1] if gather_first else None
                psi = _run_product(product, block_mats[0], steps[0], n, gather, spare(v.shape[0]))
                first += gather_first
            elif product_first:
                psi = _product_state(block_mats[0], [one.qubit for one in steps[0].steps], n, xp, dtype)
            else:
                psi = xp.zeros((v.shape[0], 1 << n), dtype=dtype)
                psi[:, 0] = 1
            for i in range(first, len(steps)):
                if kernel is not None and isinstance(steps[i], _Layer):
                    psi = _run_layer(kernel, psi, block_mats[i], n)
                elif kernel is not None and isinstance(steps[i], _Monomial):
                    out = _gather(steps[i], psi, spare(v.shape[0]))
                    local.spare, psi = psi, out
                else:
                    psi = _apply(steps[i], psi, v, n, xp, block_mats.get(i))
            phase = self._values(self._phase, "global_phase")(v)
            if np.any(phase):
                psi *= xp.asarray(np.exp(1j * phase).astype(dtype))[:, None]
            return psi

        def blocks():
            sweep = block * max(1, SWEEP_BINDINGS // block)
            for s0 in range(0, values.shape[0], sweep):
                vs = values[s0:s0 + sweep]
                # every layer's 2x2 matrices (and for the compiled layer their real form) for many
                # bindings at once: vectorised over the bindings, so their Python cost is paid once
                # per sweep rather than once per block
                mats = {i: np.stack([_one_matrix(one, vs) for one in step.steps], axis=1)
                        for i, step in enumerate(steps) if isinstance(step, _Layer)}
                if kernel is not None:
                    mats = {i: m if i == 0 and product_first else _LayerForm.of(steps[i], m, n)
                            for i, m in mats.items()}
                for b0 in range(0, vs.shape[0], block):
                    sl = slice(b0, b0 + block)
                    yield s0 + b0, vs[sl], {i: m[sl] if isinstance(m, np.ndarray) else m.rows(sl)
                                            for i, m in mats.items()}

        workers = _cpu_workers() if xp is np else 1
        if workers <= 1:
            for start, v, block_mats in blocks():
                yield start, evolve(v, block_mats)
            return
        # blocks evolve side by side, one thread each running the compiled kernels single-threaded:
        # a block's kernels are too short for a parallel region each (on a loaded machine its
        # threads wait for one another at every barrier), and the caller's work on one block
        # overlaps the evolution of the next
        with ThreadPoolExecutor(workers, initializer=_single_threaded) as pool:
            pending: deque = deque()
            for start, v, block_mats in blocks():
                pending.append((start, pool.submit(evolve, v, block_mats)))
                if len(pending) > workers:
                    start0, done = pending.popleft()
                    yield start0, done.result()
            while pending:
                start0, done = pending.popleft()
                yield start0, done.result()


def _cpu_workers() -> int:
    """Threads that evolve blocks side by side on the CPU: numba's threads (1 without numba)."""
    try:
        import numba  # noqa: PLC0415 - optional speed-up
    except ImportError:
        return 1
    return numba.get_num_threads()


def _single_threaded():
    """Run this thread's compiled kernels on one thread (numba's thread count is per thread)."""
    import numba  # noqa: PLC0415 - only called where _cpu_workers found it

    numba.set_num_threads(1)


# bindings whose layer matrices are formed together (bounds their memory: 64 B per qubit each)
SWEEP_BINDINGS = 1024


def _product_state(ms: np.ndarray, qubits: list, n: int, xp, dtype):
    """The (b, 2^n) states ``(x)_q ms[:, j(q), :, 0]`` (qubit q = bit q; ``|0>`` where no matrix).

    Built from qubit 0 up, each step ``vec <- c_q (x) vec``: the long axis is the innermost one
    of every product (the other order runs numpy's inner loop over 2 elements, several times
    slower). Formed in double precision (one rounding when ``dtype`` is single).
    """
    b = ms.shape[0]
    first_col = {q: ms[:, j, :, 0] for j, q in enumerate(qubits)}
    zero = np.zeros((b, 2), dtype=np.complex128)
    zero[:, 0] = 1
    vec = xp.ones((b, 1), dtype=np.complex128)
    for q in range(n):  # qubit q becomes the slowest index of the 2^(q+1) amplitudes so far
        c = xp.asarray(first_col.get(q, zero))
        vec = (c[:, :, None] * vec[:, None, :]).reshape(b, -1)
    return vec if vec.dtype == dtype else vec.astype(dtype)


@functools.lru_cache(maxsize=1)
def _cpu_product():
    """A compiled product state over a block of bindings (CPU), or None without numba.

    ``product(out, lo, hi, index, phase)`` writes ``out[b, i] = phase[i] * lo[b, k mod L] *
    hi[b, k // L]`` with ``k = index[i]`` (``k = i`` where ``index`` is empty; ``phase`` 1 where
    empty), ``L = lo.shape[1]``: the product state of :func:`_tensor_tables`' two tables, and the
    gather of a :class:`_Monomial` after it, in one pass that only writes the state.
    """
    try:
        import numba  # noqa: PLC0415 - optional speed-up
    except ImportError:
        return None

    @numba.njit(parallel=True, cache=True, nogil=True)
    def product(out, lo, hi, index, phase):
        n_b, size = out.shape
        n_lo = lo.shape[1]
        bits = 0
        while (1 << bits) < n_lo:
            bits += 1
        for b in numba.prange(n_b):
            if index.shape[0] == 0:
                for h in range(size // n_lo):
                    f = hi[b, h]
                    for k in range(n_lo):
                        out[b, h * n_lo + k] = f * lo[b, k]
            elif phase.shape[0] == 0:
                for i in range(size):
                    k = index[i]
                    out[b, i] = lo[b, k & (n_lo - 1)] * hi[b, k >> bits]
            else:
                for i in range(size):
                    k = index[i]
                    out[b, i] = phase[i] * (lo[b, k & (n_lo - 1)] * hi[b, k >> bits])

    return product


def _run_product(product, ms: np.ndarray, step: _Layer, n: int, gather: _Monomial | None, out: np.ndarray):
    """The product state of a first layer on ``|0...0>`` (its matrices ``ms``, (b, k, 2, 2)), then
    ``gather`` where given, through the compiled kernel, into ``out``."""
    qubits = np.array([one.qubit for one in step.steps], dtype=np.int64)
    lo, hi = _tensor_tables(ms[:, :, :, 0], qubits, n, LAYER_LOW_BITS, absent=(1, 0))
    if gather is None:
        index, phase = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.complex128)
    else:
        index = gather.index
        phase = np.zeros(0, dtype=np.complex128) if gather.phase is None else gather.phase
    product(out, lo, hi, index, phase)
    return out


def _gather(step: _Monomial, psi: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A monomial step on a block of host states, written into ``out`` (``psi`` is left as it was)."""
    # (mode "clip": with ``out`` and the default "raise", numpy gathers into a temporary first)
    np.take(psi, step.index, axis=1, out=out, mode="clip")
    if step.phase is not None:
        out *= step.phase.astype(out.dtype, copy=False)
    return out


def _one_matrix(step: _OneQubit, v) -> np.ndarray:
    """The (b, 2, 2) product of a one-qubit step's matrices."""
    m = step.matrices[0].batch(v)
    for later in step.matrices[1:]:
        m = later.batch(v) @ m
    return np.ascontiguousarray(m)


# one-qubit gates on qubits below this run tile by tile (2^LOW amplitudes, held in the L1 cache)
LAYER_LOW_BITS = 10
# amplitudes of one tile of the high qubits' pass (all rows x some columns, held in the L2 cache)
LAYER_HIGH_TILE = 1 << 14


@functools.lru_cache(maxsize=1)
def _cpu_layer():
    """A compiled run of one-qubit gates over a block of states (CPU), or None without numba.

    ``layer(psi, rs, ms, qubits, dl_lo, dl_hi, dr_lo, dr_hi, low_bits, high_tile)`` applies gate
    ``j`` on qubit ``qubits[j]`` (distinct qubits) of each state ``psi[b]``, in place. The gates
    are given either as complex matrices ``ms[b, j]`` (then ``rs`` is empty) or in real form
    (:func:`_real_form`, then ``ms`` is empty): ``diag(dl) @ rs[b, j] @ diag(dr)`` with ``rs``
    real, and the diagonals of all the layer's qubits as tables over the low and high index bits
    (``dl_lo[b, i mod 2^low] * dl_hi[b, i >> low]``; ``dr_*`` empty where every right phase is 1).

    Gates on distinct qubits commute: the low qubits' gates run together on each tile of
    ``2^low_bits`` amplitudes, the high qubits' gates together on tiles of all rows and a few
    columns (the state as rows of ``2^low_bits``), so a layer is at most two passes through the
    state. The gates of strides below ``2^(low_bits // 2)`` run on the low tile's transpose
    (as a square matrix), where their stride is large. A tile is held as its real parts then its
    imaginary parts, which the compiler turns into vector instructions; a real matrix acts on
    both halves alike, at half the arithmetic of a complex one. In real form the right diagonal
    is applied as a tile is read (before any gate), the low qubits' left diagonal as the low pass
    writes it and the high qubits' as the high pass does.
    """
    try:
        import numba  # noqa: PLC0415 - optional speed-up
    except ImportError:
        return None

    @numba.njit(inline="always")
    def real_gate(buf, n, s, m):
        """The real 2x2 ``m`` on the pairs (k, k + s) of ``buf[:n]`` (real and imaginary halves alike)."""
        a, b, c, d = m[0, 0], m[0, 1], m[1, 0], m[1, 1]
        if s == 1:  # neighbours: one pair per step
            for base in range(0, n, 2):
                x = buf[base]
                y = buf[base + 1]
                buf[base] = a * x + b * y
                buf[base + 1] = c * x + d * y
        else:
            for base in range(0, n, 2 * s):
                lo = buf[base:base + s]
                hi = buf[base + s:base + 2 * s]
                for k in range(s):
                    x = lo[k]
                    y = hi[k]
                    lo[k] = a * x + b * y
                    hi[k] = c * x + d * y

    @numba.njit(inline="always")
    def complex_gate(buf, n, s, m):
        """The complex 2x2 ``m`` on the pairs (k, k + s) of the tile: real parts ``buf[:n]``,
        imaginary parts ``buf[n:2n]``."""
        m00r, m00i, m01r, m01i = m[0, 0].real, m[0, 0].imag, m[0, 1].real, m[0, 1].imag
        m10r, m10i, m11r, m11i = m[1, 0].real, m[1, 0].imag, m[1, 1].real, m[1, 1].imag
        re = buf[:n]
        im = buf[n:2 * n]
        for base in range(0, n, 2 * s):
            r0 = re[base:base + s]
            i0 = im[base:base + s]
            r1 = re[base + s:base + 2 * s]
            i1 = im[base + s:base + 2 * s]
            for k in range(s):
                ar = r0[k]
                ai = i0[k]
                br = r1[k]
                bi = i1[k]
                r0[k] = m00r * ar - m00i * ai + m01r * br - m01i * bi
                i0[k] = m00r * ai + m00i * ar + m01r * bi + m01i * br
                r1[k] = m10r * ar - m10i * ai + m11r * br - m11i * bi
                i1[k] = m10r * ai + m10i * ar + m11r * bi + m11i * br

    # contraction into fused multiply-adds: each output rounds once per product pair, not twice
    @numba.njit(parallel=True, cache=True, nogil=True, fastmath={"contract"})
    def layer(psi, rs, ms, qubits, dl_lo, dl_hi, dr_lo, dr_hi, low_bits, high_tile):
        n_b, size = psi.shape
        low = min(size, 1 << low_bits)
        n_rows = size // low
        real = rs.shape[0] > 0
        has_dr = dr_lo.shape[1] > 0
        n_low = 0
        for j in range(qubits.shape[0]):
            if (1 << qubits[j]) < low:
                n_low += 1
        n_high = qubits.shape[0] - n_low
        # the low tile as a matrix of n_tall x cols (cols = 2^(bits // 2)): the gates on its row
        # bits run on it as read, those on its column bits (strides below cols, which do not
        # vectorise) on its transpose
        bits = 0
        while (1 << bits) < low:
            bits += 1
        cols = 1 << (bits // 2)
        n_tall = low // cols
        transpose = False
        for j in range(qubits.shape[0]):
            if (1 << qubits[j]) < cols:
                transpose = True
        if n_low or has_dr:
            for task in numba.prange(n_b * n_rows):  # the low qubits, a row of `low` amplitudes at a time
                b = task // n_rows
                row = task % n_rows
                t0 = row * low
                buf = np.empty(2 * low)
                for k in range(low):
                    v = psi[b, t0 + k]
                    buf[k] = v.real
                    buf[low + k] = v.imag
                if has_dr:
                    h = dr_hi[b, row]
                    for k in range(low):
                        f = dr_lo[b, k] * h
                        x = buf[k]
                        y = buf[low + k]
                        buf[k] = f.real * x - f.imag * y
                        buf[low + k] = f.real * y + f.imag * x
                for j in range(qubits.shape[0]):
                    s = 1 << qubits[j]
                    if cols <= s < low:
                        if real:
                            real_gate(buf, 2 * low, s, rs[b, j])
                        else:
                            complex_gate(buf, low, s, ms[b, j])
                if transpose:  # column bit q of the tile has stride n_tall * 2^q in its transpose
                    out = np.empty(2 * low)
                    for part in range(2):
                        for r in range(n_tall):
                            for c in range(cols):
                                out[part * low + c * n_tall + r] = buf[part * low + r * cols + c]
                    for j in range(qubits.shape[0]):
                        s = 1 << qubits[j]
                        if s < cols:
                            if real:
                                real_gate(out, 2 * low, s * n_tall, rs[b, j])
                            else:
                                complex_gate(out, low, s * n_tall, ms[b, j])
                    # stored from the transpose as it is
                    for r in range(n_tall):
                        for c in range(cols):
                            v = complex(out[c * n_tall + r], out[low + c * n_tall + r])
                            psi[b, t0 + r * cols + c] = v * dl_lo[b, r * cols + c] if real else v
                elif real:
                    for k in range(low):
                        psi[b, t0 + k] = complex(buf[k], buf[low + k]) * dl_lo[b, k]
                else:
                    for k in range(low):
                        psi[b, t0 + k] = complex(buf[k], buf[low + k])
        if n_high == 0:
            return
        w = min(low, max(4, high_tile // n_rows))  # columns of a tile
        n_col_tiles = low // w
        tile = n_rows * w
        for task in numba.prange(n_b * n_col_tiles):  # the high qubits, all rows x w columns at a time
            b = task // n_col_tiles
            c0 = (task % n_col_tiles) * w
            buf = np.empty(2 * tile)
            for r in range(n_rows):
                for c in range(w):
                    v = psi[b, r * low + c0 + c]
                    buf[r * w + c] = v.real
                    buf[tile + r * w + c] = v.imag
            for j in range(qubits.shape[0]):
                s = 1 << qubits[j]
                if s >= low:
                    if real:
                        real_gate(buf, 2 * tile, (s // low) * w, rs[b, j])
                    else:
                        complex_gate(buf, tile, (s // low) * w, ms[b, j])
            for r in range(n_rows):
                if real:
                    h = dl_hi[b, r]
                    for c in range(w):
                        psi[b, r * low + c0 + c] = complex(buf[r * w + c], buf[tile + r * w + c]) * h
                else:
                    for c in range(w):
                        psi[b, r * low + c0 + c] = complex(buf[r * w + c], buf[tile + r * w + c])

    return layer


@functools.lru_cache(maxsize=1)
def _cpu_one_qubit():
    """A compiled one-qubit gate over a block of states (CPU), or None without numba.

    numpy's array code pays an inner loop of 2^q elements per pair of slices: for the low
    qubits that is a loop of one or two elements, several times slower than a plain loop.
    """
    try:
        import numba  # noqa: PLC0415 - optional speed-up; the array code is the fallback
    except ImportError:
        return None

    @numba.njit(parallel=True, cache=True, nogil=True)
    def one_qubit(psi, m, q):
        stride = 1 << q
        size = psi.shape[1]
        for bi in numba.prange(psi.shape[0]):
            m00, m01, m10, m11 = m[bi, 0, 0], m[bi, 0, 1], m[bi, 1, 0], m[bi, 1, 1]
            for base in range(0, size, 2 * stride):
                for k in range(base, base + stride):
                    a0 = psi[bi, k]
                    a1 = psi[bi, k + stride]
                    psi[bi, k] = m00 * a0 + m01 * a1
                    psi[bi, k + stride] = m10 * a0 + m11 * a1

    return one_qubit


# a one-qubit matrix whose real form leaves an imaginary part above this is applied as complex
REAL_FORM_TOLERANCE = 1e-14


def _unit(z: np.ndarray) -> np.ndarray:
    """``z / |z|``, and 1 where ``z`` is 0."""
    a = np.abs(z)
    return np.where(a > 0, z / np.where(a > 0, a, 1), 1)


def _real_form(ms: np.ndarray):
    """Each 2x2 matrix ``U = ms[..]`` as ``diag(l) @ R @ diag(1, r)``, ``R`` real, ``|l| = |r| = 1``.

    A unitary ``U`` has one (its rows' phases are ``l``; ``r`` is the phase between its columns),
    and then a gate costs real arithmetic on the real and imaginary parts alike. Each phase is
    taken from the larger of the entries that fix it, so a zero entry's sign or rounding does not
    decide it; ``r`` is taken within +-pi/2 of 1 (a sign goes into ``R``), and phases within
    :data:`REAL_FORM_TOLERANCE` of 1 are 1.

    Returns:
        ``(l (..., 2), R (..., 2, 2) float64, r)`` with ``r`` of shape (..., 2), or None where
        every ``r`` is 1; None (no form) where some ``U`` has none to that tolerance (a
        unitary always has one).
    """
    a, b, c, d = ms[..., 0, 0], ms[..., 0, 1], ms[..., 1, 0], ms[..., 1, 1]
    r1 = _unit(np.where(np.abs(a * b) >= np.abs(c * d), np.conj(a) * b, np.conj(c) * d))
    r1 = np.where(r1.real < 0, -r1, r1)
    r1 = np.where(np.abs(r1 - 1) <= REAL_FORM_TOLERANCE, 1, r1)
    l0 = _unit(np.where(np.abs(a) >= np.abs(b), a, b * np.conj(r1)))
    l1 = _unit(np.where(np.abs(c) >= np.abs(d), c, d * np.conj(r1)))
    left = np.stack([l0, l1], axis=-1)
    right = np.stack([np.ones_like(r1), r1], axis=-1)
    full = np.conj(left)[..., :, None] * ms * np.conj(right)[..., None, :]
    if np.any(np.abs(full.imag) > REAL_FORM_TOLERANCE):
        return None
    return left, np.ascontiguousarray(full.real), None if np.all(r1 == 1) else right


def _tensor_tables(vectors: np.ndarray, qubits: np.ndarray, n: int, low_bits: int, absent=(1, 1)):
    """``(x)_q v_q`` of each binding, ``v_q = vectors[:, j]`` on qubit ``q = qubits[j]`` and
    ``absent`` on the others (``(1, 1)``: a diagonal's; ``(1, 0)``: ``|0>``), as two tables: over
    the low ``min(n, low_bits)`` index bits and over the rest (the element of index ``i`` is
    ``lo[i mod 2^low] * hi[i >> low]``). Used by the compiled paths only (numba is there)."""
    b = vectors.shape[0]
    per_qubit = np.empty((b, n, 2), dtype=np.complex128)
    per_qubit[:] = np.asarray(absent, dtype=np.complex128)
    per_qubit[:, np.asarray(qubits, dtype=np.int64)] = vectors
    m = min(n, low_bits)
    lo = np.empty((b, 1 << m), dtype=np.complex128)
    hi = np.empty((b, 1 << (n - m)), dtype=np.complex128)
    kernel = _cpu_tensor()
    kernel(per_qubit[:, :m], lo)
    kernel(per_qubit[:, m:], hi)
    return lo, hi


@functools.lru_cache(maxsize=1)
def _cpu_tensor():
    """``tensor(v, out)``: ``out[b] = v[b, k-1] (x) ... (x) v[b, 0]`` (qubit j the bit j of the
    index), compiled: a few microseconds where numpy's steps cost ~10 each."""
    import numba  # noqa: PLC0415 - the compiled paths that call this have numba

    @numba.njit(cache=True, nogil=True)
    def tensor(v, out):
        for b in range(out.shape[0]):
            out[b, 0] = 1.0
            size = 1
            for q in range(v.shape[1]):
                v0 = v[b, q, 0]
                v1 = v[b, q, 1]
                for k in range(size):  # the upper half from the lower one, then the lower in place
                    out[b, size + k] = v1 * out[b, k]
                    out[b, k] = v0 * out[b, k]
                size *= 2

    return tensor


@dataclass
class _LayerForm:
    """A layer's matrices for some bindings, as the compiled layer takes them (:func:`_cpu_layer`):
    in real form where every matrix has one, else as complex matrices."""

    qubits: np.ndarray  # int64, distinct
    ms: np.ndarray | None  # (B, k, 2, 2) complex, where there is no real form
    left: np.ndarray | None = None  # (B, k, 2) phases
    rs: np.ndarray | None = None  # (B, k, 2, 2) float64
    right: np.ndarray | None = None  # (B, k, 2) phases, None where all are 1

    @classmethod
    def of(cls, step: _Layer, ms: np.ndarray, n: int) -> _LayerForm:
        qubits = np.array([one.qubit for one in step.steps], dtype=np.int64)
        form = _real_form(ms)
        if form is None:  # (no real form to rounding) the complex matrices as they are
            return cls(qubits, np.ascontiguousarray(ms, dtype=np.complex128))
        return cls(qubits, None, *form)

    def rows(self, sl: slice) -> _LayerForm:
        """The form of the bindings ``sl``."""
        def cut(a):
            return None if a is None else a[sl]
        return _LayerForm(self.qubits, cut(self.ms), cut(self.left), cut(self.rs), cut(self.right))


def _run_layer(kernel, psi: np.ndarray, form: _LayerForm, n: int) -> np.ndarray:
    """One layer on a block of states through the compiled kernel, in place."""
    b = psi.shape[0]
    none = np.zeros((b, 0), dtype=np.complex128)
    if form.ms is not None:
        kernel(psi, np.zeros((0, 0, 2, 2)), np.ascontiguousarray(form.ms), form.qubits, none, none, none, none,
               LAYER_LOW_BITS, LAYER_HIGH_TILE)
        return psi
    dl_lo, dl_hi = _tensor_tables(form.left, form.qubits, n, LAYER_LOW_BITS)
    dr_lo, dr_hi = (none, none) if form.right is None else _tensor_tables(form.right, form.qubits, n,
                                                                         LAYER_LOW_BITS)
    kernel(psi, form.rs, np.zeros((0, 0, 2, 2), dtype=np.complex128), form.qubits, dl_lo, dl_hi, dr_lo, dr_hi,
           LAYER_LOW_BITS, LAYER_HIGH_TILE)
    return psi


def _layers(steps: list) -> list:
    """``steps`` with each run of one-qubit steps as one :class:`_Layer`; the steps of a run on
    one qubit become one (they commute with the run's others), so a layer's qubits are distinct."""
    out: list = []
    for step in steps:
        if isinstance(step, _OneQubit):
            if not (out and isinstance(out[-1], _Layer)):
                out.append(_Layer([]))
            same = [one for one in out[-1].steps if one.qubit == step.qubit]
            if same:
                same[0].matrices.extend(step.matrices)
            else:
                out[-1].steps.append(_OneQubit(step.qubit, list(step.matrices)))
        else:
            out.append(step)
    return out


def _rotation(name: str, p: list) -> np.ndarray:
    """(B, 2, 2) matrices of a rotation gate for B values of its parameters (Qiskit's conventions)."""
    out = np.zeros((len(p[0]), 2, 2), dtype=np.complex128)
    if name in ("rx", "ry", "r", "u", "u3"):
        c, s = np.cos(p[0] / 2), np.sin(p[0] / 2)
    if name == "rx":
        out[:, 0, 0] = out[:, 1, 1] = c
        out[:, 0, 1] = out[:, 1, 0] = -1j * s
    elif name == "ry":
        out[:, 0, 0] = out[:, 1, 1] = c
        out[:, 0, 1], out[:, 1, 0] = -s, s
    elif name == "rz":
        out[:, 0, 0], out[:, 1, 1] = np.exp(-0.5j * p[0]), np.exp(0.5j * p[0])
    elif name in ("p", "u1"):
        out[:, 0, 0], out[:, 1, 1] = 1, np.exp(1j * p[0])
    elif name == "r":  # exp(-i theta/2 (cos(phi) X + sin(phi) Y))
        out[:, 0, 0] = out[:, 1, 1] = c
        out[:, 0, 1] = -1j * np.exp(-1j * p[1]) * s
        out[:, 1, 0] = -1j * np.exp(1j * p[1]) * s
    else:  # u, u3
        out[:, 0, 0] = c
        out[:, 0, 1] = -np.exp(1j * p[2]) * s
        out[:, 1, 0] = np.exp(1j * p[1]) * s
        out[:, 1, 1] = np.exp(1j * (p[1] + p[2])) * c
    return out


def _is_monomial(m: np.ndarray) -> bool:
    return bool(np.all(np.count_nonzero(np.abs(m) > 1e-14, axis=1) == 1))


def _monomial(n: int, gates: list) -> _Monomial:
    """The gather and phase of a run of monomial gates: psi'[i] = phase[i] * psi[index[i]]."""
    out = np.arange(1 << n, dtype=np.int64)  # the output index i
    idx = out.copy()
    phase = np.ones(1 << n, dtype=np.complex128)
    for qs, m in gates:
        col = np.argmax(np.abs(m) > 1e-14, axis=1)  # row t -> its one column
        t = np.zeros_like(out)
        for k, q in enumerate(qs):
            t |= ((out >> q) & 1) << k
        c = col[t]
        j = out.copy()
        for k, q in enumerate(qs):
            j = (j & ~(1 << q)) | (((c >> k) & 1) << q)
        new_phase = m[t, c] * phase[j]
        idx, phase = idx[j], new_phase
    trivial = np.allclose(phase, 1, atol=0, rtol=0)
    return _Monomial(idx, None if trivial else phase)


# A GPU block's one-qubit layers through batched.cu (qsim_tc.batched_gpu: one pass a gate, the
# array code takes about six; 1,000 bindings of a 16-qubit EfficientSU2 0.166 s against 0.359 on
# an H100). False: the array code
GPU_LAYER_KERNEL = True


def _apply(step, psi, v, n: int, xp, layer_ms=None):
    """Apply one step to a block of states (b, 2^n); ``layer_ms``: a layer's (b, k, 2, 2) matrices
    where already formed."""
    b = psi.shape[0]
    if isinstance(step, _Monomial):
        if not hasattr(step, "_dev") or step._dev[0] is not xp:  # device copies, made once
            step._dev = (xp, xp.asarray(step.index),
                         None if step.phase is None else xp.asarray(step.phase.astype(psi.dtype)))
        _, index, phase = step._dev
        out = xp.take(psi, index, axis=1)
        if phase is not None:
            out *= phase[None, :]
        return out
    if isinstance(step, _Layer):
        if layer_ms is None:
            layer_ms = np.stack([_one_matrix(one, v) for one in step.steps], axis=1)  # (b, k, 2, 2)
        kernel = _cpu_layer() if xp is np else None
        if xp is not np and GPU_LAYER_KERNEL:
            from qsim_tc import batched_gpu  # noqa: PLC0415 - GPU code, imported where it runs

            return batched_gpu.layer(psi, layer_ms, [one.qubit for one in step.steps])
        if kernel is None:
            for j, one in enumerate(step.steps):
                psi = _one_qubit(psi, layer_ms[:, j], one.qubit, xp)
            return psi
        return _run_layer(kernel, psi, _LayerForm.of(step, layer_ms, n), n)
    if isinstance(step, _OneQubit):
        return _one_qubit(psi, _one_matrix(step, v), step.qubit, xp)
    # a dense gate: its qubits as the last axes (first listed qubit the lowest bit), one matmul
    qs = step.qubits
    k = len(qs)
    m = xp.asarray(np.ascontiguousarray(step.matrix.batch(v)).astype(psi.dtype))
    t = psi.reshape((b,) + (2,) * n)  # axis 1 + (n - 1 - q) holds qubit q
    axes = [1 + n - 1 - q for q in reversed(qs)]
    moved = xp.moveaxis(t, axes, list(range(n + 1 - k, n + 1)))
    shape = moved.shape
    flat = moved.reshape(b, -1, 1 << k)
    out = flat @ xp.swapaxes(m, 1, 2)
    back = xp.moveaxis(out.reshape(shape), list(range(n + 1 - k, n + 1)), axes)
    return xp.ascontiguousarray(back).reshape(b, 1 << n)


def _one_qubit(psi, m: np.ndarray, q: int, xp):
    """Apply the (b, 2, 2) matrices ``m`` on qubit ``q`` of a block of states (b, 2^n)."""
    b = psi.shape[0]
    kernel = _cpu_one_qubit() if xp is np else None
    if kernel is not None:
        kernel(psi, np.ascontiguousarray(m).astype(psi.dtype), q)
        return psi
    m = xp.asarray(np.ascontiguousarray(m).astype(psi.dtype))
    view = psi.reshape(b, -1, 2, 1 << q)
    a0 = view[:, :, 0, :].copy()
    a1 = view[:, :, 1, :]
    m00, m01, m10, m11 = (m[:, i, j][:, None, None] for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)))
    view[:, :, 0, :] = m00 * a0 + m01 * a1
    view[:, :, 1, :] = m10 * a0 + m11 * a1
    return psi
