"""Expectation values of many-term Pauli observables in a few passes over the state.

A Pauli string with letters ``I, X, Y, Z`` is ``i^ny X^x Z^z`` (``x``, ``z`` the bit masks of
its X and Z parts, ``ny`` its number of Y: ``Y = iXZ``), so

    <psi|P|psi> = i^ny * sum_b conj(psi[b ^ x]) * (-1)^popcount(b & z) * psi[b].

All terms with the same X mask share the product vector ``conj(psi[b ^ x]) * psi[b]``; each Z mask
is then a signed sum of it. Splitting the index into high bits (rows) and low bits (columns), the
signs factor as ``row sign * column sign``: a group's column sums for all its distinct low Z
masks are one matrix product with a +-1 matrix, and the row signs finish each term on a small
array. A group with only Z-type terms (``x = 0``) needs ``|psi|^2`` alone. So an observable costs
one pass per distinct X mask (chemistry Hamiltonians have several terms per mask) instead of
one per term, and no operator matrix is built. On the CPU a compiled pass runs every group on
one cache-sized block of rows before the next (:func:`_term_values_cpu`), so the state is read
from memory about once per distinct high part of the X masks.

On a GPU one launch runs every X group (``observables.cu``, :mod:`qsim_tc.observables_gpu`): a
thread block stages a tile of the state in shared memory once, and the partner tile of each
distinct high part of the X masks once, so the state is read about once per distinct high part
there too. The array code (numpy or cupy, ``compiled=False``) is the reference both compiled
passes are tested against.
Values are computed in the state's precision; a letter-string's value is real, its coefficient
may be complex.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

# low index bits that form the columns of the product matrix (its sign matrices are cols x K)
LOW_BITS = 10
# rows of one chunk: bounds the temporaries of a pass (elements = rows x cols)
CHUNK_ELEMENTS = {"cpu": 1 << 19, "gpu": 1 << 24}
_FACTOR = np.array([1.0, -1.0, -1.0, 1.0])  # Re(i^ny W) = FACTOR[ny % 4] * (Re W or Im W)


@dataclass
class PauliTerms:
    """Distinct Pauli letter-strings as bit masks (qubit q = bit q), ``ny`` their Y counts."""

    n_qubits: int
    x: np.ndarray  # int64
    z: np.ndarray  # int64
    ny: np.ndarray  # int64


def _label_masks(label: str, n: int, what: str) -> tuple[int, int, complex]:
    """(x, z, phase) of a label such as ``"-iXZY"`` (its last letter on qubit 0)."""
    letters = label.lstrip("+-ij")
    prefix = label[: len(label) - len(letters)].replace("j", "i")
    phases = {"": 1, "+": 1, "-": -1, "i": 1j, "+i": 1j, "-i": -1j}
    if prefix not in phases:
        raise ValueError(f"{what}: Pauli label {label!r} has an unknown phase prefix {prefix!r}")
    if len(letters) != n:
        raise ValueError(f"{what}: operator acts on {len(letters)} qubits ({label!r}); the state has {n}")
    x = z = 0
    for q, ch in enumerate(reversed(letters)):
        if ch in "XY":
            x |= 1 << q
        if ch in "ZY":
            z |= 1 << q
        if ch not in "IXYZ":
            raise ValueError(f"{what}: Pauli label {label!r} holds {ch!r}; expected only I, X, Y, Z (letters "
                             "I, X, Y, Z, the rightmost on qubit 0)")
    return x, z, phases[prefix]


def terms_of(operator, n: int, what: str):
    """(x masks, z masks, coefficients) of one observable."""
    kind = type(operator).__name__
    if kind in ("SparsePauliOp", "Pauli") and hasattr(operator, "num_qubits"):
        if operator.num_qubits != n:
            raise ValueError(f"{what}: operator acts on {operator.num_qubits} qubits; the state has {n}")
        paulis = operator.paulis if kind == "SparsePauliOp" else operator
        xb = np.atleast_2d(np.asarray(paulis.x, dtype=bool))
        zb = np.atleast_2d(np.asarray(paulis.z, dtype=bool))
        weights = np.left_shift(np.int64(1), np.arange(n, dtype=np.int64))
        x = xb.astype(np.int64) @ weights
        z = zb.astype(np.int64) @ weights
        phase = (-1j) ** np.atleast_1d(np.asarray(paulis.phase, dtype=np.int64))  # the label's own phase
        coeffs = np.asarray(operator.coeffs, dtype=np.complex128) if kind == "SparsePauliOp" else np.ones(1)
        return x, z, coeffs * phase
    if isinstance(operator, str):
        pairs = [(operator, 1.0)]
    elif isinstance(operator, dict):
        pairs = list(operator.items())
    elif isinstance(operator, (list, tuple)) and operator and all(
            isinstance(t, (list, tuple)) and len(t) == 2 and isinstance(t[0], str) for t in operator):
        pairs = list(operator)
    else:
        raise TypeError(f"{what} must be a Pauli label, a qiskit Pauli or SparsePauliOp, a dict "
                        f"{{label: coefficient}} or (label, coefficient) pairs, got {kind}")
    masks = [_label_masks(label, n, what) for label, _ in pairs]
    x = np.array([m[0] for m in masks], dtype=np.int64)
    z = np.array([m[1] for m in masks], dtype=np.int64)
    coeffs = np.array([complex(c) * m[2] for (_, c), m in zip(pairs, masks)], dtype=np.complex128)
    return x, z, coeffs


def collect(observables, n_qubits: int, *, names=None) -> tuple[PauliTerms, np.ndarray]:
    """The distinct terms of all ``observables`` and the (observables x terms) coefficients.

    ``names``: how errors name each observable (default ``"observable i"``)."""
    xs, zs, rows = [], [], []
    for i, o in enumerate(observables):
        x, z, c = terms_of(o, n_qubits, names[i] if names is not None else f"observable {i}")
        xs.append(x)
        zs.append(z)
        rows.append((np.full(len(x), i), c))
    if not xs:
        return PauliTerms(n_qubits, *(np.zeros(0, np.int64),) * 3), np.zeros((0, 0), np.complex128)
    x = np.concatenate(xs)
    z = np.concatenate(zs)
    keys, inverse = np.unique(np.stack([x, z], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    owner = np.concatenate([r[0] for r in rows])
    coeff = np.concatenate([r[1] for r in rows])
    matrix = np.zeros((len(observables), len(keys)), dtype=np.complex128)
    np.add.at(matrix, (owner, inverse), coeff)
    ny = np.array([bin(int(a & b)).count("1") for a, b in keys], dtype=np.int64)
    return PauliTerms(n_qubits, keys[:, 0].copy(), keys[:, 1].copy(), ny), matrix


def expectation_value(state, operator) -> complex:
    """``<psi|O|psi>`` of one observable (as :func:`expectation_values`; errors name it ``operator``)."""
    terms, matrix = collect([operator], state.n_qubits, names=["operator"])
    if matrix.size == 0:
        return 0j
    values = term_values(state.data(), terms, chunk_elements=CHUNK_ELEMENTS[state.device.name])
    return complex((matrix @ values)[0])


def expectation_values(state, observables) -> np.ndarray:
    """``<psi|O|psi>`` of each observable, from a few passes over the state.

    Args:
        state: a :class:`qsim_tc.StateVector` (CPU or GPU).
        observables: a sequence of observables, each a Pauli label (``"XZI"``, optionally with a
            phase prefix such as ``"-iXY"``; the rightmost letter acts on qubit 0), a qiskit
            ``Pauli`` or ``SparsePauliOp``, a dict ``{label: coefficient}`` or a sequence of
            ``(label, coefficient)`` pairs.

    Returns:
        numpy complex128 array, one value per observable (real for Hermitian observables).

    Raises:
        TypeError: an observable of another type. ValueError: a label of another width or with
            letters other than I, X, Y, Z.
    """
    observables = list(observables)
    terms, matrix = collect(observables, state.n_qubits)
    if matrix.size == 0:
        return np.zeros(len(observables), np.complex128)
    values = term_values(state.data(), terms, chunk_elements=CHUNK_ELEMENTS[state.device.name])
    return matrix @ values


def _parity(v, xp):
    """Parity of the set bits of each int64 in ``v`` (0 or 1)."""
    v = v.copy()
    for s in (32, 16, 8, 4, 2, 1):
        v ^= v >> s
    return v & 1


# GPU states take the pass of observables.cu (qsim_tc.observables_gpu; its GPU tests in
# test_observables.py, its indexing against a numpy model on the CPU) on GPUs that have its
# cp.async tile copies (sm_80 and later); False, or an older GPU: the cupy array code, one pass per
# X mask
GPU_KERNEL = True


def term_values(psi, terms: PauliTerms, *, chunk_elements: int = 1 << 18, compiled: bool = True) -> np.ndarray:
    """``<psi|P_t|psi>`` (real, float64 numpy) of each term, one pass per distinct X mask (on the
    CPU with numba, all masks in one blocked pass; on a GPU all masks in one launch, see
    :func:`_term_values_gpu`).

    Both halves of a pair ``(b, b ^ x)`` give conjugate products, so a group with X bits among
    the rows reads only the rows where the highest of them is 0, and doubles the sums.

    Args:
        psi: the amplitudes in logical order, a 1-D numpy or cupy complex array; or a block of
            states, shape (B, 2^n): their rows stack into one taller matrix (the X and Z masks
            of the rows stay below the state's own rows), so a block costs one pass per mask.
        terms: from :func:`collect`.
        chunk_elements: amplitudes per chunk of a pass (the size of the temporaries; the
            compiled passes need none).
        compiled: False runs the array code (numpy or cupy) instead of the compiled pass (on a
            GPU the compiled pass also needs :data:`GPU_KERNEL`).

    Returns:
        shape (T,) for one state, (B, T) for a block.
    """
    xp = _array_module(psi)
    if compiled and xp is not np and GPU_KERNEL and _gpu_pass_runs():
        return _term_values_gpu(psi, terms)
    if compiled and xp is np:
        kernel = _cpu_group_sums()
        if kernel is not None:
            return _term_values_cpu(psi, terms, kernel)
    n = terms.n_qubits
    m = min(n, LOW_BITS)
    cols, rows = 1 << m, 1 << (n - m)
    n_states = psi.shape[0] if psi.ndim == 2 else 1
    a2 = psi.reshape(n_states * rows, cols)
    real = a2.real.dtype
    out = np.zeros((n_states, len(terms.x)), dtype=np.float64)
    lo = xp.arange(cols, dtype=np.int64)
    all_rows = xp.arange(n_states * rows, dtype=np.int64)
    for group in _x_groups(terms):
        x = int(terms.x[group[0]])
        xh, xl = x >> m, x & (cols - 1)
        zl, k_of = np.unique(terms.z[group] & (cols - 1), return_inverse=True)
        zh = xp.asarray(terms.z[group] >> m)
        odd_host = terms.ny[group] % 2 == 1
        need_re, need_im = bool((~odd_host).any()), bool(odd_host.any())
        odd = xp.asarray(odd_host)
        k_of = xp.asarray(k_of.reshape(-1))
        n_k = len(zl)
        signs = (1 - 2 * _parity(lo[:, None] & xp.asarray(zl)[None, :], xp)).astype(real)  # cols x K
        scale = _FACTOR[terms.ny[group] % 4]
        if xh:  # the rows whose highest X bit is 0; their partners hold the conjugate products
            top = 1 << (xh.bit_length() - 1)
            row_set = all_rows[(all_rows & top) == 0]
            scale = 2 * scale
        else:
            row_set = all_rows
        per_state = len(row_set) // n_states  # rows of each state in the row set, consecutive
        chunk = per_state * max(1, chunk_elements // (cols * per_state)) if chunk_elements >= cols * per_state \
            else max(1, chunk_elements // cols)
        acc = xp.zeros((n_states, len(group)), dtype=np.float64)
        for i0 in range(0, len(row_set), chunk):
            r_idx = row_set[i0:i0 + chunk]
            a = a2[int(r_idx[0]):int(r_idx[0]) + len(r_idx)] if xh == 0 else xp.take(a2, r_idx, axis=0)
            if x == 0:
                part = ((a.real * a.real + a.imag * a.imag) @ signs)[:, k_of]  # (rows, terms), all real
            else:
                nr = len(r_idx)
                # a term needs Re of its sum (even number of Y) or Im (odd): only those are formed
                parts = (0, 1) if need_re and need_im else ((0,) if need_re else (1,))
                g = xp.take(a2, r_idx ^ xh, axis=0)
                if xl:
                    g = xp.take(g, lo ^ xl, axis=1)
                g = xp.conj(g)
                g *= a
                c = xp.stack([g.real if p == 0 else g.imag for p in parts])
                w = (c.reshape(len(parts) * nr, cols) @ signs).reshape(len(parts), nr, n_k)  # column sums
                re_w, im_w = w[0], w[-1]
                part = xp.where(odd[None, :], im_w[:, k_of], re_w[:, k_of])
            row_sign = (1 - 2 * _parity(r_idx[:, None] & zh[None, :], xp)).astype(real)
            signed = part * row_sign
            if len(r_idx) >= per_state:  # whole states: one sum each
                s0 = i0 // per_state
                acc[s0:s0 + len(r_idx) // per_state] += signed.reshape(-1, per_state, len(group)).sum(axis=1)
            else:  # part of one state
                acc[i0 // per_state] += signed.sum(axis=0)
        acc = acc.get() if hasattr(acc, "get") else acc
        out[:, group] = acc * scale
    return out if psi.ndim == 2 else out[0]


def _x_groups(terms: PauliTerms) -> list:
    """Indices of the terms, one array per distinct X mask (ascending)."""
    order = np.argsort(terms.x, kind="stable")
    bounds = np.flatnonzero(np.diff(terms.x[order])) + 1
    return np.split(order, bounds)


# low index bits that form the columns of the compiled CPU pass: a row's products and its
# signed column sums stay in the L1 cache
CPU_LOW_BITS = 8
# amplitudes of one block of rows of the compiled CPU pass: a block and its partner blocks stay
# in the L2 cache while every X group runs on them
CPU_BLOCK_ELEMENTS = 1 << 14
# amplitudes x X groups below which the compiled CPU pass runs on one thread
CPU_PARALLEL_WORK = 1 << 24


def _term_values_cpu(psi, terms: PauliTerms, kernel) -> np.ndarray:
    """:func:`term_values` on the CPU: all X groups in one compiled pass, with no temporaries.

    The state is cut into blocks of rows that fit the L2 cache; each block runs every X group
    while it is there, reading the partner rows ``r ^ xh`` of each group. The groups go in
    ascending order of X, so consecutive groups read the same partner block (an X mask's
    bits above the block's) and the state is read from memory about once per distinct high
    part of X rather than once per X mask. Within a row, the products and their signed column
    sums stay in the L1 cache; nothing the size of the state is written.
    """
    n = terms.n_qubits
    m = min(n, CPU_LOW_BITS)
    cols, rows = 1 << m, 1 << (n - m)
    n_states = psi.shape[0] if psi.ndim == 2 else 1
    a2 = np.ascontiguousarray(psi).reshape(n_states * rows, cols)
    lo = np.arange(cols, dtype=np.int64)
    block = max(1, min(rows, CPU_BLOCK_ELEMENTS // cols))  # rows, a power of two within a state
    groups = _x_groups(terms)
    g_x = np.array([terms.x[g[0]] for g in groups], dtype=np.int64)
    g_xh, g_xl = g_x >> m, g_x & (cols - 1)
    # the rows whose highest X bit is 0; their partners hold the conjugate products
    g_top = np.array([1 << (int(h).bit_length() - 1) if h else 0 for h in g_xh], dtype=np.int64)
    order = np.concatenate(groups)
    t_off = np.zeros(len(groups) + 1, dtype=np.int64)
    t_off[1:] = np.cumsum([len(g) for g in groups])
    # a term needs the Re (even number of Y) or Im (odd) of its column sums: only the
    # (low Z mask, part) pairs that some term of the group needs are formed
    odd = (terms.ny[order] % 2 == 1).astype(np.int64)
    group_of = np.repeat(np.arange(len(groups)), np.diff(t_off))
    keys = np.stack([group_of, terms.z[order] & (cols - 1), odd], axis=1)
    pairs, pair_of = np.unique(keys, axis=0, return_inverse=True)  # sorted by group
    pair_of = pair_of.reshape(-1)
    p_off = np.searchsorted(pairs[:, 0], np.arange(len(groups) + 1)).astype(np.int64)
    pair_of = pair_of - p_off[group_of]  # index within its group
    signs = (1 - 2 * _parity(pairs[:, 1:2] & lo[None, :], np)).astype(np.float64)  # P x cols
    args = (a2, rows, block, g_xh, g_xl, g_top, p_off, signs, pairs[:, 2] == 1, t_off, pair_of, terms.z[order] >> m)
    if a2.size * len(groups) < CPU_PARALLEL_WORK:
        # too short for a parallel region: on a loaded machine its threads wait for one another
        import numba  # noqa: PLC0415 - the kernel exists, so numba does

        threads = numba.get_num_threads()
        numba.set_num_threads(1)  # for this thread only
        try:
            sums = kernel(*args)
        finally:
            numba.set_num_threads(threads)
    else:
        sums = kernel(*args)
    scale = _FACTOR[terms.ny[order] % 4] * np.where(g_xh[group_of] != 0, 2.0, 1.0)
    out = np.zeros((n_states, len(terms.x)), dtype=np.float64)
    out[:, order] = sums * scale
    return out if psi.ndim == 2 else out[0]


@functools.lru_cache(maxsize=1)
def _cpu_group_sums():
    """The compiled pass of all X groups over a block of states (CPU), or None without numba.

    numpy needs a gather, a conjugate, a product and a matrix product per group, each a pass
    through memory with temporaries of the state's size; fused in one loop, each amplitude
    pair is read once per group from the cache and nothing else leaves it.

    ``kernel(a2, rows, block, g_xh, g_xl, g_top, p_off, signs, pair_im, t_off, pair_of, zh)``
    returns (states, T) sums ``sum_b (-1)^|b & z_t| * (Re or Im)(conj(a[b ^ x]) a[b])`` over the
    rows ``r`` with ``r & top == 0``. Group ``g`` (row and column parts of its X mask ``g_xh``,
    ``g_xl``; ``g_top``) owns pairs ``p_off[g]:p_off[g+1]`` and terms ``t_off[g]:t_off[g+1]``;
    pair ``p`` is the signed column sum (``signs[p]``) of Re, or of Im where ``pair_im[p]``;
    term ``t`` takes its group's pair ``pair_of[t]`` and the row sign of ``zh[t]``.
    """
    try:
        import numba  # noqa: PLC0415 - optional speed-up; the array code is the fallback
    except ImportError:
        return None

    # reassociation lets the signed sums vectorise; they stay sums of the same products
    @numba.njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def group_sums(a2, rows, block, g_xh, g_xl, g_top, p_off, signs, pair_im, t_off, pair_of, zh):
        n_rows, cols = a2.shape
        n_groups = g_xh.shape[0]
        n_t = zh.shape[0]
        max_p = 1
        for g in range(n_groups):
            max_p = max(max_p, p_off[g + 1] - p_off[g])
        n_blocks = n_rows // block
        partial = np.zeros((n_blocks, n_t))
        for bi in numba.prange(n_blocks):
            re = np.zeros(cols)
            im = np.zeros(cols)
            w = np.empty(max_p)
            u_row = np.empty(cols, dtype=a2.dtype)
            for g in range(n_groups):
                xh, xl, top = g_xh[g], g_xl[g], g_top[g]
                p0, p1 = p_off[g], p_off[g + 1]
                want_re = False
                want_im = False
                for p in range(p0, p1):
                    if pair_im[p]:
                        want_im = True
                    else:
                        want_re = True
                for r in range(bi * block, (bi + 1) * block):
                    if r & top:
                        continue
                    pr = r ^ xh
                    for j in range(cols):  # the partner row in column order j ^ xl
                        u_row[j] = a2[pr, j ^ xl]
                    if want_re:
                        for j in range(cols):
                            re[j] = u_row[j].real * a2[r, j].real + u_row[j].imag * a2[r, j].imag
                    if want_im:
                        for j in range(cols):
                            im[j] = u_row[j].real * a2[r, j].imag - u_row[j].imag * a2[r, j].real
                    for p in range(p0, p1):
                        src = im if pair_im[p] else re
                        acc = 0.0
                        for j in range(cols):
                            acc += signs[p, j] * src[j]
                        w[p - p0] = acc
                    for t in range(t_off[g], t_off[g + 1]):
                        q = r & zh[t]  # the row's sign: parity of its Z bits
                        q ^= q >> 32
                        q ^= q >> 16
                        q ^= q >> 8
                        q ^= q >> 4
                        q ^= q >> 2
                        q ^= q >> 1
                        if q & 1:
                            partial[bi, t] -= w[pair_of[t]]
                        else:
                            partial[bi, t] += w[pair_of[t]]
        n_states = n_rows // rows
        per_state = rows // block
        out = np.zeros((n_states, n_t))
        for s in range(n_states):
            for b in range(s * per_state, (s + 1) * per_state):
                for t in range(n_t):
                    out[s, t] += partial[b, t]
        return out

    return group_sums


def _gpu_pass_runs() -> bool:
    """Whether the current GPU runs observables.cu (``cp.async``: sm_80 and later)."""
    from qsim_tc import observables_gpu  # noqa: PLC0415 - GPU code, imported where it runs

    return observables_gpu.pass_runs_on_current_device()


def _term_values_gpu(psi, terms: PauliTerms) -> np.ndarray:
    """:func:`term_values` on a GPU: all X groups in one launch (per 4096 terms), the state read
    about once per distinct high part of the X masks (:mod:`qsim_tc.observables_gpu`)."""
    from qsim_tc import observables_gpu  # noqa: PLC0415 - GPU code, imported where it runs

    out = np.zeros((psi.shape[0] if psi.ndim == 2 else 1, len(terms.x)), dtype=np.float64)
    order = np.concatenate(_x_groups(terms)) if len(terms.x) else np.zeros(0, np.int64)
    sums, tb = observables_gpu.term_sums(psi, terms, order)
    # the tiles whose top bit of x >> tb is 0 counted each pair once: its partner's products are
    # the conjugates
    scale = _FACTOR[terms.ny[order] % 4] * np.where((terms.x[order] >> tb) != 0, 2.0, 1.0)
    out[:, order] = sums * scale
    return out if psi.ndim == 2 else out[0]


def _array_module(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy  # noqa: PLC0415 - only for device arrays

    return cupy
