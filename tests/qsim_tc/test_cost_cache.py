"""The cost-table cache read as outside data (qsim_tc.plan.cache): any invalid file is reported
once, naming it, and ignored; calibrate writes a new one over it; the write follows no symlink."""

import json
import os

import pytest

import gemm
from qsim_tc import calibrate as cal
from qsim_tc.cli import main
from qsim_tc.plan import cache as cost_cache
from qsim_tc.plan.costs import CostTable, CostTableError, shipped_table


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QSIM_TC_CACHE", str(tmp_path))
    cal.forget()
    yield tmp_path
    cal.forget()


def _key():
    return cal.device_key(gemm.resolve_device("cpu"))


def _valid() -> dict:
    """The shipped CPU table as this device's cache file would hold it."""
    raw = json.loads(shipped_table("cpu").to_json())
    raw["key"] = _key()
    return raw


def _set(path_in_raw, value):
    def mutate(raw):
        *head, last = path_in_raw
        node = raw
        for k in head:
            node = node[k]
        node[last] = value
        return raw
    return mutate


def _drop(path_in_raw):
    def mutate(raw):
        *head, last = path_in_raw
        node = raw
        for k in head:
            node = node[k]
        del node[last]
        return raw
    return mutate


# one wrong field each: types, non-finite, negative and absurd values, unknown and missing fields
BAD_FIELDS = {
    "n_qubits as text": _set(("rows", 0, "n_qubits"), "22"),
    "n_qubits as bool": _set(("rows", 0, "n_qubits"), True),
    "n_qubits absurd": _set(("rows", 0, "n_qubits"), 10**6),
    "overhead as text": _set(("rows", 0, "overhead_ms"), "0.1"),
    "overhead negative": _set(("rows", 0, "overhead_ms"), -1.0),
    "permute NaN": _set(("rows", 0, "permute_ms"), float("nan")),
    "ms value text": _set(("rows", 0, "ms", "1"), "fast"),
    "ms value negative": _set(("rows", 0, "ms", "1"), -3.0),
    "ms value absurd": _set(("rows", 0, "ms", "1"), 1e300),
    "ms value infinite": _set(("rows", 0, "ms", "1"), float("inf")),
    "ms width not a number": _set(("rows", 0, "ms", "one"), 1.0),
    "ms width absurd": _set(("rows", 0, "ms", "999"), 1.0),
    "ms a list": _set(("rows", 0, "ms"), [1.0, 2.0]),
    "measured text": _set(("rows", 0, "measured"), ["1"]),
    "measured outside ms": _set(("rows", 0, "measured"), [40]),
    "kernel_max_d float": _set(("rows", 0, "kernel_max_d"), 2.5),
    "placement unknown": _set(("rows", 0, "placement"), "sideways"),
    "placement a list": _set(("rows", 0, "placement"), ["any"]),
    "device unknown": _set(("rows", 0, "device"), "tpu"),
    "dtype unknown": _set(("rows", 0, "dtype"), "complex256"),
    "backend a number": _set(("rows", 0, "backend"), 5),
    "backend unknown": _set(("rows", 0, "backend"), "warp-drive"),
    "machine a number": _set(("rows", 0, "machine"), 7),
    "unknown row field": _set(("rows", 0, "speed"), 1),
    "missing ms": _drop(("rows", 0, "ms")),
    "row a string": _set(("rows", 0), "native"),
    "elapsed text": _set(("elapsed_s",), "x"),
    "elapsed negative": _set(("elapsed_s",), -5),
    "format true": _set(("format",), True),
    "rows an object": _set(("rows",), {"0": {}}),
    "key a list": _set(("key",), ["cpu"]),
    "unknown top field": _set(("extra",), 1),
}


def _write(cache, text: str):
    path = cal.cache_path(_key())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
def test_an_invalid_field_is_reported_once_naming_the_file_and_ignored(cache, case):
    path = _write(cache, json.dumps(BAD_FIELDS[case](_valid())))
    with pytest.raises(CostTableError, match=f"cost table {path}"):
        cal.load_cached(_key())
    msgs = []
    for _ in range(3):
        table = cal.table_for("cpu", "double", message=msgs.append)
        assert table.origin == "shipped:cpu"
    assert len(msgs) == 1 and str(path) in msgs[0] and "using a shipped table" in msgs[0]


UNREADABLE = {"empty": "", "binary": "\x00\xff binary", "a list": "[1, 2]", "null": "null", "deep": "[" * 100000,
              "infinite format": '{"format": 1e999}', "huge int": '{"format": 1, "rows": [' + "1" * 5000 + "]}"}


@pytest.mark.parametrize("text", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_unreadable_text_is_reported_not_raised(cache, text):
    path = _write(cache, text)
    msgs = []
    assert cal.table_for("cpu", "double", message=msgs.append).origin == "shipped:cpu"
    assert len(msgs) == 1 and str(path) in msgs[0]


def test_a_folder_or_a_huge_file_in_its_place(cache):
    path = cal.cache_path(_key())
    path.mkdir(parents=True)
    with pytest.raises(CostTableError, match="is not a regular file"):
        cal.load_cached(_key())
    path.rmdir()
    with open(path, "wb") as f:
        f.truncate(cost_cache.MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(CostTableError, match="more than a table takes"):
        cal.load_cached(_key())


def test_the_valid_table_still_reads(cache):
    _write(cache, json.dumps(_valid()))
    table = cal.load_cached(_key())
    assert table.rows == shipped_table("cpu").rows
    assert cal.table_for("cpu", "double").origin.startswith("cache:")


def test_without_a_message_callback_the_report_is_a_warning_once(cache):
    path = _write(cache, json.dumps(BAD_FIELDS["elapsed text"](_valid())))
    with pytest.warns(cost_cache.CostTableWarning, match=str(path)):
        cal.table_for("cpu", "double")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second report would raise here
        cal.table_for("cpu", "double")


def test_cli_runs_on_a_bad_cache_and_calibrate_replaces_it(cache, tmp_path, capsys):
    path = _write(cache, json.dumps(BAD_FIELDS["n_qubits as text"](_valid())))
    assert main(["info", "--device", "cpu"]) == 0
    assert f"cost table {path} is unreadable" in capsys.readouterr().out
    cal.forget()  # as in a new process: reported again, once
    assert main(["brickwork", "--qubits", "6", "--depth", "2", "--device", "cpu", "--fuse", "auto"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"cost table {path}") == 1
    rc = main(["calibrate", "--device", "cpu", "--precision", "double", "--methods", "native", "--qubits", "8",
               "--max-gate-qubits", "2", "--part", "gates", "--placements", "bottom", "--budget", "3", "--repeats", "1"])
    assert rc == 0
    assert "replaced by this calibration" in capsys.readouterr().out
    table = CostTable.from_json(path.read_text())
    assert table.key == _key() and table.methods() == ["native"]


def test_store_follows_no_symlink_and_leaves_no_temporary_file(cache, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path = cal.cache_path(_key())
    path.parent.mkdir(parents=True, exist_ok=True)
    # links at the names a predictable temporary file would take, and at the cache file itself
    os.symlink(victim, path.with_suffix(f".tmp{os.getpid()}"))
    os.symlink(victim, path)
    stored = cal.store(CostTable(_key(), shipped_table("cpu").rows))
    assert victim.read_text() == "keep me"
    assert not stored.is_symlink() and cal.load_cached(_key()).rows == shipped_table("cpu").rows
    leftovers = [p.name for p in path.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []
