"""The amplitudes as the engine stores them: an array in physical bit order and its layout.

:class:`~qsim_tc.state.StateVector` owns one :class:`PhysicalState` and speaks logical indices;
the engine changes the physical state gate by gate (array, layout, workspace) and nothing else.
"""

from __future__ import annotations

from qsim_tc.engine.permute import permute_bits
from qsim_tc.engine.swap import SwapInterrupted, permute_in_place
from qsim_tc.layout import Layout
from qsim_tc.memory import SWAP_THREADS, swap_chunk_elements


class PhysicalState:
    """A state vector as stored.

    Attributes:
        data: 1-D numpy (CPU) or cupy (GPU) array of 2^n amplitudes; bit p of its index holds
            logical qubit ``layout.phys[p]``.
        layout: the :class:`~qsim_tc.layout.Layout` of ``data``.
        device: the ``gemm.Device`` holding the arrays.
        workspace_limit: the bytes the bounded engine may use beside the state (blocks of GEMM
            output, the method's workspace, swap temporaries).
        workspace_explicit: the limit was set by the user (a block that cannot fit is an error,
            not a reason to exceed it).
        double_buffer: use the old engine: a state-sized ``spare`` buffer, GEMMs over the whole
            state and permutations into the spare buffer (kept to compare against).
        work: None or the bounded engine's workspace buffer (1-D, the state's dtype), grown on
            demand up to ``workspace_limit`` and reused from gate to gate (on the CPU a fresh
            array pays its page faults again every time).
        spare: double-buffer engine only: None or a second array of ``data``'s size and dtype.
        invalid: None, or why the amplitudes are no longer a valid state (a gate failed after
            writing part of them); the engine and StateVector refuse to use such a state.
        reorder: None, or a function(PhysicalState) -> bool that puts the state into logical
            order faster than the engine's permutation where it can (True when it did); the CPU
            stage executor sets its compiled gather into the spare buffer it leaves.
    """

    __slots__ = ("data", "device", "double_buffer", "invalid", "layout", "reorder", "spare", "work",
                 "workspace_explicit", "workspace_limit")

    def __init__(self, data, device, layout: Layout | None = None, *, workspace_limit: int | None = None,
                 workspace_explicit: bool = False, double_buffer: bool = False):
        self.data = data
        self.device = device
        self.layout = layout if layout is not None else Layout(int(data.size).bit_length() - 1)
        self.spare = None
        self.work = None
        self.invalid = None
        self.reorder = None
        if workspace_limit is None:
            from qsim_tc.memory import default_workspace_bytes  # noqa: PLC0415 - memory imports nothing of ours

            workspace_limit = default_workspace_bytes(self.n_qubits, data.dtype)
        self.workspace_limit = int(workspace_limit)
        self.workspace_explicit = bool(workspace_explicit)
        self.double_buffer = bool(double_buffer)

    @property
    def n_qubits(self) -> int:
        return len(self.layout.phys)

    @property
    def xp(self):
        return self.device.xp

    def copy(self) -> PhysicalState:
        """An independent copy (data, layout and engine settings; no spare or workspace buffer)."""
        return PhysicalState(self.data.copy(), self.device, self.layout.copy(), workspace_limit=self.workspace_limit,
                             workspace_explicit=self.workspace_explicit, double_buffer=self.double_buffer)

    def workspace(self, elements: int):
        """A 1-D buffer of at least ``elements`` amplitudes (the reused workspace, grown if needed)."""
        if self.work is None or self.work.size < elements:
            self.work = None  # release the smaller one before allocating
            self.work = self.xp.empty(int(elements), dtype=self.data.dtype)
        return self.work

    def swap_chunk(self) -> int:
        """The CPU swap chunk (amplitudes a thread copies at once) within the workspace bound, and
        within the workspace buffer when one exists (rather than growing it for one pass)."""
        item = self.data.dtype.itemsize
        chunk = swap_chunk_elements(self.workspace_limit, item)
        if self.work is not None:
            chunk = min(chunk, swap_chunk_elements(self.work.nbytes, item))
        return chunk

    def swap_scratch(self):
        """The workspace buffer, grown to hold the CPU swap temporaries (None on the GPU, whose
        swap kernel needs none)."""
        if self.device.is_gpu:
            return None
        return self.workspace(self.swap_chunk() * SWAP_THREADS)

    def canonicalize(self) -> None:
        """Undo a pending qubit permutation (in place: at most two passes; double-buffer: one pass
        into the spare buffer)."""
        if self.layout.is_identity:
            return
        if self.reorder is not None and self.reorder(self):
            return
        n = self.n_qubits
        if self.double_buffer:
            new = permute_bits(self.data, n, list(range(n)), self.layout.phys, self.xp, out=self.spare)
            if self.spare is not None:
                self.spare = self.data
            self.data = new
            self.layout = Layout(n)
            return
        try:
            permute_in_place(self.data, n, list(range(n)), self.layout.phys, self.xp,
                             chunk_elements=self.swap_chunk(), scratch=self.swap_scratch(), on_pass=self.layout.set)
        except SwapInterrupted as exc:
            self.mark_invalid(f"reordering the state into logical order failed half-way ({exc.__cause__!r})", exc)

    def mark_invalid(self, why: str, cause: BaseException):
        """Record that the amplitudes are no longer a valid state and raise.

        Raises:
            StateInvalidError: chained to ``cause``, when ``cause`` is an error (an ``Exception``).
            BaseException: ``cause`` itself when it is an interruption (KeyboardInterrupt,
                SystemExit, ...): Ctrl-C must still end the program, with the state marked.
        """
        from qsim_tc.errors import StateInvalidError  # noqa: PLC0415

        self.invalid = why
        if not isinstance(cause, Exception):
            raise cause
        raise StateInvalidError(f"{why}; the state is no longer valid: reset() it (or make a new one)") from cause

    def check_valid(self) -> None:
        """Raise StateInvalidError if a failed gate left the amplitudes invalid."""
        if self.invalid is not None:
            from qsim_tc.errors import StateInvalidError  # noqa: PLC0415

            raise StateInvalidError(f"the state is no longer valid ({self.invalid}); reset() it before further use")
