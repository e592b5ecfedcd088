"""qsim-tc: a state-vector simulator in which every gate is one matrix product.

    from circuits import brickwork
    from qsim_tc import Simulator
    result = Simulator(backend="native").run(brickwork(20, 4, 10, seed=1))
"""

from qsim_tc.errors import (
    InsufficientMemoryError,
    QubitError,
    SimulationError,
    StateInvalidError,
    StateNormError,
    ToleranceError,
)
from qsim_tc.result import Result
from qsim_tc.runners.records import GateStat
from qsim_tc.simulator import Simulator
from qsim_tc.state import StateVector

__version__ = "0.1.0"

__all__ = ["GateStat", "InsufficientMemoryError", "QubitError", "Result", "SimulationError", "Simulator",
           "StateInvalidError", "StateNormError", "StateVector", "ToleranceError", "__version__"]
