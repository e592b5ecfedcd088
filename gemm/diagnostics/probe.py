"""Numerical behaviour of the tensor cores, probed through our own mma.sync instructions.

After Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores" (PeerJ CS,
2021). Each probe is one ``d = c + sum_k a_k b_k`` computed by a single instruction
(m16n8k8 TF32 or m16n8k16 FP16, FP32 accumulator), with inputs chosen so that the exact result
and the candidate roundings differ. For TF32 and FP16 inputs:

* ``exact_products``: products of two full-width inputs come out exactly (up to 22 bits);
* ``subnormal_inputs``: a subnormal input (FP16 2^-24, TF32 2^-130) is kept, not flushed;
* ``subnormal_outputs``: a subnormal FP32 result (from products for TF32, from ``c`` for FP16)
  is kept;
* ``rounding``: the rounding of the accumulation, from ``1 + 0.75 ulp`` and its negative
  (RZ, RN, RD or RU);
* ``extra_bits``: how many bits below the largest term's last bit survive the alignment
  (``1 + 2^j`` copies of ``2^-(23+j)`` sum to ``1 + 2^-23`` only if j bits are kept);
* ``normalised``: whether ``1 - 1 + tiny`` returns ``tiny`` (intermediate sums renormalised) or
  0 (terms aligned to the largest exponent, tiny shifted out);
* ``monotonic``: ``d`` never decreases as one product grows (a sweep of 256 values);
* ``block_error_ulps``: the largest error, in ulps of the exact result, of one instruction summing
  positive random inputs from zero, the quantity the error-corrected methods rely on;
* ``model_agreement``: the share of random instructions (mixed signs, exponents spread over 16
  binades, a nonzero accumulator) on which the CPU emulation's model of one instruction
  (:func:`gemm.tcec.emulate.tc_mma`, ``TC_EXTRA_BITS`` kept bits) gives the GPU's result bit for
  bit, and ``model_best_extra_bits``, the kept bits that agree most often (the emulations of the
  kernels are exact only where this is 1); ``model_best`` tries the products summed in blocks
  too (:data:`MODEL_GROUPS`: an instruction may add its k products in two steps of k/2, say) and
  names the block and kept bits that agree most, with their share.

The error-corrected methods rely on exact products, a single instruction from zero being
accurate to about an ulp, FP16 subnormal inputs being kept (the lo parts of small elements are
subnormal), and the accumulation not being round-to-nearest (which is why hi*hi is accumulated
outside the tensor core).
"""

from __future__ import annotations

import numpy as np

from gemm.cuda.compile import raw_module
from gemm.tcec import debias as db
from gemm.tcec.emulate import tc_mma
from gemm.tcec.split import tf32_rna

K = {"tf32": 8, "fp16": 16}
FORMATS = ("tf32", "fp16")


def _kernels(device_id: int):
    mod = raw_module(__package__, "probe.cu", (), device_id)
    return {"tf32": mod.get_function("probe_tf32"), "fp16": mod.get_function("probe_f16")}


def dots(fmt: str, cases) -> np.ndarray:
    """``c + a . b`` for each case ``(a, b, c)`` (a, b of length K[fmt]), one mma instruction each."""
    import cupy as cp  # noqa: PLC0415

    k = K[fmt]
    n = len(cases)
    A = np.zeros((n, 16, k), np.float32)
    B = np.zeros((n, k, 8), np.float32)
    C = np.zeros((n, 16, 8), np.float32)
    for i, (a, b, c) in enumerate(cases):
        A[i, 0, :len(a)] = a
        B[i, :len(b), 0] = b
        C[i, 0, 0] = c
    d = cp.zeros((n, 16, 8), cp.float32)
    _kernels(cp.cuda.Device().id)[fmt]((n,), (32,), (cp.asarray(A), cp.asarray(B), cp.asarray(C), d))
    return d[:, 0, 0].get()


def _ulp(x: float) -> float:
    return float(np.spacing(np.float32(abs(x))))


def probe(fmt: str, rng=None) -> dict:
    """Run every probe for ``fmt`` (``"tf32"`` or ``"fp16"``); returns a dict of findings."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    rng = np.random.default_rng(7) if rng is None else rng
    k = K[fmt]
    p2 = np.ldexp
    out: dict = {"format": fmt, "k": k}

    # exact products: full 11-bit significands
    pairs = [(1 + 2**-10, 1 + 2**-10), (2 - 2**-10, 2 - 2**-10), (1.5 + 2**-10, -(1 + 3 * 2**-10))]
    res = dots(fmt, [([a], [b], 0.0) for a, b in pairs])
    out["exact_products"] = bool(all(r == np.float64(a) * np.float64(b) for r, (a, b) in zip(res, pairs)))

    # subnormals
    if fmt == "fp16":
        r_in, r_out = dots(fmt, [([p2(1.0, -24)], [1.0], 0.0), ([0.0], [0.0], p2(1.0, -140))])
        out["subnormal_inputs"] = bool(r_in == p2(1.0, -24))
        out["subnormal_outputs"] = bool(r_out == p2(1.0, -140))
    else:
        r_in, r_out, r_c = dots(fmt, [([p2(1.0, -130)], [p2(1.0, 10)], 0.0), ([p2(1.0, -70)], [p2(1.0, -70)], 0.0),
                                      ([0.0], [0.0], p2(1.0, -140))])
        out["subnormal_inputs"] = bool(r_in == p2(1.0, -120))
        out["subnormal_outputs"] = bool(r_out == p2(1.0, -140) and r_c == p2(1.0, -140))

    # rounding of the accumulation: 1 + 0.75 ulp(1), and its negative
    u = 2.0**-23
    pos, neg = dots(fmt, [([1.5 * 2**-12], [2**-12], 1.0), ([-1.5 * 2**-12], [2**-12], -1.0)])
    up, down = pos == 1 + u, neg == -(1 + u)
    modes = {(False, False): "RZ", (True, True): "RN", (False, True): "RD", (True, False): "RU"}
    out["rounding"] = modes[(bool(up), bool(down))]
    out["rounding_values"] = [float(pos), float(neg)]

    # extra alignment bits: 2^j copies of 2^-(23+j) on top of 1
    kept = 0
    for j in range(1, 8):
        copies = 2**j
        if copies > k:
            break
        (r,) = dots(fmt, [([2.0**-12] * copies, [2.0 ** -(11 + j)] * copies, 1.0)])
        if r == 1 + u:
            kept = j
        else:
            break
    out["extra_bits"] = kept

    # normalisation: 1 - 1 + tiny
    tiny_e = -14 if fmt == "fp16" else -15
    (r,) = dots(fmt, [([1.0, -1.0, 2.0**tiny_e], [1.0, 1.0, 2.0**tiny_e], 0.0)])
    out["normalised"] = bool(r == 2.0 ** (2 * tiny_e))
    out["normalised_value"] = float(r)

    # monotonicity: d = 1 - 2^-24 + x*2^-20, x increasing
    xs = np.arange(256, dtype=np.float64)
    cases = [([1.0, -(2.0**-12), x * 2.0**-10], [1.0, 2.0**-12, 2.0**-10], 0.0) for x in xs]
    ds = dots(fmt, cases)
    out["monotonic"] = bool(np.all(np.diff(ds.astype(np.float64)) >= 0))

    # one instruction from zero on positive inputs: error in ulps of the exact sum
    if fmt == "fp16":
        a = rng.random((512, k)).astype(np.float16).astype(np.float32)
        b = rng.random((512, k)).astype(np.float16).astype(np.float32)
    else:
        a = tf32_rna(rng.random((512, k)).astype(np.float32))
        b = tf32_rna(rng.random((512, k)).astype(np.float32))
    got = dots(fmt, [(a[i], b[i], 0.0) for i in range(len(a))])
    exact = np.sum(a.astype(np.float64) * b.astype(np.float64), axis=1)
    errs = [abs(float(g) - e) / _ulp(e) for g, e in zip(got, exact)]
    out["block_error_ulps"] = float(max(errs))
    out.update(model_agreement(fmt, rng))
    return out


MODEL_CASES = 2048  # random instructions of the model check
MODEL_BITS = range(9)  # kept bits the model check tries
MODEL_GROUPS = (1, 2, 4)  # the model check's blocks: k / these products a step


def model_cases(fmt: str, rng, n: int = MODEL_CASES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, c)`` of ``n`` random instructions: inputs of the format with random signs and
    exponents in [-12, 4), so that their products span 32 binades and the alignment cuts some of
    them; a float32 accumulator near the largest product (zero in a quarter of the cases)."""
    k = K[fmt]
    shape = (n, k)

    def values():
        v = rng.choice((-1.0, 1.0), shape) * rng.uniform(1.0, 2.0, shape) * np.ldexp(1.0, rng.integers(-12, 4, shape))
        return v.astype(np.float16).astype(np.float32) if fmt == "fp16" else tf32_rna(v.astype(np.float32))

    a, b = values(), values()
    top = np.abs(a.astype(np.float64) * b).max(axis=1)
    c = (rng.choice((-1.0, 1.0), n) * top * np.ldexp(1.0, rng.integers(-4, 5, n))).astype(np.float32)
    c[rng.random(n) < 0.25] = 0.0
    return a, b, c


def model_data(fmt: str, rng, n: int = MODEL_CASES) -> dict:
    """``n`` random instructions (:func:`model_cases`) and the GPU's results: arrays ``a``, ``b``
    (n, k), ``c`` and ``got`` (n,), float32 (what ``qsim-tc probe --cases`` saves)."""
    a, b, c = model_cases(fmt, rng, n)
    got = np.asarray(dots(fmt, list(zip(a, b, c))), np.float32)
    return {"a": a, "b": b, "c": c, "got": got}


def model_fit(data: dict) -> dict:
    """How often :func:`gemm.tcec.emulate.tc_mma` reproduces the instructions of ``data``
    (:func:`model_data`) bit for bit: at the emulation's kept bits and at each of
    :data:`MODEL_BITS` with all products in one step, and the best of every block of
    :data:`MODEL_GROUPS` and kept bits (ties: fewer steps, then the bits nearest the emulation's)."""
    a, b = data["a"], data["b"]
    k = a.shape[-1]
    share = {}
    for steps in MODEL_GROUPS:
        if k % steps == 0:
            for bits in MODEL_BITS:
                share[(k // steps, bits)] = float(np.mean(tc_mma(data["c"], a, b, bits, k // steps) == data["got"]))
    one = {bits: share[(k, bits)] for bits in MODEL_BITS}
    best_bits = max(MODEL_BITS, key=lambda bits: (one[bits], -abs(bits - db.TC_EXTRA_BITS)))
    group, bits = max(share, key=lambda gb: (share[gb], gb[0], -abs(gb[1] - db.TC_EXTRA_BITS)))
    return {"model_agreement": one[db.TC_EXTRA_BITS], "model_best_extra_bits": best_bits,
            "model_agreement_by_bits": one,
            "model_best": {"products_a_step": group, "extra_bits": bits, "agreement": share[(group, bits)]}}


CASE_ARRAYS = ("a", "b", "c", "got")  # the arrays of model_data, saved as <name>_<format>


def save_cases(path: str, data: dict) -> str:
    """Save :func:`model_data` results by format (``{fmt: data}``) as a numpy ``.npz`` file of
    arrays ``<name>_<fmt>`` (``.npz`` added to ``path`` where missing); returns the path written."""
    path = str(path) if str(path).endswith(".npz") else f"{path}.npz"
    np.savez_compressed(path, **{f"{name}_{fmt}": d[name] for fmt, d in data.items() for name in CASE_ARRAYS})
    return path


def load_cases(path: str, fmt: str) -> dict:
    """The cases of format ``fmt`` saved by :func:`save_cases`, as :func:`model_fit` takes them."""
    with np.load(path) as z:
        return {name: z[f"{name}_{fmt}"] for name in CASE_ARRAYS}


def model_agreement(fmt: str, rng, n: int = MODEL_CASES) -> dict:
    """:func:`model_fit` of ``n`` random instructions run on the GPU (see the module docstring)."""
    return model_fit(model_data(fmt, rng, n))


def probe_all() -> list[dict]:
    """:func:`probe` for TF32 and FP16."""
    return [probe(f) for f in FORMATS]


def format_table(rows: list[dict]) -> str:
    """The findings as a text table, one column per format."""
    keys = [("exact_products", "products exact"), ("subnormal_inputs", "subnormal inputs kept"),
            ("subnormal_outputs", "subnormal outputs kept"), ("rounding", "accumulation rounding"),
            ("extra_bits", "extra alignment bits"), ("normalised", "intermediate sums normalised"),
            ("monotonic", "monotonic"), ("block_error_ulps", "one mma from zero, max error (ulp)"),
            ("model_agreement", "CPU model bit-exact (share)"), ("model_best_extra_bits", "CPU model's best kept bits"),
            ("model_best", "best model: products a step/bits/share")]
    head = f"{'property':36s}" + "".join(f"{r['format'] + ' (k=' + str(r['k']) + ')':>14s}" for r in rows)
    lines = [head, "-" * len(head)]
    for key, label in keys:
        vals = []
        for r in rows:
            v = r[key]
            if isinstance(v, bool):
                vals.append("yes" if v else "no")
            elif isinstance(v, dict):  # model_best
                vals.append(f"{v['products_a_step']}/{v['extra_bits']}/{v['agreement']:.3g}")
            else:
                vals.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        lines.append(f"{label:36s}" + "".join(f"{v:>14s}" for v in vals))
    return "\n".join(lines)


def design_assumptions(row: dict) -> list[str]:
    """The properties the error-corrected methods rely on that ``row`` violates (empty: all hold)."""
    bad = []
    if not row["exact_products"]:
        bad.append("products are not exact")
    if row["block_error_ulps"] > 1.0:
        bad.append(f"one instruction from zero is off by {row['block_error_ulps']:.3g} ulp (> 1)")
    if row["format"] == "fp16" and not row["subnormal_inputs"]:
        bad.append("FP16 subnormal inputs are flushed (lo parts of small elements would vanish)")
    if row["rounding"] == "RN":
        bad.append("accumulation rounds to nearest (external accumulation would be unnecessary)")
    if not row["monotonic"]:
        bad.append("accumulation is not monotonic")
    return bad
