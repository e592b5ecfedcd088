"""Error-corrected TF32/FP16 tensor-core GEMM (after Ootomo and Yokota), and its comparison methods.

Every operand element is split into a high part in the low format and a low part holding the
rest, scaled by 2^11 (:mod:`gemm.tcec.split`):

    hi = round(x) to TF32 (nearest, ties away) or FP16 (nearest; after a power-of-two scaling of
         the operand into the workspace), lo = round((x - hi) * 2^11)
    C  = hiA hiB + (loA hiB + hiA loB) / 2^11          (lo*lo dropped)

On the GPU (``tcec.cu``, launched by :mod:`gemm.tcec.gpu`) each k-step's hi*hi product is computed from zero on the tensor
core (mma.sync m16n8k8 TF32 / m16n8k16 FP16), two k-steps are added together and then to an FP32
register accumulator with round-to-nearest, because the tensor core's own accumulation truncates (round toward zero) and
that, not the split, is what costs the accuracy. The two correction products (2^-11 of the
result, so their own truncation does not matter) go to a second, tensor-core accumulator of the
same kernel (``ec_product="fused"``; on sm_90 the wgmma kernel, whose correction products keep
the tensor cores busy while the hi*hi products are added), or are computed by cuBLAS and added in
the kernel's epilogue (``ec_product="hybrid"``, faster than the mma.sync fused kernel).
``ec_product="auto"``, the default, takes the fused product where the wgmma kernel serves it or
the product is short (real k <= 64: gates of up to 5 qubits, at the memory rate), else the
hybrid. On the CPU the same split is done bit for bit and the mma.sync fused kernel's products
are emulated in float64 block by block (:mod:`gemm.tcec.emulate`), with a model of the tensor
core's truncation: where every sum is exact it gives the GPU's bits; elsewhere some results differ
in their last bits (and small amplitudes relatively more), and the GPU loses a little more on
average than the model (the debias adds a measured hardware term there).

Methods (all keep a complex64 state in the simulator; precision class ``"fp32"``, except the
uncorrected ``tf32`` and ``fp16``, whose class is their format's):

========== ====== ============================================================================
tf32tf32   TF32   error-corrected, FP32 accuracy
halfhalf   FP16   error-corrected, FP32 accuracy where the operand fits FP16's range after
                  scaling; otherwise it warns (or raises, ``on_range="raise"``) with the
                  fraction of elements out of range
tc-auto    either FP16 when both operands fit after scaling, else TF32, decided on the device
                  with one small host read; ``report.choices["precision"]`` says which
tf32       TF32   uncorrected: hi*hi only, accumulated inside the tensor core
fp16       FP16   uncorrected, scaled like halfhalf
markidis   TF32   four products hi*hi + lo*hi + hi*lo + lo*lo (lo unscaled), all accumulated
                  inside the tensor core (Markidis et al.), to show what the truncation costs;
                  an Inf operand can give NaN here (Inf times a zero lo part in one accumulator)
========== ====== ============================================================================

Option of the error-corrected methods: ``debias`` (default True) adds back the expected
truncation loss of the tensor-core results: without it the truncation drains the norm of a state
a little at every gate. Products of real k <= 64 on the mma.sync fused kernel (every gate of up
to 5 qubits) add each hi*hi
result's own expected loss, a calibrated fraction of its ulp, and nothing to results whose two
lowest bits are zero (a single nonzero product, exact); longer ones add ``beta`` times the hi*hi
sum in the epilogue, which costs nothing in the k loop (``gemm.tcec.debias.debias_mode``,
``PRODUCT_DEBIAS_FRACTION``, ``hybrid_debias_beta``).

Operands are float32/complex64. float64/complex128 operands are a TypeError unless the caller
passes ``downcast=True``, which rounds them to FP32 explicitly (the result is then float32 /
complex64). NaN and Inf propagate as in IEEE arithmetic: a non-finite hi*hi sum is returned as
it is (the corrections could only turn an Inf into a NaN).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from gemm import error_model as em
from gemm.errors import GemmError
from gemm.method import Method
from gemm.operands import COMPLEX, REAL, Operands
from gemm.options import Option, boolean, choice
from gemm.tcec import emulate, gpu, split
from gemm.tcec.debias import BLOCK_K as DEBIAS_BLOCK_K
from gemm.tcec.debias import DEBIAS, hybrid_debias_beta
from gemm.tcec.debias import product_debias_fraction as debias_fraction  # the kernels' F, the CPU's alike


class FP16RangeError(GemmError, ValueError):
    """A forced FP16 method met elements outside FP16's range (with ``on_range="raise"``)."""


class FP16RangeWarning(RuntimeWarning):
    """A forced FP16 method met elements outside FP16's range; the result loses accuracy there."""


ON_RANGE = ("warn", "raise")
EC_PRODUCTS = ("auto", "hybrid", "fused")

_DOWNCAST = Option(False, boolean(), "round float64/complex128 operands to FP32")
_PRODUCT_KERNEL = Option("auto", choice(*gpu.PRODUCT_KERNELS), "GPU product kernel (gemm.tcec.gpu.use_wgmma)")
_ON_RANGE = Option("warn", choice(*ON_RANGE), "what a forced FP16 method does out of FP16's range")
_EC_OPTIONS = {
    "downcast": _DOWNCAST,
    "debias": Option(DEBIAS, boolean(), "add back the expected truncation loss of the tensor-core results"),
    "ec_product": Option("auto", choice(*EC_PRODUCTS), "where the correction products run (GPU)"),
    "product_kernel": _PRODUCT_KERNEL,
}


class TensorCoreMethod(Method):
    """Common part of the TF32/FP16 methods: FP32 coercion, FP16 range plan, CPU or GPU path."""

    precision = "fp32"
    dtypes = REAL + COMPLEX  # float64 is rejected in _run with a message that offers downcast=True
    fmt: str | None = "tf32"  # None: chosen per call (tc-auto)
    scheme: str = "ec"
    # batched products split every batch (hi/lo planes, ranges) apart: on an H100, 28 qubits,
    # tc-auto on 8 contiguous middle qubits took 27 ms batched against 10 ms moved to the bottom
    # first (permutation included) and 7.6 ms at the bottom; 40 against 25 ms at d = 10
    batched_products = False
    option_specs = {"downcast": _DOWNCAST, "product_kernel": _PRODUCT_KERNEL}

    # ------------------------------------------------------------------ protocol

    def workspace_bytes(self, m: int, k: int, n: int, dtype=np.complex64, *, device: str = "gpu", **options) -> int:
        """Bytes of the hi/lo workspaces for an (m, k) @ (k, n) product (upper bound over formats).

        On the CPU the emulation holds the real form of both operands, their hi and lo parts and
        float64 products of one chunk at a time, with their temporaries: up to 7 chunk-sized
        arrays at once (measured with tracemalloc: 400-445 MiB beyond the output once the chunk
        cap of 64 MiB binds, at m = 16384 and k = 16-64).
        """
        opts = self.check_options(options)
        c = np.dtype(dtype).kind == "c"
        mm, nn, kk = (m, 2 * n, 2 * k) if c else (m, n, k)
        if device == "cpu":
            # a chunk holds float64 products of up to 16 values of k (FP16's k-block) per output
            chunk = min(emulate.CHUNK_BYTES, 8 * 16 * mm * nn)
            return int(4 * (3 * (mm * kk + kk * nn) + mm * nn) + 8 * chunk)
        return gpu.workspace_bytes(mm, nn, kk, 1, 1, self.fmt or "tf32", self.scheme,
                                   opts.get("ec_product", "auto"), opts["product_kernel"])

    def _run(self, ops: Operands, report, timer, *, downcast=False, on_range="warn", debias=DEBIAS,
             ec_product="auto", product_kernel="auto"):
        acc = (bool(debias),)
        if self.scheme == "ec":
            report.choices["debias"] = bool(debias)
        ops = self._to_fp32(ops, downcast, report)
        report.choices["scheme"] = self.scheme
        if ops.xp is np:
            return self._run_cpu(ops, report, timer, on_range, acc)
        return self._run_gpu(ops, report, timer, on_range, acc, ec_product, product_kernel)

    def error_model(self, ctx):
        """The error-corrected product as the kernels compute it (:mod:`gemm.tcec.emulate`); None
        for the uncorrected and Markidis schemes, for FP16 out of its range after scaling, and where
        the report does not say which format or scaling ran.

        Per real output part, with ``S = sum |a~_l| |b~_l|`` over the real form (``k' = 2k``
        terms; ``U`` rounded to FP32 first), ``x = 2^-11`` (TF32/FP16 significands of 11 bits),
        ``u = 2^-24``, ``kb`` products per instruction (8 TF32, 16 FP16), ``nb = ceil(k'/kb)``:

        * split: ``a = hi + lo 2^-11 + r``, ``|hi - a| <= x |a|``, ``|r| <= x^2 |a| + eta``; the
          dropped ``lo*lo`` and the residuals: ``x^2 (3 + 4x + 2x^2) S`` plus absolute terms
          ``eta`` (FP32 subnormals flushed: 2^-126; FP16 ``2^(-36 - scale)``, its subnormal lo);
        * hi*hi: each instruction's terms are cut toward zero 2 bits below the largest one's last
          bit and the sum truncated to FP32: ``(kb 2^-25 + 2^-23)`` of its absolute sum; pairs
          are added and accumulated with round-to-nearest, ``nb/2 + 1`` roundings;
        * corrections: a chain of ``2 nb`` truncating instructions (each ``(kb + 1) 2^-25 +
          2^-23`` of what it holds, its accumulator input included) and the debias FMAs, on
          ``2 (1 + x)^2 S``, entering times 2^-11;
        * debias: at most ``F 2^-23`` (F <= 0.6, per product) or ``beta`` of the hi*hi sum;
        * the final FP32 rounding ``u |y|``.

        Over the product ``sqrt(2) c (1 + u) || |U| ||_2 ||X||_F`` plus the rounding of ``U``
        and the absolute terms. Estimate: the residuals ``RMS^2 x^2`` each, the truncation's
        unbiased remainder ``0.43 u`` (a uniform ulp fraction, debiased), and ``nb/2 + 2``
        roundings to nearest.
        """
        if self.scheme != "ec":
            return None
        ch = ctx.choices
        fmt = self.fmt or ch.get("precision")
        if fmt not in ("tf32", "fp16") or ch.get("tf32_fits") is False:  # (sums that may overflow FP32)
            return None
        if fmt == "fp16":
            scales = ch.get("fp16_scale_exp")
            if ch.get("fp16_fits") is not True or scales is None:
                return None
            eta = 2.0 ** (-36 - min(scales))
            eta_acc = 2.0 ** (-126 - scales[0] - scales[1])
        else:
            eta, eta_acc = 2.0 ** -126, 2.0 ** -126
        u, x = em.U32, 2.0 ** -11
        kb = DEBIAS_BLOCK_K[fmt]
        kk = 2 * ctx.k
        nb = -(-kk // kb)
        npairs = -(-nb // 2)
        split_rel = x * x * (3.0 + 4.0 * x + 2.0 * x * x)
        eps_hh = kb * 2.0 ** -25 + 2.0 ** -23
        hh_rel = (em.chain(1, eps_hh) + em.chain(npairs + 1, u) * (1.0 + eps_hh)) * (1.0 + x) ** 2
        debias = bool(ch.get("debias", True))
        deb = 0.0
        if debias:
            deb = max(debias_fraction(fmt, kk) * 2.0 ** -23, float(ch.get("debias_beta", 0.0)),
                      hybrid_debias_beta(fmt, kk)) * (1.0 + x) ** 2 * (1.0 + eps_hh)
        eps_c = (kb + 1) * 2.0 ** -25 + 2.0 ** -23
        cor_rel = em.chain(2 * nb + (nb if debias else 0), eps_c) * (2.0 * (1.0 + x) ** 2 + deb * 2.0 ** 11)
        c_elem = split_rel + hh_rel + x * cor_rel + deb
        c_elem += u * (1.0 + c_elem)
        prod = math.sqrt(2.0) * c_elem * (1.0 + u) * ctx.abs_norm * ctx.x_norm
        n_out = max(ctx.n_amplitudes, 1)
        line = max(ctx.abs_norm, ctx.x_norm)
        absolute = (2.0 * eta * math.sqrt(2.0 * n_out * kk) * line
                    + 4.0 * (nb + 1) * eta_acc * math.sqrt(2.0 * n_out))
        gb, ge = em.rounded_gate(ctx)
        rms = em.RMS_ROUNDING
        est_rel = math.sqrt(3.0 * (rms * rms * x * x) ** 2 + (0.43 * u) ** 2 + (rms * u) ** 2 * (npairs / 2 + 2))
        est = math.hypot(est_rel * ctx.op_norm * ctx.x_norm, ge)
        return em.ProductError(prod + gb + absolute, est,
                               {"product": prod, "gate_rounding": gb, "underflow": absolute})

    # ------------------------------------------------------------------ checks

    def _to_fp32(self, ops: Operands, downcast: bool, report) -> Operands:
        a, b = ops.a, ops.b
        wide = [nm for nm, x in (("a", a), ("b", b)) if np.dtype(x.dtype) in (np.float64, np.complex128)]
        if wide:
            if not downcast:
                got = ", ".join(f"{nm} is {getattr(ops, nm).dtype}" for nm in wide)
                raise TypeError(f"method {self.name!r} computes in FP32 and takes float32/complex64 operands; "
                                f"{got}; pass downcast=True to round them to FP32 explicitly")
            report.notes.append(f"downcast: {', '.join(wide)} rounded to FP32")
        target = np.complex64 if ops.is_complex else np.float32
        if a.dtype != target:
            a = a.astype(target)
        if b.dtype != target:
            b = b.astype(target)
        return Operands(a, b, ops.xp, ops.batch, ops.m, ops.k, ops.n, np.dtype(target))

    def _decide(self, ranges, ops, report, on_range) -> tuple[str, tuple[int, int]]:
        """Format and FP16 scalings from the exponent ranges ``[[emax, emin, nonfinite, nonzero]] x 2``."""
        if self.fmt == "tf32":
            report.choices["precision"] = "tf32"
            return "tf32", (0, 0)
        (ea, fa), (eb, fb) = (split.plan_fp16(int(r[0]), int(r[1]), int(r[3])) for r in ranges)
        fits = fa and fb
        report.choices["fp16_fits"] = bool(fits)
        report.choices["nonfinite"] = int(ranges[0][2]) + int(ranges[1][2])
        if self.fmt is None:
            fmt = "fp16" if fits else "tf32"
            report.choices["precision"] = fmt
            if fmt == "tf32":
                report.notes.append("tc-auto: an operand does not fit FP16's range after scaling; TF32 used")
                # the accuracy guard of backend="auto" reads it (qsim_tc.plan.guard)
                k = ops.k * (2 if ops.is_complex else 1)
                report.choices["tf32_fits"] = split.tf32_fits(ranges[0], ranges[1], k)
                return "tf32", (0, 0)
            report.choices["fp16_scale_exp"] = [ea, eb]
            return "fp16", (ea, eb)
        report.choices["precision"] = "fp16"
        report.choices["fp16_scale_exp"] = [ea, eb]
        if not fits:
            xp = ops.xp
            parts = 2 if ops.is_complex else 1
            lines = []
            for name, x, e, ok in (("a", ops.a, ea, fa), ("b", ops.b, eb, fb)):
                if not ok:
                    below = split.count_below(x, e) if xp is np else gpu.count_below(xp, x, e)
                    frac = below / (x.size * parts)
                    report.choices[f"fp16_out_of_range_{name}"] = frac
                    lines.append(f"{frac:.3g} of the elements of {name} fall below FP16's normal range "
                                 f"after scaling by 2^{e}")
            msg = (f"method {self.name!r}: {'; '.join(lines)}; those lose accuracy "
                   f"(use tf32tf32 or tc-auto for such data)")
            if on_range == "raise":
                raise FP16RangeError(msg)
            warnings.warn(msg, FP16RangeWarning, stacklevel=6)  # the caller of gemm.matmul
            report.notes.append(msg)
        return "fp16", (ea, eb)

    # ------------------------------------------------------------------ paths

    def _run_cpu(self, ops, report, timer, on_range, acc):
        ranges = None
        if self.fmt != "tf32":
            with timer.stage("range"):
                ar, br = split.real_form(ops.a, ops.b)
                ranges = [split.exponent_range(ar), split.exponent_range(br)]
        fmt, scales = self._decide(ranges, ops, report, on_range)
        with timer.stage("product"):
            c = emulate.emulate(ops.a, ops.b, fmt, self.scheme, *scales, *acc)
        report.choices["form"] = "real (cpu emulation)"
        return c

    def _run_gpu(self, ops, report, timer, on_range, acc, ec_product, product_kernel):
        cp = ops.xp
        with timer.stage("split"):
            plan = gpu.make_plan(cp, ops)
        ranges = None
        if self.fmt != "tf32":
            probe_fmt = self.fmt or "fp16"
            with timer.stage("range"):
                ranges = gpu.exponent_ranges(cp, plan, probe_fmt).get()
        fmt, scales = self._decide(ranges, ops, report, on_range)
        return gpu.run(cp, ops, plan, fmt, self.scheme, scales, timer, report, *acc, ec_product=ec_product,
                       product_kernel=product_kernel)


class TF32TF32(TensorCoreMethod):
    """Error-corrected TF32: FP32 accuracy from three TF32 tensor-core products."""

    option_specs = _EC_OPTIONS
    name = "tf32tf32"
    fmt = "tf32"
    scheme = "ec"
    description = "error-corrected TF32 tensor cores (hi/lo split, hi*hi accumulated in FP32 RN)"


class HalfHalf(TensorCoreMethod):
    """Error-corrected FP16 with power-of-two operand scaling; warns when the range does not fit."""

    option_specs = {**_EC_OPTIONS, "on_range": _ON_RANGE}
    name = "halfhalf"
    fmt = "fp16"
    scheme = "ec"
    description = "error-corrected FP16 tensor cores (scaled hi/lo split); warns out of FP16 range"


class TCAuto(TensorCoreMethod):
    """Error-corrected FP16 where both operands fit FP16 after scaling, else TF32."""

    option_specs = _EC_OPTIONS
    name = "tc-auto"
    fmt = None
    scheme = "ec"
    description = "error-corrected FP16 if the operands fit its range after scaling, else TF32"


class TF32(TensorCoreMethod):
    """Uncorrected TF32 (hi*hi only, accumulated inside the tensor core), for comparison."""

    name = "tf32"
    precision = "tf32"
    fmt = "tf32"
    scheme = "plain"
    description = "uncorrected TF32 tensor cores (comparison)"


class FP16(TensorCoreMethod):
    """Uncorrected FP16 with power-of-two scaling, for comparison."""

    option_specs = {"downcast": _DOWNCAST, "on_range": _ON_RANGE, "product_kernel": _PRODUCT_KERNEL}
    name = "fp16"
    precision = "fp16"
    fmt = "fp16"
    scheme = "plain"
    description = "uncorrected FP16 tensor cores, scaled (comparison)"


class Markidis(TensorCoreMethod):
    """Four TF32 products (hi*hi, lo*hi, hi*lo, lo*lo) accumulated inside the tensor core."""

    name = "markidis"
    precision = "fp32-tc"
    fmt = "tf32"
    scheme = "markidis"
    description = "Markidis: four TF32 products accumulated in the tensor core (comparison)"
