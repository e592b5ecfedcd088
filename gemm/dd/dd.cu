// Double-double complex GEMM with FMA-based TwoProd and TwoSum (the "fma" algorithm of gemm.dd).
//
// C = A @ B, every operand a complex double-double held as two complex128 arrays (hi, lo),
// row-major, real and imaginary parts interleaved. Each block computes a BM x BN tile of C; each
// thread a 2 x 2 micro-tile, accumulated in registers as four doubles per element. Tiles of A and
// B (BK deep) are staged in shared memory.
//
// Must be compiled with --fmad=false: TwoSum is exact only if s = a + b is rounded on its own,
// and an FMA contraction of p = a*b; s = c + p would break it. The explicit fma() calls of
// TwoProd are kept either way.

#define BM 32
#define BN 32
#define BK 8
#define TX 16
#define TY 16

struct cdd {
    double rh, rl, ih, il;
};

__device__ __forceinline__ void two_sum(double a, double b, double &s, double &e) {
    s = a + b;
    double bb = s - a;
    e = (a - (s - bb)) + (b - bb);
}

__device__ __forceinline__ void fast_two_sum(double a, double b, double &s, double &e) {
    s = a + b;
    e = b - (s - a);
}

// (ch, cl) += (ah, al) * (bh, bl): TwoProd by FMA, then the accurate DD addition.
__device__ __forceinline__ void dd_mac(double &ch, double &cl, double ah, double al, double bh, double bl) {
    double p = ah * bh;
    double e = fma(ah, bh, -p);
    e = fma(ah, bl, e);
    e = fma(al, bh, e);
    double s, t, u, v;
    two_sum(ch, p, s, t);
    two_sum(cl, e, u, v);
    t += u;
    fast_two_sum(s, t, s, t);
    t += v;
    fast_two_sum(s, t, ch, cl);
}

extern "C" __global__ void __launch_bounds__(TX * TY)
dd_zgemm_fma(const double *__restrict__ a_hi, const double *__restrict__ a_lo,
             const double *__restrict__ b_hi, const double *__restrict__ b_lo,
             double *__restrict__ c_hi, double *__restrict__ c_lo, int M, int N, int K) {
    __shared__ cdd As[BK][BM];
    __shared__ cdd Bs[BK][BN];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * TX + tx;
    const int row0 = blockIdx.x * BM, col0 = blockIdx.y * BN;  // rows on x: up to 2^31 - 1 blocks
    double acc[2][2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0;

    for (int k0 = 0; k0 < K; k0 += BK) {
        {   // A tile: BM rows x BK columns, one element per thread
            const int r = tid / BK, kk = tid % BK;
            const int gr = row0 + r, gk = k0 + kk;
            cdd v = {0.0, 0.0, 0.0, 0.0};
            if (gr < M && gk < K) {
                const unsigned long long idx = ((unsigned long long)gr * K + gk) * 2;
                v.rh = a_hi[idx]; v.ih = a_hi[idx + 1];
                v.rl = a_lo[idx]; v.il = a_lo[idx + 1];
            }
            As[kk][r] = v;
        }
        {   // B tile: BK rows x BN columns
            const int kk = tid / BN, c = tid % BN;
            const int gk = k0 + kk, gc = col0 + c;
            cdd v = {0.0, 0.0, 0.0, 0.0};
            if (gk < K && gc < N) {
                const unsigned long long idx = ((unsigned long long)gk * N + gc) * 2;
                v.rh = b_hi[idx]; v.ih = b_hi[idx + 1];
                v.rl = b_lo[idx]; v.il = b_lo[idx + 1];
            }
            Bs[kk][c] = v;
        }
        __syncthreads();
#pragma unroll 2
        for (int kk = 0; kk < BK; ++kk) {
            cdd a[2], b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) a[i] = As[kk][ty + TY * i];
#pragma unroll
            for (int j = 0; j < 2; ++j) b[j] = Bs[kk][tx + TX * j];
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    double *c = acc[i][j];
                    // re += ar*br - ai*bi ; im += ar*bi + ai*br
                    dd_mac(c[0], c[1], a[i].rh, a[i].rl, b[j].rh, b[j].rl);
                    dd_mac(c[0], c[1], -a[i].ih, -a[i].il, b[j].ih, b[j].il);
                    dd_mac(c[2], c[3], a[i].rh, a[i].rl, b[j].ih, b[j].il);
                    dd_mac(c[2], c[3], a[i].ih, a[i].il, b[j].rh, b[j].rl);
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int gr = row0 + ty + TY * i, gc = col0 + tx + TX * j;
            if (gr < M && gc < N) {
                const unsigned long long idx = ((unsigned long long)gr * N + gc) * 2;
                c_hi[idx] = acc[i][j][0];
                c_lo[idx] = acc[i][j][1];
                c_hi[idx + 1] = acc[i][j][2];
                c_lo[idx + 1] = acc[i][j][3];
            }
        }
}
