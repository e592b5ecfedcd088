"""Power-of-two scaling of lines (rows of A, columns of B) to integers: the bound that keeps the
exact integer product inside ``[-P/4, P/4]``.

A line ``a`` (for complex operands: its real and imaginary parts, 2k values) is scaled by
``2^s`` with ``s = alpha - E`` and truncated toward zero, ``a' = trunc(a 2^s)``, where ``2^E``
is an upper bound of ``||a||_2``. Truncation never grows a magnitude, so ``||a'||_2 <= 2^alpha``
and, by Cauchy-Schwarz, ``sum_k |a'_k| |b'_k| <= ||a'|| ||b'|| <= 2^(alpha + beta) <= P/4`` for
the real and the imaginary part of every output element alike (each is a dot product of two
2k-vectors whose norms are the complex line norms). A bound on ``max |a_k|`` times ``k`` would
also do; Cauchy-Schwarz is never looser and is much tighter for lines whose magnitudes spread.

``E`` is computed from integers, so it is exact and does not depend on the order of a reduction
(the CPU and the GPU find the same ``E`` bit for bit): with ``e_k`` the frexp exponent of element
k (``|a_k| < 2^e_k``), ``e = max e_k`` and the unit ``u0 = 2^(e - G - 4)``,

* an element with ``e_k >= e - G`` is bounded by ``m_k 2^(e_k - 4)``, ``m_k = ceil(|a_k| 2^(4 -
  e_k))`` in 8..16 (a 4-bit mantissa rounded up: at most 1/8 above ``|a_k|``), so its square is
  at most ``m_k^2 4^(e_k - e + G)`` units ``u0^2``;
* a smaller nonzero element is below ``2^(e - G - 1) = 8 u0``: 64 units;
* ``Sigma`` (an int64 sum of at most ``2^8 4^G = 2^40`` per element) bounds ``||a||^2 / u0^2``
  and ``E = e - G - 4 + ceil(ceil(log2 Sigma) / 2)``.

``2^E < 2 * 1.125 * ||a|| * sqrt(1 + k' 2^-32)``: the bound costs at most 1.17 bits of the
``alpha`` kept (:func:`gemm.ozaki.crt.moduli.error_coefficient` counts it). Scale invariance
follows: multiplying a line by ``2^j`` shifts every ``e_k`` and ``E`` by ``j`` and leaves
``a'`` unchanged. An all-zero line has ``Sigma = 0``; its shift is 0 and its residues are zero.
NaN and Inf are counted so the method can raise :class:`gemm.NonFiniteError` before any product.
"""

from __future__ import annotations

import numpy as np

G = 16  # exponents this far below the line's largest are bounded coarsely (8 u0)
SPLIT40 = 2.0 ** 40  # integers up to 2^80 are split as hi * 2^40 + lo for the residues


def bit_length(v: np.ndarray) -> np.ndarray:
    """``int.bit_length`` of each element of a non-negative int64 array (exact, no float)."""
    v = v.astype(np.int64, copy=True)
    out = np.zeros(v.shape, dtype=np.int64)
    for sh in (32, 16, 8, 4, 2, 1):
        big = v >= (np.int64(1) << sh)
        v = np.where(big, v >> sh, v)
        out += big * sh
    return out + (v > 0)


ZERO_LINE = -(1 << 30)  # E of an all-zero line: its shift is 0 and its residues are zero
DCAP = 256  # deltas E - e_k are counted up to here (an element this far down loses every bit)


def line_exponents(parts: tuple[np.ndarray, ...], want_hist: bool) -> tuple[np.ndarray, int, np.ndarray | None]:
    """Norm exponents ``E`` (``||line||_2 <= 2^E``) of the lines of an operand.

    Args:
        parts: the line-major values, ``(lines, K)`` float64 each (real part, and imaginary part
            for complex operands).
        want_hist: also count the depths ``d = E - e_k`` of the nonzero elements.

    Returns:
        ``(E, bad, hist)``: int64 ``(lines,)`` (:data:`ZERO_LINE` for all-zero lines), the count
        of NaN/Inf elements (E is meaningless when it is not 0) and, when asked, int64
        ``(DCAP + 1,)`` counts of ``min(max(d, 0), DCAP)``.
    """
    lines = parts[0].shape[0]
    bad = sum(int(q.size - np.count_nonzero(np.isfinite(q))) for q in parts)
    if bad:
        return np.zeros(lines, dtype=np.int64), bad, None
    low = np.iinfo(np.int64).min
    exps = [np.frexp(q)[1].astype(np.int64) for q in parts]  # |x| < 2^e; frexp(0) gives 0
    nz = [q != 0 for q in parts]
    emax = np.full(lines, low, dtype=np.int64)
    for e, z in zip(exps, nz):
        emax = np.maximum(emax, np.where(z, e, low).max(axis=1))
    zero_line = emax == low
    emax = np.where(zero_line, 0, emax)
    sigma = np.zeros(lines, dtype=np.int64)
    for q, e, z in zip(parts, exps, nz):
        g = e - emax[:, None] + G
        m = np.ceil(np.ldexp(np.abs(q), 4 - e)).astype(np.int64)  # 8..16 for nonzero q
        term = np.where(g >= 0, (m * m) << (2 * np.maximum(g, 0)), 64)
        sigma += np.where(z, term, 0).sum(axis=1)
    c = (bit_length(np.maximum(sigma - 1, 0)) + 1) // 2  # ceil(ceil(log2 sigma) / 2)
    E = np.where(zero_line, ZERO_LINE, emax - G - 4 + c)
    hist = None
    if want_hist:
        d = np.concatenate([np.clip(E[:, None] - e, 0, DCAP)[z] for e, z in zip(exps, nz)])
        hist = np.bincount(d, minlength=DCAP + 1).astype(np.int64)
    return E, 0, hist


def shifts(E: np.ndarray, alpha: int) -> np.ndarray:
    """Scale shifts ``s = alpha - E`` (0 for all-zero lines): ``trunc(a 2^s)`` has 2-norm <= 2^alpha."""
    return np.where(E == ZERO_LINE, 0, alpha - E)


def mean_loss(hist: np.ndarray, bits: int, alpha: int) -> float:
    """Mean over the nonzero elements of the bits lost against a ``bits``-bit target.

    An element ``d`` binades below its line's norm bound keeps ``alpha - d`` bits above the
    truncation; against a native product, which rounds each term to ``bits`` (53) bits, its
    truncation error is ``2^loss`` times larger, ``loss = clamp(bits + d - alpha, 0, bits)``.
    """
    nz = int(hist.sum())
    if nz == 0:
        return 0.0
    d = np.arange(hist.size)
    return float((hist * np.clip(bits + d - alpha, 0, bits)).sum()) / nz


def scaled_integers(q: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a' = trunc(q 2^shift)`` split as ``hi * 2^40 + lo`` (exact float64 integers).

    ``|a'| <= 2^alpha < 2^80`` is an exact integer in float64 (a power-of-two scaling and a
    truncation), and ``hi = floor(a' 2^-40)`` (``|hi| < 2^40``), ``lo = a' - hi 2^40`` (in
    ``[0, 2^40)``) are exact too, small enough for the residue arithmetic of
    :func:`gemm.ozaki.crt.cpu.mod`.
    """
    x = np.trunc(np.ldexp(q, shift[:, None]))
    hi = np.floor(x * (1.0 / SPLIT40))
    return hi, x - hi * SPLIT40
