"""An interruption (Ctrl-C: KeyboardInterrupt, or SystemExit) while a run changes a state in place
leaves that state marked invalid on every engine path, and the interruption itself reaches the
caller unchanged (it is not turned into another error). A run on a copy leaves its input as it was."""

import numpy as np
import pytest

import gemm
import qsim_tc.stages.cpu as stages_cpu
from circuits import brickwork
from qsim_tc import Simulator, StateVector
from qsim_tc.errors import StateInvalidError
from qsim_tc.stages.plan import plan_stages

N = 8


def _interrupt_after(monkeypatch, module, name: str, calls: int, exc=KeyboardInterrupt):
    """Replace ``module.name`` by a wrapper that runs the real function ``calls`` times, then runs
    it once more and raises ``exc`` (the interruption arrives after the call wrote its output)."""
    real = getattr(module, name)
    count = [0]

    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        count[0] += 1
        if count[0] > calls:
            raise exc()
        return out

    monkeypatch.setattr(module, name, wrapper)
    return count


def _start():
    rng = np.random.default_rng(5)
    psi = rng.normal(size=1 << N) + 1j * rng.normal(size=1 << N)
    return StateVector.from_array(psi / np.linalg.norm(psi), device="cpu")


SIMULATORS = {
    "stages": lambda: Simulator("native", device="cpu", plan="always"),
    "gates": lambda: Simulator("native", device="cpu", plan=None, fuse=None),
    "auto": lambda: Simulator(device="cpu", plan=None, fuse=None),
    "bounded": lambda: Simulator("native", device="cpu", plan=None, fuse=None, workspace_bytes=4096),
}


def _patch(path: str, monkeypatch, exc=KeyboardInterrupt):
    if path == "stages":
        return _interrupt_after(monkeypatch, stages_cpu, "_run_stage", 0, exc)
    return _interrupt_after(monkeypatch, gemm, "matmul", 2, exc)


@pytest.mark.parametrize("path", sorted(SIMULATORS))
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_in_place_run_marks_the_state_invalid(path, exc, monkeypatch):
    sim = SIMULATORS[path]()
    circ = brickwork(N, 2, 6, seed=2)
    state = _start()
    count = _patch(path, monkeypatch, exc)
    with pytest.raises(exc):
        sim.run(circ, initial_state=state, in_place=True)
    assert count[0] >= 1  # the interruption came from inside the run
    assert not state.is_valid
    with pytest.raises(StateInvalidError):
        state.to_numpy()
    state.reset()  # usable again after a reset
    assert state.is_valid and abs(state.amplitude(0) - 1) == 0


@pytest.mark.parametrize("path", sorted(SIMULATORS))
def test_an_interrupted_run_on_a_copy_leaves_the_input_unchanged(path, monkeypatch):
    sim = SIMULATORS[path]()
    state = _start()
    before = state.to_numpy().copy()
    _patch(path, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sim.run(brickwork(N, 2, 6, seed=2), initial_state=state)
    assert state.is_valid and np.array_equal(state.to_numpy(), before)


def test_the_cpu_stage_executor_marks_its_own_state_when_interrupted_mid_stage(monkeypatch):
    # called directly (no Simulator): the executor itself records the half-done stage
    from qsim_tc.engine.storage import PhysicalState

    circ = brickwork(N, 2, 6, seed=2)
    phys = PhysicalState(_start().to_numpy(), gemm.resolve_device("cpu"))
    _interrupt_after(monkeypatch, stages_cpu, "_run_stage", 0)
    with pytest.raises(KeyboardInterrupt):
        stages_cpu.run_stages(phys, plan_stages(circ, 4))
    assert phys.invalid is not None and "half-way" in phys.invalid


def test_an_error_before_any_change_leaves_an_in_place_state_valid():
    # a refused run (here: a circuit of another width) changes nothing and marks nothing
    state = _start()
    before = state.to_numpy().copy()
    with pytest.raises(ValueError):
        Simulator("native", device="cpu").run(brickwork(N + 1, 2, 2, seed=1), initial_state=state, in_place=True)
    assert state.is_valid and np.array_equal(state.to_numpy(), before)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["stage-kernel", "gates"])
def test_an_interrupted_in_place_gpu_run_marks_the_state_invalid(where, monkeypatch):
    import qsim_tc.stages.gpu as stages_gpu

    n = 14
    circ = brickwork(n, 2, 8, seed=3)
    rng = np.random.default_rng(1)
    psi = rng.normal(size=1 << n) + 1j * rng.normal(size=1 << n)
    state = StateVector.from_array(psi / np.linalg.norm(psi), device="gpu")
    if where == "stage-kernel":
        sim = Simulator("native", device="gpu", plan="always")
        count = _interrupt_after(monkeypatch, stages_gpu, "run_stage", 1)
    else:
        sim = Simulator("native", device="gpu", plan=None, fuse=None, small_gate_kernel=False)
        count = _interrupt_after(monkeypatch, gemm, "matmul", 2)
    with pytest.raises(KeyboardInterrupt):
        sim.run(circ, initial_state=state, in_place=True)
    assert count[0] >= 1 and not state.is_valid
