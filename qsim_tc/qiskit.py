"""Qiskit primitives backed by qsim-tc: ``Sampler`` (BaseSamplerV2) and ``Estimator`` (BaseEstimatorV2).

They follow the contracts of Qiskit's ``StatevectorSampler`` and ``StatevectorEstimator``: the
same PUBs (circuit, parameter values, shots or observables and precision), the same parameter
broadcasting, the same ``DataBin`` fields (one ``BitArray`` per classical register; ``evs`` and
``stds``) and metadata keys. The state comes from :class:`qsim_tc.Simulator` on any backend and
device, after :func:`circuits.from_qiskit`. The Sampler also runs dynamic circuits (a mid-circuit
measurement, a reset, classical control) as ``QsimTcBackend`` does, one program with shot
branching per binding (:mod:`qsim_tc.dynamic`); the Estimator needs a unitary circuit and
rejects them with a ``circuits.CircuitError`` that names the instruction.

    from qsim_tc.qiskit import Sampler, Estimator
    result = Sampler(seed=7).run([(qc, params)], shots=1000).result()

Expectation values of Pauli sums are computed on the state vector itself
(:mod:`qsim_tc.observables`): a Pauli string is a bit flip (X part) and a sign (Z part) times
i^(number of Y); terms that flip the same bits share one pass over the state, in which their
signs are one small matrix product. No 2^N x 2^N operator is ever built.

A PUB with several parameter sets of a unitary circuit runs through one plan for all of them
(:mod:`qsim_tc.batched`: a block of states evolved together; the Estimator then reads the whole
block in one pass per X mask), where the simulator computes in the state's own arithmetic
(``backend`` "auto", "native" or "native32"); other backends run each bound circuit.

``QsimTcBackend`` (:mod:`qsim_tc.qiskit_backend`) is the BackendV2 for ``transpile`` and
``backend.run``, with dynamic circuits (:mod:`qsim_tc.dynamic`).

Needs qiskit (``pip install qsim-tc[qiskit]``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable

import numpy as np

from circuits.qiskit_import import from_qiskit, require_qiskit

require_qiskit("qsim_tc.qiskit")

from qiskit.primitives import BaseEstimatorV2, BaseSamplerV2  # noqa: E402
from qiskit.primitives.containers import (  # noqa: E402
    BitArray,
    DataBin,
    PrimitiveResult,
    PubResult,
    SamplerPubResult,
)
from qiskit.primitives.containers.estimator_pub import EstimatorPub  # noqa: E402
from qiskit.primitives.containers.sampler_pub import SamplerPub  # noqa: E402
from qiskit.primitives.primitive_job import PrimitiveJob  # noqa: E402

from circuits import CircuitError  # noqa: E402
from qsim_tc.batched import BatchedCircuit  # noqa: E402
from qsim_tc.dynamic import DYNAMIC_NO_BOUND, Runner, compile_circuit, needs_runner  # noqa: E402
from qsim_tc.observables import collect, term_values  # noqa: E402
from qsim_tc.qiskit_backend import QsimTcBackend, QsimTcJob  # noqa: E402
from qsim_tc.simulator import Simulator  # noqa: E402
from qsim_tc.state import SAMPLE_BYTES_PER_SHOT, StateVector, check_shots  # noqa: E402

__all__ = ["Estimator", "QsimTcBackend", "QsimTcJob", "Sampler", "pauli_expectation_values"]

# elements of one pass over the state in the expectation value (host or device)
_CHUNK = {"cpu": 1 << 20, "gpu": 1 << 24}


class _Backed:
    """The simulator shared by both primitives."""

    def _init_simulator(self, backend, device, fuse, numeric_precision, backend_options, seed) -> None:
        self._simulator = Simulator(backend, device=device, precision=numeric_precision, fuse=fuse, **backend_options)
        self._seed = seed

    @property
    def seed(self) -> np.random.Generator | int | None:
        """The seed or generator of the primitive's randomness (the Sampler's samples, the
        Estimator's precision noise)."""
        return self._seed

    def _submit(self, pubs: list) -> PrimitiveJob:
        job = PrimitiveJob(self._run, pubs)
        job._submit()
        return job

    def _run(self, pubs: list) -> PrimitiveResult:
        return PrimitiveResult([self._run_pub(pub) for pub in pubs],
                               metadata={"version": 2, "simulator": self._sim_metadata()})

    @property
    def simulator(self) -> Simulator:
        """The :class:`qsim_tc.Simulator` that runs the circuits."""
        return self._simulator

    def _generator(self) -> np.random.Generator:
        """The random generator of one PUB's draws (from :attr:`seed`)."""
        return np.random.default_rng(self._seed)

    def _state(self, bound_circuit) -> tuple[StateVector, object]:
        circuit = from_qiskit(bound_circuit)
        result = self._simulator.run(circuit)
        if getattr(self, "_errors", None) is not None:  # a PUB being run: its metadata reports them
            self._errors.append(result.error)
        return result.state, circuit

    def _take_error(self, batched) -> dict:
        """The error bound of the PUB's states for its metadata: the bindings' largest (one run per
        binding), or "no bound" where the bindings ran batched (that path keeps no per-step record)."""
        errors, self._errors = getattr(self, "_errors", None) or [], None
        if batched is not None:
            return {"l2_bound": None, "no_bound": "the bindings ran as one batched plan, which reports no bound"}
        if not errors or any(e is None for e in errors):
            return {"l2_bound": None, "no_bound": "a run reported no error bound"}
        worst = max(errors, key=lambda e: math.inf if e.l2_bound is None else e.l2_bound)
        return {**worst.to_dict(), "bindings": len(errors)}

    def _batched(self, circuit, n_bindings: int):
        """The circuit prepared once for its bindings (:class:`qsim_tc.batched.BatchedCircuit`), where
        that applies: several bindings and a backend that computes in the state's own arithmetic
        (``auto``, ``native``, ``native32``); else None (each binding runs through the Simulator)."""
        if n_bindings < 2 or not circuit.num_parameters or self._simulator.backend not in ("auto", "native",
                                                                                          "native32"):
            return None
        try:
            return BatchedCircuit(circuit)
        except CircuitError:
            return None  # (the Simulator's path reports what it cannot run)

    def _sim_metadata(self) -> dict:
        sim = self._simulator
        return {"backend": sim.backend, "device": sim.device.name, "fuse": sim.fuse, "numeric_precision": sim.precision}


class Sampler(_Backed, BaseSamplerV2):
    """A ``BaseSamplerV2`` whose states come from qsim-tc.

    Args:
        backend: ``"auto"`` (per block the fastest method of ``numeric_precision`` on this device)
            or a GEMM method (``gemm.methods()``), as for :class:`qsim_tc.Simulator`.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        numeric_precision: with ``backend="auto"``: ``"double"`` (None: the default) or
            ``"single"``; the Simulator's ``precision=``.
        fuse: gate fusion: ``"auto"`` (default), None or an int d.
        default_shots: shots of a PUB that does not give its own.
        seed: an int or a ``numpy.random.Generator``. An int seeds one generator per PUB, used
            for all its parameter sets in order (so repeated runs give the same bits); a
            Generator is drawn from as it is.
        **backend_options: options of the backend (``splits=``, ``threshold=``...).
    """

    def __init__(self, *, backend: str = "auto", device="auto", fuse="auto", default_shots: int = 1024,
                 seed: np.random.Generator | int | None = None, numeric_precision: str | None = None,
                 **backend_options):
        if isinstance(default_shots, bool) or not isinstance(default_shots, (int, np.integer)) or default_shots < 1:
            raise ValueError(f"default_shots must be a positive int, got {default_shots!r}")
        self._init_simulator(backend, device, fuse, numeric_precision, backend_options, seed)
        self._default_shots = int(default_shots)

    @property
    def default_shots(self) -> int:
        """Shots of PUBs that give none."""
        return self._default_shots

    def run(self, pubs: Iterable, *, shots: int | None = None) -> PrimitiveJob:
        """Sample each PUB ``(circuit, parameter_values?, shots?)``; return a job of a PrimitiveResult."""
        if shots is None:
            shots = self._default_shots
        coerced = [SamplerPub.coerce(pub, shots) for pub in pubs]
        for i, pub in enumerate(coerced):  # before any simulation: every PUB's results must fit
            n_bits = pub.circuit.num_clbits
            per_shot = SAMPLE_BYTES_PER_SHOT + 2 * n_bits + math.prod(pub.shape) * ((n_bits + 7) // 8)
            check_shots(pub.shots, f"PUB {i}'s shots", bytes_per_shot=per_shot)
        if any(len(pub.circuit.cregs) == 0 for pub in coerced):
            warnings.warn("One of your circuits has no output classical registers and so the result will be "
                          "empty. Did you mean to add measurement instructions?", UserWarning, stacklevel=2)
        return self._submit(coerced)

    def _run_pub(self, pub: SamplerPub) -> SamplerPubResult:
        self._errors = []
        qc = pub.circuit
        rng = np.random.default_rng(self._seed)
        registers = [(creg.name, creg.size, [qc.find_bit(bit).index for bit in creg]) for creg in qc.cregs]
        params = pub.parameter_values
        arrays = {name: np.zeros(params.shape + (pub.shots, (size + 7) // 8), dtype=np.uint8)
                  for name, size, _ in registers}
        if needs_runner(qc):
            return self._run_dynamic_pub(pub, rng, registers, arrays)
        for index, state, measured in self._states_of(qc, params):
            clbit_qubit = {c: q for q, c in measured}
            qargs = sorted(set(clbit_qubit.values()))
            slot = {q: i for i, q in enumerate(qargs)}
            samples = state.sample(pub.shots, seed=rng, qubits=qargs) if qargs else np.zeros(pub.shots, np.int64)
            for name, size, clbits in registers:
                bits = np.zeros((pub.shots, size), dtype=bool)
                for k, cb in enumerate(clbits):
                    if cb in clbit_qubit:
                        bits[:, k] = (samples >> slot[clbit_qubit[cb]]) & 1
                arrays[name][index] = BitArray.from_bool_array(bits, order="little").array
        data = {name: BitArray(arrays[name], size) for name, size, _ in registers}
        return SamplerPubResult(DataBin(**data, shape=pub.shape),
                                metadata={"shots": pub.shots, "circuit_metadata": qc.metadata,
                                          "error": self._take_error(self._batched(qc, params.size))})

    def _run_dynamic_pub(self, pub: SamplerPub, rng, registers, arrays) -> SamplerPubResult:
        """A PUB whose circuit measures mid-circuit, resets or branches on classical bits: each
        binding runs as a program with shot branching (:class:`qsim_tc.dynamic.Runner`, as the
        backend runs it), and each shot's classical bits fill the registers."""
        qc = pub.circuit
        for index, bound in np.ndenumerate(pub.parameter_values.bind_all(qc)):
            clbits = Runner(self._simulator, rng).run(compile_circuit(bound), pub.shots).clbits
            for name, size, cbs in registers:
                bits = np.zeros((pub.shots, size), dtype=bool)
                for k, cb in enumerate(cbs):
                    bits[:, k] = ((clbits >> cb) & 1).astype(bool)
                arrays[name][index] = BitArray.from_bool_array(bits, order="little").array
        self._errors = None  # (no per-run error reports to gather: see the metadata)
        data = {name: BitArray(arrays[name], size) for name, size, _ in registers}
        return SamplerPubResult(DataBin(**data, shape=pub.shape),
                                metadata={"shots": pub.shots, "circuit_metadata": qc.metadata,
                                          "error": {"l2_bound": None, "no_bound": DYNAMIC_NO_BOUND}})

    def _states_of(self, qc, params):
        """(index, state, measured pairs) of each binding, in order: one plan for all bindings
        where :meth:`_batched` applies, else one Simulator run per bound circuit."""
        batched = self._batched(qc, params.size)
        if batched is None:
            bound = params.bind_all(qc)
            for index, bound_circuit in np.ndenumerate(bound):
                state, circuit = self._state(bound_circuit)
                yield index, state, circuit.measured
            return
        sim = self._simulator
        values = params.as_array(batched.parameters).reshape(params.size, len(batched.parameters))
        for b0, block in batched.states(values, dtype=sim.dtype, device=sim.device):
            for i in range(block.shape[0]):
                state = StateVector.from_array(block[i], copy=False, device=sim.device)
                yield np.unravel_index(b0 + i, params.shape), state, batched.measured


class Estimator(_Backed, BaseEstimatorV2):
    """A ``BaseEstimatorV2`` whose states come from qsim-tc; exact Pauli expectation values.

    Args:
        backend: ``"auto"`` (per block the fastest method of ``numeric_precision`` on this device)
            or a GEMM method (``gemm.methods()``), as for :class:`qsim_tc.Simulator`.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        numeric_precision: with ``backend="auto"``: ``"double"`` (None: the default) or
            ``"single"``; the Simulator's ``precision=``.
        fuse: gate fusion: ``"auto"`` (default), None or an int d.
        default_precision: precision of PUBs that give none; 0 returns the exact values, a
            positive value adds normal noise of that standard deviation (as Qiskit's
            StatevectorEstimator does, drawn in the same order from the same seed).
        seed: an int or a ``numpy.random.Generator`` for that noise.
        **backend_options: options of the backend.
    """

    def __init__(self, *, backend: str = "auto", device="auto", fuse="auto", default_precision: float = 0.0,
                 seed: np.random.Generator | int | None = None, numeric_precision: str | None = None,
                 **backend_options):
        if isinstance(default_precision, bool) or not isinstance(default_precision, (int, float, np.floating)) \
                or not 0 <= default_precision < math.inf:
            raise ValueError(f"default_precision must be a finite float >= 0, got {default_precision!r}")
        self._init_simulator(backend, device, fuse, numeric_precision, backend_options, seed)
        self._default_precision = float(default_precision)

    @property
    def default_precision(self) -> float:
        """Precision of PUBs that give none."""
        return self._default_precision

    def run(self, pubs: Iterable, *, precision: float | None = None) -> PrimitiveJob:
        """Estimate each PUB ``(circuit, observables, parameter_values?, precision?)``."""
        if precision is None:
            precision = self._default_precision
        coerced = [EstimatorPub.coerce(pub, precision) for pub in pubs]
        for i, pub in enumerate(coerced):  # Qiskit checks >= 0 only: inf would make every value NaN
            if not math.isfinite(pub.precision):
                raise ValueError(f"precision of PUB {i} must be finite, got {pub.precision!r}")
        return self._submit(coerced)

    def _run_pub(self, pub: EstimatorPub) -> PubResult:
        self._errors = []
        rng = self._generator()
        obs = pub.observables.__array__()  # object array of {pauli label: real coefficient}
        params = pub.parameter_values
        shape = np.broadcast_shapes(params.shape, obs.shape)
        ci, oi = np.broadcast_arrays(np.arange(params.size).reshape(params.shape), np.arange(obs.size).reshape(obs.shape))
        batched = self._batched(pub.circuit, params.size)
        evs = np.zeros(shape, dtype=np.float64)
        if batched is not None:
            evs[...] = self._batched_values(batched, params, obs, ci, oi)
        else:
            bound = params.bind_all(pub.circuit)
            for c in range(bound.size):
                where = ci == c
                if not where.any():
                    continue
                wanted = np.unique(oi[where])
                values = dict(zip(wanted.tolist(), self._values(bound.flat[c], [obs.flat[o] for o in wanted])))
                evs[where] = [values[o] for o in oi[where].tolist()]
        precision = pub.precision
        if precision != 0:
            evs = rng.normal(evs, precision).reshape(shape) if evs.size else evs
        data = DataBin(evs=evs, stds=np.zeros_like(evs), shape=evs.shape)
        return PubResult(data, metadata={"target_precision": precision, "circuit_metadata": pub.circuit.metadata,
                                         "error": self._take_error(batched)})

    def _values(self, bound_circuit, observables) -> np.ndarray:
        """The real expectation values of ``observables`` on the state of ``bound_circuit`` (the
        one step a distributed Estimator does differently)."""
        state, _ = self._state(bound_circuit)
        return pauli_expectation_values(state, observables)

    def _batched_values(self, batched, params, obs, ci, oi) -> np.ndarray:
        """Expectation values of every (binding, observable) pair wanted, through ``batched``."""
        sim = self._simulator
        n = batched.n_qubits
        values = params.as_array(batched.parameters).reshape(params.size, len(batched.parameters))
        wanted = [np.unique(oi[ci == c]) for c in range(params.size)]
        all_terms = collect([obs.flat[o] for o in range(obs.size)], n)
        table = np.zeros((params.size, obs.size))
        everything = all(len(w) == obs.size for w in wanted)
        for b0, block in batched.states(values, dtype=sim.dtype, device=sim.device):
            if everything:  # the block's states in one pass per X mask
                terms, matrix = all_terms
                per_term = term_values(block, terms, chunk_elements=_CHUNK[sim.device.name])
                table[b0:b0 + block.shape[0]] = (per_term @ matrix.T).real
                continue
            for i in range(block.shape[0]):
                want = wanted[b0 + i]
                terms, matrix = all_terms if len(want) == obs.size else collect([obs.flat[o] for o in want], n)
                vals = (matrix @ term_values(block[i], terms, chunk_elements=_CHUNK[sim.device.name])).real
                table[b0 + i, want if len(want) != obs.size else slice(None)] = vals
        return table[ci, oi]


# --- expectation values ----------------------------------------------------------------------


def pauli_expectation_values(state: StateVector, observables) -> np.ndarray:
    """<psi|O|psi> for each observable, a mapping {Pauli label: coefficient} (or a SparsePauliOp).

    Labels use Qiskit's order (the last character acts on qubit 0). Terms of all observables that
    flip the same bits are evaluated together in one pass over the state.

    Returns:
        numpy float64 array, one real value per observable (the real part, as for a Hermitian O).

    Raises:
        ValueError: a label of the wrong length or with a letter other than I, X, Y, Z.
        StateNormError: the state's norm is NaN, infinite or zero.
    """
    state._check_norm("expectation values")  # noqa: SLF001 - the state's own check, shared
    n = state.n_qubits
    index: dict[str, int] = {}
    rows = []
    for o in observables:
        items = _items(o)
        row = {}
        for label, coeff in items:
            if len(label) != n:
                raise ValueError(f"Pauli label {label!r} has {len(label)} letters; the state has {n} qubits")
            t = index.setdefault(label, len(index))
            row[t] = row.get(t, 0) + complex(coeff)
        rows.append(row)
    labels = list(index)
    coeffs = np.zeros((len(observables), len(labels)), dtype=np.complex128)
    for i, row in enumerate(rows):
        for t, c in row.items():
            coeffs[i, t] = c
    if not labels:
        return np.zeros(len(observables), np.float64)
    terms, _ = collect([{label: 1.0} for label in labels], n)
    order = {(int(x), int(z)): t for t, (x, z) in enumerate(zip(terms.x, terms.z))}
    values = term_values(state.data(), terms, chunk_elements=_CHUNK[state.device.name])
    per_label = np.array([values[order[_masks(lb)[:2]]] for lb in labels])
    return (coeffs @ per_label).real


def _items(o):
    if hasattr(o, "to_list"):  # SparsePauliOp
        return o.to_list()
    if isinstance(o, str):
        return [(o, 1.0)]
    return list(o.items())


def _masks(label: str) -> tuple[int, int, int]:
    """(x mask, z mask, number of Y) of a Pauli label; qubit 0 is the last letter."""
    x = z = ny = 0
    for q, ch in enumerate(reversed(label)):
        if ch == "I":
            continue
        if ch == "X":
            x |= 1 << q
        elif ch == "Z":
            z |= 1 << q
        elif ch == "Y":
            x |= 1 << q
            z |= 1 << q
            ny += 1
        else:
            raise ValueError(f"Pauli label {label!r} holds {ch!r}; expected only I, X, Y, Z")
    return x, z, ny
