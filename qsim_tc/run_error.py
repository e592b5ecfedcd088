"""The error bound of a run, from what its runner applied (:mod:`qsim_tc.error_bound` does the
algebra): the steps of a gate-path run (each applied gate or fused block, with the choices of
every product it ran), of a stage run (each stage's ops as its executor runs them), and the
prediction ``Simulator(tolerance=...)`` uses to choose methods before a run.

Cost: one :meth:`~qsim_tc.error_bound.ErrorAccumulator.add` a step (a few model evaluations),
and the norms of each distinct gate matrix once (O(4^d)); nothing touches the state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

import gemm
from circuits import Circuit
from gemm import error_model as em
from qsim_tc import error_bound as eb
from qsim_tc.errors import ToleranceError

__all__ = ["ToleranceError", "Tuning", "apply_tolerance", "distributed_report", "gate_run_report", "guard_norms",
           "norm_unit_roundoff", "precision_notes", "predicted_bounds", "phase_report", "report_of", "sequence_report",
           "stage_ops", "stage_run_report", "stage_steps", "tune_precision"]

# the stage engine's op kinds (qsim_tc.stages.structure, .plan); named here so that this module
# does not import the stage package (it imports numba-compiled executors)
_DIAGONAL, _CONTROLLED, _RELABEL = "diagonal", "controlled", "relabel"


class _Norms:
    """``(|| |M| ||_2 bound, ||M||_F bound, most nonzeros in a row, in a column, signed
    permutation)`` per distinct matrix object, computed once."""

    def __init__(self):
        self._cache: dict[int, tuple] = {}

    def __call__(self, m: np.ndarray) -> tuple[float, float, int, int, bool]:
        hit = self._cache.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1:]
        out = (em.abs_norm_bound(m), em.frob_norm_bound(m), *em.max_row_col_nonzeros(m), em.is_unit_monomial(m))
        self._cache[id(m)] = (m, *out)  # (the matrix kept: its id stays its own)
        return out


def _expand(choices: Mapping) -> list[dict]:
    """A product's choices, one dict per batch entry where a batched product recorded a choice
    per entry (``"<key>_per_batch"``: the model is evaluated for each)."""
    per = {k[:-len("_per_batch")]: v for k, v in choices.items()
           if k.endswith("_per_batch") and isinstance(v, (list, tuple)) and v}
    if not per:
        return [dict(choices)]
    out = []
    for i in range(max(len(v) for v in per.values())):
        c = dict(choices)
        for k, v in per.items():
            c[k] = v[min(i, len(v) - 1)]
        out.append(c)
    return out


def _distinct(choices: Sequence[Mapping]) -> tuple[dict, ...]:
    seen: dict[str, dict] = {}
    for ch in choices:
        for c in _expand(ch):
            seen.setdefault(repr(c), c)
    return tuple(seen.values()) or ({},)


def fused_widths_of(applied: Circuit, covers, circuit: Circuit) -> list[tuple[int, ...]] | None:
    """Per applied gate, the widths of the input gates multiplied (in double) into its matrix,
    leaving out the signed permutations (CX, SWAP, X, Z...: their contraction only copies and
    negates, exactly); empty where it is an input gate itself (None without fusion)."""
    if covers is None:
        return None
    out = []
    for g, members in zip(applied.gates, covers):
        fused = len(members) > 1 or circuit.gates[members[0]] is not g
        out.append(tuple(len(circuit.gates[i].qubits) for i in members
                         if not em.is_unit_monomial(circuit.gates[i].matrix)) if fused else ())
    return out


def gate_run_report(applied: Circuit, stats, covers, circuit: Circuit, dtype, *,
                    initial_norm: float = 1.0, from_zero: bool = False,
                    state_norms: Mapping[int, float] | None = None, norm_u: float = em.U64) -> eb.ErrorReport:
    """The error report of a gate-path run.

    Args:
        applied: the circuit as applied (fused or not); stats: its GateStats (one per gate).
        covers: for each applied gate the input gates it applies (None: no fusion).
        circuit: the input circuit (the widths of the gates a fused block multiplied).
        dtype: the state's dtype; initial_norm: the start state's norm.
        from_zero: the run started from |0...0> as made (the first gates' products count only
            the state's nonzero terms: :class:`~qsim_tc.error_bound.ErrorAccumulator`).
        state_norms: applied gate index -> the state's norm measured just before that gate (the
            auto runner's guard measures it around the blocks it guards per block); the step's
            model then takes the smaller of it (with its rounding) and the carried bound.
        norm_u: the unit roundoff of the arithmetic that measured ``state_norms``
            (:func:`norm_unit_roundoff`).
    """
    acc = eb.ErrorAccumulator(initial_norm, from_zero=from_zero)
    norms = _Norms()
    n_amp = 1 << applied.n_qubits
    fused = fused_widths_of(applied, covers, circuit)
    state_norms = state_norms or {}
    for st in stats:
        g = applied.gates[st.index]
        m = np.asarray(g.matrix)
        d = len(g.qubits)
        widths = fused[st.index] if fused is not None else ()
        info = st.info
        method = info.method
        if info.path == "kernel":  # the small-gate kernel: the method's arithmetic, no choices
            method, choices = _kernel_method(dtype), ({},)
        else:
            choices = _distinct(info.block_choices)
        a, f, rows, cols, mono = norms(m)
        acc.add(eb.Step(g.name, method, d, np.dtype(dtype), a, f, em.unitary_norm_bound(d), choices, n_amp,
                        state_norms.get(st.index), (), "fp64", widths, rows, cols, norm_u, mono))
    if applied.global_phase:
        acc.add(eb.stage_step("global phase", [eb.StageOp("scalar")], dtype))
    return acc.report()


def guard_norms(metadata: Mapping) -> dict[int, float]:
    """Applied gate index -> the state's norm measured before it, from an auto run's block
    records (``metadata["blocks"]``, :func:`qsim_tc.runners.auto.run_auto`); empty for others."""
    out = {}
    for block in metadata.get("blocks", ()) if isinstance(metadata, Mapping) else ():
        norm = block.get("norm_before") if isinstance(block, Mapping) else None
        if norm is not None and "index" in block:
            out[int(block["index"])] = float(norm)
    return out


def norm_unit_roundoff(dtype, on_gpu: bool) -> float:
    """The unit roundoff of :meth:`StateVector.norm <qsim_tc.state.StateVector.norm>`'s sum of
    squares: float32 for a complex64 state on the CPU (a float32 dot product per chunk), float64
    otherwise (complex128, or the GPU's reduction of float32 values squared in float64)."""
    return em.U32 if np.dtype(dtype) == np.complex64 and not on_gpu else em.U64


def _kernel_method(dtype) -> str:
    """The FP GEMM model the small-gate kernels compute in the state's precision."""
    return "native32" if np.dtype(dtype) == np.complex64 else "native"


def stage_ops(stage, executed=None, *, max_dense: int | None = None) -> list[eb.StageOp]:
    """The error-model ops of one stage.

    Args:
        stage: the planned :class:`~qsim_tc.stages.plan.Stage`.
        executed: the stage as the CPU executor ran it (its runs of local gates fused,
            :func:`~qsim_tc.stages.fusion.fuse_stage`); the planned ops that are not among its
            ops were multiplied (in double) into its fused ops.
        max_dense: without ``executed`` (the GPU program, which fuses and widens ops to at most
            this many targets): every mixing gate is charged as a dense op of ``max_dense``
            targets fused from it, and every diagonal gate as a phase op of its own; the program
            applies no more ops than gates, each no wider, so the sum bounds its own.
    """
    out: list[eb.StageOp] = []
    if executed is None:
        for op in stage.ops:
            if op.kind == _RELABEL:
                continue
            if op.kind == _DIAGONAL:
                out.append(eb.StageOp("phase"))
                continue
            w = _width(op)
            out.append(eb.StageOp("dense", max(max_dense or w, w), None, (len(op.positions),)))
        return out
    planned = {id(op) for op in stage.ops}
    kept = {id(op) for op in executed.ops}
    # (a signed permutation multiplied into a fused op adds no rounding)
    fused_into = [len(op.positions) for op in stage.ops
                  if id(op) not in kept and op.kind != _RELABEL and not _unit_monomial(op)]
    widest = max((len(op.positions) for op in executed.ops if id(op) not in planned), default=1)
    for op in executed.ops:
        if op.kind == _RELABEL:
            continue
        if op.kind == _DIAGONAL:
            # the CPU executor multiplies by the diagonal's own entries (a fused diagonal's
            # entries: their fusion is charged below)
            out.append(eb.StageOp("diagonal"))
        elif id(op) in planned:
            m = _target_matrix(op)
            out.append(eb.StageOp("dense", _width(op), None if m is None else em.abs_norm_bound(m), (),
                                  m is not None and em.is_unit_monomial(m)))
        else:
            out.append(eb.StageOp("dense", len(op.positions)))
    if fused_into:
        # which fused op each member went into is not kept: every member's fusion is charged at
        # the widest fused op of the stage (the fusion bound grows with the block's width)
        out.append(eb.StageOp("dense", widest, 0.0, tuple(fused_into)))
    return out


def _width(op) -> int:
    """The targets a stage op's kernel mixes (a controlled gate's targets, else its qubits)."""
    return len(op.structure.targets) if op.kind == _CONTROLLED else len(op.positions)


def _unit_monomial(op) -> bool:
    """Whether a planned stage op's gate is a signed permutation of 1, -1, i, -i entries (a
    controlled gate's is where its target matrix is one; a diagonal's where every entry is)."""
    if op.kind == _DIAGONAL:
        diag = np.asarray(op.structure.diagonal)
        return em.is_unit_monomial(np.diag(diag)) if diag.size <= 64 else False
    m = _target_matrix(op)
    return m is not None and em.is_unit_monomial(m)


def _target_matrix(op) -> np.ndarray | None:
    """The matrix a planned stage op's kernel applies to its targets (None where it is not kept)."""
    s = op.structure
    m = s.target_matrix if op.kind == _CONTROLLED else getattr(s, "target_matrix", None)
    if m is None or np.asarray(m).shape != (1 << _width(op),) * 2:
        return None
    return np.asarray(m)


def stage_steps(plan, dtype, *, executed=None, max_dense: int | None = None,
                compute: str | None = None) -> list:
    """The error steps of a stage run: one a stage (:func:`stage_ops`), and the global phase as a
    scalar op where it is applied apart. They do not depend on the start state, so a plan run
    again may keep them (:func:`report_of` accumulates them).

    Args:
        plan: the :class:`~qsim_tc.stages.plan.StagePlan`.
        executed: the stages as the CPU executor ran them (None: the GPU program, ``max_dense``).
        compute: ``"fp64"`` or ``"fp32"`` (a complex64 state may run FP64 programs); default the
            dtype's own.
    """
    n_amp = 1 << plan.n_qubits
    steps = []
    for i, stage in enumerate(plan.stages):
        ops = stage_ops(stage, None if executed is None else executed[i], max_dense=max_dense)
        if ops:
            steps.append(eb.stage_step(f"stage {i}", ops, dtype, compute=compute, n_amplitudes=n_amp))
    if plan.global_phase:
        steps.append(eb.stage_step("global phase", [eb.StageOp("scalar")], dtype, compute=compute))
    return steps


def report_of(steps, initial_norm: float = 1.0) -> eb.ErrorReport:
    """The error report of ``steps`` run from a start state of norm ``initial_norm``."""
    acc = eb.ErrorAccumulator(initial_norm)
    for step in steps:
        acc.add(step)
    return acc.report()


def stage_run_report(plan, dtype, *, executed=None, max_dense: int | None = None, compute: str | None = None,
                     initial_norm: float = 1.0) -> eb.ErrorReport:
    """The error report of a stage run (:func:`stage_steps` accumulated from ``initial_norm``)."""
    return report_of(stage_steps(plan, dtype, executed=executed, max_dense=max_dense, compute=compute),
                     initial_norm)


def phase_report(dtype) -> eb.ErrorReport:
    """The error report of multiplying a state of norm 1 by one complex factor (a global phase
    applied on its own, in the state's precision)."""
    return report_of([eb.stage_step("global phase", [eb.StageOp("scalar")], dtype)])


def sequence_report(reports: Sequence[eb.ErrorReport | None], *, initial_norm: float = 1.0) -> eb.ErrorReport:
    """The error report of runs made one after another on one state (a circuit run in segments,
    each continuing from the state the one before left), from the runs' own reports.

    Each run's report bounds the error it added (its start state counted exact); an error
    present at a run's start reaches its end multiplied by at most the run's ``gain``. All gains
    are at least 1, so ``(sum of the bounds) * (product of the gains)`` bounds the final error
    whatever the order; the estimates add in quadrature. The reference's norm is at least
    ``initial_norm / (product of the gains)`` (the infidelity bound).

    Args:
        reports: the runs' :class:`~qsim_tc.error_bound.ErrorReport` in order; None for a run
            that reported none.
        initial_norm: the norm of the first run's start state (1 for |0...0>).

    Returns:
        The combined report: "no bound" when a run has none (or there are no runs: nothing is
        known of a state no run made).
    """
    reports = list(reports)
    if not reports:
        return eb.ErrorReport(None, None, None, None, [], "no run reported an error bound", 0)
    for i, r in enumerate(reports):
        if r is None or r.l2_bound is None:
            why = "it reported none" if r is None else r.no_bound
            return eb.ErrorReport(None, None, None, None, [], f"run {i} of {len(reports)}: {why}",
                                  sum(x.n_steps for x in reports if x is not None))
    gain = math.prod(r.gain for r in reports)
    bound = math.fsum(r.l2_bound for r in reports) * gain
    estimate = math.sqrt(math.fsum(r.l2_estimate ** 2 for r in reports))
    steps, offset = [], 0
    for i, r in enumerate(reports):
        label = (lambda s: s) if len(reports) == 1 else (lambda s, i=i: f"run {i}: {s}")
        steps += [eb.StepError(s.index + offset, label(s.label), s.method, s.bound, s.estimate) for s in r.top_steps]
        offset += r.n_steps
    top = sorted(steps, key=lambda s: -s.bound)[:eb.TOP_STEPS]
    ref_lo = initial_norm / gain
    infid = 1.0 if ref_lo <= 0 or bound >= ref_lo else min(1.0, (bound / ref_lo) ** 2)
    return eb.ErrorReport(bound, estimate, bound, infid, top, None, offset, gain)


# ------------------------------------------------------------------ tolerance


def _probe_choices(method: str, d: int, dtype) -> tuple[dict, ...]:
    """The choices ``method`` makes on a product of a d-qubit gate with a random unit block: what
    a model needs that only the data decides (slices, formats), for a prediction."""
    key = (method, d, str(np.dtype(dtype)))
    hit = _PROBES.get(key)
    if hit is not None:
        return hit
    from circuits.haar import haar_unitary  # noqa: PLC0415

    rng = np.random.default_rng(0)
    u = haar_unitary(1 << d, rng).astype(dtype)
    x = (rng.standard_normal((1 << d, 64)) + 1j * rng.standard_normal((1 << d, 64))).astype(dtype)
    x /= np.linalg.norm(x)
    try:
        _, rep = gemm.matmul(u, x, method=method, return_report=True)
        out = _distinct([rep.choices])
    except Exception:  # noqa: BLE001 - a method that cannot run the probe has no prediction
        out = ()
    _PROBES[key] = out
    return out


_PROBES: dict[tuple, tuple] = {}


def _block_steps(gates, n_qubits: int, name: str, dtype, fused_widths, choices_of, norms=None) -> list | None:
    """The error steps of a run of ``gates`` (a circuit as applied) with every block by ``name``,
    each with the choices ``choices_of(d)`` (None where the method has none for that width)."""
    norms = norms or _Norms()
    steps = []
    for i, g in enumerate(gates):
        d = len(g.qubits)
        choices = choices_of(d)
        if not choices:
            return None
        a, f, _, _, _ = norms(np.asarray(g.matrix))
        widths = tuple(fused_widths[i]) if fused_widths is not None else ()
        # (the state taken dense: a prediction for any start state)
        steps.append(eb.Step(g.name, name, d, dtype, a, f, em.unitary_norm_bound(d), tuple(choices),
                             1 << n_qubits, fused_widths=widths))
    return steps


def _run_bound(steps) -> float | None:
    """The bound of ``steps`` run from a state of norm 1 (None: a step has no model)."""
    if steps is None:
        return None
    acc = eb.ErrorAccumulator()
    for step in steps:
        if acc.add(step).bound is None:
            return None
    return acc.report().l2_bound


def predicted_bounds(circuit: Circuit, methods: Sequence[str], dtype, fused_widths=None,
                     settings: Mapping[str, Mapping[int, object]] | None = None, *,
                     norms: _Norms | None = None) -> dict[str, float | None]:
    """Per method, the bound of a run of ``circuit`` (as applied) with every block by that method,
    from its error model with a state of norm 1, each block's own matrix, and the choices the
    method makes on a random block of the gate's width (None: no model). ``fused_widths``: per
    block the widths of the input gates fused into it (empty or None: the gate itself).
    ``settings``: method -> width -> the :class:`gemm.method.PrecisionSetting` its blocks of that
    width run with (their choices replace the random block's). ``norms``: a :class:`_Norms` to
    share (the gate matrices' norms computed once for several calls)."""
    norms = norms or _Norms()
    out: dict[str, float | None] = {}
    dtype = np.dtype(dtype)
    settings = settings or {}
    for name in methods:
        chosen = settings.get(name)
        if chosen is not None:
            def choices_of(d, chosen=chosen):
                s = chosen.get(d)
                return (dict(s.choices),) if s is not None else ()
        else:
            def choices_of(d, name=name):
                return _probe_choices(name, d, dtype)
        out[name] = _run_bound(_block_steps(circuit.gates, circuit.n_qubits, name, dtype, fused_widths, choices_of,
                                            norms))
    return out


@dataclass(frozen=True)
class Tuning:
    """The accuracy settings a method runs with under a tolerance (:func:`tune_precision`).

    Attributes:
        method: the method's name.
        settings: width -> the :class:`gemm.method.PrecisionSetting` its blocks of that width run.
        defaults: width -> the report choices of its default products there (``moduli`` for
            int8-crt: the count the data chose at ``bits=53`` on a random block).
        bound: the predicted bound of a run with every block by the method at these settings
            (with ``mixed_with``: of any run mixing it with those methods block by block).
        tolerance: the tolerance they were chosen for.
        mixed_with: the other methods the bound allows for.
    """

    method: str
    settings: Mapping[int, object]
    defaults: Mapping[int, Mapping]
    bound: float
    tolerance: float
    mixed_with: tuple = ()

    @property
    def met(self) -> bool:
        """Whether the bound meets the tolerance."""
        return self.bound <= self.tolerance

    def labels(self) -> str:
        """The settings per width, in one phrase (``"14 moduli at d=10, 9 moduli at d=4"``)."""
        return ", ".join(f"{s.label} at d={d}" for d, s in sorted(self.settings.items()))

    def why(self, d: int) -> str:
        """One line: the setting of width ``d``, and why."""
        s = self.settings[d]
        default = _default_label(self.defaults.get(d, {}), s)
        mix = f" (mixed with {', '.join(self.mixed_with)})" if self.mixed_with else ""
        which = "the fewest" if len(self.settings) == 1 else "of the cheapest settings over the run's widths"
        return (f"{s.label} at d={d}: {which} whose error bound keeps the run's predicted bound{mix} "
                f"{self.bound:.3g} within tolerance={self.tolerance:.3g}" + (f" (default {default})" if default else ""))


def _default_label(default: Mapping, setting) -> str:
    """The default products' value of the option a setting sets (``17 moduli``), or ""."""
    for key in setting.options:
        if key in default:
            return f"{default[key]} {key}"
    return ""


def _unit_bounds(steps) -> list[float] | None:
    """Each step's bound on a state of norm 1 (None: a step has no model)."""
    out = []
    for step in steps:
        b = eb.ErrorAccumulator().add(step).bound
        if b is None:
            return None
        out.append(b)
    return out


def tune_precision(circuit: Circuit, name: str, dtype, tolerance: float, fused_widths=None,
                   block_ms=None, floor=None, mixed_with: tuple = (), *, norms: _Norms | None = None) -> Tuning | None:
    """The cheapest settings of ``name``'s accuracy knob (:meth:`gemm.Method.precision_settings`)
    that keep the predicted bound of a run of ``circuit`` with every block by it within
    ``tolerance``: per gate width one setting, from the least accurate up.

    The bound of a setting comes from the method's own error model with the choices the setting
    fixes (for int8-crt the moduli count fixes ``alpha`` and ``beta``, whatever the data), so
    the constants are the model's (the method's analysis), not fitted. Each width starts at its
    cheapest setting; while the run's bound exceeds the tolerance, the width whose next setting
    removes the most bound per unit of added cost (``block_ms(d)`` times the setting's
    ``relative_cost``, times its blocks) takes it. The sum of the blocks' bounds (the state's
    norm 1) guides the steps; the run's bound with the norms it carries decides.

    Args:
        circuit: the circuit as applied; fused_widths: as :func:`predicted_bounds`.
        name: the method; dtype: the state dtype; tolerance: the bound to meet.
        block_ms: width -> the cost table's milliseconds of one default block (None: 1 each).
        floor: per block of ``circuit``, ``(bound, step)`` of the other methods that may run it
            (the largest of their bounds on a unit state, and its step), or None: each block is
            then charged the larger of the two, so that any mix of ``name`` and them meets the
            tolerance (``backend="auto"`` picks per block by cost).
        mixed_with: the names of those methods (for the reasons).
        norms: a :class:`_Norms` to share with other calls on the same circuit.

    Returns:
        The :class:`Tuning` (``met`` False, at the most accurate settings reached, where no
        setting meets ``tolerance``), or None where the method has no knob (for some width) or
        no model.
    """
    method = gemm.get_method(name)
    dtype = np.dtype(dtype)
    gates = circuit.gates
    widths = sorted({len(g.qubits) for g in gates})
    options: dict[int, tuple] = {}
    defaults: dict[int, dict] = {}
    for d in widths:
        probe = _probe_choices(name, d, dtype)
        defaults[d] = dict(probe[0]) if probe else {}
        options[d] = tuple(method.precision_settings(d, dtype, defaults[d]))
        if not options[d]:
            return None
    norms = norms or _Norms()
    idx = {d: [i for i, g in enumerate(gates) if len(g.qubits) == d] for d in widths}
    # per width and setting, its blocks' steps and their bounds on a unit state
    steps: dict[int, list] = {}
    vals: dict[int, list] = {}
    for d in widths:
        sub = [gates[i] for i in idx[d]]
        fw = None if fused_widths is None else [fused_widths[i] for i in idx[d]]
        steps[d] = [_block_steps(sub, circuit.n_qubits, name, dtype, fw, lambda _d, s=s: (dict(s.choices),), norms)
                    for s in options[d]]
        vals[d] = [_unit_bounds(st) for st in steps[d]]
        if any(v is None for v in vals[d]):
            return None
    low = [0.0] * len(gates) if floor is None else [f[0] for f in floor]
    cost = {d: (block_ms(d) if block_ms is not None else 1.0) * len(idx[d]) for d in widths}
    at = {d: 0 for d in widths}

    def charged(d, j):  # the width's blocks' bounds at setting j, each at least its floor
        return sum(max(v, low[i]) for v, i in zip(vals[d][j], idx[d]))

    def run_bound():
        seq = [None] * len(gates)
        for d in widths:
            j = at[d]
            for t, i in enumerate(idx[d]):
                seq[i] = steps[d][j][t] if floor is None or vals[d][j][t] >= low[i] else floor[i][1]
        chosen = {d: options[d][at[d]] for d in widths}
        return _run_bound(seq), chosen

    while True:
        if sum(charged(d, at[d]) for d in widths) <= tolerance:
            bound, chosen = run_bound()
            if bound is not None and bound <= tolerance:
                return Tuning(name, chosen, defaults, bound, tolerance, tuple(mixed_with))
        best, best_gain = None, 0.0
        for d in widths:
            j = at[d]
            if j + 1 >= len(options[d]):
                continue
            db = charged(d, j) - charged(d, j + 1)
            dc = cost[d] * max(options[d][j + 1].relative_cost - options[d][j].relative_cost, 1e-12)
            if db / dc > best_gain:
                best, best_gain = d, db / dc
        if best is None:  # no setting lowers the bound further: the bound reached
            bound, chosen = run_bound()
            return None if bound is None else Tuning(name, chosen, defaults, bound, tolerance, tuple(mixed_with))
        at[best] += 1


def _floor(circuit: Circuit, names: Sequence[str], tuned: Mapping[str, Tuning], dtype, fused_widths, norms=None):
    """Per block of ``circuit``, ``(bound, step)`` of the loosest of ``names`` on a unit state
    (each at its tuned settings, or at the choices it makes on a random block); None where there
    is no other method, or one has no model."""
    if not names:
        return None
    out = None
    for name in names:
        t = tuned.get(name)
        if t is not None:
            def choices_of(d, t=t):
                return (dict(t.settings[d].choices),)
        else:
            def choices_of(d, name=name):
                return _probe_choices(name, d, dtype)
        steps = _block_steps(circuit.gates, circuit.n_qubits, name, dtype, fused_widths, choices_of, norms)
        vals = None if steps is None else _unit_bounds(steps)
        if vals is None:
            return None
        out = list(zip(vals, steps)) if out is None else [x if x[0] >= v else (v, st)
                                                          for x, v, st in zip(out, vals, steps)]
    return out


def apply_tolerance(selector, circuit: Circuit, tolerance: float, fused_widths=None) -> dict[str, float | None]:
    """Exclude from ``selector`` the candidates whose predicted bound (:func:`predicted_bounds`)
    exceeds ``tolerance``; then, while the kept ones mixed block by block (each block charged the
    loosest of them: the selector may take any of them for any block) exceed it, the one of the
    largest bound alone, so that any mix of those left stays within it.

    A candidate with an accuracy knob (:meth:`gemm.Method.precision_settings`: int8-crt's moduli
    count) is predicted at the cheapest settings that meet ``tolerance`` (:func:`tune_precision`,
    costs from the selector's table), and the selector runs and prices its blocks at them
    (:meth:`~qsim_tc.plan.select.Selector.tune`); it is excluded only where none does. Where
    other candidates stay, its settings are then chosen so that every block charged the loosest
    of them and it meets ``tolerance`` (where that is reachable): a knob tuned to the edge of
    the tolerance alone could, mixed with a method looser on other widths, exceed it.

    Returns:
        method -> predicted bound (None: no model).

    Raises:
        ToleranceError: no candidate can meet ``tolerance`` (the message names it and the best
            predicted bound).
    """
    names = [n for n in selector.candidates if n not in selector.excluded]
    norms = _Norms()  # each gate matrix's norms once
    tuned = {}
    for name in names:
        t = tune_precision(circuit, name, selector.dtype, tolerance, fused_widths,
                           lambda d, name=name: selector.table.gate_ms(name, d, circuit.n_qubits) or 1.0, norms=norms)
        if t is not None:
            tuned[name] = t
    bounds = predicted_bounds(circuit, [n for n in names if n not in tuned], selector.dtype, fused_widths,
                              norms=norms)
    for name, t in tuned.items():
        bounds[name] = t.bound
    bounds = {n: bounds[n] for n in names}
    for name, b in bounds.items():
        if b is None:
            selector.exclude(name, f"tolerance {tolerance:.3g}: no error model to bound its products")
        elif not b <= tolerance:
            more = f" at its most accurate settings ({tuned[name].labels()})" if name in tuned else ""
            selector.exclude(name, f"tolerance {tolerance:.3g}: its predicted error bound is {b:.3g}{more}")
    kept = [n for n in names if n not in selector.excluded]
    for name in [n for n in kept if n in tuned]:
        # tuned to the edge of the tolerance on its own, a method mixed block by block with the
        # others could exceed it (each charged where it is loosest): tuned again against their
        # bounds per block, where that can meet it
        others = [n for n in kept if n != name]
        floor = _floor(circuit, others, tuned, selector.dtype, fused_widths, norms)
        if floor is not None:
            t = tune_precision(circuit, name, selector.dtype, tolerance, fused_widths,
                               lambda d, name=name: selector.table.gate_ms(name, d, circuit.n_qubits) or 1.0,
                               floor, tuple(others), norms=norms)
            if t is not None and t.met:
                tuned[name] = t
                bounds[name] = predicted_bounds(circuit, [name], selector.dtype, fused_widths,
                                                {name: t.settings}, norms=norms)[name]
        selector.tune(name, tuned[name].settings, tuned[name].why)
    # the kept methods mixed block by block, each block charged the loosest of them: where their
    # bounds rank differently by width (complex64: native32 is the tightest on 1-2 qubit blocks,
    # the error-corrected tensor-core methods from 4 on) that can exceed the tolerance although
    # each alone meets it; the loosest method overall goes until the mix meets it
    kept = [n for n in names if n not in selector.excluded]
    while len(kept) > 1:
        floor = _floor(circuit, kept, tuned, selector.dtype, fused_widths, norms)
        mix = None if floor is None else _run_bound([step for _, step in floor])
        if mix is None or mix <= tolerance:
            break
        worst = max(kept, key=lambda n: bounds[n])
        selector.exclude(worst, f"tolerance {tolerance:.3g}: mixed block by block with "
                                f"{', '.join(n for n in kept if n != worst)}, the bound reaches {mix:.3g}")
        kept.remove(worst)
    if all(n in selector.excluded for n in names):
        known = {n: b for n, b in bounds.items() if b is not None}
        if known:
            best = min(known, key=known.get)
            why = f"the best bound is {known[best]:.3g} ({best})"
        else:
            why = "no candidate has an error model"
        hint = "raise the tolerance" + (" or use precision='double'" if selector.precision == "single" else "")
        raise ToleranceError(f"no {selector.precision}-precision method can meet tolerance={tolerance:.3g} on "
                             f"this circuit ({len(circuit)} blocks): {why}; {hint}")
    return bounds


def precision_notes(metadata: Mapping) -> list[str]:
    """Per method and width that ran at a tolerance's setting (``metadata["auto"]
    ["precision_settings"]``, :func:`qsim_tc.runners.auto.run_auto`), one line: how many blocks
    ran at it, and why; empty for other runs."""
    auto = metadata.get("auto") if isinstance(metadata, Mapping) else None
    tuned = auto.get("precision_settings") if isinstance(auto, Mapping) else None
    if not tuned:
        return []
    ran: dict[tuple[str, int], int] = {}
    for block in metadata.get("blocks", ()):
        if block.get("options"):
            key = (block["method"], int(block["d"]))
            ran[key] = ran.get(key, 0) + 1
    out = []
    for name, per in tuned.items():
        for d, rec in per.items():
            n = ran.get((name, int(d)), 0)
            if n:
                out.append(f"{name}: {n} block{'' if n == 1 else 's'} ran at {rec['why']}")
    return out


def stage_bound_for_tolerance(plan, dtype, max_dense: int | None, compute: str | None) -> float:
    """The bound a stage run of ``plan`` would report (the GPU program's charge without its
    ``executed`` stages, which bounds the CPU executor's too)."""
    b = stage_run_report(plan, dtype, max_dense=max_dense or 4, compute=compute).l2_bound
    return math.inf if b is None else b


# the widest op the CPU stage executor fuses (its FUSE_COST tables go up to 4 targets) or applies
CPU_MAX_FUSED = 4


def measured_norm_bound(state) -> float:
    """An upper bound of a state's norm: its sum of squares in double, chunk by chunk (no
    state-sized temporary; a complex64 state's chunks widened first), times ``1 + gamma_(2^(n+1))``
    for the sum's own rounding."""
    data = state._valid().data.reshape(-1)
    xp = state.xp
    total = 0.0
    for i in range(0, data.size, NORM_CHUNK):
        c = data[i:i + NORM_CHUNK].astype(np.complex128, copy=False)
        total += float(xp.vdot(c, c).real)
    return math.sqrt(total) * (1.0 + em.gamma(2 << state.n_qubits, em.U64)) * em.NORM_SLACK


NORM_CHUNK = 1 << 22  # amplitudes a chunk of measured_norm_bound (64 MiB in complex128)


# ------------------------------------------------------------------ distributed


def distributed_report(comm, labels: Sequence[str], bounds: Sequence[float | None],
                       estimates: Sequence[float | None]) -> eb.ErrorReport:
    """The error report of a distributed run from each rank's per-stage bounds (collective).

    Each stage changes every rank's slice by its local run's error; the slices are disjoint, so
    a stage's error over the whole state is the root of the ranks' squared bounds (one allreduce
    for all stages), and the stages' errors add (unitary stages carry earlier errors unchanged in
    norm; :mod:`qsim_tc.error_bound`). A stage without a bound on any rank makes "no bound".

    Args:
        comm: the MPI communicator; labels: the stages' names, the same on every rank.
        bounds, estimates: this rank's bound and estimate per stage (0 where it ran nothing,
            None where its run had no bound).
    """
    b = np.array([math.inf if x is None else float(x) for x in bounds], dtype=np.float64)
    e = np.array([0.0 if x is None else float(x) for x in estimates], dtype=np.float64)
    both = np.concatenate([b * b, e * e]) if len(b) else np.zeros(0)
    total = comm.allreduce(both) if len(both) else both
    k = len(b)
    stage_b, stage_e = np.sqrt(total[:k]), np.sqrt(total[k:])
    missing = [labels[i] for i in range(k) if not math.isfinite(stage_b[i])]
    if missing:
        return eb.ErrorReport(None, None, None, None, [], f"{missing[0]}: a rank's run reported no error bound", k)
    steps = [eb.StepError(i, labels[i], "distributed", float(stage_b[i]), float(stage_e[i])) for i in range(k)]
    bound = float(stage_b.sum())
    ref_lo = max(1.0 - bound, 0.0)  # the reference's norm is 1 up to the computed state's error
    infid = 1.0 if ref_lo <= 0 or bound >= ref_lo else min(1.0, (bound / ref_lo) ** 2)
    top = sorted(steps, key=lambda s: -s.bound)[:eb.TOP_STEPS]
    return eb.ErrorReport(bound, float(math.sqrt(float((stage_e ** 2).sum()))), bound, infid, top, None, k)


def scalar_bound(dtype, x_norm: float) -> tuple[float, float]:
    """``(bound, estimate)`` of multiplying a slice of norm ``x_norm`` by one complex factor."""
    e = eb.stage_op_error(eb.StageOp("scalar"), dtype, "fp32" if np.dtype(dtype) == np.complex64 else "fp64", x_norm)
    return e.bound, e.estimate
