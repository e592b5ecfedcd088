"""The compiled CPU stage executor: every gate kind, in every place a chunk can hold its bits.

A chunk of 2^B amplitudes holds, from its low bits up, W lanes (global qubits), the L local
qubits; bits >= B are fixed per chunk. Targets are always local; controls and diagonal bits can
be lanes, local or above the chunk. ``block_bytes`` sets B, so the cases below put each gate's
bits in each of those places, and compare with the gate-at-a-time path.
"""

import numpy as np
import pytest
from test_stages import _mcx, _qiskit, gate_at_a_time, lib, random_circuit, random_state

import gemm
from circuits import Circuit
from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.storage import PhysicalState
from qsim_tc.stages.cpu import run_stages
from qsim_tc.stages.plan import plan_stages

TOL = {np.complex128: 1e-13, np.complex64: 1e-5}


def _run(c: Circuit, psi: np.ndarray, local: int, block_amplitudes: int, threads: int = 2) -> np.ndarray:
    plan = plan_stages(c, local)
    return run_stages(psi.copy(), plan, block_bytes=block_amplitudes * psi.itemsize, threads=threads)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize(("n", "local", "block_bits"), [
    (1, 1, 1), (2, 1, 1), (3, 2, 3), (5, 3, 3), (6, 4, 6), (8, 4, 6), (10, 5, 8), (12, 6, 9), (13, 7, 7),
])
def test_random_circuits_every_kind(dtype, n, local, block_bits):
    """Random dense 1-4 qubit, diagonal, controlled, permutation and SWAP gates on scattered,
    repeated qubits; chunks with and without lanes and bits above them."""
    for seed in range(3):
        c = random_circuit(n, 60, seed=100 * n + seed, max_width=min(local, 4))
        psi = random_state(n, seed, dtype)
        out = _run(c, psi, local, 1 << block_bits, threads=1 + seed % 2)
        np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_twenty_qubits(dtype):
    n = 20
    c = random_circuit(n, 40, seed=7)
    psi = random_state(n, 7, dtype)
    out = _run(c, psi, 10, 1 << 14)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("block_bits", [4, 6, 8, 10])
def test_controls_and_diagonals_in_lanes_local_and_above(block_bits):
    """L = 4 of 10 qubits: chunk bits 4..block_bits-1 are lanes, the rest fixed per chunk; the
    gates' controls and diagonal bits sit on local, lane and high qubits, their targets local."""
    n, local = 10, 4
    rng = np.random.default_rng(block_bits)
    c = Circuit(n)
    for _ in range(4):
        for target in range(local):
            for control in (4, 6, 9):
                c.add(_qiskit(lib.CRXGate(rng.uniform(0, 6))), (control, target), "crx")
                c.add(_qiskit(lib.CPhaseGate(rng.uniform(0, 6))), (control, target), "cp")
            c.add(_mcx(3), (5, 9, target, (target + 1) % local), "mcx")  # controls 5, 9, target
            c.add(_qiskit(lib.CCXGate()), (7, 8, target), "ccx")
            c.add(np.diag(np.exp(1j * rng.uniform(0, 6, 8))), (9, target, 5), "diag3")
            c.add(_qiskit(lib.RZGate(rng.uniform(0, 6))), (8,), "rz")
        c.add(_qiskit(lib.SwapGate()), (1, 7), "swap")
    psi = random_state(n, block_bits)
    plan = plan_stages(c, local)
    out = run_stages(psi.copy(), plan, block_bytes=16 << block_bits, threads=2)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5])
def test_dense_widths(width):
    """1- and 2-qubit gates have unrolled kernels, wider ones the accumulating kernel."""
    from circuits import haar_unitary

    n = 9
    rng = np.random.default_rng(width)
    c = Circuit(n)
    for _ in range(12):
        qubits = tuple(int(q) for q in rng.choice(n, width, replace=False))
        c.add(haar_unitary(1 << width, rng), qubits, f"haar{width}")
    psi = random_state(n, width)
    for block_bits in (width, 7, 9):
        out = _run(c, psi, max(width, 5), 1 << block_bits)
        np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_physical_state_layouts_are_followed_and_left_lazy():
    """A stored permutation is folded into the first load; the result stays in the last stage's
    storage order until canonicalized, and a second plan runs from there."""
    n = 11
    c1, c2 = random_circuit(n, 40, seed=1), random_circuit(n, 40, seed=2)
    psi = random_state(n, 3)
    perm = list(np.random.default_rng(0).permutation(n))
    phys = PhysicalState(permute_bits(psi.copy(), n, perm, list(range(n)), np), gemm.resolve_device("cpu"))
    phys.layout.set(perm)
    run_stages(phys, plan_stages(c1, 5), block_bytes=16 << 8)
    run_stages(phys, plan_stages(c2, 6), block_bytes=16 << 9, threads=1)
    phys.canonicalize()
    both = Circuit(n)
    for g in c1.gates + c2.gates:
        both.append(g)
    both.global_phase = c1.global_phase + c2.global_phase
    np.testing.assert_allclose(phys.data, gate_at_a_time(both, psi), rtol=0, atol=1e-13)


def _stored(psi, perm):
    """A CPU PhysicalState holding ``psi`` with qubit perm[p] at storage bit p, and a spare buffer."""
    n = len(perm)
    phys = PhysicalState(permute_bits(psi.copy(), n, perm, list(range(n)), np), gemm.resolve_device("cpu"))
    phys.layout.set(list(perm))
    phys.spare = np.empty_like(phys.data)
    return phys


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize(("n", "threads", "block_bits"), [(1, 1, None), (5, 2, 2), (12, 1, 5), (12, 2, 12), (16, 2, 9),
                                                        (16, 1, None)])
def test_compiled_canonicalize_undoes_any_layout(dtype, n, threads, block_bits):
    """One compiled gather into the spare buffer puts any stored layout (reversed, random, lanes
    moved above the chunk) back into logical order, bit for bit; no buffer is allocated."""
    from qsim_tc.stages import cpu

    psi = random_state(n, n, dtype)
    rng = np.random.default_rng(n)
    for perm in (list(range(n))[::-1], list(rng.permutation(n)), list(range(n))[n // 2:] + list(range(n))[:n // 2]):
        phys = _stored(psi, [int(q) for q in perm])
        old = phys.data
        block = None if block_bits is None else psi.itemsize << block_bits
        assert cpu.canonicalize(phys, threads=threads, block_bytes=block) is True
        assert phys.layout.is_identity
        np.testing.assert_array_equal(phys.data, psi)
        if perm != sorted(perm):
            assert phys.spare is old  # written into the spare buffer, even where chunks keep their place



@pytest.mark.parametrize(("stored", "nbits", "itemsize", "want"), [
    (list(range(10)), 6, 16, list(range(10))),  # logical already: the plain chunk
    ([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], 6, 16, [0, 1, 2, 7, 8, 9, 3, 4, 5, 6]),  # the 3 lowest stored qubits join
    ([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], 8, 8, [0, 1, 2, 3, 6, 7, 8, 9, 4, 5]),  # 4 of them: at most nbits / 2
    ([1, 9, 0, 2, 8, 3, 4, 5, 6, 7], 6, 8, [0, 1, 2, 3, 4, 9, 5, 6, 7, 8]),  # those below a are in anyway
    ([6, 0, 1, 2, 3, 4, 5, 7, 8, 9], 6, 16, [0, 1, 2, 3, 4, 6, 5, 7, 8, 9]),  # qubit nbits itself joins
])
def test_canonical_chunk_holds_the_sources_low_qubits(stored, nbits, itemsize, want, monkeypatch):
    """The gather into logical order takes a chunk of the low logical bits and of the qubits at
    the lowest storage bits (so each source line is read whole by one chunk), at least nbits / 2
    of the former, the rest of the logical bits above in order."""
    from qsim_tc.stages import cpu

    monkeypatch.setitem(cpu.CANON_SOURCE_BITS, itemsize, 4 if itemsize == 8 else 3)
    got = cpu._canonical_chunk(stored, nbits, itemsize)
    assert got == want
    assert sorted(got) == list(range(len(stored)))

def test_compiled_canonicalize_leaves_what_it_cannot_take():
    """No spare buffer (or one of another size) or a logical layout: nothing moves, and
    PhysicalState.canonicalize falls back to its own permutation."""
    from qsim_tc.stages import cpu

    n = 8
    psi = random_state(n, 1)
    perm = [3, 1, 7, 0, 2, 6, 5, 4]
    phys = _stored(psi, perm)
    phys.spare = None
    before = phys.data.copy()
    assert cpu.canonicalize(phys) is False
    np.testing.assert_array_equal(phys.data, before)
    assert list(phys.layout.phys) == perm
    phys.spare = np.empty(4, phys.data.dtype)
    assert cpu.canonicalize(phys) is False
    phys.canonicalize()  # the engine's own path
    np.testing.assert_array_equal(phys.data, psi)
    assert cpu.canonicalize(phys) is True  # already logical


def test_a_state_from_the_stages_reads_back_through_the_compiled_gather():
    """run_stages leaves its gather as the state's reorder hook; PhysicalState.canonicalize (what
    StateVector.data() and to_numpy() call) takes it."""
    from qsim_tc.stages import cpu

    n = 10
    c = random_circuit(n, 30, seed=11)
    psi = random_state(n, 5)
    phys = PhysicalState(psi.copy(), gemm.resolve_device("cpu"))
    run_stages(phys, plan_stages(c, 4), block_bytes=16 << 6, threads=2)
    assert phys.reorder is cpu.canonicalize and not phys.layout.is_identity
    calls = []
    phys.reorder = lambda p: calls.append(1) or cpu.canonicalize(p, block_bytes=16 << 5)
    phys.canonicalize()
    assert calls and phys.layout.is_identity
    np.testing.assert_allclose(phys.data, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_compiled_canonicalize_interrupted_leaves_the_state_valid(monkeypatch):
    """The gather writes only the spare buffer: a failure half-way leaves data and layout as they
    were, a valid state in its old order."""
    from qsim_tc.stages import cpu, cpu_kernels

    psi = random_state(10, 4)
    perm = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    phys = _stored(psi, perm)
    before = phys.data.copy()
    calls = []

    def fail(*args):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(cpu_kernels, "run_chunks", fail)
    with pytest.raises(KeyboardInterrupt):
        cpu.canonicalize(phys, threads=1, block_bytes=16 << 4)
    assert calls
    np.testing.assert_array_equal(phys.data, before)
    assert list(phys.layout.phys) == perm and phys.invalid is None


def test_a_stage_of_swaps_only_moves_nothing():
    c = Circuit(6)
    sw = _qiskit(lib.SwapGate())
    for a, b in [(0, 5), (1, 4), (2, 3), (0, 1)]:
        c.add(sw, (a, b), "swap", check_unitary=False)
    psi = random_state(6, 4)
    phys = PhysicalState(psi.copy(), gemm.resolve_device("cpu"))
    data = phys.data
    run_stages(phys, plan_stages(c, 2), block_bytes=16 << 3)
    assert phys.data is data and np.array_equal(data, psi)  # relabels only: no pass
    phys.canonicalize()
    np.testing.assert_array_equal(phys.data, gate_at_a_time(c, psi))


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize(("n", "local", "block_bits"), [(13, 8, 12), (13, 13, 13), (14, 12, 13), (14, 13, 14)])
def test_wide_gates(dtype, n, local, block_bits):
    """3-5 target qubits, plain and controlled (controls in lanes, local and above the chunk),
    with runs from 2^W up to 2^11 amplitudes: shorter and longer than the wide kernel's step."""
    from circuits import haar_unitary
    from qsim_tc.stages.structure import CONTROLLED, classify

    rng = np.random.default_rng(block_bits)

    def controlled(u):
        m = np.eye(2 * len(u), dtype=complex)
        m[len(u):, len(u):] = u
        assert classify(m).kind == CONTROLLED
        return m

    c = Circuit(n)
    top = list(range(n - 4, n))  # the top chunk bits while the layout is still the initial one
    for qubits in ([top[3], top[1], top[2]], top[1:], top, top[::-1]):
        c.add(haar_unitary(1 << len(qubits), rng), tuple(qubits), f"haar{len(qubits)}")
    c.add(controlled(haar_unitary(8, rng)), (top[2], top[1], top[3], top[0]), "c-haar3")
    for i in range(30):
        width = 3 + i % 3
        u = haar_unitary(1 << width, rng)
        if i % 2:
            c.add(controlled(u), tuple(int(q) for q in rng.choice(n, width + 1, replace=False)), f"c-haar{width}")
        else:
            c.add(u, tuple(int(q) for q in rng.choice(n, width, replace=False)), f"haar{width}")
    psi = random_state(n, block_bits, dtype)
    out = _run(c, psi, local, 1 << block_bits)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=TOL[dtype])


def test_default_chunk_keeps_to_the_cache_share_and_the_lanes(monkeypatch):
    # the chunk is the per-dtype default, at most half a thread's share of the last-level cache
    # (a power of two), and never so small that the lanes fall short of one vector
    from qsim_tc.stages import cpu, cpu_kernels

    monkeypatch.setattr(cpu_kernels, "VECTOR_BYTES", 32)
    default = cpu.DEFAULT_BLOCK_BYTES

    def chunk(item, big_l, threads, llc):
        return cpu.default_block_bytes(item, big_l, threads, llc, l2_bytes=None)

    assert chunk(8, 13, 2, None) == default[8]  # cache unknown: no cap
    assert chunk(8, 13, 2, 64 << 20) == default[8]  # a large L3: no change
    assert chunk(8, 13, 2, 8 << 20) == 2 << 20  # 8 MiB over 2 threads
    assert chunk(8, 13, 1, 8 << 20) == min(default[8], 4 << 20)
    assert chunk(8, 13, 2, 6 << 20) == 1 << 20  # half of 3 MiB, rounded down
    # floors: L = 15 with 3 lane bits of float32 (one 256-bit vector) is 2 MiB of complex64
    assert chunk(8, 15, 2, 4 << 20) == 8 << 18
    assert chunk(16, 12, 8, 1 << 20) == 16 << 14  # complex128: 2 lane bits
    monkeypatch.setattr(cpu_kernels, "VECTOR_BYTES", 64)
    assert chunk(8, 15, 2, 4 << 20) == 8 << 19  # AVX-512: 4 lane bits


def test_default_chunk_keeps_to_half_a_large_l2(monkeypatch):
    # a core with >= 2 MiB of L2 keeps its chunk to half of it (rounded down to a power of two),
    # above the lanes' floor; smaller or unknown L2s cap nothing
    from qsim_tc.stages import cpu, cpu_kernels, host_cache

    monkeypatch.setattr(cpu_kernels, "VECTOR_BYTES", 64)
    assert host_cache.l2_chunk_cap(2 << 20) == 1 << 20
    assert host_cache.l2_chunk_cap(3 << 20) == 1 << 20
    assert host_cache.l2_chunk_cap(4 << 20) == 2 << 20
    assert host_cache.l2_chunk_cap(1 << 20) is None  # below L2_CAP_MIN_BYTES
    assert host_cache.l2_chunk_cap(None) is None
    assert cpu.default_block_bytes(8, 13, 2, 480 << 20, l2_bytes=2 << 20) == 1 << 20  # 4 lane bits: 2^17
    assert cpu.default_block_bytes(16, 12, 2, 480 << 20, l2_bytes=2 << 20) == 1 << 20  # 2^16 complex128
    assert cpu.default_block_bytes(8, 15, 2, 480 << 20, l2_bytes=2 << 20) == 8 << 19  # the floor wins
    assert cpu.default_block_bytes(8, 13, 2, 480 << 20, l2_bytes=1 << 20) == cpu.DEFAULT_BLOCK_BYTES[8]
    # this host's cap is what the default reads
    monkeypatch.setattr(host_cache, "core_l2", lambda: 2 << 20)
    assert cpu.default_block_bytes(8, 13, 2, None) == 1 << 20


def test_cache_sizes_read_from_sysfs(tmp_path):
    # data and unified caches by level (instruction caches left out); no such folder: none
    from qsim_tc.stages import host_cache

    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "64K"), (2, "Unified", "512K"),
                                             (3, "Unified", "8192K"), (4, "Unified", "")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert host_cache.cache_sizes(str(tmp_path)) == {1: 32 << 10, 2: 512 << 10, 3: 8 << 20}
    assert host_cache.cache_sizes(str(tmp_path / "missing")) == {}
    size = host_cache.last_level_cache()  # this host's
    assert size is None or size == host_cache.cache_sizes()[max(host_cache.cache_sizes())]


@pytest.mark.parametrize("bad", ["strided", "read-only", "2-D", "odd length"])
def test_run_stages_refuses_an_array_it_cannot_work_in(bad):
    """An array state that is a strided view, read-only, not 1-D or not of a power-of-two length
    gets a ValueError that names the problem before anything runs, and stays as it was (the
    kernels work in the array's memory, in place)."""
    from circuits import brickwork

    base = random_state(11, 3)
    state = {"strided": base[::2], "read-only": base[:1 << 10].copy(), "2-D": base[:1 << 10].reshape(32, 32),
             "odd length": base[:1000]}[bad]
    if bad == "read-only":
        state.flags.writeable = False
    before = state.copy()
    with pytest.raises(ValueError, match="contiguous, writeable|power-of-two length"):
        run_stages(state, plan_stages(brickwork(10, 2, 2, seed=1), 6))
    np.testing.assert_array_equal(state, before)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize(("n", "local", "block_bits", "threads"), [(6, 4, 6, 1), (10, 5, 8, 2), (12, 6, 9, 2)])
def test_a_fresh_state_is_made_by_the_first_stage(dtype, n, local, block_bits, threads):
    """``fresh``: the state's memory holds garbage (not zeroed) and stands for |0...0>; the first
    stage makes its chunks instead of reading them. Same result as from a written |0...0>."""
    for seed in range(3):
        c = random_circuit(n, 40, seed=7 * n + seed, max_width=min(local, 4))
        plan = plan_stages(c, local)
        zero = np.zeros(1 << n, dtype)
        zero[0] = 1
        want = gate_at_a_time(c, zero)
        garbage = np.random.default_rng(seed).standard_normal(2 << n).view(np.complex128).astype(dtype)
        phys = PhysicalState(garbage, gemm.resolve_device("cpu"))
        run_stages(phys, plan, block_bytes=np.dtype(dtype).itemsize << block_bits, threads=threads, fresh=True)
        assert phys.invalid is None
        phys.canonicalize()
        np.testing.assert_allclose(phys.data, want, rtol=0, atol=TOL[dtype])


def test_a_fresh_state_whose_stages_have_no_ops_is_still_written():
    """A plan of SWAPs alone moves no amplitude: |0...0> is written all the same."""
    from circuits.gate import Gate

    swap = np.eye(4)[[0, 2, 1, 3]]
    c = Circuit(6, [Gate(swap, (0, 5), "swap", check_unitary=False)])
    phys = PhysicalState(np.full(64, np.nan, np.complex128), gemm.resolve_device("cpu"))
    run_stages(phys, plan_stages(c, 4), fresh=True)
    phys.canonicalize()
    want = np.zeros(64, np.complex128)
    want[0] = 1
    np.testing.assert_array_equal(phys.data, want)


def test_a_run_from_zero_takes_the_fresh_first_stage(monkeypatch):
    """The Simulator's CPU stage path from |0...0> passes ``fresh``; from an initial state not."""
    from circuits import brickwork
    from qsim_tc import Simulator, StateVector
    from qsim_tc.stages import cpu

    seen = []
    real = cpu.run_stages
    monkeypatch.setattr(cpu, "run_stages", lambda *a, **k: (seen.append(k.get("fresh")), real(*a, **k))[1])
    c = brickwork(12, 2, 6, seed=1)
    sim = Simulator(device="cpu", plan="always")
    a = sim.run(c).state.to_numpy()
    b = sim.run(c, initial_state=StateVector(12, device="cpu")).state.to_numpy()
    assert seen[-2:] == [True, False]  # (a first call may be the kernels' warm-up)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)
