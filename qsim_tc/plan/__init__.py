"""Planning a run: the measured cost model and, from it, the fusion size and the method of each block
(``backend="auto"``); the accuracy guard. The stage pipeline is :mod:`qsim_tc.stages`;
:mod:`qsim_tc.calibrate` measures the cost table of a device (it runs the engine)."""

from qsim_tc.plan.costs import CostRow, CostTable, CostTableError, lookup, shipped_table
from qsim_tc.plan.fusion import FusionChoice, choose_fusion
from qsim_tc.plan.select import Choice, Selector, qualifying_methods

__all__ = ["Choice", "CostRow", "CostTable", "CostTableError", "FusionChoice", "Selector", "choose_fusion", "lookup",
           "qualifying_methods", "shipped_table"]
