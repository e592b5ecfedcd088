// The GPU pass of qsim_tc/observables.py: every X group of an observable in one launch.
//
// For each term t (X mask x of its group, Z mask z[t]) a launch computes, per state s of a
// block of states and per thread block, the partial sums
//
//     partial[s][blockIdx.x][t] = sum_b (-1)^popcount(b & z[t]) * part_t(conj(psi[b ^ x]) * psi[b])
//
// over the b of the tiles the thread block owns (part_t: the real part, or the imaginary part
// where part_im[t]); `block_sums` then adds the thread blocks' sums in a fixed order, so a
// result is the same from run to run (no atomics).
//
// The state is cut into tiles of 2^tb amplitudes (tb = min(TB, n)). A thread block stages its
// tile in shared memory once; the groups come sorted by x and cut into segments of equal high
// part d = x >> tb. For d = 0 every group's partner b ^ x lies in the tile itself. For d != 0
// the partner tile q ^ d is staged once and serves every group of the segment; only the tiles
// whose bit `top` (the highest bit of d) is 0 take part, and the caller doubles those sums
// (the partner tile's products are their conjugates). So the state is read about once per
// distinct high part of the X masks, half of it each time, whatever the number of masks. Thread
// block j takes the tiles j, j + G, j + 2G, ... (G = gridDim.x, all resident): the thread blocks
// move through the state side by side, so for the high parts below about G the partner tiles are
// tiles the others have just read, in the L2 cache. To keep them side by side, a thread block
// counts its tiles done in progress[state] and, before its step j, waits until the thread blocks
// have done about j - lag steps between them (lag < 0: no waiting). The wait is bounded, so it
// paces and never deadlocks; the sums do not depend on it.
//
// Within a tile thread `tid` owns the amplitudes i = tid + k * THREADS, so the sign of b =
// base + i is parity((base | tid) & z) ^ parity(k & (z >> LOG_THREADS)): one popcount per term,
// and a bit mask over k. A group's terms go in chunks of up to CHUNK (its last chunk as narrow as
// it can be: C = 1, 2, 4, 8 or 16 terms); a chunk's per-thread sums are reduced across a warp in
// C - 1 + log2(32 / C) shuffles (a reduce-scatter: lane l ends with term l of the chunk), across
// the warps in shared memory, and added to the thread block's sums in shared memory (one thread a
// term).
// Two thread blocks fit a multiprocessor (registers capped at 128, shared memory 2 x 32 KB tiles
// and 8 bytes a term).

#define THREADS 256
#define LOG_THREADS 8
#define WARPS (THREADS / 32)
#define CHUNK 16  // terms reduced together (lanes 0..CHUNK-1 end with one term each)
#define PACE_SPINS 4096  // waits of about 256 ns at most before a tile (about 1 ms)

// one stage of the warp's reduce-scatter of a chunk's values: lanes with bit O clear keep the lower
// O values, the others the upper O, each added to its partner's (lane ^ O) copy of them
template <int O>
__device__ __forceinline__ void scatter_stage(double* v, int lane) {
    const bool upper = (lane & O) != 0;
#pragma unroll
    for (int j = 0; j < O; ++j) {
        const double send = upper ? v[j] : v[j + O];
        const double keep = upper ? v[j + O] : v[j];
        v[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

// Terms t0 .. t0 + C - 1 (those below t_end) of one group over this thread block's tile: each
// thread's signed sum of its K products (wr, wi), reduced across the warp and the warps, added to
// acc[t]. Block-wide (a barrier): every thread calls it with the same arguments but its own w.
template <int C, int K>
__device__ __forceinline__ void chunk_sums(int t0, int t_end, const long long* __restrict__ z,
                                           const int* __restrict__ part_im, long long base, const double* wr,
                                           const double* wi, double (*red)[WARPS][CHUNK], int& parity,
                                           double* acc) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    double v[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        v[c] = 0.0;
        if (t0 + c < t_end) {
            const long long zt = z[t0 + c];
            // bit k of `neg`: the sign of amplitude tid + k * THREADS is -1
            const int kz = (int)(zt >> LOG_THREADS) & (K - 1);
            unsigned neg = (__popcll((base | tid) & zt) & 1) ? (1u << K) - 1u : 0u;
#pragma unroll
            for (int j = 0; (1 << j) < K; ++j) {
                unsigned pattern = 0;  // the k with bit j set
#pragma unroll
                for (int k = 0; k < K; ++k) pattern |= ((k >> j) & 1u) << k;
                if ((kz >> j) & 1) neg ^= pattern;
            }
            const bool im = part_im[t0 + c] != 0;
            double sum = 0.0;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const double w = im ? wi[k] : wr[k];
                sum += ((neg >> k) & 1u) ? -w : w;
            }
            v[c] = sum;
        }
    }
    // reduce-scatter: the stage of offset o leaves v[j] of lane l holding the sum of chunk term
    // j + (l & ~(2o - 1) & (C - 1)) over the lanes that differ from l in bits o .. C/2; then the
    // lanes that differ in the bits above add up: lane l < C ends with term l
    if constexpr (C >= 16) scatter_stage<8>(v, lane);
    if constexpr (C >= 8) scatter_stage<4>(v, lane);
    if constexpr (C >= 4) scatter_stage<2>(v, lane);
    if constexpr (C >= 2) scatter_stage<1>(v, lane);
#pragma unroll
    for (int o = C; o < 32; o <<= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
    // red[parity] is free: its last readers (two chunks ago) passed the barrier of the chunk
    // since, before any thread got here
    if (lane < C) red[parity][warp][lane] = v[0];  // term t0 + lane
    __syncthreads();
    if (tid < C && t0 + tid < t_end) {
        double sum = 0.0;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[parity][w][tid];
        acc[t0 + tid] += sum;  // this thread's term, in the order of tiles, segments and groups
    }
    parity ^= 1;
}

template <typename V, int TB>
__device__ __forceinline__ void group_pass(const V* __restrict__ psi, int n_qubits, int n_segs,
                                           const long long* __restrict__ seg_d, const int* __restrict__ seg_top,
                                           const int* __restrict__ seg_g, const long long* __restrict__ g_x,
                                           const int* __restrict__ g_t, const long long* __restrict__ z,
                                           const int* __restrict__ part_im, int n_terms,
                                           double* __restrict__ partial, long long state0,
                                           unsigned* __restrict__ progress, int lag) {
    constexpr int K = (1 << TB) / THREADS;  // amplitudes a thread owns in a full tile
    extern __shared__ __align__(16) unsigned char shared_raw[];
    V* own = reinterpret_cast<V*>(shared_raw);
    V* other = own + (1 << TB);
    double* acc = reinterpret_cast<double*>(other + (1 << TB));
    __shared__ double red[2][WARPS][CHUNK];  // by chunk parity: one barrier a chunk

    const int tid = threadIdx.x;
    const int tb = n_qubits < TB ? n_qubits : TB;
    const long long tile = 1LL << tb;
    const long long size = 1LL << n_qubits;
    const long long tiles = size >> tb;
    const long long state = state0 + blockIdx.y;
    const V* s = psi + state * size;
    for (int t = tid; t < n_terms; t += THREADS) acc[t] = 0.0;
    int parity = 0;  // of the chunks so far

    for (long long q = blockIdx.x; q < tiles; q += gridDim.x) {
        const long long base = q << tb;
        const long long step = q / gridDim.x;  // this thread block's step
        if (lag >= 0 && step > lag && tid == 0) {
            // pace: wait (a bounded time: a hint, never a deadlock) until the thread blocks of
            // this state have finished `step - lag` steps' worth of tiles between them
            const unsigned target = (unsigned)((step - lag) * gridDim.x);
            for (int spin = 0; spin < PACE_SPINS && *(volatile unsigned*)(progress + state) < target; ++spin)
                __nanosleep(256);
        }
        __syncthreads();  // the last tile's readers are done
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int i = tid + k * THREADS;
            if (i < tile) own[i] = s[base + i];
        }
        __syncthreads();
        for (int seg = 0; seg < n_segs; ++seg) {
            const long long d = seg_d[seg];
            const V* src = own;
            if (d != 0) {
                if ((q >> seg_top[seg]) & 1) continue;  // the tile q ^ d owns the pair (same for all threads)
                __syncthreads();  // the last segment's readers of `other` are done
                const long long pbase = (q ^ d) << tb;
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    const int i = tid + k * THREADS;
                    if (i < tile) other[i] = s[pbase + i];
                }
                __syncthreads();
                src = other;
            }
            for (int g = seg_g[seg]; g < seg_g[seg + 1]; ++g) {
                const long long x = g_x[g];
                const int xin = (int)(x & (tile - 1));
                double wr[K], wi[K];
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    const int i = tid + k * THREADS;
                    wr[k] = wi[k] = 0.0;
                    if (i < tile) {
                        const V a = own[i];
                        if (x) {
                            const V c = src[i ^ xin];
                            wr[k] = (double)c.x * a.x + (double)c.y * a.y;
                            wi[k] = (double)c.x * a.y - (double)c.y * a.x;
                        } else {
                            wr[k] = (double)a.x * a.x + (double)a.y * a.y;
                        }
                    }
                }
                // full chunks of CHUNK terms, then the rest in the narrowest chunk that holds it
                // (a hopping term's group has 2 terms: its reduction costs 5 shuffles, not 16)
                const int t_end = g_t[g + 1];
                int t0 = g_t[g];
                for (; t_end - t0 >= CHUNK; t0 += CHUNK)
                    chunk_sums<CHUNK, K>(t0, t_end, z, part_im, base, wr, wi, red, parity, acc);
                const int rest = t_end - t0;
                if (rest > 8) chunk_sums<16, K>(t0, t_end, z, part_im, base, wr, wi, red, parity, acc);
                else if (rest > 4) chunk_sums<8, K>(t0, t_end, z, part_im, base, wr, wi, red, parity, acc);
                else if (rest > 2) chunk_sums<4, K>(t0, t_end, z, part_im, base, wr, wi, red, parity, acc);
                else if (rest == 2) chunk_sums<2, K>(t0, t_end, z, part_im, base, wr, wi, red, parity, acc);
                else if (rest == 1) chunk_sums<1, K>(t0, t_end, z, part_im, base, wr, wi, red, parity, acc);
            }
        }
        if (tid == 0) atomicAdd(progress + state, 1u);  // (only paces: no data depends on it)
    }
    __syncthreads();
    double* out = partial + (state * gridDim.x + blockIdx.x) * (long long)n_terms;
    for (int t = tid; t < n_terms; t += THREADS) out[t] = acc[t];
}

#define GROUP_PASS(NAME, V, TB)                                                                              \
    extern "C" __global__ void __launch_bounds__(THREADS, 2)                                                 \
        NAME(const V* psi, int n_qubits, int n_segs, const long long* seg_d, const int* seg_top,          \
             const int* seg_g, const long long* g_x, const int* g_t, const long long* z, const int* part_im, \
             int n_terms, double* partial, long long state0, unsigned* progress, int lag) {              \
        group_pass<V, TB>(psi, n_qubits, n_segs, seg_d, seg_top, seg_g, g_x, g_t, z, part_im, n_terms,     \
                          partial, state0, progress, lag);                                                \
    }

// tiles of 32 KB in either precision (TB: observables_gpu.TILE_BITS, which a CPU test holds equal)
GROUP_PASS(group_pass_c128, double2, 11)
GROUP_PASS(group_pass_c64, float2, 12)

// out[r] = sum over b of partial[(r / n_terms) * n_blocks + b][r % n_terms], b in ascending order:
// the thread blocks' sums of each (state, term) in a fixed order
extern "C" __global__ void block_sums(const double* __restrict__ partial, int n_blocks, int n_terms,
                                      long long n_out, double* __restrict__ out) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_out) return;
    const long long state = r / n_terms, t = r % n_terms;
    const double* p = partial + state * n_blocks * (long long)n_terms + t;
    double sum = 0.0;
    for (int b = 0; b < n_blocks; ++b) sum += p[(long long)b * n_terms];
    out[r] = sum;
}
