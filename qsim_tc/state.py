"""The state vector.

Layout: ``2**n_qubits`` amplitudes, complex128 (FP64-class backends) or complex64 (FP32-class),
in one numpy (CPU) or cupy (GPU) array. Logical qubit q is bit q of the amplitude index
(little-endian, as Qiskit). Internally the bits may be stored permuted (see ``Layout``); every
public accessor speaks logical indices.
"""

from __future__ import annotations

import cmath
import functools
import math
import numbers

import numpy as np

import gemm
from circuits.gate import check_matrix, check_qubits
from qsim_tc import memory
from qsim_tc.engine import ApplyInfo, GateRequest, PhysicalState, apply_gate
from qsim_tc.errors import StateNormError
from qsim_tc.layout import Layout

DTYPES = (np.dtype(np.complex128), np.dtype(np.complex64))
MAX_QUBITS = 40
# norm() sums |amplitude|^2 over chunks of this many amplitudes (256 MiB of complex128): a 32-qubit
# state has no room for a state-sized temporary
NORM_CHUNK = 1 << 24
# the most |norm - 1| of the amplitudes a state is made from (StateVector(data=...), from_array),
# by the lower of the data's and the state's precision: rounding to complex64 alone moves a
# normalized vector's norm by up to ~1e-7, a forgotten normalization moves it by far more
NORM_ATOL = {8: 1e-8, 4: 1e-5}  # keyed by the bytes of one real part
# sample() holds about this many bytes per shot at its peak (the uniform draws and their scaled
# copy, the searched indices, the logical indices and the result: int64/float64 each)
SAMPLE_BYTES_PER_SHOT = 40
SAMPLE_CHECK_BYTES = 64 << 20  # smaller draws skip asking the system for its free memory


_PAULI_PHASES = {"": 1, "-": -1, "i": 1j, "-i": -1j, "+": 1, "+i": 1j}


def _pauli_label(text: str) -> tuple[str, complex]:
    """A Pauli label's letters and its phase prefix ("-iXZ" -> ("XZ", -1j))."""
    letters = text.lstrip("+-ij")
    prefix = text[: len(text) - len(letters)].replace("j", "i")
    if prefix not in _PAULI_PHASES:
        raise ValueError(f"Pauli label {text!r} has an unknown phase prefix {prefix!r}")
    bad = sorted(set(letters) - set("IXYZ"))
    if not letters or bad:
        raise ValueError(f"Pauli label {text!r} must be letters I, X, Y, Z (rightmost on qubit 0)")
    return letters, _PAULI_PHASES[prefix]


def _pauli_terms(operator) -> list[tuple[str, complex]]:
    """(label, coefficient) pairs of a Pauli string, a qiskit Pauli / SparsePauliOp, or pairs."""
    if isinstance(operator, str):
        label, phase = _pauli_label(operator)
        return [(label, phase)]
    kind = type(operator).__name__
    if kind == "SparsePauliOp" and hasattr(operator, "to_list"):
        return [(_pauli_label(lbl)[0], _pauli_label(lbl)[1] * complex(c)) for lbl, c in operator.to_list()]
    if kind == "Pauli" and hasattr(operator, "to_label"):
        label, phase = _pauli_label(operator.to_label())
        return [(label, phase)]
    if isinstance(operator, (list, tuple)) and operator and all(
            isinstance(t, (list, tuple)) and len(t) == 2 and isinstance(t[0], str) for t in operator):
        return [(_pauli_label(lbl)[0], _pauli_label(lbl)[1] * complex(c)) for lbl, c in operator]
    raise TypeError(f"operator must be a Pauli label, a qiskit Pauli or SparsePauliOp, or (label, coefficient) "
                    f"pairs, got {kind}")
# to_numpy() checks the free host memory before copying states of at least this many bytes (a
# smaller copy is not where host memory runs out, and the check reads /proc/meminfo)
TO_NUMPY_CHECKED_BYTES = 1 << 26


_UNSET = object()  # StateVector._unset's data: storage not written


class StateVector:
    """An n-qubit pure state on the CPU or the GPU.

    Args:
        n_qubits: number of qubits (1..40).
        dtype: complex128 or complex64.
        device: ``"auto"``, ``"cpu"`` or ``"gpu"`` (or a resolved ``gemm.Device``).
        data: optional initial amplitudes (length 2**n_qubits, logical order); |0...0> if None.
            They must have norm 1 (to 1e-8; 1e-5 where the data or the state is single precision).
        normalize: ``True``: scale ``data`` to norm 1 instead of refusing another norm (all-zero
            data is refused either way).
        workspace_bytes: the most memory gates may use beside the state (GEMM blocks, the GEMM
            method's own workspace, swap temporaries); default: the smaller of 1/16 of the
            state and 4 GiB (at least 1 MiB).
        double_buffer: ``True``: the engine with a state-sized spare buffer (GEMMs over the whole
            state, permutations out of place; twice the memory); ``False``: the bounded engine
            (blocked GEMMs and in-place swaps within ``workspace_bytes``); ``None`` (default):
            the spare buffer where twice the state and the default workspace fit in
            :data:`qsim_tc.memory.DOUBLE_BUFFER_FREE_FRACTION` of the free memory and no
            ``workspace_bytes`` was given, else the bounded engine. The spare-buffer engine is
            the faster one where it fits (on a 2-core CPU the bounded one took 1.4-1.5x as long
            on QFT-24 and a d = 4 brickwork: it cannot rotate the whole state); the bounded one
            reaches twice the state size.

    Raises:
        ValueError: bad n_qubits, dtype, device, data length or workspace_bytes; data holding
            NaN/Inf, all zero, or (without ``normalize``) not of norm 1.
        TypeError: workspace_bytes not an int, normalize not a bool, non-numeric data.
        InsufficientMemoryError: the state and its workspace do not fit on the device (the
            message names the largest qubit count that would).
    """

    def __init__(self, n_qubits: int, *, dtype=np.complex128, device="auto", data=None,
                 workspace_bytes: int | None = None, double_buffer: bool | None = None, normalize: bool = False):
        if isinstance(n_qubits, bool) or not isinstance(n_qubits, (int, np.integer)) or not 1 <= n_qubits <= MAX_QUBITS:
            raise ValueError(f"n_qubits must be an int in 1..{MAX_QUBITS}, got {n_qubits!r}")
        dtype = np.dtype(dtype)
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be complex128 or complex64, got {dtype}")
        if not isinstance(normalize, bool):
            raise TypeError(f"normalize must be True or False, got {normalize!r}")
        self._device = gemm.resolve_device(device)
        self._n = int(n_qubits)
        self._dtype = dtype
        xp = self._device.xp
        workspace_bytes = memory.check_workspace_bytes(workspace_bytes)
        if double_buffer is not None and not isinstance(double_buffer, bool):
            raise TypeError(f"double_buffer must be True, False or None, got {type(double_buffer).__name__}")
        if double_buffer is None:
            double_buffer = workspace_bytes is None and memory.double_buffer_fits(n_qubits, dtype, self._device)
        memory.check_state_fits(f"a {n_qubits}-qubit {dtype} state", n_qubits, dtype, self._device,
                                workspace_bytes=workspace_bytes, double_buffer=double_buffer)
        if data is _UNSET:  # StateVector._unset: the caller writes every amplitude first
            arr = xp.empty(1 << n_qubits, dtype=dtype)
        elif data is None:
            arr = xp.zeros(1 << n_qubits, dtype=dtype)
            arr[0] = 1
        else:
            arr = xp.asarray(data)
            if arr.shape != (1 << n_qubits,):
                raise ValueError(f"data has shape {tuple(arr.shape)}; a {n_qubits}-qubit state needs ({1 << n_qubits},)")
            if arr.dtype.kind not in "fciu":
                raise TypeError(f"data must be numeric, got dtype {arr.dtype}")
            source = arr.dtype
            with np.errstate(over="ignore", invalid="ignore"):  # reported just below
                arr = arr.astype(dtype, copy=True)
            if not bool(xp.isfinite(arr).all()):  # after the cast: 1e39 does not fit complex64
                raise ValueError(f"data holds NaN or Inf (as {dtype})")
            _check_data_norm(arr, source, normalize, xp)
        # the amplitudes as stored, their layout and the engine's settings
        self._phys = PhysicalState(arr, self._device, workspace_limit=memory.workspace_limit(n_qubits, dtype,
                                                                                              workspace_bytes),
                                   workspace_explicit=workspace_bytes is not None, double_buffer=double_buffer)

    @classmethod
    def _unset(cls, n_qubits: int, *, dtype, device, workspace_bytes: int | None = None) -> StateVector:
        """A state whose amplitudes are not set (storage allocated, not written): for a runner
        that writes every amplitude before it reads any, as a stage program that starts from
        |0...0> does (no pass to zero the state first)."""
        return cls(n_qubits, dtype=dtype, device=device, data=_UNSET, workspace_bytes=workspace_bytes)

    @classmethod
    def from_array(cls, data, *, dtype=None, device="auto", copy: bool = True, workspace_bytes: int | None = None,
                   double_buffer: bool | None = None, normalize: bool = False) -> StateVector:
        """A state holding a copy of ``data`` (a 1-D numpy/cupy array or sequence, logical order).

        The dtype defaults to complex64 for complex64 data and complex128 otherwise.

        Args:
            copy: False: the state takes ``data`` itself over, with no copy and no NaN or norm
                scan (for states too large to hold twice, e.g. a rank's slice of a distributed
                state, whose norm is not 1). ``data`` must then be a contiguous 1-D
                complex64/complex128 array on the state's device. Gates change it in place, in
                the state's physical layout, and the double-buffer engine may move the amplitudes
                to its spare buffer: read them back through the StateVector, not through ``data``.
            workspace_bytes, double_buffer, normalize: as for :class:`StateVector`.

        Raises:
            ValueError: data not 1-D, of a length that is not a power of two, holding NaN/Inf,
                all zero, or (without ``normalize``) not of norm 1; ``normalize`` with
                ``copy=False``.
            TypeError: non-numeric data.
        """
        if not hasattr(data, "shape"):
            data = np.asarray(data)
        if len(data.shape) != 1:
            raise ValueError(f"data must be 1-D (amplitudes in logical order), got shape {tuple(data.shape)}")
        size = int(data.shape[0])
        n = size.bit_length() - 1
        if n < 1 or size != 1 << n:
            raise ValueError(f"data length {size} is not a power of two >= 2")
        dt = dtype if dtype is not None else (np.complex64 if np.dtype(data.dtype) == np.complex64 else np.complex128)
        if copy:
            return cls(n, dtype=dt, device=device, data=data, workspace_bytes=workspace_bytes,
                       double_buffer=double_buffer, normalize=normalize)
        if normalize:
            raise ValueError("normalize=True needs copy=True (data used without a copy is not scanned or changed)")
        return cls._adopt(data, n, np.dtype(dt), gemm.resolve_device(device), workspace_bytes, double_buffer)

    @classmethod
    def _adopt(cls, data, n: int, dtype: np.dtype, device: gemm.Device, workspace_bytes, double_buffer) -> StateVector:
        """``from_array(copy=False)``: wrap ``data`` after checking it can be used as it is."""
        if np.dtype(data.dtype) != dtype or dtype not in DTYPES:
            raise ValueError(f"data must already be {dtype} (complex64 or complex128) to be used without a copy, "
                             f"got {data.dtype}")
        if not isinstance(data, device.xp.ndarray):
            raise ValueError(f"data must be a {device.xp.__name__} array to be used without a copy on the "
                             f"{device.name}, got {type(data).__module__}.{type(data).__name__}")
        if not data.flags.c_contiguous:
            raise ValueError("data must be contiguous to be used without a copy")
        workspace_bytes = memory.check_workspace_bytes(workspace_bytes)
        if double_buffer is None:  # the state is allocated already: only the spare buffer is new
            double_buffer = workspace_bytes is None and memory.double_buffer_fits(n, dtype, device, allocated=True)
        state = object.__new__(cls)
        state._device, state._n, state._dtype = device, n, dtype
        state._phys = PhysicalState(data, device, workspace_limit=memory.workspace_limit(n, dtype, workspace_bytes),
                                    workspace_explicit=workspace_bytes is not None, double_buffer=double_buffer)
        return state

    # --- properties --------------------------------------------------------------------------

    @property
    def n_qubits(self) -> int:
        return self._n

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def device(self) -> gemm.Device:
        return self._device

    @property
    def xp(self):
        return self._device.xp

    @property
    def nbytes(self) -> int:
        return int(self._phys.data.nbytes)

    @property
    def workspace_bytes(self) -> int:
        """The bound on the memory gates use beside the state (bytes)."""
        return self._phys.workspace_limit

    @property
    def is_valid(self) -> bool:
        """False after a gate failed half-way (every other use then raises StateInvalidError)."""
        return self._phys.invalid is None

    def _valid(self) -> PhysicalState:
        self._phys.check_valid()
        return self._phys

    # the physical array and its layout, for tests and benchmarks that drive the kernels directly
    @property
    def _data(self):
        return self._phys.data

    @_data.setter
    def _data(self, value) -> None:
        self._phys.data = value

    @property
    def _layout(self):
        return self._phys.layout

    @_layout.setter
    def _layout(self, value) -> None:
        self._phys.layout = value

    # --- reading -----------------------------------------------------------------------------

    def data(self):
        """The amplitudes in logical order, as a numpy or cupy array (undoes any pending permutation)."""
        self._valid().canonicalize()
        return self._phys.data

    def to_numpy(self) -> np.ndarray:
        """A host copy of the amplitudes in logical order.

        Raises:
            InsufficientMemoryError: the copy does not fit in the free host memory (checked
                before anything is copied, for states of at least
                :data:`TO_NUMPY_CHECKED_BYTES`); the message names the zero-copy route.
        """
        if self.nbytes >= TO_NUMPY_CHECKED_BYTES:
            self._check_host_copy()
        d = self.data()
        return d.get() if self._device.is_gpu else d.copy()

    def _check_host_copy(self) -> None:
        """Raise InsufficientMemoryError if a host copy of the state does not fit in free host memory."""
        host = gemm.resolve_device("cpu")
        memory.check_fits(f"to_numpy() of a {self._n}-qubit {self._dtype} state", self.nbytes, host,
                          hint="read the amplitudes in place instead: state.data(), or without a copy through "
                               "DLPack (numpy.from_dlpack(state) on the CPU, cupy.from_dlpack(state) or "
                               "torch.from_dlpack(state) on the GPU)")

    # --- zero-copy export --------------------------------------------------------------------
    # The exported array is the state's own storage in logical order: a pending qubit permutation
    # is applied in place first (as data() does). It stays valid until the state next changes: a
    # gate may permute the storage again or move the amplitudes to the engine's spare buffer, so
    # export again after running more gates.

    def __dlpack__(self, *args, **kwargs):
        """DLPack capsule of the amplitudes (logical order, no copy): ``numpy.from_dlpack(state)``,
        ``cupy.from_dlpack(state)``, ``torch.from_dlpack(state)``. Arguments go to the array's own
        ``__dlpack__`` (``stream=`` on the GPU)."""
        return self.data().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        """The DLPack device of the amplitudes: (1, 0) on the CPU, (2, device id) on the GPU."""
        return self._phys.data.__dlpack_device__()

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface of the amplitudes (GPU states only; logical order, no copy)."""
        if not self._device.is_gpu:
            raise AttributeError("__cuda_array_interface__ exists only for GPU states; on the CPU use "
                                 "numpy.from_dlpack(state) or state.data()")
        return self.data().__cuda_array_interface__

    def amplitude(self, index: int) -> complex:
        """The amplitude of basis state ``index`` (logical, little-endian)."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < (1 << self._n):
            raise ValueError(f"index must be an int in 0..{(1 << self._n) - 1}, got {index!r}")
        phys = self._valid()
        return complex(phys.data[phys.layout.physical_index(int(index))])

    def probabilities(self, qubits=None):
        """|amplitude|^2 in logical order, or the marginal distribution of ``qubits``.

        Args:
            qubits: None (every basis state, float of the state's precision), or distinct qubits
                whose marginal is wanted (float64): entry i is the probability that qubit
                ``qubits[j]`` reads bit j of i, for every j (``qubits[0]`` the least significant
                bit, as Qiskit's ``Statevector.probabilities(qargs)``).

        Returns:
            numpy or cupy array of length ``2**n_qubits`` or ``2**len(qubits)``.

        Raises:
            QubitError: a qubit out of range or repeated.
            StateNormError: the state's norm is NaN, infinite or zero.
        """
        qs = None if qubits is None else check_qubits(qubits, self._n)
        d = self.data()
        p = d.real**2 + d.imag**2
        self._check_norm("probabilities", float(p.sum(dtype=np.float64)))
        if qs is None:
            return p
        n = self._n
        t = p.astype(np.float64).reshape((2,) * n)  # axis a holds qubit n - 1 - a
        keep = [n - 1 - q for q in qs]
        t = t.sum(axis=tuple(a for a in range(n) if a not in keep)) if len(keep) < n else t
        kept_sorted = sorted(keep)  # the remaining axes, in increasing axis order
        order = [kept_sorted.index(n - 1 - q) for q in reversed(qs)]  # qubits[-1] first: most significant
        return self.xp.ascontiguousarray(t.transpose(order)).reshape(-1)

    def expectation_value(self, operator) -> complex:
        """<psi|O|psi> for a Pauli operator, as Qiskit's ``Statevector.expectation_value``.

        Terms that flip the same qubits share one pass over the state
        (:func:`qsim_tc.observables.expectation_values`): a many-term Hamiltonian costs one pass
        per distinct X part, not one per term.

        Args:
            operator: a Pauli label (``"XZI"``, optionally with a sign/phase prefix such as
                ``"-iXY"``; the rightmost letter acts on qubit 0), a ``qiskit.quantum_info.Pauli``
                or ``SparsePauliOp``, or a sequence of ``(label, coefficient)`` pairs.

        Returns:
            complex: the expectation value (the state is not changed).

        Raises:
            TypeError: an unsupported operator type. ValueError: a label of another width or with
                letters other than I, X, Y, Z. StateNormError: the state's norm is NaN, infinite
                or zero.
        """
        from qsim_tc.observables import expectation_value  # noqa: PLC0415 - kept out of `import qsim_tc`

        self._valid()
        self._check_norm("expectation_value")
        return expectation_value(self, operator)

    def _check_norm(self, what: str, sum_of_squares: float | None = None) -> None:
        """Raise StateNormError unless the state's norm is finite and nonzero (``sum_of_squares``:
        the squared norm, where the caller has it already)."""
        check_norm_squared(self.norm() ** 2 if sum_of_squares is None else sum_of_squares, what)

    def norm(self) -> float:
        """The 2-norm of the state (summed over chunks: no state-sized temporary)."""
        data = self._valid().data
        real = data.real.dtype if data.dtype.kind == "c" else data.dtype
        if self.xp is not np:
            # one reduction kernel over the real and imaginary parts, summed in FP64, one host
            # read: chunked cuBLAS dot products with a host read each took 3-4 ms for a 28-qubit
            # complex64 state on an H100 (vdot of complex data, 5.5 ms, wrote a conjugated copy)
            return math.sqrt(float(_gpu_sum_of_squares()(data.reshape(-1).view(real))))
        total = 0.0
        for i in range(0, data.size, NORM_CHUNK):
            # the chunk's real and imaginary parts as one real vector: a dot product reads it once
            v = data[i:i + NORM_CHUNK].view(real)
            total += float(np.dot(v, v))
        return math.sqrt(total)

    def sample(self, shots: int, seed=None, qubits=None) -> np.ndarray:
        """Draw ``shots`` basis-state outcomes from |amplitude|^2.

        Args:
            shots: number of samples (>= 1).
            seed: seed for numpy's generator (the random numbers are drawn on the host, so the
                same seed gives the same samples on every device).
            qubits: if given, return outcomes of these qubits only, qubits[0] as bit 0.

        Returns:
            numpy int64 array of outcomes (logical indices).

        Raises:
            TypeError: shots not an int. ValueError: shots < 1.
            InsufficientMemoryError: the samples of ``shots`` would not fit in memory.
            StateNormError: the state's norm is NaN, infinite or zero.
        """
        shots = check_shots(shots, "shots", device=self._device)
        if qubits is not None:
            qs = check_qubits(qubits, self._n)
        xp = self.xp
        data = self._valid().data
        table = 16 << self._n  # |amplitude|^2 and its running sum, float64 each, held together
        if table > SAMPLE_CHECK_BYTES:
            memory.check_fits(f"sample's probability table for {self._n} qubits", table, self._device,
                              "16 bytes per amplitude beside the state")
        p = data.real.astype(np.float64) ** 2 + data.imag.astype(np.float64) ** 2
        cdf = xp.cumsum(p)
        total = float(cdf[-1])
        self._check_norm("sample", total)
        rng = np.random.default_rng(seed)
        u = xp.asarray(rng.random(shots) * total)
        phys = xp.searchsorted(cdf, u, side="right")
        phys = xp.minimum(phys, (1 << self._n) - 1)
        if self._device.is_gpu:
            phys = phys.get()
        out = self._phys.layout.logical_indices(np.asarray(phys, dtype=np.int64))
        if qubits is not None:
            out = sum(((out >> q) & 1) << i for i, q in enumerate(qs))
        return np.asarray(out, dtype=np.int64)

    def copy(self) -> StateVector:
        """An independent copy (same device, dtype and engine settings)."""
        other = object.__new__(StateVector)
        other._device, other._n, other._dtype = self._device, self._n, self._dtype
        other._phys = self._valid().copy()
        return other

    def reset(self) -> None:
        """Set the state to |0...0> in logical order; makes an invalid state usable again."""
        phys = self._phys
        phys.data[...] = 0
        phys.data[0] = 1
        phys.layout = Layout(self._n)
        phys.invalid = None

    # --- changing ----------------------------------------------------------------------------

    def apply(self, matrix, qubits, *, method: str = "native", check_unitary: bool = True,
              small_gate_kernel: bool | None = None, next_qubits=None, **options) -> ApplyInfo:
        """Apply a gate: ``matrix`` (2^d x 2^d, Qiskit bit order) on logical ``qubits``.

        Args:
            matrix: host or device array; the first listed qubit is the matrix index's low bit.
            qubits: distinct targets in any order and position.
            method: GEMM method name (``gemm.methods()``).
            check_unitary: reject a non-unitary matrix (to 1e-10).
            small_gate_kernel: use a dedicated kernel (d <= 6) when the method allows it
                (None: when the method computes in the state's native arithmetic, on the GPU).
            next_qubits: targets of the gate to be applied next, if known (a layout hint only).
            **options: options of the GEMM method.

        Returns:
            ApplyInfo: the path taken, the GEMM report, the time.

        Raises:
            QubitError / ValueError / TypeError on bad input; InsufficientMemoryError if the
            output and workspace do not fit. The state is unchanged on those errors.
            StateInvalidError: the gate failed after overwriting part of the state (the state is
            then marked invalid until :meth:`reset`), or it already was.
        """
        self._valid()
        qs = check_qubits(qubits, self._n)
        if next_qubits is not None:
            next_qubits = check_qubits(next_qubits, self._n)
        m = check_matrix(matrix, len(qs), check_unitary=check_unitary)
        meth = gemm.get_method(method)
        meth.check_options(options)
        if meth.state_dtype != self._dtype:
            raise ValueError(
                f"method {method!r} works on {meth.state_dtype} states; this state is {self._dtype} "
                f"(create it with dtype={meth.state_dtype})"
            )
        return apply_gate(self._phys, GateRequest(m, qs, meth, options, small_gate_kernel, next_qubits))

    def apply_global_phase(self, phase: float) -> None:
        """Multiply every amplitude by ``exp(1j * phase)`` (a circuit's global phase).

        Args:
            phase: the angle in radians.

        Raises:
            TypeError: phase not a real number. ValueError: phase NaN or infinite (it would
                turn every amplitude into NaN); the state is then unchanged.
        """
        if isinstance(phase, bool) or not isinstance(phase, numbers.Real):
            raise TypeError(f"phase must be a real number (radians), got {phase!r} ({type(phase).__name__})")
        if not math.isfinite(phase):
            raise ValueError(f"phase must be a finite number of radians, got {phase!r}")
        self._valid().data *= cmath.exp(1j * float(phase))

    def __repr__(self) -> str:
        return f"StateVector(n_qubits={self._n}, dtype={self._dtype}, device={self._device.name!r})"


def check_shots(shots, what: str = "shots", *, device=None, bytes_per_shot: int = SAMPLE_BYTES_PER_SHOT) -> int:
    """``shots`` as an int >= 1 whose samples fit in memory, checked before any work is done.

    Args:
        shots: the number of samples asked for.
        what: the argument's name, for messages (``"--shots"`` on the command line).
        device: a ``gemm.Device`` whose memory must hold the draws too (the host always must).
        bytes_per_shot: the caller's peak memory per shot.

    Returns:
        ``shots`` as an int.

    Raises:
        TypeError: not an int. ValueError: < 1.
        InsufficientMemoryError: the samples would not fit (the message names ``what``).
    """
    if isinstance(shots, bool) or not isinstance(shots, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {shots!r} ({type(shots).__name__})")
    if shots < 1:
        raise ValueError(f"{what} must be >= 1, got {shots}")
    shots = int(shots)
    need = shots * bytes_per_shot
    if need > SAMPLE_CHECK_BYTES:
        label, hint = f"sampling {what}={shots:,}", "draw the samples in smaller batches, with different seeds"
        memory.check_fits(label, need, gemm.resolve_device("cpu"), hint)
        if device is not None and device.is_gpu:
            memory.check_fits(label, need, device, hint)
    return shots


def check_norm_squared(total: float, what: str) -> None:
    """Raise StateNormError unless ``total``, a state's squared norm, is finite and nonzero: NaN,
    infinite or zero amplitudes define no probabilities for ``what`` to read."""
    if not math.isfinite(total) or total <= 0:
        raise StateNormError(
            f"{what} needs a state of finite, nonzero norm; this state's squared norm is {total} (a gate applied "
            "with check_unitary=False, or data taken over with copy=False, made it so)")


def _check_data_norm(arr, source: np.dtype, normalize: bool, xp) -> None:
    """Refuse all-zero amplitudes, and amplitudes whose norm is not 1 unless ``normalize`` (then
    scale ``arr``, the state's own copy, to norm 1). ``source``: the dtype the data came in."""
    with np.errstate(over="ignore"):  # an overflow is handled just below
        scale = _norm_of(arr, xp)
    if scale == 0 or not math.isfinite(scale):  # all zero, or squares that under- or overflowed
        scale = max((float(xp.abs(arr[i:i + NORM_CHUNK]).max()) for i in range(0, arr.size, NORM_CHUNK)),
                    default=0.0)
        if scale == 0:
            raise ValueError("data is all zero; a state needs at least one nonzero amplitude")
        with np.errstate(under="ignore"):
            scale *= _norm_of(arr, xp, 1 / scale)
    source = np.dtype(source)
    real_bytes = source.itemsize // (2 if source.kind == "c" else 1) if source.kind in "fc" else 8
    atol = NORM_ATOL.get(min(real_bytes, arr.dtype.itemsize // 2), 1e-2)  # float16 data: ~3 digits
    if abs(scale - 1) <= atol:
        return
    if not normalize:
        raise ValueError(f"data has norm {scale:.6g}, not 1 (|norm - 1| > {atol:g}); divide it by its norm first, "
                         "or pass normalize=True")
    for i in range(0, arr.size, NORM_CHUNK):
        arr[i:i + NORM_CHUNK] /= scale


def _norm_of(arr, xp, factor: float = 1.0) -> float:
    """The 2-norm of ``factor * arr``, accumulated in float64 over chunks of 16 MiB (complex64
    chunks are widened first: a float32 dot product would round its sum)."""
    chunk = 1 << 20
    total = 0.0
    for i in range(0, arr.size, chunk):
        v = arr[i:i + chunk].astype(np.complex128, copy=False)
        if factor != 1.0:
            v = v * factor  # not in place: v may be arr itself
        v = v.view(np.float64)
        total += float(xp.dot(v, v))
    return math.sqrt(total)


@functools.lru_cache(maxsize=None)
def _gpu_sum_of_squares():
    """cupy reduction: the sum of squares of a real array, accumulated in float64."""
    import cupy  # noqa: PLC0415 - optional dependency

    return cupy.ReductionKernel("T x", "float64 y", "(double)x * (double)x", "a + b", "y = a", "0",
                                "qsim_tc_sum_of_squares")
