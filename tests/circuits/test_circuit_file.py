"""Circuit.load trusts nothing in the file: declared sizes are bounded before any array is read,
every field is checked, and a loaded circuit gets the checks a built one gets."""

import io
import tracemalloc
import zipfile

import numpy as np
import pytest

from circuits import Circuit, CircuitError, Gate, brickwork


def _good_fields(n_qubits=2):
    """The fields Circuit.save writes for a one-gate circuit (an H on qubit 0)."""
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    return {"n_qubits": np.int64(n_qubits), "n_gates": np.int64(1), "names": np.array(["h"]),
            "global_phase": np.float64(0.25), "measured": np.array([[0, 0]], dtype=np.int64),
            "n_clbits": np.int64(1), "circuit_name": np.array("c"),
            "m0": h.astype(np.complex128), "q0": np.array([0], dtype=np.int64)}


def _write(path, fields):
    """An .npz archive of ``fields`` (name -> array, or name -> raw .npy bytes)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, value in fields.items():
            if isinstance(value, bytes):
                z.writestr(name + ".npy", value)
            else:
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.asarray(value), allow_pickle=False)
                z.writestr(name + ".npy", buf.getvalue())
    return path


def _header(shape, dtype):
    """The bytes of an .npy header declaring ``shape`` and ``dtype`` (no data follows)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                               "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_fields_written_by_hand_load_as_saved(tmp_path):
    c = Circuit.load(_write(tmp_path / "c.npz", _good_fields()))
    assert (c.n_qubits, len(c), c.global_phase, c.measured, c.n_clbits, c.name) == (2, 1, 0.25, [(0, 0)], 1, "c")
    assert c.gates[0].qubits == (0,) and c.gates[0].name == "h"


def test_save_load_roundtrip_keeps_everything(tmp_path):
    c = brickwork(5, 2, 2, seed=3)
    c.global_phase = -1.5
    path = tmp_path / "b.npz"
    c.save(path)
    d = Circuit.load(path)
    assert d.global_phase == -1.5 and d.name == c.name and len(d) == len(c)
    assert all(np.array_equal(a.matrix, b.matrix) and a.qubits == b.qubits for a, b in zip(c, d))


def test_non_unitary_matrix_is_refused_unless_asked(tmp_path):
    c = Circuit(1, [Gate(5 * np.eye(2), [0], "five", check_unitary=False)])
    c.save(tmp_path / "five.npz")
    with pytest.raises(CircuitError, match=r"five\.npz: field 'm0'.*not unitary"):
        Circuit.load(tmp_path / "five.npz")
    assert np.array_equal(Circuit.load(tmp_path / "five.npz", check_unitary=False).gates[0].matrix, 5 * np.eye(2))


@pytest.mark.parametrize("field,value,match", [
    ("q0", np.array([0.7]), r"field 'q0' holds float64; expected integers"),
    ("q0", np.array([5]), r"field 'q0'.*out of range"),
    ("q0", np.array([-1]), r"field 'q0'.*out of range"),
    ("measured", np.array([[0.0, 0.0]]), r"field 'measured' holds float64; expected integers"),
    ("measured", np.array([[7, 0]]), r"field 'measured'.*measured qubit 7 is outside"),
    ("measured", np.array([0, 0]), r"field 'measured' has shape \(2,\)"),
    ("global_phase", np.float64(np.inf), r"field 'global_phase'.*finite"),
    ("global_phase", np.float64(np.nan), r"field 'global_phase'.*finite"),
    ("global_phase", np.array("x"), r"field 'global_phase' holds <U1; expected a real number"),
    ("n_qubits", np.int64(0), r"field 'n_qubits': must be >= 1"),
    ("n_qubits", np.float64(2.0), r"field 'n_qubits' holds float64"),
    ("n_gates", np.int64(3), r"field 'q1' is missing \(n_gates = 3\)"),
    ("n_gates", np.int64(0), r"field 'n_gates' is 0, but the file holds 2 gate field"),
    ("n_gates", np.int64(-1), r"field 'n_gates': must be >= 0"),
    ("n_clbits", np.int64(-2), r"field 'n_clbits': must be >= 0"),
    ("names", np.array(["a", "b"]), r"field 'names' has shape \(2,\); expected \(1,\)"),
    ("m0", np.eye(4), r"field 'm0' has shape \(4, 4\); a gate on 1 qubit\(s\) needs \(2, 2\)"),
    ("m0", np.array([[np.nan, 0], [0, 1]]), r"field 'm0'.*NaN or Inf"),
    ("m0", np.array([["a", "b"], ["c", "d"]]), r"field 'm0' holds <U1; expected numbers"),
])
def test_malformed_field_is_named(tmp_path, field, value, match):
    fields = _good_fields()
    fields[field] = value
    path = _write(tmp_path / "bad.npz", fields)
    with pytest.raises(CircuitError, match=r"bad\.npz: " + match):
        Circuit.load(path)


@pytest.mark.parametrize("drop", ["n_gates", "names", "circuit_name", "q0"])
def test_missing_field_is_named(tmp_path, drop):
    fields = _good_fields()
    del fields[drop]
    with pytest.raises(CircuitError, match=rf"field '{drop}' is missing"):
        Circuit.load(_write(tmp_path / "bad.npz", fields))


def test_unexpected_member_and_non_archive(tmp_path):
    with pytest.raises(CircuitError, match=r"unexpected member 'evil\.npy'"):
        Circuit.load(_write(tmp_path / "x.npz", {**_good_fields(), "evil": np.zeros(1)}))
    (tmp_path / "text.npz").write_text("OPENQASM 2.0;")
    with pytest.raises(CircuitError, match=r"text\.npz: not a circuit file"):
        Circuit.load(tmp_path / "text.npz")
    with pytest.raises(FileNotFoundError):
        Circuit.load(tmp_path / "absent.npz")


def test_truncated_file_and_truncated_array(tmp_path):
    good = _write(tmp_path / "good.npz", _good_fields()).read_bytes()
    (tmp_path / "cut.npz").write_bytes(good[: len(good) // 2])
    with pytest.raises(CircuitError, match=r"cut\.npz"):
        Circuit.load(tmp_path / "cut.npz")
    fields = _good_fields()
    fields["m0"] = _header((2, 2), np.complex128) + b"\0" * 20  # declares 64 bytes, holds 20
    with pytest.raises(CircuitError, match=r"short\.npz: field 'm0' cannot be read"):
        Circuit.load(_write(tmp_path / "short.npz", fields))


def test_declared_sizes_are_bounded_before_reading(tmp_path):
    # a 14-qubit gate declares 4 GiB and holds nothing: refused from its header alone
    fields = _good_fields(14)
    fields["q0"] = np.arange(14)
    fields["m0"] = _header((1 << 14, 1 << 14), np.complex128)
    with pytest.raises(CircuitError, match=r"huge\.npz: its fields declare more than max_bytes"):
        Circuit.load(_write(tmp_path / "huge.npz", fields))
    # an absurd n_gates is compared with the fields present, not looped over
    fields = _good_fields()
    fields["n_gates"] = np.int64(1 << 62)
    with pytest.raises(CircuitError, match=r"field 'q1' is missing \(n_gates = 4611686018427387904\)"):
        Circuit.load(_write(tmp_path / "many.npz", fields))
    # a name declared 1 GiB long
    fields = _good_fields()
    fields["circuit_name"] = _header((), np.dtype("<U268435456"))
    with pytest.raises(CircuitError, match=r"name\.npz: its fields declare 1,073,741,"):
        Circuit.load(_write(tmp_path / "name.npz", fields))


def test_compressed_zeros_do_not_grow_memory(tmp_path):
    """A 64 MiB matrix of compressed zeros (a 100 kB file) with max_bytes below it: nothing read."""
    path = tmp_path / "bomb.npz"
    fields = _good_fields(11)
    fields["q0"] = np.arange(11)
    del fields["m0"]
    _write(path, fields)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as z, z.open("m0.npy", "w") as f:
        f.write(_header((1 << 11, 1 << 11), np.complex128))
        zeros = bytes(1 << 20)
        for _ in range(64):
            f.write(zeros)
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(CircuitError, match="max_bytes=16,777,216"):
            Circuit.load(path, max_bytes=16 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_load_argument_types(tmp_path):
    path = _write(tmp_path / "c.npz", _good_fields())
    with pytest.raises(TypeError, match="max_bytes must be an int"):
        Circuit.load(path, max_bytes=1.5)
    with pytest.raises(ValueError, match="max_bytes must be >= 1"):
        Circuit.load(path, max_bytes=0)
    with pytest.raises(TypeError, match="check_unitary must be True or False"):
        Circuit.load(path, check_unitary="no")


def test_damaged_files_raise_circuit_error_only(tmp_path):
    """Bytes flipped, cut, inserted or deleted anywhere (zip headers, .npy headers, compressed
    data): every load ends in a checked Circuit or a CircuitError naming the file."""
    c = brickwork(4, 2, 2, seed=1)
    c.measured = [(0, 0)]
    c.save(tmp_path / "good.npz")
    good = (tmp_path / "good.npz").read_bytes()
    rng = np.random.default_rng(7)
    path = tmp_path / "damaged.npz"
    for _ in range(300):
        b = bytearray(good)
        i = int(rng.integers(len(b)))
        kind = int(rng.integers(4))
        if kind == 0:
            b[i] = int(rng.integers(256))
        elif kind == 1:
            del b[i:]
        elif kind == 2:
            b[i:i] = rng.integers(0, 256, int(rng.integers(1, 16))).astype(np.uint8).tobytes()
        else:
            del b[i:i + int(rng.integers(1, 16))]
        path.write_bytes(bytes(b))
        try:
            loaded = Circuit.load(path)
        except CircuitError as exc:
            assert str(exc).startswith(str(path))
        else:
            assert all(np.allclose(g.matrix.conj().T @ g.matrix, np.eye(len(g.matrix)), atol=1e-10) for g in loaded)
