"""Import OpenQASM 2 (``qiskit.qasm2``) or OpenQASM 3 (``qiskit_qasm3_import``) as a :class:`~circuits.Circuit`.

The text is first checked by :mod:`circuits.qasm_scan` (sizes, nesting, literals, includes
confined to the program's folder), then parsed by Qiskit's parsers, then converted by
:func:`circuits.qiskit_import.from_qiskit`, so the same rules apply (final measurements kept,
mid-circuit measurement and reset rejected).

Whatever a malformed program makes the parsers raise, the caller gets a
:class:`~circuits.CircuitError` naming the program and, where known, the line: the parse is
wrapped here at its root, so an ``IndexError`` of the OpenQASM 3 importer or a panic of the
Rust OpenQASM 2 parser (a ``BaseException``) does not escape. ``KeyboardInterrupt`` and
``SystemExit`` pass through.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import io
import os
import re
from pathlib import Path

from circuits import limits
from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.qasm_scan import scan
from circuits.qiskit_import import MAX_MATRIX_QUBITS, from_qiskit, require_qiskit

QASM3_HINT = 'install the qasm3 extra: pip install ".[qasm3]" (or pip install qiskit-qasm3-import)'

_VERSION = re.compile(r"^\s*OPENQASM\s+(\d+)(?:\.(\d+))?\s*;", re.MULTILINE)
# a Qiskit OpenQASM 2 message that places the error: "name:line,column: message"
_QASM2_PLACE = re.compile(r"^(?P<file>[^\n]*?):(?P<line>\d+),(?P<col>\d+): (?P<msg>.*)$", re.DOTALL)
_MAIN = "<input>"  # how the OpenQASM 2 parser names the program text given to loads()


def from_qasm(source, **kwargs) -> Circuit:
    """Parse OpenQASM 2 or 3 text, or a file holding it, into a :class:`~circuits.Circuit`.

    Args:
        source: the program text, or a path (``str`` or ``os.PathLike``) to a ``.qasm`` file.
            A string that contains a ``;`` or a newline is taken as program text.
        **kwargs: passed to :func:`~circuits.qiskit_import.from_qiskit`.

    The version comes from the ``OPENQASM`` header (2 when there is none). An OpenQASM 2
    ``include`` finds the standard ``qelib1.inc`` or a file inside the folder of ``source``
    (a path); program text can include only ``qelib1.inc``. Sizes are bounded by
    :mod:`circuits.limits` before the work that grows with them.

    Raises:
        ImportError: qiskit missing, or OpenQASM 3 without qiskit-qasm3-import (says what to install).
        FileNotFoundError: ``source`` looks like a path but no such file exists.
        TypeError: ``source`` is neither text nor a path, or an unknown keyword argument.
        CircuitError: anything wrong with the program: a syntax error (with its line), an
            unsupported version, a size past a limit, an include outside the program's folder,
            or an instruction that cannot be simulated.
    """
    try:
        inspect.signature(from_qiskit).bind(None, **kwargs)
    except TypeError as exc:
        raise TypeError(f"from_qasm: {exc}") from None
    return from_qiskit(parse_qasm(source), **kwargs)


def parse_qasm(source):
    """Parse OpenQASM 2 or 3 into a ``qiskit.QuantumCircuit``, with the checks of :func:`from_qasm`.

    For callers that need Qiskit's circuit itself (to bind parameters, say) before
    :func:`~circuits.qiskit_import.from_qiskit`. A circuit read from a file is named after it.

    Raises:
        The same as :func:`from_qasm`.
    """
    require_qiskit("from_qasm")
    text, path = _read(source)
    where = str(path) if path is not None else _MAIN
    version = _version(text)
    with _as_circuit_error(f"OpenQASM {version} program {where}"):
        scan(text, version=version, folder=path.parent if path is not None else None, label=where)
        if version == 2:
            qc = _parse2(text, path, where)
        elif version == 3:
            qc = _parse3(text, where)
        else:
            raise CircuitError(f"OPENQASM {version} in {where} is not supported; expected version 2 or 3")
    if path is not None and qc.name.startswith("circuit-"):
        qc.name = path.stem
    return qc


@contextlib.contextmanager
def _as_circuit_error(where: str):
    """Turn whatever a parser raises on a malformed program into a CircuitError naming ``where``."""
    try:
        yield
    except (CircuitError, ImportError, FileNotFoundError, KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except RecursionError:
        raise CircuitError(f"{where} is nested too deeply to parse") from None
    except MemoryError:
        raise CircuitError(f"{where} needs more memory to parse than is available") from None
    except BaseException as exc:  # noqa: BLE001 - the Rust parser's PanicException is a BaseException
        raise CircuitError(f"{where} could not be parsed: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0][:200] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _parse2(text: str, path: Path | None, where: str):
    from qiskit import qasm2  # noqa: PLC0415

    # the program's own folder only: not the working directory, which Qiskit's default includes
    include_path = (str(path.parent.resolve()),) if path is not None else ()
    try:
        return qasm2.loads(text, include_path=include_path,
                           custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS,
                           custom_classical=qasm2.LEGACY_CUSTOM_CLASSICAL)
    except qasm2.QASM2ParseError as exc:
        raise CircuitError(f"OpenQASM 2 syntax error in {where}: {_qasm2_message(str(exc))}") from exc


def _qasm2_message(msg: str) -> str:
    """The parser's message; for an error inside an included file, only the file and line
    (the message could quote the file's content)."""
    msg = _strip_quotes(msg)
    m = _QASM2_PLACE.match(msg)
    if m and m["file"] != _MAIN:
        return (f"in included file {m['file']!r}, line {m['line']}, column {m['col']} (messages about "
                "included files do not quote them)")
    return msg


def _parse3(text: str, where: str):
    try:
        import qiskit_qasm3_import  # noqa: F401, PLC0415 - the OpenQASM 3 importer
    except ImportError as exc:
        raise ImportError(f"OpenQASM 3 import needs the qiskit-qasm3-import package: {QASM3_HINT}") from exc
    import openqasm3  # noqa: PLC0415 - installed with the importer
    from openqasm3.parser import QASM3ParsingError  # noqa: PLC0415
    from qiskit_qasm3_import import ConversionError  # noqa: PLC0415

    try:
        # the grammar's lexer also prints each error to stderr: the message below says it once
        with contextlib.redirect_stderr(io.StringIO()):
            program = openqasm3.parse(text)
    except QASM3ParsingError as exc:
        detail = str(exc) or _qasm3_syntax_message(text) or "the parser gave no detail"
        raise CircuitError(f"OpenQASM 3 syntax error in {where}: {detail}") from exc
    try:
        return _checked_visitor()().convert(program, source=text).circuit
    except ConversionError as exc:
        raise CircuitError(f"OpenQASM 3 error in {where}: {exc.message}") from exc
    except CircuitError as exc:
        raise CircuitError(f"OpenQASM 3 error in {where}: {exc}") from exc


@functools.cache
def _checked_visitor():
    """The OpenQASM 3 importer's converter, with declared sizes checked before registers are
    built and any exception of a statement turned into a CircuitError naming its line."""
    from openqasm3 import ast  # noqa: PLC0415
    from qiskit.circuit import Gate  # noqa: PLC0415
    from qiskit.circuit.annotated_operation import (  # noqa: PLC0415
        AnnotatedOperation,
        ControlModifier,
        InverseModifier,
        PowerModifier,
    )
    from qiskit_qasm3_import import ConversionError  # noqa: PLC0415
    from qiskit_qasm3_import.converter import ConvertVisitor, GateBuilder  # noqa: PLC0415

    class SharedGate(Gate):
        """A gate of a ``gate`` statement. Copies share its definition: the importer copies a
        gate per call and per broadcast, and a copy of a definition copies every nested
        definition again, exponential in the nesting depth. Definitions are not changed after
        the statement is read, so sharing them is safe."""

        definition_is_shared = True  # circuits.qiskit_import shares its matrix between calls

        def __deepcopy__(self, memo=None):
            cpy = copy.copy(self)
            cpy._params = copy.deepcopy(self._params, memo)
            return cpy

    class SharingBuilder(GateBuilder):
        """Builds a SharedGate on the definition itself where no parameters are bound, on a
        bound copy where numbers are. A call with a free parameter (inside another gate's
        body) stays a plain Gate: binding that parameter later rewrites its definition."""

        def __call__(self, *parameters):
            built = super().__call__(*parameters)  # checks the count; binds a copy when there are parameters
            if any(getattr(p, "parameters", None) for p in parameters):
                return built
            gate = SharedGate(built.name, built.num_qubits, list(built.params))
            gate._definition = built._definition if parameters else self._definition
            return gate

    class CheckedVisitor(ConvertVisitor):
        def visit(self, node, context=None):
            try:
                return super().visit(node, context)
            except (CircuitError, ConversionError, KeyboardInterrupt, SystemExit, GeneratorExit):
                raise
            except BaseException as exc:  # noqa: BLE001 - the innermost node with a place names the line
                span = getattr(node, "span", None)
                if span is None:
                    raise
                if isinstance(exc, IndexError):
                    what = f"an index is out of range ({exc})"
                elif isinstance(exc, RecursionError):
                    what = "nested too deeply"
                else:
                    what = _describe(exc)
                raise CircuitError(f"{span.start_line},{span.start_column}: {what}") from None

        def _define_gate(self, name, definition, *args, **kwargs):
            if isinstance(definition, GateBuilder):
                sharing = SharingBuilder.__new__(SharingBuilder)
                sharing.__dict__.update(definition.__dict__)
                definition = sharing
            return super()._define_gate(name, definition, *args, **kwargs)

        def _apply_gate_modifier(self, modifier, gate, context):
            # on a defined gate, inv / pow / ctrl are kept as annotations whose matrix
            # circuits.qiskit_import builds from the gate's (shared) matrix: Qiskit's own
            # inverse(), power() and control() expand the definition down to every leaf
            annotated = isinstance(gate, AnnotatedOperation)
            if not (annotated or getattr(gate, "definition_is_shared", False)) or modifier.argument is None and \
                    modifier.modifier is ast.GateModifierName.pow:
                return super()._apply_gate_modifier(modifier, gate, context)
            if modifier.modifier is ast.GateModifierName.inv:
                mod = InverseModifier()
            elif modifier.modifier is ast.GateModifierName.pow:
                mod = PowerModifier(self._resolve_constant_float(modifier.argument, context))
            else:
                n = 1 if modifier.argument is None else self._resolve_constant_int(modifier.argument, context)
                if not isinstance(n, int) or n < 1 or gate.num_qubits + n > MAX_MATRIX_QUBITS:
                    return super()._apply_gate_modifier(modifier, gate, context)
                mod = ControlModifier(n, (1 << n) - 1 if modifier.modifier is ast.GateModifierName.ctrl else 0)
            if annotated:
                return AnnotatedOperation(gate.base_op, [*gate.modifiers, mod])
            return AnnotatedOperation(gate, [mod])

        def visit_QubitDeclaration(self, node, context):
            size = 1 if node.size is None else self._resolve_constant_int(node.size, context)
            _check_size(context.circuit.num_qubits, size, limits.MAX_QUBITS, "qubits", node)
            return super().visit_QubitDeclaration(node, context)

        def visit_ClassicalDeclaration(self, node, context):
            bits = getattr(node.type, "size", None)
            if type(node.type).__name__ == "BitType" and bits is not None:
                size = self._resolve_constant_int(bits, context)
                _check_size(context.circuit.num_clbits, size, limits.MAX_CLBITS, "classical bits", node)
            return super().visit_ClassicalDeclaration(node, context)

    return CheckedVisitor


def _check_size(have: int, size, limit: int, what: str, node) -> None:
    span = getattr(node, "span", None)
    place = f"{span.start_line},{span.start_column}: " if span is not None else ""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CircuitError(f"{place}a register size must be a non-negative integer")
    if have + size > limit:
        total = f"{have + size:,}" if size < 1 << 64 else "more than 2^64"
        raise CircuitError(f"{place}{total} {what} declared, more than the limit of {limit:,}")


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
            if len(source) > limits.MAX_SOURCE_BYTES:
                raise CircuitError(f"the OpenQASM text is longer than {limits.MAX_SOURCE_BYTES >> 20} MiB")
            return source, None
        path = Path(source)
    else:
        raise TypeError(f"source must be OpenQASM text or a path, got {type(source).__name__}")
    if not path.is_file():
        raise FileNotFoundError(f"from_qasm: {str(path)!r} is not OpenQASM text (no ';') and no such file exists")
    if path.stat().st_size > limits.MAX_SOURCE_BYTES:
        raise CircuitError(f"{path} is larger than {limits.MAX_SOURCE_BYTES >> 20} MiB")
    try:
        return path.read_bytes().decode("utf-8"), path
    except UnicodeDecodeError as exc:
        raise CircuitError(f"{path} is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


def _version(text: str) -> int:
    m = _VERSION.search(_strip_comments(text))
    return int(m.group(1)[:9]) if m else 2  # 9 digits: any version past 3 is refused alike


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def _strip_quotes(msg: str) -> str:
    while len(msg) >= 2 and msg[0] == msg[-1] and msg[0] in "\"'":
        msg = msg[1:-1]
    return msg
