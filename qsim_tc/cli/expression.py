"""Reading a parameter value the way OpenQASM writes one: ``pi/2``, ``-3*tau/8``, ``sqrt(2)/2``.

:func:`evaluate` parses the text with Python's parser and walks the tree itself, allowing only
numbers, the constants ``pi``, ``tau`` and ``euler`` (and their symbols), ``+ - * /``, powers
(``**``, and ``^`` as OpenQASM 2 writes it), unary signs, parentheses and the functions OpenQASM
defines on angles. Nothing is looked up or called outside those tables (no ``eval``), every
number is a float (so ``9**9**9`` overflows at once instead of building a huge integer), and the
result must be finite.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_LENGTH = 200  # longer text is no angle anyone types; it would only feed the parser
CONSTANTS = {"pi": math.pi, "π": math.pi, "tau": math.tau, "τ": math.tau, "euler": math.e, "ℇ": math.e}
FUNCTIONS = {"sin": math.sin, "cos": math.cos, "tan": math.tan, "exp": math.exp, "ln": math.log,
             "sqrt": math.sqrt, "arcsin": math.asin, "arccos": math.acos, "arctan": math.atan}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow, ast.BitXor: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
ALLOWED = ("numbers, pi, tau, euler, + - * / ** (or ^), unary signs, parentheses and "
           "sin, cos, tan, exp, ln, sqrt, arcsin, arccos, arctan")


def evaluate(text: str) -> float:
    """The value of an OpenQASM-style constant expression.

    Args:
        text: e.g. ``"pi/2"``, ``"-0.25"``, ``"2*sqrt(2)"``, ``"pi^2"``.

    Returns:
        The value, a finite float.

    Raises:
        TypeError: ``text`` is not a string.
        ValueError: anything else than :data:`ALLOWED`, a math error (division by zero, ``ln(0)``,
            overflow) or a non-finite result; the message names the text and the reason.
    """
    if not isinstance(text, str):
        raise TypeError(f"expression must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"expression of {len(text)} characters; at most {MAX_LENGTH}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ValueError(f"cannot read {text!r}; allowed: {ALLOWED}") from None
    try:
        value = _value(tree.body)
    except (ArithmeticError, ValueError) as exc:  # ZeroDivision, Overflow; math domain errors
        reason = str(exc) if isinstance(exc, _NotAllowed) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"cannot evaluate {text!r}: {reason}") from None
    except RecursionError:
        raise ValueError(f"cannot evaluate {text!r}: nested too deeply") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not finite ({value})")
    return value


class _NotAllowed(ValueError):
    pass


def _value(node) -> float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _NotAllowed(f"{node.value!r} is not a number; allowed: {ALLOWED}")
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in CONSTANTS:
            raise _NotAllowed(f"unknown name {node.id!r}; allowed: {ALLOWED}")
        return CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        out = _BINARY[type(node.op)](_value(node.left), _value(node.right))
        if isinstance(out, complex):  # a negative base to a fractional power
            raise _NotAllowed(f"{ast.unparse(node)[:40]!r} is not a real number")
        return out
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
            and len(node.args) == 1 and not node.keywords):
        return FUNCTIONS[node.func.id](_value(node.args[0]))
    raise _NotAllowed(f"{ast.unparse(node)[:40]!r} is not allowed; allowed: {ALLOWED}")
