// Kernels of the CRT scheme (gemm/ozaki/crt/gpu.py loads this file with cupy.RawModule, built with
// --fmad=false so that no multiply-add is contracted: every step below is the numpy operation of
// gemm/ozaki/crt/cpu.py and scale.py in the same order, and the results are bit-identical).
//
// An operand is read through a "line" view: line n = (n / n_in, n % n_in) at element offset
// (n / n_in) * s_out + (n % n_in) * s_in, element k of the line at + k * s_k (offsets count
// scalars for real operands and complex numbers for complex ones).

#define G_SHIFT 16                 // scale.G
#define DCAP 256                   // scale.DCAP
#define ZERO_LINE (-(1 << 30))     // scale.ZERO_LINE
#define WMAX 5                     // words of P (moduli.MAX_MODULI * 8 bits / moduli.D)
#define D_BITS 38                  // moduli.D
#define TABLE 8                    // doubles per modulus in the constant table
#define INT_LOW (-2147483647 - 1)

// form codes (gpu.FORM_CODE)
#define F_REAL 0
#define F_4M 1
#define F_3M 2
#define F_2M 3

__device__ __forceinline__ long long elem_offset(long long line, long long k, long long s_out, long long s_in,
                                                 long long s_k, long long n_in) {
    long long o = line / n_in;
    long long i = line - o * n_in;
    return o * s_out + i * s_in + k * s_k;
}

__device__ __forceinline__ int frexp_exp(double v) {
    int e;
    frexp(v, &e);
    return e;
}

// ---------------------------------------------------------------- norm exponents (scale.line_exponents)

// One line's E by `width` cooperating threads (a warp, or one thread); every thread ends with E.
template <int WIDTH>
__device__ void line_exponent(const double* __restrict__ x, long long line, int K, int cplx, long long s_out,
                              long long s_in, long long s_k, long long n_in, int lane, int want_hist,
                              unsigned int* sh_hist, unsigned long long* bad_total, int* E_out) {
    const unsigned full = 0xffffffffu;
    int emax = INT_LOW;
    unsigned int bad = 0;
    const int nv = cplx ? 2 : 1;
    for (int k = lane; k < K; k += WIDTH) {
        const long long off = elem_offset(line, k, s_out, s_in, s_k, n_in);
        for (int p = 0; p < nv; ++p) {
            const double v = cplx ? x[2 * off + p] : x[off];
            if (!isfinite(v)) {
                ++bad;
            } else if (v != 0.0) {
                emax = max(emax, frexp_exp(v));
            }
        }
    }
    if (WIDTH == 32) {
        for (int o = 16; o > 0; o >>= 1) {
            emax = max(emax, __shfl_xor_sync(full, emax, o));
            bad += __shfl_xor_sync(full, bad, o);
        }
    }
    if (bad) {
        if (lane == 0) {
            atomicAdd(bad_total, (unsigned long long)bad);
            *E_out = 0;
        }
        return;
    }
    if (emax == INT_LOW) {
        if (lane == 0) *E_out = ZERO_LINE;
        return;
    }
    unsigned long long sigma = 0;
    for (int k = lane; k < K; k += WIDTH) {
        const long long off = elem_offset(line, k, s_out, s_in, s_k, n_in);
        for (int p = 0; p < nv; ++p) {
            const double v = cplx ? x[2 * off + p] : x[off];
            if (v == 0.0) continue;
            const int e = frexp_exp(v);
            const int g = e - emax + G_SHIFT;
            if (g >= 0) {
                const unsigned long long m = (unsigned long long)ceil(ldexp(fabs(v), 4 - e));
                sigma += (m * m) << (2 * g);
            } else {
                sigma += 64ull;
            }
        }
    }
    if (WIDTH == 32) {
        for (int o = 16; o > 0; o >>= 1) sigma += __shfl_xor_sync(full, sigma, o);
    }
    const int bl = sigma > 1 ? 64 - __clzll(sigma - 1) : 0;  // bit_length(sigma - 1)
    const int E = emax - G_SHIFT - 4 + (bl + 1) / 2;
    if (lane == 0) *E_out = E;
    if (!want_hist) return;
    for (int k = lane; k < K; k += WIDTH) {
        const long long off = elem_offset(line, k, s_out, s_in, s_k, n_in);
        for (int p = 0; p < nv; ++p) {
            const double v = cplx ? x[2 * off + p] : x[off];
            if (v == 0.0) continue;
            int d = E - frexp_exp(v);
            d = d < 0 ? 0 : (d > DCAP ? DCAP : d);
            atomicAdd(&sh_hist[d], 1u);
        }
    }
}

// stats: [0] NaN/Inf count, [1 .. DCAP + 1] depth histogram. K-major lines: a warp per line.
extern "C" __global__ void crt_line_exponents_warp(const double* __restrict__ x, long long s_out, long long s_in,
                                                   long long s_k, long long n_in, long long nlines, int K, int cplx,
                                                   int want_hist, int* __restrict__ E,
                                                   unsigned long long* __restrict__ stats) {
    __shared__ unsigned int sh_hist[DCAP + 1];
    for (int i = threadIdx.x; i <= DCAP; i += blockDim.x) sh_hist[i] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    for (long long line = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; line < nlines; line += warps) {
        line_exponent<32>(x, line, K, cplx, s_out, s_in, s_k, n_in, lane, want_hist, sh_hist, &stats[0], &E[line]);
    }
    __syncthreads();
    if (want_hist)
        for (int i = threadIdx.x; i <= DCAP; i += blockDim.x)
            if (sh_hist[i]) atomicAdd(&stats[1 + i], (unsigned long long)sh_hist[i]);
}

// Lines whose elements are strided (adjacent lines adjacent in memory): a thread per line.
extern "C" __global__ void crt_line_exponents_thread(const double* __restrict__ x, long long s_out, long long s_in,
                                                     long long s_k, long long n_in, long long nlines, int K, int cplx,
                                                     int want_hist, int* __restrict__ E,
                                                     unsigned long long* __restrict__ stats) {
    __shared__ unsigned int sh_hist[DCAP + 1];
    for (int i = threadIdx.x; i <= DCAP; i += blockDim.x) sh_hist[i] = 0;
    __syncthreads();
    const long long threads = (long long)gridDim.x * blockDim.x;
    for (long long line = blockIdx.x * (long long)blockDim.x + threadIdx.x; line < nlines; line += threads) {
        line_exponent<1>(x, line, K, cplx, s_out, s_in, s_k, n_in, 0, want_hist, sh_hist, &stats[0], &E[line]);
    }
    __syncthreads();
    if (want_hist)
        for (int i = threadIdx.x; i <= DCAP; i += blockDim.x)
            if (sh_hist[i]) atomicAdd(&stats[1 + i], (unsigned long long)sh_hist[i]);
}

// ---------------------------------------------------------------- residues (cpu.residues)

__device__ __forceinline__ double mod_p(double v, double p, double inv_p) {
    const double q = floor(v * inv_p);
    double r = v - q * p;
    if (r < 0.0) r += p;
    if (r >= p) r -= p;
    return r;
}

__device__ __forceinline__ double sym_p(double r, double p) { return r > floor((p - 1.0) / 2.0) ? r - p : r; }

// residue of an exact integer split as hi * 2^40 + lo
__device__ __forceinline__ double residue(double hi, double lo, double p, double inv_p, double c40) {
    return sym_p(mod_p(mod_p(hi, p, inv_p) * c40 + mod_p(lo, p, inv_p), p, inv_p), p);
}

// A 32-line x 32-k tile per block (32 x 8 threads): the scaled integers go through shared memory
// so that reads follow the operand's layout and int8 writes run along k.
// out: int8 (n, G, lines_out, kp) for the block's lines; lines_out = nlines (x2 for 4m B lines).
extern "C" __global__ void crt_residues(const double* __restrict__ x, long long s_out, long long s_in, long long s_k,
                                        long long n_in, long long line0, long long nlines, int K, int cplx,
                                        int kmajor, const int* __restrict__ E, int bits,
                                        const double* __restrict__ table, int n, int form, int role,
                                        signed char* __restrict__ out, long long lines_out, int kp) {
    __shared__ double hi_s[2][32][33];
    __shared__ double lo_s[2][32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long lbase = (long long)blockIdx.x * 32;
    const int kbase = blockIdx.y * 32;
    for (int j = ty; j < 32; j += 8) {
        const int li = kmajor ? j : tx;  // tile line
        const int ki = kmajor ? tx : j;  // tile k
        const long long l = lbase + li;
        const int k = kbase + ki;
        double v[2] = {0.0, 0.0};
        int shift = 0;
        if (l < nlines && k < K) {
            const long long off = elem_offset(line0 + l, k, s_out, s_in, s_k, n_in);
            if (cplx) {
                v[0] = x[2 * off];
                v[1] = x[2 * off + 1];
            } else {
                v[0] = x[off];
            }
            const int e = E[line0 + l];
            shift = e == ZERO_LINE ? 0 : bits - e;
        }
        for (int p = 0; p < 2; ++p) {
            const double t = trunc(ldexp(v[p], shift));
            const double h = floor(t * (1.0 / 1099511627776.0));  // 2^-40
            hi_s[p][li][ki] = h;
            lo_s[p][li][ki] = t - h * 1099511627776.0;
        }
    }
    __syncthreads();
    const int k = kbase + tx;
    if (k >= K) return;
    const int G = form == F_3M ? 3 : (form == F_2M ? 2 : 1);
    const long long slab = lines_out * (long long)kp;
    for (int j = ty; j < 32; j += 8) {
        const long long l = lbase + j;
        if (l >= nlines) break;
        for (int i = 0; i < n; ++i) {
            const double p = table[i * TABLE], inv_p = table[i * TABLE + 1], c40 = table[i * TABLE + 2];
            const double s = table[i * TABLE + 3];
            const double rr = residue(hi_s[0][j][tx], lo_s[0][j][tx], p, inv_p, c40);
            signed char* o = out + (long long)i * G * slab;
            if (form == F_REAL) {
                o[l * kp + k] = (signed char)rr;
                continue;
            }
            const double ri = residue(hi_s[1][j][tx], lo_s[1][j][tx], p, inv_p, c40);
            if (form == F_4M) {
                if (role == 0) {
                    o[l * kp + k] = (signed char)rr;
                    o[l * kp + K + k] = (signed char)ri;
                } else {
                    const double nri = sym_p(mod_p(-ri, p, 1.0 / p), p);
                    o[(2 * l) * kp + k] = (signed char)rr;
                    o[(2 * l) * kp + K + k] = (signed char)nri;
                    o[(2 * l + 1) * kp + k] = (signed char)ri;
                    o[(2 * l + 1) * kp + K + k] = (signed char)rr;
                }
            } else if (form == F_3M) {
                o[l * kp + k] = (signed char)rr;
                o[slab + l * kp + k] = (signed char)ri;
                o[2 * slab + l * kp + k] = (signed char)sym_p(mod_p(rr + ri, p, inv_p), p);
            } else {
                o[l * kp + k] = (signed char)sym_p(mod_p(rr + s * ri, p, inv_p), p);
                o[slab + l * kp + k] = (signed char)sym_p(mod_p(rr - s * ri, p, inv_p), p);
            }
        }
    }
}

// ---------------------------------------------------------------- reconstruction (cpu.crt_digits + cpu.finish)

__device__ __forceinline__ double combine(const int* __restrict__ P, long long base, long long slab, int form,
                                          int part) {
    if (form == F_REAL) return (double)P[base];
    if (form == F_4M) return (double)P[base + part];
    if (form == F_3M) {
        const double p0 = (double)P[base], p1 = (double)P[base + slab];
        return part == 0 ? p0 - p1 : (double)P[base + 2 * slab] - p0 - p1;
    }
    const double p0 = (double)P[base], p1 = (double)P[base + slab];
    return part == 0 ? p0 + p1 : p0 - p1;
}

__device__ __forceinline__ void carry(double& lo_word, double& hi_word) {
    const double c = rint(lo_word * (1.0 / 274877906944.0));  // 2^-38
    lo_word = lo_word - c * 274877906944.0;
    hi_word = hi_word + c;
}

__device__ __forceinline__ void two_sum_add(double& hi, double& lo, double x) {
    const double s = hi + x;
    const double bb = s - hi;
    lo = lo + ((hi - (s - bb)) + (x - bb));
    hi = s;
}

// The CRT words of one part of one element (cpu.crt_digits then the first step of cpu.finish).
struct Words {
    double S0, S1, S2, S3, S4, qsum;
};

__device__ __forceinline__ void add_digit(Words& a, double t, double inv_p, const double* __restrict__ d, int W) {
    a.qsum = a.qsum + t * inv_p;
    a.S0 = a.S0 + t * d[0];  // exact: every partial sum is an integer < 2^51
    if (W > 1) a.S1 = a.S1 + t * d[1];
    if (W > 2) a.S2 = a.S2 + t * d[2];
    if (W > 3) a.S3 = a.S3 + t * d[3];
    if (W > 4) a.S4 = a.S4 + t * d[4];
}

// cpu.finish: subtract q P, carry, sum the words most significant first (TwoSum), round once, scale.
// The W <= 5 words are scalars (an array indexed at run time would live in local memory); the
// factors 2^(38 w) are exact, as numpy's ldexp(S_w, 38 w).
__device__ double finish(Words a, const double* __restrict__ dp, int W, int shift) {
    const double q = rint(a.qsum);
    a.S0 = a.S0 - q * dp[0];
    if (W > 1) a.S1 = a.S1 - q * dp[1];
    if (W > 2) a.S2 = a.S2 - q * dp[2];
    if (W > 3) a.S3 = a.S3 - q * dp[3];
    if (W > 4) a.S4 = a.S4 - q * dp[4];
    if (W > 1) carry(a.S0, a.S1);
    if (W > 2) carry(a.S1, a.S2);
    if (W > 3) carry(a.S2, a.S3);
    if (W > 4) carry(a.S3, a.S4);
    const double X1 = 274877906944.0, X2 = 75557863725914323419136.0;  // 2^38, 2^76
    const double X3 = 2.0769187434139310514121985316880384e34, X4 = 5.708990770823839524233143877797980545530986496e45;
    double hi = W == 5 ? a.S4 * X4 : (W == 4 ? a.S3 * X3 : (W == 3 ? a.S2 * X2 : (W == 2 ? a.S1 * X1 : a.S0)));
    double lo = 0.0;
    if (W >= 5) two_sum_add(hi, lo, a.S3 * X3);
    if (W >= 4) two_sum_add(hi, lo, a.S2 * X2);
    if (W >= 3) two_sum_add(hi, lo, a.S1 * X1);
    if (W >= 2) two_sum_add(hi, lo, a.S0);
    return ldexp(hi + lo, -shift);
}

// P: int32 (n, G, rows, ldP); a thread per output element of the block; out in its final layout:
// element (r, c) of the (R, NC) line product at (c / n2) * R * n2 + r * n2 + c % n2 (B stacked:
// n2 = its last dimension; otherwise n2 = NC).
extern "C" __global__ void crt_reconstruct(const int* __restrict__ P, int rows, int cols, int ldP, int n, int form,
                                           int cplx, const double* __restrict__ table, const double* __restrict__ dm,
                                           const double* __restrict__ dp, int W, const int* __restrict__ EA,
                                           const int* __restrict__ EB, int alpha, int beta, long long r0, long long c0,
                                           double* __restrict__ out, long long R, long long n2) {
    const int G = form == F_3M ? 3 : (form == F_2M ? 2 : 1);
    const long long slab = (long long)rows * ldP;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const int ea = EA[r0 + r], eb = EB[c0 + c];
        const int shift = (ea == ZERO_LINE ? 0 : alpha - ea) + (eb == ZERO_LINE ? 0 : beta - eb);
        const long long base = (long long)r * ldP + (form == F_4M ? 2LL * c : (long long)c);
        const long long cg = c0 + c, rg = r0 + r;
        const long long idx = (cg / n2) * R * n2 + rg * n2 + cg % n2;
        Words wr = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, wi = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        for (int i = 0; i < n; ++i) {  // every modulus' products read once for Re and Im
            const double p = table[i * TABLE], inv_p = table[i * TABLE + 1];
            const long long bi = base + (long long)i * G * slab;
            const double* d = dm + i * W;
            const double yr = table[i * TABLE + (form == F_2M ? 5 : 4)];
            add_digit(wr, mod_p(mod_p(combine(P, bi, slab, form, 0), p, inv_p) * yr, p, inv_p), inv_p, d, W);
            if (cplx) {
                const double yi = table[i * TABLE + (form == F_2M ? 6 : 4)];
                add_digit(wi, mod_p(mod_p(combine(P, bi, slab, form, 1), p, inv_p) * yi, p, inv_p), inv_p, d, W);
            }
        }
        if (cplx) {
            out[2 * idx] = finish(wr, dp, W, shift);
            out[2 * idx + 1] = finish(wi, dp, W, shift);
        } else {
            out[idx] = finish(wr, dp, W, shift);
        }
    }
}
