// One stage of a stage plan in one pass over the state (the program: stage_program.py).
//
// A block owns the 2^L amplitudes whose fixed slots (L..N-1) equal its block index: it loads
// them into shared memory, applies the stage's ops in order (a __syncthreads between ops) and
// writes them back. Blocks own disjoint amplitudes, so the pass is in place.
//
// Addresses: slot p of an index lives at storage bit slot_bits[p]. Slots 0..C-1 sit at storage
// bits 0..C-1 (the kept low bits), so local index i reads storage
//   base(block) + t1[(i >> C) & 63] + t2[i >> (C + 6)] + (i & (2^C - 1)),
// with t1, t2 (the storage offsets of local slots C..C+5 and C+6..L-1) tabulated per block in
// shared memory (two small tables rather than one of 2^(L-C) entries).
// The block index enumerates the fixed slots in the order of their storage bits (gslot/gbit,
// sorted by storage bit on the host), so neighbouring blocks touch neighbouring addresses and
// share cache lines in L2 when a low storage bit is not local.
//
// Compile-time constants: REAL (double or float), MAX_K (widest dense op here), MAX_DENSE (the
// record's width, stage_program.MAX_DENSE), MAX_GROUPS, THREADS, MIN_BLOCKS (the blocks an SM
// the registers must allow), PRE_MAX_K (1 or 2: the widest op that applies its pre-phase as it
// loads).

typedef REAL real;
struct cplx { real x, y; };

#define OP_DENSE 1
#define OP_PHASE 2
// record words (stage_program.py)
#define W_TYPE 0
#define W_K 1
#define W_CMASK 2
#define W_DATA 3
#define W_COUNT 4
#define W_PDATA 5
#define W_PCOUNT 6
#define W_SORTED 7
#define W_OFFS (W_SORTED + MAX_DENSE)
#define OP_WORDS (W_OFFS + (1 << MAX_DENSE))
#define SPLIT 6  // a phase group's tables: local bits 0..5, and 6..L-1

__device__ __forceinline__ cplx cmul(cplx a, cplx b) {
    return {a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x};
}

__device__ __forceinline__ cplx cfma(cplx a, cplx b, cplx acc) {  // acc + a * b
    acc.x = fma(a.x, b.x, fma(-a.y, b.y, acc.x));
    acc.y = fma(a.x, b.y, fma(a.y, b.x, acc.y));
    return acc;
}

// A block's view of a run of phase groups (stage_program.py): per group, whether its fixed bits
// meet its condition, its local condition, and exp(2 pi i * its linear part) tabulated over local
// bits 0..5 (lo, the group's constant folded in) and 6..L-1 (hi). An amplitude's factor is the
// product of lo * hi over the groups whose condition it meets: two table reads and complex
// products, where a sum of turns took 64-bit integer adds and a double sincospi an amplitude.
// On an H200 at 28 qubits: complex64 QFT 76.7 -> 46.2 ms, QuantumVolume 200 -> 171, brickwork
// 103 -> 93; complex128 QFT 75.7 -> 72.4, but its dense ops lost 8% (brickwork 166 -> 180, QV
// 264 -> 286; not understood: no spills, same 80 registers and three blocks an SM).
struct Phases {
    int n;  // groups (0: none)
    int per, lo_n;
    const int* active;
    const int* cond;
    const cplx* tab;

    // f = the amplitude's phase factor; false where no group applies (f untouched)
    __device__ __forceinline__ bool factor(int i, cplx& f) const {
        bool any = false;
        for (int g = 0; g < n; ++g) {
            const int c = cond[g];
            if (active[g] && (i & c) == c) {
                const cplx t = cmul(tab[g * per + (i & (lo_n - 1))], tab[g * per + lo_n + (i >> SPLIT)]);
                f = any ? cmul(f, t) : t;
                any = true;
            }
        }
        return any;
    }
};

// The 2^K amplitudes of each group (the target bits vary, the others are fixed) times the
// matrix (staged in shared memory by the caller). A thread holds one group in registers and
// writes each output row as it is done. Sorted targets and the amplitudes' offsets come from
// the record (tabulated on the host).
__device__ __forceinline__ cplx phase_of(unsigned long long turns);

// PRE: the op carries a pre-phase, applied as the amplitudes load (up to PRE_MAX_K targets; wider
// ops take it in a sweep of their own: with it inside, the register bound of MIN_BLOCKS made the
// kernel spill).
template <int K, bool PRE>
__device__ __forceinline__ void dense(cplx* sm, int L, const long long* rec, int lmask, const cplx* mat,
                                      const Phases& pre) {
    int ts[K], off[1 << K];
#pragma unroll
    for (int m = 0; m < K; ++m) ts[m] = (int)rec[W_SORTED + m];
#pragma unroll
    for (int j = 0; j < (1 << K); ++j) off[j] = (int)rec[W_OFFS + j];
    const int groups = 1 << (L - K);
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        int base = g;
#pragma unroll
        for (int m = 0; m < K; ++m) {  // a zero bit inserted at each target, lowest first
            const int below = base & ((1 << ts[m]) - 1);
            base = ((base >> ts[m]) << (ts[m] + 1)) | below;
        }
        if ((base & lmask) != lmask) continue;
        cplx v[1 << K];
#pragma unroll
        for (int j = 0; j < (1 << K); ++j) {
            v[j] = sm[base + off[j]];
            cplx f;
            if (PRE && pre.factor(base + off[j], f)) v[j] = cmul(v[j], f);
        }
#pragma unroll
        for (int r = 0; r < (1 << K); ++r) {
            cplx acc = {0, 0};
#pragma unroll
            for (int c = 0; c < (1 << K); ++c) acc = cfma(mat[r * (1 << K) + c], v[c], acc);
            sm[base + off[r]] = acc;
        }
    }
}

__device__ __forceinline__ cplx phase_of(unsigned long long turns) {
    // turns / 2^64 of a full turn = turns / 2^63 half turns
    const double half_turns = (double)(long long)turns * 1.0842021724855044e-19;  // 2^-63
    double sd, cd;
    sincospi(half_turns, &sd, &cd);
    return cplx{(real)cd, (real)sd};
}

// Fills the block's Phases for ``ng`` groups at ``grp`` (ends with __syncthreads, also when
// ng = 0, so that whatever the caller staged before it is visible). The tables are made from
// exact 64-bit turns, one sincospi an entry.
__device__ Phases prepare_phases(const long long* __restrict__ grp, int ng, int L, long long xblk,
                                 const int* __restrict__ coef_slot, const unsigned long long* __restrict__ coef_turn,
                                 int* s_active, int* s_cond, unsigned long long* s_const, cplx* s_tab) {
    const long long lmask_all = (1LL << L) - 1;
    const int lo_n = 1 << min(SPLIT, L), hi_n = 1 << max(L - SPLIT, 0), per = lo_n + hi_n;
    if (threadIdx.x < ng) {
        const long long* gr = grp + threadIdx.x * 4;
        const long long cond = gr[0], gcond = cond & ~lmask_all;
        unsigned long long c0 = (unsigned long long)gr[1];
        for (int t = (int)gr[2]; t < (int)(gr[2] + gr[3]); ++t)  // linear bits among the fixed ones
            if (coef_slot[t] >= L && ((xblk >> coef_slot[t]) & 1)) c0 += coef_turn[t];
        s_active[threadIdx.x] = (xblk & gcond) == gcond;
        s_cond[threadIdx.x] = (int)(cond & lmask_all);
        s_const[threadIdx.x] = c0;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ng * per; e += blockDim.x) {  // the local linear parts, tabulated
        const int g = e / per, v = e % per;
        const bool lo = v < lo_n;
        const int bits = lo ? v : (v - lo_n) << SPLIT;
        const long long* gr = grp + g * 4;
        unsigned long long acc = lo ? s_const[g] : 0;  // the constant rides in the lo table
        for (int t = (int)gr[2]; t < (int)(gr[2] + gr[3]); ++t) {
            const int p = coef_slot[t];
            if (p < L && (lo ? p < SPLIT : p >= SPLIT) && ((bits >> p) & 1)) acc += coef_turn[t];
        }
        s_tab[g * per + v] = phase_of(acc);
    }
    __syncthreads();
    return Phases{ng, per, lo_n, s_active, s_cond, s_tab};
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
stage_kernel(cplx* __restrict__ state, int n, int L, int C, const int* __restrict__ slot_bits,
             const int* __restrict__ gslot, const int* __restrict__ gbit, const long long* __restrict__ ops,
             int n_ops, const cplx* __restrict__ mats, const long long* __restrict__ groups,
             const int* __restrict__ coef_slot, const unsigned long long* __restrict__ coef_turn) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    cplx* sm = reinterpret_cast<cplx*>(smem_raw);
    const int h1 = min(6, L - C), h2 = L - C - h1;
    long long* t1 = reinterpret_cast<long long*>(sm + (1 << L));
    long long* t2 = t1 + (1 << h1);
    // [4^MAX_K], after an even number of table entries (16-byte aligned for the vector loads)
    cplx* s_mat = reinterpret_cast<cplx*>(t2 + (1 << h2) + (h2 == 0 ? 1 : 0));
    cplx* s_tab = s_mat + (1 << (2 * MAX_K));  // [MAX_GROUPS][lo_n + hi_n] of prepare_phases
    __shared__ int s_active[MAX_GROUPS], s_cond[MAX_GROUPS];
    __shared__ unsigned long long s_const[MAX_GROUPS];

    const long long b = blockIdx.x;
    long long base = 0, xblk = 0;  // storage offset and slot index of the block's fixed bits
    for (int j = 0; j < n - L; ++j) {
        if ((b >> j) & 1) {
            base |= 1LL << gbit[j];
            xblk |= 1LL << gslot[j];
        }
    }
    for (int h = threadIdx.x; h < (1 << h1) + (1 << h2); h += blockDim.x) {
        const bool first = h < (1 << h1);
        const int v = first ? h : h - (1 << h1), from = first ? C : C + h1, bits = first ? h1 : h2;
        long long o = 0;
        for (int j = 0; j < bits; ++j)
            if ((v >> j) & 1) o |= 1LL << slot_bits[from + j];
        (first ? t1 : t2)[v] = o;
    }
    __syncthreads();
    const int low = (1 << C) - 1, m1 = (1 << h1) - 1;
#pragma unroll 8
    for (int i = threadIdx.x; i < (1 << L); i += blockDim.x)
        sm[i] = state[base + t1[(i >> C) & m1] + t2[i >> (C + h1)] + (i & low)];
    __syncthreads();

    const long long lmask_all = (1LL << L) - 1;
    for (int o = 0; o < n_ops; ++o) {
        const long long* rec = ops + (long long)o * OP_WORDS;
        const long long type = rec[W_TYPE];
        if (type == OP_DENSE) {
            const long long cmask = rec[W_CMASK];
            const long long gmask = cmask & ~lmask_all;
            if ((xblk & gmask) != gmask) continue;  // a fixed control is 0: the same for the whole block
            const int k = (int)rec[W_K];
            const cplx* mat = mats + rec[W_DATA];
            for (int e = threadIdx.x; e < (1 << (2 * k)); e += blockDim.x) s_mat[e] = mat[e];
            // the diagonal run before this op, applied as the op loads its amplitudes
            const Phases pre = prepare_phases(groups + rec[W_PDATA] * 4, (int)rec[W_PCOUNT], L, xblk, coef_slot,
                                              coef_turn, s_active, s_cond, s_const, s_tab);
            const int lmask = (int)(cmask & lmask_all);
            if (pre.n && k <= PRE_MAX_K) {
                if (k == 1) dense<1, true>(sm, L, rec, lmask, s_mat, pre);
#if PRE_MAX_K >= 2
                else dense<2, true>(sm, L, rec, lmask, s_mat, pre);
#endif
            } else {
                if (pre.n) {  // wider ops take their pre-phase in a sweep of its own (registers)
                    for (int i = threadIdx.x; i < (1 << L); i += blockDim.x) {
                        cplx f;
                        if ((i & lmask) == lmask && pre.factor(i, f)) sm[i] = cmul(sm[i], f);
                    }
                    __syncthreads();
                }
                switch (k) {
                    case 1: dense<1, false>(sm, L, rec, lmask, s_mat, pre); break;
                    case 2: dense<2, false>(sm, L, rec, lmask, s_mat, pre); break;
                    case 3: dense<3, false>(sm, L, rec, lmask, s_mat, pre); break;
#if MAX_K >= 4
                    case 4: dense<4, false>(sm, L, rec, lmask, s_mat, pre); break;
#endif
                }
            }
        } else {  // OP_PHASE
            const Phases ph = prepare_phases(groups + rec[W_DATA] * 4, (int)rec[W_COUNT], L, xblk, coef_slot,
                                             coef_turn, s_active, s_cond, s_const, s_tab);
            for (int i = threadIdx.x; i < (1 << L); i += blockDim.x) {
                cplx f;
                if (ph.factor(i, f)) sm[i] = cmul(sm[i], f);
            }
        }
        __syncthreads();
    }
#pragma unroll 8
    for (int i = threadIdx.x; i < (1 << L); i += blockDim.x)
        state[base + t1[(i >> C) & m1] + t2[i >> (C + h1)] + (i & low)] = sm[i];
}
