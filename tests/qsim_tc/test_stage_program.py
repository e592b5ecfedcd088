"""The GPU stage kernel's program: its translation of a stage plan, checked through the numpy
interpreter (every machine), and the kernel itself against the interpreter and the gate-at-a-time
path (GPU)."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stages import check_plan, gate_at_a_time, random_circuit, random_pairs, random_state

from circuits import Circuit, Gate, brickwork
from qsim_tc.engine.permute import permute_bits
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.program import (
    MAX_DENSE,
    OP_DENSE,
    OP_PHASE,
    W_COUNT,
    W_K,
    W_PCOUNT,
    W_TYPE,
    build_program,
    diagonal_terms,
    emulate,
)


def device_program(plan, keep_low: int, dtype, **options):
    """``plan``'s program as the GPU stage path builds it for ``dtype`` on this GPU (amplitude
    size, and tensor-core ops with their widening and pairs where the kernel has them)."""
    from qsim_tc.stages.kernel import tensor_core_ops

    return build_program(plan, keep_low, itemsize=np.dtype(dtype).itemsize, widen=tensor_core_ops(dtype), **options)


def to_logical(data: np.ndarray, phys) -> np.ndarray:
    n = len(phys)
    return permute_bits(data, n, list(range(n)), list(phys), np)


def run_emulated(c: Circuit, psi: np.ndarray, local: int, keep_low: int, fuse_qubits: int = 0,
                 rotate_low: bool = False) -> np.ndarray:
    plan = plan_stages(c, local, keep_low=keep_low, rotate_low=rotate_low)
    check_plan(c, plan)
    prog = build_program(plan, keep_low, fuse_qubits=fuse_qubits)
    out = emulate(prog, psi.copy())
    return to_logical(out, prog.final_phys) * np.exp(1j * prog.global_phase)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(n=st.integers(1, 9), n_gates=st.integers(0, 40), seed=st.integers(0, 10**6), local=st.integers(1, 9),
       keep_low=st.integers(0, 3), fuse_qubits=st.sampled_from([0, 2, 3, 4]), rotate_low=st.booleans())
def test_program_equals_gate_at_a_time(n, n_gates, seed, local, keep_low, fuse_qubits, rotate_low):
    local = min(local, n)
    keep_low = min(keep_low, local - 1)
    c = random_circuit(n, n_gates, seed, max_width=min(local - keep_low, MAX_DENSE))
    psi = random_state(n, seed)
    np.testing.assert_allclose(run_emulated(c, psi, local, keep_low, fuse_qubits, rotate_low),
                               gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_rotated_low_bits_are_exchanged_by_the_store_before():
    """With rotate_low, the kept low slots take new qubits at stage boundaries: the previous
    stage's store exchanges them (slot_bits keep 0..C-1 at storage bits 0..C-1), and the program
    still equals the gate-at-a-time path."""
    c = random_circuit(12, 300, seed=5, max_width=3)
    plan = plan_stages(c, 7, keep_low=3, rotate_low=True)
    prog = build_program(plan, 3, fuse_qubits=3)
    moved = [s.store_swaps for s in prog.stages if s.store_swaps]
    assert moved and not prog.stages[-1].store_swaps
    for s in prog.stages:
        assert list(s.slot_bits[:3]) == [0, 1, 2]
        assert all(p < 3 <= q < 7 for p, q in s.store_swaps)
    psi = random_state(12, 5)
    np.testing.assert_allclose(to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase),
                               gate_at_a_time(c, psi), rtol=0, atol=1e-13)
    # the exchange belongs to the store before: a plan that starts with one is refused
    k = next(i for i, s in enumerate(plan.stages) if s.low_exchanges(7))
    bad = replace(plan, stages=plan.stages[k:])
    with pytest.raises(ValueError, match="exchanges local slots"):
        build_program(bad, 3)


def test_fusion_within_a_stage_halves_the_dense_ops_of_a_brickwork():
    from circuits import brickwork

    c = brickwork(16, 2, 12, seed=1)
    plan = plan_stages(c, 10, keep_low=3)
    plain = build_program(plan, 3, pairs=False)  # ops one a record
    fused = build_program(plan, 3, fuse_qubits=3, pairs=False)
    assert fused.n_ops <= 0.6 * plain.n_ops
    psi = random_state(16, 1)
    np.testing.assert_allclose(to_logical(emulate(fused, psi.copy()), fused.final_phys),
                               to_logical(emulate(plain, psi.copy()), plain.final_phys), rtol=0, atol=1e-13)


def test_kept_low_bits_stay_at_their_storage_bits():
    c = random_circuit(12, 200, seed=3, max_width=3)
    prog = build_program(plan_stages(c, 7, keep_low=3), 3)
    assert len(prog.stages) > 1
    for s in prog.stages:
        assert list(s.slot_bits[:3]) == [0, 1, 2]
        assert sorted(s.slot_bits) == list(range(12))


def test_controlled_phase_is_one_term_and_phases_are_exact_turns():
    def near(terms, want):  # turns agree to the float64 resolution of the angles (2^-52 turn)
        assert terms.keys() == want.keys()
        assert all(min((terms[m] - want[m]) % 2**64, (want[m] - terms[m]) % 2**64) < 2**13 for m in want)

    near(diagonal_terms(np.array([1, 1, 1, np.exp(1j * np.pi / 8)]), (3, 9)), {(1 << 3) | (1 << 9): 1 << 60})
    rz = np.array([np.exp(-0.25j * np.pi), np.exp(0.25j * np.pi)])  # rz(pi/2): -1/8 turn, then +1/4 on bit 5
    near(diagonal_terms(rz, (5,)), {0: 2**64 - 2**61, 1 << 5: 1 << 62})


def test_a_qft_run_of_controlled_phases_is_one_group():
    """After a Hadamard, the QFT's controlled phases all share its qubit: one group (one table
    lookup pair per amplitude), not one term each."""
    pytest.importorskip("qiskit")
    from benchmarks.bench.qiskit_circuits import qft_circuit

    c, _ = qft_circuit(12)
    prog = build_program(plan_stages(c, 12), 0)
    counts = [int(r[W_COUNT]) if r[W_TYPE] == OP_PHASE else int(r[W_PCOUNT])
              for s in prog.stages for r in s.ops if r[W_TYPE] == OP_PHASE or r[W_PCOUNT]]
    assert len(counts) >= 10 and max(counts) == 1
    # each run precedes the next Hadamard: it rides on it as a pre-phase, no pass of its own
    assert sum(r[W_TYPE] == OP_DENSE for s in prog.stages for r in s.ops) >= len(counts) - 1


def test_local_slots_are_renamed_against_bank_conflicts():
    """A tensor-core program renames each stage's local slots above the kept low bits where that
    spares its pairs bank conflicts (bank_relabel): fewer conflicts than the plan's own names, the
    same result, and the store's exchanges follow the renaming."""
    from qsim_tc.stages import program as sp

    c = random_pairs(16, 16, seed=5)
    plan = plan_stages(c, 12, keep_low=3, rotate_low=True)
    check_plan(c, plan)
    renamed = build_program(plan, 3, fuse_qubits=3, block_qubits=3)
    plain = build_program(plan, 3, fuse_qubits=3, block_qubits=3, relabel=False)

    def conflicts(prog):
        return sum(sp.bank_conflicts(s.ops) for s in prog.stages)

    assert conflicts(renamed) < conflicts(plain)
    assert any(not np.array_equal(a.slot_bits, b.slot_bits) for a, b in zip(renamed.stages, plain.stages))
    assert any(s.store_swaps for s in renamed.stages)
    psi = random_state(16, 5)
    want = gate_at_a_time(c, psi)
    for prog in (renamed, plain):
        out = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)


def test_bank_relabel_keeps_an_exchange_partners_residue():
    """Two ops whose targets each share one residue conflict in a pair; renamed, they do not, and
    the slot a low bit exchanges with keeps the low bit's residue. Nothing to spare: None."""
    from qsim_tc.stages.relabel import _pair_cost, bank_relabel

    groups = [[([3, 6, 9], False), ([4, 7, 10], False)]]
    assert _pair_cost((0, 0, 0), (1, 1, 1)) > 0
    sigma = bank_relabel(groups, 12, 3, exchanges=[(0, 3), (2, 11)])
    assert sigma is not None and sorted(sigma) == list(range(12)) and sigma[:3] == [0, 1, 2]
    assert sigma[3] % 3 == 0 and sigma[11] % 3 == 2
    residues = [tuple(sorted(sigma[p] % 3 for p in slots)) for slots in ((3, 6, 9), (4, 7, 10))]
    assert _pair_cost(*residues) == 0
    assert bank_relabel([[([3, 4, 5], False), ([6, 7, 8], False)]], 12, 3) is None
    assert bank_relabel([[([3, 4], True)]], 12, 3) is None


def test_the_global_phase_folds_into_an_uncontrolled_dense_op():
    """A program with a dense op without controls takes the circuit's global phase into that op's
    matrix (no pass of its own: StageProgram.global_phase 0); one of phases and controlled ops
    alone keeps it to apply after the last stage. Both equal the gate-at-a-time result."""
    dense = random_circuit(8, 40, 21, max_width=3)
    dense.global_phase = 1.25
    only = Circuit(8)
    only.append(Gate(np.diag(np.exp(1j * np.array([0.0, 0.3, 0.7, 1.1]))), (2, 5), "d2"))
    only.append(Gate(np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], complex), (1, 6), "cx"))
    only.global_phase = -0.5
    for c, residual in ((dense, 0.0), (only, -0.5)):
        plan = plan_stages(c, 6, keep_low=2)
        prog = build_program(plan, 2, fuse_qubits=3)
        assert prog.global_phase == residual
        psi = random_state(8, 21)
        out = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
        np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-12)


def test_non_unit_diagonal_is_refused():
    with pytest.raises(ValueError, match="modulus"):
        diagonal_terms(np.array([1.0, 0.5]), (0,))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize(("n", "local", "keep_low", "n_gates", "seed"),
                         [(1, 1, 0, 5, 0), (4, 4, 2, 30, 1), (6, 3, 1, 60, 2), (9, 6, 0, 80, 3), (10, 7, 3, 80, 4),
                          (12, 8, 4, 120, 5), (14, 10, 2, 150, 6), (16, 12, 5, 150, 7), (16, 11, 1, 150, 8),
                          (18, 13, 3, 100, 9)])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("rotate", [False, True])
def test_kernel_equals_interpreter_and_gate_at_a_time(cp, dtype, n, local, keep_low, n_gates, seed, fused, rotate):
    from qsim_tc.stages.kernel import max_dense, run_program

    width = min(local - keep_low, max_dense(dtype))
    c = random_circuit(n, n_gates, seed, max_width=width)
    psi = random_state(n, seed, dtype)
    plan = plan_stages(c, local, keep_low=keep_low, rotate_low=rotate)
    prog = device_program(plan, keep_low, dtype, fuse_qubits=width if fused else 0)
    data = cp.asarray(psi)
    run_program(data, prog)
    got = data.get()
    want = emulate(prog, psi.astype(np.complex128))
    atol = 1e-13 if dtype == np.complex128 else 2e-6
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    logical = to_logical(got, prog.final_phys) * np.exp(1j * prog.global_phase)
    np.testing.assert_allclose(logical, gate_at_a_time(c, psi), rtol=0, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_a_fresh_first_stage_makes_the_zero_state(cp, dtype):
    """fresh: the first stage writes every amplitude without reading one (the state starts as NaN)."""
    from qsim_tc.stages.kernel import max_dense, run_program

    c = random_circuit(14, 150, 11, max_width=3)
    plan = plan_stages(c, 10, keep_low=3, rotate_low=True)
    prog = device_program(plan, 3, dtype, fuse_qubits=max_dense(dtype))
    data = cp.full(1 << 14, np.nan, dtype=dtype)
    run_program(data, prog, fresh=True)
    zero = np.zeros(1 << 14, np.complex128)
    zero[0] = 1
    atol = 1e-13 if dtype == np.complex128 else 2e-6
    np.testing.assert_allclose(data.get(), emulate(prog, zero), rtol=0, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "local", "keep_low", "n_gates", "seed"),
                         [(4, 4, 1, 30, 1), (10, 7, 3, 80, 4), (14, 10, 2, 150, 6), (16, 12, 3, 150, 7),
                          (18, 12, 1, 100, 9)])
@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("fresh", [False, True])
def test_a_complex64_state_runs_the_complex128_program(cp, n, local, keep_low, n_gates, seed, rotate, fresh):
    """wide: each chunk is widened to complex128 as it loads and rounded to complex64 as it stores,
    so the result is the complex128 program's to one rounding a stage: in 2-norm at most
    (stages + 1) x 2^-24 of the state's (the input's rounding, then each store's; the ops are
    unitary)."""
    from qsim_tc.stages.kernel import max_dense, run_program

    width = min(local - keep_low, max_dense(np.complex128))
    c = random_circuit(n, n_gates, seed, max_width=width)
    if fresh:
        psi = np.zeros(1 << n, np.complex64)
        psi[0] = 1
    else:
        psi = random_state(n, seed, np.complex64)
    plan = plan_stages(c, local, keep_low=keep_low, rotate_low=rotate)
    prog = device_program(plan, keep_low, np.complex128, fuse_qubits=width)
    data = cp.full(1 << n, np.nan, dtype=np.complex64) if fresh else cp.asarray(psi)
    run_program(data, prog, fresh=fresh, wide=True)
    got = data.get()
    assert got.dtype == np.complex64
    want = emulate(prog, psi.astype(np.complex128))
    bound = (len(prog.stages) + 1) * 2.0**-24 * np.linalg.norm(want)
    assert np.linalg.norm(got - want) <= bound


def test_only_a_complex64_state_runs_the_complex128_programs():
    from qsim_tc.stages.kernel import program_dtype

    assert program_dtype(np.complex64, wide=True) == np.complex128
    assert program_dtype(np.complex64) == np.complex64 and program_dtype(np.complex128) == np.complex128
    with pytest.raises(ValueError, match="wide: only a complex64 state"):
        program_dtype(np.complex128, wide=True)


@pytest.mark.gpu
def test_a_wide_program_is_refused_where_the_kernel_cannot_widen(cp):
    """A wide run needs a complex64 state, at most WIDE_MAX_LOCAL local qubits and a kept low bit
    (two amplitudes a copy); the state is left as it was."""
    from qsim_tc.stages.kernel import WIDE_MAX_LOCAL, run_program

    c = random_circuit(14, 40, 3, max_width=3)
    for local, keep_low, dtype, match in [(WIDE_MAX_LOCAL + 1, 3, np.complex64, "at most"),
                                          (10, 0, np.complex64, "kept low bit"),
                                          (10, 3, np.complex128, "only a complex64 state")]:
        prog = device_program(plan_stages(c, local, keep_low=keep_low), keep_low, np.complex128)
        data = cp.asarray(random_state(14, 3, dtype))
        before = data.get()
        with pytest.raises(ValueError, match=match):
            run_program(data, prog, wide=True)
        np.testing.assert_array_equal(data.get(), before)


def _bank_slot(i: int) -> int:
    """The 16-byte bank slot of local index i in the complex128 kernel's swizzled chunk (swz)."""
    from qsim_tc.stages.program import swizzle

    return swizzle(i) & 7


@pytest.mark.parametrize("k", [2, 3])
def test_tensor_core_layout_spreads_quarter_warps_over_the_banks(k):
    """Every target set of a 12-slot chunk: the group bits are free local slots, a quarter-warp's
    stores always hit eight distinct bank slots, and its loads do wherever two targets differ
    mod 3 (else at most two to a slot)."""
    from itertools import combinations

    from qsim_tc.stages.program import _mma_layout

    assert _mma_layout([0, 1], 4) is None and _mma_layout([0], 12) is None
    for targets in combinations(range(12), k):
        order, (g0, g1, g2) = _mma_layout(list(targets), 12)
        ts = [targets[m] for m in order]
        assert sorted(order) == list(range(k))
        assert len({g0, g1, g2}) == 3 and not {g0, g1, g2} & set(ts) and max(g0, g1, g2) < 12
        off = [sum(1 << t for m, t in enumerate(ts) if j >> m & 1) for j in range(1 << k)]
        for rest in (0, 0b101101010000 & ~sum(1 << p for p in (*ts, g0, g1, g2))):
            loads = [_bank_slot(rest | (lane >> 2 & 1) << g0 | off[lane & 3]) for lane in range(8)]
            stores = [_bank_slot(rest | (c & 1) << g1 | (c >> 1) << g2 | off[r]) for r in range(2) for c in range(4)]
            assert len(set(stores)) == 8
            if len({t % 3 for t in ts}) > 1:
                assert len(set(loads)) == 8, (targets, order)
            else:
                assert max(loads.count(v) for v in loads) <= 2


@pytest.mark.parametrize("k", [2, 3])
def test_tensor_core_address_constants_cover_the_chunk_once(k):
    """The kernel's tile loop, replayed with the record's address constants (_mma_constants):
    each warp steps through its tiles from its base, and over all warps, tiles and lanes the loads
    and the stores each meet every amplitude of the chunk exactly once, at its swizzled place."""
    from itertools import combinations

    from qsim_tc.stages.program import (
        MMA_WARPS,
        W_FIXED,
        W_G,
        W_MC,
        W_OFFS,
        _mma_constants,
        _mma_layout,
        _record,
        deposit,
        swizzle,
    )

    big_l = 9
    for targets in combinations(range(big_l), k):
        order, gbits = _mma_layout(list(targets), big_l)
        ts = [targets[m] for m in order]
        rec = _record(OP_DENSE, k=k, targets=ts)
        rec[W_G:W_G + 3] = gbits
        rec[W_FIXED] = sum(1 << p for p in (*ts, *gbits))
        rec[W_MC:W_MC + len(_mma_constants(rec, big_l))] = _mma_constants(rec, big_l)
        mc = rec[W_MC:]
        step, wbase = mc[0], mc[1:1 + MMA_WARPS]
        s_in, s_off = mc[1 + MMA_WARPS:9 + MMA_WARPS], mc[9 + MMA_WARPS:17 + MMA_WARPS]
        s_out, s_out1 = mc[17 + MMA_WARPS:21 + MMA_WARPS], mc[21 + MMA_WARPS:25 + MMA_WARPS]
        free = ((1 << big_l) - 1) & ~rec[W_FIXED]
        g0, g1, g2 = gbits
        inv = {swizzle(i): i for i in range(1 << big_l)}
        loads, stores = [], []
        for warp in range(MMA_WARPS):
            rest = wbase[warp]
            for tile in range(warp, 1 << (big_l - k - 3), MMA_WARPS):
                assert rest == deposit(tile, free)
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    o = g if k == 3 else g & 3
                    base = rest | (g & 1) << g0 | (g >> 1 & 1) << g1 | (g >> 2) << g2
                    for j in ([t, t + 4] if k == 3 else [t]):
                        idx = inv[swizzle(rest) ^ s_in[g] ^ s_off[j]]
                        assert idx == base + rec[W_OFFS + j]
                        loads.append(idx)
                    if k == 3 or g < 4:
                        for s_o in (s_out[t], s_out1[t]):
                            stores.append(inv[swizzle(rest) ^ s_o ^ s_off[o]])
                rest = ((rest | ~free) + step) & free
        full = list(range(1 << big_l))
        assert sorted(loads) == full and sorted(stores) == full, targets


def _mma_a(m: np.ndarray) -> np.ndarray:
    """The kernel's A operand of a complex 8 x 8 matrix (dense_mma: columns Re, Im of input t,
    then of t + 4, rows Re, Im of the outputs): A[g][t + 4 (i / 2)] and A[g + 8][...] per lane."""
    a = np.zeros((16, 16))
    for g in range(8):
        for t in range(4):
            for j, col in ((t, t), (t + 4, t + 8)):
                a[g, col], a[g + 8, col], a[g, col + 4], a[g + 8, col + 4] = m[g, j].real, m[g, j].imag, \
                    -m[g, j].imag, m[g, j].real
    return a


@pytest.mark.parametrize("seed", range(6))
def test_a_pair_record_replayed_as_the_kernel_runs_it(seed):
    """A pair of 3-qubit ops on disjoint targets (_pair_record), replayed fragment by fragment as
    dense_mma<3, true> runs it: lanes load by the first op's constants, the first mma's D (as the
    second's B, registers renamed), the second mma, stores by the pair's constants. Loads and
    stores each meet the chunk once, and the result equals the two ops applied one after the
    other; the bank slots of a quarter-warp's loads and stores are distinct where residues allow."""
    from circuits import haar_unitary
    from qsim_tc.stages.program import (
        MMA_PAIR,
        MMA_WARPS,
        W_DATA,
        W_FIXED,
        W_G,
        W_MC,
        W_MMA,
        W_PAIR,
        _Dense,
        _dense,
        _pair_record,
        _Pools,
        pair_targets,
        swizzle,
    )

    big_l = 9
    rng = np.random.default_rng(seed)
    slots = rng.permutation(big_l)
    t1, t2 = [int(q) for q in slots[:3]], [int(q) for q in slots[3:6]]
    m1, m2 = haar_unitary(8, rng), haar_unitary(8, rng)
    pools = _Pools()
    rec = _pair_record(_Dense(t1, 0, m1, 0, 0), _Dense(t2, 0, m2, 0, 0), big_l, pools)
    mats = np.concatenate(pools.mats)
    assert rec[W_MMA] == MMA_PAIR and rec[W_FIXED] == sum(1 << q for q in t1 + t2)
    a1 = _mma_a(mats[rec[W_DATA]:rec[W_DATA] + 64].reshape(8, 8))
    a2 = _mma_a(mats[rec[W_PAIR]:rec[W_PAIR] + 64].reshape(8, 8))
    mc, pc = rec[W_MC:], rec[W_PAIR:]
    step, wbase = mc[0], mc[1:1 + MMA_WARPS]
    s_in, s_off = mc[1 + MMA_WARPS:9 + MMA_WARPS], mc[9 + MMA_WARPS:17 + MMA_WARPS]
    rows, cols, cols1 = pc[1:9], pc[9:13], pc[13:17]
    free = ((1 << big_l) - 1) & ~rec[W_FIXED]
    inv = {swizzle(i): i for i in range(1 << big_l)}
    v = rng.standard_normal(1 << big_l) + 1j * rng.standard_normal(1 << big_l)
    out = np.full(1 << big_l, np.nan, complex)
    loads, stores, load_slots, store_slots = [], [], [], []
    for warp in range(MMA_WARPS):
        rest = wbase[warp]
        for _tile in range(warp, 1 << (big_l - 6), MMA_WARPS):
            b = np.zeros((16, 8))
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for i, j in enumerate((t, t + 4)):
                    addr = swizzle(rest) ^ s_in[g] ^ s_off[j]
                    loads.append(inv[addr])
                    load_slots.append((lane >> 3, i, addr & 7))
                    b[t + 8 * i, g], b[t + 4 + 8 * i, g] = v[inv[addr]].real, v[inv[addr]].imag
            d = a1 @ b
            b2 = np.zeros((16, 8))
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                dl = [d[g + 8 * (i // 2), 2 * t + i % 2] for i in range(4)]
                for i, x in enumerate((dl[0], dl[2], dl[1], dl[3])):
                    b2[t + 4 * i, g] = x
            d2 = a2 @ b2
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for j, col in ((0, cols[t]), (1, cols1[t])):
                    addr = swizzle(rest) ^ col ^ rows[g]
                    stores.append(inv[addr])
                    store_slots.append((lane >> 3, j, addr & 7))
                    out[inv[addr]] = d2[g, 2 * t + j] + 1j * d2[g + 8, 2 * t + j]
            rest = ((rest | ~free) + step) & free
    full = list(range(1 << big_l))
    assert sorted(loads) == full and sorted(stores) == full
    want = v.copy()
    _dense(want, big_l, t1, 0, m1)
    _dense(want, big_l, t2, 0, m2)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)
    assert sorted(pair_targets(rec)) == sorted(t2) and list(rec[W_G:W_G + 3]) != [0, 0, 0]
    if len({q % 3 for q in t1}) == 3 and len({q % 3 for q in t2}) == 3:
        for slots_of in (load_slots, store_slots):
            per_access = {}
            for quarter, i, slot in slots_of:
                per_access.setdefault((quarter, i), []).append(slot)
            # each quarter-warp access of a tile: eight distinct slots
            for group in per_access.values():
                for k in range(0, len(group), 8):
                    assert len(set(group[k:k + 8])) == 8


def test_stage_ops_on_disjoint_targets_run_in_pairs():
    """complex128 programs (tensor-core ops) join 3-qubit ops on disjoint targets into pair
    records (a quarter or more of a brickwork's and a random circuit's at 16 qubits, L = 10; about
    70-80% at 28 qubits, L = 12); complex64 programs none."""
    from circuits import brickwork
    from qsim_tc.stages.program import MMA_PAIR, W_MMA

    for c in (brickwork(16, 2, 12, seed=1), random_circuit(16, 200, seed=9, max_width=2)):
        plan = plan_stages(c, 10, keep_low=3, rotate_low=True)
        wide = build_program(plan, 3, fuse_qubits=3, itemsize=16)
        pairs = sum(int((s.ops[:, W_MMA] == MMA_PAIR).sum()) for s in wide.stages)
        threes = sum(int((s.ops[:, W_K] == 3).sum()) for s in wide.stages) + pairs  # ops, a pair two
        assert 2 * pairs >= 0.25 * threes, (pairs, threes)
        narrow = build_program(plan, 3, fuse_qubits=3, itemsize=8)
        assert not any((s.ops[:, W_MMA] == MMA_PAIR).any() for s in narrow.stages)
        psi = random_state(16, 9)
        for prog in (wide, narrow):
            got = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
            np.testing.assert_allclose(got, gate_at_a_time(c, psi), rtol=0, atol=1e-13)
    # unfused gates of every kind: a dense op's pre-phase (diagonals on other slots too) keeps the
    # op in its place (moved ahead of an op on those slots, it had been 0.026 off)
    c = random_circuit(14, 150, seed=6, max_width=3)
    psi = random_state(14, 6)
    prog = build_program(plan_stages(c, 10, keep_low=2), 2, fuse_qubits=0, itemsize=16)
    assert any((s.ops[:, W_MMA] == MMA_PAIR).any() for s in prog.stages)
    got = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
    np.testing.assert_allclose(got, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_two_qubit_ops_widen_to_three_on_a_free_local_qubit():
    """complex128 programs take 2-qubit dense ops as 3-qubit ones (the identity on a local qubit
    that is neither a target nor a control, of the residue mod 3 the layout wants), with the
    interpreter's result unchanged; complex64 programs keep them."""
    from qsim_tc.stages.program import W_K, W_SORTED, _pad_target

    for targets in [(0, 1), (3, 6), (2, 5), (7, 11)]:
        p = _pad_target(list(targets), 1 << 4, 12)
        assert p not in targets and p != 4 and p < 12
        assert p % 3 not in {t % 3 for t in targets}
    assert _pad_target([0, 1], 0, 5) is None
    from circuits import brickwork

    c = brickwork(10, 2, 8, seed=3)
    plan = plan_stages(c, 8, keep_low=2)
    wide, narrow = build_program(plan, 2, fuse_qubits=2, itemsize=16), build_program(plan, 2, fuse_qubits=2, itemsize=8)
    fma = build_program(plan, 2, fuse_qubits=2, itemsize=16, widen=False)  # a GPU without the FP64 mma shapes
    ks = lambda prog: {int(r[W_K]) for s in prog.stages for r in s.ops if r[W_TYPE] == OP_DENSE}  # noqa: E731
    assert ks(wide) == {3} and 2 in ks(narrow) and 2 in ks(fma)
    from qsim_tc.stages.kernel import tensor_core_ops

    assert tensor_core_ops(np.complex128, 90) and not tensor_core_ops(np.complex128, 80)
    assert not tensor_core_ops(np.complex64, 90)  # off by default (kernel.MMA_GPU)
    from qsim_tc.stages import kernel

    kernel.MMA_GPU[8] = True
    try:
        assert tensor_core_ops(np.complex64, 80) and not tensor_core_ops(np.complex64, 75)
    finally:
        kernel.MMA_GPU[8] = False
    for s in wide.stages:
        for r in s.ops:
            assert len({int(r[W_SORTED + m]) for m in range(3)}) == 3
    psi = random_state(10, 4)
    assert wide.final_phys == narrow.final_phys
    np.testing.assert_allclose(emulate(wide, psi.copy()), emulate(narrow, psi.copy()), rtol=0, atol=1e-13)


def _phase_heavy(n: int, seed: int) -> Circuit:
    """Hadamards, controlled phases on every pair, and wide diagonals (a 7-qubit random diagonal
    and a 9-qubit multi-controlled phase): phase terms of up to 9 bits, conditions that no table
    of the kernel holds unless tested per amplitude."""
    rng = np.random.default_rng(seed)
    c = Circuit(n)
    for _ in range(3):
        for q in range(n):
            c.append(Gate(np.array([[1, 1], [1, -1]]) / np.sqrt(2), (q,), "h"))
            for r in rng.choice(n, size=min(4, n - 1), replace=False):
                if r != q:
                    c.append(Gate(np.diag([1, 1, 1, np.exp(1j * rng.uniform(0, 6))]), (q, int(r)), "cp"))
        wide = tuple(int(q) for q in rng.choice(n, size=min(7, n), replace=False))
        c.append(Gate(np.diag(np.exp(1j * rng.uniform(0, 6, 1 << len(wide)))), wide, "diag"))
        mcp = np.ones(1 << min(9, n), dtype=np.complex128)
        mcp[-1] = np.exp(0.7j)
        c.append(Gate(np.diag(mcp), tuple(int(q) for q in rng.choice(n, size=min(9, n), replace=False)), "mcp"))
    return c


def test_phase_runs_are_cut_to_the_kernels_tables():
    """Every phase op's groups fit the block's tables (a lone group always: its condition is
    tested per amplitude), and the program still equals the gate-at-a-time path."""
    from qsim_tc.stages.program import OP_DENSE, OP_PHASE, W_DATA, W_PDATA, phase_table_entries, table_size

    c = _phase_heavy(12, seed=2)
    too_wide = 0
    for local, fuse_qubits in [(8, 0), (10, 3), (12, 3)]:
        prog = build_program(plan_stages(c, local, keep_low=2), 2, fuse_qubits=fuse_qubits)
        untested = 0  # the most table entries a run would need were no condition tested
        for s in prog.stages:
            for r in s.ops:
                phase = r[W_TYPE] == OP_PHASE
                first, count = (int(r[W_DATA]), int(r[W_COUNT])) if phase else (int(r[W_PDATA]), int(r[W_PCOUNT]))
                if r[W_TYPE] == OP_DENSE and not count:
                    continue
                conds = [int(g[0]) for g in prog.groups[first:first + count]]
                untested = max(untested, table_size(conds + [0], local))
                assert table_size(conds, local) <= phase_table_entries(local)
        too_wide += untested > phase_table_entries(local)
        psi = random_state(12, 3)
        got = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
        np.testing.assert_allclose(got, gate_at_a_time(c, psi), rtol=0, atol=1e-13)
    assert too_wide >= 2  # runs whose conditions no table holds unless tested per amplitude


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize(("n", "local", "keep_low", "fuse_qubits"), [(12, 8, 2, 0), (14, 10, 3, 3), (16, 12, 3, 3)])
def test_kernel_applies_phase_runs_of_any_condition(cp, dtype, n, local, keep_low, fuse_qubits):
    from qsim_tc.stages.kernel import block_qubits, run_program

    c = _phase_heavy(n, seed=n)
    psi = random_state(n, n, dtype)
    prog = device_program(plan_stages(c, local, keep_low=keep_low), keep_low, dtype, fuse_qubits=fuse_qubits,
                          block_qubits=block_qubits(dtype))
    data = cp.asarray(psi)
    run_program(data, prog)
    atol = 1e-13 if dtype == np.complex128 else 2e-6
    np.testing.assert_allclose(data.get(), emulate(prog, psi.astype(np.complex128)), rtol=0, atol=atol)


def test_stages_without_phase_groups_take_the_kernel_without_phase_code():
    from circuits import brickwork
    from qsim_tc.stages.kernel import has_phases

    dense = build_program(plan_stages(brickwork(12, 2, 6, seed=1), 8, keep_low=2), 2, fuse_qubits=3)
    assert not any(has_phases(s.ops) for s in dense.stages)
    phased = build_program(plan_stages(_phase_heavy(12, seed=1), 8, keep_low=2), 2, fuse_qubits=3)
    assert all(has_phases(s.ops) for s in phased.stages)
    assert not has_phases(np.zeros((0, dense.stages[0].ops.shape[1]), np.int64))



@pytest.mark.gpu
@pytest.mark.parametrize(("n", "local", "keep_low", "d", "seed", "rotate"),
                         [(10, 8, 2, 2, 1, False), (12, 10, 3, 3, 2, True), (14, 12, 3, 2, 3, False),
                          (16, 13, 3, 3, 4, True)])
@pytest.mark.parametrize("scale", [1.0, 40.0, 1e-20])
def test_complex64_tensor_core_ops_match_their_emulation(cp, monkeypatch, n, local, keep_low, d, seed, rotate, scale):
    """The complex64 kernel's tensor-core ops (3-qubit ops, widened 2-qubit ones and pairs) compute
    what :mod:`qsim_tc.stages.tc32` emulates, on states of any norm: on brickworks (dense ops only:
    phase tables and FMA loops round differently from the emulation's numpy), the GPU's
    difference from the emulation is far below either's error against complex128."""
    from qsim_tc.stages import kernel
    from qsim_tc.stages.kernel import run_program, tensor_core_ops

    monkeypatch.setitem(kernel.MMA_GPU, 8, True)
    if not tensor_core_ops(np.complex64):
        pytest.skip("no tensor-core ops on this GPU")
    c = brickwork(n, d, 8, seed=seed)
    psi = (random_state(n, seed) * scale).astype(np.complex64)
    prog = device_program(plan_stages(c, local, keep_low=keep_low, rotate_low=rotate), keep_low, np.complex64,
                          fuse_qubits=3)
    assert all(r[W_TYPE] == OP_DENSE and r[W_K] == 3 for s in prog.stages for r in s.ops)
    data = cp.asarray(psi)
    run_program(data, prog)
    got = data.get().astype(np.complex128)
    emulated = emulate(prog, psi.copy(), tensor_cores=True).astype(np.complex128)
    exact = emulate(prog, psi.astype(np.complex128))
    gap, err = np.linalg.norm(got - emulated), np.linalg.norm(emulated - exact)
    assert np.isfinite(got).all() and err < 1e-6 * scale and gap <= 0.1 * err, (gap, err)
