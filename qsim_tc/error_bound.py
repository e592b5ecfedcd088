"""The rounding-error bound of a whole run: per-step errors propagated to the final state.

A run is a sequence of *steps*: a gate (or fused block) applied as one product by a GEMM method,
or a stage of the stage engine (a list of ops), or a scalar phase. Each step ``g`` computes
``X_(g+1) = U_g X_g + E_g`` where ``E_g`` is the step's own rounding (bounded by the method's
model, :meth:`gemm.Method.error_model`, or by the stage-op models here). The reference applies
the same gate matrices (exact doubles) in ~106-bit arithmetic, so the error vector obeys
``e_(g+1) = U_g e_g + E_g`` and

    ||e_G|| <= sum_g ||E_g|| prod_(h > g) ||U_h||_2,

with ``||U_h||_2 = 1`` for a unitary (the given doubles: :func:`gemm.error_model.unitary_norm_bound`).
The step bounds scale with the norm of the *computed* state ``||X_g||``: it is taken where the
caller measured it (``state_norm``), else bounded as ``||X_(g+1)|| <= ||U_g|| ||X_g|| + ||E_g||``.
The estimate adds the steps' estimates in quadrature (independent roundings).

From the 2-norm bound follow a bound of the largest amplitude error (``||e||_inf <= ||e||_2``)
and of the infidelity against the reference: for a reference of norm ``r``, the angle between the
computed and the reference state has ``sin(phi) <= ||e|| / r``, so ``1 - F <= (||e|| / r)^2``.

A step whose method has no model makes the whole report "no bound" (``l2_bound is None``), never
a guess. Fused blocks are matrices computed in double from the circuit's gates: a step can name
the gates it fused (``fused_widths``) so that the fusion's own rounding is bounded too.

Integration: one :meth:`ErrorAccumulator.add` per step, with a :class:`Step` built by
:func:`gate_step` (a GEMM-method step, from the gate matrix and the product's
``gemm.Report.choices`` of every block) or :func:`stage_step` (a stage's op list); then
:meth:`ErrorAccumulator.report`. :func:`error_report` does it for a list of steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

import gemm
from gemm import error_model as em

TOP_STEPS = 5  # steps listed in a report as the largest contributors


@dataclass(frozen=True)
class StageOp:
    """One arithmetic op of the stage engine, for its error model.

    Attributes:
        kind: ``"dense"`` (a 2^k x 2^k matrix on k local targets: FMA loops or FP64 mma),
            ``"phase"`` (the GPU kernel's run of diagonal gates as fixed-point turn sums: two
            table entries from ``sincospi`` of exact turns and two complex products per
            amplitude), ``"diagonal"`` (the CPU executor's diagonal gate: one complex product per
            amplitude with the gate's own entry, held in the program's precision), or
            ``"scalar"`` (one complex factor, the global phase).
        k: the dense op's targets (0 for the others).
        abs_norm: an upper bound of ``|| |M| ||_2`` of the dense op's matrix (default ``2^(k/2)``).
        fused_widths: the widths of the gates multiplied (in double) into the dense op's matrix
            (:func:`fusion_error`); empty when it is one gate's own matrix.
        unit_monomial: the dense op's matrix is a signed permutation of 1, -1, i, -i entries
            (:func:`gemm.error_model.is_unit_monomial`): its FMA loops copy and negate exactly.
    """

    kind: str
    k: int = 0
    abs_norm: float | None = None
    fused_widths: tuple = ()
    unit_monomial: bool = False

    def __post_init__(self):
        if self.kind not in ("dense", "phase", "diagonal", "scalar"):
            raise ValueError(f"StageOp.kind must be 'dense', 'phase', 'diagonal' or 'scalar', got {self.kind!r}")
        if self.kind == "dense" and not (isinstance(self.k, int) and 1 <= self.k <= 14):
            raise ValueError(f"a dense StageOp needs k in 1..14, got {self.k!r}")


@dataclass(frozen=True)
class Step:
    """What the accumulator needs of one step.

    Attributes:
        label: a name for reports (gate name, "stage 3").
        method: the GEMM method's name (``gemm.methods()``), or ``"stage"`` for a stage.
        d: the gate's qubits (0 for a stage).
        dtype: the state's complex dtype.
        abs_norm, frob_norm, op_norm: upper bounds of ``|| |U| ||_2``, ``||U||_F``, ``||U||_2``.
        choices: per block of the product, the method's report choices (``gemm.Report.choices``);
            the model of each is evaluated and the largest taken (rigorous: block errors add in
            quadrature, each bounded by the same coefficient times its block's norm).
        n_amplitudes: the state's amplitudes (absolute underflow terms).
        state_norm: the measured norm of the state before the step, or None (then bounded).
        stage_ops: a stage's ops (with ``method == "stage"``).
        compute: a stage's arithmetic, ``"fp64"`` or ``"fp32"`` (complex64 states may run FP64
            programs, then round each amplitude to FP32 once per stage).
        fused_widths: the widths of the gates multiplied together (in double) into this step's
            matrix; empty when the matrix is the circuit's own gate.
        row_nnz, col_nnz: the most nonzero entries in a row and in a column of the gate matrix
            (None: ``2^d``); with the state's support they bound the terms of a dot product.
        unit_monomial: the gate matrix is a signed permutation of 1, -1, i, -i entries
            (:func:`gemm.error_model.is_unit_monomial`): FP products with it are exact.
        norm_u: the unit roundoff of the arithmetic that measured ``state_norm`` (its products
            and sums: float64 for complex128 states and for GPU reductions, float32 for a
            complex64 state's norm on the CPU).
    """

    label: str
    method: str
    d: int
    dtype: Any
    abs_norm: float
    frob_norm: float
    op_norm: float
    choices: tuple = ({},)
    n_amplitudes: int = 0
    state_norm: float | None = None
    stage_ops: tuple = ()
    compute: str = "fp64"
    fused_widths: tuple = ()
    row_nnz: int | None = None
    col_nnz: int | None = None
    norm_u: float = em.U64
    unit_monomial: bool = False


def gate_step(label: str, method: str, matrix: np.ndarray, dtype, *, choices: Sequence[Mapping] | Mapping = (),
              n_amplitudes: int = 0, state_norm: float | None = None, fused_widths: Sequence[int] = ()) -> Step:
    """A :class:`Step` for one gate applied by a GEMM method: the matrix's norms computed here.

    Args:
        label: the step's name in reports.
        method: a registered GEMM method name.
        matrix: the gate (or fused block) matrix given to the method, complex128 (2^d x 2^d).
        dtype: the state's complex dtype.
        choices: the report choices of the product's blocks (a mapping, or a sequence of them).
        n_amplitudes: the state's amplitudes.
        state_norm: the state's norm measured before the step, if known.
        fused_widths: the widths of the gates fused into ``matrix`` (empty: the gate itself).

    Raises:
        ValueError: unknown method; a matrix that is not 2^d x 2^d.
    """
    gemm.get_method(method)  # the message lists the valid names
    m = np.asarray(matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] & (m.shape[0] - 1) or m.shape[0] < 2:
        raise ValueError(f"matrix must be 2^d x 2^d with d >= 1, got shape {m.shape}")
    d = m.shape[0].bit_length() - 1
    if isinstance(choices, Mapping):
        choices = (choices,)
    choices = tuple(dict(c) for c in choices) or ({},)
    rows, cols = em.max_row_col_nonzeros(m)
    return Step(label, method, d, np.dtype(dtype), em.abs_norm_bound(m), em.frob_norm_bound(m),
                em.unitary_norm_bound(d), choices, int(n_amplitudes), state_norm, (), "fp64",
                tuple(int(w) for w in fused_widths), rows, cols, em.U64, em.is_unit_monomial(m))


def stage_step(label: str, ops: Sequence[StageOp], dtype, *, compute: str | None = None, n_amplitudes: int = 0,
               state_norm: float | None = None) -> Step:
    """A :class:`Step` for one stage of the stage engine.

    Args:
        label: the step's name in reports.
        ops: the stage's ops in order (:class:`StageOp`).
        dtype: the state's complex dtype.
        compute: ``"fp64"`` or ``"fp32"``; default: the dtype's own.

    Raises:
        ValueError: a bad ``compute``; TypeError: an op that is not a StageOp.
    """
    for op in ops:
        if not isinstance(op, StageOp):
            raise TypeError(f"stage ops must be StageOp, got {type(op).__name__}")
    dtype = np.dtype(dtype)
    compute = compute or ("fp32" if dtype == np.complex64 else "fp64")
    if compute not in ("fp64", "fp32"):
        raise ValueError(f"compute must be 'fp64' or 'fp32', got {compute!r}")
    kmax = max((op.k for op in ops), default=0)
    return Step(label, "stage", 0, dtype, 1.0, 1.0, em.unitary_norm_bound(max(kmax, 1)) ** max(len(ops), 1),
                ({},), int(n_amplitudes), state_norm, tuple(ops), compute)


# ------------------------------------------------------------------ stage-op models


def _sincos_entry_error(u_compute: float) -> float:
    """The error of one phase-table entry ``e^(i pi t)`` from an exact 64-bit turn sum: the turn
    converted to double (relative ``u``: an angle error of ``pi u``), ``sincospi`` within 2 ulps
    on each of sin and cos (CUDA documents 1; ``ulp(v) <= 2 u |v|``: ``4 u`` on the unit circle),
    and for an FP32 program the entry rounded to float (``sqrt(2) u32``)."""
    err = math.pi * em.U64 + 4.0 * em.U64
    if u_compute == em.U32:
        err += math.sqrt(2.0) * em.U32
    return err


def stage_op_error(op: StageOp, dtype, compute: str, x_norm: float) -> em.ProductError:
    """Bound and estimate of one stage op's rounding on a state of norm ``x_norm``.

    Dense ops: the floating-point GEMM model (:func:`gemm.error_model.fp_gemm`, any order of
    rounded FMAs: the FMA loops and the FP64 mma, whose products and sums round to nearest), and
    the fusion of their matrix (:func:`fusion_error`).
    Phase ops: per amplitude ``|a| (2 e + 2 sqrt(2) gamma_2 (1 + e)^2)`` with ``e`` the table
    entry's error (:func:`_sincos_entry_error`): one complex product of the two entries, one with
    the amplitude. Diagonal ops (CPU): ``|a| (e + sqrt(2) gamma_2 (1 + e))``, ``e`` the entry's
    rounding to the program's precision (0 for FP64: the gate's own doubles). Scalar phase: the factor's error (its cos and sin in double, then its rounding
    to the program's precision) and one complex product.
    """
    u = em.U32 if compute == "fp32" else em.U64
    if op.kind == "dense":
        a = op.abs_norm if op.abs_norm is not None else math.sqrt(2.0 ** op.k) * em.NORM_SLACK
        ctx = em.ProductContext(op.k, np.complex64 if compute == "fp32" else np.complex128, x_norm, a,
                                math.sqrt(2.0 ** op.k) * em.NORM_SLACK, em.unitary_norm_bound(op.k),
                                unit_monomial=op.unit_monomial and not op.fused_widths)
        e = em.fp_gemm(ctx)
        if not op.fused_widths:
            return e
        fb, fe = fusion_error(op.fused_widths, op.k, x_norm)
        return em.ProductError(e.bound + fb, math.hypot(e.estimate, fe), {**e.terms, "fusion": fb})
    g2 = em.gamma(2, u) * math.sqrt(2.0)
    if op.kind == "phase":
        e = _sincos_entry_error(u)
        rel = 2.0 * e + e * e + g2 * (1.0 + e) ** 2 * (2.0 + g2)
        est = em.RMS_ROUNDING * u * math.sqrt(6.0) + 2.0 * em.U64
    elif op.kind == "diagonal":
        # the entry as given (a double, exact against the reference's) or rounded to float for an
        # FP32 program; one complex product: two products and a sum per part
        e = math.sqrt(2.0) * u if u == em.U32 else 0.0
        rel = e + g2 * (1.0 + e)
        est = em.RMS_ROUNDING * u * math.sqrt(3.0 + (2.0 if e else 0.0))
    else:
        # the factor e^(i phi) from cos and sin in double within 1 ulp each (libm; an ulp is at
        # most 2 u64 relative), then for an FP32 program rounded to float
        e = 2.0 * math.sqrt(2.0) * em.U64 + (math.sqrt(2.0) * em.U32 if u == em.U32 else 0.0)
        rel = e + g2 * (1.0 + e)
        est = em.RMS_ROUNDING * u * math.sqrt(3.0)
    return em.ProductError(rel * x_norm, est * x_norm, {op.kind: rel * x_norm})


def fusion_error(widths: Sequence[int], d: int, x_norm: float) -> tuple[float, float]:
    """``(bound, estimate)`` of ``||(M~ - M) X||`` for a block matrix ``M~`` computed in double as
    the product of gates of the given widths (:func:`circuits.fusion.block_matrix`: one tensordot
    per gate, dot products of ``2^w`` complex terms). Each contraction errs by at most
    ``sqrt(2) gamma_(2^(w+1)) || |G| ||_2 ||M||_F`` in Frobenius norm, ``||M||_F <= 2^(d/2)``
    (unitary partial products), and ``|| |G| ||_2 <= 2^(w/2)``; a Frobenius bound is a 2-norm
    bound. Estimate: ``RMS u sqrt(2^w + 1)`` per contraction on a unit vector."""
    bound = est2 = 0.0
    for w in widths:
        bound += math.sqrt(2.0) * em.gamma(2 << w, em.U64) * math.sqrt(2.0 ** w) * math.sqrt(2.0 ** d) * 1.0001
        est2 += (em.RMS_ROUNDING * em.U64) ** 2 * ((1 << w) + 1)
    return bound * x_norm, math.sqrt(est2) * x_norm


# ------------------------------------------------------------------ the accumulator


@dataclass
class StepError:
    """One step's contribution: its index, label, method and its error's bound and estimate."""

    index: int
    label: str
    method: str
    bound: float | None
    estimate: float | None

    def to_dict(self) -> dict:
        return {"index": self.index, "label": self.label, "method": self.method, "bound": self.bound,
                "estimate": self.estimate}


@dataclass
class ErrorReport:
    """The rounding-error bound of a run's final state against the double-double reference.

    Attributes:
        l2_bound: rigorous bound of ``||psi - psi_ref||_2``; None ("no bound") when a step's
            method has no error model.
        l2_estimate: the expected size of that error (independent roundings); None likewise.
        max_abs_bound: bound of the largest amplitude error (``<= l2_bound``).
        infidelity_bound: bound of ``1 - |<psi_ref/|psi_ref|, psi/|psi|>|^2``.
        top_steps: the steps of the largest bounds, largest first.
        no_bound: why there is no bound (the steps without a model), or None.
        n_steps: steps accumulated.
        gain: a bound of the run's amplification of an error its start state carried (the
            product of the steps' ``||U||_2`` bounds, 1 up to the given matrices' rounding): a run
            that continues another one carries that run's bound times ``gain``
            (:func:`qsim_tc.run_error.sequence_report`).
        notes: lines on the precision the methods ran at where a tolerance chose it (int8-crt's
            moduli count per width, and why: :func:`qsim_tc.run_error.precision_notes`).
    """

    l2_bound: float | None
    l2_estimate: float | None
    max_abs_bound: float | None
    infidelity_bound: float | None
    top_steps: list = field(default_factory=list)
    no_bound: str | None = None
    n_steps: int = 0
    gain: float = 1.0
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """A JSON-serialisable view."""
        return {"l2_bound": self.l2_bound, "l2_estimate": self.l2_estimate, "max_abs_bound": self.max_abs_bound,
                "infidelity_bound": self.infidelity_bound, "top_steps": [s.to_dict() for s in self.top_steps],
                "no_bound": self.no_bound, "n_steps": self.n_steps, "notes": list(self.notes)}

    def summary(self) -> str:
        """One line for the CLI."""
        if self.l2_bound is None:
            return f"error bound: none ({self.no_bound})"
        return (f"error vs double-double: L2 <= {self.l2_bound:.3g} (estimate {self.l2_estimate:.3g}), "
                f"max |amplitude error| <= {self.max_abs_bound:.3g}, infidelity <= {self.infidelity_bound:.3g}")


class ErrorAccumulator:
    """Accumulates per-step error bounds over a run (module docstring).

    Args:
        initial_norm: the norm of the start state as held (1 for |0...0>).
        initial_error: a bound of the start state's own rounding against the reference's
            (e.g. a complex128 state rounded to complex64: ``u32 * norm``); 0 for |0...0>.
        from_zero: the start state is |0...0> exactly as made (one amplitude, exactly 1): the
            gate steps then track the state's support (how many amplitudes may be nonzero), and
            their models count only the nonzero terms of each dot product (``ctx.terms``;
            the first product is an exact copy of the gate's column, ``ctx.exact_input``). A
            stage step makes the support unknown (the whole state) from then on.
    """

    def __init__(self, initial_norm: float = 1.0, initial_error: float = 0.0, *, from_zero: bool = False):
        if not initial_norm >= 0 or not initial_error >= 0:
            raise ValueError(f"initial_norm and initial_error must be non-negative, got {initial_norm!r}, "
                             f"{initial_error!r}")
        if from_zero and (initial_norm != 1.0 or initial_error != 0.0):
            raise ValueError(f"from_zero needs initial_norm 1 and initial_error 0 (|0...0> as made), got "
                             f"{initial_norm!r}, {initial_error!r}")
        self._support = 1 if from_zero else None  # amplitudes that may be nonzero (None: all)
        self._exact = bool(from_zero)  # the state is still exactly |0...0>
        self._ref_norm_hi = float(initial_norm) + float(initial_error)
        self._ref_norm_lo = max(float(initial_norm) - float(initial_error), 0.0)
        self._norm = float(initial_norm)  # bound of the computed state's norm
        self._gain = 1.0  # product of the steps' ||U||_2 bounds
        self._bound = float(initial_error)
        self._est2 = (float(initial_error) * em.RMS_ROUNDING) ** 2  # a rounding's typical share of its bound
        self._steps: list[StepError] = []
        self._missing: list[str] = []

    def add(self, step: Step) -> StepError:
        """Account for one step; returns its contribution (bound None: no model)."""
        if not isinstance(step, Step):
            raise TypeError(f"step must be an error_bound.Step, got {type(step).__name__}")
        x_norm = self._norm
        if step.state_norm is not None:
            n_amp = max(step.n_amplitudes, 1)
            # the measured norm's own rounding: a sum of 2 n_amp squares (their products and sums,
            # chunk totals, the root) in the arithmetic of norm_u, below gamma_(3 n_amp)
            x_norm = min(x_norm, float(step.state_norm) * (1.0 + em.gamma(3 * n_amp, step.norm_u)))
        terms, exact = self._sparsity(step)
        err = self._step_error(step, x_norm, terms, exact)
        index = len(self._steps)
        if err is None:
            rec = StepError(index, step.label, step.method, None, None)
            self._missing.append(f"step {index} ({step.label}): {step.method!r} has no error model")
        else:
            rec = StepError(index, step.label, step.method, err[0], err[1])
            self._bound = step.op_norm * self._bound + err[0]
            self._est2 += err[1] ** 2
            self._norm = step.op_norm * x_norm + err[0]
        self._ref_norm_hi *= step.op_norm
        self._gain *= step.op_norm
        self._ref_norm_lo /= step.op_norm  # the given matrices' smallest singular value >= 1/(their norm bound)
        self._steps.append(rec)
        return rec

    def _sparsity(self, step: Step) -> tuple[int | None, bool]:
        """``(terms, exact_input)`` of a gate step's products from the tracked support (None,
        False where it is not tracked), and the support after the step: a column of the
        product's block holds at most ``min(2^d, support)`` nonzeros, a row of the gate
        ``row_nnz``; each nonzero input reaches at most ``col_nnz`` outputs."""
        if self._support is None or step.method == "stage":
            self._support, self._exact = None, False
            return None, False
        k = 1 << step.d
        rows = k if step.row_nnz is None else step.row_nnz
        cols = k if step.col_nnz is None else step.col_nnz
        terms, exact = min(k, self._support, rows), self._exact
        self._support *= cols
        if step.n_amplitudes and self._support >= step.n_amplitudes:
            self._support = None  # the whole state: nothing more to track
        # a signed permutation of unit entries keeps a unit basis state one (its amplitude 1, -1,
        # i or -i: products with it are as exact)
        self._exact = self._exact and step.unit_monomial
        return terms, exact

    def _step_error(self, step: Step, x_norm: float, terms: int | None = None,
                    exact: bool = False) -> tuple[float, float] | None:
        if step.method == "stage":
            bound = est2 = 0.0
            norm = x_norm
            for op in step.stage_ops:
                e = stage_op_error(op, step.dtype, step.compute, norm)
                bound += e.bound
                est2 += e.estimate ** 2
                norm = norm * em.unitary_norm_bound(max(op.k, 1)) + e.bound
            if step.compute == "fp64" and np.dtype(step.dtype) == np.complex64:
                rb, re_ = norm * em.U32, em.RMS_ROUNDING * em.U32 * x_norm  # the store to complex64
                bound += rb
                est2 += re_ ** 2
            return bound, math.sqrt(est2)
        method = gemm.get_method(step.method)
        worst = None
        for ch in step.choices:
            ctx = em.ProductContext(step.d, step.dtype, x_norm, step.abs_norm, step.frob_norm, step.op_norm,
                                    step.n_amplitudes, ch, terms, exact, step.unit_monomial)
            e = method.error_model(ctx)
            if e is None:
                return None
            if worst is None or e.bound > worst.bound:
                worst = e
        fb, fe = fusion_error(step.fused_widths, step.d, x_norm) if step.fused_widths else (0.0, 0.0)
        return worst.bound + fb, math.hypot(worst.estimate, fe)

    def report(self) -> ErrorReport:
        """The report of the steps so far."""
        n = len(self._steps)
        if self._missing:
            more = f" (and {len(self._missing) - 1} more)" if len(self._missing) > 1 else ""
            return ErrorReport(None, None, None, None, [], self._missing[0] + more, n, self._gain)
        top = sorted(self._steps, key=lambda s: -s.bound)[:TOP_STEPS]
        b = self._bound
        r = self._ref_norm_lo
        infid = 1.0 if r <= 0 or b >= r else min(1.0, (b / r) ** 2)
        return ErrorReport(b, math.sqrt(self._est2), b, infid, top, None, n, self._gain)

    @property
    def state_norm_bound(self) -> float:
        """The current bound of the computed state's norm."""
        return self._norm


def error_report(steps: Sequence[Step], *, initial_norm: float = 1.0, initial_error: float = 0.0,
                 from_zero: bool = False) -> ErrorReport:
    """The :class:`ErrorReport` of a run given as its steps in order (see :class:`ErrorAccumulator`)."""
    acc = ErrorAccumulator(initial_norm, initial_error, from_zero=from_zero)
    for s in steps:
        acc.add(s)
    return acc.report()
