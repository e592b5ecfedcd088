"""Zero-copy export of a StateVector (DLPack, CUDA array interface) and the early to_numpy check."""

import numpy as np
import pytest

import qsim_tc.memory as memory
from qsim_tc import InsufficientMemoryError, StateVector
from qsim_tc.layout import Layout


def permuted_state(n=4, seed=0):
    """A state stored with a pending qubit permutation, and its amplitudes in logical order."""
    rng = np.random.default_rng(seed)
    logical = rng.normal(size=1 << n) + 1j * rng.normal(size=1 << n)
    st = StateVector(n, device="cpu")
    layout = Layout(n)
    layout.set([2, 0, 3, 1][:n])
    physical = np.empty_like(logical)
    physical[layout.physical_indices(np.arange(1 << n))] = logical
    st._data = physical
    st._layout = layout
    return st, logical


def test_dlpack_gives_logical_order_without_a_copy():
    st, logical = permuted_state()
    assert not st._layout.is_identity
    view = np.from_dlpack(st)
    np.testing.assert_array_equal(view, logical)  # the pending permutation was applied in place
    assert st._layout.is_identity
    assert np.shares_memory(view, st.data())
    view[3] = 0.5  # the same memory: the state sees the write
    assert st.amplitude(3) == 0.5
    assert st.__dlpack_device__() == (1, 0)


def test_cuda_array_interface_only_on_gpu():
    st = StateVector(2, device="cpu")
    assert not hasattr(st, "__cuda_array_interface__")


def test_to_numpy_fails_early_naming_the_zero_copy_route(monkeypatch):
    import qsim_tc.state as state_mod

    st = StateVector(10, device="cpu")
    monkeypatch.setattr(state_mod, "TO_NUMPY_CHECKED_BYTES", 0)  # as for a state of 64 MiB or more
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    with pytest.raises(InsufficientMemoryError, match=r"to_numpy\(\) of a 10-qubit.*numpy.from_dlpack\(state\)"):
        st.to_numpy()
    monkeypatch.undo()
    assert st.to_numpy()[0] == 1


@pytest.mark.gpu
def test_gpu_export(cp):
    st = StateVector(3, device="gpu")
    st.apply(np.array([[0, 1], [1, 0]]), [1])
    view = cp.from_dlpack(st)
    assert int(cp.argmax(cp.abs(view))) == 2
    assert st.__dlpack_device__()[0] == 2
    cai = st.__cuda_array_interface__
    assert cai["shape"] == (8,) and cai["data"][0] == view.data.ptr
