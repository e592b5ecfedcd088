"""The protocol every GEMM method implements, and the base class that does the common part.

A method is registered once (``gemm.registry``) and called through ``gemm.matmul``. The engine
never branches on a method's name: it reads ``precision`` (which state dtype to keep) and calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gemm.operands import COMPLEX, REAL, Operands, check_operands
from gemm.report import Report
from gemm.timing import StageTimer


class Method:
    """Base class of a GEMM method.

    Subclasses set ``name``, ``precision`` (``"fp64"``, ``"fp32"`` or ``"dd"``), ``dtypes``
    (accepted operand dtypes) and ``options`` (keyword -> default), and implement ``_run``.
    """

    name: str = ""
    precision: str = "fp64"
    dtypes: tuple = REAL + COMPLEX
    options: dict[str, Any] = {}
    description: str = ""

    @property
    def state_dtype(self) -> np.dtype:
        """The complex dtype a simulator keeps its state in for this method."""
        return np.dtype(np.complex64 if self.precision == "fp32" else np.complex128)

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Merge ``options`` over the defaults; unknown keywords are a TypeError naming them."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise TypeError(f"method {self.name!r} got unknown option(s) {', '.join(unknown)}; it accepts: {known}")
        merged = dict(self.options)
        merged.update(options)
        return merged

    def __call__(self, a, b, **options) -> tuple[Any, Report]:
        opts = self.check_options(options)
        ops = check_operands(a, b, allowed=self.dtypes)
        timer = StageTimer(ops.xp)
        report = Report(
            method=self.name,
            device="cpu" if ops.xp is np else "gpu",
            shape_a=tuple(a.shape),
            shape_b=tuple(b.shape),
            shape_c=ops.out_shape,
            dtype=str(ops.dtype),
            flops=ops.flops,
            timer=timer,
        )
        c = self._run(ops, report, timer, **opts)
        return c, report

    def _run(self, ops: Operands, report: Report, timer: StageTimer, **options):
        raise NotImplementedError
