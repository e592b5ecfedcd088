// Dense gates of 1..6 qubits applied in place, at any target positions, one pass over memory:
// the tiled kernel (apply_small) first, then the direct, staged and DMMA kernels, each with its
// own description. policy.py chooses among them.
//
// apply_small: a block works on tiles of TILE = G * 2^D amplitudes (G = 2^LOG_G groups of 2^D): 2^K
// contiguous low amplitudes (K = LOG_G + the number of targets below K) times the 2^H
// combinations of the targets at or above K.
//   1. the tile is loaded into shared memory, each warp reading contiguous runs (coalesced
//      whatever the targets are; a thread-per-group gather from global memory would stride
//      by 2^p on low targets);
//   2. each group is multiplied by the matrix: thread t takes group t % G and R consecutive
//      rows of the matrix, streaming the group's amplitudes from shared memory and reading
//      the matrix as a broadcast (all threads of a warp share their rows);
//   3. the tile is stored back, coalesced.
// Shared-memory indices are XOR-swizzled so that the strided group gathers of step 2 do not
// fall into one bank.
//
// Compile-time: Real (double/float), D, LOG_G, R (rows per thread). Run-time: the target layout
// (computed by layout.py).

// Aligned to its size, so that an amplitude is one 16-byte (8-byte) load or store: with the
// natural alignment of T every access was split in two (ld.global.f64 x 2).
template <typename T>
struct __align__(2 * sizeof(T)) cplx { T x, y; };

// (re, im) += m * (x + iy): the one complex multiply-add every kernel's row product is made of,
// in one FMA order, so that the kernels agree bit for bit on the same data.
template <typename Real>
__device__ __forceinline__ void cfma(Real& re, Real& im, cplx<Real> m, Real x, Real y) {
    re = fma(m.x, x, re);
    re = fma(-m.y, y, re);
    im = fma(m.x, y, im);
    im = fma(m.y, x, im);
}

// Row `row` of the DIM x DIM matrix u times the group v.
template <typename Real, int DIM>
__device__ __forceinline__ cplx<Real> row_times(const cplx<Real>* u, int row, const cplx<Real> (&v)[DIM]) {
    Real re = 0, im = 0;
#pragma unroll
    for (int j = 0; j < DIM; ++j) cfma(re, im, u[row * DIM + j], v[j].x, v[j].y);
    return cplx<Real>{re, im};
}

__device__ __forceinline__ long long insert_zero(long long x, int p) {
    return ((x >> p) << (p + 1)) | (x & ((1LL << p) - 1));
}

// The address offset of target combination j: bit b of j placed at position pos[b].
template <int D>
__device__ __forceinline__ long long spread(int j, const int (&pos)[6]) {
    long long o = 0;
#pragma unroll
    for (int b = 0; b < D; ++b) o |= (long long)((j >> b) & 1) << pos[b];
    return o;
}

// The address of group `grp` (amplitude index with a zero inserted at every target position).
template <int D>
__device__ __forceinline__ long long group_base(long long grp, const int (&pos)[6]) {
#pragma unroll
    for (int q = 0; q < D; ++q) grp = insert_zero(grp, pos[q]);
    return grp;
}

template <typename Real>
__device__ __forceinline__ int swz(int e, int shift) {
    constexpr int MASK = sizeof(Real) == 8 ? 7 : 15;  // elements per 128-byte bank row - 1
    return e ^ ((e >> shift) & MASK);
}

// Layout arguments:
//   n_tiles  number of tiles
//   k        low contiguous bits per tile (every low target lies below k)
//   h        number of targets at or above k; hp0..hp5 their positions, ascending
//   tp0..tp5 positions of the D targets inside the tile index, ascending
//   shift    swizzle shift
template <typename Real, int D, int LOG_G, int R>
__global__ void __launch_bounds__((1 << LOG_G) * ((1 << D) / R))
apply_small(cplx<Real>* __restrict__ state, const cplx<Real>* __restrict__ matrix, long long n_tiles,
            int k, int h, int hp0, int hp1, int hp2, int hp3, int hp4, int hp5,
            int tp0, int tp1, int tp2, int tp3, int tp4, int tp5, int shift)
{
    constexpr int DIM = 1 << D;
    constexpr int G = 1 << LOG_G;
    constexpr int NT = G * (DIM / R);
    constexpr int TILE = G * DIM;
    constexpr bool U_SHARED = D <= 4;  // larger matrices (16-64 KB in FP64) are read through L1
    const int hi_pos[6] = {hp0, hp1, hp2, hp3, hp4, hp5};
    const int tile_pos[6] = {tp0, tp1, tp2, tp3, tp4, tp5};

    __shared__ cplx<Real> buf[TILE];
    __shared__ cplx<Real> u_sh[U_SHARED ? DIM * DIM : 1];
    __shared__ long long hoff[DIM];   // address offset of each high-target combination
    __shared__ int toff[DIM];         // tile offset of each target combination

    const int tid = threadIdx.x;
    if (U_SHARED)
        for (int i = tid; i < DIM * DIM; i += NT) u_sh[i] = matrix[i];
    for (int j = tid; j < DIM; j += NT) {
        long long o = 0;
#pragma unroll
        for (int b = 0; b < 6; ++b)
            if (b < h) o |= (long long)((j >> b) & 1) << hi_pos[b];
        hoff[j] = o;
        int t = 0;
#pragma unroll
        for (int b = 0; b < D; ++b) t |= ((j >> b) & 1) << tile_pos[b];
        toff[j] = t;
    }
    const cplx<Real>* u = U_SHARED ? u_sh : matrix;
    // this thread's group inside the tile (a zero inserted at each target position) and rows
    int mine = tid & (G - 1);
#pragma unroll
    for (int b = 0; b < D; ++b) mine = (int)insert_zero(mine, tile_pos[b]);
    const int row0 = (tid >> LOG_G) * R;
    const long long low_mask = (1LL << k) - 1;
    __syncthreads();

    for (long long tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        // tile base address: the tile number spread over the bits >= k that are not targets
        long long base = tile << k;
#pragma unroll
        for (int b = 0; b < 6; ++b)
            if (b < h) base = insert_zero(base, hi_pos[b]);
#pragma unroll 4
        for (int e = tid; e < TILE; e += NT)
            buf[swz<Real>(e, shift)] = state[base | (e & low_mask) | hoff[e >> k]];
        __syncthreads();

        Real re[R], im[R];
#pragma unroll
        for (int r = 0; r < R; ++r) re[r] = im[r] = 0;
#pragma unroll 4
        for (int j = 0; j < DIM; ++j) {
            const cplx<Real> v = buf[swz<Real>(mine | toff[j], shift)];
#pragma unroll
            for (int r = 0; r < R; ++r) cfma(re[r], im[r], u[(row0 + r) * DIM + j], v.x, v.y);
        }
        if (R < DIM) __syncthreads();  // other threads still read this group
#pragma unroll
        for (int r = 0; r < R; ++r) buf[swz<Real>(mine | toff[row0 + r], shift)] = cplx<Real>{re[r], im[r]};
        __syncthreads();
#pragma unroll 4
        for (int e = tid; e < TILE; e += NT)
            state[base | (e & low_mask) | hoff[e >> k]] = buf[swz<Real>(e, shift)];
        __syncthreads();
    }
}


// Targets whose lowest position is >= 3 (complex128) or >= 4 (complex64): neighbouring groups
// are neighbouring in memory, so a warp's loads are coalesced without staging. Thread g owns
// groups g, g + T, ..., (GPT of them per pass) and issues all their loads before any
// arithmetic, to keep enough bytes in flight.
// STREAM: load and store with the evict-first hint (each amplitude is touched once per gate).
template <typename T>
__device__ __forceinline__ cplx<T> load_amp(const cplx<T>* p, bool stream);
template <>
__device__ __forceinline__ cplx<double> load_amp(const cplx<double>* p, bool stream) {
    if (stream) { const double2 v = __ldcs(reinterpret_cast<const double2*>(p)); return {v.x, v.y}; }
    return *p;
}
template <>
__device__ __forceinline__ cplx<float> load_amp(const cplx<float>* p, bool stream) {
    if (stream) { const float2 v = __ldcs(reinterpret_cast<const float2*>(p)); return {v.x, v.y}; }
    return *p;
}
__device__ __forceinline__ void store_amp(cplx<double>* p, cplx<double> v, bool stream) {
    if (stream) __stcs(reinterpret_cast<double2*>(p), make_double2(v.x, v.y)); else *p = v;
}
__device__ __forceinline__ void store_amp(cplx<float>* p, cplx<float> v, bool stream) {
    if (stream) __stcs(reinterpret_cast<float2*>(p), make_float2(v.x, v.y)); else *p = v;
}

// The gate matrix passed by value, as a kernel parameter: every thread reads it from the constant
// bank (no shared-memory staging, no host-to-device copy). Up to 16 KB here (complex128 d = 4
// with the tuning variants of d = 5 in complex64): above the 4 KB kernel-parameter limit of CUDA
// before 12.1, within the 32 KB allowed since.
template <typename Real, int DIM>
struct GateMatrix { cplx<Real> m[DIM * DIM]; };

// MINB: blocks of 256 threads per SM the registers are capped for (occupancy against loads per thread).
// USRC, where the row products read the matrix (measured, tune_direct_h200.json):
//   0  rows unrolled, every element an immediate constant-bank operand of its FMA (d = 1, 2);
//   1  rows rolled, each element a constant-bank load with a register index (d = 3: unrolled, the
//      code grew to 3.0 ms against 2.03);
//   2  staged once per block in shared memory (d >= 4: 2.7 ms from the constant bank against 2.2).
template <typename Real, int D, int GPT, bool STREAM = false, int MINB = 1, int USRC = 2>
__global__ void __launch_bounds__(256, MINB)
apply_direct(const GateMatrix<Real, 1 << D> u, cplx<Real>* __restrict__ state, long long n_groups,
             int p0, int p1, int p2, int p3, int p4, int p5)
{
    constexpr int DIM = 1 << D;
    const int pos[6] = {p0, p1, p2, p3, p4, p5};
    __shared__ long long off[DIM];
    __shared__ cplx<Real> u_sh[USRC == 2 ? DIM * DIM : 1];
    if (USRC == 2)
        for (int i = threadIdx.x; i < DIM * DIM; i += blockDim.x) u_sh[i] = u.m[i];
    const cplx<Real>* um = USRC == 2 ? u_sh : u.m;
    for (int j = threadIdx.x; j < DIM; j += blockDim.x) off[j] = spread<D>(j, pos);
    __syncthreads();
    const long long n_threads = (long long)gridDim.x * blockDim.x;
    for (long long g0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; g0 < n_groups; g0 += n_threads * GPT) {
        cplx<Real> v[GPT][DIM];
        long long base[GPT];
#pragma unroll
        for (int q = 0; q < GPT; ++q) {
            long long b = g0 + q * n_threads;
            if (b >= n_groups) b = g0;  // recompute a valid group; its store is skipped below
            b = group_base<D>(b, pos);
            base[q] = b;
#pragma unroll
            for (int j = 0; j < DIM; ++j) v[q][j] = load_amp(state + (b | off[j]), STREAM);
        }
#pragma unroll
        for (int q = 0; q < GPT; ++q) {
            if (g0 + q * n_threads >= n_groups) break;
#pragma unroll (USRC == 0 ? DIM : 1)
            for (int i = 0; i < DIM; ++i) store_amp(state + (base[q] | off[i]), row_times(um, i, v[q]), STREAM);
        }
    }
}


// The staged kernel's shared-memory swizzle: index e is stored at e ^ m(e), m XORing up to four
// bits of e at or above S (S = 3 for 16-byte amplitudes, a quarter warp per shared-memory
// wavefront; 4 for 8-byte ones, a half warp) into its low S bits, from the table `swz_tbl` (16
// 4-bit entries indexed by bits S..S+3, built by smem_swizzle in layout.py). Threads of one
// wavefront differ in the lowest S bits of their group number, which sit at the lowest S
// non-target bits of e; m maps those at or above S onto the targets below S, so the group gathers
// hit 2^S distinct bank slots, and coalesced staging (2^S consecutive indices, m constant over
// them) does too. m is linear, so e ^ m(e) can be computed per part of e.
template <typename Real>
__device__ __forceinline__ int smem_mask(int e, unsigned long long swz_tbl) {
    constexpr int S = sizeof(Real) == 8 ? 3 : 4;
    return (int)(swz_tbl >> (((e >> S) & 15) << 2)) & ((1 << S) - 1);
}

// Targets anywhere, one tile per block of G = 2^(LOG_T - D) threads, one group per thread (the shape
// that cuStateVec's kernels for low targets take, measured with ncu: 64 threads, 24-72 registers). A tile is 2^LOG_T
// amplitudes: the 2^k contiguous ones from block << k (zeros inserted at the h targets at or above
// k) times the 2^h combinations of those targets, k = LOG_T - h >= LOG_T - D.
//   1. thread t loads elements t + G i (i < 2^D) of the tile: each load instruction of a warp is
//      32 consecutive amplitudes, all issued before any is used. G divides 2^k, so element
//      t + G i lies at address U_i + t, where U_i (the block's base, the high-target offset of
//      combination (G i) >> k, and (G i) mod 2^k) is the same for every thread: one add each;
//   2. stores them in shared memory, and after one barrier reads its group (the tile index of
//      group t has a zero at each target's tile position q_j), computes its rows and writes them
//      in their place (each thread owns its group: no barrier);
//   3. after a barrier the tile goes back as it came.
// Shared-memory index e is stored at e ^ m(e), m from swz_tbl (smem_mask, built by smem_swizzle for
// the tile positions q): neighbouring threads' groups fall into distinct
// bank slots, and steps 1 and 3 stay conflict-free. m is linear and a group's indices are the
// thread's base OR (disjoint bits) the offset of j, so their swizzled forms XOR together.
//   k, h, hp0..hp3: low contiguous bits, number and positions of the high targets (ascending)
//   q0..q3: the targets' positions in the tile index (ascending, as the matrix bits)
template <typename Real, int D, int LOG_T>
__global__ void __launch_bounds__(1 << (LOG_T - D))
apply_staged(const GateMatrix<Real, 1 << D> u, cplx<Real>* __restrict__ state, int k, int h,
             int hp0, int hp1, int hp2, int hp3, int q0, int q1, int q2, int q3, unsigned long long swz_tbl)
{
    constexpr int DIM = 1 << D, G = 1 << (LOG_T - D), TILE = 1 << LOG_T;
    static_assert(D >= 1 && D <= 4, "apply_staged: 1..4 targets");
    const int hp[6] = {hp0, hp1, hp2, hp3, 0, 0};
    const int q[6] = {q0, q1, q2, q3, 0, 0};
    __shared__ cplx<Real> buf[TILE];
    const int tid = threadIdx.x;
    long long base = (long long)blockIdx.x << k;
#pragma unroll
    for (int b = 0; b < D; ++b)
        if (b < h) base = insert_zero(base, hp[b]);
    long long at[DIM];  // U_i: the address of element G i, less t
#pragma unroll
    for (int i = 0; i < DIM; ++i) {
        const int c = (G * i) >> k;  // the high-target combination of elements G i .. G i + G - 1
        long long a = base | ((G * i) & ((1 << k) - 1));
#pragma unroll
        for (int b = 0; b < D; ++b)
            if (b < h) a |= (long long)((c >> b) & 1) << hp[b];
        at[i] = a;
    }
    cplx<Real> v[DIM];
#pragma unroll
    for (int i = 0; i < DIM; ++i) v[i] = state[at[i] + tid];
#pragma unroll
    for (int i = 0; i < DIM; ++i) {
        const int e = tid + G * i;
        buf[e ^ smem_mask<Real>(e, swz_tbl)] = v[i];
    }
    __syncthreads();
    int gb = (int)group_base<D>(tid, q);
    gb ^= smem_mask<Real>(gb, swz_tbl);
    cplx<Real> g[DIM];
    int off[DIM];  // swizzled offset of matrix index j
#pragma unroll
    for (int j = 0; j < DIM; ++j) {
        const int o = (int)spread<D>(j, q);
        off[j] = o ^ smem_mask<Real>(o, swz_tbl);
        g[j] = buf[gb ^ off[j]];
    }
#pragma unroll
    for (int i = 0; i < DIM; ++i) buf[gb ^ off[i]] = row_times(u.m, i, g);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < DIM; ++i) {
        const int e = tid + G * i;
        state[at[i] + tid] = buf[e ^ smem_mask<Real>(e, swz_tbl)];
    }
}


// Complex128 gates of 4..6 qubits on the FP64 tensor cores (DMMA), at any target positions. A
// tile is 8 neighbouring groups (8 consecutive amplitudes, 128 bytes, for every target
// combination when the lowest target is at bit 3 or above; 64- or 32-byte runs otherwise); a
// warp takes NT tiles. For each tile it holds the whole 2^D x 8 block V in
// registers and computes out = U @ V one slice of rows at a time, storing each slice at once:
// V is already in registers, so working in place is safe, and only one slice's accumulators
// are live. PREFETCH loads the warp's next block before computing the current one (twice the
// registers for V, loads always in flight).
// SHAPE 0: mma.m8n8k4.f64 (8-row slices, k-steps of 4); 1: m16n8k8, 2: m16n8k16 (sm_90;
// 16-row slices, k-steps of 8 or 16). Fragments (PTX ISA), g = lane / 4, t = lane % 4:
//   A: a[i] = A[g + 8 (i & 1)][t + 4 (i >> 1)]   (1, 4 or 8 elements)
//   B: b[j] = B[t + 4 j][g]                      (1, 2 or 4)
//   C: c[e] = C[g + 8 (e >> 1)][2 t + (e & 1)]   (2, 4 or 4)
// B is loaded straight from the state; U is staged in shared
// memory in fragment order, so each A element is one conflict-free 16-byte read per lane.
// Complex from real products: GAUSS = false takes four (Re = Ur Vr - Ui Vi, Im = Ur Vi + Ui Vr);
// GAUSS = true three (P1 = Ur Vr, P2 = Ui Vi, P3 = (Ur + Ui)(Vr + Vi); Re = P1 - P2,
// Im = P3 - P1 - P2). MINB: blocks of 256 threads per SM the registers are capped for;
// MTU: slices computed together (more independent accumulation chains, more registers).
template <int SHAPE> struct Dmma;
template <> struct Dmma<0> {
    static constexpr int ROWS = 8, KSTEP = 4, AF = 1, BF = 1, CF = 2;
    static __device__ __forceinline__ void run(double (&c)[CF], const double (&a)[AF], const double (&b)[BF]) {
        asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
            : "+d"(c[0]), "+d"(c[1]) : "d"(a[0]), "d"(b[0]));
    }
};
template <> struct Dmma<1> {
    static constexpr int ROWS = 16, KSTEP = 8, AF = 4, BF = 2, CF = 4;
    static __device__ __forceinline__ void run(double (&c)[CF], const double (&a)[AF], const double (&b)[BF]) {
        asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
    }
};
template <> struct Dmma<2> {
    static constexpr int ROWS = 16, KSTEP = 16, AF = 8, BF = 4, CF = 4;
    static __device__ __forceinline__ void run(double (&c)[CF], const double (&a)[AF], const double (&b)[BF]) {
        asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};"
            : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
              "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    }
};

template <int D, int NT>
struct DmmaBlock {
    static constexpr int KS = (1 << D) / 4;  // rows of V per lane (k-steps of 4)
    double re[NT][KS], im[NT][KS];
};

// Lane (g, t) loads rows 4 ks + t of group g of each tile. Any target layout is sector-complete:
// address bit 0 is either the lowest target (toggled by t) or the lowest other bit (toggled by g).
template <int D, int NT>
__device__ __forceinline__ void dmma_load(DmmaBlock<D, NT>& v, const double2* sv, long long t0, long long n_tiles,
                                          const int (&pos)[6], const long long* off, int t, int g)
{
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const long long tile = t0 + nt < n_tiles ? t0 + nt : t0;  // a tail tile repeats t0; not stored
        const long long b = group_base<D>(tile * 8 + g, pos);
#pragma unroll
        for (int ks = 0; ks < DmmaBlock<D, NT>::KS; ++ks) {
            const double2 x = sv[b + off[ks * 4 + t]];
            v.re[nt][ks] = x.x;
            v.im[nt][ks] = x.y;
        }
    }
}

// U in fragment order in shared memory: [slice][k-step][i][lane] (Ur, Ui) pairs, DIM^2 of them,
// and the address offsets of the DIM target combinations.
template <typename M, int D>
__device__ __forceinline__ void dmma_stage_matrix(double2* afrag, long long* off, const cplx<double>* matrix,
                                                  const int (&pos)[6])
{
    constexpr int DIM = 1 << D, KB = DIM / M::KSTEP;
    for (int f = threadIdx.x; f < DIM * DIM; f += blockDim.x) {
        const int l = f & 31, i = (f >> 5) % M::AF, kb = (f >> 5) / M::AF % KB, sl = (f >> 5) / M::AF / KB;
        const int row = sl * M::ROWS + (l >> 2) + 8 * (i & 1), col = kb * M::KSTEP + (l & 3) + 4 * (i >> 1);
        const cplx<double> m = matrix[row * DIM + col];
        afrag[f] = make_double2(m.x, m.y);
    }
    for (int j = threadIdx.x; j < DIM; j += blockDim.x) off[j] = spread<D>(j, pos);
}

// Where dmma_product's outputs go: the tiles from tile `first` on, `left` of them inside the state.
template <int D>
struct DmmaStore {
    double2* sv;
    const long long* off;
    const int (&pos)[6];
    long long first, left;
    __device__ __forceinline__ bool wanted(int nt) const { return nt < left; }
    __device__ __forceinline__ long long row_offset(int row) const { return off[row]; }
    __device__ __forceinline__ void operator()(int nt, long long row_off, int col, double re, double im) const {
        sv[group_base<D>((first + nt) * 8 + col, pos) + row_off] = make_double2(re, im);
    }
};

// Row slices [sl0, sl0 + NSL) of U @ V for the warp's NT tiles of V (registers), U from shared
// memory in fragment order. The store object places the outputs this lane holds:
// wanted(nt) (false: tile nt and the ones after it lie past the state), row_offset(row) (the
// address offset of gate row `row`), and store(nt, row_offset, col, re, im), col 0..7 = the tile's group.
template <int SHAPE, bool GAUSS, int MTU, int NSL, int D, int NT>
__device__ __forceinline__ void dmma_product(const DmmaBlock<D, NT>& v, const double2* afrag, int sl0, int lane,
                                             const DmmaStore<D>& store)
{
    using M = Dmma<SHAPE>;
    constexpr int DIM = 1 << D, KB = DIM / M::KSTEP, KS = DIM / 4;
    const int t = lane & 3, g = lane >> 2;
    double vs[GAUSS ? NT : 1][GAUSS ? KS : 1];
    if (GAUSS) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) vs[GAUSS ? nt : 0][GAUSS ? ks : 0] = v.re[nt][ks] + v.im[nt][ks];
    }
#pragma unroll MTU
    for (int s = 0; s < NSL; ++s) {
        const int sl = sl0 + s;
        double rr[NT][M::CF], ii[NT][M::CF], im[NT][M::CF];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < M::CF; ++e) rr[nt][e] = ii[nt][e] = im[nt][e] = 0;
#pragma unroll
        for (int kb = 0; kb < KB; ++kb) {
            double ar[M::AF], ai[M::AF], as[M::AF];
#pragma unroll
            for (int i = 0; i < M::AF; ++i) {
                const double2 a = afrag[((sl * KB + kb) * M::AF + i) * 32 + lane];
                ar[i] = a.x;
                ai[i] = a.y;
                as[i] = a.x + a.y;
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                double br[M::BF], bi[M::BF], bs[M::BF];
#pragma unroll
                for (int j = 0; j < M::BF; ++j) {
                    br[j] = v.re[nt][kb * M::BF + j];
                    bi[j] = v.im[nt][kb * M::BF + j];
                    bs[j] = GAUSS ? vs[GAUSS ? nt : 0][GAUSS ? kb * M::BF + j : 0] : 0.0;
                }
                M::run(rr[nt], ar, br);
                M::run(ii[nt], ai, bi);
                if (GAUSS) {
                    M::run(im[nt], as, bs);
                } else {
                    M::run(im[nt], ar, bi);
                    M::run(im[nt], ai, br);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            if (!store.wanted(nt)) break;
#pragma unroll
            for (int h = 0; h < M::CF / 2; ++h) {
                const long long row_off = store.row_offset(sl * M::ROWS + g + 8 * h);
#pragma unroll
                for (int c = 0; c < 2; ++c) {  // this lane holds columns (groups) 2t and 2t + 1
                    const int e = 2 * h + c;
                    const double re = rr[nt][e] - ii[nt][e];
                    const double imv = GAUSS ? im[nt][e] - rr[nt][e] - ii[nt][e] : im[nt][e];
                    store(nt, row_off, 2 * t + c, re, imv);
                }
            }
        }
    }
}

template <int D, int NT, bool GAUSS, int MINB, bool PREFETCH, int MTU, int SHAPE>
__global__ void __launch_bounds__(256, MINB)
apply_dmma(cplx<double>* state, const cplx<double>* __restrict__ matrix, long long n_tiles,
           int p0, int p1, int p2, int p3, int p4, int p5)
{
    using M = Dmma<SHAPE>;
    constexpr int DIM = 1 << D, NS = DIM / M::ROWS;
    const int pos[6] = {p0, p1, p2, p3, p4, p5};
    extern __shared__ double2 afrag[];  // DIM^2 x (Ur, Ui) in fragment order: [slice][k-step][i][lane]
    __shared__ long long off[DIM];
    dmma_stage_matrix<M, D>(afrag, off, matrix, pos);
    __syncthreads();
    double2* sv = reinterpret_cast<double2*>(state);
    const int lane = threadIdx.x & 31, t = lane & 3, g = lane >> 2;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long stride = (((long long)gridDim.x * blockDim.x) >> 5) * NT;
    long long t0 = warp * NT;
    DmmaBlock<D, NT> v;
    if (t0 < n_tiles) dmma_load(v, sv, t0, n_tiles, pos, off, t, g);
    for (; t0 < n_tiles; t0 += stride) {
        DmmaBlock<D, NT> next;
        if (PREFETCH && t0 + stride < n_tiles) dmma_load(next, sv, t0 + stride, n_tiles, pos, off, t, g);
        dmma_product<SHAPE, GAUSS, MTU, NS>(v, afrag, 0, lane, DmmaStore<D>{sv, off, pos, t0, n_tiles - t0});
        if (PREFETCH) v = next;
        else if (t0 + stride < n_tiles) dmma_load(v, sv, t0 + stride, n_tiles, pos, off, t, g);
    }
}


// The DMMA product fed by a pipeline of asynchronous copies (apply_dmma_pipe). A persistent block
// of W warps takes chunks of TPC tiles (8 groups each) in turn, chunk blockIdx.x + i gridDim.x;
// S stages of shared memory hold the next chunks while the current one is multiplied, so the
// loads stay in flight whatever the warps compute (apply_dmma keeps its blocks in registers, and
// a warp waits for its loads before each product). Warp w multiplies NT of the chunk's tiles,
// tiles NT (w % (TPC / NT)) onwards, and its share of the row slices (the warps of one set of
// tiles split the slices). Within a stage, amplitude (tile j, row r, group gi) sits at
// (j DIM + r) 8 + (gi ^ 2 (r & 3)): a lane (g, t) reads rows 4 ks + t of group g, and the XOR
// gives the eight lanes of each shared-memory phase (g = 2p, 2p + 1; t = 0..3) eight distinct
// 16-byte bank slots. The copies follow the addresses (PipeMap).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__host__ __device__ constexpr int ilog2(int x) { return x > 1 ? 1 + ilog2(x / 2) : 0; }

// Where this thread's copies of a chunk go: N elements, each a shared-memory slot and an offset
// from the chunk's first amplitude. Element e = (i W + warp) 32 + lane enumerates the chunk's
// address bits (every target and its lowest 3 + log2 TPC other bits) from the lowest, so the 32
// lanes of a warp copy 32 amplitudes whose addresses differ in the chunk's lowest 5 bits: 512
// contiguous bytes when those are bits 0..4, whatever the targets (a lane-per-group mapping
// copies 64-byte pieces from 8 lines when the targets are at the bottom, and ran 40% slower).
// Computed once per thread: the walk over address bits is the same for every chunk.
template <int D, int W, int TPC>
struct PipeMap {
    static constexpr int N = TPC * (1 << D) / (4 * W);
    int slot[N];
    long long offset[N];
};

template <int D, int W, int TPC>
__device__ __forceinline__ void pipe_map(PipeMap<D, W, TPC>& m, const int (&pos)[6])
{
    constexpr int DIM = 1 << D, L = 3 + ilog2(TPC);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < PipeMap<D, W, TPC>::N; ++i) {
        const int e = (i * W + warp) * 32 + lane;
        long long off = 0;
        int r = 0, gc = 0, q = 0, others = 0;
        for (int a = 0, k = 0; k < D + L; ++a) {
            const bool target = q < D && pos[q] == a;
            if (target || others < L) {
                const int bit = (e >> k++) & 1;
                off |= (long long)bit << a;
                if (target) r |= bit << q;
                else gc |= bit << others;
            }
            if (target) ++q;
            else ++others;
        }
        m.slot[i] = ((gc >> 3) * DIM + r) * 8 + ((gc & 7) ^ (2 * (r & 3)));
        m.offset[i] = off;
    }
}

template <int D, int W, int TPC>
__device__ __forceinline__ void dmma_pipe_load(double2* stage, const double2* sv, long long chunk,
                                               const int (&pos)[6], const PipeMap<D, W, TPC>& m)
{
    const double2* base = sv + group_base<D>(chunk * TPC * 8, pos);
#pragma unroll
    for (int i = 0; i < PipeMap<D, W, TPC>::N; ++i) cp_async16(&stage[m.slot[i]], base + m.offset[i]);
}

template <int D, int SHAPE, int W, int TPC, int NT, int S, bool GAUSS>
__global__ void __launch_bounds__(32 * W, 1)
apply_dmma_pipe(cplx<double>* state, const cplx<double>* __restrict__ matrix, long long n_chunks,
                int p0, int p1, int p2, int p3, int p4, int p5)
{
    using M = Dmma<SHAPE>;
    constexpr int DIM = 1 << D, NS = DIM / M::ROWS, KS = DIM / 4, TP = TPC / NT, SG = W / TP;
    static_assert(TPC % NT == 0 && W % TP == 0 && NS % SG == 0 && (TPC * KS) % W == 0 && S >= 2,
                  "apply_dmma_pipe: W warps must split TPC tiles and the row slices evenly");
    constexpr int NSW = NS / SG, STAGE = TPC * 8 * DIM;
    const int pos[6] = {p0, p1, p2, p3, p4, p5};
    extern __shared__ double2 smem[];  // U in fragment order (DIM^2), then S stages of STAGE amplitudes
    double2* afrag = smem;
    double2* stages = smem + DIM * DIM;
    __shared__ long long off[DIM];
    dmma_stage_matrix<M, D>(afrag, off, matrix, pos);
    PipeMap<D, W, TPC> map;
    pipe_map(map, pos);
    __syncthreads();
    double2* sv = reinterpret_cast<double2*>(state);
    const int lane = threadIdx.x & 31, t = lane & 3, g = lane >> 2, warp = threadIdx.x >> 5;
    const int j0 = (warp % TP) * NT, sl0 = (warp / TP) * NSW;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        const long long c = blockIdx.x + (long long)s * gridDim.x;
        if (c < n_chunks) dmma_pipe_load(stages + s * STAGE, sv, c, pos, map);
        cp_async_commit();
    }
    int cur = 0;
    for (long long c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        cp_async_wait<S - 2>();  // this thread's copies of chunk c have landed
        __syncthreads();         // everyone's have, and every warp is done with the stage refilled next
        const long long cn = c + (long long)(S - 1) * gridDim.x;
        if (cn < n_chunks) dmma_pipe_load(stages + ((cur + S - 1) % S) * STAGE, sv, cn, pos, map);
        cp_async_commit();
        const double2* st = stages + cur * STAGE;
        DmmaBlock<D, NT> v;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                const double2 x = st[((j0 + nt) * DIM + 4 * ks + t) * 8 + (g ^ (2 * t))];
                v.re[nt][ks] = x.x;
                v.im[nt][ks] = x.y;
            }
        dmma_product<SHAPE, GAUSS, 1, NSW>(v, afrag, sl0, lane, DmmaStore<D>{sv, off, pos, c * TPC + j0, NT});
        cur = cur + 1 == S ? 0 : cur + 1;
    }
    cp_async_wait<0>();
}
