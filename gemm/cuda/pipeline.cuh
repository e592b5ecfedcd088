// Asynchronous-copy and warpgroup helpers shared by the kernels that stage operands through shared
// memory: cp.async (sm_80+), and on sm_90a the wgmma fences and descriptors, mbarriers and TMA
// copies. Prepended to a kernel source by gemm.cuda.compile (raw_module(headers=...) or
// with_headers()); functions a kernel does not call are not emitted, so a source built for
// sm_80 may include it.

typedef unsigned int u32;
typedef unsigned long long u64;

// ---------------------------------------------------------------- cp.async (sm_80+)

// The "memory" clobbers keep the compiler from moving shared-memory reads and writes across the
// copies and the wait (it sees only an address operand, not the shared memory the copy writes).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// ---------------------------------------------------------------- wgmma (sm_90a)

// Shared-memory matrix descriptor, K-major operand with 128-byte swizzle: start address >> 4,
// leading offset unused (1), stride between 8-row groups 1024 bytes, layout type 1 (bits 62-63).
__device__ __forceinline__ u64 sw128_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// cp.async and ordinary stores write through the generic proxy; wgmma reads through the async one
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---------------------------------------------------------------- mbarriers and TMA (sm_90a)

struct __align__(64) TensorMap {  // a CUtensorMap passed by value (gemm.cuda.tma)
    u64 opaque[16];
};

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arm(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred P;\nmbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, P;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}
// A box of the tensor map at (c0, c1, c2) into shared memory, completing on bar.
__device__ __forceinline__ void tma_load(u32 dst, const TensorMap* map, u32 bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}

