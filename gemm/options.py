"""Method options declared with their checks: each option is a default and a validator.

A method declares ``option_specs = {"name": Option(default, validator, doc)}``; the base class
checks every value when the method is configured (:meth:`gemm.Method.check_options`), before any
operand is read, so a bad value fails with a message naming the option, the value and what is
valid: ``TypeError`` for a wrong type, ``ValueError`` for a value out of range.

A validator takes ``(name, value)`` and returns the value to use (possibly normalised, for
example a numpy integer turned into an ``int``) or raises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

Validator = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Option:
    """One option of a method: its default, its validator and a one-line description."""

    default: Any
    check: Validator
    doc: str = ""


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def choice(*values: str) -> Validator:
    """One of the strings ``values``."""
    valid = ", ".join(values)

    def check(name, value):
        if not isinstance(value, str):
            raise TypeError(f"option {name} must be one of {valid}, got {value!r} ({type(value).__name__})")
        if value not in values:
            raise ValueError(f"option {name}={value!r} is not valid; expected one of {valid}")
        return value

    return check


def boolean() -> Validator:
    """True or False (numpy booleans accepted, returned as ``bool``)."""

    def check(name, value):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"option {name} must be True or False, got {value!r} ({type(value).__name__})")
        return bool(value)

    return check


def integer(lo: int, hi: int | None = None, *, none: bool = False) -> Validator:
    """An int in ``lo..hi`` (no upper bound when ``hi`` is None); None too when ``none``."""
    valid = (f"an int in {lo}..{hi}" if hi is not None else f"an int >= {lo}") + (" or None" if none else "")

    def check(name, value):
        if value is None and none:
            return None
        if not _is_int(value):
            raise TypeError(f"option {name} must be {valid}, got {value!r} ({type(value).__name__})")
        if int(value) < lo or (hi is not None and int(value) > hi):
            raise ValueError(f"option {name}={value!r} is not valid; expected {valid}")
        return int(value)

    return check


def number(lo: float = 0.0, *, what: str = "") -> Validator:
    """A finite real number ``>= lo`` (returned as ``float``); ``what`` says what it measures."""
    valid = f"a finite number >= {lo:g}" + (f" ({what})" if what else "")

    def check(name, value):
        if not _is_number(value):
            raise TypeError(f"option {name} must be {valid}, got {value!r} ({type(value).__name__})")
        v = float(value)
        if not (math.isfinite(v) and v >= lo):
            raise ValueError(f"option {name}={value!r} is not valid; expected {valid}")
        return v

    return check


def array_or_none() -> Validator:
    """None or an array (numpy or cupy: anything with ``shape`` and ``dtype``); its shape and
    device are checked against the operands when the method runs."""

    def check(name, value):
        if value is not None and not (hasattr(value, "shape") and hasattr(value, "dtype")):
            raise TypeError(f"option {name} must be a numpy or cupy array or None, got {type(value).__name__}")
        return value

    return check
