// hi*hi product of the error-corrected TF32 / FP16 GEMM on Hopper's warpgroup tensor-core
// instructions (wgmma, sm_90a). Appended to tcec.cu, whose compile-time constants (FMT, MODE,
// DEBIAS, ...), conversions, cp.async helpers and epilogue (finish_frag) it uses.
//
// Why: the mma.sync kernel of tcec.cu issues one instruction per 16 x 8 x 8 product, and with the
// round-to-nearest additions the error-corrected scheme needs, the warp schedulers, not the
// tensor cores, bound it. One wgmma multiplies a 64 x 128 x 8 (TF32) or 64 x 128 x 16 (FP16)
// block from shared memory, leaving the issue slots to the additions.
//
// Block: two warpgroups, each 64 rows x WG_BN columns (128 or 256) of a 128 x WG_BN tile, in
// chunks of 128 columns (one wgmma each). A stage holds WG_ATOMS blocks of 32 words of k (128-byte
// rows: the 128-byte swizzle of the wgmma descriptors), loaded by cp.async and written swizzled:
// 16-byte chunk c of row r lands at chunk c ^ (r % 8).
//   MODE 1 (plain): the k-steps accumulate inside the tensor core.
//   MODE 3 (error-corrected hi*hi): each product (one chunk, WG_CHAIN k-steps) starts from zero on
//           the tensor core and is added to the FP32 accumulator with round-to-nearest; with two
//           temporaries (WG_TMP 2) while the next product runs, with one after it (the other
//           warpgroup's products fill the tensor core meanwhile). lo*hi + hi*lo come in `ccor`
//           (cuBLAS), as in tcec.cu. A stage's last product is added after a full wait: carried
//           over the loop's back edge, ptxas serialized every wgmma (C7514).
// Registers: 64 per chunk of accumulator, 64 per temporary: WG_BN 256 allows one temporary.
// Workspaces as for tcec_gemm, with KW a multiple of WG_BKW, Mp of 128 and Np of WG_BN.

#if MODE != 0 && MODE != 1 && MODE != 3
#error "wgmma product: MODE 0 (error-corrected, fused), 1 (plain) or 3 (error-corrected hi*hi, hybrid)"
#endif
#ifndef WG_CHAIN
#define WG_CHAIN 1        // k-steps per hi*hi product summed inside the tensor core (1 or 2)
#endif
#ifndef WG_BN
#define WG_BN 128         // columns of the tile: 128 or 256
#endif
#ifndef WG_TMP
#define WG_TMP 2          // hi*hi temporaries: 2 (ping-pong) or 1
#endif
#ifndef WG_NC
#define WG_NC 128         // columns per wgmma (a chunk): 128, or 64 (smaller temporaries)
#endif
#define WG_NR (WG_NC / 2) // accumulator registers per chunk
#ifndef WG_ATOMS
#define WG_ATOMS 2        // 128-byte swizzle atoms of k per stage (32 words each)
#endif
#ifndef WG_STAGES
#define WG_STAGES 3
#endif
// stages loaded ahead: the plain product keeps the previous stage's wgmma group running into the
// next stage, so its slot must outlive one more step
#if MODE == 1
#define WG_AHEAD (WG_STAGES - 2)
#else
#define WG_AHEAD (WG_STAGES - 1)
#endif
#if WG_AHEAD < 1
#error "WG_STAGES too small for this mode"
#endif
#define WG_BM 128
#define WG_CH (WG_BN / WG_NC)                       // chunks per warpgroup
#define WG_BKW (32 * WG_ATOMS)                      // words of k per stage
#define WG_THREADS 256
#define WG_TILE_BYTES(rows) ((rows) * 128)
#define WG_PARTS (MODE == 0 ? 2 : 1)                 // hi, and for the fused product lo, of both operands
#define WG_LO_BYTES (WG_TILE_BYTES(WG_BM) + WG_TILE_BYTES(WG_BN))   // offset of the lo parts in an atom
#define WG_ATOM_BYTES (WG_PARTS * WG_LO_BYTES)
#define WG_STAGE_BYTES (WG_ATOMS * WG_ATOM_BYTES)
#define WG_KSTEPS (4 * WG_ATOMS)                    // k-steps of 32 bytes (8 TF32 / 16 FP16) a stage
#define WG_PRODUCTS (WG_KSTEPS / WG_CHAIN * WG_CH)  // hi*hi products a stage (k-step group x chunk)
#if MODE == 0 && (WG_CH != 2 || WG_NC != 64 || WG_CHAIN != 1 || WG_TMP != 2)
#error "the fused product pairs each 128-column correction with one of two 64-column hi*hi products"
#endif
#if MODE == 0 && DEBIAS == 1
#error "the fused wgmma product adds the debias in the epilogue (DEBIAS 0 or 2)"
#endif
#if MODE == 0 && !defined(TCEC_NO_WG_CPASYNC)
#error "the fused product is loaded by TMA only (tcec_tma.cu; define TCEC_NO_WG_CPASYNC)"
#endif
#if MODE != 1 && WG_TMP == 2 && WG_PRODUCTS % 2 != 0
#error "the ping-pong temporaries alternate within a stage: an even number of products"
#endif
#if MODE != 1 && (WG_CH * WG_PARTS + WG_TMP) * WG_NR > 200
#error "accumulator and temporaries exceed the register file: WG_BN 256 takes WG_TMP 1, or WG_NC 64"
#endif

// sw128_desc, wg_fence / wg_commit / wg_wait, fence_proxy_async: gemm/cuda/pipeline.cuh

// keeps the compiler from moving reads of wgmma results above the wait (and writes below the issue)
template <int N>
__device__ __forceinline__ void pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void add_rn(float* acc, const float* p) {
#pragma unroll
    for (int q = 0; q < N; ++q) acc[q] = __fadd_rn(acc[q], p[q]);
}

__device__ __forceinline__ void wgmma_tf32_n128(float* d, u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_f16_n128(float* d, u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_tf32_n64(float* d, u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_f16_n64(float* d, u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

// one wgmma of 128 columns, k-step of 32 bytes
__device__ __forceinline__ void wgmma_k128(float* d, u64 da, u64 db, int scale_d) {
#if FMT == 0
    wgmma_tf32_n128(d, da, db, scale_d);
#else
    wgmma_f16_n128(d, da, db, scale_d);
#endif
}

// one wgmma of WG_NC columns (64 or 128), k-step of 32 bytes
__device__ __forceinline__ void wgmma_k(float* d, u64 da, u64 db, int scale_d) {
#if FMT == 0 && WG_NC == 128
    wgmma_tf32_n128(d, da, db, scale_d);
#elif FMT == 0
    wgmma_tf32_n64(d, da, db, scale_d);
#elif WG_NC == 128
    wgmma_f16_n128(d, da, db, scale_d);
#else
    wgmma_f16_n64(d, da, db, scale_d);
#endif
}

// The products of the stage at shared address `stage` (WG_ATOMS atoms of A rows 0..127, then B
// rows 0..WG_BN-1; MODE 0: then the lo parts of both) into warpgroup wg's accumulator (and MODE 0
// its correction accumulator `corr`). MODE 1: this stage's wgmma group stays in flight; on return
// the previous stage's has completed (its slot may be refilled). MODES 0, 3: on return all of this
// stage's products have completed and been added (its slot may be refilled).
__device__ __forceinline__ void wg_stage_products(float (&acc)[WG_CH][WG_NR], float (&corr)[WG_CH][WG_NR], u32 stage,
                                                  int wg, bool first) {
    // k-step ks: atom ks / 4, +32 bytes along k per step within it (+2 in the address field);
    // chunk ch of B: rows WG_NC ch ..; part 1: the lo parts
    auto desc_a = [&](int ks, int part = 0) {
        return sw128_desc(stage + (ks >> 2) * WG_ATOM_BYTES + part * WG_LO_BYTES + wg * WG_TILE_BYTES(64)) +
               2 * (ks & 3);
    };
    auto desc_b = [&](int ks, int ch, int part = 0) {
        return sw128_desc(stage + (ks >> 2) * WG_ATOM_BYTES + part * WG_LO_BYTES + WG_TILE_BYTES(WG_BM + WG_NC * ch)) +
               2 * (ks & 3);
    };
    (void)corr;
#if MODE == 1
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < WG_KSTEPS; ++ks)
#pragma unroll
        for (int ch = 0; ch < WG_CH; ++ch)
            wgmma_k(acc[ch], desc_a(ks), desc_b(ks, ch), (!first || ks > 0) ? 1 : 0);
    wg_commit();
    wg_wait<1>();   // the previous stage's group has completed; this one runs on
#else
    (void)first;
    float tmp[WG_TMP][WG_NR];   // products never outlive their stage (see the header: C7514)
#pragma unroll
    for (int p = 0; p < WG_PRODUCTS; ++p) {
        const int kc = p / WG_CH, ch = p % WG_CH;
        float* cur = tmp[p % WG_TMP];
        pin<WG_NR>(cur);
        wg_fence();
#pragma unroll
        for (int c = 0; c < WG_CHAIN; ++c) {
            const int ks = kc * WG_CHAIN + c;
            wgmma_k(cur, desc_a(ks), desc_b(ks, ch), c > 0 ? 1 : 0);
        }
#if MODE == 0
        // the k-step's correction, lo*hi with its first product and hi*lo with its second, all 128
        // columns accumulated inside the tensor core: it keeps the tensor core busy while the
        // hi*hi products are added (they are 2^-11 of the result: truncation is harmless there)
        if (ch == 0) wgmma_k128(&corr[0][0], desc_a(kc, 1), desc_b(kc, 0, 0), 1);
        else         wgmma_k128(&corr[0][0], desc_a(kc, 0), desc_b(kc, 0, 1), 1);
#endif
        wg_commit();
        pin<WG_NR>(cur);
#if WG_TMP == 2
        if (p > 0) {   // the previous product has completed: add it while this one runs
            wg_wait<1>();
            float* prev = tmp[(p + 1) % 2];
            pin<WG_NR>(prev);
            add_rn<WG_NR>(acc[(p - 1) % WG_CH], prev);
        }
#else
        wg_wait<0>();
        pin<WG_NR>(cur);
        add_rn<WG_NR>(acc[ch], cur);
#endif
    }
#if WG_TMP == 2
    wg_wait<0>();
    {
        float* last = tmp[(WG_PRODUCTS - 1) % 2];
        pin<WG_NR>(last);
        add_rn<WG_NR>(acc[(WG_PRODUCTS - 1) % WG_CH], last);
    }
#endif
#endif
}

// Finishes warpgroup wg's accumulator: correction, debias, scales, store (finish_frag).
__device__ __forceinline__ void wg_epilogue(float (&acc)[WG_CH][WG_NR], float (&corr)[WG_CH][WG_NR], int wg, int warp, int g, int t, i64 bz,
                                            i64 tm, i64 tn, float* __restrict__ C, i64 M, i64 N, i64 sc, i64 ldc,
                                            int epi, int vec, float corr_scale, float out_scale_a,
                                            float out_scale_b, const float* __restrict__ ccor, i64 ldcc, i64 scc,
                                            float debias_beta) {
    const i64 r0 = tm * WG_BM + wg * 64 + warp * 16;
#pragma unroll
    for (int ch = 0; ch < WG_CH; ++ch)
#pragma unroll
        for (int j = 0; j < WG_NC / 8; ++j)
            finish_frag(&acc[ch][4 * j], MODE == 0 ? &corr[ch][4 * j] : nullptr, ccor + bz * scc, ldcc, r0, g, tn * WG_BN + WG_NC * ch + j * 8 + 2 * t,
                        C + bz * sc, M, N, ldc, epi, vec, corr_scale, out_scale_a, out_scale_b, debias_beta);
}

__device__ __forceinline__ void wg_zero(float (&acc)[WG_CH][WG_NR]) {
#pragma unroll
    for (int ch = 0; ch < WG_CH; ++ch)
#pragma unroll
        for (int q = 0; q < WG_NR; ++q) acc[ch][q] = 0.0f;
}

#ifndef TCEC_NO_WG_CPASYNC
// Same arguments as tcec_gemm (a_lo and b_lo unused). Stages loaded by all threads with cp.async.
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
tcec_gemm_wg(const u32* __restrict__ a_hi, const u32* __restrict__ a_lo, const u32* __restrict__ b_hi,
             const u32* __restrict__ b_lo, float* __restrict__ C, i64 M, i64 N, i64 KW, i64 tiles_m,
             i64 tiles_n, i64 sa, i64 sb, i64 sc, i64 ldc, int epi, int vec, int raster, float corr_scale,
             float out_scale_a, float out_scale_b, const float* __restrict__ ccor, i64 ldcc, i64 scc,
             float debias_beta) {
    extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
    // the 128-byte swizzle repeats every 1024 bytes and is applied to address bits: align the base
    const u32 raw = (u32)__cvta_generic_to_shared(wg_smem_raw);
    const u32 sbase = (raw + 1023u) & ~1023u;
    unsigned char* smem = wg_smem_raw + (sbase - raw);

    i64 bz, tm, tn;
    tile_coords(tiles_m, tiles_n, raster, bz, tm, tn);

    const int tid = threadIdx.x;
    const int wg = tid >> 7;                    // warpgroup: rows 64 wg .. 64 wg + 63 of the tile
    const int lane = tid & 31, warp = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;

    const u32* gA = a_hi + bz * sa + tm * WG_BM * KW;
    const u32* gB = b_hi + bz * sb + tn * WG_BN * KW;

    auto load_stage = [&](int slot, i64 kt) {
#pragma unroll
        for (int at = 0; at < WG_ATOMS; ++at) {
            unsigned char* s = smem + slot * WG_STAGE_BYTES + at * WG_ATOM_BYTES;
            const i64 koff = kt * WG_BKW + 32 * at;
#pragma unroll
            for (int i = tid; i < (WG_BM + WG_BN) * 8; i += WG_THREADS) {
                const int r = i >> 3, c = i & 7;
                const u32* src = r < WG_BM ? gA + r * KW + koff + 4 * c : gB + (r - WG_BM) * KW + koff + 4 * c;
                cp_async16(reinterpret_cast<u32*>(s + r * 128 + ((c ^ (r & 7)) << 4)), src);
            }
        }
    };

    float acc[WG_CH][WG_NR];
    wg_zero(acc);

    const i64 KT = KW / WG_BKW;
#pragma unroll
    for (int s = 0; s < WG_AHEAD; ++s) {
        if (s < KT) load_stage(s, s);
        cp_commit();
    }

    for (i64 kt = 0; kt < KT; ++kt) {
        cp_wait<WG_AHEAD - 1>();
        fence_proxy_async();   // cp.async wrote through the generic proxy; wgmma reads through the async one
        __syncthreads();       // also: the products of the stage this step refills have completed
        {
            const i64 nk = kt + WG_AHEAD;
            if (nk < KT) load_stage((int)(nk % WG_STAGES), nk);
            cp_commit();
        }
        wg_stage_products(acc, acc, sbase + (u32)((kt % WG_STAGES) * WG_STAGE_BYTES), wg, kt == 0);
    }
    wg_wait<0>();
#pragma unroll
    for (int ch = 0; ch < WG_CH; ++ch) pin<WG_NR>(acc[ch]);
    cp_wait<0>();
    wg_epilogue(acc, acc, wg, warp, g, t, bz, tm, tn, C, M, N, sc, ldc, epi, vec, corr_scale, out_scale_a, out_scale_b,
                ccor, ldcc, scc, debias_beta);
}
#endif
