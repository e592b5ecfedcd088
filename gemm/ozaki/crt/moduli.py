"""Moduli of the CRT scheme and their constants: pure integer arithmetic, no operand is touched.

Two families of pairwise-coprime moduli ``p <= 256`` (so every residue fits INT8 in the symmetric
range ``[-floor(p/2), ceil(p/2) - 1]``, at most 128 in magnitude):

* ``GENERAL``: the largest pairwise-coprime integers <= 256, taken greedily from 256 down (256,
  255, 253, 251, 247, 241, ...): the most bits per modulus, for real products and the 4- and
  3-product complex forms.
* ``SPLIT``: odd moduli whose prime factors are all = 1 (mod 4) (241, 233, 229, 221 = 13*17,
  205 = 5*41, ...). Modulo such m, -1 has a square root s, so Z_m[i] = Z_m[x]/(x^2 + 1) splits
  into Z_m x Z_m through ``x + iy -> (x + s*y, x - s*y)``: a complex product modulo m is two
  independent real products (the "2m" form). A factor 2 does not split (Z_2[i] =
  Z_2[x]/(x + 1)^2 is not a product ring, and the inverse map divides by 2), so split moduli are
  odd. They are a little smaller (7.6 bits each for the first 16 against 7.9), so a few more are
  needed for the same accuracy.

Reconstruction constants (:class:`Moduli`): with ``P = prod p_i``, ``M_i = P / p_i`` and
``y_i = M_i^-1 mod p_i``, the product ``C'`` (an integer with ``|C'| <= P/4``, see
:mod:`gemm.ozaki.crt.scale`) is ``C' = sum_i c_i w_i - q P`` for residues ``c_i`` of ``C'``
modulo ``p_i`` (any representatives, ``|c_i| <= 384``) and the weights ``w_i = (M_i y_i) mod P``:
``w_i`` is 1 modulo ``p_i`` and 0 modulo every other modulus. ``q`` is the one integer within 1/4
of ``sum_i c_i w_i / P``. ``w_i`` and ``P`` reach 2^160, so they are kept as ``W`` words of
``D = 38`` bits (exact doubles): every word sum ``sum_i c_i w_iw - q P_w`` stays below
``2 * 20 * 384 * 2^38 < 2^52`` and is exact in float64. (Folding ``y_i`` into the weights saves
the reduction ``t_i = (c_i y_i) mod p_i`` per modulus and element that the textbook form needs;
the 2m form's factors ``1/2`` and ``1/(2s)`` fold in the same way, :meth:`Moduli.weights`.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from gemm.ozaki.crt import scale

D = 38  # bits per word of the multi-word constants
MAX_MODULI = 20  # the option range ends here: P < 2^160, five words
MIN_MODULI = 2
FORMS = ("4m", "3m", "2m")  # complex forms: real products per modulus
PRODUCTS = {"4m": 4, "3m": 3, "2m": 2}
INT32_BOUND = 2**31  # an INT8 x INT8 -> INT32 dot product of length k' is exact while k' * 128^2 < 2^31
F64_BOUND = 2**53  # the same products in float64 BLAS are exact while k' * 128^2 < 2^53


def _factors(n: int) -> list[int]:
    out, f = [], 2
    while f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    if n > 1:
        out.append(n)
    return out


def _greedy(candidates) -> tuple[int, ...]:
    """Candidates in order, each kept when it is coprime to every one kept before."""
    out: list[int] = []
    for c in candidates:
        if all(math.gcd(c, m) == 1 for m in out):
            out.append(c)
    return tuple(out)


GENERAL = _greedy(range(256, 2, -1))[:MAX_MODULI]
SPLIT = _greedy(c for c in range(255, 2, -2) if all(f % 4 == 1 for f in _factors(c)))[:MAX_MODULI]
FAMILIES = {"general": GENERAL, "split": SPLIT}


def family_for(form: str | None) -> str:
    """The moduli family of a complex form (``None``: real operands)."""
    return "split" if form == "2m" else "general"


def sqrt_minus_one(m: int) -> int:
    """The smallest ``s`` with ``s^2 = -1 (mod m)``.

    Raises:
        ValueError: -1 is not a square modulo ``m``.
    """
    for s in range(1, m):
        if (s * s + 1) % m == 0:
            return s
    raise ValueError(f"-1 is not a square modulo {m}")


def recip32(p: int) -> np.float32:
    """``1/p`` correctly rounded to float32 (crt.cu's red_sym bound assumes it; going through
    float64 could round twice)."""
    f = np.float32(1.0 / p)
    cands = (np.nextafter(f, np.float32(0)), f, np.nextafter(f, np.float32(1)))
    return min(cands, key=lambda c: abs(Fraction(float(c)) - Fraction(1, p)))


def alpha_beta(p_bits: int) -> tuple[int, int]:
    """Bits ``(alpha, beta)`` kept for A's rows and B's columns when ``2^p_bits <= P``.

    ``2^(alpha + beta) <= 2^(p_bits - 2) <= P / 4``: the product of lines of 2-norm at most
    2^alpha and 2^beta lies in ``[-P/4, P/4]``, so the symmetric CRT reconstruction is unique
    and the quotient ``q = rint(sum t_i / p_i)`` is never ambiguous (its fractional part is at
    most 1/4 away from an integer, far beyond the 2^-44 rounding of that sum).
    """
    ab = p_bits - 2
    return ab // 2, ab - ab // 2


def error_coefficient(alpha: int, beta: int, kprime: int) -> float:
    """``c`` with ``|C - C~|_ij <= c * ||a_i||_2 * ||b_j||_2`` from the truncation to integers.

    Each kept element loses less than one unit of its line's grid 2^-s; the grid is set from a
    power of two ``2^E < 2.25 * ||line||`` (:mod:`gemm.ozaki.crt.scale`), so the truncation
    vector of a line has 2-norm below ``2.25 sqrt(k') 2^-alpha ||line||`` and, by Cauchy-Schwarz,
    ``|da.b| + |a~.db| <= 2.25 sqrt(k') (2^-alpha + 2^-beta) ||a|| ||b||``. The final FP64
    rounding adds ``u |C_ij|`` (u = 2^-53).
    """
    return 2.25 * math.sqrt(kprime) * (2.0 ** -alpha + 2.0 ** -beta)


MEAN_LOSS_BITS = 1.0  # mean loss per element allowed by count_for_bits


def count_for_bits(bits: int, hists, family: str) -> tuple[int, bool, list[float]]:
    """The fewest moduli of ``family`` at which each operand's mean loss is <= MEAN_LOSS_BITS.

    Args:
        bits: the target (53: no worse than a native FP64 GEMM).
        hists: per operand, the depth histogram of :func:`gemm.ozaki.crt.scale.line_exponents`.
        family: ``"general"`` or ``"split"``.

    Why this rule: an element ``d`` binades below its line's norm bound has a truncation error
    ``2^(bits + d - alpha)`` times the rounding error a native product commits on it
    (:func:`gemm.ozaki.crt.scale.mean_loss`). The count therefore depends on k and on the data:
    for a flat line ``d ~ log2(sqrt(k'))`` (k' = 2k for complex), so at k = 1024 flat complex data
    need about ``53 + 6 + 1`` bits per operand (16-17 moduli); widely spread data (phi = 4) need
    18-20. A mean of one lost bit kept the phi-test error (phi = 0.1..4, k = 256 and 1024, real and
    complex) 2 to 30 times below native FP64's; three lost bits came within 1x of it.

    Returns:
        ``(count, met, losses)``: :data:`MAX_MODULI` with ``met`` False when no count reaches the
        target, and the mean losses at the count.
    """
    mods = FAMILIES[family]
    prod = 1
    losses: list[float] = []
    for n, p in enumerate(mods, start=1):
        prod *= p
        if n < MIN_MODULI:
            continue
        ab = alpha_beta(prod.bit_length() - 1)
        losses = [scale.mean_loss(h, bits, x) for h, x in zip(hists, ab)]
        if max(losses) <= MEAN_LOSS_BITS:
            return n, True, losses
    return len(mods), False, losses


@dataclass(frozen=True)
class Moduli:
    """The first ``count`` moduli of a family and every constant the stages need.

    Attributes:
        values: the moduli p_i.
        family: ``"general"`` or ``"split"``.
        P: their product (a Python int).
        p_bits: ``floor(log2 P)``.
        alpha, beta: bits kept for A's rows and B's columns (:func:`alpha_beta`).
        words: ``W``, the number of D-bit words of P.
        table: float64 ``(n, 4)`` per modulus: ``p, 1/p, 2^40 mod p, s`` (sqrt(-1), split only;
            else 0). The CRT multipliers live in :meth:`weights`.
        digits_p: float64 ``(W,)``: the D-bit words of ``P``, least significant first.
        inv_P: ``1/P`` rounded to float64.

    :meth:`weights` gives the words of the CRT weights per complex form.
    """

    values: tuple[int, ...]
    family: str
    P: int = field(init=False)
    p_bits: int = field(init=False)
    alpha: int = field(init=False)
    beta: int = field(init=False)
    words: int = field(init=False)
    table: np.ndarray = field(init=False, repr=False)
    digits_p: np.ndarray = field(init=False, repr=False)
    inv_P: float = field(init=False, repr=False)
    _weights: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        P = math.prod(self.values)
        set_ = object.__setattr__
        set_(self, "P", P)
        set_(self, "p_bits", P.bit_length() - 1)
        a, b = alpha_beta(self.p_bits)
        set_(self, "alpha", a)
        set_(self, "beta", b)
        W = -(-P.bit_length() // D)
        set_(self, "words", W)
        table = np.zeros((len(self.values), 4), dtype=np.float64)
        wy, wre, wim = [], [], []
        for i, p in enumerate(self.values):
            M = P // p
            y = pow(M % p, -1, p)
            s = sqrt_minus_one(p) if self.family == "split" else 0
            y_re = y * pow(2, -1, p) % p if s else 0
            y_im = y * pow(2 * s, -1, p) % p if s else 0
            table[i] = (p, 1.0 / p, pow(2, 40, p), s)
            wy.append(M * y % P)
            wre.append(M * y_re % P)
            wim.append(M * y_im % P)
        set_(self, "table", table)
        set_(self, "digits_p", _words(P, W))
        set_(self, "inv_P", 1.0 / P)
        wy_words = np.stack([_words(v, W) for v in wy])
        ws = {"y": np.stack([wy_words, wy_words])}
        if self.family == "split":
            ws["2m"] = np.stack([np.stack([_words(v, W) for v in wre]), np.stack([_words(v, W) for v in wim])])
        set_(self, "_weights", ws)

    def weights(self, form: str | None) -> np.ndarray:
        """The D-bit words of the CRT weights of ``form``: float64 ``(2, n, W)``, Re (or real) then
        Im, least significant word first.

        ``w_i = (M_i y_i) mod P`` for the real, 4m and 3m forms (Re and Im alike); for 2m, whose
        products give ``u1 = (Re + s Im) mod p`` and ``u2 = (Re - s Im) mod p``, Re is
        ``(u1 + u2) / 2`` and Im is ``(u1 - u2) / (2s)``: the weights ``(M_i y_i / 2) mod P`` and
        ``(M_i y_i / (2 s_i)) mod P`` take ``u1 + u2`` and ``u1 - u2`` as they are.

        Raises:
            ValueError: the 2m form on a set that is not of split moduli.
        """
        if form == "2m":
            if "2m" not in self._weights:
                raise ValueError(f"the 2m form needs split moduli, got the {self.family} family")
            return self._weights["2m"]
        return self._weights["y"]

    @classmethod
    def first(cls, count: int, family: str) -> Moduli:
        """The first ``count`` moduli of ``family`` (``"general"`` or ``"split"``).

        Raises:
            ValueError: ``count`` outside ``MIN_MODULI..MAX_MODULI`` or an unknown family.
        """
        if family not in FAMILIES:
            raise ValueError(f"moduli family {family!r} is not valid; expected one of {', '.join(FAMILIES)}")
        if not MIN_MODULI <= count <= len(FAMILIES[family]):
            raise ValueError(f"moduli count {count} is not valid; expected {MIN_MODULI}..{len(FAMILIES[family])}")
        return cls(FAMILIES[family][:count], family)

    def __len__(self) -> int:
        return len(self.values)

    def __hash__(self):
        return hash((self.values, self.family))

    def __eq__(self, other):
        return isinstance(other, Moduli) and (self.values, self.family) == (other.values, other.family)


def _words(v: int, W: int) -> np.ndarray:
    """The ``W`` words of ``D`` bits of the non-negative integer ``v``, least significant first."""
    mask = (1 << D) - 1
    return np.array([(v >> (D * w)) & mask for w in range(W)], dtype=np.float64)


# form -> INT8 operand parts (and products) per modulus; None is a real product
PARTS = {None: 1, "4m": 1, "3m": 3, "2m": 2}


def dot_length(form: str | None, k: int) -> int:
    """Length of the INT8 dot products: the 4m form stacks [Re | Im] along k (one product of
    2k), the others multiply k-long parts."""
    return 2 * k if form == "4m" else k


def b_lines(form: str | None) -> int:
    """Residue lines per column of B: two for 4m (``[Re | -Im]`` and ``[Im | Re]``), else one."""
    return 2 if form == "4m" else 1
