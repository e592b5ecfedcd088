"""The figures: one colour and marker per method across figures, titles and labels in words, files written."""

import pytest

import gemm
from circuits import brickwork
from gemm.diagnostics.accuracy_tests import plot_results, run_accuracy_test
from gemm.diagnostics.style import METHOD_STYLE, method_style
from qsim_tc.accuracy import accuracy_table, plot_rows

plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions draw (kept instead of closed)."""
    kept = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    for f in kept:
        close(f)


def _texts(fig):
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.get_xticklabels()]
    for leg in fig.legends:
        out += [t.get_text() for t in leg.get_texts()]
    return "\n".join(out)


def test_every_method_has_its_own_colour_and_marker():
    pairs = [tuple(method_style(m).values()) for m in gemm.methods()]
    assert len(set(pairs)) == len(pairs)
    assert len({c for c, _ in METHOD_STYLE.values()}) == len(METHOD_STYLE)
    assert set(gemm.methods()) <= set(METHOD_STYLE)


@pytest.mark.filterwarnings("ignore::qsim_tc.progress.EmulationOnCPUWarning")
def test_brickwork_figure_with_reference_and_mirror(tmp_path, figures):
    circ = brickwork(6, 2, 2, seed=1)
    rows = accuracy_table(circ, ["native32", "int8"], device="cpu", reference="dd", mirror=True)
    path = tmp_path / "acc.png"
    assert plot_rows(rows, str(path), circuit=circ) == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = figures[-1]
    text = _texts(fig)
    assert "brickwork circuit, 6 qubits, 2-qubit gates, depth 2 (seed 1)" in text
    assert "device cpu" in text and "FP64" in text and "FP32" in text
    assert "error against the double-double reference" in text
    assert "error after circuit and inverse" in text and "vs reference" not in text
    assert "wall time (seconds)" in text and "amp0_real_rel" not in text
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 4 and all(ax.get_yscale() == "log" for ax in panels)
    # the legend sits outside the axes, one entry per method with the shared style
    leg = fig.legends[0]
    assert [t.get_text() for t in leg.get_texts()] == ["native (FP64)", "native32 (FP32)", "int8 (FP64)"]
    for handle, name in zip(leg.legend_handles, ["native", "native32", "int8"]):
        assert handle.get_marker() == METHOD_STYLE[name][1]
    # no empty reference slot among the error panels; the reference's time is a bar of its own
    assert "dd (reference)" not in text and "dd reference" in text


def test_mirror_only_figure_says_what_it_measures(tmp_path, figures):
    circ = brickwork(6, 2, 2, seed=1)
    rows = accuracy_table(circ, ["native32"], device="cpu", reference=None, mirror=True)
    plot_rows(rows, str(tmp_path / "m.png"), circuit=circ)
    text = _texts(figures[-1])
    assert (tmp_path / "m.png").stat().st_size > 1000
    assert "circuit and inverse" in text and "reference" not in text


@pytest.mark.parametrize("test", ["phi", "exp-rand", "cancel"])
def test_gemm_accuracy_figures(tmp_path, figures, test):
    out = run_accuracy_test(test, 32, ["native", "native32", "int8"], m=8, n=8, device="cpu", phis=(0.5, 2.0))
    path = tmp_path / f"{test}.png"
    plot_results(out, str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"
    fig = figures[-1]
    text = _texts(fig)
    assert "device cpu" in text and "double-double" in text
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    if test == "cancel":  # one case: bars, one per method, in the method's colour
        assert len(ax.patches) == 3 and "A (32 x 32)" in text
        colours = [p.get_facecolor()[:3] for p in ax.patches]
        assert len(set(colours)) == 3
    else:
        assert [ln.get_marker() for ln in ax.get_lines()] == [METHOD_STYLE[m][1] for m in ("native", "native32",
                                                                                            "int8")]
    if test == "exp-rand":
        assert "beyond FP16's range" in text
