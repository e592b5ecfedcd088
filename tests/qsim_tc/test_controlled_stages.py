"""Circuits of multi-controlled gates (Toffoli, Fredkin, doubly controlled U) on the stage path:
the GPU decision at 28 qubits with an H100's / H200's inputs, the CPU decision, the planner's
commutation through controls, the model's price of an op with global controls, and the stage
programs and CPU executor against the gate-at-a-time path."""

import numpy as np
import pytest
from test_stage_program import to_logical
from test_stages import check_plan, gate_at_a_time, random_state

from circuits import Circuit, Gate, controlled_random
from circuits.controlled import controlled
from qsim_tc import Simulator
from qsim_tc.plan import choose_fusion
from qsim_tc.plan.costs import shipped_table
from qsim_tc.stages import choice as stage_choice
from qsim_tc.stages.fusion import commuting_blocks
from qsim_tc.stages.plan import plan_stages
from qsim_tc.stages.program import OP_PASSES, W_CMASK, build_program, emulate
from qsim_tc.stages.structure import classify

X = np.array([[0, 1], [1, 0]])


def gpu_decision(c: Circuit, table: str, dtype):
    """The decision StageRunner makes on a sm_90 GPU of the H100 / H200 SXM's SMs and clock (the
    model's reference), the gate path priced from the shipped cost table ``table``."""
    from qsim_tc.stages.kernel import block_qubits, max_dense, tensor_core_ops

    dt = np.dtype(dtype)
    fc = choose_fusion(c, "auto", "gpu", str(dt), table=shipped_table(table),
                       precision="double" if dt == np.complex128 else "single")
    wide = ((max_dense(np.complex128), block_qubits(np.complex128))
            if dt == np.complex64 and tensor_core_ops(np.complex128, 90) else None)
    return stage_choice.decide(c, max_dense(dt), stage_choice.reference_pass_ms(c.n_qubits),
                               min(fc.estimated_ms, fc.unfused_ms), itemsize=dt.itemsize,
                               block_qubits=block_qubits(dt), widen=tensor_core_ops(dt, 90), wide=wide)


def global_controls(decision) -> int:
    """Dense ops of the decision's program with a control on a global slot."""
    big_l = decision.plan.local_qubits
    return sum(int(int(c) % (1 << 64) >> big_l != 0) for s in decision.program.stages for c in s.ops[:, W_CMASK])


@pytest.mark.parametrize("table", ["h100", "h200"])
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_gpu_takes_stages_for_controlled_circuits_at_28_qubits(table, dtype):
    c = controlled_random(28, 20, seed=1)
    d = gpu_decision(c, table, dtype)
    assert d.use, d.why
    assert d.predicted_ms < d.gate_ms  # not by the gate estimate's measured bias alone
    assert global_controls(d) > 0.2 * d.program.n_ops  # Toffolis and Fredkins run with global controls


def test_doubly_controlled_two_qubit_gates_from_qiskit_take_stages_in_complex128():
    """Qiskit's C2-U2, C2-SWAP, CCH and MCX(3) read as controlled once imported exactly: each
    mixes at most 2 qubits, within complex128's 3 (from their synthesized matrices a C2-U2 was
    dense on 4 qubits and kept the circuit off the stages)."""
    qiskit = pytest.importorskip("qiskit")
    from qiskit.circuit.library import HGate, MCXGate, SwapGate, UnitaryGate
    from qiskit.quantum_info import random_unitary

    from circuits import from_qiskit

    rng = np.random.default_rng(4)
    qc = qiskit.QuantumCircuit(28)
    for layer in range(4):
        qc.h(range(28))
        perm = [int(q) for q in rng.permutation(28)]
        for k in range(0, 28, 4):
            qs = perm[k:k + 4]
            gate = [UnitaryGate(random_unitary(4, seed=layer * 10 + k)).control(2, annotated=False),
                    SwapGate().control(2, annotated=False), MCXGate(3), None][k // 4 % 4]
            if gate is None:
                qc.append(HGate().control(2, annotated=False), qs[:3])
            else:
                qc.append(gate, qs)
    c = from_qiskit(qc)
    assert max(stage_choice.mixing_width(classify(g.matrix)) for g in c.gates) == 2
    d = gpu_decision(c, "h200", np.complex128)
    assert d.use, d.why


def test_cpu_takes_stages_for_controlled_circuits():
    c = controlled_random(20, 10, seed=2)
    for itemsize in (8, 16):
        d = stage_choice.decide_cpu(c, itemsize)
        assert d.use and d.plan.n_stages >= 1, d.why


def test_an_op_with_global_controls_weighs_by_the_blocks_that_run_it():
    """The kernel skips an op in a block whose fixed bits miss a control: with g global controls
    it runs in 2^-g of the blocks, and the model prices it so; a local control costs no less."""
    w = OP_PASSES[16][1]
    for controls, share in (((14, 15), 0.25), ((3, 15), 0.5), ((3, 4), 1.0)):
        c = Circuit(16)
        c.append(Gate(controlled(X, 2), (*controls, 7), "ccx"))
        d = stage_choice.decide(c, 3, 1.0, 1e6)
        assert d.plan.n_stages == 1
        assert d.predicted_ms == pytest.approx(stage_choice.STAGE_PASSES[16] + share * w)


def test_gates_sharing_only_a_control_need_no_order():
    """Two local qubits {0, 1}: CX(3 -> 2) waits for qubit 2; CX(3 -> 1) commutes with it (they
    share the control only) and runs in the first stage. An X on the control in between flips
    it: the CX after it keeps its place."""
    cx = controlled(X, 1)
    c = Circuit(4, [Gate(cx, (3, 0), "cx"), Gate(cx, (3, 2), "cx"), Gate(cx, (3, 1), "cx")])
    plan = plan_stages(c, 2)
    check_plan(c, plan)
    assert [op.gate for op in plan.stages[0].ops] == [0, 2]
    c = Circuit(4, [Gate(cx, (3, 0), "cx"), Gate(X, (3,), "x"), Gate(cx, (3, 1), "cx")])
    plan = plan_stages(c, 2)
    check_plan(c, plan)
    assert [op.gate for op in plan.stages[0].ops] == [0]


@pytest.mark.parametrize(("n", "depth", "seed", "local", "keep_low", "rotate"),
                         [(7, 8, 1, 4, 1, False), (9, 6, 2, 6, 3, True), (10, 5, 3, 7, 2, True),
                          (8, 10, 4, 5, 0, False)])
def test_stage_programs_of_controlled_circuits_equal_gate_at_a_time(n, depth, seed, local, keep_low, rotate):
    """The GPU program (emulated; complex128's tensor-core form: 2-qubit ops widened, pairs) and
    the CPU executor against the gate-at-a-time path."""
    c = controlled_random(n, depth, seed)
    c.global_phase = 0.3
    plan = plan_stages(c, local, keep_low=keep_low, rotate_low=rotate)
    check_plan(c, plan)
    psi = random_state(n, seed)
    want = gate_at_a_time(c, psi)
    for widen in (True, False):
        prog = build_program(plan, keep_low, fuse_qubits=3, block_qubits=3, widen=widen)
        out = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-13)


def test_cpu_stage_run_of_a_controlled_circuit_equals_the_gate_path():
    c = controlled_random(12, 8, seed=5)
    res = Simulator("native", device="cpu").run(c)
    assert res.metadata["stages"]["use"] and res.stats[0].info.path == "stage"
    ref = Simulator("native", device="cpu", plan=None, fuse=None).run(c)
    np.testing.assert_allclose(res.state.to_numpy(), ref.state.to_numpy(), rtol=0, atol=1e-13)


def test_commuting_blocks_pass_controlled_gates_by_their_controls():
    """A Toffoli with global controls applied before the open block it shares no qubit with (the
    block stays open: three Hadamards make one op); a phase on a Toffoli's control waits past it
    and joins the next block on that qubit."""
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    t = np.diag([1, np.exp(0.25j * np.pi)])
    ccx = controlled(X, 2)
    for gates, want in (([(h, (0,)), (ccx, (14, 15, 5)), (h, (1,)), (h, (2,))], [(1, (14, 15, 5)), (0, (0, 1, 2))]),
                        ([(t, (7,)), (ccx, (7, 14, 5)), (h, (7,))], [(1, (7, 14, 5)), (2, (7,))])):
        c = Circuit(16, [Gate(m, q, "g") for m, q in gates])
        plan = plan_stages(c, 12)  # (one stage, identity layout: slots are qubits)
        (stage,) = plan.stages
        blocked = commuting_blocks(stage, 12, 3)
        # (a block is named by its first non-diagonal gate)
        assert [(op.gate, op.positions) for op in blocked.ops] == want
        fused = type(plan)(**{**plan.__dict__, "stages": (blocked,)})
        psi = random_state(16, 1)
        for p in (plan, fused):
            prog = build_program(p, 0)
            out = to_logical(emulate(prog, psi.copy()), prog.final_phys)
            np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


@pytest.mark.parametrize("width", [2, 3])
def test_commuting_blocks_of_controlled_circuits_apply_the_same_unitary(width):
    c = controlled_random(10, 10, seed=6)
    plan = plan_stages(c, 6, keep_low=2)
    blocked = type(plan)(**{**plan.__dict__, "stages": tuple(commuting_blocks(s, 6, width) for s in plan.stages)})
    prog = build_program(blocked, 2)
    psi = random_state(10, 6)
    out = to_logical(emulate(prog, psi.copy()), prog.final_phys) * np.exp(1j * prog.global_phase)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)


def test_phases_split_by_a_toffoli_gather_into_one_run():
    """T(1), a Toffoli on target 5, T(2), H(1): both phases commute with the Toffoli (neither is on
    its target), so they go together just before the Hadamard, as its pre-phase: no phase op of
    their own (an op with controls takes no pre-phase, so the T before it was one)."""
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    t = np.diag([1, np.exp(0.25j * np.pi)])
    c = Circuit(16, [Gate(t, (1,), "t"), Gate(controlled(X, 2), (14, 15, 5), "ccx"), Gate(t, (2,), "t"),
                     Gate(h, (1,), "h")])
    plan = plan_stages(c, 12)
    check_plan(c, plan)
    assert [op.gate for op in plan.stages[0].ops] == [1, 0, 2, 3]
    prog = build_program(plan, 0)
    assert prog.n_ops == 2
    psi = random_state(16, 2)
    out = to_logical(emulate(prog, psi.copy()), prog.final_phys)
    np.testing.assert_allclose(out, gate_at_a_time(c, psi), rtol=0, atol=1e-13)
