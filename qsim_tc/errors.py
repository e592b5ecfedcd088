"""Exceptions of the simulator."""

from circuits.errors import CircuitError, QubitError

__all__ = ["CircuitError", "InsufficientMemoryError", "QubitError", "SimulationError", "StateInvalidError",
           "StateNormError"]


class SimulationError(Exception):
    """Base class of the simulator's domain errors."""


class InsufficientMemoryError(SimulationError, MemoryError):
    """The state plus workspace would not fit in the memory available."""

    def __init__(self, what: str, needed: int, available: int, device: str, hint: str = ""):
        self.needed = int(needed)
        self.available = int(available)
        self.device = device
        super().__init__(
            f"{what} needs {needed:,} bytes ({needed / 2**30:.2f} GiB) on the {device}, "
            f"but only {available:,} bytes ({available / 2**30:.2f} GiB) are available" + (f"; {hint}" if hint else "")
        )


class StateInvalidError(SimulationError):
    """A gate failed after part of the state was overwritten: the amplitudes are no longer a
    valid state, and the StateVector refuses every use until ``reset()``."""


class StateNormError(SimulationError, ValueError):
    """The state's norm is NaN, infinite or zero: its amplitudes define no probabilities, so
    sampling, probabilities and expectation values refuse it."""


class ToleranceError(SimulationError):
    """``Simulator(tolerance=...)``: no method of the precision can meet the tolerance's error
    bound on the circuit (raised before the run; the message names the tolerance and the best
    bound any method reaches)."""
