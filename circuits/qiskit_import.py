"""Import a Qiskit ``QuantumCircuit`` as a :class:`~circuits.Circuit`.

Every unitary instruction becomes one :class:`~circuits.Gate` whose matrix is the instruction's
own (``Gate.to_matrix()`` for standard gates, ``qiskit.quantum_info.Operator`` otherwise), on the
instruction's qubits in the order Qiskit lists them: this is the convention of ``circuits.Gate``,
so no bit reordering happens. Qubit ``i`` of the circuit is ``qc.qubits[i]``.

Kept: the global phase (also of inlined definitions), final measurements (as ``measured``).
Ignored: barriers and delays. Inlined: ``box`` scopes, and gates wider than
``max_matrix_qubits`` that have a definition (their matrix would be too large to build).
Rejected with the instruction's index and name: mid-circuit measurements, resets, classical
control flow, other instructions on classical bits, and anything without a unitary matrix.

qiskit is imported lazily; ``import circuits`` works without it.
"""

from __future__ import annotations

import cmath
import contextlib
import math
from dataclasses import dataclass, field

import numpy as np

from circuits import limits
from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.gate import UNITARY_TOL, Gate, check_atol

INSTALL_HINT = "pip install qsim-tc[qiskit]"

# a gate wider than this with a definition is inlined rather than turned into one dense matrix
MAX_MATRIX_QUBITS = 10

_IGNORED = frozenset({"barrier", "delay"})


def require_qiskit(what: str = "from_qiskit"):
    """Import qiskit or raise an ImportError that says how to install it."""
    try:
        import qiskit  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise ImportError(f"{what} needs qiskit, which is not installed: {INSTALL_HINT}") from exc
    return qiskit


@dataclass
class _Walk:
    """What the walk over instructions has gathered so far."""

    gates: list = field(default_factory=list)
    phase: float = 0.0
    measures: dict = field(default_factory=dict)  # clbit -> qubit
    measured_at: dict = field(default_factory=dict)  # qubit -> (top-level index, name) of its measurement
    matrices: dict = field(default_factory=dict)  # memo key -> (operation kept alive, its matrix)
    sizes: dict = field(default_factory=dict)  # memo key -> (operation kept alive, instructions it expands to)
    work: int = 0  # multiply-adds spent turning definitions into matrices


def from_qiskit(qc, *, check_unitary: bool = True, atol: float = UNITARY_TOL,
                max_matrix_qubits: int = MAX_MATRIX_QUBITS) -> Circuit:
    """Turn a Qiskit ``QuantumCircuit`` into a :class:`~circuits.Circuit`.

    Args:
        qc: a ``qiskit.QuantumCircuit`` with all parameters bound.
        check_unitary: check each gate matrix is unitary to ``atol``.
        atol: tolerance of the unitarity check.
        max_matrix_qubits: gates on more qubits that have a definition are inlined.

    Returns:
        The circuit: same width, gates in order, global phase, ``measured`` = the final
        measurements as (qubit, clbit) pairs, ``n_clbits`` = ``qc.num_clbits``.

    The sizes of :mod:`circuits.limits` are checked before the work that grows with them: the
    width, and the number of instructions after inlining, counted first. The matrix of a gate
    known only by its definition is built from the definition's gates, once per distinct
    definition (a gate defined by calling another twice, thirty deep, costs thirty products).

    Raises:
        ImportError: qiskit is not installed (says what to install).
        TypeError: ``qc`` is not a QuantumCircuit.
        CircuitError: unbound parameters (named), a size past a limit, or an instruction that a
            pure-state simulation cannot run (named with its index): mid-circuit measurement,
            reset, classical control, or a non-unitary instruction. Whatever else Qiskit raises
            while an instruction is converted becomes a CircuitError naming the instruction.
    """
    qiskit = require_qiskit()
    if not isinstance(qc, qiskit.QuantumCircuit):
        raise TypeError(f"qc must be a qiskit.QuantumCircuit, got {type(qc).__name__}")
    if check_unitary:
        check_atol(atol)  # a caller's bad argument, not a malformed instruction: its own error
    if qc.num_parameters:
        names = ", ".join(p.name for p in qc.parameters)
        raise CircuitError(
            f"circuit {qc.name!r} has {qc.num_parameters} unbound parameter(s): {names}; "
            "bind them first (qc.assign_parameters({...}))"
        )
    if qc.num_qubits < 1:
        raise CircuitError(f"circuit {qc.name!r} has no qubits")
    for count, limit, what in ((qc.num_qubits, limits.MAX_QUBITS, "qubits"),
                               (qc.num_clbits, limits.MAX_CLBITS, "classical bits"),
                               (len(qc.data), limits.MAX_INSTRUCTIONS, "instructions")):
        if count > limit:
            raise CircuitError(f"circuit {qc.name!r} has {count:,} {what}, more than the limit of {limit:,}")
    qmap = {bit: i for i, bit in enumerate(qc.qubits)}
    cmap = {bit: i for i, bit in enumerate(qc.clbits)}
    walk = _Walk(phase=_angle(qc.global_phase, "global_phase", qc.name))
    opts = (check_unitary, atol, max_matrix_qubits)
    total = 0
    for index, inst in enumerate(qc.data):
        with _converting(index, inst.operation):
            total += _size(inst.operation, len(inst.qubits), walk, opts, qiskit)
        if total > limits.MAX_INSTRUCTIONS:
            raise CircuitError(f"circuit {qc.name!r} expands to more than {limits.MAX_INSTRUCTIONS:,} instructions "
                               f"(the limit) once definitions are inlined, by instruction {index} "
                               f"({inst.operation.name!r})")
    for index, inst in enumerate(qc.data):
        with _converting(index, inst.operation):
            _visit(inst, [qmap[q] for q in inst.qubits], [cmap[c] for c in inst.clbits], index, walk, opts, qiskit)
    measured = sorted(((q, c) for c, q in walk.measures.items()), key=lambda qc_: qc_[1])
    return Circuit(qc.num_qubits, walk.gates, global_phase=walk.phase, measured=measured,
                   n_clbits=qc.num_clbits, name=qc.name)


@contextlib.contextmanager
def _converting(index: int, op):
    """Whatever converting instruction ``index`` raises, other than an interruption, as a CircuitError."""
    try:
        yield
    except (CircuitError, KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except RecursionError:
        raise CircuitError(f"instruction {index} ({op.name!r}) has definitions nested too deeply") from None
    except BaseException as exc:  # noqa: BLE001 - Qiskit's Rust code panics with a BaseException
        lines = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
        raise CircuitError(f"instruction {index} ({op.name!r}) cannot be converted: {detail}") from exc


def _inlined_body(op, n_qubits: int, opts, qiskit):
    """The circuit the walk inlines in place of ``op`` (a box's body, or the definition of a
    gate wider than ``max_matrix_qubits``), or None when ``op`` becomes one gate."""
    if isinstance(op, qiskit.circuit.ControlFlowOp):
        return op.blocks[0] if op.name == "box" and op.blocks else None
    if n_qubits > opts[2] and not isinstance(op, qiskit.circuit.library.UnitaryGate) and op.name != "measure":
        return getattr(op, "definition", None)
    return None


def _size(op, n_qubits: int, walk: _Walk, opts, qiskit) -> int:
    """How many instructions ``op`` becomes once inlined (1 unless the walk inlines it), counted
    once per distinct definition and no further than just past the limit."""
    if op.name in _IGNORED:
        return 0
    key = _memo_key(op, qiskit)
    if key is not None and key in walk.sizes:
        return walk.sizes[key][1]
    body = _inlined_body(op, n_qubits, opts, qiskit)
    total = 1
    if body is not None:
        total = 0
        for inst in body.data:
            total += _size(inst.operation, len(inst.qubits), walk, opts, qiskit)
            if total > limits.MAX_INSTRUCTIONS:
                break
    if key is not None:
        walk.sizes[key] = (op, total)
    return total


def _visit(inst, qubits, clbits, index, walk: _Walk, opts, qiskit) -> None:
    """Add one instruction (a top-level one at ``index``, or one nested inside it)."""
    op = inst.operation
    name = op.name
    where = f"instruction {index} ({name!r} on qubit(s) {qubits})"
    if name in _IGNORED:
        return
    if isinstance(op, qiskit.circuit.ControlFlowOp):
        if name == "box":  # a scope, no classical control: inline its body
            body = op.blocks[0]
            _check_no_clbits_in_box(body, where)
            inner = {bit: qubits[k] for k, bit in enumerate(body.qubits)}
            walk.phase += _angle(body.global_phase, "global_phase", body.name)
            for inner_inst in body.data:
                _visit(inner_inst, [inner[q] for q in inner_inst.qubits], [], index, walk, opts, qiskit)
            return
        raise CircuitError(f"{where} is classical control flow ({type(op).__name__}); it cannot be "
                           "simulated on a pure state")
    if getattr(op, "condition", None) is not None:
        raise CircuitError(f"{where} is classically conditioned; classical control cannot be simulated "
                           "on a pure state")
    if name == "measure":
        if not clbits:
            raise CircuitError(f"{where} is a measurement inside a definition; only final measurements are supported")
        q, c = qubits[0], clbits[0]
        walk.measures[c] = q
        walk.measured_at.setdefault(q, (index, name))
        return
    if name == "reset":
        raise CircuitError(f"{where} is a reset, which is not unitary and cannot be simulated on a pure state")
    for q in qubits:
        if q in walk.measured_at:
            j, mname = walk.measured_at[q]
            raise CircuitError(
                f"mid-circuit measurement: qubit {q} is measured by instruction {j} ({mname!r}) and used "
                f"again by {where}; only final measurements can be simulated"
            )
    if clbits:
        raise CircuitError(f"{where} acts on classical bits {clbits}; only final measurements are supported")
    if not qubits:  # a zero-qubit gate: a global phase
        walk.phase += float(np.angle(_matrix(op, where, walk, qiskit)[0, 0]))
        return
    check_unitary, atol, _ = opts
    definition = _inlined_body(op, len(qubits), opts, qiskit)
    if definition is not None:
        inner = {bit: qubits[k] for k, bit in enumerate(definition.qubits)}
        walk.phase += _angle(definition.global_phase, "global_phase", name)
        for inner_inst in definition.data:
            _visit(inner_inst, [inner[q] for q in inner_inst.qubits], [], index, walk, opts, qiskit)
        return
    m = _matrix(op, where, walk, qiskit)
    walk.gates.append(Gate(m, tuple(qubits), name, check_unitary=check_unitary, atol=atol))


def _memo_key(op, qiskit):
    """A key under which ``op``'s matrix and size can be shared with other operations, or None.

    Two cases are safe: a plain ``Gate`` whose definition is one and the same circuit object
    (OpenQASM 3 gates, ``QuantumCircuit.to_gate()``), and a gate of an OpenQASM 2 ``gate``
    statement (names are unique within a program, so program, name and parameters decide it).
    """
    if _is_qasm2_defined(op):
        try:
            return ("qasm2", id(op._gates), op.name, tuple(float(p) for p in op.params))
        except (TypeError, ValueError, AttributeError):
            return None
    definition = getattr(op, "_definition", None)
    shared = type(op) is qiskit.circuit.Gate or getattr(op, "definition_is_shared", False)
    if shared and definition is not None:
        return ("definition", id(definition))
    return None


def _is_qasm2_defined(op) -> bool:
    cls = type(op)
    return cls.__name__ == "_DefinedGate" and cls.__module__ == "qiskit.qasm2.parse"


def _matrix(op, where: str, walk: _Walk, qiskit) -> np.ndarray:
    """The instruction's unitary in Qiskit's convention (first listed qubit = low bit)."""
    key = _memo_key(op, qiskit)
    if key is not None and key in walk.matrices:
        return walk.matrices[key][1]
    if isinstance(op, qiskit.circuit.AnnotatedOperation):
        return _annotated(op, where, walk, qiskit)
    if isinstance(op, qiskit.circuit.ControlledGate) and not hasattr(op, "__array__") and op.base_gate is not None:
        # a controlled gate without a matrix of its own (HGate().control(2), UnitaryGate(u).control(2),
        # MCXGate(3), mcp): Operator would multiply out its synthesized definition, whose rounding
        # (1e-16 to 3e-14) leaks between control values and makes the gate dense to a structure
        # reader (qsim_tc.stages.structure); the gate is the identity where its controls are off and
        # its base gate where they are on, exactly
        return _controlled(_matrix(op.base_gate, where, walk, qiskit), op.num_ctrl_qubits, op.ctrl_state)
    m = None
    # a gate's own matrix; an OpenQASM 2 gate's __array__ would go through Operator(definition),
    # which copies every nested definition again (exponential in the nesting depth)
    if hasattr(op, "__array__") and not _is_qasm2_defined(op):
        try:
            m = np.asarray(op.to_matrix(), dtype=np.complex128)
        except Exception:  # noqa: BLE001 - a controlled custom gate, say: its definition below
            m = None
    if m is None:
        definition = getattr(op, "definition", None)
        m = (_from_definition(definition, where, walk, qiskit) if definition is not None
             else _operator(op, where, qiskit))
    if key is not None:
        walk.matrices[key] = (op, m)
    return m


def _annotated(op, where: str, walk: _Walk, qiskit) -> np.ndarray:
    """The matrix of a gate with modifiers (inverse, power, controls), applied in their order."""
    from qiskit.circuit.annotated_operation import ControlModifier, InverseModifier, PowerModifier  # noqa: PLC0415

    m = _matrix(op.base_op, where, walk, qiskit)
    for mod in op.modifiers:
        if isinstance(mod, InverseModifier):
            m = m.conj().T
        elif isinstance(mod, PowerModifier):
            m = _power(m, mod.power, where)
        elif isinstance(mod, ControlModifier):
            m = _controlled(m, mod.num_ctrl_qubits, mod.ctrl_state)
        else:
            raise CircuitError(f"{where} has a modifier {type(mod).__name__} that cannot be simulated")
    return m


def _power(m: np.ndarray, exponent: float, where: str) -> np.ndarray:
    """``m`` to a real power: repeated products for an integer, else the principal power of its eigenvalues."""
    if float(exponent).is_integer() and abs(exponent) <= 1 << 20:
        return np.linalg.matrix_power(m if exponent >= 0 else m.conj().T, abs(int(exponent)))
    if not math.isfinite(exponent):
        raise CircuitError(f"{where}: a gate power must be finite, got {exponent}")
    from scipy.linalg import schur  # noqa: PLC0415 - a dependency of qiskit, which made this gate

    t, z = schur(m, output="complex")  # a unitary is normal: t is diagonal
    return (z * np.exp(1j * exponent * np.angle(np.diag(t)))) @ z.conj().T


def _controlled(m: np.ndarray, n_controls: int, ctrl_state: int) -> np.ndarray:
    """``m`` controlled by ``n_controls`` qubits listed first (the low bits), active in ``ctrl_state``."""
    dim = m.shape[0] << n_controls
    out = np.eye(dim, dtype=np.complex128)
    rows = (np.arange(m.shape[0]) << n_controls) + ctrl_state
    out[np.ix_(rows, rows)] = m
    return out


def _operator(op, where: str, qiskit) -> np.ndarray:
    try:
        return np.asarray(qiskit.quantum_info.Operator(op).data, dtype=np.complex128)
    except Exception as exc:  # noqa: BLE001 - Qiskit raises several types here
        raise CircuitError(f"{where} has no unitary matrix and cannot be simulated: {exc}") from exc


def _from_definition(definition, where: str, walk: _Walk, qiskit) -> np.ndarray:
    """The matrix of a definition circuit: its gates' matrices applied in turn to the identity."""
    d = definition.num_qubits
    if definition.num_clbits:
        raise CircuitError(f"{where} has no unitary matrix: its definition uses classical bits")
    dim = 1 << d
    pos = {bit: k for k, bit in enumerate(definition.qubits)}
    t = np.eye(dim, dtype=np.complex128).reshape([2] * d + [dim])
    phase = _angle(definition.global_phase, "global_phase", definition.name)
    for inst in definition.data:
        op = inst.operation
        if op.name in _IGNORED:
            continue
        if op.name in ("measure", "reset") or isinstance(op, qiskit.circuit.ControlFlowOp):
            raise CircuitError(f"{where} has no unitary matrix: its definition holds {op.name!r}")
        sub = _matrix(op, where, walk, qiskit)
        qs = [pos[q] for q in inst.qubits]
        if not qs:
            t = t * sub[0, 0]
            continue
        k = len(qs)
        walk.work += dim * dim << k
        if walk.work > limits.MAX_MATRIX_WORK:
            raise CircuitError(f"{where}: building its matrix from its definition takes more than "
                               f"{limits.MAX_MATRIX_WORK:,} multiply-adds (the limit)")
        # sub's index bit j is qubit qs[j]; in C order its axis a is bit k-1-a; t's axis for qubit q is d-1-q
        axes = [d - 1 - qs[k - 1 - a] for a in range(k)]
        t = np.tensordot(sub.reshape([2] * (2 * k)), t, axes=(list(range(k, 2 * k)), axes))
        t = np.moveaxis(t, list(range(k)), axes)
    m = t.reshape(dim, dim)
    return m * cmath.exp(1j * phase) if phase else m


def _angle(value, what: str, name: str) -> float:
    try:
        angle = float(value)
    except TypeError:
        raise CircuitError(f"{what} of {name!r} is the unbound expression {value}; bind its parameters first") from None
    if not math.isfinite(angle):
        raise CircuitError(f"{what} of {name!r} is {angle}; a phase must be a finite number of radians")
    return angle


def _check_no_clbits_in_box(body, where: str) -> None:
    if body.num_clbits:
        raise CircuitError(f"{where} is a box with classical bits; only final measurements are supported")
