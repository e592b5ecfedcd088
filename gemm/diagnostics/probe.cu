// Numerical-behaviour probes of the tensor cores (after Fasi, Higham, Mikaitis and Pranesh,
// "Numerical behavior of NVIDIA tensor cores"), through the same mma.sync instructions as
// tcec.cu. One warp per case: D = A @ B + C for one instruction.
//   probe_tf32: A 16x8 (row-major, TF32 values given as FP32 bit patterns), B 8x8 [k][n], C, D 16x8
//   probe_f16:  A 16x16, B 16x8 [k][n] (FP32 values exactly representable in FP16), C, D 16x8

typedef unsigned int u32;
typedef unsigned short u16;

__device__ __forceinline__ u16 f2h(float x) {
    u16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ u32 pack(float lo, float hi) {
    return (u32)f2h(lo) | ((u32)f2h(hi) << 16);
}

// Element q of lane (g, t)'s accumulator fragment in a row-major 16 x 8 block (m16n8 layout):
// q = 0, 1 at row g, columns 2t, 2t + 1; q = 2, 3 at row g + 8.
__device__ __forceinline__ int acc_index(int g, int t, int q) { return (g + 8 * (q >> 1)) * 8 + 2 * t + (q & 1); }

extern "C" __global__ void probe_tf32(const float* A, const float* B, const float* C, float* D) {
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const float* a = A + blockIdx.x * 128;
    const float* b = B + blockIdx.x * 64;
    const float* c = C + blockIdx.x * 128;
    float* d = D + blockIdx.x * 128;
    const u32 ar[4] = {__float_as_uint(a[g * 8 + t]), __float_as_uint(a[(g + 8) * 8 + t]),
                       __float_as_uint(a[g * 8 + t + 4]), __float_as_uint(a[(g + 8) * 8 + t + 4])};
    const u32 br[2] = {__float_as_uint(b[t * 8 + g]), __float_as_uint(b[(t + 4) * 8 + g])};
    float cr[4], dr[4];
    for (int q = 0; q < 4; ++q) cr[q] = c[acc_index(g, t, q)];
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(dr[0]), "=f"(dr[1]), "=f"(dr[2]), "=f"(dr[3])
        : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]), "f"(cr[0]), "f"(cr[1]),
          "f"(cr[2]), "f"(cr[3]));
    for (int q = 0; q < 4; ++q) d[acc_index(g, t, q)] = dr[q];
}

extern "C" __global__ void probe_f16(const float* A, const float* B, const float* C, float* D) {
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const float* a = A + blockIdx.x * 256;
    const float* b = B + blockIdx.x * 128;
    const float* c = C + blockIdx.x * 128;
    float* d = D + blockIdx.x * 128;
    const u32 ar[4] = {pack(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                       pack(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                       pack(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                       pack(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
    const u32 br[2] = {pack(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
                       pack(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
    float cr[4], dr[4];
    for (int q = 0; q < 4; ++q) cr[q] = c[acc_index(g, t, q)];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(dr[0]), "=f"(dr[1]), "=f"(dr[2]), "=f"(dr[3])
        : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]), "f"(cr[0]), "f"(cr[1]),
          "f"(cr[2]), "f"(cr[3]));
    for (int q = 0; q < 4; ++q) d[acc_index(g, t, q)] = dr[q];
}
