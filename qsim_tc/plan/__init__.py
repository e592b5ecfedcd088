"""Planning a run: the engine's measured cost model and, from it, the fusion size."""

from qsim_tc.plan.costs import CostRow, lookup
from qsim_tc.plan.fusion import FusionChoice, choose_fusion
from qsim_tc.plan.stages import Stage, StageOp, StagePlan, cpu_local_qubits, plan_stages
from qsim_tc.plan.structure import GateStructure, classify

__all__ = ["CostRow", "FusionChoice", "GateStructure", "Stage", "StageOp", "StagePlan", "choose_fusion", "classify",
           "cpu_local_qubits", "lookup", "plan_stages"]
