// One stage of a stage plan in one pass over the state (the program: stage_program.py).
//
// A block owns the 2^L amplitudes whose fixed slots (L..N-1) equal its block index: it loads
// them into shared memory, applies the stage's ops in order (a __syncthreads between ops) and
// writes them back. Blocks own disjoint amplitudes, so the pass is in place.
//
// Addresses: slot p of an index lives at storage bit slot_bits[p] (slots 0..C-1, the kept low
// bits, at storage bits 0..C-1). A thread's loads and stores step its index by THREADS (or twice
// that, two amplitudes a copy), so the index's bits below LOG_THREADS are the same in all of
// them: local index i reads storage
//   base(block) + lo + hi[i >> LOG_THREADS],
// lo the thread's offset of those low bits (made once) and hi the block's table of the high
// bits' offsets (2^(L - LOG_THREADS) entries in shared memory): one broadcast read an amplitude.
// (Two tables over slots C..C+5 and C+6..L-1 had cost two reads and the index arithmetic an
// amplitude, and a larger prologue.)
// The block index enumerates the fixed slots in the order of their storage bits (gslot/gbit,
// sorted by storage bit on the host), so neighbouring blocks touch neighbouring addresses and
// share cache lines in L2 when a low storage bit is not local.
//
// Compile-time constants: REAL (double or float), MAX_K (widest dense op here), MAX_DENSE (the
// record's width, stage_program.MAX_DENSE), MAX_GROUPS, THREADS, MIN_BLOCKS (the blocks an SM
// the registers must allow), PRE_MAX_K (1 or 2: the widest op that applies its pre-phase as it
// loads), STAGE_MMA (1: dense ops of 2 and 3 qubits on the tensor cores, FP64 for complex128 and
// FP16 with an exact leading product for complex64 (TcA), with the chunk swizzled in shared memory;
// 0: FMA loops, no swizzle), STAGE_PHASES (0: no phase groups).

typedef REAL real;
struct cplx { real x, y; };
// STATE_C64 (with REAL double): the state in global memory is complex64, the chunk in shared
// memory complex128. A complex64 state runs the complex128 programs (tensor-core ops, pairs,
// rotating low bits), widened as it loads and rounded as it stores (stage_kernel.py: WIDE).
#ifndef STATE_C64
#define STATE_C64 0
#endif
#if STATE_C64
struct scplx { float x, y; };
#define WIDE_L_MAX 12  // the widening keeps half a chunk in registers: 2^(L-1) / THREADS <= 8
#else
typedef cplx scplx;
#endif

#define OP_DENSE 1
#define OP_PHASE 2
// record words (stage_program.py)
#define W_TYPE 0
#define W_K 1
#define W_CMASK 2
#define W_DATA 3
#define W_PCOUNT 4
#define W_MMA 5
#define W_COUNT 6
#define W_PDATA 7
#define W_SORTED 8
#define W_OFFS (W_SORTED + MAX_DENSE)
#define W_G (W_OFFS + (1 << MAX_DENSE))
#define W_FIXED (W_G + 3)
// the tensor-core op's address constants (stage_program._mma_constants), laid out by the host for
// MMA_WARPS warps
#define W_MC (W_FIXED + 1)
#define MC_STEP 0
#define MC_WBASE 1
#define MC_IN (MC_WBASE + MMA_WARPS)
#define MC_OFF (MC_IN + 8)
#define MC_OUT (MC_OFF + 8)
#define MC_OUT1 (MC_OUT + 4)
#define MC_WORDS (MC_OUT1 + 4)
// a pair record (W_MMA = MMA_PAIR): the second op's matrix offset and store constants
#define MMA_PAIR 2
#define W_PAIR (W_MC + MC_WORDS)
#define P_ROW 1
#define P_COL (P_ROW + 8)
#define P_COL1 (P_COL + 4)
#define PAIR_WORDS (P_COL1 + 4)
#define OP_WORDS (W_PAIR + PAIR_WORDS + (W_PAIR + PAIR_WORDS) % 2)

#ifndef STAGE_MMA
#define STAGE_MMA 0
#endif
// STAGE_PHASES 0: a stage without phase groups (no phase op, no pre-phase; the host picks the
// kernel per stage). The phase code is compiled out, so the dense ops' code does not move with
// it: a change to the tables alone cost quantum volume's tensor-core stages 1-2.5% on an H200.
#ifndef STAGE_PHASES
#define STAGE_PHASES 1
#endif
// Where local index i lives in shared memory. With STAGE_MMA the low three bits (the 16-byte slot
// among the eight of a 128-byte bank row) are XORed with a fold of the higher bits, three at a
// time: flipping index bit t moves an amplitude's bank slot by bit t % 3, so eight amplitudes
// whose indices differ in three bits of distinct residues mod 3 fill all 32 banks. The host picks
// each tensor-core op's lane layout so (stage_program._mma_layout).
__device__ __forceinline__ int swz(int i) {
#if STAGE_MMA
    return i ^ (((i >> 3) ^ (i >> 6) ^ (i >> 9) ^ (i >> 12) ^ (i >> 15)) & 7);
#else
    return i;
#endif
}
#define LMAX 16  // the widest chunk (stage_kernel.py refuses more local qubits)
#define LOG_THREADS 8  // THREADS = 256 (stage_kernel.py)


// The chunk streams through: evict-first loads and stores (ld/st.global.cs) keep the L1 for the
// op records and matrices that every block reads again.
template <typename T> struct vec2;
template <> struct vec2<double> { typedef double2 type; };
template <> struct vec2<float> { typedef float2 type; };
__device__ __forceinline__ cplx load_stream(const cplx* p) {
    const typename vec2<real>::type v = __ldcs(reinterpret_cast<const typename vec2<real>::type*>(p));
    return cplx{v.x, v.y};
}
__device__ __forceinline__ void store_stream(cplx* p, cplx c) {
    typename vec2<real>::type v;
    v.x = c.x;
    v.y = c.y;
    __stcs(reinterpret_cast<typename vec2<real>::type*>(p), v);
}

// The block's chunk into shared memory with asynchronous copies (cp.async, L2 only): all of a
// thread's copies are in flight at once, with no registers to hold them (loads through registers,
// eight a batch, had left a quantum-volume stage waiting on memory for a fifth of its time,
// ncu on an H200). 16 bytes a copy: one complex128 amplitude, or two complex64 ones where the
// low storage bit is kept (C >= 1: neighbours in both places; complex64 has no swizzle).
__device__ __forceinline__ void copy16(void* dst, const void* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void copy8(void* dst, const void* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
}
// The storage offset of local index bits below LOG_THREADS (and below L) of x.
__device__ __forceinline__ long long low_offset(int x, int L, const int* __restrict__ slot_bits) {
    long long o = 0;
    for (int j = 0; j < min(L, LOG_THREADS); ++j)
        if ((x >> j) & 1) o |= 1LL << slot_bits[j];
    return o;
}

// lo1, lo2: the thread's offsets (low_offset) for loops stepping by THREADS from threadIdx.x, and
// by 2 THREADS from 2 threadIdx.x
__device__ __forceinline__ void load_chunk(cplx* sm, const scplx* state, int L, int C, const long long* hi,
                                           long long lo1, long long lo2) {
#if STATE_C64
    // complex64 amplitudes, two a copy (C >= 1: the host's rule), into the chunk buffer's upper
    // half (8 bytes x 2^L), then widened to their complex128 places. Those of the lower half of
    // the chunk go below the staged copy; the upper half's places overlap it, so they go through
    // registers between two barriers.
    float2* st = reinterpret_cast<float2*>(sm + (1 << (L - 1)));
    for (int i = 2 * threadIdx.x; i < (1 << L); i += 2 * blockDim.x)
        copy16(st + i, state + lo2 + hi[i >> LOG_THREADS]);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    const int half = 1 << (L - 1);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float2 v = st[i];
        sm[swz(i)] = cplx{(double)v.x, (double)v.y};
    }
    constexpr int UPPER = (1 << (WIDE_L_MAX - 1)) / THREADS;
    float2 v[UPPER];
#pragma unroll
    for (int k = 0; k < UPPER; ++k) {
        const int i = half + threadIdx.x + k * THREADS;
        if (i < (1 << L)) v[k] = st[i];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < UPPER; ++k) {
        const int i = half + threadIdx.x + k * THREADS;
        if (i < (1 << L)) sm[swz(i)] = cplx{(double)v[k].x, (double)v[k].y};
    }
#else
    if (sizeof(cplx) == 16) {
        for (int i = threadIdx.x; i < (1 << L); i += blockDim.x)
            copy16(sm + swz(i), state + lo1 + hi[i >> LOG_THREADS]);
    } else if (C >= 1 && !STAGE_MMA) {
        for (int i = 2 * threadIdx.x; i < (1 << L); i += 2 * blockDim.x)
            copy16(sm + i, state + lo2 + hi[i >> LOG_THREADS]);
    } else {  // complex64 with the swizzle (tensor-core ops): neighbours may trade places, 8 bytes a copy
        for (int i = threadIdx.x; i < (1 << L); i += blockDim.x)
            copy8(sm + swz(i), state + lo1 + hi[i >> LOG_THREADS]);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// i with bit p exchanged for bit q, for each low slot p whose partner q (0: none) sits in bits
// 5p .. 5p + 4 of x
__device__ __forceinline__ int exchanged(int i, int x) {
    for (int p = 0; x; ++p, x >>= 5) {
        const int q = x & 31;
        if (q) {
            const int f = ((i >> p) ^ (i >> q)) & 1;
            i ^= (f << p) | (f << q);
        }
    }
    return i;
}

__device__ __forceinline__ cplx cmul(cplx a, cplx b) {
    return {a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x};
}

__device__ __forceinline__ cplx cfma(cplx a, cplx b, cplx acc) {  // acc + a * b
    acc.x = fma(a.x, b.x, fma(-a.y, b.y, acc.x));
    acc.y = fma(a.x, b.y, fma(a.y, b.x, acc.y));
    return acc;
}

// The bits of x at the set bits of m, packed from bit 0 up (a software pext).
__device__ __forceinline__ int gather_bits(int x, int m) {
    int r = 0;
    for (int j = 0; m; ++j, m &= m - 1) r |= ((x >> (__ffs(m) - 1)) & 1) << j;
    return r;
}

// x's low bits placed at the set bits of m, from bit 0 up (a software pdep). A loop over groups
// or tiles steps such an index in place: with d = deposit(step, m), the index of t + step is
// ((x | ~m) + d) & m (the 1s carry across the bits outside m), three instructions where
// inserting a zero bit at each target had cost three a target (ncu on an H200: shifts and logic
// were half of a quantum-volume stage's instructions).
__device__ __forceinline__ int deposit(int x, int m) {
    int r = 0;
    for (; m; m &= m - 1, x >>= 1)
        if (x & 1) r |= m & -m;
    return r;
}

// A block's view of a run of phase groups (stage_program.py), as two tables. The run's phase is
// sum over groups g with cond_g in x of (const_g + sum of coef_p over set bits p of x). Split the
// local bits at s: the part of each group's linear sum on bits below s (with the constant) is a
// function of x's bits below s and of the condition bits at or above s (C_hi), tabulated as F;
// the part on bits at or above s, of the condition bits below s (C_lo, low index bits) and those
// bits, as G. An amplitude's factor is F[.] * G[.]: two table reads and one complex product
// whatever the number of groups (each group a pair of tables and a product had cost a QFT stage's pre-phase about
// 120 instructions an amplitude at three groups, ncu on an H200). The block picks the s that
// makes the tables smallest. Condition bits that every group has are tested instead (need), so a
// lone group of any condition fits; the host keeps each run's tables within
// stage_program.phase_table_entries (the s_tab the launch allots).
struct Phases {
    int n;  // live groups (0: none)
    int need;  // the condition bits every live group has: no factor where one is 0
    int s, c_lo, c_hi, f_n, L;  // split, other condition bits below / at or above it, F's entries, L
    const cplx* tab;  // F [f_n], then G
    // per 2^LOG_THREADS-step h of a sweep (h << LOG_THREADS: the index bits a thread's amplitudes
    // differ in): F and G indices and the swizzled address of those bits (x, y, z)
    const int4* hx;

    // the amplitude i's entry of F, and of G. Both are ORs of functions of disjoint bit sets of
    // i, as is swz with XOR: an index split into a thread's low bits and a step's high bits
    // takes each part's value once (sweep)
    __device__ __forceinline__ int f_index(int i) const {
        return (i & ((1 << s) - 1)) | (gather_bits(i, c_hi) << s);
    }
    __device__ __forceinline__ int g_index(int i) const {
        // (G's condition bits are its low index bits: they vary within a warp, the bits from s up
        // seldom; the other order put a warp's reads 2^(L - s) entries apart, on one bank)
        return gather_bits(i, c_lo) | ((i >> s) << __popc(c_lo));
    }
    // the factor of F entry fi and G entry gi
    __device__ __forceinline__ cplx at(int fi, int gi) const { return cmul(tab[fi], tab[f_n + gi]); }
    // Every amplitude of the chunk whose index covers lmask times its factor. A thread's indices
    // are t + h THREADS: its own bits' table indices and address are made once, each step's read
    // from hx (one broadcast load), so an amplitude costs two ORs and an XOR where the bit
    // gathers and the swizzle had cost it dozens of instructions.
    __device__ __forceinline__ void sweep(cplx* sm, int lmask) const {
        if (n == 0) return;
        each<false>(sm, lmask, [&](int, int a, cplx v) { sm[a] = v; });
    }
    // put(h, address, value) for the amplitudes of thread t (index t + h THREADS, at that shared
    // address): times its factor where the index covers lmask; ALL: the others too, unchanged
    template <bool ALL, class Put>
    __device__ __forceinline__ void each(const cplx* sm, int lmask, Put put) const {
        const int t = threadIdx.x;
        const int fi = f_index(t), gi = g_index(t), st = swz(t), miss = (need | lmask) & ~t;
        for (int h = 0; t + (h << LOG_THREADS) < (1 << L); ++h) {
            const bool covers = !(miss & ~(h << LOG_THREADS));
            if (!ALL && !covers) continue;
            const int4 e = hx[h];
            const int a = st ^ e.z;
            const cplx v = sm[a];
            put(h, a, covers ? cmul(v, at(fi | e.x, gi | e.y)) : v);
        }
    }
};

// An op record's head: words 0-5 (type, k, cmask, data, pcount, mma), in three 16-byte loads
// issued together (volatile: not sunk behind the branches on them, where word by word they had
// made a chain of dependent loads an op). Loading the next op's head before the closing barrier
// instead gained nothing (H200, 28 qubits: complex128 QV 191.4 / 191.1 ms, complex64 146.7 /
// 142.0, against loading it here: other blocks hide the latency) and spilled complex64.
struct Head {
    longlong2 w01, w23, w45;
};
__device__ __forceinline__ longlong2 load_pair(const long long* p) {  // p: 16-byte aligned
    longlong2 v;
    asm volatile("ld.global.nc.v2.s64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ Head load_head(const long long* rec) {
    static_assert(W_TYPE == 0 && W_K == 1 && W_CMASK == 2 && W_DATA == 3 && W_PCOUNT == 4 && W_MMA == 5 &&
                  OP_WORDS % 2 == 0, "record head layout");
    return Head{load_pair(rec), load_pair(rec + 2), load_pair(rec + 4)};
}

// One row of an op's matrix (shared memory, 16-byte aligned) times a group's amplitudes.
// complex64 reads two entries a load (LDS.128), one load for four FMAs: H200, 28 qubits, against
// an entry a load, quantum volume 143.6 -> 142.7 ms, brickwork(28, 2, 20) 82.0 -> 80.9
// (stage_tf32_ab_h200.json).
template <int K>
__device__ __forceinline__ cplx row_times(const cplx* row, const cplx (&v)[1 << K]) {
    cplx acc = {0, 0};
    if constexpr (sizeof(cplx) == 8) {
#pragma unroll
        for (int c = 0; c < (1 << K); c += 2) {
            const float4 m = *reinterpret_cast<const float4*>(row + c);
            acc = cfma(cplx{m.x, m.y}, v[c], acc);
            acc = cfma(cplx{m.z, m.w}, v[c + 1], acc);
        }
    } else {
#pragma unroll
        for (int c = 0; c < (1 << K); ++c) acc = cfma(row[c], v[c], acc);
    }
    return acc;
}

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
    // the swizzle is linear over XOR and a group's base and its offsets have disjoint bits:
    // swz(base + off) = swz(base) ^ swz(off), the second part once an op
    int off[1 << K], soff[1 << K], tmask = 0;
    // the pre-phase's table indices split the same way: a group's base and its offsets (once an
    // op, F's and G's packed in one register: both below 2^16). The complex64 FMA build spills 40
    // bytes with it (56 with the last phase op applied at the store), and is faster still: QFT-28
    // 27.7 -> 26.1 ms on an H200, results bit-identical (stage_phase_sweep_ab_h200.json)
    int fgoff[PRE ? 1 << K : 1];
#pragma unroll
    for (int j = 0; j < (1 << K); ++j) {
        off[j] = (int)rec[W_OFFS + j];
        soff[j] = swz(off[j]);
        if constexpr (PRE) fgoff[j] = pre.f_index(off[j]) | (pre.g_index(off[j]) << 16);
    }
#pragma unroll
    for (int m = 0; m < K; ++m) tmask |= 1 << (int)rec[W_SORTED + m];
    const int free = ((1 << L) - 1) & ~tmask, groups = 1 << (L - K);
    const int step = deposit(blockDim.x, free);
    int base = deposit(threadIdx.x, free);
    for (int g = threadIdx.x; g < groups; g += blockDim.x, base = ((base | ~free) + step) & free) {
        if ((base & lmask) != lmask) continue;
        const int sb = swz(base);
        cplx v[1 << K];
        int fb = 0, gb = 0, miss = 0;
        if constexpr (PRE) fb = pre.f_index(base), gb = pre.g_index(base), miss = pre.need & ~base;
#pragma unroll
        for (int j = 0; j < (1 << K); ++j) {
            v[j] = sm[sb ^ soff[j]];
            if constexpr (PRE) {
                if (!(miss & ~off[j])) v[j] = cmul(v[j], pre.at(fb | (fgoff[j] & 0xffff), gb | (fgoff[j] >> 16)));
            }
        }
#pragma unroll
        for (int r = 0; r < (1 << K); ++r) sm[sb ^ soff[r]] = row_times<K>(mat + r * (1 << K), v);
    }
}

#if STAGE_MMA
// D = A B + C on the FP64 tensor cores, in the sm_90 shapes m16n8k8 and m16n8k16 (A 16 x k
// row-major, B k x 8, C and D 16 x 8): on an H200 they run at 66.5 TFLOP/s where m8n8k4 (the
// sm_80 shape, which the op used to take eight of a tile) runs at 33.2. A lane (g, t) = (lane / 4,
// lane % 4) holds A[g + 8 (i % 2)][t + 4 (i / 2)] as a[i], B[t + 4 i][g] as b[i] and D[g + 8 (i / 2)]
// [2 t + i % 2] as d[i] (layouts checked against numpy on the GPU).
__device__ __forceinline__ void mma_k16(const double (&a)[8], const double (&b)[4], double (&d)[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7, %8, %9, %10, %11}, "
        "{%12, %13, %14, %15}, {%0, %1, %2, %3};"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]),
          "d"(b[1]), "d"(b[2]), "d"(b[3]));
}
__device__ __forceinline__ void mma_k8(const double (&a)[4], const double (&b)[2], double (&d)[4]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}

// A dense op of K = 2 or 3 targets on the tensor cores. The complex product out = M in of each
// group is the real one [Re out; Im out] = [[Re M, -Im M], [Im M, Re M]] [Re in; Im in], and a
// warp takes eight groups at a time as the eight columns of B: lane (g, t) loads amplitude t (and,
// K = 3, t + 4) of group g, and ends holding output amplitude g of groups 2t and 2t + 1, real
// parts in D's rows g, imaginary parts in rows g + 8. K = 3: one m16n8k16 a tile (A is the real
// 16 x 16 form of M). K = 2: one m16n8k8 (A's rows 0-3 and 8-11 the real 8 x 8 form, the others
// zero: the same tensor time as the two m8n8k4 it replaces, and no shuffle), and lanes g < 4
// store. The group bits G0 (varies within a quarter-warp's loads) and G1, G2 (within its stores)
// and the target order come from the host (stage_program._mma_layout), so that a quarter-warp's
// eight 16-byte accesses meet the swizzle in eight distinct bank slots. Every lane reads its
// amplitudes before the warp's mma, and writes after it: the in-place update is safe within a
// warp, and warps own disjoint groups.
// No pre-phase form: an op's pre-phase is applied in a sweep of its own first. Applied as the
// lanes load (tried on an H200, stage_blocks_h200.json), it gained nothing on QFT-28 (51.0 ms both
// ways) and its 20-byte spill under the 80-register bound cost QuantumVolume 262.7 -> 266.7 ms.
// Lane (g, t)'s A fragment of a 3-qubit op's real 16 x 16 form [[Re M, -Im M], [Im M, Re M]]
// (m16n8k16): rows g, g + 8 (output g, Re and Im), columns Re, Im of inputs t and t + 4
__device__ __forceinline__ void a_fragment(const cplx* mat, int g, int t, double (&a)[8]) {
    const cplx m0 = mat[g * 8 + t], m1 = mat[g * 8 + 4 + t];
    a[0] = m0.x; a[1] = m0.y; a[2] = -m0.y; a[3] = m0.x;  // columns Re, Im of input t
    a[4] = m1.x; a[5] = m1.y; a[6] = -m1.y; a[7] = m1.x;  // columns Re, Im of input t + 4
}

// The product of one tile (eight groups) on the tensor cores, per precision. Lane (g, t) gives
// input amplitudes t and t + 4 of group g (x0, x1; K = 2: x0 only) and gets D (d[0], d[2]: output
// g of group 2t, Re and Im; d[1], d[3]: of group 2t + 1); PAIR: the second op applied to D first.
template <int K, bool PAIR, typename R> struct TileOp;

// complex128: FP64 mma, one m16n8k16 (K = 3) or m16n8k8 (K = 2) an op
template <int K, bool PAIR> struct TileOp<K, PAIR, double> {
    double a[K == 3 ? 8 : 4];
    // PAIR (K = 3, no controls): a second op, on the first's group bits, applied to the first's
    // results in registers (stage_program._pair_record): D's (d0, d2), (d1, d3) are its B's x0, x1
    double a2[PAIR ? 8 : 1];
    __device__ __forceinline__ TileOp(const cplx* mat, const cplx* mat2, const double2*, const double2*, int g, int t) {
        if constexpr (K == 3) {
            a_fragment(mat, g, t, a);
        } else {
            const cplx m = mat[(g & 3) * 4 + t];
            const bool row = g < 4;  // rows 4-7 and 12-15 of A are zero
            a[0] = row ? m.x : 0.0; a[1] = row ? m.y : 0.0; a[2] = row ? -m.y : 0.0; a[3] = row ? m.x : 0.0;
        }
        if constexpr (PAIR) a_fragment(mat2, g, t, a2);
    }
    __device__ __forceinline__ void apply(cplx x0, cplx x1, double (&d)[4]) const {
        d[0] = d[1] = d[2] = d[3] = 0;
        if constexpr (K == 3) {
            const double b[4] = {x0.x, x0.y, x1.x, x1.y};
            mma_k16(a, b, d);
            if constexpr (PAIR) {
                const double b2[4] = {d[0], d[2], d[1], d[3]};
                d[0] = d[1] = d[2] = d[3] = 0;
                mma_k16(a2, b2, d);
            }
        } else {
            const double b[2] = {x0.x, x0.y};
            mma_k8(a, b, d);
        }
    }
};

// complex64: FP16 tensor cores with an exact leading product (qsim_tc/stages/tc32.py emulates it).
// The operands are cut on power-of-two grids:
// - a group's amplitudes, scaled by the power of two that brings the largest real part (exponent
//   E) just below 2^15, become hi + lo with hi on the grid 2^4 (an integer of at most 11 bits times
//   it: an FP16 value) and lo = x - hi (exact),
//   rounded to FP16 as lo1, with lo2 = FP16(lo - lo1); the grid is shared by the group's 16
//   real values (two shuffles find E);
// - a matrix value (from its complex128 value, scaled by 2^3) of a row (an output's Re or Im part)
//   whose largest has exponent e becomes a1 on
//   the grid 2^(e - 8) (at most 9 bits), a2 = FP16((a - a1) 2^11) and a3 = FP16(the rest 2^22);
// - a1 * hi sums 16 (8 for a 2-qubit op) products of integers below 2^9 and 2^11 on one grid: below
//   2^24 units, so the tensor core's sum is exact (no truncation, no bias, nothing to debias);
// - the corrections a2 hi, a1 2^11 lo1, a1 2^11 lo2, a2 lo1 and a3 hi (all in units of 2^-11) accumulate
//   on the tensor core, truncated near 2^-34 of the result; one FMA adds them, one product unscales.
// A real inner dimension of 16 (K = 3) is one m16n8k16 (lane (g, t) holds inputs t and t + 4 of
// its group, as the FP64 shape), of 8 (K = 2) one m16n8k8.
__device__ __forceinline__ unsigned short f16_rn_d(double x) {
    unsigned short r;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(r) : "d"(x));
    return r;
}
__device__ __forceinline__ float f16_value(unsigned short h) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}
// two FP32 values as one FP16 pair register: ``first`` in the low half (the lower k index)
__device__ __forceinline__ unsigned f16x2(float first, float second) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));
    return r;
}
// one instruction d += A B: FP16 m16n8k16 (a: 4 pair words, b: 2) or m16n8k8 (a: 2, b: 1)
template <int NA> __device__ __forceinline__ void f16_mma(float (&d)[4], const unsigned (&a)[NA], const unsigned* b) {
    if constexpr (NA == 4) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    }
}
#define TC_SA 8.0  // the matrix's scale 2^3: a1 2^11 stays below FP16's largest value
// the largest of v over the four lanes of a quarter-warp (lanes 4g .. 4g + 3: one group, or one
// row of the matrix); for the non-negative floats' bits (or high words of doubles) v is an
// exponent first, so its maximum carries the largest exponent
__device__ __forceinline__ unsigned quad_max(unsigned v) {
    v = max(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return max(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
template <int K> struct TcA {
    static constexpr int NA = K == 3 ? 4 : 2;  // A words of the instruction
    static constexpr int NV = 2 * NA;  // values a lane holds: rows g (NA) and g + 8 (NA)
    unsigned a1[NA], a1s[NA], a2[NA], a3[NA];
    // lane (g, t)'s values of the real form [[Re M, -Im M], [Im M, Re M]] (rows Re out g, Im out g;
    // columns Re, Im of each input adjacent: word 2j row g, word 2j + 1 row g + 8, input t + 4 j)
    __device__ __forceinline__ void make(const double2* mat, int g, int t) {
        const bool live = K == 3 || g < 4;  // K = 2: rows 4-7 and 12-15 of A are zero
        const int row = K == 3 ? g * 8 : (g & 3) * 4;
        double v[NA][2];
        unsigned top = 0;  // the high word of the largest |value| (its exponent: the row's, Re and Im alike)
#pragma unroll
        for (int j = 0; j < NA / 2; ++j) {
            const double2 m = live ? mat[row + 4 * j + t] : make_double2(0.0, 0.0);
            v[2 * j][0] = m.x * TC_SA; v[2 * j][1] = -m.y * TC_SA;  // row g: Re, Im of the input
            v[2 * j + 1][0] = m.y * TC_SA; v[2 * j + 1][1] = m.x * TC_SA;  // row g + 8
            top = max(top, max((unsigned)(__double_as_longlong(v[2 * j][0]) >> 32) & 0x7fffffffu,
                               (unsigned)(__double_as_longlong(v[2 * j][1]) >> 32) & 0x7fffffffu));
        }
        top = quad_max(top);
        // the grid 2^(e - 8) for the row's largest exponent e: the magic number 1.5 2^(e - 8 + 52)
        const long long ef = max((int)(top >> 20), 1023 - 900);  // (biased; a zero row: a fine grid)
        const double c = __longlong_as_double((ef + 44) << 52 | (1LL << 51));
#pragma unroll
        for (int w = 0; w < NA; ++w) {
            unsigned short p1[2], p1s[2], p2[2], p3[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const double x = v[w][h];
                const double hi = __dsub_rn(__dadd_rn(x, c), c);
                const double r = (x - hi) * 2048.0;  // exact
                p1[h] = f16_rn_d(hi);
                p1s[h] = f16_rn_d(hi * 2048.0);
                p2[h] = f16_rn_d(r);
                p3[h] = f16_rn_d(r - (double)f16_value(p2[h]));
            }
            a1[w] = p1[0] | ((unsigned)p1[1] << 16);
            a1s[w] = p1s[0] | ((unsigned)p1s[1] << 16);
            a2[w] = p2[0] | ((unsigned)p2[1] << 16);
            a3[w] = p3[0] | ((unsigned)p3[1] << 16);
        }
    }
    // d = M x for the lane's inputs x[j] = (Re, Im) of input t + 4 j (j < 2 for K = 3). Each group
    // is scaled by the power of two 2^(14 - E) that brings its largest real part (exponent E, found
    // over the group's four lanes) just below 2^15, so its grid 2^4 is fixed and no amplitude is too
    // small for FP16; D's columns (groups 2t, 2t + 1) are unscaled with their groups' factors.
    __device__ __forceinline__ void times(const float (&x)[2][2], float (&d)[4]) const {
        constexpr int J = K == 3 ? 2 : 1;
        unsigned m = 0;
#pragma unroll
        for (int j = 0; j < J; ++j)
            m = max(m, max(__float_as_uint(x[j][0]) & 0x7fffffffu, __float_as_uint(x[j][1]) & 0x7fffffffu));
        const int e = min(max((int)(quad_max(m) >> 23), 20), 254);  // (biased; tiny groups keep 2^-107)
        const float up = __int_as_float((268 - e) << 23);  // 2^(14 - E)
        const float down = __int_as_float((e - 17) << 23);  // 2^(E - 17) = 1 / (up TC_SA)
        const float c = 201326592.0f;  // 1.5 2^27: the grid 2^4 of values below 2^15
        unsigned bh[J], bl[J], bl2[J];
#pragma unroll
        for (int j = 0; j < J; ++j) {
            // x up is exact (a power of two), so one fma rounds it onto the grid and one more gives
            // lo = x up - hi exactly: three instructions a value
            const float h0 = __fsub_rn(__fmaf_rn(x[j][0], up, c), c), h1 = __fsub_rn(__fmaf_rn(x[j][1], up, c), c);
            bh[j] = f16x2(h0, h1);  // exact: at most 11 bits on the grid
            const float l0 = __fmaf_rn(x[j][0], up, -h0), l1 = __fmaf_rn(x[j][1], up, -h1);  // exact
            bl[j] = f16x2(l0, l1);
            // what FP16 left of lo (below 2^-8: rounded to within 2^-20, about 2^-34 of the group's
            // largest part); its product with a1s = a1 2^11 is in the corrections' units
            bl2[j] = f16x2(__fsub_rn(l0, f16_value((unsigned short)(bl[j] & 0xffffu))),
                           __fsub_rn(l1, f16_value((unsigned short)(bl[j] >> 16))));
        }
        float hh[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cor[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        f16_mma<NA>(hh, a1, bh);
        f16_mma<NA>(cor, a2, bh);
        f16_mma<NA>(cor, a1s, bl);
        f16_mma<NA>(cor, a1s, bl2);
        f16_mma<NA>(cor, a2, bl);
        f16_mma<NA>(cor, a3, bh);
        const int t = threadIdx.x & 3;
        const float d0 = __shfl_sync(0xffffffffu, down, 8 * t), d1 = __shfl_sync(0xffffffffu, down, 8 * t + 4);
#pragma unroll
        for (int q = 0; q < 4; ++q) d[q] = __fmul_rn(__fmaf_rn(cor[q], 4.8828125e-4f, hh[q]), q & 1 ? d1 : d0);
    }
};
template <int K, bool PAIR> struct TileOp<K, PAIR, float> {
    TcA<K> a;
    TcA<PAIR ? 3 : 2> a2;  // (unused without PAIR)
    // (the matrices from the complex128 pool: wmat, wmat2)
    __device__ __forceinline__ TileOp(const cplx*, const cplx*, const double2* wmat, const double2* wmat2, int g,
                                      int t) {
        a.make(wmat, g, t);
        if constexpr (PAIR) a2.make(wmat2, g, t);
    }
    __device__ __forceinline__ void apply(cplx x0, cplx x1, float (&d)[4]) const {
        const float x[2][2] = {{x0.x, x0.y}, {x1.x, x1.y}};
        a.times(x, d);
        if constexpr (PAIR) {
            const float x2[2][2] = {{d[0], d[2]}, {d[1], d[3]}};
            a2.times(x2, d);
        }
    }
};

template <int K, bool PAIR = false>
__device__ __forceinline__ void dense_mma(cplx* sm, int L, const long long* rec, int lmask, const cplx* mat,
                                          const double2* wmat, const cplx* mat2 = nullptr,
                                          const double2* wmat2 = nullptr) {
    static_assert(THREADS == 32 * MMA_WARPS, "the host lays the address constants out for MMA_WARPS warps");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const long long* mc = rec + W_MC;
    // B's rows t, t + 4, t + 8, t + 12 are Re, Im of input amplitude t and Re, Im of t + 4: a
    // lane's two loads land as its B registers (rows in the order Re t, Re t + 4, Im t,
    // Im t + 4 had cost six register moves a tile)
    const TileOp<K, PAIR, real> op(mat, mat2, wmat, wmat2, g, t);
    // Addresses: the host tabulates a warp's first tile base, the step between its tiles, and
    // the swizzled lane parts (stage_program._mma_constants); an access is swz(base) XOR a lane
    // constant. Made here, with bit loops, the constants had cost each warp as many instructions
    // an op as its tile loop (ncu on an H200: 367 -> 290 million instructions a 3-qubit op at 28
    // qubits, 0.57 -> 0.43 ms).
    const int free = ((1 << L) - 1) & ~(int)rec[W_FIXED];  // not a target or group bit: numbers the tiles
    const int step = (int)mc[MC_STEP], s_in = (int)mc[MC_IN + g];
    const int o = K == 3 ? g : (g & 3);  // the output amplitude a lane writes
    const int k_in = s_in ^ (int)mc[MC_OFF + t], k_in4 = s_in ^ (int)mc[MC_OFF + 4 + t];
    const long long* pc = rec + W_PAIR;
    const int k_out = PAIR ? (int)pc[P_COL + t] ^ (int)pc[P_ROW + g] : (int)mc[MC_OUT + t] ^ (int)mc[MC_OFF + o];
    const int k_out1 = PAIR ? (int)pc[P_COL1 + t] ^ (int)pc[P_ROW + g] : (int)mc[MC_OUT1 + t] ^ (int)mc[MC_OFF + o];
    const bool stores = K == 3 || g < 4;
    const int tiles = 1 << (L - K - 3);
    int rest = (int)mc[MC_WBASE + warp];
    // (a warp's tiles two or four a step, their loads, mma and stores each issued together,
    // measured 3-6% slower: stage_mma_consts_h200.json)
    for (int tile = warp; tile < tiles; tile += MMA_WARPS, rest = ((rest | ~free) + step) & free) {
        const int sr = swz(rest);
        const cplx x0 = sm[sr ^ k_in];
        const cplx x1 = K == 3 ? sm[sr ^ k_in4] : x0;
        real d[4];
        op.apply(x0, x1, d);
        bool s0 = stores, s1 = stores;
        if (lmask) {  // local controls: only the groups whose control bits are 1
            const int b0 = rest | (((t & 1) << (int)rec[W_G + 1]) | ((t >> 1) << (int)rec[W_G + 2]));
            s0 = s0 && (b0 & lmask) == lmask;
            s1 = s1 && ((b0 | (1 << (int)rec[W_G])) & lmask) == lmask;
        }
        if (s0) sm[sr ^ k_out] = cplx{d[0], d[2]};
        if (s1) sm[sr ^ k_out1] = cplx{d[1], d[3]};
    }
}
#endif

__device__ __forceinline__ cplx phase_of(unsigned long long turns) {
    // turns / 2^64 of a full turn = turns / 2^63 half turns
    const double half_turns = (double)(long long)turns * 1.0842021724855044e-19;  // 2^-63
    double sd, cd;
    sincospi(half_turns, &sd, &cd);
    return cplx{(real)cd, (real)sd};
}

// The entries of the tables F and G (struct Phases) at split s for condition bits cond.
__device__ __forceinline__ int table_entries(int L, int s, int cond) {
    return (1 << (s + __popc(cond >> s))) + (1 << (L - s + __popc(cond & ((1 << s) - 1))));
}

// Fills the block's Phases for ``ng`` groups at ``grp`` (ends with __syncthreads, also when
// ng = 0, so that whatever the caller staged before it is visible). The tables are made from
// exact 64-bit turns, one sincospi an entry. A coefficient counts only where the block's fixed
// bits hold its gate (coef_gate: a mask of global slots); a group whose fixed bits miss its
// condition is dropped. The coefficients are first summed per group and local bit (s_eff) by
// all threads at once, so an entry adds at most L sums: a group of a QFT stage holds a hundred
// coefficients, which one thread a group (for the constant) and every entry (for its bits) had
// walked through serially, about 2 ms an op at 28 qubits. s_eff and s_cadd (the fixed linear
// bits' sums) are zero on entry and left zero (the kernel zeroes them once), which saves the
// barrier that zeroing them here would need: two barriers a run.
__device__ Phases prepare_phases(const long long* __restrict__ grp, int ng, int L, long long xblk,
                                 const int* __restrict__ coef_slot, const unsigned long long* __restrict__ coef_turn,
                                 const long long* __restrict__ coef_gate, int* s_cond,
                                 unsigned long long* s_cadd, unsigned long long* s_eff, cplx* s_tab,
                                 int4* s_hx) {
    if (!STAGE_PHASES || ng == 0) {  // one barrier (for what the caller staged), not the tables' two
        __syncthreads();
        return Phases{0, 0, 0, 0, 0, 0, L, s_tab, s_hx};
    }
    const long long lmask_all = (1LL << L) - 1;
    if (threadIdx.x < ng) {
        const long long* gr = grp + threadIdx.x * 4;
        const long long cond = gr[0], gcond = cond & ~lmask_all;
        // -1: the fixed bits miss the condition (no local index meets it)
        s_cond[threadIdx.x] = (xblk & gcond) == gcond ? (int)(cond & lmask_all) : -1;
    }
    // a run's coefficients are contiguous, group after group (stage_program._Pools): one pass
    // over all of them, so their loads are in flight together
    const int t0 = (int)grp[2], t1 = (int)(grp[(ng - 1) * 4 + 2] + grp[(ng - 1) * 4 + 3]);
    for (int t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
        const int p = coef_slot[t];
        const long long gate = coef_gate[t];
        if ((xblk & gate) != gate) continue;
        int g = 0;
        while (g + 1 < ng && t >= (int)grp[(g + 1) * 4 + 2]) ++g;
        if (p < L) atomicAdd(&s_eff[g * LMAX + p], coef_turn[t]);
        else if ((xblk >> p) & 1) atomicAdd(&s_cadd[g], coef_turn[t]);  // a fixed linear bit
    }
    __syncthreads();
    int need = -1, cond = 0, live = 0;  // the bits all live conditions share, the others' union
    for (int g = 0; g < ng; ++g)
        if (s_cond[g] >= 0) need &= s_cond[g], ++live;
    for (int g = 0; g < ng; ++g)
        if (s_cond[g] >= 0) cond |= s_cond[g] & ~need;
    int s = 0;
    for (int t = 1; t <= L; ++t)
        if (table_entries(L, t, cond) < table_entries(L, s, cond)) s = t;
    const int c_lo = cond & ((1 << s) - 1), c_hi = cond & ~((1 << s) - 1);
    const int f_n = 1 << (s + __popc(c_hi)), n_all = f_n + (1 << (L - s + __popc(c_lo)));
    const Phases ph{live, need, s, c_lo, c_hi, f_n, L, s_tab, s_hx};
    for (int e = threadIdx.x; e < n_all * (live > 0); e += blockDim.x) {
        const bool in_f = e < f_n;
        int x;  // the local index bits the entry fixes (its part, and the condition bits of the other)
        if (in_f) {
            x = (e & ((1 << s) - 1)) | deposit(e >> s, c_hi);
        } else {
            const int v = e - f_n;
            x = ((v >> __popc(c_lo)) << s) | deposit(v, c_lo);
        }
        const int part = in_f ? (1 << s) - 1 : ~((1 << s) - 1);  // the linear bits this table holds
        unsigned long long acc = 0;
        for (int g = 0; g < ng; ++g) {
            const int c = s_cond[g] & ~need;  // (need: tested per amplitude)
            if (s_cond[g] < 0 || (x & c) != c) continue;
            if (in_f) acc += (unsigned long long)grp[g * 4 + 1] + s_cadd[g];
            for (int m = x & part & ((1 << L) - 1); m; m &= m - 1) acc += s_eff[g * LMAX + __ffs(m) - 1];
        }
        s_tab[e] = phase_of(acc);
    }
    for (int h = threadIdx.x; h < (1 << max(L - LOG_THREADS, 0)) * (live > 0); h += blockDim.x) {
        const int x = h << LOG_THREADS;
        s_hx[h] = make_int4(ph.f_index(x), ph.g_index(x), swz(x), 0);
    }
    __syncthreads();
    // zero again for the next run (read no more; the op's closing barrier orders it before them)
    for (int e = threadIdx.x; e < ng * (LMAX + 1); e += blockDim.x) (e < ng ? s_cadd[e] : s_eff[e - ng]) = 0;
    return ph;
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
stage_kernel(scplx* __restrict__ state, int n, int L, int C, const int* __restrict__ slot_bits,
             const int* __restrict__ gslot, const int* __restrict__ gbit, const long long* __restrict__ ops,
             int n_ops, const cplx* __restrict__ mats, const double2* __restrict__ wmats,
             const long long* __restrict__ groups,
             const int* __restrict__ coef_slot, const unsigned long long* __restrict__ coef_turn,
             const long long* __restrict__ coef_gate, int store_x, int fresh) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    cplx* sm = reinterpret_cast<cplx*>(smem_raw);
    static_assert(THREADS == 1 << LOG_THREADS, "LOG_THREADS");
    const int hb = max(L - LOG_THREADS, 0);
    long long* hi = reinterpret_cast<long long*>(sm + (1 << L));
    // [4^MAX_K], after an even number of table entries (16-byte aligned for the vector loads)
    cplx* s_mat = reinterpret_cast<cplx*>(hi + max(1 << hb, 2));
    // the sweeps' step table (Phases::hx, 2^(L - LOG_THREADS) entries), then the phase tables F, G
    int4* s_hx = reinterpret_cast<int4*>(s_mat + (1 << (2 * MAX_K)));
    cplx* s_tab = reinterpret_cast<cplx*>(s_hx + (1 << hb));
    __shared__ int s_cond[MAX_GROUPS];
    __shared__ unsigned long long s_cadd[MAX_GROUPS], s_eff[MAX_GROUPS * LMAX];
    for (int e = threadIdx.x; e < MAX_GROUPS * (LMAX + 1); e += blockDim.x) (e < MAX_GROUPS ? s_cadd[e] : s_eff[e - MAX_GROUPS]) = 0;

    // A block a chunk, three blocks an SM. (Persistent blocks, three an SM taking chunks
    // blockIdx.x, + gridDim.x, ..., with or without their first loads staggered on each SM,
    // measured 4-9% slower on an H200, and one block an SM streaming its next chunk into a second
    // buffer 1.5-1.8x slower: stage_tiles_ab_h200.json.)
    const long long b = blockIdx.x;
    long long base = 0, xblk = 0;  // storage offset and slot index of the block's fixed bits
    for (int j = 0; j < n - L; ++j) {
        if ((b >> j) & 1) {
            base |= 1LL << gbit[j];
            xblk |= 1LL << gslot[j];
        }
    }
    for (int h = threadIdx.x; h < (1 << hb); h += blockDim.x) {
        long long o = 0;
        for (int j = 0; j < hb; ++j)
            if ((h >> j) & 1) o |= 1LL << slot_bits[LOG_THREADS + j];
        hi[h] = o;
    }
    __syncthreads();
    if (fresh) {  // the state is |0...0>, not yet written: the chunk is made, not read
        for (int i = threadIdx.x; i < (1 << L); i += blockDim.x) sm[i] = cplx{0, 0};
        if (b == 0 && threadIdx.x == 0) sm[swz(0)] = cplx{1, 0};
    } else {
        load_chunk(sm, state + base, L, C, hi, low_offset(threadIdx.x, L, slot_bits),
                   low_offset(2 * threadIdx.x, L, slot_bits));
    }
    __syncthreads();

    const long long lmask_all = (1LL << L) - 1;
    for (int o = 0; o < n_ops; ++o) {
        const long long* rec = ops + (long long)o * OP_WORDS;
        const Head h = load_head(rec);
        const long long type = h.w01.x, cmask = h.w23.x, data = h.w23.y, pcount = h.w45.x, mma_rec = h.w45.y;
        if (type == OP_DENSE) {
            const long long gmask = cmask & ~lmask_all;
            if ((xblk & gmask) != gmask) continue;  // a fixed control is 0: the same for the whole block
            const int k = (int)h.w01.y;
            const cplx* mat = mats + data;
            const int lmask = (int)(cmask & lmask_all);
#if STAGE_MMA
            // a tensor-core op without a pre-phase: each lane reads its matrix entries itself
            // (read-only, cached), so the op needs no staging and no barrier before it (QV-28
            // 272 -> 262 ms, brickwork(28, 2, 20) 151 -> 144 on an H200)
            if (mma_rec && pcount == 0 && (k == 2 || k == 3)) {
                if (mma_rec == MMA_PAIR)
                    dense_mma<3, true>(sm, L, rec, 0, mat, wmats + data, mats + rec[W_PAIR], wmats + rec[W_PAIR]);
                else if (k == 2) dense_mma<2>(sm, L, rec, lmask, mat, wmats + data);
                else dense_mma<3>(sm, L, rec, lmask, mat, wmats + data);
                __syncthreads();
                continue;
            }
#endif
            for (int e = threadIdx.x; e < (1 << (2 * k)); e += blockDim.x) s_mat[e] = mat[e];
            // the diagonal run before this op, applied as the op loads its amplitudes
            const Phases pre = prepare_phases(groups + rec[W_PDATA] * 4, (int)pcount, L, xblk, coef_slot,
                                              coef_turn, coef_gate, s_cond, s_cadd, s_eff, s_tab, s_hx);
            const bool mma = STAGE_MMA && mma_rec;
            if (pre.n && k <= PRE_MAX_K) {
                if (k == 1) dense<1, true>(sm, L, rec, lmask, s_mat, pre);
#if PRE_MAX_K >= 2
                else dense<2, true>(sm, L, rec, lmask, s_mat, pre);
#endif
            } else {
                if (pre.n) {  // wider ops take their pre-phase in a sweep of its own (registers)
                    pre.sweep(sm, lmask);
                    __syncthreads();
                }
#if STAGE_MMA
                if (mma && k == 2) dense_mma<2>(sm, L, rec, lmask, s_mat, wmats + data);
                else if (mma && k == 3) dense_mma<3>(sm, L, rec, lmask, s_mat, wmats + data);
                else
#endif
                switch (k) {
                    case 1: dense<1, false>(sm, L, rec, lmask, s_mat, pre); break;
                    case 2: dense<2, false>(sm, L, rec, lmask, s_mat, pre); break;
                    case 3: dense<3, false>(sm, L, rec, lmask, s_mat, pre); break;
#if MAX_K >= 4
                    case 4: dense<4, false>(sm, L, rec, lmask, s_mat, pre); break;
#endif
                }
            }
        } else if (STAGE_PHASES) {  // OP_PHASE
            const Phases ph = prepare_phases(groups + data * 4, (int)rec[W_COUNT], L, xblk, coef_slot,
                                             coef_turn, coef_gate, s_cond, s_cadd, s_eff, s_tab, s_hx);
#if !STATE_C64
            // the stage's last op, where the store exchanges no bits: applied as the chunk is
            // stored, a sweep over shared memory fewer (prepare_phases' closing barrier orders
            // the ops before it and its tables before the store; ph.n: it filled the step table,
            // which the store's addresses come from; conditions are local, so a phase op's groups
            // are all live and n = 0 only for a run of none, which the plain store serves)
            if (o == n_ops - 1 && !store_x && ph.n) {  // (index t + h THREADS is stored at hi[h])
                const long long lo = base + low_offset(threadIdx.x, L, slot_bits);
                ph.each<true>(sm, 0, [&](int h, int, cplx v) { store_stream(state + lo + hi[h], v); });
                return;
            }
#endif
            ph.sweep(sm, 0);
        }
        __syncthreads();
    }
    // the store's exchanges rotate the kept low slots' qubits (StageCode.store_swaps): address i
    // takes the amplitude at index i with the exchanged bits swapped. The swizzle keeps complex128
    // free of bank conflicts here (the planner's partners keep residues mod 3); complex64's chunk
    // has none, so complex64 plans keep their low bits (stage_choice.ROTATE_LOW)
#if STATE_C64
    // rounded to complex64, two neighbours a 16-byte store (C >= 1)
    const long long lo = base + low_offset(2 * threadIdx.x, L, slot_bits);  // (made again: not live across the ops)
#pragma unroll 4
    for (int i = 2 * threadIdx.x; i < (1 << L); i += 2 * blockDim.x) {
        const cplx a = sm[swz(store_x ? exchanged(i, store_x) : i)];
        const cplx c = sm[swz(store_x ? exchanged(i + 1, store_x) : i + 1)];
        __stcs(reinterpret_cast<float4*>(state + lo + hi[i >> LOG_THREADS]),
               make_float4((float)a.x, (float)a.y, (float)c.x, (float)c.y));
    }
#else
    const long long lo = base + low_offset(threadIdx.x, L, slot_bits);  // (made again: not live across the ops)
#pragma unroll 8
    for (int i = threadIdx.x; i < (1 << L); i += blockDim.x)
        store_stream(state + lo + hi[i >> LOG_THREADS],
                     sm[swz(store_x ? exchanged(i, store_x) : i)]);
#endif
}
