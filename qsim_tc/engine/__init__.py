"""The engine: applies gates to a :class:`PhysicalState`.

- :mod:`~qsim_tc.engine.apply`: one gate, as one GEMM in the orientation its targets allow, or
  as a small-gate kernel.
- :mod:`~qsim_tc.engine.small_gate`: the in-place kernels for gates of 1-6 qubits on the GPU.
- :mod:`~qsim_tc.engine.permute`: permutations of the index bits (the lazy layout's passes).
- :mod:`~qsim_tc.engine.storage`: the physical state the engine changes.
"""

from qsim_tc.engine.apply import ApplyInfo, GateRequest, apply_gate
from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.storage import PhysicalState

__all__ = ["ApplyInfo", "GateRequest", "PhysicalState", "apply_gate", "permute_bits"]
