// The GPU pass of qsim_tc/observables.py: signed sums of the products of one X mask.
//
// For an X mask x and the terms t of its group (Z masks z[t]), each launch computes, per state
// of a block (blockIdx.y + state0),
//
//     out[state, col0 + t] += sum_b (-1)^popcount(b & z[t]) * part_t(conj(psi[b ^ x]) * psi[b])
//
// with part_t the real part, or the imaginary part where part_im[t]. For x != 0 the sum runs
// over the b whose bit `top` (the highest bit of x) is 0: their partners b ^ x hold the
// conjugate products, which the caller counts by doubling. For x = 0 it runs over every b and
// the product is |psi[b]|^2. Each thread keeps the sums of up to TERMS terms in registers over
// a grid-stride loop; a block adds its threads' sums (warp shuffles, then shared memory) and
// adds them to `out` with one atomic per term.

#define THREADS 256

template <typename V, int TERMS>
__device__ __forceinline__ void group_sums(const V* __restrict__ psi, int n_qubits, long long x, int top,
                                           const long long* __restrict__ z, const int* __restrict__ part_im,
                                           int n_terms, double* __restrict__ out, long long out_stride,
                                           long long col0, long long state0) {
    const long long size = 1LL << n_qubits;
    const long long count = x ? size >> 1 : size;  // the b of one state this launch visits
    const long long state = state0 + blockIdx.y;
    const V* s = psi + state * size;
    const long long low = (1LL << top) - 1;
    long long zt[TERMS];
    bool imt[TERMS];
    double acc[TERMS];
#pragma unroll
    for (int t = 0; t < TERMS; ++t) {
        zt[t] = t < n_terms ? z[t] : 0;
        imt[t] = t < n_terms && part_im[t] != 0;
        acc[t] = 0.0;
    }
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        const long long b = x ? (((i & ~low) << 1) | (i & low)) : i;  // bit `top` of b is 0
        const V a = s[b];
        double wr, wi;
        if (x) {
            const V c = s[b ^ x];
            wr = (double)c.x * a.x + (double)c.y * a.y;
            wi = (double)c.x * a.y - (double)c.y * a.x;
        } else {
            wr = (double)a.x * a.x + (double)a.y * a.y;
            wi = 0.0;
        }
#pragma unroll
        for (int t = 0; t < TERMS; ++t) {
            const double v = imt[t] ? wi : wr;
            acc[t] += (__popcll(b & zt[t]) & 1) ? -v : v;
        }
    }
    __shared__ double red[THREADS / 32][TERMS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < TERMS; ++t) {
        double v = acc[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) red[warp][t] = v;
    }
    __syncthreads();
    if (threadIdx.x < n_terms) {
        double v = 0.0;
        for (int w = 0; w < THREADS / 32; ++w) v += red[w][threadIdx.x];
        atomicAdd(out + state * out_stride + col0 + threadIdx.x, v);
    }
}

#define GROUP_SUMS(NAME, V, TERMS)                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                 \
        NAME(const V* psi, int n_qubits, long long x, int top, const long long* z, const int* part_im,   \
             int n_terms, double* out, long long out_stride, long long col0, long long state0) {         \
        group_sums<V, TERMS>(psi, n_qubits, x, top, z, part_im, n_terms, out, out_stride, col0, state0); \
    }

// one kernel per width: the fewer terms, the fewer registers a thread and the more threads a
// multiprocessor holds to hide the memory's latency
GROUP_SUMS(group_sums_c128_t4, double2, 4)
GROUP_SUMS(group_sums_c128_t8, double2, 8)
GROUP_SUMS(group_sums_c128_t16, double2, 16)
GROUP_SUMS(group_sums_c64_t4, float2, 4)
GROUP_SUMS(group_sums_c64_t8, float2, 8)
GROUP_SUMS(group_sums_c64_t16, float2, 16)
