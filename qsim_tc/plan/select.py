"""``backend="auto"``: the method of each block, chosen from the device's cost table.

For a precision the user names, the candidates are the registered methods whose precision class
(``gemm.Method.precision``) is the class of that precision: ``"double"`` -> ``fp64`` (native
ZGEMM and its small-gate kernels, native3m, the INT8 Ozaki methods), ``"single"`` -> ``fp32``
(native CGEMM, the error-corrected TF32/FP16 methods). The uncorrected ``tf32`` / ``fp16``
classes never qualify, nor does Markidis (``fp32-tc``: its sums truncate), nor the double-double
reference (``dd``: a reference, not a backend), nor a fixed variant whose chooser is registered
(:data:`CHOSEN_BY`: tf32tf32 and halfhalf under tc-auto, int8 under int8-auto). Every candidate
keeps the same state dtype, so the engine switches method from block to block without converting
the state.

Per block, the placement the engine will take (:func:`qsim_tc.engine.apply.plan_targets` on the
state's current layout) and the width d select a cost per candidate; the cheapest wins, ties go
to a method that computes in the state's own arithmetic (no guard needed), then to the registry
order; and the first candidate in registry order stays unless another is predicted more than
:data:`SWITCH_MARGIN` faster. Methods without a row in the table are not candidates: an unmeasured cost is no cost.

Under ``Simulator(tolerance=...)`` a method with an accuracy knob (int8-crt's moduli count) may
be tuned per width (:meth:`Selector.tune`): its blocks run with the setting's options and are
priced at the table's time (measured with the defaults) times the setting's relative cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gemm
from qsim_tc.plan.costs import ANY, CostTable

# the precision a user asks for -> the precision class of the methods that deliver it
PRECISION_CLASSES = {"double": "fp64", "single": "fp32"}
# a method must be predicted this much faster than the first candidate in registry order (the
# native one) to replace it: calibrations on a busy machine scatter by a few percent, and two
# methods that run the same GEMM (native3m runs the ordinary one on a CPU) must not alternate
SWITCH_MARGIN = 0.03
# the engine's path -> the placement a cost row is measured at
PATH_PLACEMENT = {"bottom": "bottom", "bottom-rotate": "bottom", "top": "top", "batched": "middle",
                  "permute+bottom": "scattered", "permute+rotate": "scattered", "permute+top": "scattered",
                  "permute+batched": "scattered", "kernel": "bottom"}


def check_precision(precision) -> str:
    """``precision`` checked: ``"double"`` or ``"single"``.

    Raises:
        ValueError: anything else (the message names the valid values).
    """
    if precision not in PRECISION_CLASSES:
        raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISION_CLASSES))}, got {precision!r}")
    return precision


def qualifying_methods(precision: str) -> list[str]:
    """The registered methods of ``precision``'s class, in registry order (ones that fail to load
    are left out: an optional dependency or a method still being built).

    Raises:
        ValueError: an unknown precision.
    """
    cls = PRECISION_CLASSES[check_precision(precision)]
    out = []
    for name in gemm.methods():
        try:
            m = gemm.get_method(name)
        except Exception:  # noqa: BLE001 - an unloadable method is simply not a candidate
            continue
        if m.precision == cls:
            out.append(name)
    return out


# A fixed-parameter variant is no candidate of backend="auto" where the method that chooses
# among such variants from the data is registered: tc-auto picks tf32tf32 or halfhalf per block
# by the data's range (auto taking halfhalf itself on brickwork(28, 10, 4) had its guard redo
# blocks with tf32tf32: 2.8x tc-auto's time on an H100), and int8-auto picks the slice count that
# FP64 accuracy needs (int8's fixed 7 slices gave 4e-13, a hundred times ZGEMM's error).
CHOSEN_BY = {"halfhalf": "tc-auto", "tf32tf32": "tc-auto", "int8": "int8-auto"}


def auto_candidates(precision: str) -> list[str]:
    """The methods ``backend="auto"`` chooses from (and calibration measures) for ``precision``:
    :func:`qualifying_methods` without the variants a registered chooser covers (:data:`CHOSEN_BY`)."""
    names = qualifying_methods(precision)
    return [n for n in names if CHOSEN_BY.get(n) not in names]


def needs_guard(method) -> bool:
    """Whether a block of ``method`` needs the accuracy guard: its products are not computed in
    the state's own arithmetic (``direct_small_gates`` is the method's declaration that they are),
    so its accuracy depends on the range of the data."""
    return not method.direct_small_gates


@dataclass(frozen=True)
class Choice:
    """The method chosen for one block, and why.

    Attributes:
        method: the method name.
        predicted_ms: its predicted time for the block.
        placement: the placement the cost was read at.
        reason: one line: the runner-up and its cost, or why there was no choice.
        costs: candidate -> predicted milliseconds.
        options: the method options the block runs with (a tuned setting, :meth:`Selector.tune`;
            empty: the method's defaults).
    """

    method: str
    predicted_ms: float
    placement: str
    reason: str
    costs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)


class Selector:
    """Chooses the method of each block from a cost table.

    Args:
        table: the device's :class:`~qsim_tc.plan.costs.CostTable`.
        precision: ``"double"`` or ``"single"``.
        candidates: the methods allowed (default :func:`auto_candidates`); each must be of
            ``precision``'s class.

    Raises:
        ValueError: a bad precision, a candidate of another class, or no candidate with a row in
            ``table`` (the message names the table and what it has).
    """

    def __init__(self, table: CostTable, precision: str = "double", candidates=None):
        self.precision = check_precision(precision)
        cls = PRECISION_CLASSES[precision]
        names = auto_candidates(precision) if candidates is None else list(candidates)
        for name in names:
            m = gemm.get_method(name)
            if m.precision != cls:
                raise ValueError(f"candidate {name!r} is of precision class {m.precision!r}; precision={precision!r} "
                                 f"takes class {cls!r}")
        self.table = table
        self.candidates = [n for n in names if table.row(n) is not None]
        if not self.candidates:
            raise ValueError(f"cost table {table.origin} has no row for any {precision}-precision method "
                             f"({', '.join(names) or 'none registered'}); it has {', '.join(table.methods())}")
        self.excluded: dict[str, str] = {}  # method -> why it is no longer a candidate in this run
        self.tuned: dict[str, dict] = {}  # method -> width -> (PrecisionSetting, why): tune()
        self._memo: dict[tuple, Choice] = {}  # a run asks the same few questions for thousands of blocks

    @property
    def dtype(self):
        """The state dtype of the precision."""
        return gemm.get_method(self.candidates[0]).state_dtype

    def exclude(self, method: str, why: str) -> None:
        """Take ``method`` out of the candidates for the rest of the run (a guard fired, or its
        workspace does not fit)."""
        self.excluded.setdefault(method, why)
        self._memo.clear()

    def tune(self, method: str, settings, why=None) -> None:
        """Run ``method``'s blocks of each width at a setting of its accuracy knob
        (:class:`gemm.method.PrecisionSetting`, chosen for a tolerance by
        :func:`qsim_tc.run_error.tune_precision`) and price them at its ``relative_cost`` times
        the table's time (measured with the method's defaults).

        Args:
            method: a candidate; settings: width -> setting; why: ``why(d)`` -> one line for
                the blocks' reasons (None: the setting's label).
        """
        self.tuned[method] = {int(d): (s, why(d) if why is not None else s.label) for d, s in settings.items()}
        self._memo.clear()

    def gate_ms(self, method: str, d: int, n_qubits: int, placement: str = ANY) -> float | None:
        """The predicted milliseconds of a d-qubit block of ``method`` at ``placement``: the
        table's, times its tuned setting's relative cost where it has one (:meth:`tune`)."""
        ms = self.table.gate_ms(method, d, n_qubits, placement)
        tuned = self.tuned.get(method, {}).get(d)
        return ms if ms is None or tuned is None else ms * tuned[0].relative_cost

    def options_for(self, method: str, d: int) -> dict:
        """The options ``method`` runs a d-qubit block with (empty: its defaults)."""
        tuned = self.tuned.get(method, {}).get(d)
        return {} if tuned is None else dict(tuned[0].options)

    def choose(self, d: int, n_qubits: int, placement: str = ANY, *, without: tuple = (),
               then: dict | None = None) -> Choice:
        """The cheapest allowed candidate for a d-qubit block at ``placement``.

        Args:
            d: the block's width.
            n_qubits: the state's size.
            placement: one of :data:`~qsim_tc.plan.costs.PLACEMENTS` or ``"any"``.
            without: methods also left out for this block only (already tried).
            then: candidate -> ``(d, placement)`` of the next block after this one ran with that
                candidate (the layout it leaves decides where the next block lands); each
                candidate is then priced with the cheapest method for that next block too.

        Returns:
            The :class:`Choice`.

        Raises:
            RuntimeError: every candidate is excluded (cannot happen while a method that needs
                no guard is a candidate, since only guarded methods are excluded).
        """
        memo_key = (d, n_qubits, placement, tuple(without), tuple(sorted((then or {}).items())))
        hit = self._memo.get(memo_key)
        if hit is not None:
            return hit
        costs = {}
        for name in self.candidates:
            if name in self.excluded or name in without:
                continue
            costs[name] = self.gate_ms(name, d, n_qubits, placement)
        own = costs  # each candidate's cost for this block; ``costs`` ranks them
        if then:
            # brickwork(28, 8, 4), single, H100: CGEMM on middle blocks (2% dearer than tc-auto,
            # kept by SWITCH_MARGIN) left the next block in the middle too, where tc-auto moves
            # its targets down and the next block's up: 139 ms against tc-auto's own 117
            def next_ms(name):
                if name not in then:
                    return 0.0
                d_next, placement_next = then[name]
                return min(self.gate_ms(m, d_next, n_qubits, placement_next) for m in own)

            costs = {name: c + next_ms(name) for name, c in own.items()}
        if not costs:
            raise RuntimeError(f"no {self.precision}-precision method left for a {d}-qubit block "
                               f"(excluded: {self.excluded}, tried: {list(without)})")
        order = sorted(costs, key=lambda n: (costs[n], needs_guard(gemm.get_method(n)), self.candidates.index(n)))
        best = order[0]
        first = next(n for n in self.candidates if n in costs)
        if first != best and costs[first] <= costs[best] * (1 + SWITCH_MARGIN):
            order.remove(first)
            order.insert(0, first)
            best = first
        if len(order) == 1:
            reason = "the only candidate left" if (self.excluded or without) else "the only candidate in the table"
        else:
            nxt = order[1]
            reason = f"fastest predicted; next {nxt} {costs[nxt]:.3g} ms ({costs[nxt] / costs[best]:.2f}x)"
            if then:
                reason += " (with the next block, from the layout each leaves)"
        tuned = self.tuned.get(best, {}).get(d)
        if tuned is not None:
            reason += f"; {tuned[1]}"
        choice = self._memo[memo_key] = Choice(best, own[best], placement, reason, own, self.options_for(best, d))
        return choice


def placement_of(path: str) -> str:
    """The cost placement of an engine path (``qsim_tc.engine.apply.Plan.path``)."""
    return PATH_PLACEMENT.get(path, ANY)
