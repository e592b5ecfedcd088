"""Checks of OpenQASM text made before a parser sees it: sizes, nesting, literals and includes.

The parsers (Qiskit's OpenQASM 2 parser in Rust, the OpenQASM 3 reference grammar in Python)
do work that grows with numbers written in the program: register widths, nested gate
definitions, nesting depth. A 64-bit overflow panics the Rust parser and deep nesting can overflow
its stack, neither of which Python can catch safely. One pass over the tokens here bounds each of
those numbers by :mod:`circuits.limits` first, naming the line.

OpenQASM 2 ``include`` statements are resolved here too: only a file inside the program's own
folder (after following links), or the standard ``qelib1.inc``, may be included; included files
are scanned in turn. Messages about an included file name its path in the folder and its line,
never its content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from circuits import limits
from circuits.errors import CircuitError

STANDARD_INCLUDES = frozenset({"qelib1.inc"})  # built into the OpenQASM 2 parser, never read from disk
_MODIFIERS = frozenset({"ctrl", "negctrl", "inv", "pow"})
_OPEN, _CLOSE = "([{", ")]}"

_TOKEN = re.compile(
    r"""(?P<nl>\n)
    |(?P<ws>[ \t\r\f\v]+)
    |(?P<lc>//[^\n]*)
    |(?P<bc>/\*.*?(?:\*/|\Z))
    |(?P<str>"[^"\n]*"?|'[^'\n]*'?)
    |(?P<num>0[xX][0-9a-fA-F_]*|0[bB][01_]*|0[oO][0-7_]*|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d*)?)
    |(?P<id>[^\W\d]\w*)
    |(?P<p>.)""",
    re.VERBOSE | re.DOTALL,
)


@dataclass
class _Token:
    kind: str  # "str", "num", "id" or "p" (punctuation)
    text: str
    line: int


@dataclass
class _State:
    """What the scan has counted over the program and its includes."""

    version: int
    folder: Path | None
    qubits: int = 0
    clbits: int = 0
    sizes: dict = field(default_factory=dict)  # defined gate -> instructions it expands to
    # defined gate -> cost of binding its parameters in a call: its size when it has parameters
    # and calls other gates with parameters (every call copies and re-binds those definitions), else 0
    binding: dict = field(default_factory=dict)
    bindings: int = 0  # the binding cost of every call so far
    open_files: list = field(default_factory=list)  # resolved paths of the includes being scanned


def scan(text: str, *, version: int, folder: Path | None, label: str) -> None:
    """Check an OpenQASM program against :mod:`circuits.limits` before it is parsed.

    Args:
        text: the program.
        version: 2 or 3 (OpenQASM 2 includes are resolved and scanned; OpenQASM 3 ones are
            left to the importer, which knows only ``stdgates.inc``).
        folder: the program's folder, where includes may be found; None for program text.
        label: how messages name the program (its path, or ``<input>``).

    Raises:
        CircuitError: an integer literal past 64 bits, nesting deeper than ``MAX_NESTING``, more
            than ``MAX_QUBITS`` qubits or ``MAX_CLBITS`` classical bits declared, a gate whose
            definition expands to more than ``MAX_DEFINITION_SIZE`` instructions, or an include
            that is not the standard library nor a file in the program's folder.
    """
    _scan(text, _State(version, folder.resolve() if folder is not None else None), label, included=False)


def _tokens(text: str, label: str, included: bool):
    """The tokens of ``text`` (comments and spaces dropped), with integer literals and nesting checked."""
    line, depth = 1, 0
    for m in _TOKEN.finditer(text):
        kind, value = m.lastgroup, m.group()
        if kind == "nl":
            line += 1
            continue
        if kind in ("ws", "lc"):
            continue
        if kind == "bc":
            line += value.count("\n")
            continue
        if kind == "num":
            _check_int(value, label, line, included)
        elif kind == "p":
            if value in _OPEN:
                depth += 1
                if depth > limits.MAX_NESTING:
                    raise CircuitError(f"{label}, line {line}: brackets nested more than {limits.MAX_NESTING} "
                                       "deep")
            elif value in _CLOSE:
                depth = max(0, depth - 1)
        yield _Token(kind, value, line)


def _check_int(literal: str, label: str, line: int, included: bool) -> None:
    body = literal.replace("_", "").lower()
    if body.startswith(("0x", "0b", "0o")):
        digits, base = body[2:], {"x": 16, "b": 2, "o": 8}[body[1]]
    elif "." in body or "e" in body:
        return  # a real number: large ones are inf, which the importer's checks refuse
    else:
        digits, base = body, 10
    # past 64 bits' worth of digits the value need not be computed (nor can be, for 5,000 digits)
    if not digits or (len(digits) <= 64 and int(digits, base) <= limits.MAX_INT_LITERAL):
        return
    shown = "an integer literal" if included else f"the integer {literal[:24]}{'...' if len(literal) > 24 else ''}"
    raise CircuitError(f"{label}, line {line}: {shown} does not fit 64 bits (the most is "
                       f"{limits.MAX_INT_LITERAL})")


def _scan(text: str, state: _State, label: str, *, included: bool) -> None:
    toks = list(_tokens(text, label, included))
    i, n = 0, len(toks)
    start = True  # toks[i] begins a statement
    while i < n:
        tok = toks[i]
        if tok.kind != "id":
            if tok.text == "$" and state.version == 3 and _match(toks, i + 1, "num"):
                _physical(toks[i + 1].text, tok.line, label)
            start = tok.text in (";", "{", "}", "@")
            i += 1
            continue
        word = tok.text
        if start and state.binding.get(word):
            _bind(state, word, tok.line, label, included)
        start = False
        if word in ("qreg", "creg") and _match(toks, i + 1, "id", "[", "num", "]"):
            _declare(state, word == "qreg", toks[i + 3].text, tok.line, label)
            i += 5
        elif word in ("qubit", "bit") and state.version == 3 and _match(toks, i + 1, "[", "num", "]"):
            _declare(state, word == "qubit", toks[i + 2].text, tok.line, label)
            i += 4
        elif word in ("qubit", "bit") and state.version == 3 and _match(toks, i + 1, "id"):
            _declare(state, word == "qubit", "1", tok.line, label)
            i += 2
        elif word == "gate" and _match(toks, i + 1, "id"):
            i = _gate(toks, i, state, label, included)
        elif word == "include" and state.version == 2 and _match(toks, i + 1, "str"):
            _include(toks[i + 1].text.strip("\"'"), tok.line, state, label, included)
            i += 2
        else:
            i += 1


def _match(toks, i: int, *pattern: str) -> bool:
    """``toks[i:]`` starts with tokens of these kinds ("id", "num", "str") or punctuation."""
    if i + len(pattern) > len(toks):
        return False
    for tok, want in zip(toks[i:], pattern):
        if want in ("id", "num", "str"):
            if tok.kind != want:
                return False
        elif tok.text != want:
            return False
    return True


def _declare(state: _State, quantum: bool, size_text: str, line: int, label: str) -> None:
    try:
        size = int(size_text.replace("_", ""), 0)
    except ValueError:
        return  # a real-number size: the parser reports it
    if quantum:
        state.qubits += size
        if state.qubits > limits.MAX_QUBITS:
            raise CircuitError(f"{label}, line {line}: {state.qubits} qubits declared, more than the "
                               f"{limits.MAX_QUBITS} a state vector can hold")
    else:
        state.clbits += size
        if state.clbits > limits.MAX_CLBITS:
            raise CircuitError(f"{label}, line {line}: {state.clbits} classical bits declared, more than the "
                               f"limit of {limits.MAX_CLBITS}")


def _physical(index_text: str, line: int, label: str) -> None:
    """A physical qubit ``$n`` of OpenQASM 3 makes the circuit n + 1 qubits wide."""
    try:
        index = int(index_text.replace("_", ""), 10)
    except ValueError:
        return  # not an integer: the parser reports it
    if index + 1 > limits.MAX_QUBITS:
        raise CircuitError(f"{label}, line {line}: physical qubit ${index} needs {index + 1} qubits, more than the "
                           f"{limits.MAX_QUBITS} a state vector can hold")


def _gate(toks, i: int, state: _State, label: str, included: bool) -> int:
    """Record the size of the gate defined at ``toks[i]`` (``gate``); return the index after it."""
    name, line, n = toks[i + 1].text, toks[i].line, len(toks)
    has_params = _match(toks, i + 2, "(") and not _match(toks, i + 3, ")")
    calls_bound = False  # the body calls a gate that takes parameters
    j = i + 2
    while j < n and toks[j].text != "{":
        j += 1
    size, depth, start = 0, 0, True  # start: the next token begins a statement
    j += 1
    while j < n:
        t = toks[j].text
        if t == "{":
            depth += 1
            start = True
        elif t == "}":
            if depth == 0:
                break
            depth -= 1
            start = True
        elif t in (";", "@"):
            start = True
        elif start:
            start = False
            if toks[j].kind == "id" and t in _MODIFIERS:
                pass  # ctrl @ g: the gate after the '@' is the one called
            elif toks[j].kind == "id":
                size += state.sizes.get(t, 1)
                calls_bound = calls_bound or t in state.binding
                if state.binding.get(t):
                    _bind(state, t, toks[j].line, label, included)
        j += 1
    size = max(size, 1)
    if size > limits.MAX_DEFINITION_SIZE:
        what = "a gate definition" if included else f"gate {name!r}"
        raise CircuitError(f"{label}, line {line}: {what} expands to {size:,} instructions, more than the "
                           f"limit of {limits.MAX_DEFINITION_SIZE:,} per definition")
    state.sizes[name] = size
    if has_params:
        state.binding[name] = size if calls_bound else 0
    return j + 1


def _bind(state: _State, name: str, line: int, label: str, included: bool) -> None:
    """Count a call of a gate whose parameters are bound into nested definitions."""
    state.bindings += state.binding[name]
    if state.bindings > limits.MAX_BINDINGS:
        what = "gate calls" if included else f"calls up to this one of {name!r}"
        raise CircuitError(f"{label}, line {line}: {what} bind parameters into {state.bindings:,} nested gate "
                           f"instructions, more than the limit of {limits.MAX_BINDINGS:,} (each call of a gate "
                           "with parameters rebuilds every gate it calls)")


def _include(name: str, line: int, state: _State, label: str, included: bool) -> None:
    """Resolve an OpenQASM 2 include inside the program's folder and scan the file."""
    if name in STANDARD_INCLUDES:
        return
    shown = "an include" if included else f"include {name!r}"
    if state.folder is None:
        raise CircuitError(f"{label}, line {line}: {shown} names a file, but the program was given as text: "
                           "only the standard qelib1.inc can be included (pass the program's path instead)")
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if (not name or "\0" in name or PurePosixPath(name).is_absolute() or PureWindowsPath(name).anchor
            or ".." in parts):
        raise CircuitError(f"{label}, line {line}: {shown} must name a file inside the program's folder "
                           "(no absolute path, no '..')")
    try:
        path = (state.folder / name).resolve(strict=True)
        inside = path.is_relative_to(state.folder) and path.is_file()
    except (OSError, RuntimeError):  # missing, a link loop, or unreadable
        inside = False
    if not inside:
        raise CircuitError(f"{label}, line {line}: {shown} is not a file inside the program's folder")
    shown_path = path.relative_to(state.folder).as_posix()
    if path in state.open_files or len(state.open_files) >= limits.MAX_INCLUDE_DEPTH:
        raise CircuitError(f"{label}, line {line}: included file {shown_path!r} includes itself, or includes "
                           f"are nested more than {limits.MAX_INCLUDE_DEPTH} deep")
    if path.stat().st_size > limits.MAX_SOURCE_BYTES:
        raise CircuitError(f"included file {shown_path!r} is larger than {limits.MAX_SOURCE_BYTES >> 20} MiB")
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise CircuitError(f"included file {shown_path!r} could not be read as UTF-8 text") from None
    state.open_files.append(path)
    _scan(text, state, f"included file {shown_path!r}", included=True)
    state.open_files.pop()
