// The wgmma product of tcec_wgmma.cu with its stages loaded by the tensor memory accelerator
// (TMA, sm_90a). Appended to tcec.cu and tcec_wgmma.cu, whose products and epilogue it runs.
//
// Why: loaded by all threads with 16-byte cp.async, the plain product held both formats to the
// same ~4.4 TB/s of shared-memory fill (TF32 190 TFLOP/s on 128 x 256 tiles, FP16 365, and 141
// on 128 x 128 tiles), half of what cuBLAS reaches on the same workspaces. Here one thread of a
// ninth warp (the producer) loads each stage with two TMA copies per 32-word atom of k, already
// in the 128-byte swizzle the wgmma descriptors read, and the two consumer warpgroups never
// wait for each other. The producer is a warpgroup of its own (a ninth warp would put three warps
// on one scheduler and cap every thread at 168 registers); setmaxnreg hands its registers to the
// consumers.
//   full[s]   the producer arms it with the stage's byte count; the copies complete it;
//   empty[s]  each consumer warp arrives once the products that read slot s have completed
//             (MODE 1: one stage later, its group stays in flight; MODE 3: at the stage's end).
// The workspaces are described by tensor maps (dims: words of k, rows, batch; box: 32 words x 128
// rows of A, 32 x WG_BN rows of B), passed by value as kernel parameters: the hi parts, and for
// the fused error-corrected product (MODE 0) the lo parts.

#define TMA_THREADS (WG_THREADS + 128)   // two consumer warpgroups, then the producer's
#ifndef TMA_CONSUMER_REGS
#define TMA_CONSUMER_REGS 232            // setmaxnreg: 2 x 128 x 232 + 128 x 40 <= 65536
#endif
#define TMA_PRODUCER_REGS 40
#define TMA_CONSUMER_WARPS (WG_THREADS / 32)
#if MODE == 1
#define TMA_RELEASE_LAG 1   // a stage's slot is free once the next stage's products are issued
#else
#define TMA_RELEASE_LAG 0
#endif

// TensorMap, mbar_init / mbar_arm / mbar_arrive / mbar_wait, tma_load: gemm/cuda/pipeline.cuh

// Arguments as tcec_gemm_wg, with the workspaces as tensor maps; batch_a / batch_b: whether the
// operand has a batch of its own (else batch 0 serves every output batch).
extern "C" __global__ void __launch_bounds__(TMA_THREADS, 1)
tcec_gemm_tma(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
              const __grid_constant__ TensorMap map_a_lo, const __grid_constant__ TensorMap map_b_lo,
              float* __restrict__ C, i64 M, i64 N, i64 KW, i64 tiles_m, i64 tiles_n, int batch_a, int batch_b,
              i64 sc, i64 ldc, int epi, int vec, int raster, float corr_scale, float out_scale_a,
              float out_scale_b, const float* __restrict__ ccor, i64 ldcc, i64 scc, float debias_beta) {
    extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
    const u32 raw = (u32)__cvta_generic_to_shared(wg_smem_raw);
    const u32 sbase = (raw + 1023u) & ~1023u;   // the 128-byte swizzle repeats every 1024 bytes
    const u32 bars = sbase + WG_STAGES * WG_STAGE_BYTES;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (WG_STAGES + s); };

    i64 bz, tm, tn;
    tile_coords(tiles_m, tiles_n, raster, bz, tm, tn);
    const int tid = threadIdx.x;
    const int warp_id = tid >> 5, lane = tid & 31;
    const i64 KT = KW / WG_BKW;

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < WG_STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), TMA_CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp_id >= TMA_CONSUMER_WARPS) {   // producer warpgroup: one thread issues the copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(TMA_PRODUCER_REGS));
        if (warp_id == TMA_CONSUMER_WARPS && lane == 0) {
            const int za = batch_a ? (int)bz : 0, zb = batch_b ? (int)bz : 0;
            const int ra = (int)(tm * WG_BM), rb = (int)(tn * WG_BN);
            for (i64 kt = 0; kt < KT; ++kt) {
                const int s = (int)(kt % WG_STAGES);
                if (kt >= WG_STAGES) mbar_wait(empty(s), (u32)((kt / WG_STAGES - 1) & 1));
                mbar_arm(full(s), WG_STAGE_BYTES);
                const u32 dst = sbase + s * WG_STAGE_BYTES;
#pragma unroll
                for (int at = 0; at < WG_ATOMS; ++at) {
                    const int k0 = (int)(kt * WG_BKW) + 32 * at;
                    tma_load(dst + at * WG_ATOM_BYTES, &map_a, full(s), k0, ra, za);
                    tma_load(dst + at * WG_ATOM_BYTES + WG_TILE_BYTES(WG_BM), &map_b, full(s), k0, rb, zb);
#if MODE == 0
                    tma_load(dst + at * WG_ATOM_BYTES + WG_LO_BYTES, &map_a_lo, full(s), k0, ra, za);
                    tma_load(dst + at * WG_ATOM_BYTES + WG_LO_BYTES + WG_TILE_BYTES(WG_BM), &map_b_lo, full(s), k0,
                             rb, zb);
#endif
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(TMA_CONSUMER_REGS));
    const int wg = tid >> 7;
    const int warp = warp_id & 3, g = lane >> 2, t = lane & 3;
    float acc[WG_CH][WG_NR];
    wg_zero(acc);
#if MODE == 0
    float corr[WG_CH][WG_NR];
    wg_zero(corr);
#else
    float (&corr)[WG_CH][WG_NR] = acc;   // unused
#endif
    for (i64 kt = 0; kt < KT; ++kt) {
        const int s = (int)(kt % WG_STAGES);
        mbar_wait(full(s), (u32)((kt / WG_STAGES) & 1));
        wg_stage_products(acc, corr, sbase + s * WG_STAGE_BYTES, wg, kt == 0);
        if (kt >= TMA_RELEASE_LAG && lane == 0) mbar_arrive(empty((int)((kt - TMA_RELEASE_LAG) % WG_STAGES)));
    }
    wg_wait<0>();
#pragma unroll
    for (int ch = 0; ch < WG_CH; ++ch) {
        pin<WG_NR>(acc[ch]);
        pin<WG_NR>(corr[ch]);
    }
    wg_epilogue(acc, corr, wg, warp, g, t, bz, tm, tn, C, M, N, sc, ldc, epi, vec, corr_scale, out_scale_a, out_scale_b,
                ccor, ldcc, scc, debias_beta);
}
