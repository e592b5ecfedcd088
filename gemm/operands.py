"""Validation of ``matmul`` operands, shared by every method.

Supported forms (numpy ``matmul`` semantics):
    (m, k) @ (k, n)          -> (m, n)
    (p, m, k) @ (k, n)       -> (p, m, n)     B broadcast over the batch
    (m, k) @ (p, k, n)       -> (p, m, n)     A broadcast over the batch
    (p, m, k) @ (p, k, n)    -> (p, m, n)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from gemm.device import array_module
from gemm.errors import NonFiniteError

REAL = (np.dtype(np.float32), np.dtype(np.float64))
COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))


@dataclass(frozen=True)
class Operands:
    """Checked operands and the shape facts a method needs."""

    a: object
    b: object
    xp: ModuleType
    batch: int | None  # None when both operands are 2-D
    m: int
    k: int
    n: int
    dtype: np.dtype  # result dtype (numpy promotion of the two)

    @property
    def is_complex(self) -> bool:
        return self.dtype.kind == "c"

    @property
    def out_shape(self) -> tuple:
        return (self.m, self.n) if self.batch is None else (self.batch, self.m, self.n)

    @property
    def flops(self) -> float:
        per = (8.0 if self.is_complex else 2.0) * self.m * self.n * self.k
        return per * (self.batch or 1)


def matmul_shape(a_shape, b_shape) -> tuple:
    """The shape of ``a @ b`` (numpy matmul) for 2-D operands or one stacked 3-D operand."""
    if len(a_shape) == 3:
        return (a_shape[0], a_shape[1], b_shape[-1])
    if len(b_shape) == 3:
        return (b_shape[0], a_shape[0], b_shape[2])
    return (a_shape[0], b_shape[1])


def check_operands(a, b, *, allowed=REAL + COMPLEX) -> Operands:
    """Check types, dimensions, inner sizes and dtypes of ``a @ b``.

    Raises:
        TypeError: not arrays, mixed numpy/cupy, or a dtype outside ``allowed``.
        ValueError: wrong number of dimensions, mismatched inner or batch sizes, empty operands.
    """
    for name, x in (("a", a), ("b", b)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be a numpy or cupy array, got {type(x).__name__}")
    xp = array_module(a, b)
    for name, x in (("a", a), ("b", b)):
        if x.ndim not in (2, 3):
            raise ValueError(f"{name} must be 2-D or 3-D (stacked), got shape {tuple(x.shape)}")
        if np.dtype(x.dtype) not in allowed:
            names = ", ".join(str(d) for d in allowed)
            raise TypeError(f"{name} has dtype {x.dtype}; this method accepts {names}")
        if 0 in x.shape:
            raise ValueError(f"{name} has an empty dimension: shape {tuple(x.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
            f"(a.shape[-1]={a.shape[-1]} != b.shape[-2]={b.shape[-2]})"
        )
    batch = None
    if a.ndim == 3 and b.ndim == 3:
        if a.shape[0] != b.shape[0]:
            raise ValueError(f"batch sizes differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
        batch = int(a.shape[0])
    elif a.ndim == 3:
        batch = int(a.shape[0])
    elif b.ndim == 3:
        batch = int(b.shape[0])
    dtype = np.promote_types(a.dtype, b.dtype)
    if dtype not in allowed:
        raise TypeError(f"a ({a.dtype}) and b ({b.dtype}) promote to {dtype}, which this method does not accept")
    return Operands(a, b, xp, batch, int(a.shape[-2]), int(a.shape[-1]), int(b.shape[-1]), dtype)


def check_finite(x, name: str, xp) -> None:
    """Raise NonFiniteError if ``x`` holds NaN or Inf (one reduction, one host read)."""
    if not bool(xp.isfinite(x).all()):
        bad = int((~xp.isfinite(x)).sum())
        raise NonFiniteError(f"{name} holds {bad} NaN/Inf element(s); this method needs finite operands")
