"""Planning a run: the measured cost model and, from it, the fusion size and the method of each block
(``backend="auto"``); the accuracy guard; the stage planner. ``qsim_tc.plan.calibrate`` measures the
cost table of a device (imported on its own: it drives the engine)."""

from qsim_tc.plan.costs import CostRow, CostTable, CostTableError, lookup, shipped_table
from qsim_tc.plan.fusion import FusionChoice, choose_fusion
from qsim_tc.plan.select import Choice, Selector, qualifying_methods
from qsim_tc.plan.stages import Stage, StageOp, StagePlan, cpu_local_qubits, plan_stages
from qsim_tc.plan.structure import GateStructure, classify

__all__ = ["Choice", "CostRow", "CostTable", "CostTableError", "FusionChoice", "GateStructure", "Selector", "Stage",
           "StageOp", "StagePlan", "choose_fusion", "classify", "cpu_local_qubits", "lookup", "plan_stages",
           "qualifying_methods", "shipped_table"]
