"""Error models of one product: the algebra every method's model shares.

A method's model (``Method.error_model``) answers, for one product ``Y = U X`` of a gate matrix
``U`` (2^d x 2^d, given as exact doubles) and a state block ``X`` (in the working precision), two
numbers about the computed ``fl(Y)``:

* ``bound``: a rigorous upper bound of ``||fl(Y) - U X||_F``, the rounding of ``U`` to the
  working precision included;
* ``estimate``: the same terms taken as independent roundings of random sign (each rounding's
  relative error of root-mean-square :data:`RMS_ROUNDING`), so that sums of ``n`` terms grow as
  ``sqrt(n)`` instead of ``n`` (Higham and Mary, 2019): what a run is expected to show.

Both are absolute (in units of the amplitudes); the model is given the operands' norms through
:class:`ProductContext`. The Frobenius norm of a block product is the 2-norm of the state's error
vector, so per-block bounds of the form ``c ||X_b||_F`` add over blocks in quadrature to
``c ||X||_F``.

Standard results used (Higham, Accuracy and Stability of Numerical Algorithms, ch. 3):

* a real dot product of ``n`` terms in any order, each operation rounded to nearest with unit
  roundoff ``u``: ``|fl(x.y) - x.y| <= gamma_n sum |x_i y_i|``, ``gamma_n = n u / (1 - n u)``;
* a complex entry of ``U X`` in real arithmetic is two real dot products of ``2k`` terms whose
  absolute sums are each at most ``(|U| |X|)_ij``, so ``|E_ij| <= sqrt(2) gamma_2k (|U| |X|)_ij``
  and ``||E||_F <= sqrt(2) gamma_2k || |U| ||_2 ||X||_F``;
* ``|| |U| ||_2 <= min(||U||_F, sqrt(||U||_1 ||U||_inf))`` (:func:`abs_norm_bound`): at most
  ``sqrt(2^d)`` for a unitary, 1 for a permutation or diagonal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

U64 = 2.0 ** -53  # unit roundoff of float64 (round to nearest)
U32 = 2.0 ** -24  # unit roundoff of float32
# Root-mean-square relative error of one rounding to nearest, as a fraction of u: the error of x in
# [2^e, 2^(e+1)) is uniform in +-u 2^e, so its relative variance is u^2/3 E[(2^e/|x|)^2], and with
# significands spread log-uniformly (Benford) E[(2^e/|x|)^2] = 3 / (8 ln 2).
RMS_ROUNDING = math.sqrt(3.0 / (8.0 * math.log(2.0)) / 3.0)
# slack on norms computed in floating point (a sum of a few thousand squares): far above their
# rounding, so that a bound computed from them stays a bound
NORM_SLACK = 1.0 + 2.0 ** -30


def unit_roundoff(dtype) -> float:
    """The unit roundoff of the real type under ``dtype`` (float32/complex64: 2^-24, else 2^-53)."""
    return U32 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else U64


def gamma(n: int, u: float) -> float:
    """``gamma_n = n u / (1 - n u)``, the bound of ``n`` chained roundings (``inf`` when n u >= 1)."""
    nu = float(n) * u
    return math.inf if nu >= 1.0 else nu / (1.0 - nu)


def chain(n: int, eps: float) -> float:
    """``(1 + eps)^n - 1``: the bound of ``n`` chained relative errors of at most ``eps`` each."""
    return math.expm1(n * math.log1p(eps))


@dataclass(frozen=True)
class ProductError:
    """A product's error: ``bound`` (rigorous) and ``estimate`` (typical) of ``||fl(Y) - Y||_F``,
    with the named terms that make the bound (for reports)."""

    bound: float
    estimate: float
    terms: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ProductContext:
    """What a method's error model knows of one product ``Y = U X`` (``U`` on d qubits).

    Attributes:
        d: the gate's qubits; the complex inner dimension is ``k = 2^d``.
        dtype: the state's (working) complex dtype; ``U`` is rounded to it where it is narrower
            than complex128.
        x_norm: an upper bound of ``||X||_F`` (the block's, or the whole state's).
        abs_norm: an upper bound of ``|| |U| ||_2`` (:func:`abs_norm_bound`).
        frob_norm: an upper bound of ``||U||_F``.
        op_norm: an upper bound of ``||U||_2`` (1 plus the given matrix's distance from unitary).
        n_amplitudes: the state's (or block's) amplitudes, for absolute terms (underflow).
        choices: the method's report choices of the product (``gemm.Report.choices``): slices,
            moduli, the format a per-call choice took, fallbacks. Empty when not known; a model
            that needs a choice it does not find returns None.
        terms: the most nonzero terms of any of the product's complex dot products (a row of
            ``U`` against a column of ``X``), where fewer than ``k`` are known (a sparse state:
            the run's first gates from |0...0>); None: ``k``. Products with an exact zero and sums
            with it are exact in floating point, so an FP model may count only these.
        exact_input: ``X`` is exactly a basis state of amplitude 1, -1, i or -i (|0...0> as
            made, or after signed permutations): every floating-point product is then an exact
            copy of a column of ``U`` as held, times that unit.
        unit_monomial: every row of ``U`` has one nonzero entry, ``1``, ``-1``, ``i`` or ``-i``
            (CX, SWAP, X, Y, Z, CZ...): every floating-point output is an input's part with its
            sign, exactly (products with 1 and 0, sums with 0), in any precision.
    """

    d: int
    dtype: Any
    x_norm: float
    abs_norm: float
    frob_norm: float
    op_norm: float = 1.0
    n_amplitudes: int = 0
    choices: Mapping[str, Any] = field(default_factory=dict)
    terms: int | None = None
    exact_input: bool = False
    unit_monomial: bool = False

    @property
    def k(self) -> int:
        return 1 << self.d

    @property
    def dot_terms(self) -> int:
        """The terms a floating-point model counts per complex dot product (``terms`` or ``k``)."""
        return self.k if self.terms is None else max(1, min(int(self.terms), self.k))

    @property
    def u(self) -> float:
        return unit_roundoff(self.dtype)

    @property
    def narrow(self) -> bool:
        """Whether the state (and so the gate matrix) is held in complex64."""
        return np.dtype(self.dtype) == np.dtype(np.complex64)

    @classmethod
    def for_matrix(cls, matrix: np.ndarray, dtype, x_norm: float, *, n_amplitudes: int = 0,
                   choices: Mapping[str, Any] | None = None, op_norm: float | None = None) -> "ProductContext":
        """The context of a product with ``matrix`` (host complex128, 2^d x 2^d), norms computed here.

        Raises:
            ValueError: ``matrix`` not square of a power-of-two size, or ``x_norm`` negative.
        """
        m = np.asarray(matrix)
        if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] & (m.shape[0] - 1):
            raise ValueError(f"matrix must be 2^d x 2^d, got shape {m.shape}")
        if not x_norm >= 0:
            raise ValueError(f"x_norm must be a non-negative number, got {x_norm!r}")
        d = m.shape[0].bit_length() - 1
        return cls(d, np.dtype(dtype), float(x_norm), abs_norm_bound(m), frob_norm_bound(m),
                   unitary_norm_bound(d) if op_norm is None else float(op_norm), int(n_amplitudes),
                   dict(choices or {}))


def abs_norm_bound(matrix: np.ndarray) -> float:
    """An upper bound of ``|| |M| ||_2``: the smaller of ``||M||_F`` and ``sqrt(||M||_1 ||M||_inf)``
    (both bound the spectral norm of the non-negative matrix ``|M|``), with :data:`NORM_SLACK`."""
    a = np.abs(np.asarray(matrix))
    frob = math.sqrt(float(np.sum(a * a)))
    holder = math.sqrt(float(a.sum(axis=0).max()) * float(a.sum(axis=1).max()))
    return min(frob, holder) * NORM_SLACK


def frob_norm_bound(matrix: np.ndarray) -> float:
    """``||M||_F`` with :data:`NORM_SLACK`."""
    a = np.abs(np.asarray(matrix))
    return math.sqrt(float(np.sum(a * a))) * NORM_SLACK


def unitary_norm_bound(d: int) -> float:
    """The assumed bound of ``||U||_2`` for a d-qubit gate matrix given in double: the exact unitary
    rounded entry by entry (``||dU||_2 <= u || |U| ||_2 <= u 2^(d/2)``), with a factor 4 of room for
    matrices computed in double (a Haar gate's QR, a fused block, :mod:`qsim_tc.error_bound`
    bounds the fusion itself). Its only use is the amplification of earlier errors, a second-order
    effect."""
    return 1.0 + 4.0 * U64 * math.sqrt(2.0 ** d) * (1 << d)


# ------------------------------------------------------------------ shared models


def rounded_gate(ctx: ProductContext) -> tuple[float, float]:
    """``(bound, estimate)`` of ``||(fl(U) - U) X||_F`` when ``U`` is rounded to the working dtype.

    Every real and imaginary part is rounded to nearest: ``|fl(U) - U| <= u |U|`` entrywise, so
    ``||dU X||_F <= u || |U| ||_2 ||X||_F``. Independent roundings of rms ``RMS_ROUNDING u`` on
    the entries of a row of unit norm give ``RMS_ROUNDING u ||X||`` (rows of a unitary). Zero for
    a complex128 state.
    """
    if not ctx.narrow:
        return 0.0, 0.0
    u = ctx.u
    return u * ctx.abs_norm * ctx.x_norm, RMS_ROUNDING * u * ctx.x_norm


def fp_gemm(ctx: ProductContext, u: float | None = None, *, gate_rounded: bool | None = None) -> ProductError:
    """The model of a floating-point complex GEMM (BLAS, cuBLAS, the direct small-gate kernels,
    the stage kernel's FMA loops and FP64 mma): every multiply, add or FMA rounded to nearest
    with unit roundoff ``u``, in any order.

    Bound: ``sqrt(2) gamma_2t (1 + u) || |U| ||_2 ||X||_F`` with ``t`` the nonzero terms of a dot
    product (``ctx.dot_terms``: ``k``, or fewer on a sparse state, whose zero terms add exactly),
    plus the rounding of ``U`` to the working dtype (:func:`rounded_gate`). Estimate: recursive
    sums of ``2t`` terms of random sign commit ``t + 1`` roundings' worth of variance per complex
    output (``2t`` partial sums of mean square ``|y|^2 / 2``, and the products'),
    ``RMS_ROUNDING u sqrt(t + 1) ||Y||``. On an exact unit basis state (``ctx.exact_input``) the
    products are copies of ``U``'s entries times 1 plus exact zeros: only ``U``'s rounding remains;
    a signed permutation (``ctx.unit_monomial``) is exact.
    """
    u = ctx.u if u is None else u
    t = ctx.dot_terms
    if ctx.unit_monomial:  # exact, and so is the gate's rounding (+-1 and +-i are representable)
        return ProductError(0.0, 0.0, {"gemm": 0.0, "gate_rounding": 0.0})
    g_b, g_e = rounded_gate(ctx) if (gate_rounded is None or gate_rounded) else (0.0, 0.0)
    if ctx.exact_input:
        return ProductError(g_b, g_e, {"gemm": 0.0, "gate_rounding": g_b})
    prod_b = math.sqrt(2.0) * gamma(2 * t, u) * (1.0 + u) * ctx.abs_norm * ctx.x_norm
    prod_e = RMS_ROUNDING * u * math.sqrt(t + 1) * ctx.op_norm * ctx.x_norm
    return ProductError(prod_b + g_b, math.hypot(prod_e, g_e), {"gemm": prod_b, "gate_rounding": g_b})


def max_row_col_nonzeros(matrix: np.ndarray) -> tuple[int, int]:
    """``(most nonzeros in a row, most nonzeros in a column)`` of ``matrix`` (exact zeros only)."""
    nz = np.asarray(matrix) != 0
    return int(nz.sum(axis=1).max(initial=0)), int(nz.sum(axis=0).max(initial=0))


def is_unit_monomial(matrix: np.ndarray) -> bool:
    """Whether every row of ``matrix`` has exactly one nonzero entry and it is 1, -1, i or -i
    (exactly): a product with it only copies and negates parts (:attr:`ProductContext.unit_monomial`)."""
    m = np.asarray(matrix)
    nz = m != 0
    if m.ndim != 2 or not (nz.sum(axis=1) == 1).all():
        return False
    v = m[nz]
    re, im = np.real(v), np.imag(v)
    return bool((((np.abs(re) == 1) & (im == 0)) | ((re == 0) & (np.abs(im) == 1))).all())


def final_rounding(ctx: ProductContext, u: float, other_bound: float) -> tuple[float, float]:
    """``(bound, estimate)`` of one rounding to nearest of every output entry's real and imaginary
    parts: ``u ||Y~||_F`` with ``||Y~|| <= ||U||_2 ||X|| + other_bound`` (the value rounded carries
    the other errors)."""
    y = ctx.op_norm * ctx.x_norm + other_bound
    return u * y, RMS_ROUNDING * u * ctx.op_norm * ctx.x_norm
