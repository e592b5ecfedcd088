// Error-corrected TF32 / FP16 tensor-core GEMM (after Ootomo and Yokota).
//
// Stages, one kernel each:
//   tcec_range  exponent range of an operand (max / min nonzero biased exponent, NaN/Inf count)
//   tcec_split  hi = round(x * scale) to TF32 (RNA) or FP16 (RN); lo = round((x*scale - hi) * lo_scale),
//               written as a zero-padded K-contiguous workspace (rows x words), transposing on the fly
//   tcec_gemm   C = A_ws @ B_ws^T on mma.sync (m16n8k8 TF32 / m16n8k16 FP16), both workspaces
//               K-contiguous ("TN"); MODE selects the error-corrected, plain or Markidis scheme.
//
// Compile-time constants (options=("-D...",)):
//   FMT     0: TF32, 1: FP16
//   MODE    0: error-corrected (each k-step's hi*hi computed from zero on the tensor core, the
//              two k-steps of a stage added together and then to FP32 registers with RN
//              (HH_CHAIN 2: the pair summed inside the tensor core instead); lo*hi + hi*lo in a
//              second, tensor-core accumulator; lo*lo dropped; the expected truncation loss of
//              the hi*hi results added back, per product (DEBIAS 1) or in the epilogue (DEBIAS 2))
//           1: plain (hi*hi accumulated inside the tensor core)
//           2: Markidis (hi*hi + lo*hi + hi*lo + lo*lo, all inside the tensor core, lo unscaled)
//           3: error-corrected, hybrid: the hi*hi part as in mode 0; lo*hi + hi*lo come computed
//              (by cuBLAS) in `ccor` and are added in the epilogue, as mode 0 adds its accumulator
//   BM, BN, WARPS_M, WARPS_N, STAGES: tile configuration
//   DEBIAS: add back the expected truncation loss of the hi*hi results: 1: from each result's
//           exponent, where it is not exact, times the argument debias_beta, in the k loop;
//           2: debias_beta * (hi*hi sum) once in the epilogue (gemm/tcec_split.py debias_beta,
//           hybrid_debias_beta); 0: off
//   HH_CHAIN 1 or 2 (see MODE 0); MINB: blocks per SM for the register allocator
//
// Shared-memory words are 32 bits: one TF32 value or two FP16 values along k. A k-step of the
// mma covers 8 words for either format, so fragment loads are the same code: each lane reads
// the word pair (2t, 2t+1) of its row and uses it as the k-slots (t, t+4) of both A and B. The
// pairing is the same for A and B, so each product still multiplies equal k indices.

#ifndef FMT
#define FMT 0
#endif
#ifndef MODE
#define MODE 0
#endif
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#ifndef STAGES
#define STAGES 4
#endif

#define NTHREADS (WARPS_M * WARPS_N * 32)
#define BKW 16      // words of k per stage (TF32: 16 values, FP16: 32 values)
#define SROW 24     // shared row stride in words: conflict-free 64-bit fragment loads
#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define MT (WM / 16)
#define NT (WN / 8)
#define USE_LO (MODE == 0 || MODE == 2)
#define EC (MODE == 0 || MODE == 3)
#ifndef DEBIAS
#define DEBIAS 1       // 0: off; 1: each hi*hi result's own loss (its exponent), per k-step; 2: in the epilogue
#endif
#ifndef HH_CHAIN
// 1: each k-step's hi*hi from zero, pairs added in RN; 2: a stage's pair summed in the tensor core
#define HH_CHAIN 1
#endif
#ifndef MINB
#define MINB 1         // blocks per SM asked of the register allocator
#endif
#if HH_CHAIN == 2 && DEBIAS == 1
#error "DEBIAS 1 (per product) needs HH_CHAIN 1"
#endif
#if MODE == 3 && DEBIAS == 1
#error "MODE 3 (hybrid) has no correction accumulator in the k loop: DEBIAS 0 or 2"
#endif

typedef unsigned short u16;  // (u32, u64: gemm/cuda/pipeline.cuh)
typedef long long i64;

// ---------------------------------------------------------------- conversions

__device__ __forceinline__ u32 to_tf32_rna(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ u16 to_f16_rn(float x) {
    u16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}

__device__ __forceinline__ bool finite_f(float x) {
    return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

// ---------------------------------------------------------------- range

// out[0] = max biased exponent of the finite nonzero elements (subnormals count as 0), out[1] =
// the min, out[2] = number of NaN/Inf, out[3] = number of nonzero finite elements. out[1] must
// start at a large value and the others at 0.
struct RangeAcc {
    u32 emax = 0, emin = 0xffffffffu;
    unsigned long long bad = 0, nz = 0;
    __device__ __forceinline__ void add(float x) {
        const u32 u = __float_as_uint(x) & 0x7fffffffu;
        if (u == 0) return;
        const u32 e = u >> 23;
        if (e == 255) { ++bad; return; }
        ++nz;
        emax = max(emax, e);
        emin = min(emin, e);
    }
    // block of 256 threads: reduce, then one set of atomics
    __device__ __forceinline__ void flush(unsigned long long* __restrict__ out) {
        for (int o = 16; o > 0; o >>= 1) {
            emax = max(emax, __shfl_xor_sync(0xffffffffu, emax, o));
            emin = min(emin, __shfl_xor_sync(0xffffffffu, emin, o));
            bad += __shfl_xor_sync(0xffffffffu, bad, o);
            nz += __shfl_xor_sync(0xffffffffu, nz, o);
        }
        __shared__ u32 s_max[8], s_min[8];
        __shared__ unsigned long long s_bad[8], s_nz[8];
        const int tid = threadIdx.x + 32 * threadIdx.y, w = tid >> 5;
        if ((tid & 31) == 0) { s_max[w] = emax; s_min[w] = emin; s_bad[w] = bad; s_nz[w] = nz; }
        __syncthreads();
        if (tid == 0) {
            for (int v = 1; v < 8; ++v) {
                emax = max(emax, s_max[v]); emin = min(emin, s_min[v]); bad += s_bad[v]; nz += s_nz[v];
            }
            if (nz) {
                atomicMax(&out[0], (unsigned long long)emax);
                atomicMin(&out[1], (unsigned long long)emin);
                atomicAdd(&out[3], nz);
            }
            if (bad) atomicAdd(&out[2], bad);
        }
    }
};

// Logical operand: batch x R rows x KU units, unit = 1 float (real) or 2 floats (complex),
// float offset of (b, r, c) = b*sb + r*sr + c*sc. Block 32 x 8 threads; the blocks loop over the
// ntiles = batch * tiles_r * tiles_c tiles of 32 x 32 units and reduce before one set of atomics.
extern "C" __global__ void tcec_range(const float* __restrict__ src, i64 R, i64 KU, int unit, i64 sb,
                                      i64 sr, i64 sc, int r_fast, i64 tiles_r, i64 tiles_c, i64 ntiles,
                                      unsigned long long* __restrict__ out) {
    RangeAcc acc;
    for (i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const i64 b = tile / (tiles_r * tiles_c);
        const i64 rem = tile % (tiles_r * tiles_c);
        const i64 r0 = (rem / tiles_c) * 32, c0 = (rem % tiles_c) * 32;
        for (int j = 0; j < 4; ++j) {
            i64 r, c;
            if (r_fast) { r = r0 + threadIdx.x; c = c0 + threadIdx.y + 8 * j; }
            else        { r = r0 + threadIdx.y + 8 * j; c = c0 + threadIdx.x; }
            if (r >= R || c >= KU) continue;
            const float* p = src + b * sb + r * sr + c * sc;
            for (int q = 0; q < unit; ++q) acc.add(p[q]);
        }
    }
    acc.flush(out);
}

// Grid-stride loop over the vectors i of batch x rows x wv, calling f(i, b, r, v); 32-bit index
// arithmetic where it fits (a 64-bit division per float4 would cost more than the load).
template <typename F>
__device__ __forceinline__ void for_each_vec(i64 batch, i64 rows, i64 wv, F f) {
    const i64 n = batch * rows * wv;
    if (n < 0x7fffffffll) {
        const u32 w = (u32)wv, rr = (u32)rows;
        for (u32 i = blockIdx.x * 256u + threadIdx.x; i < (u32)n; i += gridDim.x * 256u) {
            const u32 row = i / w, b = row / rr;
            f((i64)i, (i64)b, (i64)(row - b * rr), (i64)(i - row * w));
        }
    } else {
        for (i64 i = blockIdx.x * 256ll + threadIdx.x; i < n; i += gridDim.x * 256ll) {
            const i64 row = i / wv;
            f(i, row / rows, row % rows, i % wv);
        }
    }
}

// The same for an operand whose rows are contiguous runs of W floats (W % 4 == 0, rows and
// batches 16-byte aligned): float4 loads over batch x R x W / 4 vectors, grid-stride. Block 256.
extern "C" __global__ void tcec_range_rows(const float* __restrict__ src, i64 R, i64 W, i64 sb, i64 sr,
                                           i64 batch, unsigned long long* __restrict__ out) {
    RangeAcc acc;
    for_each_vec(batch, R, W / 4, [&](i64, i64 b, i64 r, i64 v) {
        const float4 x = *reinterpret_cast<const float4*>(src + b * sb + r * sr + 4 * v);
        acc.add(x.x); acc.add(x.y); acc.add(x.z); acc.add(x.w);
    });
    acc.flush(out);
}

// ---------------------------------------------------------------- split

// hi = round(x * scale) to the format, lo = round((x*scale - hi) * lo_scale): TF32 words, or
// FP16 halves in the low 16 bits. A non-finite hi gets lo = 0.
__device__ __forceinline__ void split_value(float x_in, float scale, float lo_scale, u32& h_out, u32& l_out) {
    const float x = x_in * scale;
#if FMT == 0
    const u32 h = to_tf32_rna(x) & 0xffffe000u;
    const float hf = __uint_as_float(h);
    const float res = finite_f(hf) ? (x - hf) * lo_scale : 0.0f;
    h_out = h;
    l_out = to_tf32_rna(res) & 0xffffe000u;
#else
    const u16 h = to_f16_rn(x);
    const float hf = f16_to_f32(h);
    const float res = finite_f(hf) ? (x - hf) * lo_scale : 0.0f;
    h_out = h;
    l_out = to_f16_rn(res);
#endif
}

// Writes hi and lo workspaces of shape batch x Rp x KWp words (K-contiguous, zero padded) from
// the logical operand described as in tcec_range. Element e of a workspace row is unit e/unit,
// component e%unit. Block 32 x 8; grid.x = batch * ceil(Rp/32), grid.y = ceil(KUp/32).
extern "C" __global__ void tcec_split(const float* __restrict__ src, i64 R, i64 KU, int unit, i64 sb,
                                      i64 sr, i64 sc, int r_fast, i64 tiles_r, i64 Rp, i64 KUp,
                                      i64 wsb, u32* __restrict__ hi, u32* __restrict__ lo,
                                      float scale, float lo_scale) {
    __shared__ float tile[32][2 * 32 + 1];
    const i64 b = blockIdx.x / tiles_r;
    const i64 r0 = (blockIdx.x % tiles_r) * 32;
    const i64 c0 = (i64)blockIdx.y * 32;
    for (int j = 0; j < 4; ++j) {
        int rl, cl;
        if (r_fast) { rl = threadIdx.x; cl = threadIdx.y + 8 * j; }
        else        { rl = threadIdx.y + 8 * j; cl = threadIdx.x; }
        const i64 r = r0 + rl, c = c0 + cl;
        const bool in = r < R && c < KU;
        const float* p = src + b * sb + r * sr + c * sc;
        for (int q = 0; q < unit; ++q) tile[rl][cl * unit + q] = in ? p[q] : 0.0f;
    }
    __syncthreads();
    const i64 row_elems = KUp * unit;
    for (int j = 0; j < 4; ++j) {
        const int rl = threadIdx.y + 8 * j;
        const i64 r = r0 + rl;
        if (r >= Rp) continue;
        for (int q = 0; q < unit; ++q) {
            const int el = threadIdx.x * unit + q;   // element within the tile's row segment
            const i64 e = c0 * unit + el;
            if (e >= row_elems) continue;
            u32 h, l;
            split_value(tile[rl][el], scale, lo_scale, h, l);
#if FMT == 0
            const i64 o = b * wsb + r * row_elems + e;
            hi[o] = h;
            lo[o] = l;
#else
            const i64 o = 2 * b * wsb + r * row_elems + e;   // in halves
            reinterpret_cast<u16*>(hi)[o] = (u16)h;
            reinterpret_cast<u16*>(lo)[o] = (u16)l;
#endif
        }
    }
}

// The same for an operand whose rows are contiguous runs of W floats (W % 4 == 0, rows and
// batches 16-byte aligned; see tcec_range_rows): each thread splits 4 consecutive elements of a
// padded workspace row of Wp elements (Wp % 4 == 0), one float4 load, one 16-byte (TF32) or
// 8-byte (FP16) store per workspace. Grid-stride over batch x Rp x Wp / 4. Block 256.
extern "C" __global__ void tcec_split_rows(const float* __restrict__ src, i64 R, i64 W, i64 sb, i64 sr,
                                           i64 batch, i64 Rp, i64 Wp, u32* __restrict__ hi,
                                           u32* __restrict__ lo, float scale, float lo_scale) {
    for_each_vec(batch, Rp, Wp / 4, [&](i64 i, i64 b, i64 r, i64 v) {
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < R && 4 * v < W) x = *reinterpret_cast<const float4*>(src + b * sb + r * sr + 4 * v);
        u32 h[4], l[4];
        split_value(x.x, scale, lo_scale, h[0], l[0]);
        split_value(x.y, scale, lo_scale, h[1], l[1]);
        split_value(x.z, scale, lo_scale, h[2], l[2]);
        split_value(x.w, scale, lo_scale, h[3], l[3]);
#if FMT == 0
        *reinterpret_cast<uint4*>(hi + 4 * i) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4*>(lo + 4 * i) = make_uint4(l[0], l[1], l[2], l[3]);
#else
        *reinterpret_cast<uint2*>(hi + 2 * i) = make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
        *reinterpret_cast<uint2*>(lo + 2 * i) = make_uint2(l[0] | (l[1] << 16), l[2] | (l[3] << 16));
#endif
    });
}

// ---------------------------------------------------------------- gemm

__device__ __forceinline__ void mma(float d[4], const u32 a[4], const u32 b[2], const float c[4]) {
#if FMT == 0
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
#endif
}

// d += a b, the accumulator read and written in place
__device__ __forceinline__ void mma_acc(float d[4], const u32 a[4], const u32 b[2]) {
#if FMT == 0
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// cp_async16, cp_commit, cp_wait: gemm/cuda/pipeline.cuh

// This block's batch and tile, with n fastest (A reused from L2) or m fastest.
// Tile of this block. raster > 0: column groups of `raster` tiles, each sweeping every row tile
// with its columns fastest (the small B operand of a group stays in L2 while the big A streams;
// raster >= tiles_n: n fastest overall); raster < 0: the same with row groups of -raster tiles.
__device__ __forceinline__ void tile_coords(i64 tiles_m, i64 tiles_n, int raster, i64& bz, i64& tm, i64& tn) {
    const i64 tiles = tiles_m * tiles_n;
    bz = blockIdx.x / tiles;
    const i64 rem = blockIdx.x % tiles;
    const bool cols = raster > 0;
    const i64 across = cols ? tiles_n : tiles_m, along = cols ? tiles_m : tiles_n;   // grouped, swept
    const i64 g = min((i64)(cols ? raster : -raster), across);
    const i64 full = across / g, in_full = full * g * along;
    const i64 grp = rem < in_full ? rem / (g * along) : full;
    const i64 gw = rem < in_full ? g : across - full * g;   // the last group may be narrower
    const i64 r2 = rem - grp * g * along;
    const i64 fast = grp * g + r2 % gw, slow = r2 / gw;
    if (cols) { tm = slow; tn = fast; }
    else      { tn = slow; tm = fast; }
}

// Finishes one 16 x 8 fragment of the hi*hi accumulator and stores it. Layout of mma.sync m16n8
// and of each 8-column slice of wgmma m64nN: x[0], x[1] at row r0 + g, columns col, col + 1;
// x[2], x[3] at row r0 + g + 8. Error-corrected modes add the correction: `cv` (mode 0: the
// kernel's own accumulator) or `ccor` at the same (padded) position (mode 3, row stride ldcc).
// epi 0: C[row * ldc + col] (floats), row < M, col < N; epi 1: the 16 rows r0.. are the real (g)
// and imaginary (g + 8) parts of complex row r0 / 2 + g, written as (re, im) pairs.
__device__ __forceinline__ void finish_frag(const float x_in[4], const float* cv, const float* __restrict__ ccor,
                                            i64 ldcc, i64 r0, int g, i64 col, float* __restrict__ Cb, i64 M,
                                            i64 N, i64 ldc, int epi, int vec, float corr_scale,
                                            float out_scale_a, float out_scale_b, float debias_beta) {
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        float x = x_in[q];
#if EC
#if MODE == 0
        const float c = cv[q];
#else
        const float c = ccor[(r0 + g + 8 * (q >> 1)) * ldcc + col + (q & 1)];
#endif
        // a non-finite hi*hi sum is the IEEE result; corrections could only turn Inf into NaN
        if (finite_f(x)) {
#if DEBIAS == 2
            // the expected truncation loss of all hi*hi results, beta * x, goes through the
            // correction (debias_beta = beta 2^11) so that it is not rounded away
            x = __fmaf_rn(__fmaf_rn(x, debias_beta, c), corr_scale, x);
#else
            x = __fmaf_rn(c, corr_scale, x);
#endif
        }
#endif
        v[q] = x * out_scale_a * out_scale_b;
    }
    if (epi == 0) {
        const i64 row = r0 + g;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 r = row + 8 * h;
            if (r >= M) continue;
            float* p = Cb + r * ldc + col;
            if (vec && col + 1 < N) {
                float2 w;
                w.x = v[2 * h];
                w.y = v[2 * h + 1];
                *reinterpret_cast<float2*>(p) = w;
            } else {
                if (col < N) p[0] = v[2 * h];
                if (col + 1 < N) p[1] = v[2 * h + 1];
            }
        }
    } else {
        const i64 row = r0 / 2 + g;   // complex row
        if (row < M) {
            float* p = Cb + 2 * (row * ldc + col);
            if (vec && col + 1 < N) {
                float4 w;
                w.x = v[0]; w.y = v[2]; w.z = v[1]; w.w = v[3];
                *reinterpret_cast<float4*>(p) = w;
            } else {
                if (col < N) { p[0] = v[0]; p[1] = v[2]; }
                if (col + 1 < N) { p[2] = v[1]; p[3] = v[3]; }
            }
        }
    }
}

#define TILE_A (BM * SROW)
#define TILE_B (BN * SROW)
#define STAGE_WORDS ((USE_LO ? 2 : 1) * (TILE_A + TILE_B))

#ifndef TCEC_NO_MMA_GEMM   // defined by the modules that need only the stages (or the wgmma product)
// C = A_ws @ B_ws^T.
//   A_ws: batch x Mp x KW words (hi, lo), B_ws: batch x Np x KW words; KW a multiple of BKW,
//   Mp, Np multiples of BM, BN; sa, sb: batch strides in words (0 broadcasts).
//   epi 0: C[b*sc + m*ldc + n] (floats), m < M, n < N.
//   epi 1: complex rows paired: in each 16-row tile, rows g and g+8 are the real and imaginary
//          parts of complex row i = tile/2 + g; writes (re, im) at C + b*sc + 2*(i*ldc + n), i < M.
//   vec: C, ldc and sc allow 8-byte (epi 0) / 16-byte (epi 1) stores.
//   raster: tile order (tile_coords).
//   ccor (MODE 3): lo*hi + hi*lo of the padded real product, row-major (Mp x ldcc floats, batch
//          stride scc), in the correction's units (lo scaled by 2^11); unused otherwise.
extern "C" __global__ void __launch_bounds__(NTHREADS, MINB)
tcec_gemm(const u32* __restrict__ a_hi, const u32* __restrict__ a_lo, const u32* __restrict__ b_hi,
          const u32* __restrict__ b_lo, float* __restrict__ C, i64 M, i64 N, i64 KW, i64 tiles_m,
          i64 tiles_n, i64 sa, i64 sb, i64 sc, i64 ldc, int epi, int vec, int raster, float corr_scale,
          float out_scale_a, float out_scale_b, const float* __restrict__ ccor, i64 ldcc, i64 scc,
          float debias_beta) {
    extern __shared__ __align__(16) u32 smem[];
    i64 bz, tm, tn;
    tile_coords(tiles_m, tiles_n, raster, bz, tm, tn);

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int g = lane >> 2, t = lane & 3;

    const u32* gA_hi = a_hi + bz * sa + tm * BM * KW;
    const u32* gB_hi = b_hi + bz * sb + tn * BN * KW;
#if USE_LO
    const u32* gA_lo = a_lo + bz * sa + tm * BM * KW;
    const u32* gB_lo = b_lo + bz * sb + tn * BN * KW;
#endif

    auto load_stage = [&](int stage, i64 kt) {
        u32* s = smem + stage * STAGE_WORDS;
        const i64 koff = kt * BKW;
        // each row has BKW/4 = 4 chunks of 16 bytes
        for (int i = tid; i < BM * 4; i += NTHREADS) {
            const int r = i >> 2, ch = (i & 3) * 4;
            cp_async16(s + r * SROW + ch, gA_hi + r * KW + koff + ch);
#if USE_LO
            cp_async16(s + TILE_A + TILE_B + r * SROW + ch, gA_lo + r * KW + koff + ch);
#endif
        }
        for (int i = tid; i < BN * 4; i += NTHREADS) {
            const int r = i >> 2, ch = (i & 3) * 4;
            cp_async16(s + TILE_A + r * SROW + ch, gB_hi + r * KW + koff + ch);
#if USE_LO
            cp_async16(s + 2 * TILE_A + TILE_B + r * SROW + ch, gB_lo + r * KW + koff + ch);
#endif
        }
    };

    float acc[MT][NT][4];
#if MODE == 0
    float cor[MT][NT][4];
#endif
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                acc[i][j][q] = 0.0f;
#if MODE == 0
                cor[i][j][q] = 0.0f;
#endif
            }

    const i64 KT = KW / BKW;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s);
        cp_commit();
    }

    for (i64 kt = 0; kt < KT; ++kt) {
        cp_wait<STAGES - 2>();
        __syncthreads();
        {
            const i64 nk = kt + STAGES - 1;
            if (nk < KT) load_stage((int)(nk % STAGES), nk);
            cp_commit();
        }
        const u32* s = smem + (int)(kt % STAGES) * STAGE_WORDS;
        const u32* sAh = s;
        const u32* sBh = s + TILE_A;
#if USE_LO
        const u32* sAl = s + TILE_A + TILE_B;
        const u32* sBl = s + 2 * TILE_A + TILE_B;
#endif
        // B fragments of both k-steps of the stage; A fragments per row tile
        u32 bh[2][NT][2];
#if USE_LO
        u32 bl[2][NT][2];
#endif
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int r = (wn * WN + j * 8 + g) * SROW + ks * 8 + 2 * t;
                uint2 v = *reinterpret_cast<const uint2*>(sBh + r);
                bh[ks][j][0] = v.x; bh[ks][j][1] = v.y;
#if USE_LO
                v = *reinterpret_cast<const uint2*>(sBl + r);
                bl[ks][j][0] = v.x; bl[ks][j][1] = v.y;
#endif
            }
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            u32 ah[2][4];
#if USE_LO
            u32 al[2][4];
#endif
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {
                const int r = (wm * WM + i * 16 + g) * SROW + ks * 8 + 2 * t;
                uint2 v0 = *reinterpret_cast<const uint2*>(sAh + r);
                uint2 v1 = *reinterpret_cast<const uint2*>(sAh + r + 8 * SROW);
                ah[ks][0] = v0.x; ah[ks][2] = v0.y; ah[ks][1] = v1.x; ah[ks][3] = v1.y;
#if USE_LO
                v0 = *reinterpret_cast<const uint2*>(sAl + r);
                v1 = *reinterpret_cast<const uint2*>(sAl + r + 8 * SROW);
                al[ks][0] = v0.x; al[ks][2] = v0.y; al[ks][1] = v1.x; al[ks][3] = v1.y;
#endif
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
#if EC
#if HH_CHAIN == 2
                // the hi*hi products of the stage's two k-steps are summed inside the tensor core
                // (the first from zero), then added to the FP32 accumulator (round to nearest)
                const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float p[4];
                mma(p, ah[0], bh[0][j], zero);
                mma_acc(p, ah[1], bh[1][j]);
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] = __fadd_rn(acc[i][j][q], p[q]);
#else
                // each k-step's hi*hi product is computed from zero on the tensor core; the two
                // of a stage are added together, then to the FP32 accumulator (round to nearest)
                const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float p0[4], p1[4];
                mma(p0, ah[0], bh[0][j], zero);
                mma(p1, ah[1], bh[1][j], zero);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    acc[i][j][q] = __fadd_rn(acc[i][j][q], __fadd_rn(p0[q], p1[q]));
#if DEBIAS == 1
                    // the tensor core truncates: a result x that is not exact lost on average
                    // sign(x) F ulp(x) (terms cut 2 bits below the last bit, then the sum
                    // truncated). One whose lowest two significand bits are zero may be a single
                    // product, exact: it gets nothing. Added back through the correction
                    // accumulator, scaled by 2^11 there (debias_beta = F 2^-12), so that it is not
                    // rounded away (gemm/tcec_split.py PRODUCT_DEBIAS_FRACTION).
                    const u32 b0 = __float_as_uint(p0[q]), b1 = __float_as_uint(p1[q]);
                    cor[i][j][q] = __fmaf_rn(__uint_as_float((b0 & 3u) ? (b0 & 0xff800000u) : 0u), debias_beta,
                                             cor[i][j][q]);
                    cor[i][j][q] = __fmaf_rn(__uint_as_float((b1 & 3u) ? (b1 & 0xff800000u) : 0u), debias_beta,
                                             cor[i][j][q]);
#endif
                }
#endif
#if MODE == 0
                mma(cor[i][j], al[0], bh[0][j], cor[i][j]);
                mma(cor[i][j], ah[0], bl[0][j], cor[i][j]);
                mma(cor[i][j], al[1], bh[1][j], cor[i][j]);
                mma(cor[i][j], ah[1], bl[1][j], cor[i][j]);
#endif
#elif MODE == 1
                mma(acc[i][j], ah[0], bh[0][j], acc[i][j]);
                mma(acc[i][j], ah[1], bh[1][j], acc[i][j]);
#else
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                    mma(acc[i][j], ah[ks], bh[ks][j], acc[i][j]);
                    mma(acc[i][j], al[ks], bh[ks][j], acc[i][j]);
                    mma(acc[i][j], ah[ks], bl[ks][j], acc[i][j]);
                    mma(acc[i][j], al[ks], bl[ks][j], acc[i][j]);
                }
#endif
            }
        }
    }
    cp_wait<0>();

    // epilogue
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#if MODE == 0
            const float* cv = cor[i][j];
#else
            const float* cv = nullptr;
#endif
            finish_frag(acc[i][j], cv, ccor + bz * scc, ldcc, tm * BM + wm * WM + i * 16, g,
                        tn * BN + wn * WN + j * 8 + 2 * t, C + bz * sc, M, N, ldc, epi, vec, corr_scale,
                        out_scale_a, out_scale_b, debias_beta);
        }
}
#endif  // TCEC_NO_MMA_GEMM
