"""The CRT scheme on INT8 (``int8-crt``, Ozaki scheme II): FP64-accurate products from exact
INT8 x INT8 -> INT32 GEMMs of residues modulo pairwise-coprime moduli <= 256.

The pipeline reads top to bottom as stages, each timed in the report:

1. **scale** (:mod:`gemm.ozaki.crt.scale`): every line (row of A, column of B) is scaled by a
   power of two so that ``A' = trunc(A 2^sA)`` and ``B' = trunc(2^sB B)`` have line 2-norms at
   most 2^alpha and 2^beta, ``2^(alpha + beta) <= P/4``: the exact integer product ``C' = A' B'``
   lies in ``[-P/4, P/4]`` and is determined by its residues. NaN/Inf raise
   :class:`gemm.NonFiniteError` here, before any product.
2. **residues**: ``A' mod p_i`` and ``B' mod p_i`` in the symmetric range (INT8), combined per
   complex form (:mod:`gemm.ozaki.crt.moduli`). On the GPU either FP32 chains over 14-bit digits
   or (``QSIM_TC_CRT_RESIDUES=mma``) one INT8 tensor-core product of balanced 8-bit limbs and a
   table of ``2^(8 j) mod p_i`` (:mod:`gemm.ozaki.crt.limbs`): the same bytes.
3. **int8_gemm**: per modulus one INT8 GEMM per part, exact in INT32 (``k' * 128^2 < 2^31``;
   on the CPU float64 BLAS, exact while ``k' * 128^2 < 2^53``).
4. **reconstruct**: per output element, ``C' = sum c_i w_i - q P`` in 38-bit words (exact) from
   the products' residues ``c_i`` and the CRT weights ``w_i = (M_i y_i) mod P``
   (:meth:`gemm.ozaki.crt.moduli.Moduli.weights`), balanced carries, one rounding, times
   ``2^-(sA + sB)``. On the GPU the word sums of the wgmma products' residues may run on the INT8
   tensor cores instead of the FP64 pipe (:func:`gemm.ozaki.crt.gpu.reconstruct_mma`,
   ``QSIM_TC_CRT_RECONSTRUCT=mma``): the same words, the same bits.

Error: the only errors are the truncation of A and B to integers and the final rounding (plus at
most 2^-100 relative from the word sum): ``|C - C~|_ij <= c ||a_i|| ||b_j|| + u |C_ij|`` with
``c = 2.25 sqrt(k') (2^-alpha + 2^-beta)`` (``report.choices["error_bound"]``; native FP64's
classical bound is ``k' u ||a_i|| ||b_j||``). Because ``C'`` is exact, the result does not depend
on how the products are formed: the 4-, 3- and 2-product complex forms give identical bits for
one moduli set, and the CPU and GPU paths are identical bit for bit.

Complex forms (``complex_form``): ``4m`` one real product of the stacked operands
``[Ar Ai] @ [[Br Bi], [-Bi Br]]`` (four real products' worth); ``3m`` Karatsuba/Gauss on
residues (``ar br``, ``ai bi``, ``(ar + ai)(br + bi)``: exact, unlike 3M in floating point);
``2m`` two real products modulo moduli in which -1 is a square (``s^2 = -1``): the images
``x + s y`` and ``x - s y`` multiply independently. 2m needs about one modulus more than 4m/3m
(split moduli carry fewer bits) and still does the fewest INT8 products: 34 against 48 and 64 at
k = 1024, 53 bits. It is the default: on the CPU at equal accuracy (a d = 10 gate, k = 1024)
2m / 3m / 4m took 3.6 / 3.7 / 4.4 s (one thread 4.5 / 5.4 / 6.8 s); at d = 8, where residues and
reconstruction outweigh the products, 4m was ahead by 10%. On the GPU with the fused products
(28 qubits, H200) 2m is the fastest at d = 10 and 12 (41.0 / 83.7 ms against 4m's 49.2 / 136.8)
and 4m by 2% at d = 8.

The number of moduli comes from ``bits`` or is given as ``moduli`` (which takes precedence). From
``bits`` it is chosen per call from the data, as ``int8-auto`` chooses slices
(:func:`gemm.ozaki.crt.moduli.count_for_bits`): the fewest moduli at which the elements of each
operand lose on average at most one bit against a ``bits``-bit rounding, counting each element's
depth below its line's norm bound (that depth grows as log2(sqrt(k)) for flat lines, and with the
spread of the exponents). At ``bits = 53`` that keeps the error at or below a native FP64 GEMM's;
at k = 1024 complex it takes 16-17 moduli for flat data and up to 20 for phi = 4.
A given count fixes ``alpha`` and ``beta`` whatever the data, and so the error model's bound:
``Simulator(tolerance=...)`` runs the fewest moduli whose bound meets a tolerance
(:meth:`Int8CRT.precision_settings`, :func:`qsim_tc.run_error.tune_precision`).

The larger operand is processed in blocks of lines so that its residues and the INT32 products
of every modulus stay within :func:`block_budget` (on the GPU 1/2 of the output, at least
64 MiB, at most 2 GiB; on the CPU 1/16, 16-256 MiB); the smaller operand's residues are computed once per call.
"""

from __future__ import annotations

import functools
import math
from types import MappingProxyType

import numpy as np

from gemm import error_model as em
from gemm.errors import NonFiniteError
from gemm.method import Method, PrecisionSetting
from gemm.operands import matmul_shape
from gemm.options import Option, choice, integer
from gemm.ozaki.crt import cpu, gpu, wgmma
from gemm.ozaki.crt.moduli import (
    F64_BOUND,
    FORMS,
    INT32_BOUND,
    MAX_MODULI,
    MEAN_LOSS_BITS,
    MIN_MODULI,
    PARTS,
    PRODUCTS,
    Moduli,
    b_lines,
    count_for_bits,
    dot_length,
    error_coefficient,
    family_for,
)

BITS_RANGE = (8, 100)
# The share of a product's time that does not scale with the moduli count, for the cost of a
# count other than the measured one (PrecisionSetting.relative_cost): at d = 10 on an H200 with
# 17 moduli (docs/results.md section 6) scale took 2.0 of 34.2 ms, and the reconstruction's
# finish (about 85 FP64 operations a complex element against 10 a modulus) about 2.7 of its
# 8.1; residues, products and the per-modulus word sums (the rest) grow with the count.
FIXED_COST_SHARE = (2.0 + 2.7) / 34.2
BLOCK_BYTES = {"cpu": (16 << 20, 256 << 20), "gpu": (64 << 20, 2 << 30)}  # (floor, cap) of a block's workspace
# The share of the output a block's workspace may take. On the GPU each block is three kernels
# (residues, products, reconstruction), each ending in a partial wave, plus their launches and
# host work: at 1/16 (about 70 blocks for a 28-qubit d = 10 gate) brickwork(28, 10, 4) took
# 305-307 ms against 292 at 1/2 (9 blocks), 297-300 at 1/4 and at one block (H200,
# `crt_blocks_h200.json`); the whole output would add state-sized memory for no gain.
BLOCK_FRACTION = {"cpu": 16, "gpu": 2}


def block_budget(device: str, out_bytes: int) -> int:
    """Workspace bytes one block of the larger operand may use: a share of the output
    (:data:`BLOCK_FRACTION`) within the device's (floor, cap) in :data:`BLOCK_BYTES`."""
    lo, hi = BLOCK_BYTES[device]
    return int(min(hi, max(lo, out_bytes // BLOCK_FRACTION[device])))


@functools.lru_cache(maxsize=64)
def _count_settings(family: str, n0: int) -> tuple[PrecisionSetting, ...]:
    """:meth:`Int8CRT.precision_settings` of a family against a default count ``n0`` (the same
    for every gate width: a count fixes alpha and beta whatever k)."""
    out = []
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        mods = Moduli.first(n, family)
        out.append(PrecisionSetting(MappingProxyType({"moduli": n}),
                                    MappingProxyType({"moduli": n, "alpha": mods.alpha, "beta": mods.beta,
                                                      "p_bits": mods.p_bits, "moduli_family": family}),
                                    FIXED_COST_SHARE + (1.0 - FIXED_COST_SHARE) * n / n0, f"{n} moduli"))
    return tuple(out)


def _as_lines(x, role: str):
    """The 3-D line view ``(outer, inner, K)`` of a 2-D/3-D operand (a view, never a copy)."""
    if role == "a":
        return x[None] if x.ndim == 2 else x
    return x.T[None] if x.ndim == 2 else x.transpose(0, 2, 1)


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class _Sizes:
    """The sizes of one 2-D product: R lines of A, NC lines of B, inner K, on ``device``."""

    def __init__(self, R, NC, K, form, cplx, n, device, fused=False):
        self.R, self.NC, self.K, self.form, self.cplx, self.n, self.device = R, NC, K, form, cplx, n, device
        stages = gpu if device == "gpu" else cpu
        self.kdot = dot_length(form, K)
        # the fused products read k in 128-byte atoms and write one byte per product element
        self.kp = _round_up(self.kdot, wgmma.KP_ALIGN if fused else stages.KP_ALIGN)
        self.parts = PARTS[form]
        self.bl = b_lines(form)
        self.item_res, self.item_prod = stages.ITEM_RES, (1 if fused else stages.ITEM_PROD)
        self.big_is_a = R >= NC
        self.out_bytes = R * NC * (16 if cplx else 8)

    def per_line(self) -> int:
        """Workspace bytes per line of the larger operand."""
        n, g = self.n, self.parts
        if self.big_is_a:
            res = n * g * self.kp * self.item_res
            prod = n * g * _round_up(self.bl * self.NC, wgmma.OUT_ALIGN if self.item_prod == 1 else 4) * self.item_prod
            elems = self.NC
        else:
            res = n * g * self.bl * self.kp * self.item_res
            prod = n * g * self.R * self.bl * self.item_prod
            elems = self.R
        # the CPU reconstruction holds the products' residues (up to 3 n per complex element), one
        # part's c_i and a few words per output element
        temp = elems * ((4 if self.cplx else 2) * self.n + 12) * 8 if self.device == "cpu" else 0
        return res + prod + temp

    def block_lines(self) -> int:
        total = self.R if self.big_is_a else self.NC
        nb = max(32, block_budget(self.device, self.out_bytes) // max(self.per_line(), 1))
        return int(min(total, nb // 32 * 32 if nb >= 32 else 32))

    def small_bytes(self) -> int:
        lines = self.NC * self.bl if self.big_is_a else self.R
        return self.n * self.parts * lines * self.kp * self.item_res

    def workspace(self) -> int:
        return self.small_bytes() + self.block_lines() * self.per_line()


class Int8CRT(Method):
    """Ozaki scheme II on INT8: residues modulo pairwise-coprime moduli <= 256, one exact INT8
    GEMM per modulus and part, the Chinese remainder theorem in multi-word FP64.

    Options:
        bits: target accuracy; 53 keeps the error at or below a native FP64 GEMM's (the count
            is chosen from the operands: :func:`gemm.ozaki.crt.moduli.count_for_bits`).
        moduli: the number of moduli (2..20); when given it takes precedence over ``bits``.
        complex_form: ``"2m"`` (default), ``"3m"`` or ``"4m"``: INT8 products per modulus for
            complex operands (real operands use one).
        product_kernel: on the GPU, ``"wgmma"`` reduces each INT8 product modulo its modulus in
            the kernel's epilogue (:mod:`gemm.ozaki.crt.wgmma`, sm_90 only) and writes one byte
            per element; ``"cublas"`` writes INT32 products through cuBLAS ``gemmEx`` (any GPU;
            the cross-check); ``"auto"`` (default) takes wgmma where it runs. The results are
            identical bit for bit. The CPU ignores it.
    """

    name = "int8-crt"
    precision = "fp64"
    option_specs = {
        "bits": Option(53, integer(*BITS_RANGE), "target bits (53: no worse than native FP64)"),
        "moduli": Option(None, integer(MIN_MODULI, MAX_MODULI, none=True),
                         "number of moduli; takes precedence over bits"),
        "complex_form": Option("2m", choice(*FORMS), "real INT8 products per modulus for complex operands"),
        "product_kernel": Option("auto", choice(*wgmma.KERNELS),
                                 "GPU INT8 products: 'wgmma' (fused modular reduction, sm_90), 'cublas' (INT32 out), "
                                 "'auto' (wgmma where it runs)"),
    }
    description = "Ozaki scheme II (CRT) on INT8 tensor cores: residues, INT8 GEMMs, multi-word reconstruction"

    @staticmethod
    def _form(opts, cplx) -> str | None:
        return opts["complex_form"] if cplx else None

    def workspace_bytes(self, m: int, k: int, n: int, dtype, *, device: str = "gpu", **options) -> int:
        """Bytes of workspace (residues, products, block temporaries) for ``(m, k) @ (k, n)``."""
        opts = self.check_options(options)
        cplx = np.dtype(dtype).kind == "c"
        form = self._form(opts, cplx)
        # with bits= the count depends on the data: size for the largest
        n_mod = opts["moduli"] or MAX_MODULI
        # the larger operand may come as A or as B (the engine's two orientations)
        return max(_Sizes(x, y, int(k), form, cplx, n_mod, device, fused).workspace()
                   for x, y in ((int(m), int(n)), (int(n), int(m))) for fused in (False, device == "gpu"))

    def error_model(self, ctx):
        """Ozaki scheme II with the moduli the report names (``alpha``, ``beta`` bits kept).

        The integer product is exact; the errors are the truncations of A and B to their integer
        grids and the one rounding of the reconstruction (:func:`gemm.ozaki.crt.moduli.
        error_coefficient`): per output part ``c ||a_i|| ||b_j|| + u (1 + 2^-100) |Y|`` with
        ``c = 2.25 sqrt(k') (2^-alpha + 2^-beta)``, times ``sqrt(1 + k' 2^-32)`` (the norm bound's
        own slack, :mod:`gemm.ozaki.crt.scale`); over the product ``sqrt(2) c ||U||_F ||X||_F``.
        Estimate: truncation errors of one unit's third in rms against lines of random sign, grid
        at ``1.5 ||line||`` (``2^E`` lies in ``[||line||, 2.25 ||line||)``), and the rounding.
        """
        ch = ctx.choices
        alpha, beta = ch.get("alpha"), ch.get("beta")
        if alpha is None or beta is None:
            return None
        kk = 2 * ctx.k
        c = error_coefficient(alpha, beta, kk) * math.sqrt(1.0 + kk * 2.0 ** -32)
        trunc = math.sqrt(2.0) * c * ctx.frob_norm * ctx.x_norm
        trunc_e = math.sqrt(2.0) * 1.5 / math.sqrt(3.0) * (2.0 ** -alpha + 2.0 ** -beta) * ctx.frob_norm * ctx.x_norm
        gb, ge = em.rounded_gate(ctx)
        rb, re_ = em.final_rounding(ctx, em.U64 * (1.0 + 2.0 ** -100), trunc + gb)
        nb, ne = em.final_rounding(ctx, ctx.u, trunc + gb + rb) if ctx.narrow else (0.0, 0.0)
        bound = trunc + gb + rb + nb
        est = math.sqrt(trunc_e ** 2 + ge ** 2 + re_ ** 2 + ne ** 2)
        return em.ProductError(bound, est, {"truncation": trunc, "gate_rounding": gb, "rounding": rb + nb})

    def precision_settings(self, d: int, dtype, default_choices):
        """Every moduli count (``moduli=n``, :data:`MIN_MODULI`..:data:`MAX_MODULI`) for a d-qubit
        gate, with the ``alpha`` and ``beta`` its error model reads: a given count fixes them
        whatever the data (:func:`gemm.ozaki.crt.moduli.alpha_beta`), so the model's bound at
        that count is known before the run. The cost of ``n`` moduli against the default product's
        ``n0`` (``default_choices["moduli"]``, the count the data chose at ``bits=53``) is
        ``f + (1 - f) n / n0`` with ``f`` = :data:`FIXED_COST_SHARE`. Empty without ``n0``.
        """
        n0 = default_choices.get("moduli") if default_choices else None
        if not isinstance(n0, int) or n0 < 1:
            return ()
        cplx = np.dtype(dtype).kind == "c"
        return _count_settings(family_for(self._form(self.options, cplx)), n0)

    def _run(self, ops, report, timer, **opts):
        xp = ops.xp
        if ops.batch is not None and ops.a.ndim == 3 and ops.b.ndim == 3:
            out = xp.empty(ops.out_shape, dtype=ops.dtype)
            for i in range(ops.batch):
                out[i] = self._product(xp, ops.a[i], ops.b[i], ops.dtype, report, timer, opts)
            return out
        return self._product(xp, ops.a, ops.b, ops.dtype, report, timer, opts)

    def _product(self, xp, a, b, dtype, report, timer, opts, mods: Moduli | None = None):
        stages = cpu if xp is np else gpu
        device = "cpu" if xp is np else "gpu"
        cplx = np.dtype(dtype).kind == "c"
        work = np.dtype(np.complex128 if cplx else np.float64)
        K = a.shape[-1]
        form = self._form(opts, cplx)
        family = family_for(form)
        with timer.stage("scale"):
            XA = _as_lines(a.astype(work, copy=False), "a")
            XB = _as_lines(b.astype(work, copy=False), "b")
            auto = mods is None and opts["moduli"] is None
            EA, EB, (bad_a, bad_b, ha, hb) = stages.line_exponents(xp, XA, XB, cplx, auto)
        for name, bad in (("a", bad_a), ("b", bad_b)):
            if bad:
                raise NonFiniteError(f"{name} holds {bad} NaN/Inf element(s); this method needs finite operands")
        if mods is None:  # (tests pass a moduli set to compare the forms on one set)
            if auto:
                n, met, losses = count_for_bits(opts["bits"], (ha, hb), family)
                report.choices["mean_loss_bits"] = {"a": losses[0], "b": losses[1]}
                report.choices["target_met"] = met
                if not met:
                    report.notes.append(
                        f"int8-crt: bits={opts['bits']} needs more than {MAX_MODULI} {family} moduli for these "
                        f"operands (mean loss a: {losses[0]:.3g}, b: {losses[1]:.3g} bits > {MEAN_LOSS_BITS:g}); "
                        f"used {MAX_MODULI}")
            else:
                n = opts["moduli"]
            mods = Moduli.first(n, family)
        fused = xp is not np and wgmma.use_fused(xp, opts["product_kernel"])
        sz = _Sizes(XA.shape[0] * XA.shape[1], XB.shape[0] * XB.shape[1], K, form, cplx, len(mods), device, fused)
        bound = INT32_BOUND if device == "gpu" else F64_BOUND
        if sz.kdot * 128 * 128 >= bound:
            raise ValueError(f"inner dimension too long for exact INT8 products: k={K} gives dot products of "
                             f"{sz.kdot}, and {sz.kdot} * 128^2 must stay below 2^{bound.bit_length() - 1}")
        out_shape = matmul_shape(a.shape, b.shape)
        R, NC = sz.R, sz.NC
        out = stages.new_output(xp, R, NC, work, out_shape)
        nb = sz.block_lines()
        with timer.stage("residues"):
            if sz.big_is_a:
                small = stages.residues(xp, XB, EB, mods.beta, 0, NC, mods, form, "b", sz.kp)
            else:
                small = stages.residues(xp, XA, EA, mods.alpha, 0, R, mods, form, "a", sz.kp)
        total = R if sz.big_is_a else NC
        for l0 in range(0, total, nb):
            cnt = min(nb, total - l0)
            with timer.stage("residues"):
                if sz.big_is_a:
                    RA, RB = stages.residues(xp, XA, EA, mods.alpha, l0, cnt, mods, form, "a", sz.kp), small
                    r0, c0, cols = l0, 0, NC
                else:
                    RA, RB = small, stages.residues(xp, XB, EB, mods.beta, l0, cnt, mods, form, "b", sz.kp)
                    r0, c0, cols = 0, l0, cnt
            with timer.stage("int8_gemm"):
                P = wgmma.products_r8(xp, RA, RB, mods) if fused else stages.products(xp, RA, RB, mods, form)
            with timer.stage("reconstruct"):
                if not fused:
                    rebuild = stages.reconstruct
                else:
                    rebuild = gpu.reconstruct_mma if gpu.use_mma_reconstruct(form) else gpu.reconstruct_r8
                rebuild(xp, P, mods, form, EA, EB, r0, c0, cols, out)
            del P, RA, RB
        with timer.stage("reconstruct"):
            res = stages.to_layout(xp, out, R, NC, out_shape)
            if res.dtype != dtype:
                res = res.astype(dtype)
        kprime = 2 * K if cplx else K
        nblocks = -(-total // nb)
        bound_c = error_coefficient(mods.alpha, mods.beta, kprime)
        report.choices.update({
            "moduli": len(mods),
            "moduli_values": list(mods.values),
            "moduli_family": mods.family,
            "complex_form": form,
            "p_bits": mods.p_bits,
            "alpha": mods.alpha,
            "beta": mods.beta,
            "int8_products_per_modulus": PRODUCTS[form] if cplx else 1,
            "int8_gemms": len(mods) * sz.parts * nblocks,
            "product_kernel": None if xp is np else ("wgmma" if fused else "cublas"),
            # the word sums of the reconstruction: FP64 (crt_reconstruct_r8 / crt_reconstruct) or the
            # INT8 tensor cores (crt_reconstruct_mma, gpu.RECONSTRUCT = "mma")
            "reconstruct_kernel": None if xp is np else ("mma" if fused and gpu.use_mma_reconstruct(form) else "fp64"),
            # the residue kernel: FP32 digit chains (crt_residues_J) or the INT8 tensor cores
            # (crt_residues_mma, gpu.RESIDUES = "mma"), the same bytes
            "residues_kernel": None if xp is np else gpu.RESIDUES,
            "blocks": nblocks,
            # |C - C~|_ij <= error_bound * ||a_i|| ||b_j|| + u |C_ij|; native: native_bound * ||a_i|| ||b_j||
            "error_bound": bound_c,
            "native_bound": kprime * 2.0 ** -53,
            "effective_bits": float(-np.log2(bound_c / np.sqrt(kprime))),
        })
        report.workspace_bytes = sz.workspace()
        return res
