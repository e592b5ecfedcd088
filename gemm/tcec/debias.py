"""The model of the tensor core's truncation and the debias that adds its expected loss back.

The tensor core accumulates with round-toward-zero; the error-corrected methods accumulate hi*hi
outside it, but each instruction's own result is still truncated: on average 3/8 of an ulp
toward zero (:data:`DEBIAS_FRACTION`, from :data:`TC_EXTRA_BITS` measured by ``qsim-tc probe``),
a bias that a circuit of many gates turns into a steady loss of norm (measured on brickwork
circuits: norm drift ~1e-7..1e-6 without, ~1e-9 with, as native CGEMM). With ``debias`` the
expected loss goes to the correction accumulator, scaled by 2^11 there, so that it is not rounded
away: per result, ``sign(x) F ulp(x)`` for the results that are not exact (:data:`DEBIAS_MODE`
"product", :data:`PRODUCT_DEBIAS_FRACTION`), or once at the end as ``beta * acc`` ("epilogue",
:func:`debias_beta`, :func:`hybrid_debias_beta`). The constants were calibrated on the CPU
emulation (:mod:`gemm.tcec.emulate`) and on an H200 (:data:`PRODUCT_DEBIAS_FRACTION`'s share
beyond the older model, ``HYBRID_EXTRA_LOSS``).
"""

from __future__ import annotations

import math

import numpy as np

from gemm.tcec.split import LO_SHIFT

BLOCK_K = {"tf32": 8, "fp16": 16}  # real inner values per mma instruction
DEBIAS = True  # default: add back the expected truncation loss of each k-block result


TC_EXTRA_BITS = 2  # bits kept below the largest term's last bit (``qsim-tc probe`` on an H200)
# The cut terms are multiples of q = ulp / 2^TC_EXTRA_BITS; truncating their sum to FP32 loses
# 0, q, 2q or 3q with equal chance when the sum stays in the largest term's binade: on average
# (1 - 2^-b) / 2 = 3/8 ulp. Adding that back removes the bias toward zero.
DEBIAS_FRACTION = (1.0 - 2.0**-TC_EXTRA_BITS) / 2.0


HH_CHAIN = 1  # hi*hi k-steps summed inside the tensor core before the RN addition (1: each from zero)
# How the mma.sync fused product (and its emulation, gemm.tcec.emulate) adds the loss back: "product", each hi*hi
# result's own, per k-step (PRODUCT_DEBIAS_FRACTION), or "epilogue", beta * sum. The wgmma fused
# product and the hybrid always use the epilogue (hybrid_debias_beta).
DEBIAS_MODE = "product"

# The per-product debias: an instruction that summed one nonzero product returns it exactly (two
# 11-bit significands make at most 22 bits, so the lowest two bits of the FP32 result are zero); one
# that summed more lost, on average, a fraction of its result's ulp that grows with the number of
# products t it summed. Results whose lowest two bits are zero get nothing (a quarter of the inexact
# ones are among them, which the fraction allows for); the others get sign(x) F ulp(x), F by
# t = min(k, BLOCK_K[fmt]) as if the operands were dense. The GPU kernels and the emulation take the
# same F. Calibrated first on the emulation with an older model of the instruction (its products
# aligned to their largest value; benchmarks/tune/debias.py --gates, debias_gates_cpu.json, entry
# "product": 0.26 / 0.375 / 0.524 / 0.572 for t = 2 / 4 / 8 / 16), under which Haar gates of
# d = 1..5 on dense states changed the norm by at most a few 1e-10 per gate. On an H200 the same
# gates then lost 1.9-3.6e-9 (TF32) and 2.4-3.3e-9 (FP16) of norm^2 each, d = 1 2.6-6.2e-9
# (debias_gates_gpu_h200.json, run "product"), and the kernels took F + 0.022 (about 2.7e-9 /
# 1.26e-7 per unit of F). The loss was the model's: an H100's instructions align to the products'
# exponent sums (gemm.tcec.emulate.tc_mma, bit for bit on 8,192 random instructions a format), and
# under that model the emulation loses 1.5-4.5e-9 per gate at the old F, within +-1.4e-9 for d >= 2
# at these (d = 1: -1.7e-9). The tables hold the kernels' F; the float32 scales are unchanged.
PRODUCT_DEBIAS_FRACTION = {1: 0.0, 2: 0.282, 4: 0.397, 8: 0.546, 16: 0.594}
# Products up to this real inner dimension (gates of up to 5 complex qubits) take the per-product
# debias; longer ones keep the epilogue's model, as the hybrid and wgmma products beside them, whose
# constants were fitted on whole circuits in which such products took the model
# (hybrid_debias_beta).
PRODUCT_DEBIAS_MAX_K = 64


def debias_mode(k: int) -> str:
    """How the mma.sync fused product (and its emulation) debiases a product of real inner
    dimension ``k``: "product" or "epilogue" (see DEBIAS_MODE, PRODUCT_DEBIAS_MAX_K)."""
    per_product = DEBIAS_MODE == "product" and HH_CHAIN == 1 and int(k) <= PRODUCT_DEBIAS_MAX_K
    return "product" if per_product else "epilogue"  # a chain of two has no per-product form


def product_debias_fraction(fmt: str, k: int) -> float:
    """F of the per-product debias for a real inner dimension ``k`` (see PRODUCT_DEBIAS_FRACTION; a
    k between two table sizes takes the smaller), for the GPU kernels and the emulation alike."""
    t = min(max(int(k), 1), BLOCK_K[fmt])
    return PRODUCT_DEBIAS_FRACTION[max(size for size in PRODUCT_DEBIAS_FRACTION if size <= t)]


def product_debias_scale(fmt: str, k: int) -> np.float32:
    """The kernel's per-product scale, F 2^-23 in the correction's units (2^11), as float32."""
    return np.float32(product_debias_fraction(fmt, k) * 2.0**(LO_SHIFT - 23))
CHAIN_LOSS = {1: 1.0, 2: 1.4}  # expected loss of a chain's results, relative to one result of its sum
MEAN_INV_MANTISSA = 1.0 / (2.0 * math.log(2.0))  # E[2^e / |x|] for log-uniform (Benford) significands


def debias_beta(chain: int | None = None) -> float:
    """Relative expected truncation loss of the hi*hi sum, added back in the epilogue as ``beta * acc``.

    A tensor-core result ``x`` loses ``sign(x) 3/8 ulp(x) = 3/8 2^-23 x 2^e/|x|`` on average; with
    significands spread as in generic data, ``E[2^e/|x|] = 1/(2 ln 2)``, so the loss of a sum of
    results is ``3/8 2^-23 / (2 ln 2)`` times the sum. In a chain of two instructions the first
    result (on average half of the pair's sum) is truncated twice: up to 1.5 times that; measured
    1.38 on a brickwork circuit, 1.52 on Gaussian data; 1.4 is used (:data:`CHAIN_LOSS`).
    """
    chain = HH_CHAIN if chain is None else chain
    return DEBIAS_FRACTION * MEAN_INV_MANTISSA * 2.0**-23 * CHAIN_LOSS[chain]


# The hi*hi products of the wgmma kernel, each added to the accumulator on its own (the hybrid
# product, corrections by cuBLAS; the fused wgmma product, corrections in the kernel) lose more on
# whole circuits than debias_beta() puts back, growing with k. Before this calibration both drifted
# alike on the same circuits: TF32 -2.5e-8 / -2.6e-8, FP16 -7.8e-8 / -8.1e-8 per circuit. Fitted to the mean norm drift of 20-qubit complex64
# brickworks on an H200 whose gates take the hybrid (d = 6, 8: k = 128, 512 real; three seed sets
# of 4-6; the 20-qubit engine test's circuits; benchmarks/results/tcec_circuits20_accuracy_h200.json):
# beyond the model's 3.2e-8, FP16 lost 3.6-3.9e-9 per gate at both sizes (its instructions sum
# 16 products; the CPU model of the tensor core gives 1.14x the model, benchmarks/
# tune/debias.py); TF32 lost nothing significant at k = 128 (circuit-to-circuit scatter
# +-1.5e-9 per gate) and about 1.1e-9 at k = 512. The mma.sync fused kernel (the CPU emulation's
# model, pairs of k-steps added together first) keeps debias_beta() where k > PRODUCT_DEBIAS_MAX_K.
HYBRID_K0 = 128
HYBRID_EXTRA_LOSS = {"tf32": 0.0, "fp16": 3.6e-9}  # at k = HYBRID_K0 (held below it: not measured)
HYBRID_EXTRA_LOSS_PER_DOUBLING = {"tf32": 5.5e-10, "fp16": 1.5e-10}


def hybrid_debias_beta(fmt: str, k: int, chain: int = 1) -> float:
    """``beta`` of the hybrid and the fused wgmma products for a real inner dimension ``k`` (see
    HYBRID_EXTRA_LOSS)."""
    doublings = max(0.0, math.log2(max(int(k), 1) / HYBRID_K0))
    return debias_beta(chain) + HYBRID_EXTRA_LOSS[fmt] + HYBRID_EXTRA_LOSS_PER_DOUBLING[fmt] * doublings
