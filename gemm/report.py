"""The report every GEMM method can return: what ran, on what, how it was split, how long."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gemm.timing import StageTimer


@dataclass
class Report:
    """What one ``gemm.matmul`` call did.

    Attributes:
        method: registered method name.
        device: ``"cpu"`` or ``"gpu"``.
        shape_a, shape_b, shape_c: operand and result shapes.
        dtype: result dtype name.
        choices: what the method decided (splits, precision, fallback, bits per slice, ...).
        workspace_bytes: device/host memory the method allocated beyond A, B and C.
        flops: nominal real floating-point operations of the product (8mnk complex, 2mnk real,
            times the batch), so that rates are comparable across methods.
        notes: human-readable remarks (a fallback and its reason, a downcast, ...).
    """

    method: str
    device: str
    shape_a: tuple
    shape_b: tuple
    shape_c: tuple
    dtype: str
    flops: float
    choices: dict[str, Any] = field(default_factory=dict)
    workspace_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    timer: StageTimer | None = field(default=None, repr=False)

    @property
    def stages(self) -> dict[str, float]:
        """Stage name -> milliseconds. On the GPU this synchronises once, when first read."""
        return self.timer.result() if self.timer is not None else {}

    @property
    def total_ms(self) -> float:
        return float(sum(self.stages.values()))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view."""
        return {
            "method": self.method,
            "device": self.device,
            "shape_a": list(self.shape_a),
            "shape_b": list(self.shape_b),
            "shape_c": list(self.shape_c),
            "dtype": self.dtype,
            "flops": self.flops,
            "choices": _jsonable(self.choices),
            "workspace_bytes": int(self.workspace_bytes),
            "stages_ms": self.stages,
            "notes": list(self.notes),
        }


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value
