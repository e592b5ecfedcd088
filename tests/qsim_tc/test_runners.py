"""The runners' one contract (circuit, start state, settings -> state, step records) and the
records every run path returns: the circuit's gates, the steps that applied them, their times."""

import numpy as np
import pytest

from circuits import Circuit, brickwork
from qsim_tc import Simulator, StateVector
from qsim_tc.runners.base import Start
from qsim_tc.runners.bounded import run_bounded
from qsim_tc.runners.gates import fused, run_gates
from qsim_tc.runners.records import GATE, STAGE

SWAP = np.eye(4)[[0, 2, 1, 3]]
CX = np.eye(4)[[0, 3, 2, 1]]  # control qubit 0 (the low bit of the matrix index), target 1


def _covered(steps) -> list[int]:
    return sorted(i for s in steps for i in s.gates)


def test_stage_run_records_the_input_gates_and_a_time_per_stage():
    c = brickwork(15, 2, 8, seed=3)
    c.add(SWAP, [0, 14], "swap")  # a SWAP a stage applies as a relabelling: still one of the stage's gates
    res = Simulator(device="cpu").run(c)
    assert res.step_kind == STAGE and res.input_gates == len(c)
    assert len(res.steps) == len(res.stats) == res.metadata["stages"]["stages"]
    assert _covered(res.steps) == list(range(len(c)))  # every input gate once
    assert all(s.kind == STAGE and s.method == "stage-cpu" and s.time_ms > 0 for s in res.steps)
    assert res.gate_time_ms == pytest.approx(sum(s.time_ms for s in res.steps))
    assert res.gate_time_ms <= res.wall_s * 1e3
    d = res.to_dict(gates=False, steps=True)
    assert d["n_gates"] == len(c) and d["n_steps"] == len(res.steps) and "gates" not in d


def test_fused_gate_run_records_the_blocks_input_gates():
    c = brickwork(8, 2, 4, seed=1)
    res = Simulator("native", device="cpu", plan=None, fuse=4).run(c)
    assert res.step_kind == GATE and res.input_gates == len(c) > len(res.steps) == len(res.stats)
    assert _covered(res.steps) == list(range(len(c)))
    for step, stat in zip(res.steps, res.stats):
        assert step.qubits == stat.qubits and step.time_ms == stat.info.time_ms and step.method == "native"
        assert len(step.gates) == (1 if not stat.name.startswith("fused") else int(stat.name[5:]))


def test_progress_of_a_stage_run_counts_input_gates():
    c = brickwork(15, 2, 8, seed=3)
    calls = []
    res = Simulator(device="cpu").run(c, progress=lambda done, total: calls.append((done, total)))
    assert len(calls) == len(res.steps) > 1  # once a stage
    assert calls[-1] == (len(c), len(c)) and all(t == len(c) for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_a_runner_alone_gives_the_simulators_state():
    c = brickwork(8, 3, 4, seed=2)
    sim = Simulator("native", device="cpu", plan=None, fuse=3)
    applied, covers, _ = fused(c, sim.fuse, sim.settings, lambda: sim.cost_table)
    out = run_gates(applied, Start(c.n_qubits, sim.settings), sim.settings, covers=covers)
    ref = sim.run(c)
    assert np.array_equal(out.state.to_numpy(), ref.state.to_numpy())
    assert [s.gates for s in out.steps] == [s.gates for s in ref.steps]


def test_start_state_is_copied_unless_in_place_and_checked():
    sim = Simulator("native", device="cpu")
    init = StateVector(4, dtype=np.complex128, device="cpu")
    assert Start(4, sim.settings, init).make() is not init
    assert Start(4, sim.settings, init, in_place=True).make() is init
    with pytest.raises(ValueError, match="initial_state has 4 qubits, the circuit 5"):
        Start(5, sim.settings, init).make()


def test_bounded_run_needs_its_bound_and_runs_the_bounded_engine():
    c = brickwork(8, 2, 3, seed=0)
    sim = Simulator("native", device="cpu")
    with pytest.raises(ValueError, match="workspace_bytes"):
        run_bounded(c, Start(8, sim.settings), sim.settings, None)
    res = Simulator("native", device="cpu", workspace_bytes=1 << 14).run(c)
    assert res.step_kind == GATE and _covered(res.steps) == list(range(len(c)))
    assert not res.state._phys.double_buffer
    auto = Simulator(device="cpu", fuse=None, workspace_bytes=1 << 16).run(c)  # "auto" on the bounded engine
    assert "auto" in auto.metadata and not auto.state._phys.double_buffer
    assert np.allclose(auto.state.to_numpy(), res.state.to_numpy(), atol=1e-12)


def test_distributed_run_records_its_stages():
    mpi = pytest.importorskip("mpi4py.MPI")
    from qsim_tc.runners.distributed import run_distributed_steps

    c = Circuit(3)
    c.add(np.array([[1, 1], [1, -1]]) / np.sqrt(2), [0], "h")
    c.add(CX, [0, 1], "cx").add(CX, [1, 2], "cx")
    state, steps = run_distributed_steps(c, mpi.COMM_SELF, backend="native")
    assert _covered(steps) == [0, 1, 2] and all(s.kind == STAGE and s.time_ms >= 0 for s in steps)
    assert abs(state.amplitude(0) - 2 ** -0.5) < 1e-12 and abs(state.amplitude(7) - 2 ** -0.5) < 1e-12
