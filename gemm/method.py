"""The contract every GEMM method implements, and the base class that does the common part.

A method is registered once (``gemm.registry``) and called through ``gemm.matmul``. The engine
never branches on a method's name: it reads what the method declares here and calls.

What a method declares:

* ``name``, ``description``;
* ``precision``: its precision class, a key of :data:`PRECISIONS` (the accuracy its products
  reach, and so the state dtype a simulator keeps for it);
* ``dtypes``: the operand dtypes it accepts;
* ``option_specs``: its keyword options, each an :class:`gemm.options.Option` (default and
  value check); ``options`` is the derived ``name -> default`` view;
* ``direct_small_gates``: whether a native small-gate kernel computes the same arithmetic as
  the method, so that the engine may apply small gates with that kernel instead of a GEMM;
* ``batched_products``: whether its strided-batched products (a gate on contiguous middle qubits,
  applied without moving them) run about as fast as its plain ones; where not, the engine moves
  the targets to the bottom first;
* :meth:`Method.workspace_bytes`: the memory one product needs beyond its operands and output;
* :meth:`Method.error_model`: a rigorous bound and an estimate of one product's rounding error
  (:mod:`gemm.error_model`), or None where the method has no model ("no bound", never a guess);
* :meth:`Method.precision_settings`: where the method has an accuracy knob (int8-crt's moduli
  count), its settings with the report choices its model needs and their cost relative to the
  default: ``Simulator(tolerance=...)`` runs the cheapest setting whose bound meets the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from gemm.operands import COMPLEX, REAL, Operands, check_operands
from gemm.options import Option
from gemm.report import Report
from gemm.timing import StageTimer

# precision class -> the complex dtype of a simulator's state. The class names the accuracy of
# one product: "dd" ~106 bits; "fp64" and "fp32" that of a float64 / float32 GEMM; "tf32" and
# "fp16" the uncorrected low-precision tensor-core products (10-bit significands; methods kept
# for comparison).
PRECISIONS = {
    "dd": np.dtype(np.complex128),
    "fp64": np.dtype(np.complex128),
    "fp32": np.dtype(np.complex64),
    # FP32 operands split for the tensor cores but summed inside them with truncation (Markidis):
    # errors of FP32's size, biased; for comparison, never where FP32 accuracy is asked for
    "fp32-tc": np.dtype(np.complex64),
    "tf32": np.dtype(np.complex64),
    "fp16": np.dtype(np.complex64),
}


@dataclass(frozen=True)
class PrecisionSetting:
    """One setting of a method's accuracy knob for products with a d-qubit gate.

    Attributes:
        options: the method options that select it (passed to every product it runs).
        choices: the report choices its products make (what :meth:`Method.error_model` reads),
            known before any product runs: the model's bound follows from them alone.
        relative_cost: its time over the time of the method's default products (what a cost
            table measured), from the method's own account of its stages.
        label: a short name for reports (``"14 moduli"``).
    """

    options: Mapping[str, Any]
    choices: Mapping[str, Any] = field(default_factory=dict)
    relative_cost: float = 1.0
    label: str = ""


class Method:
    """Base class of a GEMM method.

    Subclasses set ``name``, ``precision`` (a key of :data:`PRECISIONS`), ``dtypes`` (accepted
    operand dtypes), ``option_specs`` (keyword -> :class:`gemm.options.Option`) and, where it
    holds, ``direct_small_gates``; they implement ``_run`` and, when they allocate workspace,
    :meth:`workspace_bytes`.
    """

    name: str = ""
    precision: str = "fp64"
    dtypes: tuple = REAL + COMPLEX
    option_specs: Mapping[str, Option] = MappingProxyType({})
    direct_small_gates: bool = False
    batched_products: bool = True
    description: str = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "options" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: declare options as option_specs (name -> gemm.options.Option), "
                            "not as a dict of defaults")
        if cls.precision not in PRECISIONS:
            raise ValueError(f"{cls.__name__}.precision={cls.precision!r}; expected one of {', '.join(PRECISIONS)}")
        if not isinstance(cls.direct_small_gates, bool):
            raise TypeError(f"{cls.__name__}.direct_small_gates must be a bool, got {cls.direct_small_gates!r}")

    @property
    def options(self) -> Mapping[str, Any]:
        """Option name -> default value (read-only)."""
        return MappingProxyType({k: spec.default for k, spec in self.option_specs.items()})

    @property
    def state_dtype(self) -> np.dtype:
        """The complex dtype a simulator keeps its state in for this method."""
        return PRECISIONS[self.precision]

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Every option, checked and merged over the defaults.

        Args:
            options: keyword options given by the caller.

        Returns:
            name -> value for every option of the method (checked values, defaults elsewhere).

        Raises:
            TypeError: an unknown option name, or a value of the wrong type.
            ValueError: a value outside the valid ones; the message names the option, the value
                and what is valid.
        """
        specs = self.option_specs
        unknown = sorted(set(options) - set(specs))
        if unknown:
            known = ", ".join(sorted(specs)) or "none"
            raise TypeError(f"method {self.name!r} got unknown option(s) {', '.join(unknown)}; it accepts: {known}")
        merged = {k: spec.default for k, spec in specs.items()}
        for k, value in options.items():
            merged[k] = specs[k].check(k, value)
        return merged

    def workspace_bytes(self, m: int, k: int, n: int, dtype, *, device: str = "gpu", **options) -> int:
        """Bytes one product ``(m, k) @ (k, n)`` of ``dtype`` allocates beyond A, B and C.

        Args:
            m, k, n: the product's sizes.
            dtype: the operands' dtype (real or complex).
            device: ``"cpu"`` or ``"gpu"``.
            **options: the method's options (checked as by :meth:`check_options`).

        Returns:
            A non-negative int; the base class (a method without workspace) returns 0.

        Raises:
            TypeError, ValueError: as :meth:`check_options`.
        """
        self.check_options(options)
        return 0

    def error_model(self, ctx):
        """The error of one product ``Y = U X`` as this method computes it.

        Args:
            ctx: a :class:`gemm.error_model.ProductContext` (the gate's size and norms, the
                state block's norm, the working dtype, the product's report choices).

        Returns:
            A :class:`gemm.error_model.ProductError` (a rigorous bound and an estimate of
            ``||fl(Y) - U X||_F``, the rounding of ``U`` to the working dtype included), or None:
            the method has no model, or the choices it needs are missing. The base class has none.
        """
        return None

    def precision_settings(self, d: int, dtype, default_choices: Mapping[str, Any]) -> tuple[PrecisionSetting, ...]:
        """The settings of the method's accuracy knob for products with a d-qubit gate, least
        accurate (cheapest) first.

        Args:
            d: the gate's qubits.
            dtype: the operands' dtype.
            default_choices: the report choices of a product with default options on data like a
                cost table's (a Haar gate and a random block): the reference of ``relative_cost``.

        Returns:
            A tuple of :class:`PrecisionSetting`; empty (the base class) where the method has no
            knob or ``default_choices`` lack what it needs: the method then runs with its defaults.
        """
        return ()

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
