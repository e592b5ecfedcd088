"""A circuit on a :class:`~qsim_tc.distributed.state.DistributedState`: the distributed plan decides
which qubits are local per stage, exchanges bring them in, and each stage's gates run on every
rank's slice as an ordinary L-qubit circuit (any backend, fusion, stages or GPU engine of this
package).

The plan is :func:`qsim_tc.distributed.plan.plan_distributed` with L = N - g local qubits (the
stage planner's stages, its initial layout and exchanges chosen to move the least): a stage's
global-local index-bit swaps are one all-to-all, or free relabels where both qubits are still
|0>, and every gate of a stage needs only local qubits for what it mixes. A gate's fixed (global)
bits are read from the rank: a global control enables or skips the gate on the whole slice; a
diagonal's global bits select a slice of its diagonal (a phase on the whole slice when none of
its bits is local).
"""

from __future__ import annotations

import math
import time

import numpy as np

from circuits import Circuit, Gate
from qsim_tc import run_error
from qsim_tc.distributed.abort import abort_on_error
from qsim_tc.distributed.plan import plan_distributed
from qsim_tc.distributed.state import DistributedState
from qsim_tc.stages.plan import RELABEL
from qsim_tc.stages.structure import CONTROLLED, DIAGONAL, classify, controlled_matrix


def run_distributed(circuit: Circuit, comm, *, backend: str = "auto", device="cpu", dtype=None,
                    piece_bytes: int | None = None, on_stage=None, exchange_plan: str = "fewest",
                    **simulator_options) -> DistributedState:
    """Simulate ``circuit`` from |0...0> over the ranks of ``comm`` (collective).

    Args:
        circuit: the circuit (every rank passes the same one).
        comm: an mpi4py communicator of 2^g ranks, 2^g < 2^N.
        backend, simulator_options: the Simulator each rank runs its stages with.
        device: ``"cpu"`` (numpy slices, MPI exchange) or ``"gpu"`` (one GPU per rank: the
            rank's index among the ranks of its node picks the GPU; NCCL exchange).
        dtype: the state dtype, complex64 or complex128 (default: the Simulator's); with
            ``backend="auto"`` and no ``precision`` option, the precision follows it.
        piece_bytes: the largest message of a swap (see :class:`DistributedState`).
        exchange_plan: ``"fewest"`` (default): the plan with the fewest data-moving exchanges
            (:func:`~qsim_tc.distributed.plan.plan_distributed`: free relabels of qubits still
            |0>, the initial layout chosen, exchanges widened); ``"stages"``: the stage planner's
            plan as it is (identity layout, every swap an exchange), for comparison.
        on_stage: called as ``on_stage(index, gates, seconds)`` after each stage: the indices of
            the circuit's gates it applied and this rank's seconds in it (swaps included).

    Returns:
        This rank's DistributedState (its ``phys`` the final layout; ``exchanges``, ``swaps``
        and ``bytes_sent`` count the exchanges, the index bits they swapped and the bytes sent;
        ``compute_s`` and ``exchange_s`` are the seconds in the stages' runs and in swaps).

    An exception on any rank (a bad argument on one rank only, a fault, Ctrl-C) aborts every rank
    of ``comm`` (MPI_Abort): the others would otherwise wait forever in the next exchange.
    """
    with abort_on_error(comm):
        return _run(circuit, comm, backend=backend, device=device, dtype=dtype, piece_bytes=piece_bytes,
                    on_stage=on_stage, exchange_plan=exchange_plan, **simulator_options)


def _run(circuit, comm, *, backend, device, dtype, piece_bytes, on_stage, exchange_plan,
         **simulator_options) -> DistributedState:
    from qsim_tc import Simulator, StateVector  # noqa: PLC0415 - the package imports this module lazily

    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a circuits.Circuit, got {type(circuit).__name__}")
    check_options(device, exchange_plan)
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype not in (np.complex64, np.complex128):
            raise ValueError(f"dtype must be complex64 or complex128, got {dtype}")
        if backend == "auto" and "precision" not in simulator_options:  # auto's precision follows the state's
            simulator_options["precision"] = "single" if dtype == np.complex64 else "double"
    device = _rank_device(comm, device)
    sim = Simulator(backend, device=device, **simulator_options)
    if dtype is not None and dtype != sim.dtype:
        raise ValueError(f"dtype is {dtype}, but backend {backend!r} keeps {sim.dtype} states: use backend='auto' "
                         f"(its precision follows dtype) or a {dtype} backend")
    _load_cost_table(sim, comm)
    state = DistributedState(comm, circuit.n_qubits, dtype=dtype or sim.dtype, device=device,
                             piece_bytes=piece_bytes)
    big_l = state.local_qubits
    structures = [classify(g.matrix) for g in circuit.gates]
    for g, st in zip(circuit.gates, structures):
        relabel = st.qubit_swap is not None and st.n_bits == 2  # a SWAP renames, it mixes nothing
        mixes = 0 if st.kind == DIAGONAL or relabel else len(st.targets)
        if mixes > big_l:
            raise ValueError(f"gate {g.name!r} on qubits {g.qubits} mixes {mixes} qubits, but each of the "
                             f"{comm.Get_size()} ranks holds {big_l} local qubits of {circuit.n_qubits}: "
                             f"use fewer ranks")
    plan = plan_distributed(circuit, big_l, structures=structures, search=exchange_plan == "fewest")
    # The plan's bit numbers follow its own layout; the state's differs once a stage's run leaves
    # its slice permuted (absorbed, not undone), so both are followed through logical qubits.
    state.phys = list(plan.initial_layout)  # |0...0> in any layout is the same amplitudes
    planned = list(plan.initial_layout)  # the plan's physical bit -> logical qubit
    labels, bounds, estimates = [], [], []  # per stage, this rank's error bound (run_error)
    for index, stage in enumerate(plan.stages):
        labels.append(f"stage {index}")
        bounds.append(0.0)
        estimates.append(0.0)
        t_stage = time.perf_counter()
        free = set(plan.relabels[index])
        bits = [b for pair in stage.swaps for b in pair]
        if len(set(bits)) == len(bits):  # independent swaps: all at once (global bits agree in both layouts)
            for p, g in stage.swaps:
                if (p, g) in free:  # both qubits still |0>: renamed, nothing moves
                    state.relabel(state.position(planned[p]), g)
            state.swap_many([(state.position(planned[p]), g) for p, g in stage.swaps if (p, g) not in free])
            for p, g in stage.swaps:
                planned[p], planned[g] = planned[g], planned[p]
        else:
            for p, g in stage.swaps:
                if (p, g) in free:
                    state.relabel(state.position(planned[p]), g)
                else:
                    state.swap(state.position(planned[p]), g)
                planned[p], planned[g] = planned[g], planned[p]
        local = Circuit(big_l)
        scale = 1.0 + 0.0j
        for op in stage.ops:
            qubits = circuit.gates[op.gate].qubits
            if op.kind == RELABEL:
                state.relabel(*(state.position(q) for q in qubits))
                a, b = op.positions
                planned[a], planned[b] = planned[b], planned[a]
                continue
            gate, factor = _local_gate(op, [state.position(q) for q in qubits], state)
            scale *= factor
            if gate is not None:
                local.append(gate)
        # whether a stage runs is the same on every rank (take_local is collective), even where
        # this rank's part of it is empty (a global control that is 0 here, a phase-only diagonal)
        if any(op.kind != RELABEL for op in stage.ops):
            t0 = time.perf_counter()
            start = StateVector.from_array(state.data, copy=False, device=device)
            result = sim.run(local, initial_state=start, in_place=True)
            state.take_local(result.state)
            state.compute_s += time.perf_counter() - t0  # the run ends synchronised
            err = result.error
            bounds[-1] = None if err is None else err.l2_bound
            estimates[-1] = None if err is None else err.l2_estimate
        if scale != 1.0:
            state.data *= state.data.dtype.type(scale)
            if bounds[-1] is not None:  # (the slice's norm: at most 1 plus the errors so far)
                sb, se = run_error.scalar_bound(state.data.dtype, 1.0 + sum(x for x in bounds if x is not None))
                bounds[-1] += sb
                estimates[-1] = math.hypot(estimates[-1], se)
        if on_stage is not None:
            on_stage(index, tuple(op.gate for op in stage.ops), time.perf_counter() - t_stage)
    if circuit.global_phase:
        state.data *= state.data.dtype.type(np.exp(1j * circuit.global_phase))
        labels.append("global phase")
        sb, se = run_error.scalar_bound(state.data.dtype, 1.0 + sum(x for x in bounds if x is not None))
        bounds.append(sb)
        estimates.append(se)
    state.error = run_error.distributed_report(comm, labels, bounds, estimates)
    return state


def check_options(device, exchange_plan: str = "fewest") -> None:
    """Raise ValueError unless ``device`` and ``exchange_plan`` are values :func:`run_distributed`
    takes (checked before any collective, so that a bad value raises on every rank alike)."""
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu' for a distributed run, got {device!r}")
    if exchange_plan not in ("fewest", "stages"):
        raise ValueError(f"exchange_plan must be 'fewest' or 'stages', got {exchange_plan!r}")


def _rank_device(comm, device) -> str:
    """``"cpu"``, or ``"gpu"`` with this rank's GPU made current before anything touches a GPU:
    the rank's index among the ranks of its node picks it (one GPU per rank; NCCL refuses two
    ranks on one GPU). ``"auto"``: the GPU when this node has one for every rank on it."""
    if device == "cpu":
        return device
    from mpi4py import MPI  # noqa: PLC0415

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, per_node = node.Get_rank(), node.Get_size()
    node.Free()
    try:
        import cupy  # noqa: PLC0415 - GPU only

        n_gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no cupy, or no CUDA driver
        n_gpus = 0
    if per_node > n_gpus:
        if device == "auto":
            return "cpu"
        raise ValueError(f"device='gpu': {per_node} ranks on this node but {n_gpus} GPUs; start one rank per GPU")
    cupy.cuda.Device(local_rank).use()
    return "gpu"


def _load_cost_table(sim, comm) -> None:
    """Look the device's cost table up on rank 0 first: where none is cached it is measured once
    (a GPU's brief calibration) and stored, and the other ranks then read it instead of all
    measuring at once and writing the same file."""
    if sim.backend != "auto" and sim.fuse != "auto":
        return
    if comm.Get_rank() == 0:
        sim.cost_table  # noqa: B018 - the lookup (and calibration) is the point
    comm.Barrier()
    if comm.Get_rank() != 0:
        sim.cost_table  # noqa: B018


def _local_gate(op, pos: list[int], state: DistributedState):
    """(the op as a gate on local bits or None, a phase factor for the whole slice); ``pos``: the
    physical bit of each of the gate's qubits in the state's layout."""
    s = op.structure
    big_l = state.local_qubits
    if op.kind == DIAGONAL:
        local = [j for j, p in enumerate(pos) if p < big_l]
        fixed = sum(state.rank_bit(p) << j for j, p in enumerate(pos) if p >= big_l)
        idx = [fixed | sum(((v >> m) & 1) << j for m, j in enumerate(local)) for v in range(1 << len(local))]
        diag = np.asarray(s.diagonal)[idx]
        if not local:
            return None, complex(diag[0])
        return Gate(np.diag(diag), tuple(pos[j] for j in local), "diag", check_unitary=False), 1.0
    if op.kind == CONTROLLED:
        controls = list(s.controls)
        if any(pos[b] >= big_l and not state.rank_bit(pos[b]) for b in controls):
            return None, 1.0  # a fixed control is 0 on this rank
        bits = [b for b in controls if pos[b] < big_l] + list(s.targets)
        return Gate(controlled_matrix(s, bits), tuple(pos[b] for b in bits), "cu", check_unitary=False), 1.0
    if any(p >= big_l for p in pos):
        raise AssertionError("the planner put a dense gate on a global qubit")
    return Gate(np.asarray(s.target_matrix), tuple(pos), "u", check_unitary=False), 1.0
