"""Gate fusion inside a stage (qsim_tc.stages.fusion) and the CPU executor that uses it."""

import numpy as np
import pytest
from test_stage_program import to_logical
from test_stages import gate_at_a_time, random_circuit, random_state

from circuits import Circuit, Gate
from circuits.haar import haar_unitary
from qsim_tc.stages.cpu import FUSE_COST, run_stages
from qsim_tc.stages.fusion import commuting_blocks, fuse_plan, fuse_stage
from qsim_tc.stages.plan import RELABEL, plan_stages
from qsim_tc.stages.program import build_program, emulate
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL

TOL = {np.complex128: 1e-13, np.complex64: 1e-5}
WIDEST = (1.0, 1.0, 1.0, 1.0)  # every width costs the same: fuse as wide as 4 qubits allow
NARROW = (1.0, 1.0, 3.0, 10.0)  # 3 and 4 qubits too dear: fuse to 2 at most


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("cost", [WIDEST, NARROW, None, ()], ids=["widest", "narrow", "default", "off"])
@pytest.mark.parametrize(("n", "local", "block_bits"), [(6, 4, 6), (9, 5, 8), (11, 6, 9)])
def test_fused_stages_equal_gate_at_a_time(dtype, cost, n, local, block_bits):
    """Every gate kind on scattered, repeated qubits (controls local, in lanes and above the chunk)."""
    for seed in range(2):
        c = random_circuit(n, 70, seed=31 * n + seed, max_width=min(local, 4))
        psi = random_state(n, seed, dtype)
        plan = plan_stages(c, local)
        out = run_stages(psi.copy(), plan, block_bytes=psi.itemsize << block_bits, fuse_cost=cost)
        np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=TOL[dtype])


def _brick(n, depth, seed):
    rng = np.random.default_rng(seed)
    c = Circuit(n)
    for layer in range(depth):
        for q in range(layer % 2, n - 1, 2):
            c.append(Gate(haar_unitary(4, rng), (q, q + 1), "u2", check_unitary=False))
    return c


def test_runs_fuse_by_cost_and_keep_the_stage():
    c = _brick(6, 4, seed=1)
    plan = plan_stages(c, 6)
    (stage,) = plan.stages
    wide = fuse_stage(stage, 6, WIDEST)
    assert wide.swaps == stage.swaps and wide.layout == stage.layout
    assert len(wide.ops) < len(stage.ops) and max(len(op.positions) for op in wide.ops) == 4
    assert all(list(op.positions) == sorted(op.positions) for op in wide.ops if len(op.positions) > 2)
    # two-qubit ops cost as much as one-qubit ones here, wider ones far more: nothing to merge
    assert fuse_stage(stage, 6, NARROW) is stage
    assert fuse_stage(stage, 6, (1.0,)) is stage and fuse_stage(stage, 6, ()) is stage
    again = fuse_plan(plan, WIDEST).stages[0]
    assert fuse_plan(plan, ()) is plan
    assert [(op.gate, op.kind, op.positions) for op in again.ops] == [(op.gate, op.kind, op.positions) for op in wide.ops]


def test_diagonals_global_bits_and_relabels_end_or_pass_runs():
    """A diagonal gate or a gate with a global qubit ends a run (order kept without a dependency
    analysis); a relabel passes through; a lone controlled gate keeps its structure."""
    n, local = 6, 4
    rng = np.random.default_rng(3)
    u = lambda: haar_unitary(4, rng)  # noqa: E731
    cx = np.eye(4)[[0, 3, 2, 1]]  # control qubit 0 (matrix bit 0), target qubit 1
    swap = np.eye(4)[[0, 2, 1, 3]]
    c = Circuit(n)
    for g in [Gate(u(), (0, 1)), Gate(u(), (1, 2)),  # a run: fused
              # a diagonal ends it (on the next gate's target: the planner keeps it in place)
              Gate(np.diag(np.exp(1j * rng.uniform(0, 6, 4))), (3, 5)),
              Gate(cx, (2, 3)),  # a run of one: kept as it is
              Gate(cx, (5, 3)),  # a control above L: ends the run
              Gate(u(), (0, 2)), Gate(swap, (4, 5)), Gate(u(), (2, 3))]:  # a relabel inside a run
        c.append(g)
    plan = plan_stages(c, local)
    assert plan.n_stages == 1
    (stage,) = plan.stages
    fused = fuse_stage(stage, local, WIDEST)
    kinds = [op.kind for op in fused.ops]
    assert kinds == ["dense", DIAGONAL, CONTROLLED, CONTROLLED, RELABEL, "dense"], kinds
    assert fused.ops[2] is stage.ops[3] and fused.ops[3] is stage.ops[4]
    assert fused.ops[0].positions == tuple(sorted(stage.ops[0].positions + stage.ops[1].positions[1:]))
    psi = random_state(n, 5)
    out = run_stages(psi.copy(), plan, fuse_cost=WIDEST)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_default_costs_make_qv_like_runs_cheaper():
    """The executor's default costs fuse 2-qubit gates that share qubits (as QuantumVolume's
    layers do) into fewer, wider ops."""
    for item, cost in FUSE_COST.items():
        assert len(cost) == 4 and all(a < b for a, b in zip(cost, cost[1:])), item
    c = _brick(8, 6, seed=2)
    plan = plan_stages(c, 8)
    for cost in FUSE_COST.values():
        fused = fuse_plan(plan, cost)
        assert sum(len(s.ops) for s in fused.stages) < sum(len(s.ops) for s in plan.stages)


def _diagonal_heavy(n, n_gates, seed):
    """Random gates of every kind, half of them diagonal (phases, controlled phases, CCZ-like)."""
    rng = np.random.default_rng(seed)
    c = random_circuit(n, n_gates, seed, max_width=3)
    out = Circuit(n)
    for g in c.gates:
        out.append(g)
        if rng.random() < 0.5:
            width = int(rng.integers(1, 4))
            qubits = tuple(int(q) for q in rng.choice(n, size=width, replace=False))
            out.append(Gate(np.diag(np.exp(1j * rng.uniform(0, 6, 1 << width))), qubits, "diag"))
    return out


@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize(("n", "local", "keep_low"), [(5, 5, 0), (8, 5, 2), (10, 7, 3)])
def test_commuting_blocks_apply_the_same_unitary(width, n, local, keep_low):
    """Every stage regrouped (diagonals moved past the gates they commute with, absorbed into
    blocks or applied before them), run through the stage program's interpreter."""
    for seed in range(3):
        c = _diagonal_heavy(n, 60, seed=100 * n + seed)
        plan = plan_stages(c, local, keep_low=keep_low)
        blocked = type(plan)(**{**plan.__dict__, "stages": tuple(commuting_blocks(s, local, width)
                                                                 for s in plan.stages)})
        for s, b in zip(plan.stages, blocked.stages):
            assert b.swaps == s.swaps and b.layout == s.layout and b.end_layout == s.end_layout
            assert all(len(op.positions) <= width for op in b.ops if not any(op is o for o in s.ops))
        prog = build_program(blocked, keep_low)
        psi = random_state(n, seed)
        out = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
        np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_commuting_blocks_merge_a_qfts_hadamards_across_its_phases():
    """QFT: a diagonal run follows every Hadamard, so runs between diagonals are single gates.
    Moving the phases lets three Hadamards (and the phases among them) form one 3-qubit op."""
    pytest.importorskip("qiskit")
    from benchmarks.bench.qiskit_circuits import qft_circuit

    c, _ = qft_circuit(12)
    plan = plan_stages(c, 12)
    (stage,) = plan.stages
    hadamards = sum(op.kind not in (DIAGONAL, RELABEL) for op in stage.ops)
    blocked = commuting_blocks(stage, 12, 3)
    mixing = [op for op in blocked.ops if op.kind not in (DIAGONAL, RELABEL)]
    assert len(mixing) <= -(-hadamards // 3) + 1 and max(len(op.positions) for op in mixing) == 3
    plain, fused = build_program(plan, 0), build_program(plan, 0, fuse_qubits=3)
    assert fused.n_ops <= 0.5 * plain.n_ops
    psi = random_state(12, 4)
    np.testing.assert_allclose(to_logical(emulate(fused, psi.copy()), fused.final_phys),
                               to_logical(emulate(plain, psi.copy()), plain.final_phys), rtol=0, atol=1e-13)


def test_fusion_costs_follow_the_host_cpu():
    """A host with a table of its own (by LLVM's CPU name) fuses by it; any other by the table of
    its vector width. Every table prices wider ops higher, for both amplitude sizes."""
    from qsim_tc.stages import cpu, cpu_kernels

    for tables in (*cpu._FUSE_COSTS.values(), *cpu._FUSE_COSTS_BY_CPU.values()):
        assert set(tables) == {8, 16}
        for cost in tables.values():
            assert len(cost) == 4 and all(0 < a < b for a, b in zip(cost, cost[1:]))
    want = cpu._FUSE_COSTS_BY_CPU.get(cpu_kernels.HOST_CPU, cpu._FUSE_COSTS[cpu_kernels.VECTOR_BYTES])
    assert cpu.SHIPPED_FUSE_COST == want
