"""Residues as an exact INT8 matrix product: the arithmetic of ``crt.cu``'s ``crt_residues_mma``
and its numpy model (the CPU check that it gives :func:`gemm.ozaki.crt.cpu.residues` bit for bit).

A scaled integer ``t = trunc(q 2^shift)`` (``|t| <= 2^bits``, :func:`gemm.ozaki.crt.scale.
scaled_integers`) is split into ``L`` balanced 8-bit limbs, ``t = sum_j l_j 2^(8 j)`` with ``l_j``
in ``[-128, 127]``: with ``B`` the byte 0x80 repeated ``L`` times, ``u = t + B`` lies in
``[0, 2^(8 L))`` and the limbs are the bytes of ``u XOR B`` (no digit loop, no carries). An element
is a row of 32 limb bytes, Re's in 0-15 and Im's in 16-31. Every residue the residue stage writes
is ``(cr Re + ci Im) mod p_i`` for a small combination ``(cr, ci)`` of the complex form
(:func:`combinations`), so all of them are one product ``limbs @ table.T`` with the table's column
``(i, slot)`` holding ``sym(cr 2^(8 j) mod p_i)`` and ``sym(ci 2^(8 j) mod p_i)``: an integer
representative ``v`` of the residue class, ``|v| <= 32 * 128^2 = 2^19``, exact in INT32. One
rounded quotient ``q = rint(v / p)`` (FP32, :func:`gemm.ozaki.crt.moduli.recip32`) and ``v - q p``
give the symmetric residue (``crt.cu`` ``red_sym``; for p = 256 a representative in [-128, 128]
whose byte is the residue's).

Nothing here needs a GPU; :mod:`gemm.ozaki.crt.gpu` uploads :func:`fragments` and :func:`bias`.
"""

from __future__ import annotations

import numpy as np

from gemm.ozaki.crt import cpu, scale
from gemm.ozaki.crt.moduli import Moduli, recip32

ROW = 32  # limb bytes an element: 16 of Re, 16 of Im
MAX_LIMBS = 16  # limbs a part: |t| < 2^127
V_BOUND = 2**22  # |v| below this: 1.5 * 2^23 + v is an exact float and red_sym's bound holds


def limb_count(bits: int) -> int:
    """Limbs ``L`` for scaled integers of ``bits`` bits (``|t| <= 2^bits``): the least ``L`` with
    ``2^bits <= 127 (2^(8 L) - 1) / 255``, the largest magnitude of balanced ``L``-limb numbers.

    Raises:
        ValueError: ``bits`` needs more than :data:`MAX_LIMBS` limbs.
    """
    L = 1
    while (1 << bits) * 255 > 127 * ((1 << (8 * L)) - 1):
        L += 1
    if L > MAX_LIMBS:
        raise ValueError(f"scaled integers of {bits} bits need {L} limbs; at most {MAX_LIMBS} fit an element's row")
    return L


def bias(bits: int) -> tuple[int, int]:
    """``B`` (0x80 in each of the :func:`limb_count` low bytes) as its (low, high) 64-bit words."""
    b = int.from_bytes(b"\x80" * limb_count(bits), "little")
    return b & ((1 << 64) - 1), b >> 64


def combinations(form: str | None, role: str) -> tuple[tuple[int, int], ...]:
    """Per output slot of a modulus, the ``(cr, ci)`` with residue ``(cr Re + ci Im) mod p``, in
    the order of ``crt_residues_mma``'s columns: real ``Re``; 2m ``Re + s Im``, ``Re - s Im`` (``s``
    given as 2 and -2 here, resolved by :func:`table`); 3m ``Re``, ``Im``, ``Re + Im``; 4m A lines
    ``Re``, ``Im`` (``[Re | Im]``); 4m B lines ``Re``, ``-Im`` (line 2l ``[Re | -Im]``), ``Im``,
    ``Re`` (line 2l + 1 ``[Im | Re]``)."""
    if form is None:
        return ((1, 0),)
    if form == "2m":
        return ((1, 2), (1, -2))
    if form == "3m":
        return ((1, 0), (0, 1), (1, 1))
    if form == "4m":
        return ((1, 0), (0, 1)) if role == "a" else ((1, 0), (0, -1), (0, 1), (1, 0))
    raise ValueError(f"complex form {form!r} is not valid; expected None, '4m', '3m' or '2m'")


def _sym(r: int, p: int) -> int:
    r %= p
    return r - p if r > (p - 1) // 2 else r


def table(mods: Moduli, form: str | None, role: str) -> np.ndarray:
    """The coefficient matrix: int8 ``(n * slots, ROW)``, column ``i * slots + slot`` of modulus i.

    Entry ``j`` (Re's limb j) is ``sym(cr 2^(8 j) mod p)``, entry ``16 + j`` (Im's) is
    ``sym(ci 2^(8 j) mod p)``, with ``ci = +-s`` (``s^2 = -1 mod p``) for the 2m form."""
    combos = combinations(form, role)
    out = np.zeros((len(mods) * len(combos), ROW), dtype=np.int8)
    for i, p in enumerate(mods.values):
        s = int(mods.table[i, 3])
        for slot, (cr, ci) in enumerate(combos):
            if form == "2m":
                ci = s if ci > 0 else -s
            for j in range(MAX_LIMBS):
                w = pow(2, 8 * j, p)
                out[i * len(combos) + slot, j] = _sym(cr * w, p)
                out[i * len(combos) + slot, MAX_LIMBS + j] = _sym(ci * w, p)
    return out


def fragments(tab: np.ndarray) -> np.ndarray:
    """The table as ``mma.sync`` m16n8k32 B fragments: uint32 ``(n-tiles, 32, 2)``; lane
    ``4 g + t`` of n-tile ``nt`` holds bytes ``4t .. 4t + 3`` and ``16 + 4t ..`` of column
    ``8 nt + g`` (columns past the table are zero)."""
    ncol = tab.shape[0]
    nt = -(-ncol // 8)
    padded = np.zeros((nt * 8, ROW), dtype=np.int8)
    padded[:ncol] = tab
    words = padded.view(np.uint32).reshape(nt, 8, ROW // 4)  # word w = bytes 4w .. 4w + 3
    out = np.empty((nt, 32, 2), dtype=np.uint32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        out[:, lane, 0] = words[:, g, t]
        out[:, lane, 1] = words[:, g, 4 + t]
    return out


def limbs(q: np.ndarray, shift: np.ndarray, bits: int) -> np.ndarray:
    """The balanced limbs of ``trunc(q 2^shift)`` as ``crt_residues_mma`` makes them from the bits
    of the doubles (``limbs16``): int8 ``q.shape + (MAX_LIMBS,)``, limb j at index j.

    Args:
        q: float64 values (finite).
        shift: int per value (broadcast against ``q``).
        bits: the operand's bits (``|trunc(q 2^shift)| <= 2^bits``).
    """
    b = np.ascontiguousarray(q, dtype=np.float64).view(np.uint64)
    be = ((b >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    m = (b & np.uint64(0xFFFFFFFFFFFFF)) | np.where(be != 0, np.uint64(1) << np.uint64(52), np.uint64(0))
    e = np.where(be != 0, be, 1) - 1075 + np.broadcast_to(shift, q.shape).astype(np.int64)

    def shl(x, s):
        return x << np.clip(s, 0, 63).astype(np.uint64)

    def shr(x, s):
        return x >> np.clip(s, 0, 63).astype(np.uint64)

    zero = np.uint64(0)
    with np.errstate(over="ignore"):
        lo = np.where(e >= 64, zero, np.where(e > 0, shl(m, e), np.where(e > -64, shr(m, -e), zero)))
        hi = np.where(e >= 64, shl(m, e - 64), np.where(e > 0, shr(m, 64 - e), zero))
        neg = (b >> np.uint64(63)) != 0
        nlo = ~lo + np.uint64(1)
        nhi = ~hi + np.where(nlo == 0, np.uint64(1), zero)
        lo, hi = np.where(neg, nlo, lo), np.where(neg, nhi, hi)
        blo, bhi = (np.uint64(v) for v in bias(bits))
        ulo = lo + blo
        uhi = hi + bhi + np.where(ulo < lo, np.uint64(1), zero)
    words = np.stack([ulo ^ blo, uhi ^ bhi], axis=-1)  # little-endian: limb j is byte j
    return np.ascontiguousarray(words).view(np.uint8).view(np.int8).reshape(q.shape + (MAX_LIMBS,))


def reduce_bytes(v: np.ndarray, p: np.ndarray, inv_p32: np.ndarray) -> np.ndarray:
    """``crt.cu`` ``acc_byte``: the low byte of ``v - rint(v * inv_p) p`` (FP32 ``inv_p``; the
    product is exact in float64 and ``rint`` rounds half to even like the FP32 fma), int8.

    Raises:
        ValueError: some ``|v| >= 2^22`` (the kernel's FP32 steps would not be exact).
    """
    if v.size and int(np.abs(v).max()) >= V_BOUND:
        raise ValueError(f"limb sums reach {int(np.abs(v).max())}; the FP32 reduction needs |v| < 2^22")
    q = np.rint(v.astype(np.float64) * inv_p32.astype(np.float64))
    r = v - q.astype(np.int64) * p.astype(np.int64)
    return (r & 0xFF).astype(np.uint8).view(np.int8)


def residues(X, E, bits, line0, nlines, mods: Moduli, form, role, kp) -> np.ndarray:
    """The numpy model of ``crt_residues_mma``: the arguments and layout of
    :func:`gemm.ozaki.crt.cpu.residues` (``X`` the host line view ``(outer, inner, K)``, ``E`` the
    line exponents), the result int8 ``(n, G, lines_out, kp)`` as the GPU writes it."""
    cplx = form is not None
    parts = [q[line0:line0 + nlines] for q in cpu._parts(X, cplx)]
    shift = scale.shifts(np.asarray(E)[line0:line0 + nlines], bits)[:, None]
    K = parts[0].shape[1]
    row = np.zeros((nlines, K, ROW), dtype=np.int8)
    row[..., :MAX_LIMBS] = limbs(parts[0], shift, bits)
    if cplx:
        row[..., MAX_LIMBS:] = limbs(parts[1], shift, bits)
    tab = table(mods, form, role)
    v = row.reshape(-1, ROW).astype(np.int64) @ tab.T.astype(np.int64)  # (lines K, columns)
    slots = len(combinations(form, role))
    p = np.repeat(np.array(mods.values, dtype=np.int64), slots)
    inv = np.repeat(np.array([recip32(int(x)) for x in mods.values], dtype=np.float32), slots)
    r = reduce_bytes(v, p, inv).reshape(nlines, K, len(mods), slots)
    n = len(mods)
    if form == "4m":
        lines_out = nlines * (2 if role == "b" else 1)
        out = np.zeros((n, 1, lines_out, kp), dtype=np.int8)
        for i in range(n):
            if role == "a":
                out[i, 0, :, :K], out[i, 0, :, K:2 * K] = r[:, :, i, 0], r[:, :, i, 1]
            else:
                out[i, 0, 0::2, :K], out[i, 0, 0::2, K:2 * K] = r[:, :, i, 0], r[:, :, i, 1]
                out[i, 0, 1::2, :K], out[i, 0, 1::2, K:2 * K] = r[:, :, i, 2], r[:, :, i, 3]
        return out
    out = np.zeros((n, slots, nlines, kp), dtype=np.int8)
    out[..., :K] = r.transpose(2, 3, 0, 1)
    return out
