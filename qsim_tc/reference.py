"""The double-double reference simulation: every product and sum of every gate in ~106 bits.

Gate matrices are taken as exact doubles (what every backend is given), so the reference
measures the rounding of the GEMMs alone. The state is a DD pair of complex128 arrays
(``hi + lo``); each gate brings its targets to the lowest physical bits (one permutation of both
arrays, tracked lazily by a :class:`~qsim_tc.layout.Layout`) and is one DD GEMM
``S(2^(N-d), 2^d) @ U^T`` by the ``dd`` method of :mod:`gemm`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gemm
from circuits import Circuit
from circuits.gate import reorder_bits
from gemm.dd import arith as dd_arith
from qsim_tc import memory
from qsim_tc.engine.permute import permute_bits
from qsim_tc.layout import Layout
from qsim_tc.state import NORM_ATOL


@dataclass
class DDState:
    """A double-double state vector.

    Attributes:
        hi, lo: complex128 arrays (numpy or cupy) of length 2^n_qubits in logical order
            (little-endian: qubit 0 is bit 0 of the index); the amplitude is ``hi + lo``.
        n_qubits: number of qubits.
        device: ``"cpu"`` or ``"gpu"``.
        wall_s: seconds the simulation took.
        metadata: circuit name, gate count, GEMM choices.
    """

    hi: Any
    lo: Any
    n_qubits: int
    device: str
    wall_s: float = 0.0
    metadata: dict = field(default_factory=dict)

    def to_complex128(self) -> np.ndarray:
        """``hi + lo`` rounded to complex128, on the host."""
        x = self.hi + self.lo
        return x.get() if hasattr(x, "get") else x

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """Host copies of ``(hi, lo)``."""
        if hasattr(self.hi, "get"):
            return self.hi.get(), self.lo.get()
        return self.hi.copy(), self.lo.copy()


def bytes_needed(n_qubits: int) -> int:
    """Memory ``simulate_dd`` needs: DD state, DD output, a permuted copy, GEMM chunk temporaries."""
    pair = 2 * 16 * (1 << n_qubits)
    return 3 * pair + (1 << n_qubits) * 8 * 4


def simulate_dd(circuit: Circuit, device="auto", *, initial_state=None, progress=None, **dd_options) -> DDState:
    """Simulate ``circuit`` from |0...0> in double-double arithmetic.

    Args:
        circuit: a :class:`circuits.Circuit`.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        initial_state: optional start state (complex128 array, or a ``(hi, lo)`` pair), logical order.
        progress: called as ``progress(done, total)`` after each gate.
        **dd_options: options of the ``dd`` GEMM method (``bits=``, ``chunk_rows=``, ``algorithm=``).

    Returns:
        DDState with ``hi``, ``lo`` (complex128, logical order) and ``to_complex128()``.

    Raises:
        TypeError: ``circuit`` is not a Circuit.
        ValueError: a gate matrix holds NaN or Inf; a bad initial state.
        InsufficientMemoryError: the DD state and workspace do not fit (the message gives the bytes).
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a circuits.Circuit, got {type(circuit).__name__}")
    for i, g in enumerate(circuit):
        if not np.isfinite(g.matrix).all():
            raise ValueError(f"gate {i} ({g.name!r} on qubits {g.qubits}) holds NaN or Inf; the reference needs "
                             "finite gate matrices")
    if not np.isfinite(circuit.global_phase):
        raise ValueError(f"circuit global_phase is {circuit.global_phase}; expected a finite number")
    method = gemm.get_method("dd")
    method.check_options(dd_options)
    dev = gemm.resolve_device(device)
    xp = dev.xp
    n = circuit.n_qubits
    memory.check_fits(f"the double-double reference of {n} qubits", bytes_needed(n), dev)
    t0 = time.perf_counter()
    dim = 1 << n
    if initial_state is None:
        hi = xp.zeros(dim, dtype=np.complex128)
        hi[0] = 1
        lo = xp.zeros(dim, dtype=np.complex128)
    else:
        hi, lo = _initial(initial_state, n, xp)
    layout = Layout(n)
    choices = {}
    total = len(circuit)
    for i, g in enumerate(circuit):
        qs = g.qubits
        d = len(qs)
        if set(layout.phys[:d]) == set(qs):
            order = [qs.index(layout.phys[j]) for j in range(d)]
            u = reorder_bits(g.matrix, order)
        else:
            new_phys = list(qs) + [q for q in layout.phys if q not in set(qs)]
            hi = permute_bits(hi, n, new_phys, layout.phys, xp)
            lo = permute_bits(lo, n, new_phys, layout.phys, xp)
            layout.set(new_phys)
            u = g.matrix
        ut = xp.asarray(np.ascontiguousarray(u.T))
        (hi, lo), rep = method(hi.reshape(-1, 1 << d), ut, a_lo=lo.reshape(-1, 1 << d), output="pair", **dd_options)
        hi = hi.reshape(-1)
        lo = lo.reshape(-1)
        choices = rep.choices
        if progress is not None:
            progress(i + 1, total)
    if not layout.is_identity:
        hi = permute_bits(hi, n, list(range(n)), layout.phys, xp)
        lo = permute_bits(lo, n, list(range(n)), layout.phys, xp)
    if circuit.global_phase:
        ph = circuit.phase_factor
        phi = xp.full(hi.shape, ph, dtype=np.complex128)
        hi, lo = dd_arith.cdd_mul(hi, lo, phi, xp.zeros_like(phi), xp)
    gemm.device.synchronize(xp)
    wall = time.perf_counter() - t0
    return DDState(hi, lo, n, dev.name, wall,
                   {"circuit": circuit.name, "n_gates": total, "dd": dict(choices), "device_reason": dev.reason})


def _initial(state, n, xp):
    if isinstance(state, tuple):
        if len(state) != 2:
            raise ValueError(f"initial_state as a tuple must be (hi, lo), got {len(state)} items")
        hi, lo = state
    else:
        hi, lo = state, None
    hi = xp.asarray(hi, dtype=np.complex128).reshape(-1).copy()
    lo = xp.zeros_like(hi) if lo is None else xp.asarray(lo, dtype=np.complex128).reshape(-1).copy()
    if hi.shape != (1 << n,) or lo.shape != hi.shape:
        raise ValueError(f"initial_state has {hi.size} amplitudes; a {n}-qubit circuit needs {1 << n}")
    if not (bool(xp.isfinite(hi).all()) and bool(xp.isfinite(lo).all())):
        raise ValueError("initial_state holds NaN or Inf")
    norm = math.sqrt(float(xp.vdot(hi, hi).real))  # the low parts change it by ~1e-16 at most
    if norm == 0:
        raise ValueError("initial_state is all zero; a state needs at least one nonzero amplitude")
    if abs(norm - 1) > NORM_ATOL[8]:
        raise ValueError(f"initial_state has norm {norm:.6g}, not 1; divide it by its norm first")
    return hi, lo
