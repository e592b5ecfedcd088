// The GPU pass of qsim_tc/observables.py: every X group of an observable in one launch.
//
// For each term t (X mask x of its group, Z mask z[t]) a launch computes, per state s of a
// block of states and per thread block, the partial sums
//
//     partial[s][blockIdx.x][t] = sum_b (-1)^popcount(b & z[t]) * part_t(conj(psi[b ^ x]) * psi[b])
//
// over the b of the tiles the thread block owns (part_t: the real part, or the imaginary part
// where the term has an odd number of Y); `block_sums` then adds the thread blocks' sums in a fixed order, so a
// result is the same from run to run (no atomics).
//
// The state is cut into tiles of 2^tb amplitudes (tb = min(TB, n)). The groups come sorted by x
// and cut into segments of equal high part d = x >> tb. For d = 0 every group's partner b ^ x
// lies in the tile itself. For d != 0 the partner tile q ^ d is staged once and serves every
// group of the segment; only the tiles whose bit `top` (the highest bit of d) is 0 take part,
// and the caller doubles those sums (the partner tile's products are their conjugates). So the
// state is read about once per distinct high part of the X masks, half of it each time, whatever
// the number of masks. Thread block j takes the tiles j, j + G, j + 2G, ... (G = gridDim.x, all
// resident): the thread blocks move through the state side by side, so for the high parts below
// about G the partner tiles are tiles the others have just read, in the L2 cache. To keep them
// side by side, a thread block counts its tiles done in progress[state] and, before its step j,
// waits until the thread blocks have done about j - lag steps between them (lag < 0: no
// waiting). The wait is bounded, so it paces and never deadlocks; the sums do not depend on it.
// (Visiting the tiles window by window instead, pairs of 16 MB windows meant to stay in L2, read
// 229 GB at 28 qubits, 53% L2 hits, and ran 3-7% slower on an H100: 0.5 TB/s, the pass is bound
// by its instructions and their latency, not by memory. Loading each segment's partner tile into
// registers during the segment before changed nothing either: 0.441 against 0.442 s.)
//
// Within a launch a group's terms come in keys: a key is a Z mask within the tile (z mod 2^tb)
// and a part, and the sign of b = base + i factors as parity(z_in & i) times parity((z >> tb) &
// q), the second the same over tile q. So the kernel makes one signed sum of a group's products
// per key and tile, and each of the key's terms adds it to its sum with its own sign above the
// tile (terms that differ only above the tile share the sum: 1,483 keys for 3,000 chemistry terms
// at 28 qubits, a pass 1.12-1.17x faster than one sum a term).
// Thread `tid` owns the amplitudes i = tid + k * THREADS of a tile, so the sign within the tile
// is parity(tid & z_in) times (-1)^popcount(k & (z_in >> LOG_THREADS)), and the sum over k of the
// signed products is a tree of K - 1 multiply-adds by +-1 (the sign factors bit by bit). A
// group's keys go in chunks of up to CHUNK (its last chunk as narrow as it can be: C = 1, 2, 4 or
// 8 keys); a chunk's per-thread sums are reduced across a warp in C - 1 + log2(32 / C) shuffles (a
// reduce-scatter: lane l ends with key l of the chunk) and staged in the warp's own slots in
// shared memory, with no barrier. The staged sums of consecutive keys finish their terms (one
// thread a term, the warps' slots in the order of warps) at the barriers the tiles need anyway,
// or where a run of staged keys breaks or fills its STAGE slots: a barrier for a few dozen keys,
// not one a chunk.
// complex128 walks its tiles and partner tiles as a list of items with the next one's copy
// (cp.async) in flight while the groups of this one run, in the other of two tile buffers, its own
// amplitudes in registers; complex64 keeps its own tile in shared memory and loads each partner
// tile as its turn comes (see group_pass). (cp.async: the kernel needs sm_80; observables.py
// keeps the array code on older GPUs.)
// Two thread blocks fit a multiprocessor (registers capped at 128, shared memory 2 x 32 KB tiles,
// 8 bytes a term, 4 a key, and 8 KB of staging slots).

#define THREADS 256
#define LOG_THREADS 8
#define WARPS (THREADS / 32)
#define CHUNK 8   // keys reduced together (lanes 0..CHUNK-1 end with one key each)
#define STAGE 64  // a warp's staged key sums between two flushes (twice: by flush parity)
#define PACE_SPINS 4096  // waits of about 256 ns at most before a tile (about 1 ms)
#define KEY_IM (1 << 30)  // a key's part bit: the imaginary parts (observables_gpu.KEY_IM)

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

// sum over k < K of (-1)^popcount(k & kz) w[k]: the sign factors bit by bit, so it is a tree of
// K - 1 fused multiply-adds by +-1 (level j pairs the partial sums that differ in bit j of k)
template <int K>
__device__ __forceinline__ double signed_sum(const double* w, int kz) {
    if constexpr (K == 1) {
        return w[0];
    } else {
        const double s = (kz & 1) ? -1.0 : 1.0;
        double u[K / 2];
#pragma unroll
        for (int k = 0; k < K / 2; ++k) u[k] = fma(s, w[2 * k + 1], w[2 * k]);
        return signed_sum<K / 2>(u, kz >> 1);
    }
}

// A warp's sums of keys u0 .. u0 + C - 1 (those below u_end) of one group over this thread block's
// tile: each thread's signed sum of its K products (wr, wi), reduced across the warp, lane l < C
// writing key u0 + l's to slot[l]. A key is a Z mask within the tile and a part (key bits 0..29
// and bit 30: see observables_gpu.launches); the sign of amplitude i = tid + k * THREADS is
// parity(tid & z) times parity(k & (z >> LOG_THREADS)). No barrier: the warps stage their sums
// apart and a flush adds them (flush_stage).
template <int C, int K>
__device__ __forceinline__ void chunk_sums(int u0, int u_end, const int* __restrict__ keys, const double* w,
                                           double* slot) {
    const int tid = threadIdx.x, lane = tid & 31;
    double v[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        v[c] = 0.0;
        if (u0 + c < u_end) {
            const int key = keys[u0 + c];  // (shared memory: one broadcast read)
            const int kz = (key >> LOG_THREADS) & (K - 1);  // the sign's bits over k
            const double s = signed_sum<K>(w, kz);  // (w: the part the key takes)
            v[c] = (__popc(tid & key & (THREADS - 1)) & 1) ? -s : s;
        }
    }
    // reduce-scatter: the stage of offset o leaves v[j] of lane l holding the sum of chunk key
    // j + (l & ~(2o - 1) & (C - 1)) over the lanes that differ from l in bits o .. C/2; then the
    // lanes that differ in the bits above add up: lane l < C ends with key l
    if constexpr (C >= 8) scatter_stage<4>(v, lane);
    if constexpr (C >= 4) scatter_stage<2>(v, lane);
    if constexpr (C >= 2) scatter_stage<1>(v, lane);
#pragma unroll
    for (int o = C; o < 32; o <<= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
    if (lane < C && u0 + lane < u_end) slot[lane] = v[0];
}

// After a barrier: the staged sums of keys first .. first + count - 1 (slot j: key first + j), all
// over tile fq, finish their terms: acc[t] += (-1)^popcount(zh[t] & fq) * (the warps' sums of its
// key's slot, in the order of warps), one thread a term; the next sums go to the other parity's
// slots (their last readers passed that barrier)
__device__ __forceinline__ void flush_stage(double (*stage)[WARPS][STAGE], int& parity, int& count, int first,
                                            long long fq, const int* __restrict__ u_t,
                                            const int* __restrict__ t_u, const long long* __restrict__ t_zh,
                                            double* acc) {
    const int t_end = u_t[first + count];
    for (int t = u_t[first] + threadIdx.x; t < t_end; t += THREADS) {
        const int j = t_u[t] - first;
        double sum = 0.0;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += stage[parity][w][j];
        acc[t] += (__popcll(t_zh[t] & fq) & 1) ? -sum : sum;  // in the order of tiles, segments, groups
    }
    parity ^= 1;
    count = 0;
}

// The pass's state in a thread block: its shared arrays and the staged run of key sums (keys
// first .. first + count - 1 of tile fq, in the slots of `parity`)
struct Pass {
    double* acc;                  // a sum per term (shared)
    const int* keys;              // u_key (shared)
    double (*stage)[WARPS][STAGE];
    const int* __restrict__ u_t;
    const int* __restrict__ t_u;
    const long long* __restrict__ t_zh;
    int parity, count, first;
    long long fq;

    __device__ __forceinline__ void flush() {
        if (count) flush_stage(stage, parity, count, first, fq, u_t, t_u, t_zh, acc);
    }
};

// A group's record (observables_gpu.Launch.group_records): its X mask (x, words 0 and 1), its first
// key and its first key that takes the imaginary parts (word 2, bits 0..15 and 16..31), the end of
// its keys (word 3). A group's keys of the real parts come first.
#define REC_KEY_BITS 16

// the products of a group: w[k] = the real (IM: the imaginary) part of conj(partner) * own for the
// thread's own amplitude i = tid + k * THREADS, mine[k] (HOLD) or own[i], with its partner
// src[i ^ xin] (NORM: x = 0, |psi_i|^2). The tiles' buffers are zero beyond a short tile, so no
// amplitude needs a bounds test.
template <typename V, int K, bool HOLD, bool NORM, bool IM>
__device__ __forceinline__ void products(const V* own, const V* src, const V* mine, int xin, double* w) {
    const int tid = threadIdx.x;
    const V* part = src + (tid ^ (xin & (THREADS - 1)));  // the partners' thread part, then k's
    const int xk = xin >> LOG_THREADS;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        V a;
        if constexpr (HOLD) a = mine[k];
        else a = own[tid + k * THREADS];
        if constexpr (NORM) {
            w[k] = fma((double)a.x, (double)a.x, (double)a.y * a.y);
        } else {
            const V c = part[(k ^ xk) * THREADS];
            if constexpr (IM) w[k] = fma((double)c.x, (double)a.y, -((double)c.y * a.x));
            else w[k] = fma((double)c.x, (double)a.x, (double)c.y * a.y);
        }
    }
}

// keys u0 .. u_end - 1 of a group over tile q, all of one part (its products w), staged chunk by
// chunk (CHUNK keys, the last as narrow as it can be: C = 1, 2, 4 or 8; a hopping term's group has
// 1 or 2 keys, its reduction 5 shuffles, not 8)
template <int K>
__device__ __forceinline__ void group_keys(int u0, int u_end, long long q, const double* w, double* slots0,
                                           double* slots1, Pass& ps) {
    static_assert(CHUNK == 8, "the chunks below are 8, 4, 2 or 1 keys wide");
    for (; u0 < u_end; u0 += CHUNK) {
        const int rest = u_end - u0;
        const int width = rest > 4 ? 8 : rest > 2 ? 4 : rest;
        // block-uniform: flush where the staged run would break or overflow
        if (ps.count && (u0 != ps.first + ps.count || ps.count + width > STAGE)) {
            __syncthreads();
            ps.flush();
        }
        if (!ps.count) {
            ps.first = u0;
            ps.fq = q;
        }
        double* slot = (ps.parity ? slots1 : slots0) + ps.count;
        if (width == 8) chunk_sums<8, K>(u0, u_end, ps.keys, w, slot);
        else if (width == 4) chunk_sums<4, K>(u0, u_end, ps.keys, w, slot);
        else if (width == 2) chunk_sums<2, K>(u0, u_end, ps.keys, w, slot);
        else chunk_sums<1, K>(u0, u_end, ps.keys, w, slot);
        ps.count += rest < CHUNK ? rest : CHUNK;
    }
}

// The groups g0 .. g1 - 1 (one segment) over tile q: each group's products of the thread's own
// amplitudes (mine[] held in registers, or own[] in shared memory) with their partners in src
// (the tile itself or the partner tile), the real parts for its first keys, then the imaginary
// parts for the rest (a group with both, rare: it reads its partners twice, and no thread holds
// both parts at once), each key's sum staged chunk by chunk. Each group's record is read while
// the one before runs (a uniform 16-byte load).
template <typename V, int TB, bool HOLD>
__device__ __forceinline__ void segment_groups(int g0, int g1, long long q, int tile, const V* own, const V* src,
                                               const V* mine, const int4* __restrict__ g_rec, Pass& ps) {
    constexpr int K = (1 << TB) / THREADS;
    double* slots0 = &ps.stage[0][threadIdx.x >> 5][0];
    double* slots1 = &ps.stage[1][threadIdx.x >> 5][0];
    int4 next = g0 < g1 ? __ldg(g_rec + g0) : int4{};
    for (int g = g0; g < g1; ++g) {
        const int4 r = next;
        if (g + 1 < g1) next = __ldg(g_rec + g + 1);
        const int xin = r.x & (tile - 1);
        const int u0 = r.z & ((1 << REC_KEY_BITS) - 1), u_im = (unsigned)r.z >> REC_KEY_BITS, u_end = r.w;
        double w[K];
        if ((r.x | r.y) == 0) {
            products<V, K, HOLD, true, false>(own, src, mine, xin, w);
            group_keys<K>(u0, u_end, q, w, slots0, slots1, ps);
            continue;
        }
        if (u0 < u_im) {
            products<V, K, HOLD, false, false>(own, src, mine, xin, w);
            group_keys<K>(u0, u_im, q, w, slots0, slots1, ps);
        }
        if (u_im < u_end) {
            products<V, K, HOLD, false, true>(own, src, mine, xin, w);
            group_keys<K>(u_im, u_end, q, w, slots0, slots1, ps);
        }
    }
}

// pace: wait (a bounded time: a hint, never a deadlock) until the thread blocks of this state have
// finished `step - lag` steps' worth of tiles between them (thread 0; a barrier follows)
__device__ __forceinline__ void pace(long long q, int lag, const unsigned* progress) {
    const long long step = q / gridDim.x;  // this thread block's step
    if (lag >= 0 && step > lag && threadIdx.x == 0) {
        const unsigned target = (unsigned)((step - lag) * gridDim.x);
        for (int spin = 0; spin < PACE_SPINS && *(volatile const unsigned*)progress < target; ++spin)
            __nanosleep(256);
    }
}

// a tile (2^tb amplitudes from src) into shared memory by asynchronous 16-byte copies, one commit
// group (plain copies where the tile is under 16 bytes: a state of one or two amplitudes)
template <typename V>
__device__ __forceinline__ void load_tile(V* dst, const V* src, long long tile) {
    const long long chunks = tile * (long long)sizeof(V) / 16;
    if (chunks) {
        for (long long c = threadIdx.x; c < chunks; c += THREADS)
            cp_async16(reinterpret_cast<char*>(dst) + 16 * c, reinterpret_cast<const char*>(src) + 16 * c);
    } else {
        for (long long i = threadIdx.x; i < tile; i += THREADS) dst[i] = src[i];
    }
    cp_commit();
}

// whether tile q takes a segment with d != 0 whose highest bit is `top`: of the tiles q and q ^ d,
// the one with that bit 0 owns the pairs (the same for all threads)
__device__ __forceinline__ bool takes_segment(long long q, int top) { return !((q >> top) & 1); }

// A segment's record (observables_gpu.Launch.segment_records): its high part d (words 0 and 1),
// the highest bit of d (word 2) and its first group (word 3); a last record holds the end of the
// groups in word 3
__device__ __forceinline__ long long rec_d(int4 r) { return ((long long)r.y << 32) | (unsigned)r.x; }

// the next item after (q, seg) of a thread block's walk: its segments with d != 0 whose tiles it
// takes, then the next tile's own item (seg = -1)
__device__ __forceinline__ void next_item(long long& q, int& seg, int n_segs, const int4* __restrict__ seg_rec) {
    for (++seg; seg < n_segs; ++seg) {
        const int4 r = __ldg(seg_rec + seg);
        if ((r.x | r.y) != 0 && takes_segment(q, r.z)) return;
    }
    q += gridDim.x;
    seg = -1;
}

template <typename V, int TB>
__device__ __forceinline__ void group_pass(const V* __restrict__ psi, int n_qubits, int n_segs,
                                           const int4* __restrict__ seg_rec, const int4* __restrict__ g_rec,
                                           int n_keys, const int* __restrict__ u_key, const int* __restrict__ u_t,
                                           const int* __restrict__ t_u, const long long* __restrict__ t_zh,
                                           int n_terms, double* __restrict__ partial, long long state0,
                                           unsigned* __restrict__ progress, int lag) {
    constexpr int K = (1 << TB) / THREADS;  // amplitudes a thread owns in a full tile
    // complex128 keeps a thread's own amplitudes in registers across the groups (one shared load
    // a product, the partner's); complex64's 16 would spill, so it reads both from shared memory
    constexpr bool HOLD = sizeof(V) == 16;
    extern __shared__ __align__(16) unsigned char shared_raw[];
    V* buf0 = reinterpret_cast<V*>(shared_raw);
    V* buf1 = buf0 + (1 << TB);
    double* acc = reinterpret_cast<double*>(buf1 + (1 << TB));
    int* keys = reinterpret_cast<int*>(acc + n_terms);
    __shared__ double stage[2][WARPS][STAGE];  // by flush parity: one barrier a flush

    const int tid = threadIdx.x;
    const int tb = n_qubits < TB ? n_qubits : TB;
    const int tile = 1 << tb;
    const long long size = 1LL << n_qubits;
    const long long tiles = size >> tb;
    const long long state = state0 + blockIdx.y;
    const V* s = psi + state * size;
    for (int t = tid; t < n_terms; t += THREADS) acc[t] = 0.0;
    for (int u = tid; u < n_keys; u += THREADS) keys[u] = u_key[u];
    // a short tile (a state under 2^TB amplitudes) leaves the buffers' rest zero: those amplitudes'
    // products are 0 (the copies write the first `tile` only)
    for (int i = tile + tid; i < (1 << TB); i += THREADS) buf0[i] = buf1[i] = V{};
    // the d = 0 segment (segment 0 where it exists): the groups whose partners lie in the tile
    const int4 seg0 = n_segs ? __ldg(seg_rec) : int4{};
    const bool has_d0 = n_segs && (seg0.x | seg0.y) == 0;
    Pass ps{acc, keys, stage, u_t, t_u, t_zh, 0, 0, 0, 0};
    V mine[HOLD ? K : 1];

    if constexpr (HOLD) {
        // The walk as a list of items, each a tile's worth of amplitudes in shared memory: a tile's
        // own amplitudes (copied to registers; they also serve its d = 0 segment), then the partner
        // tile of each segment it takes. The next item's copy is in flight while this one's groups
        // run, in the other buffer (28 qubits, H100: 0.394 -> 0.282 s against loading each tile as
        // its turn comes, where a pass with no partner loads at all took 0.260).
        long long q = blockIdx.x;
        int seg = -1, b = 0;
        if (q < tiles) load_tile(buf0, s + (q << tb), tile);
        while (q < tiles) {
            long long nq = q;
            int nseg = seg;
            next_item(nq, nseg, n_segs, seg_rec);
            V* cur = b ? buf1 : buf0;
            if (nq < tiles) {
                load_tile(b ? buf0 : buf1, s + ((nseg < 0 ? nq : nq ^ rec_d(__ldg(seg_rec + nseg))) << tb), tile);
                cp_wait<1>();
            } else {
                cp_wait<0>();
            }
            if (seg < 0) pace(q, lag, progress + state);
            __syncthreads();  // the item's copies have landed (every thread's), its last readers gone
            ps.flush();
            if (seg < 0) {
#pragma unroll
                for (int k = 0; k < K; ++k) mine[k] = cur[tid + k * THREADS];
            }
            // the own item runs the d = 0 segment, if any (its partners are in the tile itself)
            const int run = seg < 0 ? (has_d0 ? 0 : -1) : seg;
            if (run >= 0)
                segment_groups<V, TB, HOLD>(__ldg(seg_rec + run).w, __ldg(seg_rec + run + 1).w, q, tile, cur, cur,
                                            mine, g_rec, ps);
            if (nseg < 0 && tid == 0) atomicAdd(progress + state, 1u);  // (only paces: no data depends on it)
            __syncthreads();  // this item's readers are done before its buffer takes the item after next
            q = nq;
            seg = nseg;
            b ^= 1;
        }
    } else {
        // complex64: its 16 own amplitudes stay in shared memory (in registers they would spill),
        // beside one partner tile (a third tile for a copy in flight would leave one thread block an
        // SM; tiles of 2^11 amplitudes held in registers were 1.04x slower with the copy in flight
        // than these, 1.16x without: their keys' sums run over 8 amplitudes a thread, not 16)
        V* own = buf0;
        V* other = buf1;
        for (long long q = blockIdx.x; q < tiles; q += gridDim.x) {
            const long long base = q << tb;
            pace(q, lag, progress + state);
            __syncthreads();  // the last tile's readers are done, and its staged sums written
            ps.flush();
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const int i = tid + k * THREADS;
                if (i < tile) own[i] = s[base + i];
            }
            __syncthreads();
            for (int seg = 0; seg < n_segs; ++seg) {
                const int4 r = __ldg(seg_rec + seg);
                const long long d = rec_d(r);
                const V* src = own;
                if (d != 0) {
                    if (!takes_segment(q, r.z)) continue;
                    __syncthreads();  // the last segment's readers of `other` are done, its sums staged
                    ps.flush();
                    const long long pbase = (q ^ d) << tb;
#pragma unroll
                    for (int k = 0; k < K; ++k) {
                        const int i = tid + k * THREADS;
                        if (i < tile) other[i] = s[pbase + i];
                    }
                    __syncthreads();
                    src = other;
                }
                segment_groups<V, TB, HOLD>(r.w, __ldg(seg_rec + seg + 1).w, q, tile, own, src, mine, g_rec, ps);
            }
            if (tid == 0) atomicAdd(progress + state, 1u);  // (only paces: no data depends on it)
        }
    }
    __syncthreads();
    ps.flush();
    __syncthreads();
    double* out = partial + (state * gridDim.x + blockIdx.x) * (long long)n_terms;
    for (int t = tid; t < n_terms; t += THREADS) out[t] = acc[t];
}

#define GROUP_PASS(NAME, V, TB)                                                                              \
    extern "C" __global__ void __launch_bounds__(THREADS, 2)                                                 \
        NAME(const V* psi, int n_qubits, int n_segs, const int4* seg_rec, const int4* g_rec, int n_keys,   \
             const int* u_key, const int* u_t, const int* t_u, const long long* t_zh, int n_terms,         \
             double* partial, long long state0, unsigned* progress, int lag) {                            \
        group_pass<V, TB>(psi, n_qubits, n_segs, seg_rec, g_rec, n_keys, u_key, u_t, t_u, t_zh, n_terms,  \
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
