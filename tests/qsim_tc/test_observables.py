"""Grouped Pauli expectation values (qsim_tc.observables) against Qiskit's Statevector."""

import numpy as np
import pytest

pytest.importorskip("qiskit")

from qiskit.quantum_info import Pauli, SparsePauliOp, Statevector, random_pauli_list, random_statevector  # noqa: E402

import qsim_tc.observables as obs  # noqa: E402
from qsim_tc import StateVector  # noqa: E402


def grouped_op(n, seed):
    """A Hamiltonian with several terms per X mask (as Jordan-Wigner ones have) and phases."""
    rng = np.random.default_rng(seed)
    labels = []
    for _ in range(6):
        x = rng.integers(0, 2, n)
        for _ in range(5):
            z = rng.integers(0, 2, n)
            labels.append("".join("IZXY"[2 * a + b] for a, b in zip(x[::-1], z[::-1])))
    labels += ["I" * n, "Z" * n]
    return SparsePauliOp(labels, rng.normal(size=len(labels)) + 0.1j * rng.normal(size=len(labels)))


@pytest.mark.parametrize("kernel", [True, False], ids=["compiled", "array-code"])
@pytest.mark.parametrize("low_bits,chunk", [(10, 1 << 19), (3, 16), (2, 4)])
@pytest.mark.parametrize("n", [1, 4, 9])
def test_values_match_qiskit(n, low_bits, chunk, kernel, monkeypatch):
    monkeypatch.setattr(obs, "LOW_BITS", low_bits)
    monkeypatch.setitem(obs.CHUNK_ELEMENTS, "cpu", chunk)
    # the compiled pass: columns and blocks of rows as small as one row, or whole states
    monkeypatch.setattr(obs, "CPU_LOW_BITS", low_bits - 2 if low_bits < 10 else 8)
    monkeypatch.setattr(obs, "CPU_BLOCK_ELEMENTS", chunk)
    if not kernel:
        monkeypatch.setattr(obs, "_cpu_group_sums", lambda: None)
    sv = random_statevector(2**n, seed=n)
    st = StateVector.from_array(sv.data, device="cpu")
    pl = random_pauli_list(n, 25, seed=n, phase=True)
    ops = [grouped_op(n, n), SparsePauliOp(pl, np.linspace(-1, 1, 25)), pl[3], pl[7].to_label(),
           {"I" * n: 2.0}, [("X" * n, 0.5), ("Y" * n, -1j)]]
    want = [sv.expectation_value(o if not isinstance(o, (str, dict, list)) else
                                 (Pauli(o) if isinstance(o, str) else SparsePauliOp.from_list(list(dict(o).items()))))
            for o in ops]
    got = obs.expectation_values(st, ops)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert abs(st.expectation_value(ops[0]) - want[0]) < 1e-12


def test_one_compiled_pass_runs_every_x_mask(monkeypatch):
    n = 8
    op = grouped_op(n, 3)
    masks = {int(np.dot(p.x, 1 << np.arange(n))) for p in op.paulis}
    calls = []
    kernel = obs._cpu_group_sums()
    assert kernel is not None  # numba is a dependency

    def counting(a2, rows, block, g_xh, g_xl, *rest):
        calls.append((g_xh << obs.CPU_LOW_BITS) | g_xl)
        return kernel(a2, rows, block, g_xh, g_xl, *rest)

    monkeypatch.setattr(obs, "_cpu_group_sums", lambda: counting)
    monkeypatch.setattr(obs, "CPU_LOW_BITS", 4)
    st = StateVector.from_array(random_statevector(2**n, seed=1).data, device="cpu")
    obs.expectation_values(st, [op])
    # one call for the whole observable; each X mask one group of it, in ascending order
    assert len(calls) == 1
    assert calls[0].tolist() == sorted(masks)
    assert len(op) > 3 * len(masks - {0})


def test_a_complex64_state_and_errors():
    sv = random_statevector(2**5, seed=4)
    st = StateVector.from_array(sv.data.astype(np.complex64), device="cpu")
    op = grouped_op(5, 2)
    assert abs(st.expectation_value(op) - sv.expectation_value(op)) < 1e-5
    with pytest.raises(ValueError, match=r"observable 1: operator acts on 3 qubits"):
        obs.expectation_values(st, ["XXXXX", "XYZ"])
    with pytest.raises(TypeError, match="observable 0 must be a Pauli label"):
        obs.expectation_values(st, [np.eye(2)])
    with pytest.raises(ValueError, match="unknown phase prefix"):
        obs.expectation_values(st, ["--XXXXX"])
    assert obs.expectation_values(st, []).shape == (0,)


@pytest.mark.gpu
def test_gpu_values_match_cpu(cp):
    n = 12
    sv = random_statevector(2**n, seed=6)
    op = grouped_op(n, 5)
    cpu = StateVector.from_array(sv.data, device="cpu")
    gpu = StateVector.from_array(sv.data, device="gpu")
    want = sv.expectation_value(op)
    assert abs(obs.expectation_values(gpu, [op])[0] - want) < 1e-12
    assert abs(gpu.expectation_value(op) - cpu.expectation_value(op)) < 1e-12


@pytest.mark.parametrize("chunk", [1 << 19, 64, 8])
def test_a_block_of_states_gives_each_states_values(chunk, monkeypatch):
    n = 7
    monkeypatch.setattr(obs, "LOW_BITS", 3)
    monkeypatch.setattr(obs, "CPU_LOW_BITS", 3)
    monkeypatch.setattr(obs, "CPU_BLOCK_ELEMENTS", chunk)
    states = np.stack([random_statevector(2**n, seed=s).data for s in range(3)])
    terms, _ = obs.collect([grouped_op(n, 8)], n)
    block = obs.term_values(states, terms, chunk_elements=chunk)
    assert block.shape == (3, len(terms.x))
    for i in range(3):
        np.testing.assert_allclose(block[i], obs.term_values(states[i], terms), atol=1e-13)


class _DeviceArray(np.ndarray):
    """A host array standing in for a cupy one (``get`` copies it back)."""

    def get(self):
        return np.asarray(self).copy()


def _emulated_group_sums(kind, width):
    """observables.cu's kernel, line for line in numpy: the sums of one launch."""

    def launch(grid, block, args):
        flat, n, x, top, z, part_im, k, sums, stride, col0, state0 = args
        assert k <= width and flat.dtype == {"c128": np.complex128, "c64": np.complex64}[kind]
        assert stride == sums.shape[1]
        n, x, top = int(n), int(x), int(top)
        b = np.arange(1 << n)
        if x:
            assert top == x.bit_length() - 1
            b = b[(b >> top) & 1 == 0]  # the partner b ^ x of each b is in the other half
        for state in range(int(state0), int(state0) + grid[1]):
            a = flat[state, b].astype(np.complex128)
            w = np.conj(flat[state, b ^ x]) * a if x else np.abs(a) ** 2 + 0j
            for t in range(int(k)):
                odd = np.array([bin(int(v)).count("1") % 2 for v in b & int(z[t])], dtype=bool)
                v = w.imag if part_im[t] else w.real
                sums[state, int(col0) + t] += np.where(odd, -v, v).sum()

    return launch


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("per_launch", [16, 2])
def test_gpu_pass_host_logic_with_an_emulated_kernel(per_launch, dtype, monkeypatch):
    # the launches' columns, chunks of terms, halving and scales, with the kernel emulated on the host
    import sys
    import types

    fake = types.SimpleNamespace(
        ascontiguousarray=lambda a: np.ascontiguousarray(a).view(_DeviceArray),
        asarray=lambda a: np.asarray(a).view(_DeviceArray),
        zeros=lambda shape, dtype: np.zeros(shape, dtype).view(_DeviceArray))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(obs, "_gpu_kernel", _emulated_group_sums)
    monkeypatch.setattr(obs, "GPU_TERMS", per_launch)
    n = 6
    states = np.stack([random_statevector(2**n, seed=s).data for s in range(2)]).astype(dtype)
    terms, _ = obs.collect([grouped_op(n, 9), SparsePauliOp(["Z" * n, "IIIIZZ", "IIIIII"], [1, 2, 3])], n)
    got = obs._term_values_gpu(states.view(_DeviceArray), terms)
    want = obs.term_values(states, terms)
    tol = 1e-12 if dtype == np.complex128 else 1e-5
    np.testing.assert_allclose(got, want, atol=tol)
    np.testing.assert_allclose(obs._term_values_gpu(states[1].view(_DeviceArray), terms), want[1], atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_gpu_pass_matches_the_array_code_and_the_cpu(cp, dtype, monkeypatch):
    monkeypatch.setattr(obs, "GPU_KERNEL", True)
    n = 11
    states = np.stack([random_statevector(2**n, seed=s).data for s in range(3)]).astype(dtype)
    terms, _ = obs.collect([grouped_op(n, 10), SparsePauliOp(["Z" * n, "X" * n, "Y" * n])], n)
    dev = cp.asarray(states)
    tol = 1e-12 if dtype == "complex128" else 1e-5
    kernel = obs.term_values(dev, terms)
    np.testing.assert_allclose(kernel, obs.term_values(dev, terms, compiled=False), atol=tol)
    np.testing.assert_allclose(kernel, obs.term_values(states, terms), atol=tol)
    monkeypatch.setattr(obs, "GPU_TERMS", 2)  # two terms a launch, through the four-term kernel
    np.testing.assert_allclose(obs.term_values(dev[0], terms), kernel[0], atol=tol)
