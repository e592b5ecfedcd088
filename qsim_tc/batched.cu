// One-qubit gates on a block of states (qsim_tc/batched_gpu.py): one launch a gate, each
// amplitude pair read and written once.
//
// psi holds n_states states of 2^n amplitudes, one after another; m the gates of a layer,
// (n_states, k, 2, 2) row-major in the states' precision. Launch j applies m[b, j] on qubit q of
// each state b. Thread r of the grid-stride loop takes pair p = r mod 2^(n-1) of state
// b = r / 2^(n-1): the amplitudes i0 (p with a 0 inserted at bit q) and i1 = i0 | 2^q.

template <typename V>
__device__ __forceinline__ V cmul_add(V u, V a, V w, V c) {  // u * a + w * c
    V out;
    out.x = u.x * a.x - u.y * a.y + w.x * c.x - w.y * c.y;
    out.y = u.x * a.y + u.y * a.x + w.x * c.y + w.y * c.x;
    return out;
}

template <typename V>
__device__ __forceinline__ void one_qubit(V* __restrict__ psi, const V* __restrict__ m, int n, int q, int j, int k,
                                          long long n_states) {
    const int low = n - 1;
    const long long pairs = n_states << low;
    const long long below = (1LL << q) - 1;
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < pairs;
         r += (long long)gridDim.x * blockDim.x) {
        const long long b = r >> low, p = r & ((1LL << low) - 1);
        const long long i0 = ((p & ~below) << 1) | (p & below);
        const long long i1 = i0 | (1LL << q);
        V* s = psi + (b << n);
        const V* u = m + ((b * k + j) << 2);
        const V a0 = s[i0], a1 = s[i1];
        s[i0] = cmul_add(u[0], a0, u[1], a1);
        s[i1] = cmul_add(u[2], a0, u[3], a1);
    }
}

extern "C" __global__ void one_qubit_c128(double2* psi, const double2* m, int n, int q, int j, int k,
                                          long long n_states) {
    one_qubit<double2>(psi, m, n, q, j, k, n_states);
}

extern "C" __global__ void one_qubit_c64(float2* psi, const float2* m, int n, int q, int j, int k,
                                         long long n_states) {
    one_qubit<float2>(psi, m, n, q, j, k, n_states);
}
