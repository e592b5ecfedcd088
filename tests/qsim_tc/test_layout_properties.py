"""Property tests (hypothesis) of the lazy layout and of gate-matrix bit reordering."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from circuits import haar_unitary
from circuits.gate import reorder_bits
from qsim_tc.engine.permute import permute_bits
from qsim_tc.layout import Layout

perms = st.integers(2, 9).flatmap(lambda n: st.tuples(st.just(n), st.permutations(range(n)), st.permutations(range(n))))


@settings(max_examples=150, deadline=None)
@given(perms)
def test_permute_bits_keeps_logical_amplitudes(args):
    """A state stored in layout A and permuted to layout B holds the same logical amplitudes."""
    n, old, new = args
    old, new = list(old), list(new)
    a, b = Layout(n), Layout(n)
    a.set(old)
    b.set(new)
    stored = a.logical_indices(np.arange(1 << n))  # the logical index held at each physical slot
    moved = permute_bits(stored, n, new, old, np)
    assert np.array_equal(moved, b.logical_indices(np.arange(1 << n)))
    out = np.empty_like(stored)
    assert np.array_equal(permute_bits(stored, n, new, old, np, out=out), moved)


@settings(max_examples=150, deadline=None)
@given(perms)
def test_index_maps_are_inverse(args):
    n, phys, _ = args
    lay = Layout(n)
    lay.set(list(phys))
    idx = np.arange(1 << n)
    assert np.array_equal(lay.logical_indices(lay.physical_indices(idx)), idx)
    assert all(lay.physical_index(int(i)) == int(lay.physical_indices(i)) for i in idx[:16])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4).flatmap(lambda d: st.tuples(st.just(d), st.permutations(range(d)))), st.integers(0, 2**32 - 1))
def test_reorder_bits_matches_relabelling(args, seed):
    """Reordering a gate's index bits equals listing its qubits in the new order."""
    d, order = args
    rng = np.random.default_rng(seed)
    u = haar_unitary(1 << d, rng)
    v = reorder_bits(u, list(order))
    # basis state with bits x (new order) corresponds to old bits y[order[j]] = x[j]
    for col in range(1 << d):
        old_col = sum(((col >> j) & 1) << order[j] for j in range(d))
        for row in range(1 << d):
            old_row = sum(((row >> j) & 1) << order[j] for j in range(d))
            assert v[row, col] == u[old_row, old_col]


def test_threaded_permutation_of_a_large_state():
    """Above 2^18 amplitudes the copy is split over threads; it must match the plain transpose."""
    import qsim_tc.engine.permute as permute_mod

    n = 19
    assert (1 << n) >= permute_mod._PARALLEL_MIN
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    old = list(range(n))
    for new in (list(rng.permutation(n)), [5, 6, 7, 8] + [q for q in range(n) if q not in (5, 6, 7, 8)]):
        got = permute_bits(x, n, new, old, np, out=np.empty_like(x))
        a, b = Layout(n), Layout(n)
        a.set(old)
        b.set(new)
        # the amplitude of logical index i sits at a.physical_index(i) before, b.physical_index(i) after
        idx = rng.integers(0, 1 << n, 4096)
        assert np.array_equal(got[b.physical_indices(idx)], x[a.physical_indices(idx)])


def test_property_tests_are_derandomized():
    """tests/conftest.py loads a derandomized profile: the examples are the same on every run."""
    for test in (test_permute_bits_keeps_logical_amplitudes, test_index_maps_are_inverse,
                 test_reorder_bits_matches_relabelling):
        assert test.hypothesis.inner_test and test._hypothesis_internal_use_settings.derandomize
    assert settings.default.derandomize
