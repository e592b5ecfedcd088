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

from dataclasses import dataclass, field

import numpy as np

from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.gate import UNITARY_TOL, Gate

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

    Raises:
        ImportError: qiskit is not installed (says what to install).
        TypeError: ``qc`` is not a QuantumCircuit.
        CircuitError: unbound parameters (named), or an instruction that a pure-state
            simulation cannot run (named with its index): mid-circuit measurement, reset,
            classical control, or a non-unitary instruction.
    """
    qiskit = require_qiskit()
    if not isinstance(qc, qiskit.QuantumCircuit):
        raise TypeError(f"qc must be a qiskit.QuantumCircuit, got {type(qc).__name__}")
    if qc.num_parameters:
        names = ", ".join(p.name for p in qc.parameters)
        raise CircuitError(
            f"circuit {qc.name!r} has {qc.num_parameters} unbound parameter(s): {names}; "
            "bind them first (qc.assign_parameters({...}))"
        )
    if qc.num_qubits < 1:
        raise CircuitError(f"circuit {qc.name!r} has no qubits")
    qmap = {bit: i for i, bit in enumerate(qc.qubits)}
    cmap = {bit: i for i, bit in enumerate(qc.clbits)}
    walk = _Walk(phase=_angle(qc.global_phase, "global_phase", qc.name))
    opts = (check_unitary, atol, max_matrix_qubits)
    for index, inst in enumerate(qc.data):
        _visit(inst, [qmap[q] for q in inst.qubits], [cmap[c] for c in inst.clbits], index, walk, opts, qiskit)
    measured = sorted(((q, c) for c, q in walk.measures.items()), key=lambda qc_: qc_[1])
    return Circuit(qc.num_qubits, walk.gates, global_phase=walk.phase, measured=measured,
                   n_clbits=qc.num_clbits, name=qc.name)


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
        walk.phase += float(np.angle(_matrix(op, where, qiskit)[0, 0]))
        return
    check_unitary, atol, max_q = opts
    definition = None
    if len(qubits) > max_q and not isinstance(op, qiskit.circuit.library.UnitaryGate):
        definition = getattr(op, "definition", None)
    if definition is not None:
        inner = {bit: qubits[k] for k, bit in enumerate(definition.qubits)}
        walk.phase += _angle(definition.global_phase, "global_phase", name)
        for inner_inst in definition.data:
            _visit(inner_inst, [inner[q] for q in inner_inst.qubits], [], index, walk, opts, qiskit)
        return
    m = _matrix(op, where, qiskit)
    walk.gates.append(Gate(m, tuple(qubits), name, check_unitary=check_unitary, atol=atol))


def _matrix(op, where: str, qiskit) -> np.ndarray:
    """The instruction's unitary in Qiskit's convention (first listed qubit = low bit)."""
    to_matrix = getattr(op, "to_matrix", None)
    if to_matrix is not None:
        try:
            return np.asarray(to_matrix(), dtype=np.complex128)
        except Exception:  # noqa: BLE001 - gates without __array__ go through Operator below
            pass
    try:
        return np.asarray(qiskit.quantum_info.Operator(op).data, dtype=np.complex128)
    except Exception as exc:  # noqa: BLE001 - Qiskit raises several types here
        raise CircuitError(f"{where} has no unitary matrix and cannot be simulated: {exc}") from exc


def _angle(value, what: str, name: str) -> float:
    try:
        return float(value)
    except TypeError:
        raise CircuitError(f"{what} of {name!r} is the unbound expression {value}; bind its parameters first") from None


def _check_no_clbits_in_box(body, where: str) -> None:
    if body.num_clbits:
        raise CircuitError(f"{where} is a box with classical bits; only final measurements are supported")
