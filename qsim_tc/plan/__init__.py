"""Planning a run: the engine's measured cost model and, from it, the fusion size."""

from qsim_tc.plan.costs import CostRow, lookup
from qsim_tc.plan.fusion import FusionChoice, choose_fusion

__all__ = ["CostRow", "FusionChoice", "choose_fusion", "lookup"]
