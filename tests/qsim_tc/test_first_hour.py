"""What a new user meets first: kernel compilation kept out of the run time (and said once),
OpenQASM-style parameter values, and a calibration that says when its timings scatter."""

import math
import time

import numpy as np
import pytest

from circuits import brickwork
from qsim_tc import Simulator
from qsim_tc import calibrate as cal
from qsim_tc.cli import main
from qsim_tc.cli.expression import evaluate
from qsim_tc.plan.noise import NOISY_SPREAD, Spread
from qsim_tc.stages import cpu_warmup

# --- CPU kernels: compiled or loaded before the timer starts -------------------------------------


@pytest.fixture
def slow_preparation(monkeypatch):
    """Kernel preparation that takes a second (as a first compilation takes far longer)."""
    real = cpu_warmup.ensure_ready

    def slow(dtype, **kw):
        time.sleep(1.0)
        return real(dtype, **kw) + 1.0

    monkeypatch.setattr(cpu_warmup, "ensure_ready", slow)


def test_kernel_preparation_is_not_run_time(slow_preparation):
    """Whatever compiling or loading the kernels costs is left out of Result.wall_s."""
    t0 = time.perf_counter()
    res = Simulator("native", device="cpu", plan="always").run(brickwork(6, 2, 2, seed=1))
    total = time.perf_counter() - t0
    assert res.metadata["stages"]["use"] and total > 1.0 and res.wall_s < 0.5


def test_compiling_is_said_once_and_only_when_it_happens(monkeypatch):
    said = []
    monkeypatch.setattr(cpu_warmup, "_READY", set())
    monkeypatch.setattr(cpu_warmup, "_on_disk", lambda dispatcher, real: False)
    assert cpu_warmup.ensure_ready(np.complex128, say=said.append) >= 0.0
    assert said == [cpu_warmup.COMPILE_MESSAGE] and "compiling CPU kernels, once" in said[0]
    assert cpu_warmup.ensure_ready(np.complex128, say=said.append) == 0.0 and len(said) == 1  # ready now
    monkeypatch.setattr(cpu_warmup, "_on_disk", lambda dispatcher, real: True)
    cpu_warmup.ensure_ready(np.complex64, say=said.append)  # loaded from the disk cache: nothing said
    assert len(said) == 1


def test_the_disk_cache_check_reads_numbas_index():
    from qsim_tc.stages import cpu_kernels as kernels

    cpu_warmup.ensure_ready(np.complex128)  # compiled or loaded, and so saved where numba caches it
    if not kernels.run_chunks._cache._cache_file._load_index():
        pytest.skip("numba could not write its cache here")
    assert cpu_warmup._on_disk(kernels.run_chunks, np.float64)
    assert not cpu_warmup._on_disk(kernels.run_chunks, np.int8)  # never compiled for it
    assert not cpu_warmup._on_disk(object(), np.float64)  # anything unexpected: "compiling" is said


# --- --param values: OpenQASM constant expressions ---------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("0.5", 0.5), ("pi/2", math.pi / 2), ("-3*tau/8", -3 * math.tau / 8), ("sqrt(2)/2", math.sqrt(2) / 2),
    ("pi^2", math.pi**2), ("2**-1", 0.5), ("euler", math.e), ("ln(euler)", 1.0), ("+(1+2)*-3", -9.0),
    ("π/4", math.pi / 4), ("exp(0) + cos(0) + sin(0) + tan(0)", 2.0), ("1e-3", 1e-3), ("arccos(1)", 0.0)])
def test_expressions_openqasm_accepts(text, value):
    assert evaluate(text) == pytest.approx(value)


@pytest.mark.parametrize("text, reason", [
    ("__import__('os').system('true')", "is not allowed"), ("x", "unknown name 'x'"), ("(1).real", "not allowed"),
    ("1/0", "ZeroDivisionError"), ("ln(0)", "math domain error"), ("9**9**9", "OverflowError"),
    ("1e999", "is not finite"), ("(-8)**(1/3)", "not a real number"), ("True", "not a number"),
    ("1j", "not a number"), ("'pi'", "not a number"), ("sin(1, 2)", "not allowed"), ("pi pi", "cannot read"),
    ("(" * 300 + "1" + ")" * 300, "characters"), ("lambda: 1", "not allowed"), ("[1][0]", "not allowed")])
def test_everything_else_is_refused_by_name(text, reason):
    with pytest.raises(ValueError, match=None) as info:
        evaluate(text)
    assert reason in str(info.value)


def test_expression_type():
    with pytest.raises(TypeError, match="expression must be a string, got float"):
        evaluate(0.5)


# --- calibration noise ----------------------------------------------------------------------------


def test_spread_flags_a_table_whose_points_scatter():
    quiet, busy = Spread(), Spread()
    for _ in range(10):
        quiet.add([1.0, 1.02, 0.99])
        busy.add([1.0, 1.02, 0.99])
    for _ in range(5):
        busy.add([1.0, 2.5, 1.1])
    busy.add([3.0])  # one run: nothing to compare
    assert quiet.verdict() == "" and quiet.noisy == 0
    assert busy.noisy == 5 and len(busy.spreads) == 15
    assert busy.verdict().startswith(f"noisy timings: 5 of 15 points varied by more than {NOISY_SPREAD:.0%}")


def test_calibrate_reports_scattered_timings(tmp_path, monkeypatch, capsys):
    """A machine whose gate times swing 1x-3x between repeats gets a table flagged as noisy."""
    monkeypatch.setenv("QSIM_TC_CACHE", str(tmp_path))
    cal.forget()
    from qsim_tc.engine.apply import ApplyInfo

    measured = ApplyInfo.time_ms
    swing = iter(np.tile([1.0, 3.0, 1.5], 10_000))
    monkeypatch.setattr(ApplyInfo, "time_ms", property(lambda self: measured.fget(self) * next(swing)))
    argv = ["calibrate", "--device", "cpu", "--precision", "double", "--methods", "native", "--qubits", "8",
            "--max-gate-qubits", "2", "--part", "gates", "--placements", "bottom,top", "--budget", "3", "--repeats", "3", "--no-store"]
    assert main(argv) == 0
    assert "qsim-tc: warning: noisy timings:" in capsys.readouterr().err
    monkeypatch.setattr(ApplyInfo, "time_ms", measured)
    table = cal.calibrate("cpu", precisions=("double",), methods=["native"], n_qubits=8, max_gate_qubits=2,
                          placements=("bottom",), repeats=3, budget_s=3.0)
    assert isinstance(table.noise, str)  # measured quietly or not: a verdict either way, never an error
    cal.forget()


def test_kernel_preparation_is_not_in_the_progress_line(slow_preparation):
    """The progress line's time is the run's: a slow kernel preparation is left out of it too."""
    import io

    from qsim_tc.progress import Progress

    out = io.StringIO()
    Simulator("native", device="cpu", plan="always").run(brickwork(6, 2, 2, seed=1),
                                                         progress=Progress(after=0.0, stream=out, bar=False))
    line = out.getvalue().strip()
    assert line.startswith("simulating:") and float(line.split(" in ")[1].split()[0]) < 0.5, line
