"""The arithmetic floor of a stage program: the time its dense ops' floating-point work would take
at the GPU's peak rates, measured on the GPU itself.

The pass floor (one read+write of the state) bounds a stage plan from the memory side; this bounds
it from the arithmetic side. The stage kernel applies a dense op of k targets to every amplitude
(where its controls hold), as one of:

- tensor-core records (complex128 programs on sm_90, :func:`~qsim_tc.stages.kernel.tensor_core_ops`):
  a 3-qubit op is one FP64 ``mma.m16n8k16`` a tile of 64 amplitudes (the complex 8 x 8 matrix in its
  real 16 x 16 form), 64 flops an amplitude; a 2-qubit op one ``m16n8k8`` a tile of 32 (half of A
  zero, counted as executed), also 64; a pair record two 3-qubit ops, 128. A tile loop runs over
  all tiles whatever the local controls (they mask the stores), so only controls on fixed bits
  (whole blocks skipped) thin it.
- complex64 tensor-core records (sm_80 on): the same tiles in FP16 (one ``m16n8k16`` for a 3-qubit
  op), each product taking ``terms`` instructions (the split parts' products,
  :mod:`qsim_tc.stages.tc32`): 64 flops an amplitude an instruction.
- FMA loops (every other dense op): 2^k complex
  multiply-adds an amplitude, 8 flops each (4 FMAs), on the groups whose controls hold.
- phases (phase ops and pre-phases): one complex product an amplitude, 6 flops.

The peaks are those of microkernels run in the same process (independent chains, every SM busy):
FP64 ``mma.m16n8k16``, TF32 ``m16n8k8``, FP16 ``m16n8k16``, and FMA in FP64 and FP32. Memory traffic and shared memory are not in this
floor: a program can be slower than it for those, never faster.
"""

from __future__ import annotations

import numpy as np

from qsim_tc.stages.program import MMA_K, MMA_PAIR, OP_DENSE, W_CMASK, W_K, W_MMA, W_PCOUNT, W_TYPE

_PEAK_SOURCE = r"""
extern "C" __global__ void dmma_peak(double* out, int iters) {
    double a[8], b[4], d[4][4] = {};
    for (int i = 0; i < 8; ++i) a[i] = 1e-3 * (threadIdx.x + i);
    for (int i = 0; i < 4; ++i) b[i] = 1e-3 * (threadIdx.x - i);
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
                "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};"
                : "+d"(d[c][0]), "+d"(d[c][1]), "+d"(d[c][2]), "+d"(d[c][3])
                : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
                  "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    }
    double s = 0;
    for (int c = 0; c < 4; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// the complex64 tensor-core ops' instructions: TF32 m16n8k8 (FP16 = false) and FP16 m16n8k16, FP32
// accumulate; four independent accumulators a warp
template <bool FP16>
__device__ void mma32_chains(float* out, int iters) {
    unsigned a[4], b[2];
    float d[4][4] = {};
    for (int i = 0; i < 4; ++i) a[i] = FP16 ? 0x3c003c00u + threadIdx.x + i : __float_as_uint(1e-3f * (threadIdx.x + i)) & 0xffffe000u;
    for (int i = 0; i < 2; ++i) b[i] = FP16 ? 0x38003800u + threadIdx.x - i : __float_as_uint(1e-3f * (threadIdx.x - i)) & 0xffffe000u;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            if (FP16)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                             "{%0,%1,%2,%3};"
                             : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
            else
                asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                             "{%0,%1,%2,%3};"
                             : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
        }
    }
    float s = 0;
    for (int c = 0; c < 4; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void tf32mma_peak(float* out, int iters) { mma32_chains<false>(out, iters); }
extern "C" __global__ void fp16mma_peak(float* out, int iters) { mma32_chains<true>(out, iters); }

template <typename T>
__device__ void fma_chains(T* out, int iters) {
    T x[8];
    const T y = (T)0.999, z = (T)1e-3;
    for (int j = 0; j < 8; ++j) x[j] = (T)(threadIdx.x + j);
    // (unrolled: the loop's own instructions had held FP32 to 83% of its issue rate)
#pragma unroll 8
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < 8; ++j) x[j] = fma(x[j], y, z);
    }
    T s = 0;
    for (int j = 0; j < 8; ++j) s += x[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void fma64_peak(double* out, int iters) { fma_chains(out, iters); }
extern "C" __global__ void fma32_peak(float* out, int iters) { fma_chains(out, iters); }
"""

THREADS = 256


def program_flops(program, tensor: bool, terms: int = 1) -> dict[str, float]:
    """The floating-point work of ``program`` (a :class:`~qsim_tc.stages.program.StageProgram`)
    as the stage kernel executes it: ``{"tensor": tensor-core flops, "fma": FMA-loop and phase
    flops}`` (the latter in the program's precision). ``tensor``: the kernel runs its tensor-core
    records on the tensor cores (else every dense op takes the FMA loops); ``terms``: the
    instructions a product takes (complex64: the split parts' products of :mod:`qsim_tc.stages.tc32`,
    each a full real product in FP16, 64 flops an amplitude for a 2- or 3-qubit op)."""
    n, big_l = program.n_qubits, program.local_qubits
    amps = float(1 << n)
    local = (1 << big_l) - 1
    out = {"tensor": 0.0, "fma": 0.0}
    for stage in program.stages:
        for rec in stage.ops:
            if rec[W_TYPE] != OP_DENSE:
                out["fma"] += 6 * amps
                continue
            cmask, k = int(rec[W_CMASK]), int(rec[W_K])
            fixed_share = 0.5 ** bin(cmask & ~local).count("1")
            if rec[W_PCOUNT]:
                out["fma"] += 6 * amps * fixed_share
            if tensor and rec[W_MMA] and k in MMA_K:
                out["tensor"] += (128 if rec[W_MMA] == MMA_PAIR else 64) * terms * amps * fixed_share
            else:
                out["fma"] += 8 * (1 << k) * amps * fixed_share * 0.5 ** bin(cmask & local).count("1")
    return out


def measure_peaks(cp, repeats: int = 3) -> dict[str, float]:
    """The GPU's FP64 tensor-core (``mma.m16n8k16``), TF32 (``m16n8k8``) and FP16 (``m16n8k16``)
    tensor-core, FP64 FMA and FP32 FMA rates in flop/s, best of ``repeats`` timed runs of each
    microkernel after a warm-up."""
    module = cp.RawModule(code=_PEAK_SOURCE, options=("-std=c++17",))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks = 4 * sms
    out64 = cp.empty(blocks * THREADS, dtype=cp.float64)
    out32 = cp.empty(blocks * THREADS, dtype=cp.float32)
    warps = blocks * THREADS // 32
    cases = {
        "dmma": ("dmma_peak", out64, 2048, warps * 4 * 2 * 16 * 8 * 16),
        "fma64": ("fma64_peak", out64, 16384, blocks * THREADS * 8 * 2),
        "fma32": ("fma32_peak", out32, 32768, blocks * THREADS * 8 * 2),
        "tf32mma": ("tf32mma_peak", out32, 4096, warps * 4 * 2 * 16 * 8 * 8),
        "fp16mma": ("fp16mma_peak", out32, 4096, warps * 4 * 2 * 16 * 8 * 16),
    }
    peaks = {}
    for name, (fn_name, out, iters, flops_per_iter) in cases.items():
        fn = module.get_function(fn_name)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        best = float("inf")
        for rep in range(repeats + 1):
            start.record()
            fn((blocks,), (THREADS,), (out, np.int32(iters)))
            stop.record()
            stop.synchronize()
            if rep:  # the first is the warm-up
                best = min(best, cp.cuda.get_elapsed_time(start, stop) * 1e-3)
        peaks[name] = flops_per_iter * iters / best
    return peaks


def floor_seconds(flops: dict[str, float], peaks: dict[str, float], itemsize: int, fmt: str = "tf32") -> float:
    """The arithmetic floor of work ``flops`` (:func:`program_flops`) of a program in complex
    ``itemsize`` bytes at ``peaks`` (:func:`measure_peaks`; ``fmt``: the complex64 tensor-core
    format): tensor work and FMA work on separate units, so the larger of the two times."""
    fma_peak = peaks["fma64"] if itemsize == 16 else peaks["fma32"]
    if not flops["tensor"]:
        return flops["fma"] / fma_peak
    tensor_peak = peaks["dmma"] if itemsize == 16 else peaks[f"{fmt}mma"]
    return max(flops["tensor"] / tensor_peak, flops["fma"] / fma_peak)
