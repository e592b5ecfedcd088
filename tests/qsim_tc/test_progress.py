"""Progress on long runs: a bar on a terminal, one line per stage elsewhere, nothing for short runs;
the one-time warning when an emulated method runs on a CPU."""

import io
import warnings

import pytest

from circuits import brickwork
from qsim_tc import Simulator, progress
from qsim_tc.accuracy import accuracy_table
from qsim_tc.progress import EmulationOnCPUWarning, Progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_no_carriage_return_when_the_stream_is_not_a_terminal():
    out = io.StringIO()
    p = Progress("native", after=0.0, stream=out)
    for i in range(1, 6):
        p(i, 5)
    text = out.getvalue()
    assert "\r" not in text
    assert text == text.splitlines()[0] + "\n" and text.startswith("native: 5 gates in ")


def test_bar_on_a_terminal():
    out = _Tty()
    p = Progress("native", after=0.0, stream=out)
    for i in range(1, 4):
        p(i, 3)
    text = out.getvalue()
    assert text.count("\r") == 3 and "3/3 gates" in text and text.endswith("\n")


def test_nothing_for_a_short_stage():
    for stream in (io.StringIO(), _Tty()):
        p = Progress("native", after=60.0, stream=stream)
        p(1, 2)
        p(2, 2)
        assert stream.getvalue() == ""


def test_a_line_per_stage_for_several_stages():
    out = io.StringIO()
    p = Progress("a", after=0.0, stream=out)
    p(2, 2)
    p.stage("b")
    p(1, 1)
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[0], out.getvalue().splitlines()[1]]
    assert out.getvalue().startswith("a: 2 gates") and "\nb: 1 gates" in out.getvalue()


def test_simulator_progress_true_and_callables(capsys):
    circ = brickwork(6, 2, 2, seed=0)
    calls = []
    res = Simulator(device="cpu").run(circ, progress=lambda d, t: calls.append((d, t)))
    # a stage run (the default on a CPU) reports once a stage, counting the circuit's gates
    assert res.step_kind == "stage" and len(calls) == len(res.steps)
    assert calls[-1] == (len(circ), len(circ))
    calls.clear()
    Simulator(device="cpu", fuse=None, plan=None).run(circ, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (len(circ), len(circ)) and len(calls) == len(circ)
    Simulator(device="cpu").run(circ, progress=True)  # a short run: nothing shown
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="progress must be a callable"):
        Simulator(device="cpu").run(circ, progress=3)


def test_accuracy_table_reports_each_stage_through_a_progress(monkeypatch):
    out = io.StringIO()
    rows = accuracy_table(brickwork(6, 2, 2, seed=0), ["native32"], device="cpu", reference="dd", mirror=True,
                          progress=Progress("x", after=0.0, stream=out))
    assert [r["backend"] for r in rows] == ["native", "native32", "dd (reference)"]
    lines = out.getvalue().splitlines()
    assert [ln.split(":")[0] for ln in lines][:1] == ["reference"]
    assert any(ln.startswith("native32: mirror") for ln in lines) and "\r" not in out.getvalue()


def test_emulated_method_on_cpu_warns_once(monkeypatch):
    monkeypatch.setattr(progress, "_warned", set())
    circ = brickwork(4, 2, 1, seed=0)
    sim = Simulator("int8-auto", device="cpu")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        sim.run(circ)
        sim.run(circ)
        Simulator("native", device="cpu").run(circ)
    emu = [w for w in got if issubclass(w.category, EmulationOnCPUWarning)]
    assert len(emu) == 1
    assert "'int8-auto' runs on the CPU" in str(emu[0].message) and "validation" in str(emu[0].message)
    assert "5-200x" in str(emu[0].message)
