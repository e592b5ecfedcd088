// Number of nonzero elements of a float array whose magnitude is below a threshold (the FP16
// out-of-range count of halfhalf / tc-auto, gemm/tcec_gpu.py count_below): grid-stride loop,
// one warp reduction and one atomic per warp, one host read by the caller.
extern "C" __global__ void count_below(const float* __restrict__ x, long long n, float thr,
                                       unsigned long long* __restrict__ out) {
    unsigned long long c = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = fabsf(x[i]);
        c += (v != 0.0f && v < thr) ? 1 : 0;
    }
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}
