"""Exceptions raised by the GEMM layer."""


class GemmError(Exception):
    """Base class of the domain errors raised by :mod:`gemm`."""


class NonFiniteError(GemmError, ValueError):
    """An operand holds NaN or Inf where the method cannot represent it."""


class DeviceError(GemmError, RuntimeError):
    """The requested device is not available (no cupy, or no CUDA device)."""
