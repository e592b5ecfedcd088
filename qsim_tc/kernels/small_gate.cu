// Dense gates of 1..4 qubits applied in place, at any target positions.
//
// Thread g owns the 2^D amplitudes whose non-target bits spell g: it gathers them, multiplies
// by the gate matrix (held in shared memory, read as a broadcast) and writes them back. Groups
// are disjoint, so the update is in place with no second state buffer.
//
// Compiled once per (element type, D) through cupy.RawModule name expressions.


template <typename T>
struct cplx { T x, y; };

template <typename Real, int D>
__global__ void __launch_bounds__(256, 2)
apply_small(cplx<Real>* __restrict__ state, const cplx<Real>* __restrict__ matrix,
            long long n_groups, int p0, int p1, int p2, int p3)
{
    constexpr int DIM = 1 << D;
    __shared__ cplx<Real> u[DIM * DIM];
    __shared__ long long off[DIM];
    const int pos[4] = {p0, p1, p2, p3};  // sorted ascending; unused entries ignored
    for (int i = threadIdx.x; i < DIM * DIM; i += blockDim.x) u[i] = matrix[i];
    for (int j = threadIdx.x; j < DIM; j += blockDim.x) {
        long long o = 0;
#pragma unroll
        for (int b = 0; b < D; ++b) o |= (long long)((j >> b) & 1) << pos[b];
        off[j] = o;
    }
    __syncthreads();

    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups; g += stride) {
        // insert a zero bit at each target position, lowest first
        long long base = g;
#pragma unroll
        for (int b = 0; b < D; ++b) {
            const long long low = base & ((1LL << pos[b]) - 1);
            base = ((base >> pos[b]) << (pos[b] + 1)) | low;
        }
        cplx<Real> v[DIM];
#pragma unroll
        for (int j = 0; j < DIM; ++j) v[j] = state[base | off[j]];
        // rows one at a time (not unrolled): keeps v[] in registers without hoisting the matrix
#pragma unroll 1
        for (int i = 0; i < DIM; ++i) {
            Real re = 0, im = 0;
#pragma unroll
            for (int j = 0; j < DIM; ++j) {
                const cplx<Real> m = u[i * DIM + j];
                re = fma(m.x, v[j].x, re);
                re = fma(-m.y, v[j].y, re);
                im = fma(m.x, v[j].y, im);
                im = fma(m.y, v[j].x, im);
            }
            state[base | off[i]] = cplx<Real>{re, im};
        }
    }
}

template __global__ void apply_small<double, 1>(cplx<double>*, const cplx<double>*, long long, int, int, int, int);
template __global__ void apply_small<double, 2>(cplx<double>*, const cplx<double>*, long long, int, int, int, int);
template __global__ void apply_small<double, 3>(cplx<double>*, const cplx<double>*, long long, int, int, int, int);
template __global__ void apply_small<double, 4>(cplx<double>*, const cplx<double>*, long long, int, int, int, int);
template __global__ void apply_small<float, 1>(cplx<float>*, const cplx<float>*, long long, int, int, int, int);
template __global__ void apply_small<float, 2>(cplx<float>*, const cplx<float>*, long long, int, int, int, int);
template __global__ void apply_small<float, 3>(cplx<float>*, const cplx<float>*, long long, int, int, int, int);
template __global__ void apply_small<float, 4>(cplx<float>*, const cplx<float>*, long long, int, int, int, int);
