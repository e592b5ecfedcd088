"""Reading the ``.npz`` file that :meth:`Circuit.save` writes, trusting nothing in it.

The file is a zip archive of ``.npy`` arrays: ``n_qubits``, ``n_gates``, ``n_clbits`` (int
scalars), ``global_phase`` (a real scalar), ``circuit_name`` (a string scalar), ``names`` (one
string per gate), ``measured`` ((k, 2) ints: qubit, clbit) and, for gate ``i``, ``q{i}`` (its
qubits) and ``m{i}`` (its (2^d, 2^d) matrix).

Every array's header (shape and dtype) is read and checked before any array data: a few MB of
compressed zeros can declare gigabytes, so the declared sizes are checked against the fields'
meaning (a matrix's shape follows from its gate's qubit count) and their total against a bound
first. The arrays then go through the same constructors as a built circuit (:class:`Gate`,
:class:`Circuit`), so a loaded circuit gets the same checks. Every failure is a
:class:`CircuitError` that names the file and the field.
"""

from __future__ import annotations

import contextlib
import lzma
import math
import re
import zipfile
import zlib
from pathlib import Path

import numpy as np

from circuits.errors import CircuitError
from circuits.gate import Gate, check_qubits
from circuits.validate import check_phase

# the fields every file has, and what each must be: (number of dimensions, dtype kinds)
_FIELDS = {
    "n_qubits": (0, "iu"),
    "n_gates": (0, "iu"),
    "n_clbits": (0, "iu"),
    "global_phase": (0, "fiu"),
    "circuit_name": (0, "U"),
    "names": (1, "U"),
    "measured": (2, "iu"),
}
_GATE_FIELD = re.compile(r"([mq])(0|[1-9][0-9]*)")  # m{i}: gate i's matrix; q{i}: its qubits
# Circuit.load refuses a file whose arrays declare more than this many bytes (unless told more):
# a few MB of compressed zeros can declare gigabytes
MAX_LOAD_BYTES = 1 << 30
_KINDS = {"iu": "integers", "fiu": "a real number", "U": "text", "fciu": "numbers"}
# numpy's own default bound on an .npy header; a longer one is refused unread
_MAX_HEADER = 10000
# what a damaged archive or .npy raises while read: zipfile's NotImplementedError (an unknown
# compression or zip version) and RuntimeError (an encrypted member), the decompressors' errors
_READ_ERRORS = (TypeError, ValueError, EOFError, OSError, NotImplementedError, RuntimeError, zipfile.BadZipFile,
                zlib.error, lzma.LZMAError)


def load_circuit(cls, path: str | Path, *, check_unitary: bool = True, max_bytes: int = MAX_LOAD_BYTES):
    """The circuit in the ``.npz`` file ``path``, built by ``cls`` (:class:`Circuit` or a
    subclass; see :meth:`Circuit.load`).

    Raises:
        TypeError: ``check_unitary`` not a bool, ``max_bytes`` not an int.
        ValueError: ``max_bytes`` < 1.
        CircuitError: a malformed file or field (the message names the file and the field).
        OSError: the file cannot be opened (FileNotFoundError included).
    """
    if not isinstance(check_unitary, bool):
        raise TypeError(f"check_unitary must be True or False, got {check_unitary!r}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)):
        raise TypeError(f"max_bytes must be an int, got {max_bytes!r} ({type(max_bytes).__name__})")
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    label = str(path)
    # opened first, so that a missing or unreadable file is the OSError it is, and whatever the
    # archive's bytes make zipfile raise is a malformed file
    with open(path, "rb") as fp:
        try:
            archive = zipfile.ZipFile(fp)
        except (zipfile.LargeZipFile, *_READ_ERRORS) as exc:
            raise CircuitError(f"{label}: not a circuit file (an .npz archive written by Circuit.save): {exc}") \
                from None
        with archive:
            return _Reader(archive, label).circuit(cls, check_unitary, int(max_bytes))


class _Reader:
    """One open archive: its members' headers, checked, then their arrays."""

    def __init__(self, archive: zipfile.ZipFile, label: str):
        self.archive = archive
        self.label = label
        self.members: dict[str, zipfile.ZipInfo] = {}
        for info in archive.infolist():
            field = info.filename[:-4] if info.filename.endswith(".npy") else None
            if field is None or not (field in _FIELDS or _GATE_FIELD.fullmatch(field)):
                raise CircuitError(f"{label}: unexpected member {info.filename!r}; not a file written by Circuit.save")
            if field in self.members:
                raise CircuitError(f"{label}: field {field!r} appears twice")
            self.members[field] = info
        missing = [f for f in _FIELDS if f not in self.members]
        if missing:
            raise CircuitError(f"{label}: field {missing[0]!r} is missing; not a file written by Circuit.save")
        self.headers = {field: self._header(field) for field in self.members}

    @contextlib.contextmanager
    def field(self, name: str):
        """Turn any failure while ``name`` is read or checked into a CircuitError naming it."""
        try:
            yield
        except CircuitError as exc:
            if str(exc).startswith(self.label + ": "):
                raise
            raise CircuitError(f"{self.label}: field {name!r}: {exc}") from None
        except _READ_ERRORS as exc:
            raise CircuitError(f"{self.label}: field {name!r} cannot be read: {exc}") from None

    def fail(self, name: str, message: str) -> CircuitError:
        return CircuitError(f"{self.label}: field {name!r} {message}")

    def _header(self, name: str) -> tuple[tuple[int, ...], np.dtype]:
        """The shape and dtype a member declares (its data is not read)."""
        with self.field(name), self.archive.open(self.members[name]) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=_MAX_HEADER)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=_MAX_HEADER)
            else:
                raise CircuitError(f"has .npy format version {version}; expected 1.0 or 2.0")
        return tuple(shape), np.dtype(dtype)

    def expect(self, name: str, ndim: int, kinds: str) -> tuple[int, ...]:
        """The declared shape of ``name``, after checking its number of dimensions and dtype kind."""
        shape, dtype = self.headers[name]
        if len(shape) != ndim or any(n < 0 for n in shape):
            raise self.fail(name, f"has shape {shape}; expected {ndim} dimension(s)")
        if dtype.kind not in kinds or dtype.hasobject or dtype.fields is not None:
            raise self.fail(name, f"holds {dtype}; expected {_KINDS[kinds]}")
        return shape

    def declared_bytes(self, name: str) -> int:
        shape, dtype = self.headers[name]
        return math.prod(shape) * dtype.itemsize

    def read(self, name: str) -> np.ndarray:
        """The array of ``name`` (its header was checked and its size counted before)."""
        with self.field(name), self.archive.open(self.members[name]) as f:
            return np.lib.format.read_array(f, allow_pickle=False, max_header_size=_MAX_HEADER)

    def scalar(self, name: str):
        return self.read(name)[()]

    def circuit(self, cls, check_unitary: bool, max_bytes: int):
        for name, (ndim, kinds) in _FIELDS.items():
            self.expect(name, ndim, kinds)
        if self.headers["measured"][0][1] != 2:
            raise self.fail("measured", f"has shape {self.headers['measured'][0]}; expected (k, 2): qubit, clbit")
        total = sum(self.declared_bytes(name) for name in _FIELDS)
        if total > max_bytes:
            raise CircuitError(f"{self.label}: its fields declare {total:,} bytes, more than max_bytes={max_bytes:,}")
        with self.field("n_qubits"):
            n_qubits = int(self.scalar("n_qubits"))
            if n_qubits < 1:
                raise CircuitError(f"must be >= 1, got {n_qubits}")
        with self.field("n_gates"):
            n_gates = int(self.scalar("n_gates"))
            if n_gates < 0:
                raise CircuitError(f"must be >= 0, got {n_gates}")
        self._check_gate_fields(n_gates, n_qubits, total, max_bytes)
        if self.headers["names"][0] != (n_gates,):
            raise self.fail("names", f"has shape {self.headers['names'][0]}; expected ({n_gates},), one per gate")
        with self.field("names"):
            names = [str(s) for s in self.read("names")]
        gates = []
        for i in range(n_gates):
            with self.field(f"q{i}"):
                qubits = check_qubits(self.read(f"q{i}").tolist(), n_qubits)
            with self.field(f"m{i}"):
                gates.append(Gate(self.read(f"m{i}"), qubits, names[i], check_unitary=check_unitary))
        with self.field("global_phase"):
            phase = check_phase(self.scalar("global_phase").item(), "global_phase")
        with self.field("measured"):
            measured = [tuple(row) for row in self.read("measured").tolist()]
        with self.field("n_clbits"):
            n_clbits = int(self.scalar("n_clbits"))
            if n_clbits < 0:
                raise CircuitError(f"must be >= 0, got {n_clbits}")
        with self.field("circuit_name"):
            name = str(self.scalar("circuit_name"))
        with self.field("measured"):  # the fields above are checked: what Circuit refuses is here
            return cls(n_qubits, gates, global_phase=phase, measured=measured, n_clbits=n_clbits, name=name)

    def _check_gate_fields(self, n_gates: int, n_qubits: int, total: int, max_bytes: int) -> None:
        """Every gate's two fields present, of the shapes its qubit count implies, and the whole
        file's declared size within ``max_bytes``, all from the headers."""
        present = len(self.members) - len(_FIELDS)
        for i in range(min(n_gates, present // 2 + 1)):  # n_gates itself may be absurd
            for field in (f"q{i}", f"m{i}"):
                if field not in self.members:
                    raise CircuitError(f"{self.label}: field {field!r} is missing (n_gates = {n_gates})")
        if 2 * n_gates != present:
            raise self.fail("n_gates", f"is {n_gates}, but the file holds {present} gate field(s) "
                                       f"(two per gate: q{{i}} and m{{i}})")
        for i in range(n_gates):
            (d,) = self.expect(f"q{i}", 1, "iu")
            if not 1 <= d <= n_qubits:
                raise self.fail(f"q{i}", f"lists {d} qubit(s); a gate of a {n_qubits}-qubit circuit acts on "
                                         f"1..{n_qubits}")
            rows, cols = self.expect(f"m{i}", 2, "fciu")
            # compared through bit_length: 1 << d of a declared d could be astronomically large
            if rows != cols or rows & (rows - 1) or rows.bit_length() - 1 != d:
                need = f"({1 << d}, {1 << d})" if d <= 64 else f"(2**{d}, 2**{d})"
                raise self.fail(f"m{i}", f"has shape {(rows, cols)}; a gate on {d} qubit(s) needs {need}")
            # the raw array, and the complex128 copy the gate keeps
            total += self.declared_bytes(f"q{i}") + self.declared_bytes(f"m{i}") + 16 * rows * cols
            if total > max_bytes:
                raise CircuitError(f"{self.label}: its fields declare more than max_bytes={max_bytes:,} bytes "
                                   f"(reached at gate {i} of {n_gates}); pass a larger max_bytes to load it")
