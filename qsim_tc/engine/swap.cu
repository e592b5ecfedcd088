// In-place exchange of index bits of a state vector: for every pair (p, q) of the table, the
// amplitudes whose index has bit p = 1, bit q = 0 trade places with those that have bit p = 0,
// bit q = 1. The pairs are disjoint, so the map i -> partner(i) is an involution and the whole
// set of pairs is one pass: each thread takes indices i, and the one with the smaller index of
// a pair {i, partner(i)} exchanges the two amplitudes. No other thread touches either, so the
// exchange needs no synchronisation and no second buffer.
//
// Elem: an opaque element of 8 or 16 bytes (complex64 / complex128).

template <int BYTES> struct SwapElem;
template <> struct SwapElem<8> { typedef uint2 type; };
template <> struct SwapElem<16> { typedef uint4 type; };

template <int BYTES>
__global__ void __launch_bounds__(256)
swap_bits_inplace(typename SwapElem<BYTES>::type* __restrict__ data, long long n, int n_pairs,
                  const int* __restrict__ pairs)
{
    __shared__ int s_p[32], s_q[32];
    for (int r = threadIdx.x; r < n_pairs; r += blockDim.x) {
        s_p[r] = pairs[2 * r];
        s_q[r] = pairs[2 * r + 1];
    }
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long j = i;
        for (int r = 0; r < n_pairs; ++r) {
            const long long differ = ((i >> s_p[r]) ^ (i >> s_q[r])) & 1LL;
            j ^= (differ << s_p[r]) | (differ << s_q[r]);
        }
        if (j > i) {
            const typename SwapElem<BYTES>::type a = data[i];
            data[i] = data[j];
            data[j] = a;
        }
    }
}
