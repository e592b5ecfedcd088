// INT8 products of the CRT scheme on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a),
// each reduced modulo its modulus in the epilogue: gemm/ozaki/crt/wgmma.py loads this file (after
// gemm/cuda/pipeline.cuh, built for sm_90a by gemm.cuda.sm90a) for `products_r8`.
//
// Why: with cuBLAS, every modulus' INT32 product goes through global memory (4 bytes an element,
// 34 products for a complex d = 10 gate: 36 GB at 28 qubits) and is read again by the
// reconstruction; the product's bound k' * 128^2 < 2^31 makes it exact, but only its residue
// modulo p (one byte) is needed. Here each tile's INT32 accumulator stays in registers, is
// reduced modulo p and leaves as INT8: a quarter of the traffic, and the reconstruction reads a
// quarter as much.
//
// Operands (the residues of gemm/ozaki/crt/gpu.py `residues`): RA (Z, M, kp) and RB (Z, N, kp)
// int8, K-major (k contiguous), Z = moduli x parts, kp a multiple of 128. Output (Z, M, ldo) int8,
// element (r, c) = (RA[z, r] . RB[z, c]) mod p_(z / G), a representative in [-128, 127].
//
// Two kernels of the same product: crt_mod_gemm_tma (the default: persistent, TMA-fed, see its
// comment below) and crt_mod_gemm (loaded by every thread with cp.async). In both, two consumer
// warpgroups take 64 rows each of a 128 x BN tile (BN = 128 CRT_NC: one m64n128k32 wgmma per chunk
// and k-step), and a stage is 128 bytes of k (one 128-byte swizzle atom: 16-byte chunk c of row r
// at chunk c ^ (r % 8), the swizzle the descriptors name) for the tile's A rows and B lines.
// Tiles go column tiles first, then row tiles, then z: the column tiles of one row tile run
// together, so A's rows come from HBM once and B (small, every z) stays in L2.

#ifndef CRT_NC
#define CRT_NC 2                       // 128-column chunks per tile: BN = 128 CRT_NC
#endif
#ifndef CRT_STAGES
#define CRT_STAGES 4
#endif
#define CRT_BM 128
#define CRT_BN (128 * CRT_NC)
#define CRT_AHEAD (CRT_STAGES - 2)
#define CRT_THREADS 256
#define CRT_STAGE_BYTES ((CRT_BM + CRT_BN) * 128)
#define CRT_OUT_ROW (CRT_BN + 4)       // epilogue staging row: +4 bytes spreads the rows over banks
#define CRT_OUT_BYTES (CRT_BM * CRT_OUT_ROW)
#if CRT_AHEAD < 1
#error "CRT_STAGES: at least 3"
#endif
#if CRT_BM * CRT_OUT_ROW > CRT_STAGES * CRT_STAGE_BYTES
#error "the epilogue's staging tile must fit the pipeline's shared memory"
#endif

// cp.async, wgmma fences and descriptors, mbarriers, TMA: gemm/cuda/pipeline.cuh (prepended by
// wgmma._kernel)

// keeps the compiler from reading wgmma results above the wait
__device__ __forceinline__ void pin64(int* d) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

__device__ __forceinline__ void wgmma_s8_n128(int* d, u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

// One m64n256k32 product into two 64-register halves (columns 0..127 in d0, 128..255 in d1: the
// n256 fragment's register 4j + e is column 8j + 2t + (e & 1), so its first 64 registers are the
// n128 fragment of the first 128 columns). Why: two n128 instructions read the A tile from shared
// memory twice; one n256 reads it once (shared-memory reads of the operands per product: 10 KB
// instead of 12 KB).
__device__ __forceinline__ void wgmma_s8_n256(int* d0, int* d1, u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p;\n}\n"
        : "+r"(d0[0]), "+r"(d0[1]), "+r"(d0[2]), "+r"(d0[3]), "+r"(d0[4]), "+r"(d0[5]), "+r"(d0[6]), "+r"(d0[7]), "+r"(d0[8]), "+r"(d0[9]), "+r"(d0[10]), "+r"(d0[11]), "+r"(d0[12]), "+r"(d0[13]), "+r"(d0[14]), "+r"(d0[15]), "+r"(d0[16]), "+r"(d0[17]), "+r"(d0[18]), "+r"(d0[19]), "+r"(d0[20]), "+r"(d0[21]), "+r"(d0[22]), "+r"(d0[23]), "+r"(d0[24]), "+r"(d0[25]), "+r"(d0[26]), "+r"(d0[27]), "+r"(d0[28]), "+r"(d0[29]), "+r"(d0[30]), "+r"(d0[31]), "+r"(d0[32]), "+r"(d0[33]), "+r"(d0[34]), "+r"(d0[35]), "+r"(d0[36]), "+r"(d0[37]), "+r"(d0[38]), "+r"(d0[39]), "+r"(d0[40]), "+r"(d0[41]), "+r"(d0[42]), "+r"(d0[43]), "+r"(d0[44]), "+r"(d0[45]), "+r"(d0[46]), "+r"(d0[47]), "+r"(d0[48]), "+r"(d0[49]), "+r"(d0[50]), "+r"(d0[51]), "+r"(d0[52]), "+r"(d0[53]), "+r"(d0[54]), "+r"(d0[55]), "+r"(d0[56]), "+r"(d0[57]), "+r"(d0[58]), "+r"(d0[59]), "+r"(d0[60]), "+r"(d0[61]), "+r"(d0[62]), "+r"(d0[63]), "+r"(d1[0]), "+r"(d1[1]), "+r"(d1[2]), "+r"(d1[3]), "+r"(d1[4]), "+r"(d1[5]), "+r"(d1[6]), "+r"(d1[7]), "+r"(d1[8]), "+r"(d1[9]), "+r"(d1[10]), "+r"(d1[11]), "+r"(d1[12]), "+r"(d1[13]), "+r"(d1[14]), "+r"(d1[15]), "+r"(d1[16]), "+r"(d1[17]), "+r"(d1[18]), "+r"(d1[19]), "+r"(d1[20]), "+r"(d1[21]), "+r"(d1[22]), "+r"(d1[23]), "+r"(d1[24]), "+r"(d1[25]), "+r"(d1[26]), "+r"(d1[27]), "+r"(d1[28]), "+r"(d1[29]), "+r"(d1[30]), "+r"(d1[31]), "+r"(d1[32]), "+r"(d1[33]), "+r"(d1[34]), "+r"(d1[35]), "+r"(d1[36]), "+r"(d1[37]), "+r"(d1[38]), "+r"(d1[39]), "+r"(d1[40]), "+r"(d1[41]), "+r"(d1[42]), "+r"(d1[43]), "+r"(d1[44]), "+r"(d1[45]), "+r"(d1[46]), "+r"(d1[47]), "+r"(d1[48]), "+r"(d1[49]), "+r"(d1[50]), "+r"(d1[51]), "+r"(d1[52]), "+r"(d1[53]), "+r"(d1[54]), "+r"(d1[55]), "+r"(d1[56]), "+r"(d1[57]), "+r"(d1[58]), "+r"(d1[59]), "+r"(d1[60]), "+r"(d1[61]), "+r"(d1[62]), "+r"(d1[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

#define CRT_MAGIC 12582912.0f  // 1.5 * 2^23: in [2^23, 2^24) the FP32 spacing is 1

// x mod p as a byte (the two's-complement byte of a representative in [-128, 128]; +128 occurs
// only for p = 256, whose byte 0x80 is -128), exact for |x| < 2^31, with no conversion
// instruction: I2F and F2I issue at 16 a clock on an SM of Hopper, and four of them an element
// (the first version) held the epilogue at ~4.5 us a tile, 44% of a d = 10 gate's product time.
// 1. x = h 2^17 + l with l in [0, 2^17): y = h c17 + l = x (mod p), c17 = 2^17 mod p in the
//    symmetric range; |h| <= 2^14, so |y| < 2^21 + 2^17 < 2^22;
// 2. y as FP32 from its bits: 1.5 2^23 + y lies in [2^23, 2^24);
// 3. q = rint(y / p) by an fma rounded at 1.5 2^23 and r = y - q p, exact, as red_sym in crt.cu
//    (|y| < 2^23: 1/p rounded to FP32 moves y / p by less than 1/(2p), and for odd p y / p is at
//    least that far from a half-integer; 1/256 is exact);
// 4. r's byte from the bits of 1.5 2^23 + r.
__device__ __forceinline__ unsigned mod_byte(int x, int c17, float p, float inv_p) {
    const int y = (x >> 17) * c17 + (x & 0x1ffff);
    const float f = __int_as_float(0x4B400000 + y) - CRT_MAGIC;
    const float q = __fmaf_rn(f, inv_p, CRT_MAGIC) - CRT_MAGIC;
    const float r = __fmaf_rn(-q, p, f);
    return __float_as_uint(r + CRT_MAGIC) & 0xffu;
}

// Epilogue: the tile's residues into a staged tile in shared memory (free once every warpgroup's
// products have completed), then out in 16-byte rows. Fragment of m64nNk32 (s32): register
// 4j + e of lane (g, t) of warp w is row 16 w + g (+8 for e >= 2), column 8 j + 2 t + (e & 1).
// `named`: 0 syncs the whole block; else the consumers' named barrier (the producer has left).
__device__ __forceinline__ void consumers_sync(int named) {
    if (named) asm volatile("bar.sync 1, 256;\n" ::: "memory");
    else __syncthreads();
}

__device__ __forceinline__ void crt_epilogue(int (&acc)[CRT_NC][64], unsigned char* smem, signed char* __restrict__ out,
                                             int M, int N, int ldo, long long so, int G, const int* __restrict__ p_of,
                                             const float* __restrict__ inv_of, int tm, int tn, int z, int wg, int warp,
                                             int lane, int tid, int named) {
    const int mi = z / G;
    const float p = (float)p_of[2 * mi], inv_p = inv_of[mi];  // p_of: (p, 2^17 mod p) per modulus
    const int c17 = p_of[2 * mi + 1];
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ch = 0; ch < CRT_NC; ++ch)
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = wg * 64 + warp * 16 + g + 8 * h, col = 128 * ch + 8 * j + 2 * t;
                const unsigned lo = mod_byte(acc[ch][4 * j + 2 * h], c17, p, inv_p);
                const unsigned hi = mod_byte(acc[ch][4 * j + 2 * h + 1], c17, p, inv_p);
                *reinterpret_cast<unsigned short*>(smem + row * CRT_OUT_ROW + col) = (unsigned short)(lo | (hi << 8));
            }
    consumers_sync(named);
    signed char* o = out + z * so;
    for (int i = tid; i < CRT_BM * (CRT_BN / 16); i += CRT_THREADS) {
        const int r = i / (CRT_BN / 16), c = 16 * (i % (CRT_BN / 16));
        const long long row = (long long)tm * CRT_BM + r;
        const int col = tn * CRT_BN + c;
        if (row >= M || col >= N) continue;
        const unsigned char* s = smem + r * CRT_OUT_ROW + c;
        // ldo, so and the tile's columns are multiples of 16 (wgmma.products_r8 checks ldo and out's
        // alignment): aligned in global memory
        if (col + 16 <= N) {
            const unsigned* w = reinterpret_cast<const unsigned*>(s);   // 4-byte aligned in the staging tile
            *reinterpret_cast<int4*>(o + row * ldo + col) = make_int4(w[0], w[1], w[2], w[3]);
        } else {
            // a row's last piece when N % 16 != 0 (N = 200: columns 192..199): only its columns below
            // N are stored, the padding [N, ldo) stays as allocated
            for (int e = 0; e < N - col; ++e) o[row * ldo + col + e] = (signed char)s[e];
        }
    }
}

// One stage's products (4 k-steps of 32 bytes: +2 in the descriptor's address field) into the
// warpgroup's accumulator, committed as one group.
__device__ __forceinline__ void crt_stage_products(int (&acc)[CRT_NC][64], u32 stage, int wg, bool first) {
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#if CRT_NC == 2
        wgmma_s8_n256(acc[0], acc[1], sw128_desc(stage + wg * 64 * 128) + 2 * ks,
                      sw128_desc(stage + CRT_BM * 128) + 2 * ks, (!first || ks > 0) ? 1 : 0);
#else
#pragma unroll
        for (int ch = 0; ch < CRT_NC; ++ch)
            wgmma_s8_n128(acc[ch], sw128_desc(stage + wg * 64 * 128) + 2 * ks,
                          sw128_desc(stage + (CRT_BM + 128 * ch) * 128) + 2 * ks, (!first || ks > 0) ? 1 : 0);
#endif
    }
    wg_commit();
}

extern "C" __global__ void __launch_bounds__(CRT_THREADS, 1)
crt_mod_gemm(const signed char* __restrict__ RA, const signed char* __restrict__ RB, signed char* __restrict__ out,
             int M, int N, int kp, long long sa, long long sb, long long so, int ldo, int G,
             const int* __restrict__ p_of, const float* __restrict__ inv_of) {
    extern __shared__ __align__(1024) unsigned char crt_smem_raw[];
    // the 128-byte swizzle repeats every 1024 bytes and is applied to address bits: align the base
    const u32 raw = (u32)__cvta_generic_to_shared(crt_smem_raw);
    const u32 sbase = (raw + 1023u) & ~1023u;
    unsigned char* smem = crt_smem_raw + (sbase - raw);

    const int tn = blockIdx.x, tm = blockIdx.y, z = blockIdx.z;
    const int tid = threadIdx.x;
    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const signed char* gA = RA + z * sa;
    const signed char* gB = RB + z * sb;
    const int KT = kp / 128;

    // rows past M and lines past N read the last one (their results are not stored)
    auto load_stage = [&](int slot, int kt) {
        unsigned char* s = smem + slot * CRT_STAGE_BYTES;
#pragma unroll 4
        for (int i = tid; i < (CRT_BM + CRT_BN) * 8; i += CRT_THREADS) {
            const int r = i >> 3, c = i & 7;
            const signed char* src;
            if (r < CRT_BM) {
                src = gA + (long long)min(tm * CRT_BM + r, M - 1) * kp;
            } else {
                src = gB + (long long)min(tn * CRT_BN + r - CRT_BM, N - 1) * kp;
            }
            cp_async16(s + r * 128 + ((c ^ (r & 7)) << 4), src + kt * 128 + 16 * c);
        }
    };

    int acc[CRT_NC][64];
#pragma unroll
    for (int ch = 0; ch < CRT_NC; ++ch)
#pragma unroll
        for (int q = 0; q < 64; ++q) acc[ch][q] = 0;

#pragma unroll
    for (int s = 0; s < CRT_AHEAD; ++s) {
        if (s < KT) load_stage(s, s);
        cp_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        cp_wait<CRT_AHEAD - 1>();
        fence_proxy_async();   // cp.async wrote through the generic proxy; wgmma reads through the async one
        __syncthreads();       // also: the products of the stage this step refills have completed
        if (kt + CRT_AHEAD < KT) load_stage((kt + CRT_AHEAD) % CRT_STAGES, kt + CRT_AHEAD);
        cp_commit();
        crt_stage_products(acc, sbase + (u32)((kt % CRT_STAGES) * CRT_STAGE_BYTES), wg, kt == 0);
        wg_wait<1>();   // the previous stage's group has completed; this one runs on
    }
    wg_wait<0>();
#pragma unroll
    for (int ch = 0; ch < CRT_NC; ++ch) pin64(acc[ch]);
    cp_wait<0>();
    __syncthreads();   // every warpgroup is done with the stages: the staging tile may overwrite them

    crt_epilogue(acc, smem, out, M, N, ldo, so, G, p_of, inv_of, tm, tn, z, wg, warp, lane, tid, 0);

}

// ---------------------------------------------------------------- TMA-loaded, warp-specialized

// The same product with its stages loaded by the tensor memory accelerator: one thread of a third
// warpgroup (the producer) issues two copies a stage (A's 128 rows, B's BN lines, 128 bytes of k
// each, written in the 128-byte swizzle), and the two consumer warpgroups never wait for each
// other or for the loads' issue. Rows past M and lines past N are filled with zeros by the TMA.
//   full[s]   the producer arms it with the stage's byte count; the copies complete it;
//   empty[s]  each consumer warp arrives once the products that read slot s have completed
//             (one stage later: a stage's wgmma group stays in flight while the next is issued).
// setmaxnreg hands the producer's registers to the consumers.
#define CRT_TMA_THREADS (CRT_THREADS + 128)
#define CRT_CONSUMER_REGS 232            // 2 x 128 x 232 + 128 x 40 <= 65536
#define CRT_PRODUCER_REGS 40

// map_a: (Z, M, kp / 4) words, box 32 words x 128 rows; map_b: (Z, N, kp / 4), box 32 x BN.
// Persistent: block b takes tiles b, b + gridDim.x, ... (columns fastest, then rows, then z), and
// the stage counter runs on across its tiles, so the producer loads the next tile's first stages
// while the consumers reduce and store the last one (the staging tile has its own shared memory).
extern "C" __global__ void __launch_bounds__(CRT_TMA_THREADS, 1)
crt_mod_gemm_tma(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                 signed char* __restrict__ out, int M, int N, int kp, long long so, int ldo, int G,
                 const int* __restrict__ p_of, const float* __restrict__ inv_of, int tiles_m, int tiles_n,
                 int tiles) {
    extern __shared__ __align__(1024) unsigned char crt_smem_raw[];
    const u32 raw = (u32)__cvta_generic_to_shared(crt_smem_raw);
    const u32 sbase = (raw + 1023u) & ~1023u;
    unsigned char* smem = crt_smem_raw + (sbase - raw);
    const u32 bars = sbase + CRT_STAGES * CRT_STAGE_BYTES;
    unsigned char* staging = smem + CRT_STAGES * CRT_STAGE_BYTES + 16 * CRT_STAGES;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (CRT_STAGES + s); };

    const int tid = threadIdx.x;
    const int warp_id = tid >> 5, lane = tid & 31;
    const int KT = kp / 128;
    const int per_z = tiles_m * tiles_n;

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < CRT_STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), CRT_THREADS / 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp_id >= CRT_THREADS / 32) {   // producer warpgroup: one thread issues the copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(CRT_PRODUCER_REGS));
        if (warp_id == CRT_THREADS / 32 && lane == 0) {
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const int z = tile / per_z, rem = tile - z * per_z, tm = rem / tiles_n, tn = rem - tm * tiles_n;
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int s = it % CRT_STAGES;
                    if (it >= CRT_STAGES) mbar_wait(empty(s), (u32)((it / CRT_STAGES - 1) & 1));
                    mbar_arm(full(s), CRT_STAGE_BYTES);
                    const u32 dst = sbase + s * CRT_STAGE_BYTES;
                    tma_load(dst, &map_a, full(s), 32 * kt, tm * CRT_BM, z);
                    tma_load(dst + CRT_BM * 128, &map_b, full(s), 32 * kt, tn * CRT_BN, z);
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CRT_CONSUMER_REGS));
    const int wg = tid >> 7, warp = warp_id & 3;
    int acc[CRT_NC][64];
#pragma unroll
    for (int ch = 0; ch < CRT_NC; ++ch)
#pragma unroll
        for (int q = 0; q < 64; ++q) acc[ch][q] = 0;   // (each tile's first k-step ignores it)
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int z = tile / per_z, rem = tile - z * per_z, tm = rem / tiles_n, tn = rem - tm * tiles_n;
        for (int kt = 0; kt < KT; ++kt, ++it) {
            const int s = it % CRT_STAGES;
            mbar_wait(full(s), (u32)((it / CRT_STAGES) & 1));
            crt_stage_products(acc, sbase + s * CRT_STAGE_BYTES, wg, kt == 0);   // kt 0 starts from zero
            wg_wait<1>();   // the previous stage's group has completed: its slot may be refilled
            if (kt >= 1 && lane == 0) mbar_arrive(empty((it - 1) % CRT_STAGES));
        }
        wg_wait<0>();
#pragma unroll
        for (int ch = 0; ch < CRT_NC; ++ch) pin64(acc[ch]);
        if (lane == 0) mbar_arrive(empty((it - 1) % CRT_STAGES));   // the tile's last stage
        consumers_sync(1);   // the previous tile's staging tile has been stored
        crt_epilogue(acc, staging, out, M, N, ldo, so, G, p_of, inv_of, tm, tn, z, wg, warp, lane, tid, 1);
    }
}
