"""Test matrices of the GEMM accuracy literature, shared by tests, benchmarks and the CLI.

Every generator takes a ``numpy.random.Generator`` and returns numpy arrays (move them to the
GPU yourself). Nothing here imports cupy.

- :func:`phi_matrix`: ``uniform(-0.5, 0.5) * exp(phi * normal(0, 1))`` (Ozaki et al.'s phi test;
  larger phi spreads the exponents wider).
- :func:`exp_rand`: exponent uniform in ``[lo, hi]``, mantissa uniform in ``[1, 2)``, random sign.
- :func:`exp_rand_type`: the four exp_rand pairs of the TF32/FP16 error-correction literature
  (see :data:`EXP_RAND_TYPES` for the exponent ranges chosen here).
- :func:`urand`: uniform in ``[lo, hi)``.
- :func:`cancel_pair`: a matrix and its numerically computed inverse (``A @ inv(A)`` is the
  identity up to rounding, so every entry off the diagonal is pure cancellation).

Complex variants draw the real and imaginary parts independently.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "EXP_RAND_TYPES",
    "cancel_pair",
    "complex_exp_rand",
    "complex_phi_matrix",
    "complex_urand",
    "exp_rand",
    "exp_rand_type",
    "phi_matrix",
    "urand",
]

# Exponent ranges (base 2) of the four exp_rand types, as (A range, B range).
# FP16 normal numbers span 2^-14 .. 65504 (~2^16), subnormals reach 2^-24.
#   1: both operands well inside FP16's normal range.
#   2: A in range, B tiny (below FP16's subnormal floor 2^-24: FP16 flushes it to zero).
#   3: both small (just above FP16's subnormal floor: their hi/lo split loses the lo part).
#   4: both spread over 2^-35 .. 2^35, beyond FP16's range at both ends (overflow to Inf and
#      underflow to zero) and wider than FP16's 40-binade span, so no power-of-two scaling
#      fits them into FP16 either.
EXP_RAND_TYPES: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {
    1: ((-10, 10), (-10, 10)),
    2: ((-10, 10), (-40, -30)),
    3: ((-24, -14), (-24, -14)),
    4: ((-35, 35), (-35, 35)),
}


def _check_rng(rng) -> np.random.Generator:
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, (int, np.integer)):
        return np.random.default_rng(int(rng))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, an int seed or None, got {type(rng).__name__}")
    return rng


def _check_shape(m, n) -> None:
    for name, v in (("m", m), ("n", n)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _as_dtype(x: np.ndarray, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        raise TypeError(f"dtype must be real (float32/float64) here, got {dtype}; use the complex_ variant")
    return x.astype(dtype, copy=False)


def phi_matrix(m: int, n: int, phi: float, rng=None, dtype=np.float64) -> np.ndarray:
    """``uniform(-0.5, 0.5) * exp(phi * normal(0, 1))``, shape ``(m, n)``.

    Args:
        m, n: shape.
        phi: spread of the exponents (0.1, 1, 2, 4 in the literature); must be >= 0.
        rng: ``numpy.random.Generator`` (or an int seed).
        dtype: float64 (default) or float32 (rounded from the float64 draw).
    """
    _check_shape(m, n)
    if not np.isfinite(phi) or phi < 0:
        raise ValueError(f"phi must be a finite number >= 0, got {phi!r}")
    rng = _check_rng(rng)
    x = (rng.random((m, n)) - 0.5) * np.exp(phi * rng.standard_normal((m, n)))
    return _as_dtype(x, dtype)


def exp_rand(m: int, n: int, lo: int, hi: int, rng=None, dtype=np.float64) -> np.ndarray:
    """Random sign times ``mantissa * 2^e``, mantissa uniform in ``[1, 2)``, e uniform in ``[lo, hi]``.

    Args:
        m, n: shape.
        lo, hi: integer exponent range, ``lo <= hi``.
        rng: ``numpy.random.Generator`` (or an int seed).
        dtype: float64 (default) or float32 (the mantissa is drawn in float64 and rounded).
    """
    _check_shape(m, n)
    if int(lo) != lo or int(hi) != hi or lo > hi:
        raise ValueError(f"exponent range must be integers lo <= hi, got lo={lo!r}, hi={hi!r}")
    rng = _check_rng(rng)
    mant = 1.0 + rng.random((m, n))
    e = rng.integers(int(lo), int(hi) + 1, size=(m, n))
    sign = np.where(rng.random((m, n)) < 0.5, -1.0, 1.0)
    return _as_dtype(sign * np.ldexp(mant, e), dtype)


def exp_rand_type(t: int, m: int, k: int, n: int, rng=None, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """The exp_rand pair of type ``t`` (1-4): ``A`` of shape ``(m, k)``, ``B`` of shape ``(k, n)``.

    Exponent ranges are :data:`EXP_RAND_TYPES`: 1 both in FP16 range, 2 B tiny, 3 both small,
    4 both beyond FP16's range. ``dtype`` may be complex (independent real/imaginary parts).
    """
    if t not in EXP_RAND_TYPES:
        raise ValueError(f"exp_rand type t must be one of 1, 2, 3, 4, got {t!r}")
    (alo, ahi), (blo, bhi) = EXP_RAND_TYPES[t]
    rng = _check_rng(rng)
    if np.dtype(dtype).kind == "c":
        return (complex_exp_rand(m, k, alo, ahi, rng, dtype), complex_exp_rand(k, n, blo, bhi, rng, dtype))
    return exp_rand(m, k, alo, ahi, rng, dtype), exp_rand(k, n, blo, bhi, rng, dtype)


def urand(m: int, n: int, rng=None, lo: float = -1.0, hi: float = 1.0, dtype=np.float64) -> np.ndarray:
    """Uniform in ``[lo, hi)``, shape ``(m, n)``."""
    _check_shape(m, n)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"urand needs finite lo < hi, got lo={lo!r}, hi={hi!r}")
    rng = _check_rng(rng)
    return _as_dtype(lo + (hi - lo) * rng.random((m, n)), dtype)


def _complex_dtype(dtype) -> tuple[np.dtype, np.dtype]:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return dtype, np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    if dtype == np.float32:
        return np.dtype(np.complex64), dtype
    return np.dtype(np.complex128), np.dtype(np.float64)


def complex_phi_matrix(m: int, n: int, phi: float, rng=None, dtype=np.complex128) -> np.ndarray:
    """Complex :func:`phi_matrix`: real and imaginary parts drawn independently."""
    rng = _check_rng(rng)
    cdt, rdt = _complex_dtype(dtype)
    re = phi_matrix(m, n, phi, rng, rdt)
    im = phi_matrix(m, n, phi, rng, rdt)
    return (re + 1j * im).astype(cdt)


def complex_exp_rand(m: int, n: int, lo: int, hi: int, rng=None, dtype=np.complex128) -> np.ndarray:
    """Complex :func:`exp_rand`: real and imaginary parts drawn independently."""
    rng = _check_rng(rng)
    cdt, rdt = _complex_dtype(dtype)
    re = exp_rand(m, n, lo, hi, rng, rdt)
    im = exp_rand(m, n, lo, hi, rng, rdt)
    return (re + 1j * im).astype(cdt)


def complex_urand(m: int, n: int, rng=None, lo: float = -1.0, hi: float = 1.0, dtype=np.complex128) -> np.ndarray:
    """Complex :func:`urand`: real and imaginary parts drawn independently."""
    rng = _check_rng(rng)
    cdt, rdt = _complex_dtype(dtype)
    re = urand(m, n, rng, lo, hi, rdt)
    im = urand(m, n, rng, lo, hi, rdt)
    return (re + 1j * im).astype(cdt)


def cancel_pair(n: int, rng=None, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """``(A, inv(A))`` for a random ``n x n`` matrix ``A`` (uniform in [-1, 1), or complex).

    The inverse is computed in float64/complex128 (``numpy.linalg.inv``) and rounded to
    ``dtype``; ``A @ inv(A)`` is close to the identity, so its off-diagonal entries are sums that
    cancel almost completely.
    """
    _check_shape(n, n)
    rng = _check_rng(rng)
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        a = complex_urand(n, n, rng, dtype=np.complex128)
    else:
        a = urand(n, n, rng, dtype=np.float64)
    ainv = np.linalg.inv(a)
    return a.astype(dtype), ainv.astype(dtype)
