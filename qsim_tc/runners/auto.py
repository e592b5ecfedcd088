"""The gate run with ``backend="auto"``: per block the method the cost table prices fastest
(:mod:`qsim_tc.plan.select`), under the accuracy guard (:mod:`qsim_tc.plan.guard`), which may
start the run again without a method that failed it."""

from __future__ import annotations

import warnings

import gemm
from circuits import Circuit
from qsim_tc import memory, run_error
from qsim_tc.engine.apply import layout_after, predict_layout_path, predict_path
from qsim_tc.errors import InsufficientMemoryError
from qsim_tc.plan import guard
from qsim_tc.plan.select import Selector, needs_guard, placement_of
from qsim_tc.runners.base import RunOutput, Settings, Start
from qsim_tc.runners.gates import max_width
from qsim_tc.runners.records import GateStat, gate_steps
from qsim_tc.state import StateVector


class _RestartRun(Exception):
    """Raised by a block of ``backend="auto"`` in the guard's run mode whose method's statistics
    failed: the run starts again from its initial state without that method."""

    def __init__(self, record: dict):
        super().__init__(record["why"])
        self.record = record


def run_auto(circuit: Circuit, start: Start, settings: Settings, table, progress=None, covers=None,
             fused_widths=None) -> RunOutput:
    """Every gate of ``circuit`` with the method the selector picks for it (see the module).

    Args:
        circuit: the circuit as applied (fused or not); covers: its gates' input gates.
        start: the start state; table: the cost table; progress: ``progress(done, total)``.
        fused_widths: per gate the widths of the input gates fused into it (for the predicted
            error bounds that ``settings.tolerance`` chooses by; :func:`run_error.fused_widths_of`).

    Returns:
        The output; its metadata holds ``"auto"`` (the run's summary, with the guard's record)
        and ``"blocks"`` (per block: method, predicted and measured time, why, and
        ``norm_before``: the state's norm the guard measured before it, or None).

    Raises:
        InsufficientMemoryError: before anything is allocated, when no candidate's workspace fits.
    """
    selector = Selector(table, settings.precision)
    predicted = None
    if settings.tolerance is not None:  # before anything is allocated: it may refuse the run
        predicted = run_error.apply_tolerance(selector, circuit, settings.tolerance, fused_widths)
    route_by_memory(selector, circuit.n_qubits, max_width(circuit), settings, start)
    run = _AutoRun(settings, selector)
    state, stats, blocks, guard_meta = run.run(circuit, start, progress)
    if circuit.global_phase:
        state.apply_global_phase(circuit.global_phase)
    gemm.device.synchronize(settings.device.xp)
    meta = _metadata(settings, selector, stats, blocks)
    meta["auto"]["guard"] = guard_meta
    if predicted is not None:
        meta["auto"]["predicted_bounds"] = predicted
    return RunOutput(state, stats, gate_steps(stats, covers), meta)


def route_by_memory(selector: Selector, n: int, d_max: int, settings: Settings, start: Start) -> None:
    """Exclude the candidates whose workspace for the widest block does not fit; raise the
    memory error of the cheapest one when none does."""
    state_b = memory.state_bytes(n, settings.dtype) - start.held_bytes
    avail = memory.available_bytes(settings.device)
    fits = []
    for name in selector.candidates:
        try:
            extra = memory.gate_extra_bytes(gemm.get_method(name), n, d_max, settings.dtype, {},
                                            spare_allocated=False, device=settings.device.name,
                                            workspace_bytes=settings.workspace_bytes)
        except InsufficientMemoryError as exc:  # its smallest block exceeds the workspace asked for
            selector.exclude(name, f"its smallest {d_max}-qubit block does not fit the workspace ({exc})")
            continue
        if state_b + extra > avail:
            selector.exclude(name, f"its workspace for {d_max}-qubit blocks does not fit "
                                   f"({(state_b + extra) / 2**30:.2f} GiB > {avail / 2**30:.2f} GiB free)")
        else:
            fits.append(name)
    if not fits:
        method = gemm.get_method(selector.candidates[0])
        memory.check_state_fits(f"simulating {n} qubits with backend 'auto' (gates up to {d_max} qubits)", n,
                                settings.dtype, settings.device, method, d_max, {},
                                workspace_bytes=settings.workspace_bytes, allocated=start.held_bytes)


class _AutoRun:
    """One run's selection and guard state."""

    def __init__(self, settings: Settings, selector: Selector):
        self.settings = settings
        self.selector = selector
        self.guarded_norm = None  # (state, its norm) after the last guarded block of the run

    def run(self, circuit: Circuit, start: Start, progress):
        """The gates under the accuracy guard (:mod:`qsim_tc.plan.guard`: its run and per-block
        modes).

        The run mode keeps no copy of the state: a block whose method's statistics fail, or a run
        whose norm moved more than :func:`guard.run_bound` allows, makes the run start again from
        its initial state (not changed: the run works on a copy of it, or on |0...0>), without
        that method, or in the per-block mode. An ``in_place`` run is guarded per block from the
        start, since its initial state is what it changes.

        Returns:
            (state, stats, blocks, guard_meta): the final state, the GateStats, the blocks' records
            and the guard's record for the metadata (mode, restarts, the run's norm change).
        """
        gates, total = circuit.gates, len(circuit)
        precision, tolerance = self.settings.precision, self.settings.tolerance
        per_block = start.in_place
        restarts: list[dict] = []
        start_norm = None
        while True:
            state = start.make()
            self.guarded_norm = None
            stats, blocks, bounds = [], [], []
            try:
                for i, g in enumerate(gates):
                    nxt = gates[i + 1].qubits if i + 1 < total else None
                    state, info, block = self._apply(state, g, nxt, per_block)
                    if not per_block and block["guard"] is not None:  # a guarded block, checked at the end
                        bounds.append(guard.norm_bound(precision, len(g.qubits), tolerance))
                    blocks.append(block)
                    stats.append(GateStat(i, g.name, g.qubits, info))
                    if progress is not None:
                        progress(i + 1, total)
            except _RestartRun as again:
                restarts.append({"block": len(blocks), **again.record})
                del state  # freed before the next start state is made
                continue
            meta = {"mode": "per-block" if per_block else "run", "restarts": restarts,
                    "run_norm_change": None, "run_norm_bound": None}
            if not bounds:
                return state, stats, blocks, meta
            # the run's one norm: the start state's is 1 for |0...0>, else measured (unchanged)
            if start_norm is None:
                start_norm = 1.0 if start.initial is None else start.initial.norm()
            change = guard.norm_change(start_norm, state.norm())
            bound = guard.run_bound(bounds)
            meta["run_norm_change"], meta["run_norm_bound"] = change, bound
            if change <= bound:  # (False for NaN)
                return state, stats, blocks, meta
            restarts.append({"block": None, "method": None,
                             "why": f"the run's norm changed by {change:.3g} (bound {bound:.3g}, "
                                    f"{len(bounds)} guarded blocks): run again guarded per block"})
            per_block = True
            del state

    def _apply(self, state: StateVector, gate, nxt, per_block: bool = True):
        """Apply one block with the method the selector picks; guard it when the method can lose
        accuracy on out-of-range data.

        ``per_block``: keep the block's input and measure the norm around it, and redo the block
        from the kept input with the next method when the guard fires. Otherwise (the run mode)
        only the method's statistics are checked, and a failure raises :class:`_RestartRun`
        with the method excluded.

        Returns:
            (state, info, block): the state (a restored copy after a redo), the engine's
            ApplyInfo, and the block's record for the metadata.
        """
        selector, small = self.selector, self.settings.small_gate_kernel
        n, d = state.n_qubits, len(gate.qubits)
        # the path the engine will take for a GEMM from the current layout; a method with a
        # small-gate kernel was timed at that placement with its kernel (calibration runs the engine)
        path = predict_path(state._phys, gate.qubits, nxt)
        placement = placement_of(path)
        then = self._next_placements(state, gate, nxt)
        tried: list[str] = []
        redone: list[dict] = []
        # the norm the last guarded block measured after itself, while nothing has changed the
        # state since: the input norm of this block (the error bound takes it, run_error)
        known = self.guarded_norm
        norm_in = known[1] if known is not None and known[0] is state else None
        while True:
            choice = selector.choose(d, n, placement, without=tuple(tried), then=then)
            method = gemm.get_method(choice.method)
            block = {"qubits": list(gate.qubits), "d": d, "placement": placement, "method": choice.method,
                     "options": dict(choice.options), "predicted_ms": choice.predicted_ms, "reason": choice.reason,
                     "redone": redone, "guard": None, "norm_before": norm_in}
            if not needs_guard(method):
                self.guarded_norm = None  # the state changes without a norm measured after it
                info = state.apply(gate.matrix, gate.qubits, method=choice.method, check_unitary=False,
                                   small_gate_kernel=small, next_qubits=nxt, **choice.options)
                return state, info, block
            if not per_block:
                info, verdict = self._apply_checked(state, gate, nxt, choice.method, None, choice.options)
                block["guard"] = verdict.to_dict()
                if verdict.ok:
                    return state, info, block
                selector.exclude(choice.method, f"accuracy guard: {verdict.why}")
                raise _RestartRun({"method": choice.method, "why": verdict.why})
            try:  # the guard keeps the block's input: only when a copy of the state fits
                memory.check_fits("the accuracy guard's copy of the state", state.nbytes, state.device)
            except InsufficientMemoryError:
                selector.exclude(choice.method, "no memory for the accuracy guard's copy of the state")
                redone.append({"method": choice.method, "why": "routed: no memory for the guard's copy"})
                continue
            saved = state.copy()
            # the norm the last guarded block measured, while nothing has changed the state since
            known = self.guarded_norm
            norm0 = known[1] if known is not None and known[0] is state else saved.norm()
            block["norm_before"] = norm0
            info, verdict = self._apply_checked(state, gate, nxt, choice.method, norm0, choice.options)
            block["guard"] = verdict.to_dict()
            if verdict.ok:
                return state, info, block
            redone.append({"method": choice.method, "why": verdict.why})
            selector.exclude(choice.method, f"accuracy guard: {verdict.why}")
            tried.append(choice.method)
            state = saved

    def _next_placements(self, state: StateVector, gate, nxt) -> dict | None:
        """Candidate -> (width, placement) of the next block after this one ran with it, where the
        candidates leave different layouts (their batched products differ: one keeps contiguous
        middle targets in place, another moves them down and the next block's targets up); else
        None (the choice is per block)."""
        selector = self.selector
        if nxt is None or not state._phys.double_buffer:
            return None
        methods = {name: gemm.get_method(name) for name in selector.candidates if name not in selector.excluded}
        if len({m.batched_products for m in methods.values()}) < 2:
            return None
        out = {}
        for name, m in methods.items():
            after = layout_after(state._phys, gate.qubits, nxt, m, self.settings.small_gate_kernel)
            path = predict_layout_path(after, nxt, state.n_qubits, self.settings.device.name)
            out[name] = (len(nxt), placement_of(path))
        return out

    def _apply_checked(self, state: StateVector, gate, nxt, method: str, norm0: float | None, options=None):
        """Apply one block with ``method`` (and its ``options``: a tuned setting), recording the
        gemm warnings, and return ``(info, verdict)``: info None when the method raised a domain
        error. ``norm0``: the norm before the block, to check the norm after it against; None
        checks the statistics only."""
        info = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                info = state.apply(gate.matrix, gate.qubits, method=method, check_unitary=False,
                                   small_gate_kernel=self.settings.small_gate_kernel, next_qubits=nxt,
                                   **(options or {}))
            except gemm.errors.GemmError as exc:  # a domain failure of the method: redo with the next
                verdict = guard.Verdict(False, f"{type(exc).__name__}: {exc}")
        for w in caught:  # warnings from outside gemm are not the guard's business: pass them on
            if getattr(w.category, "__module__", "").split(".")[0] != "gemm":
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if info is not None:
            norm1 = None
            if norm0 is not None:
                norm1 = state.norm()
                self.guarded_norm = (state, norm1)
            verdict = guard.check(info.report, caught, norm0, norm1,
                                  guard.norm_bound(self.settings.precision, len(gate.qubits),
                                                   self.settings.tolerance))
        return info, verdict


def _metadata(settings: Settings, selector: Selector, stats: list[GateStat], blocks: list[dict]) -> dict:
    """Per block: method, predicted and measured time, why; and the run's summary."""
    per_method: dict[str, int] = {}
    for st, block in zip(stats, blocks):
        block["index"] = st.index
        block["measured_ms"] = st.info.time_ms
        per_method[block["method"]] = per_method.get(block["method"], 0) + 1
    return {"auto": {"precision": settings.precision, "tolerance": settings.tolerance,
                     "cost_table": selector.table.describe(), "candidates": list(selector.candidates),
                     "excluded": dict(selector.excluded), "blocks_per_method": per_method,
                     "predicted_ms": float(sum(b["predicted_ms"] for b in blocks)),
                     "measured_ms": float(sum(b["measured_ms"] for b in blocks)),
                     "redone_blocks": sum(bool(b["redone"]) for b in blocks),
                     # method -> width -> the accuracy setting a tolerance chose (run_error.tune_precision)
                     "precision_settings": {
                         name: {str(d): {"setting": st.label, "options": dict(st.options),
                                         "relative_cost": st.relative_cost, "why": why}
                                for d, (st, why) in sorted(per.items())}
                         for name, per in selector.tuned.items()}},
            "blocks": blocks}
