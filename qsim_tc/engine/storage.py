"""The amplitudes as the engine stores them: an array in physical bit order and its layout.

:class:`~qsim_tc.state.StateVector` owns one :class:`PhysicalState` and speaks logical indices;
the engine changes the physical state gate by gate (array, layout, spare buffer) and nothing else.
"""

from __future__ import annotations

from qsim_tc.engine.permute import permute_bits
from qsim_tc.layout import Layout


class PhysicalState:
    """A state vector as stored.

    Attributes:
        data: 1-D numpy (CPU) or cupy (GPU) array of 2^n amplitudes; bit p of its index holds
            logical qubit ``layout.phys[p]``.
        layout: the :class:`~qsim_tc.layout.Layout` of ``data``.
        spare: None or a second array of ``data``'s size and dtype, reused as the output of
            GEMMs and permutations so that no state-sized array is allocated per gate (on the CPU
            a fresh array pays its page faults again every time: hundreds of ms at 24 qubits).
        device: the ``gemm.Device`` holding the arrays.
    """

    __slots__ = ("data", "device", "layout", "spare")

    def __init__(self, data, device, layout: Layout | None = None):
        self.data = data
        self.device = device
        self.layout = layout if layout is not None else Layout(int(data.size).bit_length() - 1)
        self.spare = None

    @property
    def n_qubits(self) -> int:
        return len(self.layout.phys)

    @property
    def xp(self):
        return self.device.xp

    def copy(self) -> PhysicalState:
        """An independent copy (data and layout; no spare buffer)."""
        return PhysicalState(self.data.copy(), self.device, self.layout.copy())

    def canonicalize(self) -> None:
        """Undo a pending qubit permutation (one pass over the state)."""
        if not self.layout.is_identity:
            n = self.n_qubits
            new = permute_bits(self.data, n, list(range(n)), self.layout.phys, self.xp, out=self.spare)
            if self.spare is not None:
                self.spare = self.data
            self.data = new
            self.layout = Layout(n)
