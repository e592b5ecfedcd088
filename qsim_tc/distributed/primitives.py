"""Qiskit's Sampler and Estimator over a state spread across MPI ranks (collective: every rank
calls ``run`` with the same PUBs and gets the same result).

They are :class:`qsim_tc.qiskit.Sampler` and :class:`qsim_tc.qiskit.Estimator` (the same PUBs,
broadcasting, data fields and metadata) whose states come from
:func:`~qsim_tc.distributed.run_distributed`, one run per parameter binding; the state is never
gathered:

* the Sampler's shots are split between the ranks by their slices' weights and drawn on each
  rank from its own slice (:meth:`~qsim_tc.distributed.DistributedState.sample`); only the
  samples travel;
* the Estimator's terms of all observables of a binding are grouped by X mask, one pass over each
  slice a mask, and every term's share is summed across ranks in one reduction
  (:meth:`~qsim_tc.distributed.DistributedState.expectation_values`).

    from mpi4py import MPI
    from qsim_tc.distributed.primitives import DistributedEstimator
    evs = DistributedEstimator(MPI.COMM_WORLD).run([(qc, obs)]).result()[0].data.evs

Needs qiskit and mpi4py; run under mpiexec.
"""

from __future__ import annotations

import numpy as np

from circuits.qiskit_import import from_qiskit
from qsim_tc.distributed.run import check_options, run_distributed
from qsim_tc.qiskit import Estimator, Sampler

__all__ = ["DistributedEstimator", "DistributedSampler"]


class _Distributed:
    """What both primitives share: the communicator and each binding's distributed run."""

    def _init_distributed(self, comm, device, run_options) -> None:
        if not (hasattr(comm, "Get_size") and hasattr(comm, "Get_rank")):
            raise TypeError(f"comm must be an mpi4py communicator, got {type(comm).__name__}")
        check_options(device, run_options.get("exchange_plan", "fewest"))  # here, not in a run's abort guard
        self._comm = comm
        self._device = device
        self._run_options = run_options

    @property
    def comm(self):
        """The communicator whose ranks hold the states."""
        return self._comm

    def _generator(self) -> np.random.Generator:
        """The PUB's generator, the same on every rank: without a seed, rank 0's fresh entropy
        (each rank's own would give each rank other draws, such as an Estimator's noise)."""
        if self._seed is not None:
            return super()._generator()
        entropy = np.random.SeedSequence().entropy if self._comm.Get_rank() == 0 else None
        return np.random.default_rng(self._comm.bcast(entropy, root=0))

    def _batched(self, circuit, n_bindings: int):
        return None  # every binding is a distributed run of its own

    def _distributed_state(self, bound_circuit):
        circuit = from_qiskit(bound_circuit)
        sim = self._simulator
        state = run_distributed(circuit, self._comm, backend=sim.backend, device=self._device, fuse=sim.fuse,
                                precision=sim.precision, **self._run_options)
        if getattr(self, "_errors", None) is not None:
            self._errors.append(state.error)
        return state, circuit

    def _sim_metadata(self) -> dict:
        return {**super()._sim_metadata(), "device": self._device, "ranks": self._comm.Get_size()}


class _Sampling:
    """A distributed state seen as the Sampler reads a StateVector: ``sample(shots, seed, qubits)``."""

    def __init__(self, state):
        self._state = state

    def sample(self, shots: int, seed=None, qubits=()) -> np.ndarray:
        """``shots`` draws of ``qubits`` (bit i of a draw is ``qubits[i]``), in random order, the
        same on every rank: rank 0's generator seeds the draws and their order."""
        comm = self._state.comm
        seeds = None
        if comm.Get_rank() == 0:
            rng = np.random.default_rng(seed)
            seeds = [int(s) for s in rng.integers(1 << 62, size=2)]
        seeds = comm.bcast(seeds, root=0)
        draws = self._state.sample(int(shots), seed=seeds[0])  # rank by rank: shuffled below
        draws = draws[np.random.default_rng(seeds[1]).permutation(draws.size)]
        out = np.zeros_like(draws)
        for i, q in enumerate(qubits):
            out |= ((draws >> q) & 1) << i
        return out


class DistributedSampler(_Distributed, Sampler):
    """A ``BaseSamplerV2`` over the ranks of ``comm`` (collective).

    Args:
        comm: an mpi4py communicator of 2^g ranks.
        device: ``"cpu"`` or ``"gpu"`` (one GPU a rank), as :func:`run_distributed` takes it.
        backend, fuse, numeric_precision, default_shots, seed: as for :class:`qsim_tc.qiskit.Sampler`
            (the same seed on every rank gives every rank the same samples).
        **run_options: further options of :func:`run_distributed` (``piece_bytes``, ``exchange_plan``).
    """

    def __init__(self, comm, *, device: str = "cpu", backend: str = "auto", fuse="auto", default_shots: int = 1024,
                 seed=None, numeric_precision: str | None = None, **run_options):
        super().__init__(backend=backend, device="cpu", fuse=fuse, default_shots=default_shots, seed=seed,
                         numeric_precision=numeric_precision)
        self._init_distributed(comm, device, run_options)

    def _states_of(self, qc, params):
        bound = params.bind_all(qc)
        for index, bound_circuit in np.ndenumerate(bound):
            state, circuit = self._distributed_state(bound_circuit)
            yield index, _Sampling(state), circuit.measured
            state.close()


class DistributedEstimator(_Distributed, Estimator):
    """A ``BaseEstimatorV2`` over the ranks of ``comm`` (collective); exact Pauli expectation values.

    Args:
        comm: an mpi4py communicator of 2^g ranks.
        device: ``"cpu"`` or ``"gpu"`` (one GPU a rank), as :func:`run_distributed` takes it.
        backend, fuse, numeric_precision, default_precision, seed: as for
            :class:`qsim_tc.qiskit.Estimator`.
        **run_options: further options of :func:`run_distributed` (``piece_bytes``, ``exchange_plan``).
    """

    def __init__(self, comm, *, device: str = "cpu", backend: str = "auto", fuse="auto",
                 default_precision: float = 0.0, seed=None, numeric_precision: str | None = None, **run_options):
        super().__init__(backend=backend, device="cpu", fuse=fuse, default_precision=default_precision, seed=seed,
                         numeric_precision=numeric_precision)
        self._init_distributed(comm, device, run_options)

    def _values(self, bound_circuit, observables) -> np.ndarray:
        """The real expectation values of ``observables`` ({label: coefficient} each) on the
        circuit's distributed state: every observable's terms in one pass per X mask."""
        state, _ = self._distributed_state(bound_circuit)
        values = state.expectation_values(observables, "observables").real
        state.close()
        return values
