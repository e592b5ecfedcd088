"""Measure the relative truncation loss of the error-corrected methods' hi*hi sums, per format.

The kernel adds back ``beta * acc`` in its epilogue (``gemm.tcec_split.debias_beta``). This
script runs the bit-exact CPU model of the tensor core (``tcec_split.tc_mma``) on gate-shaped
products (Haar gates in real form times a random state block or Gaussian data), sums each
format's k-step results as the kernel does (each from zero, added in FP32 with RN), and fits
``beta = sum((exact - acc) acc) / sum(acc^2)`` against the exact float64 sum of the same hi*hi
products, and prints it over the model in use (``tcec_split.debias_beta``).

Measured: 1.03x the model for TF32, 1.14x for FP16 (16 products per instruction against 8, and
terms far below an instruction's largest one are cut toward zero too). The model is kept: the
rest of the path (the correction accumulator's own truncation, growing with k) moves circuits'
norm drift the other way. Scaling FP16's beta by 1.07 brought the mean drift of 16-qubit d = 4
brickworks from -8.8e-8 to -5.7e-9 (native CGEMM -5.5e-9) but pushed a 20-qubit d = 6 one past
+3e-8: a per-format constant cannot fit every k; a k-dependent model is needed.

    python -m benchmarks.tune.debias --json benchmarks/results/debias_calibration.json

``--gates`` measures whole gates through ``gemm.matmul`` (the CPU emulation of the mma.sync fused
kernel; ``--gpu``: the GPU) instead: the relative change of the norm a gate gives a random dense state,
against the exact product of the same hi/lo parts (the accumulation's bias, debias on), for
d = 1..6 in the bottom and batched orientations; the same gate by gate along a brickwork started
from |0...0> (whose first layer acts on basis states); and the per-gate norm scatter that the
gate's own 22-bit representation (hi + lo 2^-11) gives, beside complex64 rounding's:

    python -m benchmarks.tune.debias --gates --json benchmarks/results/debias_gates_cpu.json
"""

from __future__ import annotations

import argparse

import numpy as np

import gemm
from benchmarks.common import write_results
from circuits import brickwork, haar_unitary
from gemm.tcec import debias as db
from gemm.tcec import emulate as em
from gemm.tcec import split as ts
from qsim_tc import StateVector


def fitted_beta(fmt: str, d: int, rows: int, kind: str, rng) -> float:
    dim = 1 << d
    u = haar_unitary(dim, rng).astype(np.complex64)
    a = (rng.standard_normal((rows, dim)) + 1j * rng.standard_normal((rows, dim))).astype(np.complex64)
    if kind == "state":
        a *= np.float32(2.0**-8)  # amplitudes of a 16-qubit state
    ar, br = ts.real_form(a, np.ascontiguousarray(u.T))
    scales = [0, 0]
    if fmt == "fp16":
        scales = [ts.plan_fp16(*(int(v) for v in np.array(ts.exponent_range(x))[[0, 1, 3]]))[0] for x in (ar, br)]
    ah, _ = ts.split(ar, fmt, scales[0])
    bh, _ = ts.split(br, fmt, scales[1])
    kb = db.BLOCK_K[fmt]
    acc = np.zeros((ah.shape[0], bh.shape[1]), np.float32)
    zero = np.zeros_like(acc)
    exact = np.zeros(acc.shape, np.float64)
    for k0 in range(0, ah.shape[1], kb):
        x = ah[:, None, k0:k0 + kb].astype(np.float64)
        y = bh[k0:k0 + kb, :].T.astype(np.float64)[None, :, :]
        acc = (acc + em.tc_mma(zero, x, y)).astype(np.float32)  # each k-step from zero, RN addition
        exact += (x * y).sum(-1)
    a64 = acc.astype(np.float64)
    return float(((exact - a64) * a64).sum() / (a64 * a64).sum())


def effective(x: np.ndarray, fmt: str, scale: int = 0) -> np.ndarray:
    """The value the error-corrected product sees of complex64 ``x``: hi + lo 2^-11 of its real and
    imaginary parts (at FP16's power-of-two scaling ``scale``), in complex128."""
    def part(p):
        hi, lo = ts.split(np.ascontiguousarray(p, np.float32), fmt, scale)
        return (hi.astype(np.float64) + lo.astype(np.float64) * 2.0**-ts.LO_SHIFT) * 2.0**-scale
    return part(x.real) + 1j * part(x.imag)


def gate_bias(method: str, fmt: str, d: int, orient: str, n: int, trials: int, rng,
              gpu: bool = False) -> tuple[float, float]:
    """Mean and standard error of ||out||^2 / ||exact product of the hi/lo parts||^2 - 1 over
    random dense states of ``n`` qubits and Haar gates (``gpu``: the product on the GPU)."""
    if gpu:
        import cupy  # noqa: PLC0415

    dim, vals = 1 << d, []
    for _ in range(trials):
        psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
        psi = (psi / np.linalg.norm(psi)).astype(np.complex64)
        u = haar_unitary(dim, rng).astype(np.complex64)
        a, b = (psi.reshape(-1, dim), np.ascontiguousarray(u.T)) if orient == "bottom" else \
            (u, psi.reshape(-1, dim, 8))
        if gpu:
            c, rep = gemm.matmul(cupy.asarray(a), cupy.asarray(b), method=method, return_report=True)
            c = c.get()
        else:
            c, rep = gemm.matmul(a, b, method=method, return_report=True)
        sa, sb = rep.choices.get("fp16_scale_exp", (0, 0))
        ref = effective(a, fmt, sa) @ effective(b, fmt, sb)
        vals.append(np.sum(np.abs(np.asarray(c, np.complex128)) ** 2) / np.sum(np.abs(ref) ** 2) - 1)
    v = np.array(vals)
    return float(v.mean()), float(v.std() / np.sqrt(len(v)))


def brickwork_gates(method: str, fmt: str, n: int, d: int, seed: int) -> list[dict]:
    """Gate by gate along brickwork(n, d, 10, seed) from |0...0>: the same relative norm change,
    and how many amplitudes of the input are nonzero."""
    sv = StateVector(n, dtype=np.complex64, device="cpu")
    out = []
    for i, g in enumerate(brickwork(n, d, 10, seed=seed).gates):
        psi = sv.to_numpy().astype(np.complex128)
        q, k = list(g.qubits), len(g.qubits)
        axes = [n - 1 - x for x in reversed(q)]
        ue = effective(np.asarray(g.matrix).astype(np.complex64), fmt).reshape((2,) * (2 * k))
        ref = np.moveaxis(np.tensordot(ue, psi.reshape((2,) * n), axes=(list(range(k, 2 * k)), axes)),
                          list(range(k)), axes).reshape(-1)
        nonzero = int(np.count_nonzero(psi))
        sv.apply(g.matrix, g.qubits, method=method)
        got = sv.to_numpy().astype(np.complex128)
        out.append({"gate": i, "nonzero_in": nonzero,
                    "rel_norm2_change": float(np.sum(np.abs(got) ** 2) / np.sum(np.abs(ref) ** 2) - 1)})
    return out


def representation_scatter(fmt: str, d: int, n: int, trials: int, rng) -> dict:
    """Per-gate norm change from the gate's representation alone: hi + lo 2^-11 against the
    complex64 gate, and the complex64 gate against the exact one (native CGEMM's share)."""
    dim, rep, c64 = 1 << d, [], []
    for _ in range(trials):
        psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
        s = (psi / np.linalg.norm(psi)).reshape(-1, dim)
        u = haar_unitary(dim, rng)
        uc = u.astype(np.complex64)
        norm2 = [np.sum(np.abs(s @ m.T) ** 2) for m in (effective(uc, fmt), uc.astype(np.complex128), u)]
        rep.append(norm2[0] - norm2[1])
        c64.append(norm2[1] - norm2[2])
    return {"split_std": float(np.std(rep)), "complex64_std": float(np.std(c64))}


def gates_main(args):
    rng = np.random.default_rng(0)
    out = {"model_beta": db.debias_beta(1), "debias_mode": {2 << d: db.debias_mode(2 << d) for d in range(1, 7)},
           "device": "gpu" if args.gpu else "cpu", "dense": [], "brickwork": {}, "representation": {}}
    for method, fmt in (("tf32tf32", "tf32"), ("halfhalf", "fp16")):
        for d in range(1, 7):
            for orient in ("bottom", "batched"):
                m, se = gate_bias(method, fmt, d, orient, 12, args.trials, rng, args.gpu)
                out["dense"].append({"method": method, "d": d, "k_real": 2 << d, "orientation": orient,
                                     "rel_norm2_change": m, "stderr": se})
                print(f"{method} d={d} k={2 << d:3d} {orient:8s} norm^2 change {m:+.2e} +- {se:.1e}", flush=True)
        if args.dense_only:
            continue
        rows = brickwork_gates(method, fmt, 16, 4, 0)
        out["brickwork"][method] = rows
        first = [r["rel_norm2_change"] for r in rows[:4]]
        rest = np.array([r["rel_norm2_change"] for r in rows[8:]])
        print(f"{method} brickwork 16q d=4: first layer {np.round(first, 10).tolist()}, gates 8..: "
              f"{rest.mean():+.2e} +- {rest.std() / np.sqrt(len(rest)):.1e} per gate", flush=True)
        out["representation"][fmt] = {d: representation_scatter(fmt, d, 12, args.trials, rng) for d in (2, 4)}
        print(f"{fmt} per-gate norm scatter from the split gate / from complex64 rounding:",
              out["representation"][fmt], flush=True)
    if args.json:
        write_results(args.json, out, module=__spec__.name)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--gates", action="store_true", help="whole gates through the CPU emulation (see above)")
    p.add_argument("--trials", type=int, default=60, help="--gates: random states and gates per case")
    p.add_argument("--gpu", action="store_true", help="--gates: the dense gates' products on the GPU")
    p.add_argument("--dense-only", action="store_true", help="--gates: only the dense gates")
    p.add_argument("--debias-mode", choices=("product", "epilogue"), default=None,
                   help="--gates: tcec_split.DEBIAS_MODE for this run")
    p.add_argument("--json")
    args = p.parse_args()
    if args.debias_mode:
        db.DEBIAS_MODE = args.debias_mode
    if args.gates:
        return gates_main(args)
    rng = np.random.default_rng(0)
    model = db.debias_beta(1)
    rows = []
    for fmt in ts.FORMATS:
        for d in (4, 6, 8):
            for kind in ("state", "gauss"):
                b = fitted_beta(fmt, d, args.rows, kind, rng)
                rows.append({"format": fmt, "d": d, "data": kind, "beta": b, "over_model": b / model})
                print(f"{fmt} d={d} {kind:5s} beta {b:.4e}  ({b / model:.3f} x the 3/8-ulp model)", flush=True)
    summary = {fmt: float(np.mean([r["over_model"] for r in rows if r["format"] == fmt])) for fmt in ts.FORMATS}
    print("mean over the model:", {k: round(v, 3) for k, v in summary.items()})
    if args.json:
        write_results(args.json, {"model_beta": model, "rows": rows, "mean_over_model": summary}, module=__spec__.name)


if __name__ == "__main__":
    main()
