"""The CPU stage executor's fusion costs measured per host (:mod:`qsim_tc.stages.cpu_fuse_measure`,
:mod:`qsim_tc.stages.cpu_fuse_calibration`):
the measurement, its cache file (trusted only when whole and for this host) and what the executor,
``qsim-tc calibrate --device cpu`` and ``qsim-tc info`` do with it."""

import json
import warnings

import numpy as np
import pytest

from qsim_tc.cli import main
from qsim_tc.stages import cpu
from qsim_tc.stages import cpu_fuse_calibration as fc
from qsim_tc.stages import cpu_fuse_measure as fm


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QSIM_TC_CACHE", str(tmp_path))
    fc._REPORTED.clear()
    cpu.forget_fuse_costs()
    yield tmp_path
    cpu.forget_fuse_costs()


def _small(**kw):
    return fm.measure(n_qubits=14, gates=6, base=2, repeats=1, **kw)


def test_a_measured_table_prices_each_width_and_rises(cache):
    cal = _small()
    assert set(cal.costs) == {8, 16} and cal.n_qubits == 14
    for item, row in cal.costs.items():
        assert len(row) == 4 and all(v > 0 for v in row) and all(a <= b for a, b in zip(row, row[1:])), row
        assert set(cal.samples[item]) == {1, 2, 3, 4}
    assert cal.key == fc.host_key() and cal.key["kernels"]


def test_the_executor_fuses_by_the_stored_table_from_its_next_run(cache):
    cal = fc.FuseCalibration(fc.host_key(), {8: (1.0, 1.5, 3.0, 7.0), 16: (2.0, 3.0, 6.0, 14.0)}, 24)
    path = fc.store(cal)
    assert path.parent == cache and path.name.startswith("fusion-cpu-")
    assert cpu.host_fuse_costs() == cal.costs and cpu.FUSE_COST_SOURCE == "calibrated"
    cpu.FUSE_COST[8] = (9.0, 9.5, 9.7, 9.9)  # a change after the read (an A/B run) stays
    assert cpu.host_fuse_costs()[8] == (9.0, 9.5, 9.7, 9.9)
    cpu.forget_fuse_costs()
    assert cpu.FUSE_COST == cpu.SHIPPED_FUSE_COST and cpu.FUSE_COST_SOURCE != "calibrated"


def test_the_run_is_the_same_state_whatever_table_fuses_it(cache):
    """Fusion by a calibrated table changes the ops, not the result (to complex128 rounding)."""
    from circuits import brickwork
    from qsim_tc.stages.plan import plan_stages

    c = brickwork(12, 2, 8, seed=3)
    psi = np.random.default_rng(1).standard_normal(1 << 12).astype(np.complex128)
    plan = plan_stages(c, 8)
    before = cpu.run_stages(psi.copy(), plan)
    assert cpu.FUSE_COST_SOURCE != "calibrated"
    fc.store(fc.FuseCalibration(fc.host_key(), {8: (1.0, 1.0, 1.0, 1.0), 16: (1.0, 1.0, 1.0, 1.0)}, 24))
    cpu.forget_fuse_costs()  # as a new process: the next run reads the cache
    after = cpu.run_stages(psi.copy(), plan)
    assert cpu.FUSE_COST_SOURCE == "calibrated" and cpu.FUSE_COST[16] == (1.0, 1.0, 1.0, 1.0)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-13)


@pytest.mark.parametrize("damage", ["not json", "other host", "one size", "falling", "negative", "format"])
def test_a_bad_file_is_reported_once_and_the_shipped_table_serves(cache, damage):
    good = json.loads(fc.FuseCalibration(fc.host_key(), {8: (1.0, 2.0, 3.0, 4.0), 16: (2.0, 3.0, 4.0, 5.0)},
                                         24).to_json())
    if damage == "other host":
        good["key"]["cpu"] = "another"
    elif damage == "one size":
        del good["costs"]["16"]
    elif damage == "falling":
        good["costs"]["8"] = [4.0, 3.0, 2.0, 1.0]
    elif damage == "negative":
        good["costs"]["16"][0] = -1.0
    elif damage == "format":
        good["format"] = 99
    path = fc.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{ cut sh" if damage == "not json" else json.dumps(good))
    with pytest.warns(fc.FuseCostWarning, match="is not used"):
        assert cpu.host_fuse_costs() == cpu.SHIPPED_FUSE_COST
    cpu.forget_fuse_costs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second read in one process says nothing
        assert cpu.host_fuse_costs() == cpu.SHIPPED_FUSE_COST
    assert cpu.FUSE_COST_SOURCE != "calibrated"


def test_bad_arguments_are_named(cache):
    with pytest.raises(ValueError, match="gates must exceed base"):
        fm.measure(gates=4, base=4)
    with pytest.raises(ValueError, match="repeats"):
        fm.measure(repeats=0)
    with pytest.raises(ValueError, match="itemsizes"):
        fm.measure(itemsizes=(4,))
    with pytest.raises(ValueError, match="both|sizes 8 and 16"):
        fc.store(fc.FuseCalibration(fc.host_key(), {8: (1.0, 2.0, 3.0, 4.0)}, 24))
    assert not list(cache.iterdir())


def test_cli_calibrates_the_stages_and_info_says_so(cache, capsys, monkeypatch, tmp_path):
    real = fm.measure
    monkeypatch.setattr(fm, "measure", lambda seed=0, progress=None: real(n_qubits=14, gates=6, base=2, repeats=1,
                                                                          seed=seed, progress=progress))
    assert main(["calibrate", "--device", "cpu", "--part", "stages", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "stage fusion costs measured" in out and "stored " in out and "complex64:" in out
    assert json.loads((tmp_path / "c.json").read_text())["stage_fusion"]["costs"].keys() == {"8", "16"}
    assert fc.load() is not None
    assert main(["info", "--device", "cpu"]) == 0
    assert "fusion costs calibrated on this host" in capsys.readouterr().out
