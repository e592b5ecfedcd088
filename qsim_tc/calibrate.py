"""Per-device calibration: measure the cost rows that ``backend="auto"`` and fusion read, store them
in the user's cache, and find the table to use on a device.

Procedure (:func:`calibrate`): for each method of the precisions asked (the methods auto chooses
from, :func:`qsim_tc.plan.select.auto_candidates`), the per-gate overhead is timed on a 6-qubit
state; then the emulated methods' first two widths, the native methods (all their widths), and
the emulated methods' other widths, for gate widths in turn (:func:`_width_order`: d = 1, 2 and
every other width for the native methods; d = 10, 8, 9, the widest and then down for the emulated
ones), a Haar-random d-qubit gate is applied
through the engine (``StateVector.apply``, so small-gate kernels, rotations and permutations are
what a run gets) at each placement: targets at the bottom, in the middle (where the engine takes
the batched product), at the top, and on random qubits. The state is put back in logical order
between repetitions, outside the timed region; each gate gets fresh phases so no method's slice
cache hits. Times come from the engine's own timer (CUDA events on the GPU, perf_counter on the
CPU); the first run of each (method, d) warms up (kernel compilation, BLAS and cuBLAS plans) and
is not counted; the median of ``repeats`` runs is kept, or, where a gate takes longer than
:data:`SLOW_MS`, the faster of two runs (a run can compile a kernel variant that the warm-up did
not need: int8-crt's modules are built per word count of its moduli, which the data set). The
per-gate overhead is the fastest of five runs. Each method gets an equal share of the
time budget; each precision's part counts from its own start, and the whole stops at
:data:`HARD_STOP` times the budget. Widths a method has no time left for are extrapolated by the
row (4x per qubit) and the row lists the widths measured.

Cache: one JSON file per device key (:func:`device_key`: device name, driver, CUDA runtime,
cupy, cuBLAS and numpy versions) in ``$QSIM_TC_CACHE``, else ``$XDG_CACHE_HOME/qsim-tc``, else
``~/.cache/qsim-tc``. :func:`table_for` reuses it; without one it calibrates briefly on a GPU
(one line on stderr) and, on a CPU, where a calibration takes minutes, uses the shipped CPU table.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import gemm
from circuits.haar import haar_unitary
from qsim_tc import memory
from qsim_tc.cache_folder import keyed_path  # (qsim_tc.calibrate.cache_dir, as before)
from qsim_tc.engine.apply import MAX_BATCHES, MIN_BATCHED_L
from qsim_tc.errors import InsufficientMemoryError
from qsim_tc.plan import cache
from qsim_tc.plan.costs import ANY, PLACEMENTS, CostRow, CostTable, CostTableError, shipped_names, shipped_table
from qsim_tc.plan.noise import Spread
from qsim_tc.plan.select import auto_candidates, check_precision, qualifying_methods
from qsim_tc.progress import is_emulated
from qsim_tc.state import StateVector

DEFAULT_QUBITS = {"cpu": 20, "gpu": 28}
# the whole calibration's wall time: measuring, warm-ups, overheads and allocations all count
# (a measuring-only budget of 40 s came to 66-67 s on an H100, against the 60 s target)
DEFAULT_BUDGET_S = {"cpu": 60.0, "gpu": 45.0}
# the whole calibration stops here (x budget) whatever a precision's part says: a width started
# before a deadline can run past it, and the CLI's 45 s must stay under a minute
HARD_STOP = 1.2
AUTO_BUDGET_S = 20.0  # the brief calibration at first GPU use, for the precision asked only
DEFAULT_MAX_GATE_QUBITS = {"cpu": 10, "gpu": 12}
# a gate slower than this is timed twice and the faster run kept (its noise is small against its
# time, but one run can include a compilation: with one run, a warm int8-crt gate that built a
# module for another word count of its moduli read 3.5 s, and as the per-gate overhead that went
# into every width of the row, so auto never chose int8-crt on an H200)
SLOW_MS = 50.0
# An emulated method's first two widths (d = 10, 8) are measured at every placement past its share
# of the budget while its gates there cost less than this: tc-auto's share went to compiling its
# kernels, d = 8 was measured at two placements of four, and the others, read flat from d = 10
# (22 ms against 9-10 measured apart), made auto/single run CGEMM at 1.24x tc-auto's time on
# brickwork(28, 8, 4) on an H100. An INT8 method's d = 10 gate (1 s and more) still stops at its share.
CHEAP_GATE_MS = 100.0
OVERHEAD_QUBITS = 6

_MEMO: dict[str, CostTable] = {}  # device key -> the table in use, for this process


# --- where tables live ------------------------------------------------------------------------


def device_key(device) -> dict:
    """The identity a cost table is measured for: what changes a gate's time.

    Args:
        device: a resolved ``gemm.Device``.

    Returns:
        A JSON-able dict (``device``: ``"cpu"`` / ``"gpu"``; the GPU's name, driver, CUDA runtime,
        cupy and cuBLAS versions; the CPU's processor, core count and numpy version).
    """
    key = {"device": device.name, "numpy": np.__version__}
    if device.is_gpu:
        from qsim_tc.environment import environment  # noqa: PLC0415 - imports cupy

        env = environment()
        for k in ("gpu", "cuda_driver", "cuda_runtime", "cupy", "cublas"):
            if k in env:
                key[k] = env[k]
    else:
        key["processor"] = platform.processor() or platform.machine()
        key["cpu_count"] = os.cpu_count()
    return key


def cache_path(key: dict) -> Path:
    """The cache file of a device key: a readable name and a hash of the whole key."""
    return keyed_path("costs", key.get("gpu") or key.get("device", "device"), key)


def load_cached(key: dict) -> CostTable | None:
    """The cached table of ``key``, or None when there is none.

    Raises:
        CostTableError: the file exists but is not a valid table of this key (the message names the
            file; :func:`qsim_tc.plan.cache.read`).
    """
    return cache.read(cache_path(key), key)


def store(table: CostTable) -> Path:
    """Write ``table`` to the cache file of its key (atomically); return the path."""
    return cache.write(cache_path(table.key), table)


def nearest_shipped(key: dict) -> CostTable:
    """The shipped table for ``key``'s device, or the nearest one, with a note saying which."""
    if key.get("device") != "gpu":
        return shipped_table("cpu").with_origin("shipped:cpu", "no table measured on this CPU; using the shipped "
                                                "CPU table (qsim-tc calibrate --device cpu measures one)")
    gpu = str(key.get("gpu", "")).upper()
    names = shipped_names()
    for name in ("h100", "h200"):
        if name.upper() in gpu and name in names:
            return shipped_table(name).with_origin(f"shipped:{name}", f"shipped {name.upper()} table")
    fallback = "h200" if "h200" in names else next(n for n in names if n != "cpu")
    return shipped_table(fallback).with_origin(
        f"shipped:{fallback}", f"no shipped table for {key.get('gpu', 'this GPU')}; using the {fallback.upper()}'s "
                               "(qsim-tc calibrate measures this one)")


def table_for(device, precision: str | None = None, *, calibrate_missing="auto", message=None) -> CostTable:
    """The cost table to use on ``device``: cached, else measured now (GPU), else shipped.

    Args:
        device: a resolved ``gemm.Device`` (or ``"auto"``, ``"cpu"``, ``"gpu"``).
        precision: the precision a run asks (a brief calibration measures only its methods); None:
            both.
        calibrate_missing: ``"auto"`` (calibrate briefly on a GPU, never on a CPU), True or False.
        message: called with one line when a calibration starts or a cached table is unreadable
            (default: print to stderr).

    Returns:
        The :class:`~qsim_tc.plan.costs.CostTable` (``origin`` and ``note`` say which and why).
    """
    dev = gemm.resolve_device(device)
    say = message or (lambda text: print(f"qsim-tc: {text}", file=sys.stderr))
    key = device_key(dev)
    memo = json.dumps(key, sort_keys=True)
    precisions = (check_precision(precision),) if precision else ("double", "single")
    table = _MEMO.get(memo)
    if table is None:
        try:
            table = load_cached(key)
        except CostTableError as exc:
            cache.report_once(exc, "recalibrating" if _may_calibrate(dev, calibrate_missing) else
                              "using a shipped table (qsim-tc calibrate replaces it)", message)
            table = None
    allowed = _may_calibrate(dev, calibrate_missing)
    missing = [p for p in precisions if table is None or not _covers(table, p)]
    if missing and allowed:
        say(f"no cost table for {key.get('gpu', dev.name)} ({', '.join(missing)} precision); calibrating "
            f"once (about {AUTO_BUDGET_S:.0f} s), stored in {cache_path(key)}")
        fresh = calibrate(dev, precisions=tuple(missing), budget_s=AUTO_BUDGET_S)
        # the brief budget leaves widths (and whole methods) unmeasured: read them from the
        # nearest shipped table, scaled by what was measured, rather than 4x per qubit above d = 1
        ref = nearest_shipped(key)
        same_model = ref.origin.split(":")[-1].upper() in str(key.get("gpu", "")).upper()
        fresh = complete(fresh, ref, precisions=tuple(missing) if same_model else ())
        table = merge(table, fresh) if table is not None else fresh
        table = table.with_origin(f"cache:{store(table)}")
    if table is None:
        return nearest_shipped(key)
    _MEMO[memo] = table
    uncovered = [p for p in precisions if not _covers(table, p)]
    if precision is not None and uncovered:
        # the cached table was measured for the other precision only and may not be completed
        # here: the shipped table serves the run, never the rows of the other precision
        ref = nearest_shipped(key)
        return ref.with_origin(ref.origin, f"{table.origin} has no {precision}-precision rows; "
                                           f"using the {ref.origin} table")
    return table


def complete(table: CostTable, ref: CostTable, *, precisions=("double", "single")) -> CostTable:
    """``table`` with the widths and methods it did not measure read from ``ref``, scaled.

    A brief calibration (:data:`AUTO_BUDGET_S`) can run out after a method's first width: on an
    H100 with no cache, ``native`` got d = 1 only, fusion read d = 2-12 as 4x per qubit above
    it, and gate-at-a-time QFT-28 took 1140 ms instead of 265 (QuantumVolume(28) 1095 against
    311). Here each row (method, dtype, placement) takes every width of ``ref``'s matching row
    that it lacks, times the geometric mean of ``own / ref`` over the widths it measured: the
    device's speed relative to ``ref``'s, as far as it was seen. A method of ``precisions`` with no
    row at all takes ``ref``'s rows scaled by the ratio of the same dtype's native rows (1 when
    none was measured); pass ``precisions=()`` where ``ref`` was measured on another GPU model,
    whose emulated methods may not run alike. Filled widths stay out of ``measured`` and the
    row's ``source`` says so; an added row keeps ``ref``'s widths as its ``measured`` ones and
    says in ``source`` that it was not measured here.

    Args:
        table: the measured table.
        ref: the table to borrow from (the shipped table of the nearest device).
        precisions: whose auto candidates may be added as whole rows.

    Returns:
        A new table (``table`` itself when nothing was missing).
    """
    ref_name = ref.origin.split(":", 1)[-1] if ref.origin else "reference"
    rows: list[CostRow] = []
    ratios: dict[str, list[float]] = {}  # dtype -> log ratios of the native rows

    def ref_row(r: CostRow) -> CostRow | None:
        same = [x for x in ref.rows if x.backend == r.backend and x.dtype == r.dtype and x.device == r.device]
        return next((x for x in same if x.placement == r.placement), None) or next(
            (x for x in same if x.placement == ANY), None)

    def ref_ms(x: CostRow, d: int, n: int) -> float:
        return x.ms[d] * 2.0 ** (n - x.n_qubits)

    changed = False
    for r in table.rows:
        x = ref_row(r)
        seen = [d for d in (r.measured or tuple(r.ms)) if x is not None and d in x.ms and d in r.ms]
        if not seen:
            rows.append(r)
            continue
        logs = [math.log(r.ms[d] / ref_ms(x, d, r.n_qubits)) for d in seen]
        if gemm.get_method(r.backend).direct_small_gates:
            ratios.setdefault(r.dtype, []).extend(logs)
        scale = math.exp(sum(logs) / len(logs))
        fill = {d: scale * ref_ms(x, d, r.n_qubits) for d in x.ms if d not in r.ms}
        if not fill:
            rows.append(r)
            continue
        changed = True
        rows.append(replace(r, ms=dict(sorted({**r.ms, **fill}.items())), measured=tuple(r.measured or sorted(r.ms)),
                            source=f"{r.source}; widths {_span(fill)} from the {ref_name} table x {scale:.3g}"))
    have = {r.backend for r in table.rows}
    wanted = {m for p in precisions for m in auto_candidates(check_precision(p))}
    for x in ref.rows:
        if x.backend in have or x.backend not in wanted or x.device != table.key.get("device", x.device):
            continue
        logs = ratios.get(x.dtype, [])
        scale = math.exp(sum(logs) / len(logs)) if logs else 1.0
        n = max((r.n_qubits for r in table.rows if r.dtype == x.dtype), default=x.n_qubits)
        changed = True
        rows.append(replace(x, n_qubits=n, ms={d: scale * ref_ms(x, d, n) for d in x.ms},
                            source=f"not measured: the {ref_name} table x {scale:.3g} ({x.source})"))
    return replace(table, rows=tuple(rows)) if changed else table


def _span(ds) -> str:
    ds = sorted(ds)
    return f"{ds[0]}-{ds[-1]}" if len(ds) > 2 and ds[-1] - ds[0] == len(ds) - 1 else ",".join(map(str, ds))


def _may_calibrate(dev, calibrate_missing) -> bool:
    if calibrate_missing == "auto":
        return dev.is_gpu
    return bool(calibrate_missing)


def _covers(table: CostTable, precision: str) -> bool:
    return any(table.row(m) is not None for m in auto_candidates(precision))


def merge(old: CostTable, new: CostTable) -> CostTable:
    """``old``'s rows, replaced by ``new``'s for the methods ``new`` measured."""
    replaced = set(new.methods())
    rows = tuple(r for r in old.rows if r.backend not in replaced) + new.rows
    return CostTable(new.key, rows, new.origin, new.note, old.elapsed_s + new.elapsed_s)


def forget() -> None:
    """Drop this process's memory of the tables in use (after the cache changed)."""
    _MEMO.clear()
    cache.forget_reports()


# --- measuring --------------------------------------------------------------------------------


def calibrate(device="auto", *, precisions=("double", "single"), methods=None, n_qubits: int | None = None,
              max_gate_qubits: int | None = None, placements=PLACEMENTS, budget_s: float | None = None,
              repeats: int = 3, seed: int = 0, progress=None) -> CostTable:
    """Measure the cost rows of ``device`` (module docstring: the procedure).

    Args:
        device: ``"auto"``, ``"cpu"``, ``"gpu"`` or a resolved ``gemm.Device``.
        precisions: the precisions whose methods to measure (``"double"``, ``"single"``).
        methods: measure these methods instead (names); default every qualifying method.
        n_qubits: the state size (default 28 on a GPU, lowered until six states fit; 20 on a CPU).
        max_gate_qubits: the widest gate (default 12 on a GPU, 10 on a CPU; at most n_qubits - 1).
        placements: which of ``bottom``, ``middle``, ``top``, ``scattered`` to measure.
        budget_s: the wall time of the whole calibration (default 45 s GPU, 60 s CPU), shared
            equally by the methods; each precision stops measuring at its deadline (its methods'
            part of the budget from the start), so a slow width cannot push the total far past it.
        repeats: timed runs per point (the median is kept).
        seed: seed of the random gates and qubit sets.
        progress: called with one line per method and width measured.

    Returns:
        The measured :class:`~qsim_tc.plan.costs.CostTable` (``origin`` ``"measured"``; ``noise``
        says when the repeats of too many points scattered, :mod:`qsim_tc.plan.noise`).

    Raises:
        ValueError: a bad precision, placement, size or count; no method could be measured.
    """
    dev = gemm.resolve_device(device)
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad or not placements:
        raise ValueError(f"placements must be some of {', '.join(PLACEMENTS)}, got {list(placements)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    by_precision = [(p, auto_candidates(p)) for p in map(check_precision, precisions)]
    if methods is None and not dev.is_gpu:
        # on a CPU the emulated methods emulate tensor cores in numpy, 5-200x native's time: one
        # d = 10 gate of tc-auto at 20 qubits ran past two minutes, so a CPU calibration never
        # finished; left out of the table, they are no candidates of auto there (named, they are measured)
        by_precision = [(p, [m for m in ms if not is_emulated(gemm.get_method(m))]) for p, ms in by_precision]
    if methods is not None:  # any method of the class when named, auto's candidates or not
        wanted = list(methods)
        by_precision = [(p, [m for m in qualifying_methods(p) if m in wanted]) for p, _ in by_precision]
        unknown = sorted(set(wanted) - {m for _, ms in by_precision for m in ms})
        if unknown:
            raise ValueError(f"methods {unknown} are not of precision {', '.join(precisions)}")
    n = n_qubits if n_qubits is not None else _default_qubits(dev)
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= 40:
        raise ValueError(f"n_qubits must be an int in 2..40, got {n!r}")
    max_d = min(max_gate_qubits or DEFAULT_MAX_GATE_QUBITS[dev.name], n - 1)
    if max_d < 1:
        raise ValueError(f"max_gate_qubits must be >= 1, got {max_gate_qubits!r}")
    all_methods = [m for _, ms in by_precision for m in ms]
    budget = float(budget_s if budget_s is not None else DEFAULT_BUDGET_S[dev.name])
    share = budget / max(len(all_methods), 1)
    rng = np.random.default_rng(seed)
    note = progress or (lambda text: None)
    t_start = time.perf_counter()
    rows: list[CostRow] = []
    skipped: dict[str, str] = {}
    spread = Spread()
    machine = _machine(dev)
    hard_stop = t_start + HARD_STOP * budget
    for _precision, names in by_precision:
        if not names:
            continue
        # each precision's part of the budget counts from its own start (the double methods
        # overran into the single ones' part, and tc-auto went unmeasured), within a hard stop
        deadline = min(time.perf_counter() + budget * len(names) / max(len(all_methods), 1), hard_stop)
        dtype = gemm.get_method(names[0]).state_dtype
        spent = {m: 0.0 for m in names}
        times: dict[str, dict[str, dict[int, float]]] = {m: {p: {} for p in placements} for m in names}
        overhead = {}
        for m in names:
            t0 = time.perf_counter()
            try:
                overhead[m] = _overhead(m, dev, dtype, rng)
            except Exception as exc:  # noqa: BLE001 - a method that cannot run here is skipped, and said so
                skipped[m] = f"{type(exc).__name__}: {exc}"
            spent[m] += time.perf_counter() - t0
        names = [m for m in names if m not in skipped]
        state = StateVector(n, dtype=dtype, device=dev)
        unitaries = {}
        orders = {m: _width_order(gemm.get_method(m), max_d) for m in names}
        # the methods in the state's own arithmetic first, all their widths, then the emulated
        # ones: an emulated method's first width can take seconds a gate (int8-auto at d = 10:
        # 5.8 s on an H100), and measured in turn with the others it left native and native3m
        # no time for d = 10, whose extrapolated cost made auto pick int8-crt at 4x the time
        # ... except each emulated method's first two widths (d = 10, 8), measured before them:
        # that is where emulation can win, and a precision's part that ran out in the native
        # widths left tc-auto unmeasured (auto/single then ran CGEMM at 2.5x tc-auto's time on
        # brickwork(28, 10, 4), 1.25x on brickwork(28, 8, 4))
        native = [m for m in names if gemm.get_method(m).direct_small_gates]
        emulated = [m for m in names if not gemm.get_method(m).direct_small_gates]
        steps = ([(emulated, 0), (emulated, 1)] + [(native, st) for st in range(max_d)]
                 + [(emulated, st) for st in range(2, max_d)])
        for group, step in steps:
            first = group is emulated and step < 2
            live = [m for m in group if m not in skipped and (spent[m] < share or first and _cheap(times[m]))]
            if not live or time.perf_counter() >= deadline:
                continue
            for m in live:
                d = orders[m][step]
                if d not in unitaries:
                    unitaries[d] = haar_unitary(1 << d, rng)
                u = unitaries[d]
                t0 = time.perf_counter()
                try:
                    for i, placement in enumerate(placements):
                        if time.perf_counter() >= deadline:
                            break
                        qubits = _placement_qubits(placement, n, d, dev, rng)
                        if qubits is None:
                            continue
                        times[m][placement][d] = _time_gate(state, m, u, qubits, repeats, warm=(i == 0), rng=rng,
                                                            deadline=deadline, spread=spread)
                        if spent[m] + time.perf_counter() - t0 >= share and not (
                                first and times[m][placement][d] < CHEAP_GATE_MS):
                            # a wide emulated gate costs seconds a placement: stop inside the
                            # width, not after it (the 60 s target was missed by whole widths)
                            break
                except InsufficientMemoryError as exc:
                    spent[m] = share  # no wider gate fits either
                    note(f"{m}: d={d} does not fit ({exc}); wider gates extrapolated")
                except Exception as exc:  # noqa: BLE001 - see above
                    skipped[m] = f"{type(exc).__name__}: {exc}"
                    note(f"{m}: skipped ({skipped[m]})")
                    continue
                spent[m] += time.perf_counter() - t0
                shown = ", ".join(f"{p} {t[d]:.3g}" for p, t in times[m].items() if d in t)
                note(f"{m} d={d}: {shown} ms")
        del state, unitaries
        for m in names:
            if m in skipped:
                continue
            for placement, by_d in times[m].items():
                if not by_d:
                    continue
                oh = overhead[m]
                ms = {d: max(t - oh, 0.05 * t) for d, t in sorted(by_d.items())}
                rows.append(CostRow(dev.name, str(np.dtype(dtype)), m, n, ms, machine=machine,
                                    source=f"qsim-tc calibrate {time.strftime('%Y-%m-%d')}, median of {repeats}",
                                    kernel_max_d=_kernel_max_d(m, dev, dtype), overhead_ms=oh, placement=placement,
                                    measured=tuple(sorted(by_d))))
    if not rows:
        raise ValueError(f"no method could be measured on {dev.name}: {skipped or 'none qualifies'}")
    elapsed = time.perf_counter() - t_start
    table = CostTable(device_key(dev), tuple(rows), "measured",
                      note=("skipped: " + "; ".join(f"{k} ({v})" for k, v in skipped.items())) if skipped else "",
                      elapsed_s=elapsed, noise=spread.verdict())
    return table


def _kernel_max_d(method: str, dev, dtype) -> int:
    """The widths up to which ``method``'s measured costs come from the GPU small-gate kernels
    (0: none), which a stand-in row for a method without them drops (:func:`costs.lookup`)."""
    if not dev.is_gpu or not gemm.get_method(method).direct_small_gates:
        return 0
    from qsim_tc.engine.small_gate.policy import default_kernel_max_d  # noqa: PLC0415 - GPU engine only
    return default_kernel_max_d(np.dtype(dtype).itemsize)


def _cheap(times_by_placement: dict) -> bool:
    """Whether a method's cheapest gate measured so far costs less than :data:`CHEAP_GATE_MS`
    (True before any: its first width is measured at one placement at least)."""
    measured = [t for by_d in times_by_placement.values() for t in by_d.values()]
    return not measured or min(measured) < CHEAP_GATE_MS


def _width_order(method, max_d: int) -> list[int]:
    """The order in which a method's gate widths are measured while its share of the budget lasts.

    A method whose small gates run in the state's own arithmetic (``direct_small_gates``: the
    native ones) takes d = 1, 2 and then every other width up to ``max_d`` before the widths
    between: a share that runs out early still spans the range, and the widths between are
    interpolated (a first-use calibration that went d = 1, 2, 3, ... stopped at d = 8 and read
    d = 10 as 4x per qubit above it, 209 ms where ZGEMM takes 40: small widths are memory-bound,
    so the 4x GEMM growth only holds from d ~ 9 on). An emulated
    method goes down from ``max_d``: it can only win where the product is compute-bound (large d),
    its small widths cost it several passes each (a d = 1 INT8 gate took 0.35-2 s at 28 qubits on
    an H100, which spent a whole share before), and a width it had no time for is read from the
    nearest measured one below it, flat (:meth:`qsim_tc.plan.costs.CostRow.gate_ms`): an
    over-estimate, so an unmeasured small width is never chosen for an emulated method. Its first
    width is d = 10 (when max_d allows), the widest gate of the usual fused circuits.
    """
    widths = list(range(1, max_d + 1))
    if not method.direct_small_gates:
        # d = 10 first: the widest gate of the usual fused circuits; with d = 12 first and a 45 s
        # budget, an H100 measured only d = 11-12, and d = 10 read from d = 11 made auto/single pick
        # native32 where tc-auto was 5x faster on brickwork(28, 10, 4)
        # then 8 and 9 (the widths brickwork circuits fuse to, where tc-auto beat CGEMM 1.2x on
        # brickwork(28, 8, 4)) before 11-12, which fused circuits rarely reach
        first = [d for d in dict.fromkeys(min(w, max_d) for w in (10, 8, 9, max_d))]
        return first + [d for d in widths[::-1] if d not in first]
    spread = [d for d in widths if d <= 2 or d % 2 == 0 or d == max_d]
    return spread + [d for d in widths if d not in spread]


def _default_qubits(dev) -> int:
    n = DEFAULT_QUBITS[dev.name]
    avail = memory.available_bytes(dev)
    while n > 10 and 6 * memory.state_bytes(n, np.complex128) > avail:
        n -= 1
    return n


def _machine(dev) -> str:
    key = device_key(dev)
    if dev.is_gpu:
        return ", ".join(f"{k} {key[k]}" for k in ("gpu", "cupy", "cublas") if k in key)
    return f"{key['processor']}, {key['cpu_count']} cores, numpy {key['numpy']}"


def _placement_qubits(placement: str, n: int, d: int, dev, rng) -> list[int] | None:
    """Logical qubits that the engine, from the identity layout, treats as ``placement``; None
    when the state is too small for it (a middle block needs room above and below)."""
    if placement == "bottom":
        return list(range(d))
    if placement == "top":
        return list(range(n - d, n))
    if placement == "middle":
        # the batched product: blocks of L = 2^t >= MIN_BATCHED_L and at most MAX_BATCHES of them
        t_min = int(MIN_BATCHED_L[dev.name]).bit_length() - 1
        t = max(t_min, n - d - (int(MAX_BATCHES[dev.name]).bit_length() - 1))
        if t + d >= n:
            return None
        return list(range(t, t + d))
    return sorted(int(q) for q in rng.choice(n, size=d, replace=False))


def _time_gate(state: StateVector, method: str, u: np.ndarray, qubits, repeats: int, *, warm: bool, rng,
               deadline: float = float("inf"), spread: Spread | None = None) -> float:
    """Median milliseconds of ``u`` (with fresh phases each run) on ``qubits`` from the identity
    layout; past ``deadline`` no further repeat starts (one timed run is always kept). The runs
    go to ``spread`` (the calibration's noise)."""
    times = []
    r = 0
    while True:
        phases = np.exp(2j * np.pi * rng.random(u.shape[0]))
        state.data()  # back to logical order (untimed), so the placement is the one asked
        info = state.apply(u * phases[None, :], qubits, method=method, check_unitary=False)
        r += 1
        if warm and r == 1:
            continue
        times.append(info.time_ms)
        if time.perf_counter() >= deadline:
            break
        if times[0] > SLOW_MS:
            # a slow gate gets two runs and the faster counts: either may have compiled kernels
            # (tc-auto in the middle on an H100, unwarmed: 826 ms, 12-21 ms in a run; int8-crt
            # warm on an H200: 3.5 s where the gate takes 1 ms)
            if len(times) == 2:
                break
        elif len(times) >= repeats:
            break
    if spread is not None and times[0] <= SLOW_MS:  # (a slow gate's two runs may include a compilation)
        spread.add(times)
    return float(min(times)) if times[0] > SLOW_MS else float(np.median(times))


def _overhead(method: str, dev, dtype, rng) -> float:
    """Milliseconds of a 1-qubit gate on a 6-qubit state: the cost that does not scale, so the
    fastest of five runs (a compilation in one of them must not be added to every gate)."""
    st = StateVector(OVERHEAD_QUBITS, dtype=dtype, device=dev)
    u = haar_unitary(2, rng)
    return min(_time_gate(st, method, u, [0], 1, warm=(i == 0), rng=rng) for i in range(5))
