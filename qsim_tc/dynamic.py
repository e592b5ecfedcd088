"""Circuits with measurements, resets, saves and classical control, run with shot branching.

A Qiskit circuit is compiled once into a *program*: a list of operations, each one of

- :class:`Unitary`: a run of unitary instructions, as one :class:`circuits.Circuit` that the
  :class:`~qsim_tc.Simulator` runs on the current state (its stage plan is decided once per
  segment and reused by every branch);
- :class:`Measure` / :class:`Reset` of one qubit (mid-circuit);
- :class:`Save`: an Aer-style ``save_*`` instruction (state, probabilities, amplitudes, Pauli
  expectation values);
- :class:`IfElse`, :class:`While`, :class:`Switch`: classical control, with conditions read from
  the classical bits (a bit, a register, or a ``qiskit.circuit.classical.expr`` expression);
  ``for`` loops are unrolled at compile time;
- :class:`FinalMeasure`: the trailing measurements, sampled from the final state.

Execution keeps *branches*: a state, the number of shots that share it and their classical bits.
At a mid-circuit measurement the branch draws how many of its shots read 1 (binomial in the
outcome probability) and splits in two only where both outcomes occur: with k measurements a run
costs at most ``min(shots, 2^k)`` states, not ``shots`` simulations, and with one shot it samples
as it goes. After a reset and after classical control, branches with the same classical bits
whose states agree to rounding are merged (:func:`_merge`): the shots that leave a
repeat-until-success loop at different iterations share one state again. The final measurements
are sampled (one pass) per branch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from circuits.circuit import Circuit
from circuits.errors import CircuitError
from circuits.qiskit_import import from_qiskit, require_qiskit
from qsim_tc.state import StateVector

# the instructions a program keeps apart from unitaries (everything else must have a matrix)
SAVE_KINDS = ("save_statevector", "save_state", "save_statevector_dict", "save_probabilities",
              "save_probabilities_dict", "save_amplitudes", "save_amplitudes_sq", "save_expval")
# how Aer combines a save taken by several shots: one shot's value, or the average over shots
_AVERAGED = frozenset({"save_probabilities", "save_probabilities_dict", "save_amplitudes_sq", "save_expval"})
_IGNORED = frozenset({"barrier", "delay"})
# a while loop that still runs after this many iterations is reported rather than run forever
MAX_LOOP_ITERATIONS = 100_000
# branches with the same classical bits whose states differ by at most this many units of
# rounding (L2 norm) share one state (_merge)
MERGE_ULPS = 16
_MERGE_CHUNK = 1 << 20


# --- the program ------------------------------------------------------------------------------


@dataclass
class Unitary:
    circuit: Circuit


@dataclass
class Measure:
    qubit: int
    clbit: int


@dataclass
class Reset:
    qubit: int


@dataclass
class Save:
    kind: str
    label: str
    qubits: tuple
    params: list


@dataclass
class IfElse:
    condition: object  # callable(clbits: int) -> bool
    true_body: list
    false_body: list


@dataclass
class While:
    condition: object
    body: list


@dataclass
class Switch:
    target: object  # callable(clbits: int) -> int
    cases: list  # (values: tuple | None for default, body)


@dataclass
class FinalMeasure:
    pairs: list  # (qubit, clbit)


@dataclass
class Program:
    """A compiled circuit: ``ops`` on ``n_qubits`` qubits and ``n_clbits`` classical bits."""

    n_qubits: int
    n_clbits: int
    ops: list
    has_measurements: bool
    dynamic: bool  # a mid-circuit measurement, a reset or classical control


def compile_circuit(qc) -> Program:
    """Compile a bound ``QuantumCircuit`` into a :class:`Program`.

    Raises:
        TypeError: ``qc`` is not a QuantumCircuit.
        CircuitError: unbound parameters, an instruction without a matrix that is none of the
            supported ones (named with its index), a ``break``/``continue``, a save option that is
            not supported, or a malformed condition.
    """
    qiskit = require_qiskit("qsim_tc.dynamic")
    if not isinstance(qc, qiskit.QuantumCircuit):
        raise TypeError(f"circuit must be a qiskit.QuantumCircuit, got {type(qc).__name__}")
    if qc.num_parameters:
        names = ", ".join(p.name for p in qc.parameters)
        raise CircuitError(f"circuit {qc.name!r} has unbound parameter(s): {names}; bind them first "
                           "(parameter_binds=, or qc.assign_parameters)")
    builder = _Builder(qc, qiskit)
    ops = builder.block(qc, list(range(qc.num_qubits)), list(range(qc.num_clbits)), top=True)
    if qc.global_phase:
        ops.insert(0, Unitary(Circuit(qc.num_qubits, global_phase=float(qc.global_phase), name="global_phase")))
    # the trailing measurements (each qubit once, nothing after them) are sampled, not branched
    tail = len(ops)
    seen = set()
    while tail > 0 and isinstance(ops[tail - 1], Measure) and ops[tail - 1].qubit not in seen:
        seen.add(ops[tail - 1].qubit)
        tail -= 1
    final = FinalMeasure([(m.qubit, m.clbit) for m in ops[tail:]])
    ops = ops[:tail] + ([final] if final.pairs else [])
    dynamic = any(isinstance(op, (Measure, Reset, IfElse, While, Switch)) for op in _walk(ops))
    has_meas = any(isinstance(op, (Measure, FinalMeasure)) for op in _walk(ops))
    return Program(qc.num_qubits, qc.num_clbits, ops, has_meas, dynamic)


# the error report of a program that projects and renormalises its branches' states
DYNAMIC_NO_BOUND = ("mid-circuit measurements, resets or classical control: no bound is derived through their "
                    "projections and renormalisations")


def needs_runner(qc) -> bool:
    """Whether ``qc`` must run as a :class:`Program` (:class:`Runner`) rather than as one unitary
    circuit with final measurements: it has classical control flow, a reset, or a qubit that is
    used after it is measured (what :func:`circuits.from_qiskit` refuses)."""
    qiskit = require_qiskit("qsim_tc.dynamic")
    measured: set = set()
    for inst in qc.data:
        op = inst.operation
        if isinstance(op, qiskit.circuit.ControlFlowOp) or op.name == "reset":
            return True
        if op.name in _IGNORED:
            continue
        qs = {qc.find_bit(q).index for q in inst.qubits}
        if op.name == "measure":
            measured |= qs
        elif measured & qs:
            return True
    return False


def _walk(ops):
    for op in ops:
        yield op
        if isinstance(op, IfElse):
            yield from _walk(op.true_body)
            yield from _walk(op.false_body)
        elif isinstance(op, While):
            yield from _walk(op.body)
        elif isinstance(op, Switch):
            for _, body in op.cases:
                yield from _walk(body)


class _Builder:
    """Walks a circuit and its blocks, gathering runs of unitary instructions."""

    def __init__(self, qc, qiskit):
        self.qc = qc
        self.qiskit = qiskit
        self.n = qc.num_qubits
        self.top_clbits = {bit: i for i, bit in enumerate(qc.clbits)}

    def block(self, circ, qubits: list, clbits: list, top: bool = False) -> list:
        """The ops of ``circ`` whose qubit k is ``qubits[k]`` and clbit k ``clbits[k]`` (top level)."""
        qiskit = self.qiskit
        qmap = {bit: qubits[k] for k, bit in enumerate(circ.qubits)}
        cmap = {bit: clbits[k] for k, bit in enumerate(circ.clbits)}
        ops: list = []
        segment = qiskit.QuantumCircuit(self.n, name=circ.name)

        def flush():
            nonlocal segment
            if segment.data:
                try:
                    ops.append(Unitary(from_qiskit(segment)))
                except CircuitError as exc:
                    raise CircuitError(f"in circuit {self.qc.name!r}: {exc}") from None
                segment = qiskit.QuantumCircuit(self.n, name=circ.name)

        for index, inst in enumerate(circ.data):
            op = inst.operation
            name = op.name
            qs = [qmap[q] for q in inst.qubits]
            cs = [cmap[c] for c in inst.clbits]
            where = f"instruction {index} ({name!r} on qubit(s) {qs})"
            if name in _IGNORED:
                continue
            if name == "measure":
                flush()
                ops.append(Measure(qs[0], cs[0]))
            elif name == "reset":
                flush()
                ops.append(Reset(qs[0]))
            elif name in SAVE_KINDS:
                flush()
                ops.append(self.save(op, qs, where))
            elif name == "store":
                raise CircuitError(f"in circuit {self.qc.name!r}: {where} writes a classical variable; classical "
                                   "variables are not supported, only bits and registers")
            elif name in ("break_loop", "continue_loop"):
                raise CircuitError(f"in circuit {self.qc.name!r}: {where} is not supported; break and continue "
                                   "cannot be run, rewrite the loop with a condition")
            elif isinstance(op, qiskit.circuit.ControlFlowOp):
                flush()
                ops.extend(self.control(op, qs, cs, cmap, where))
            elif cs:
                raise CircuitError(f"in circuit {self.qc.name!r}: {where} acts on classical bits and is not "
                                   "supported")
            else:
                segment.append(op, qs)
        flush()
        return ops

    def save(self, op, qs, where) -> Save:
        kind = "save_statevector" if op.name == "save_state" else op.name
        if getattr(op, "_subtype", "single") in ("list", "c_list", "c_single", "c_average", "accum"):
            raise CircuitError(f"in circuit {self.qc.name!r}: {where} asks for pershot or conditional saving "
                               f"(subtype {op._subtype!r}); only single and average saves are supported")
        label = getattr(op, "_label", None) or op.name
        return Save(kind, str(label), tuple(qs), list(op.params))

    def control(self, op, qs, cs, cmap, where) -> list:
        qiskit = self.qiskit
        name = op.name
        if name == "box":
            return self.block(op.blocks[0], qs, cs)
        if name == "if_else":
            cond = self.condition(op.condition, cmap, where)
            true_body = self.block(op.blocks[0], qs, cs)
            false_body = self.block(op.blocks[1], qs, cs) if len(op.blocks) > 1 and op.blocks[1] is not None else []
            return [IfElse(cond, true_body, false_body)]
        if name == "while_loop":
            return [While(self.condition(op.condition, cmap, where), self.block(op.blocks[0], qs, cs))]
        if name == "for_loop":
            indexset, param, body = op.params
            ops = []
            for value in indexset:
                bound = body.assign_parameters({param: value}) if param is not None and param in body.parameters \
                    else body
                ops.extend(self.block(bound, qs, cs))
            return ops
        if name == "switch_case":
            target = self.value_of(op.target, cmap, where)
            cases = []
            for values, body in op.cases_specifier():
                keys = None if any(v is qiskit.circuit.CASE_DEFAULT for v in values) else tuple(int(v) for v in values)
                cases.append((keys, self.block(body, qs, cs)))
            return [Switch(target, cases)]
        raise CircuitError(f"in circuit {self.qc.name!r}: {where} ({type(op).__name__}) is not supported; "
                           "break and continue cannot be run, rewrite the loop with a condition")

    # --- classical values -------------------------------------------------------------------

    def bit_index(self, bit, cmap, where) -> int:
        if bit in cmap:
            return cmap[bit]
        if bit in self.top_clbits:
            return self.top_clbits[bit]
        raise CircuitError(f"in circuit {self.qc.name!r}: {where} reads a classical bit outside the circuit")

    def value_of(self, target, cmap, where):
        """A callable(clbits) -> int for a Clbit, a ClassicalRegister or an expression."""
        qiskit = self.qiskit
        if isinstance(target, qiskit.circuit.Clbit):
            i = self.bit_index(target, cmap, where)
            return lambda bits: (bits >> i) & 1
        if isinstance(target, qiskit.circuit.ClassicalRegister):
            idx = [self.bit_index(b, cmap, where) for b in target]
            return lambda bits: sum(((bits >> i) & 1) << k for k, i in enumerate(idx))
        return _expr(target, lambda b: self.bit_index(b, cmap, where), qiskit, where)

    def condition(self, cond, cmap, where):
        if isinstance(cond, tuple):
            target, value = cond
            read = self.value_of(target, cmap, where)
            value = int(value)
            return lambda bits: read(bits) == value
        read = self.value_of(cond, cmap, where)
        return lambda bits: bool(read(bits))


def _expr(node, bit_index, qiskit, where):
    """Evaluate a ``qiskit.circuit.classical.expr`` node on the classical bits (an int)."""
    from qiskit.circuit.classical import expr  # noqa: PLC0415

    if isinstance(node, expr.Var):
        var = node.var
        if isinstance(var, qiskit.circuit.Clbit):
            i = bit_index(var)
            return lambda bits: (bits >> i) & 1
        if isinstance(var, qiskit.circuit.ClassicalRegister):
            idx = [bit_index(b) for b in var]
            return lambda bits: sum(((bits >> i) & 1) << k for k, i in enumerate(idx))
        raise CircuitError(f"{where}: classical variables ({node}) are not supported, only bits and registers")
    if isinstance(node, expr.Value):
        v = int(node.value)
        return lambda bits: v
    if isinstance(node, expr.Cast):
        inner = _expr(node.operand, bit_index, qiskit, where)
        if node.type.kind is qiskit.circuit.classical.types.Bool:
            return lambda bits: int(bool(inner(bits)))
        return inner
    if isinstance(node, expr.Unary):
        inner = _expr(node.operand, bit_index, qiskit, where)
        if node.op is expr.Unary.Op.LOGIC_NOT:
            return lambda bits: int(not inner(bits))
        if node.op is expr.Unary.Op.BIT_NOT:
            width = getattr(node.type, "width", 1) or 1
            mask = (1 << width) - 1
            return lambda bits: ~inner(bits) & mask
    if isinstance(node, expr.Binary):
        a = _expr(node.left, bit_index, qiskit, where)
        b = _expr(node.right, bit_index, qiskit, where)
        ops = {
            expr.Binary.Op.BIT_AND: lambda x, y: x & y, expr.Binary.Op.BIT_OR: lambda x, y: x | y,
            expr.Binary.Op.BIT_XOR: lambda x, y: x ^ y,
            expr.Binary.Op.LOGIC_AND: lambda x, y: int(bool(x) and bool(y)),
            expr.Binary.Op.LOGIC_OR: lambda x, y: int(bool(x) or bool(y)),
            expr.Binary.Op.EQUAL: lambda x, y: int(x == y), expr.Binary.Op.NOT_EQUAL: lambda x, y: int(x != y),
            expr.Binary.Op.LESS: lambda x, y: int(x < y), expr.Binary.Op.LESS_EQUAL: lambda x, y: int(x <= y),
            expr.Binary.Op.GREATER: lambda x, y: int(x > y), expr.Binary.Op.GREATER_EQUAL: lambda x, y: int(x >= y),
        }
        fn = ops.get(node.op)
        if fn is not None:
            return lambda bits: fn(a(bits), b(bits))
    raise CircuitError(f"{where}: the classical expression {node} is not supported")


# --- running ----------------------------------------------------------------------------------


@dataclass
class _Branch:
    state: StateVector | None  # None: |0...0>, not allocated yet
    shots: int
    clbits: int = 0


@dataclass
class Outcome:
    """What a program run gives: per-shot classical bits and the saved data."""

    clbits: np.ndarray  # one int per shot (object dtype past 62 bits), in random shot order
    saved: dict = field(default_factory=dict)
    branches: int = 1  # the most states held at once
    final_state: StateVector | None = None  # the last branch's state at the end


class _Saver:
    """Gathers save instructions over branches: a single value (the last branch's) or an
    average over the shots that reached the save, as Aer's save types do."""

    def __init__(self):
        self.values: dict = {}
        self.weights: dict = {}
        self.kinds: dict = {}

    def add(self, save: Save, value, shots: int) -> None:
        if save.label in self.kinds and self.kinds[save.label] != save.kind:
            raise CircuitError(f"save label {save.label!r} is used by two kinds of save ({self.kinds[save.label]} "
                               f"and {save.kind}); give them different labels")
        self.kinds[save.label] = save.kind
        if save.kind not in _AVERAGED:
            self.values[save.label] = value
            return
        if isinstance(value, dict):
            acc = self.values.setdefault(save.label, {})
            for k, v in value.items():
                acc[k] = acc.get(k, 0.0) + shots * v
        else:
            self.values[save.label] = self.values.get(save.label, 0) + shots * np.asarray(value)
        self.weights[save.label] = self.weights.get(save.label, 0) + shots

    def result(self) -> dict:
        out = {}
        for label, value in self.values.items():
            w = self.weights.get(label)
            if w is None:
                out[label] = value
            elif isinstance(value, dict):
                out[label] = {k: v / w for k, v in value.items()}
            else:
                out[label] = value / w
                if self.kinds[label] == "save_expval":
                    out[label] = float(out[label])
        return out


class Runner:
    """Runs a :class:`Program` for a number of shots on one Simulator.

    Args:
        simulator: the :class:`qsim_tc.Simulator` that runs the unitary segments.
        rng: the ``numpy.random.Generator`` of the measurement outcomes.
    """

    def __init__(self, simulator, rng: np.random.Generator):
        self.sim = simulator
        self.rng = rng
        self.peak = 1
        self.saver = _Saver()
        self.final: list = []  # (branch, samples) of the final measurement

    def run(self, program: Program, shots: int, state: StateVector | None = None) -> Outcome:
        """All shots of ``program`` (from ``state``, default |0...0>, which it may change); the
        classical bits of each shot and the saved data."""
        self.program = program
        branches = self._ops(program.ops, [_Branch(state, shots)])
        wide = program.n_clbits > 62
        values = []
        for b in branches:
            values.append(np.full(b.shots, b.clbits, dtype=object if wide else np.int64))
        clbits = np.concatenate(values) if values else np.zeros(0, np.int64)
        clbits = clbits[self.rng.permutation(clbits.size)]  # shots in no particular branch order
        last = branches[-1].state if branches else None
        return Outcome(clbits, self.saver.result(), self.peak, last)

    def _ops(self, ops, branches: list) -> list:
        for op in ops:
            if not branches:
                break
            branches = self._op(op, branches)
            if not isinstance(op, FinalMeasure):  # (sampled groups share one final state)
                self.peak = max(self.peak, len(branches))
        return branches

    def _op(self, op, branches: list) -> list:
        if isinstance(op, Unitary):
            for b in branches:
                if len(op.circuit) == 0 and b.state is not None:
                    b.state.apply_global_phase(op.circuit.global_phase)
                elif b.state is None:
                    b.state = self.sim.run(op.circuit).state
                else:
                    b.state = self.sim.run(op.circuit, initial_state=b.state, in_place=True).state
            return branches
        if isinstance(op, Measure):
            return [nb for b in branches for nb in self._measure(b, op.qubit, op.clbit)]
        if isinstance(op, Reset):
            return _merge([nb for b in branches for nb in self._measure(b, op.qubit, None, reset=True)])
        if isinstance(op, FinalMeasure):
            return [nb for b in branches for nb in self._sample(b, op.pairs)]
        if isinstance(op, Save):
            for b in branches:
                self.saver.add(op, _save_value(op, self._state(b)), b.shots)
            return branches
        if isinstance(op, IfElse):
            yes = [b for b in branches if op.condition(b.clbits)]
            no = [b for b in branches if not op.condition(b.clbits)]
            return _merge(self._ops(op.true_body, yes) + self._ops(op.false_body, no))
        if isinstance(op, While):
            done, live = [], branches
            for _ in range(MAX_LOOP_ITERATIONS):
                done += [b for b in live if not op.condition(b.clbits)]
                live = [b for b in live if op.condition(b.clbits)]
                if not live:
                    return _merge(done)
                live = self._ops(op.body, live)
            raise CircuitError(f"a while loop still runs after {MAX_LOOP_ITERATIONS} iterations")
        if isinstance(op, Switch):
            out = []
            groups: dict = {}
            for b in branches:
                value = op.target(b.clbits)
                for k, (keys, _) in enumerate(op.cases):
                    if keys is None or value in keys:
                        groups.setdefault(k, []).append(b)
                        break
                else:
                    out.append(b)  # no case and no default: nothing runs
            for k, group in groups.items():
                out += self._ops(op.cases[k][1], group)
            return _merge(out)
        raise TypeError(f"unknown program op {type(op).__name__}")

    def _state(self, b: _Branch) -> StateVector:
        if b.state is None:
            b.state = StateVector(self.program.n_qubits, dtype=self.sim.dtype, device=self.sim.device,
                                  workspace_bytes=self.sim.workspace_bytes)
        return b.state

    def _measure(self, b: _Branch, q: int, c: int | None, reset: bool = False) -> list:
        state = self._state(b)
        halves = state.data().reshape(-1, 2, 1 << q)
        p1 = float((abs(halves[:, 1, :]) ** 2).sum()) / max(float((abs(halves) ** 2).sum()), 1e-300)
        p1 = min(max(p1, 0.0), 1.0)
        ones = int(self.rng.binomial(b.shots, p1))
        out = []
        for outcome, shots in ((0, b.shots - ones), (1, ones)):
            if shots == 0:
                continue
            st = state if shots == b.shots or outcome == 1 else state.copy()
            _project(st, q, outcome, p1 if outcome else 1.0 - p1, reset)
            bits = b.clbits
            if c is not None:
                bits = (bits & ~(1 << c)) | (outcome << c)
            out.append(_Branch(st, shots, bits))
        return out

    def _sample(self, b: _Branch, pairs: list) -> list:
        qubits = sorted({q for q, _ in pairs})
        if b.state is None:
            samples = np.zeros(b.shots, np.int64)
        else:
            samples = b.state.sample(b.shots, seed=self.rng, qubits=qubits)
        slot = {q: k for k, q in enumerate(qubits)}
        groups = {}
        for value, count in zip(*np.unique(samples, return_counts=True)):
            bits = b.clbits
            for q, c in pairs:
                bits = (bits & ~(1 << c)) | (((int(value) >> slot[q]) & 1) << c)
            groups[bits] = groups.get(bits, 0) + int(count)
        return [_Branch(b.state, count, bits) for bits, count in groups.items()]


def _merge(branches: list) -> list:
    """Branches with the same classical bits whose states agree to :data:`MERGE_ULPS` units of
    rounding (in the L2 norm of their difference) become one, with their shots added: the shots
    of a repeat-until-success loop leave it at different iterations in the same state (up to the
    rounding of each iteration's renormalisation), a reset of a qubit that is not entangled gives
    the same state for both outcomes, and from then on they share one state instead of one each.
    The shots that move to the kept state see amplitudes that differ from their own by less than
    one gate's rounding."""
    out: list = []
    kept: dict = {}
    for b in branches:
        for r in kept.setdefault(b.clbits, []):
            if _same_state(r.state, b.state):
                r.shots += b.shots
                break
        else:
            kept[b.clbits].append(b)
            out.append(b)
    return out


def _same_state(a: StateVector | None, b: StateVector | None) -> bool:
    if a is b:
        return True
    if a is None or b is None or a.n_qubits != b.n_qubits or a.dtype != b.dtype:
        return False
    x, y = a.data(), b.data()
    tol = MERGE_ULPS * float(np.finfo(x.real.dtype).eps)
    step = max(1, x.size // 64)
    if float(abs(x[::step] - y[::step]).max()) > tol:  # a sample first: differing states rarely need a full pass
        return False
    total = 0.0
    for i in range(0, x.size, _MERGE_CHUNK):  # in pieces: no state-sized temporary
        d = x[i:i + _MERGE_CHUNK] - y[i:i + _MERGE_CHUNK]
        total += float((d.real * d.real + d.imag * d.imag).sum())
        if total > tol * tol:
            return False
    return True


def _project(state: StateVector, q: int, outcome: int, p: float, reset: bool) -> None:
    """Keep the ``outcome`` half of qubit ``q``, renormalised; with ``reset`` move it to |0>."""
    data = state.data()  # logical order: writing it writes the state
    halves = data.reshape(-1, 2, 1 << q)
    halves[:, 1 - outcome, :] = 0
    if reset and outcome == 1:
        halves[:, 0, :] = halves[:, 1, :]
        halves[:, 1, :] = 0
    if p > 0:
        data *= 1.0 / math.sqrt(p)


def _save_value(save: Save, state: StateVector):
    """The value an Aer ``save_*`` instruction records, from ``state``."""
    from qiskit.quantum_info import Statevector  # noqa: PLC0415

    kind, qubits = save.kind, list(save.qubits)
    if kind == "save_statevector":
        return Statevector(state.to_numpy().astype(np.complex128))
    if kind == "save_statevector_dict":
        amps = state.to_numpy()
        nz = np.flatnonzero(np.abs(amps) > 0)
        return {hex(int(i)): complex(amps[i]) for i in nz}
    if kind in ("save_probabilities", "save_probabilities_dict"):
        p = state.probabilities(qubits)
        p = p.get() if hasattr(p, "get") else np.asarray(p)
        if kind == "save_probabilities":
            return np.asarray(p, dtype=np.float64)
        return {int(i): float(p[i]) for i in np.flatnonzero(p)}
    if kind in ("save_amplitudes", "save_amplitudes_sq"):
        idx = [int(i) for i in save.params]
        amps = np.array([state.amplitude(i) for i in idx], dtype=np.complex128)
        return amps if kind == "save_amplitudes" else np.abs(amps) ** 2
    if kind == "save_expval":
        from qsim_tc.observables import expectation_values  # noqa: PLC0415

        n = state.n_qubits
        terms = []
        for label, coeffs in save.params:
            full = ["I"] * n
            for k, ch in enumerate(reversed(label)):  # label's last letter on the instruction's first qubit
                full[n - 1 - qubits[k]] = ch
            terms.append(("".join(full), float(np.real(coeffs[0]))))
        return float(expectation_values(state, [terms])[0].real)
    raise CircuitError(f"save kind {kind!r} is not supported")
