"""The engine's cost model (qsim_tc.plan.costs) and the fusion size it chooses (qsim_tc.plan.fusion)."""

import numpy as np
import pytest

from circuits import Circuit, Gate, brickwork
from qsim_tc import Simulator
from qsim_tc.plan import CostRow, choose_fusion, lookup
from qsim_tc.plan.costs import CostTable, shipped_table


def test_choose_uses_the_cost_table():
    c = brickwork(22, 2, 20, seed=3)
    ch = choose_fusion(c, "native", "cpu", "complex128")
    assert ch.max_qubits is not None and ch.estimated_ms < ch.unfused_ms
    assert "native/cpu/complex128" in ch.cost_row
    row, _ = lookup("native", "cpu", "complex128")
    # the estimate of the unfused circuit is the table's cost of each gate
    assert ch.unfused_ms == pytest.approx(len(c) * row.gate_ms(2, 22))
    gpu = choose_fusion(c, "int8", "gpu", "complex128")
    assert gpu.note == "" and "int8/gpu/complex128" in gpu.cost_row
    stand_in = choose_fusion(c, "emulated-x", "gpu", "complex64")
    assert stand_in.note == ("no cost row for 'emulated-x' on gpu; using 'native32' (complex64) without its "
                             "small-gate kernel widths")
    # without the kernel the narrowest GEMM width holds below it: no reason to fuse below it
    row, _ = lookup("emulated-x", "gpu", "complex64")
    assert min(row.ms) > 4 and row.gate_ms(2) == row.gate_ms(min(row.ms))
    tiny = Circuit(2, [Gate(np.eye(2), (0,))])
    assert choose_fusion(tiny).max_qubits is None  # nothing to gain


def test_cost_row_interpolates_and_scales():
    row = CostRow("cpu", "complex128", "x", 20, {2: 1.0, 4: 4.0}, overhead_ms=0.0)
    assert row.gate_ms(3) == pytest.approx(2.0)
    assert row.gate_ms(1) == 1.0
    assert row.gate_ms(5) == pytest.approx(16.0)
    assert row.gate_ms(2, 22) == pytest.approx(4.0)
    with_overhead = CostRow("cpu", "complex128", "x", 20, {2: 1.0}, overhead_ms=0.5)
    assert with_overhead.gate_ms(2, 10) == pytest.approx(2.0**-10 + 0.5)  # the overhead does not scale
    with pytest.raises(ValueError, match="no gate cost row for device 'tpu'"):
        lookup("native", "tpu", "complex128")


def test_simulator_auto_fusion_records_the_choice():
    """Simulator(fuse="auto") asks the cost model and records its choice in the metadata."""
    c = brickwork(12, 2, 10, seed=5)
    res = Simulator("native", device="cpu", fuse="auto", plan=None).run(c)
    expected = choose_fusion(c, "native", "cpu", "complex128").to_dict()
    assert res.metadata["fusion_choice"] == expected
    assert set(expected) == {"max_qubits", "min_qubits", "estimated_ms", "unfused_ms", "n_blocks", "cost_row", "note"}


def test_stand_in_row_drops_kernel_widths():
    row, note = lookup("int8", "gpu", "complex128")
    assert note == "" and row.backend == "int8"
    native, _ = lookup("native", "gpu", "complex128")
    assert native.kernel_max_d == 6
    stand_in, note = lookup("tf32tf32", "gpu", "complex128")
    assert stand_in.kernel_max_d == 0 and min(stand_in.ms) > 6 and "without its small-gate kernel widths" in note
    assert np.isfinite(stand_in.gate_ms(1, 20))


def test_shipped_gpu_rows_name_the_kernel_widths_of_the_policy():
    # a measured native row owes its narrow widths to the small-gate kernels; a stand-in drops them
    from qsim_tc.engine.small_gate.policy import default_kernel_max_d  # noqa: PLC0415
    from qsim_tc.plan.costs import shipped_table  # noqa: PLC0415

    for name in ("h100", "h200"):
        for r in shipped_table(name).rows:
            if r.backend.startswith("native") and r.measured:
                assert r.kernel_max_d == default_kernel_max_d(np.dtype(r.dtype).itemsize), (name, r.backend)


def test_lookup_never_uses_rows_of_another_precision():
    """A table measured for one precision only (a calibration of double): asked for a complex64
    row, the shipped table of the device stands in, never the complex128 rows."""
    double_only = CostTable({"device": "cpu"}, (
        CostRow("cpu", "complex128", "native", 10, {1: 1.0, 2: 2.0}, overhead_ms=0.0),), "cache:x")
    row, note = lookup("native", "cpu", "complex128", double_only)
    assert row is double_only.rows[0] and note == ""
    for backend in ("native32", "tc-auto", "emulated-x"):
        row, note = lookup(backend, "cpu", "complex64", double_only)
        assert row.dtype == "complex64" and row in shipped_table("cpu").rows + (row,)
        assert row.ms != double_only.rows[0].ms
        assert note.startswith("cost table cache:x has no complex64 row; shipped table")
    assert lookup("native32", "cpu", "complex64", double_only)[0] == lookup("native32", "cpu", "complex64")[0]
    # a table with both precisions: the stand-in of an unknown method is the dtype's native row
    both = CostTable({"device": "cpu"}, double_only.rows + (
        CostRow("cpu", "complex64", "native32", 10, {1: 0.5}, overhead_ms=0.0),), "given")
    assert lookup("emulated-x", "cpu", "complex64", both)[0].backend == "native32"
    assert lookup("emulated-x", "cpu", "complex128", both)[0].backend == "native"


def test_fusion_of_a_single_precision_run_reads_no_double_rows():
    c = brickwork(12, 2, 6, seed=1)
    double_only = CostTable({"device": "cpu"}, (
        CostRow("cpu", "complex128", "native", 12, {1: 100.0, 2: 200.0}, overhead_ms=0.0),), "cache:x")
    ch = choose_fusion(c, "native32", "cpu", "complex64", table=double_only)
    assert "native32/cpu/complex64" in ch.cost_row and "has no complex64 row" in ch.note
    assert ch.to_dict() == {**choose_fusion(c, "native32", "cpu", "complex64").to_dict(), "note": ch.note}
