"""Import OpenQASM 2 (``qiskit.qasm2``) or OpenQASM 3 (``qiskit.qasm3``) as a :class:`~circuits.Circuit`.

The text is parsed by Qiskit, then converted by :func:`circuits.qiskit_import.from_qiskit`, so
the same rules apply (final measurements kept, mid-circuit measurement and reset rejected).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.qiskit_import import from_qiskit, require_qiskit

QASM3_HINT = "pip install qiskit-qasm3-import"

_VERSION = re.compile(r"^\s*OPENQASM\s+(\d+)(?:\.(\d+))?\s*;", re.MULTILINE)


def from_qasm(source, **kwargs) -> Circuit:
    """Parse OpenQASM 2 or 3 text, or a file holding it, into a :class:`~circuits.Circuit`.

    Args:
        source: the program text, or a path (``str`` or ``os.PathLike``) to a ``.qasm`` file.
            A string that contains a ``;`` or a newline is taken as program text.
        **kwargs: passed to :func:`~circuits.qiskit_import.from_qiskit`.

    The version comes from the ``OPENQASM`` header (2 when there is none). Includes are
    resolved next to the file when ``source`` is a path.

    Raises:
        ImportError: qiskit missing, or OpenQASM 3 without qiskit-qasm3-import (says what to install).
        FileNotFoundError: ``source`` looks like a path but no such file exists.
        CircuitError: a syntax error (the parser's message, with line and column), an
            unsupported version, or an instruction that cannot be simulated.
    """
    qiskit = require_qiskit("from_qasm")
    text, path = _read(source)
    version = _version(text)
    where = str(path) if path is not None else "<input>"
    if version == 2:
        from qiskit import qasm2  # noqa: PLC0415

        include_path = (str(path.parent),) + tuple(qasm2.LEGACY_INCLUDE_PATH) if path else qasm2.LEGACY_INCLUDE_PATH
        try:
            qc = qasm2.loads(text, include_path=include_path,
                             custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS,
                             custom_classical=qasm2.LEGACY_CUSTOM_CLASSICAL)
        except qasm2.QASM2ParseError as exc:
            raise CircuitError(f"OpenQASM 2 syntax error in {where}: {_strip_quotes(str(exc))}") from exc
    elif version == 3:
        try:
            import qiskit_qasm3_import  # noqa: F401, PLC0415 - the parser qiskit.qasm3 needs
        except ImportError as exc:
            raise ImportError(f"OpenQASM 3 import needs the qiskit-qasm3-import package: {QASM3_HINT}") from exc
        from openqasm3.parser import QASM3ParsingError  # noqa: PLC0415 - installed with the importer
        from qiskit import qasm3  # noqa: PLC0415

        try:
            qc = qasm3.loads(text)
        except QASM3ParsingError as exc:
            detail = str(exc) or _qasm3_syntax_message(text) or "the parser gave no detail"
            raise CircuitError(f"OpenQASM 3 syntax error in {where}: {detail}") from exc
        except qiskit.exceptions.QiskitError as exc:
            raise CircuitError(f"OpenQASM 3 error in {where}: {exc}") from exc
    else:
        raise CircuitError(f"OPENQASM {version} in {where} is not supported; expected version 2 or 3")
    if path is not None and qc.name.startswith("circuit-"):
        qc.name = path.stem
    return from_qiskit(qc, **kwargs)


def _qasm3_syntax_message(text: str) -> str:
    """The first syntax error of ``text`` with its line, from the OpenQASM 3 reference grammar.

    The importer parses with a bail-out strategy that drops the position; parsing again with an
    error listener recovers the parser's own message.
    """
    try:
        from antlr4 import CommonTokenStream, InputStream  # noqa: PLC0415
        from antlr4.error.ErrorListener import ErrorListener  # noqa: PLC0415
        from openqasm3.parser import qasm3Lexer, qasm3Parser  # noqa: PLC0415 - the grammar it parses with
    except ImportError:
        return ""
    found: list[str] = []

    class _Listener(ErrorListener):
        def syntaxError(self, recognizer, offending, line, column, msg, exc):  # noqa: N802 - ANTLR's name
            found.append(f"line {line}, column {column}: {msg}")

    lexer = qasm3Lexer(InputStream(text))
    lexer.removeErrorListeners()
    lexer.addErrorListener(_Listener())
    parser = qasm3Parser(CommonTokenStream(lexer))
    parser.removeErrorListeners()
    parser.addErrorListener(_Listener())
    try:
        parser.program()
    except Exception:  # noqa: BLE001 - only the messages gathered so far matter
        pass
    return found[0] if found else ""


def _read(source) -> tuple[str, Path | None]:
    if isinstance(source, os.PathLike):
        path = Path(source)
    elif isinstance(source, str):
        if ";" in source or "\n" in source:
            return source, None
        path = Path(source)
    else:
        raise TypeError(f"source must be OpenQASM text or a path, got {type(source).__name__}")
    if not path.is_file():
        raise FileNotFoundError(f"from_qasm: {str(path)!r} is not OpenQASM text (no ';') and no such file exists")
    return path.read_text(), path


def _version(text: str) -> int:
    m = _VERSION.search(_strip_comments(text))
    return int(m.group(1)) if m else 2


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def _strip_quotes(msg: str) -> str:
    return msg[1:-1] if len(msg) >= 2 and msg[0] == msg[-1] == '"' else msg
