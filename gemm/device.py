"""Device selection: one place that decides between numpy (CPU) and cupy (GPU).

cupy is imported lazily, so ``import gemm`` works on a machine without it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from gemm.errors import DeviceError

DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class Device:
    """A resolved device: its name, its array module and why it was chosen."""

    name: str  # "cpu" or "gpu"
    xp: ModuleType
    reason: str

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"


@functools.lru_cache(maxsize=1)
def _probe_gpu() -> tuple[ModuleType | None, str]:
    """Import cupy and count devices once per process; return (cupy or None, why)."""
    try:
        import cupy  # noqa: PLC0415 - optional dependency
    except Exception as exc:  # ImportError, or a broken CUDA install
        return None, f"cupy not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"cupy imported but no CUDA device ({exc})"
    if count < 1:
        return None, "cupy imported but no CUDA device"
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return cupy, f"CUDA device {cupy.cuda.Device().id}: {name}"


def gpu_available() -> bool:
    """True when cupy imports and at least one CUDA device exists."""
    return _probe_gpu()[0] is not None


def resolve_device(device: str | Device = "auto") -> Device:
    """Turn ``"auto" | "cpu" | "gpu"`` into a :class:`Device`.

    Args:
        device: ``"auto"`` takes the GPU when cupy imports and a device exists, else the CPU.

    Raises:
        ValueError: ``device`` is not one of ``auto``, ``cpu``, ``gpu``.
        DeviceError: ``"gpu"`` was asked for and none is usable.
    """
    if isinstance(device, Device):
        return device
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device={device!r} is not valid; expected one of {', '.join(DEVICES)}")
    cp, why = _probe_gpu()
    if device == "cpu":
        return Device("cpu", np, "requested cpu")
    if device == "gpu":
        if cp is None:
            raise DeviceError(f"device='gpu' requested but {why}; install qsim-tc[gpu] on a CUDA machine")
        return Device("gpu", cp, why)
    if cp is not None:
        return Device("gpu", cp, f"auto: {why}")
    return Device("cpu", np, f"auto: no GPU, {why}")


def array_module(*arrays) -> ModuleType:
    """numpy or cupy, by the type of the arrays; mixing the two is an error."""
    mods = {type(a).__module__.split(".")[0] for a in arrays if a is not None}
    if mods <= {"numpy"}:
        return np
    if mods == {"cupy"}:
        import cupy  # noqa: PLC0415

        return cupy
    raise TypeError(
        "operands must all be numpy arrays or all be cupy arrays; got types "
        + ", ".join(sorted(type(a).__name__ + " from " + type(a).__module__ for a in arrays))
    )


def same_module(a, b) -> bool:
    """True when ``a`` and ``b`` are both numpy or both cupy arrays."""
    return type(a).__module__.split(".")[0] == type(b).__module__.split(".")[0]


_SMS: dict[int, int] = {}


def sm_count(cp) -> int:
    """Multiprocessors of ``cp``'s current CUDA device, read once per device and process: launch
    grids are sized by it, and ``Device.attributes`` queries every attribute, too slow for a launch.
    ``cp`` is the cupy module (or a stand-in with ``cuda.Device``)."""
    dev = cp.cuda.Device()
    if dev.id not in _SMS:
        _SMS[dev.id] = int(dev.attributes["MultiProcessorCount"])
    return _SMS[dev.id]


def synchronize(xp: ModuleType) -> None:
    """Wait for queued device work (no-op on the CPU)."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()
