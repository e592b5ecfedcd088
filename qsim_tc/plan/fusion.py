"""The fusion size for a backend: ``Simulator(fuse="auto")`` prices every candidate with the
engine's measured gate costs (:mod:`qsim_tc.plan.costs`, the same table ``backend="auto"`` chooses
methods from) and lets :func:`circuits.fusion.choose_size` plan the blocks."""

from __future__ import annotations

from dataclasses import dataclass

from circuits import Circuit
from circuits.fusion import MAX_AUTO_QUBITS, FusionSize, choose_size
from qsim_tc.plan.costs import CostRow, CostTable, lookup, shipped_table
from qsim_tc.plan.select import Selector


@dataclass(frozen=True)
class FusionChoice(FusionSize):
    """The fusion :func:`choose_fusion` picked, what it expects it to cost, and from which row."""

    cost_row: str = ""  # which measured row was used
    note: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def choose_fusion(circuit: Circuit, backend: str = "native", device: str = "cpu", dtype: str = "complex128",
                  *, max_candidate: int = MAX_AUTO_QUBITS, table: CostTable | None = None,
                  precision: str = "double") -> FusionChoice:
    """Pick (max_qubits, min_qubits) for ``circuit`` from the measured gate costs.

    Per-gate Python overhead is modelled only as the rows' ``overhead_ms``, so small states (where
    it dominates) may be fused more than pays.

    Args:
        circuit: the circuit.
        backend: GEMM method name (a row measured for it is used if present, else the native row),
            or ``"auto"``: a block of width k costs what the cheapest method of ``precision`` in
            ``table`` takes for it.
        device: ``"cpu"`` or ``"gpu"``.
        dtype: the state dtype (``"complex128"`` or ``"complex64"``).
        max_candidate: the widest d to consider.
        table: the device's cost table (default: the shipped table of ``device``).
        precision: with ``backend="auto"``: ``"double"`` or ``"single"``.

    Returns:
        The choice (``max_qubits`` None: do not fuse), with the row used and any stand-in note.

    Raises:
        ValueError: no cost row for ``device``.
    """
    n = circuit.n_qubits
    if backend == "auto":
        if table is None:
            table = shipped_table("cpu" if device == "cpu" else "h200")
        sel = Selector(table, precision)
        size = choose_size(circuit, lambda k: sel.choose(k, n).predicted_ms, max_candidate=max_candidate)
        return FusionChoice(**vars(size), cost_row=f"auto/{precision}: {', '.join(sel.candidates)} from "
                                                   f"{table.origin}", note=table.note)
    row, note = lookup(backend, device, dtype, table)
    size = choose_size(circuit, lambda k: row.gate_ms(k, n), max_candidate=max_candidate)
    return FusionChoice(**vars(size), cost_row=_row_name(row), note=note)


def _row_name(row: CostRow) -> str:
    return row.name
