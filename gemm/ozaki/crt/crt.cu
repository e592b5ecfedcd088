// Kernels of the CRT scheme (gemm/ozaki/crt/gpu.py loads this file with cupy.RawModule, built with
// --fmad=false so that no multiply-add is contracted behind our back; every fused multiply-add below
// is an explicit __fmaf_rn / __fma_rn whose result is exact). The results are bit-identical to
// gemm/ozaki/crt/cpu.py and scale.py:
//
// * the line exponents repeat the integer computation of scale.line_exponents;
// * residues are residues of exact integers, unique in their canonical range, so any exact method
//   gives the CPU's values; here they are FP32 arithmetic with a few integer operations (an H100
//   issues FP32 at twice the FP64 and INT32 rates, and the FP64 path took several floor / mod
//   steps per residue), every intermediate an integer below 2^24 and so exact in FP32 (the bounds
//   are stated at each step);
// * the reconstruction's words are exact integer sums; the products' residues may be other
//   representatives than the CPU's (and its quotient q is rounded differently), but once q P is
//   taken off and the carries balance them the words are the unique digits of the exact product
//   C', and the final word sum in finish() repeats the CPU's operations in order.
//
// An operand is read through a "line" view: line n = (n / n_in, n % n_in) at element offset
// (n / n_in) * s_out + (n % n_in) * s_in, element k of the line at + k * s_k (offsets count
// scalars for real operands and complex numbers for complex ones).

#define G_SHIFT 16                 // scale.G
#define DCAP 256                   // scale.DCAP
#define ZERO_LINE (-(1 << 30))     // scale.ZERO_LINE
#define WMAX 5                     // words of P (moduli.MAX_MODULI * 8 bits / moduli.D)
#define D_BITS 38                  // moduli.D
#define MAXN 20                    // moduli.MAX_MODULI
#define FT 16                      // floats per modulus in the FP32 table (gpu._ftable)
#define DIGIT 14                   // bits per digit of a scaled integer (gpu.RES_DIGIT)
#define JMAX 6                     // digits of the largest scaled integer (gpu.RES_JMAX)
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

// An element's depth below its line's bound, clamped to the histogram (scale.line_exponents).
__device__ __forceinline__ int depth(int E, int e) {
    const int d = E - e;
    return d < 0 ? 0 : (d > DCAP ? DCAP : d);
}

// Count `key` (a depth, or -1 for nothing) in the shared histogram, one atomic per distinct key
// among the lanes that arrive together. Why: the lanes of a warp mostly hold elements of similar
// magnitude, and 32 atomics on one shared word serialize (the histogram pass had cost more than
// reading the operand).
__device__ __forceinline__ void hist_add(unsigned int* sh_hist, int key) {
    const unsigned peers = __match_any_sync(__activemask(), key);
    if (key >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&sh_hist[key], (unsigned)__popc(peers));
}

// A block's shared histogram: cleared at the start (a barrier must follow before its first use),
// added to the operand's totals (stats[1 ..]) at the end, after a barrier.
__device__ __forceinline__ void hist_clear(unsigned int* sh_hist) {
    for (int i = threadIdx.x; i <= DCAP; i += blockDim.x) sh_hist[i] = 0;
}
__device__ __forceinline__ void hist_flush(const unsigned int* sh_hist, int want_hist, unsigned long long* stats) {
    if (want_hist)
        for (int i = threadIdx.x; i <= DCAP; i += blockDim.x)
            if (sh_hist[i]) atomicAdd(&stats[1 + i], (unsigned long long)sh_hist[i]);
}

// m = ceil(|v| 2^(4 - e)) of scale.line_exponents for a nonzero finite v with frexp exponent e:
// for a normal v, |v| = f 2^(e - 53) with the 53-bit significand f, so m = ceil(f / 2^49) from
// integers; subnormals take the FP64 path (the same value).
__device__ __forceinline__ unsigned long long mant4(double v, int e) {
    const unsigned long long b = (unsigned long long)__double_as_longlong(v);
    if (((b >> 52) & 0x7ff) == 0) return (unsigned long long)ceil(ldexp(fabs(v), 4 - e));
    const unsigned long long f = (b & 0xFFFFFFFFFFFFFull) | (1ull << 52);
    return (f + ((1ull << 49) - 1)) >> 49;
}

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
                const unsigned long long m = mant4(v, e);
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
            hist_add(sh_hist, v == 0.0 ? -1 : depth(E, frexp_exp(v)));
        }
    }
}

// WIDTH cooperating threads per line (a warp, or one thread), the block's lines in turn.
// stats: [0] NaN/Inf count, [1 .. DCAP + 1] depth histogram.
template <int WIDTH>
__device__ void line_exponents_lines(const double* __restrict__ x, long long s_out, long long s_in, long long s_k,
                                     long long n_in, long long nlines, int K, int cplx, int want_hist,
                                     int* __restrict__ E, unsigned long long* __restrict__ stats) {
    __shared__ unsigned int sh_hist[DCAP + 1];
    hist_clear(sh_hist);
    __syncthreads();
    const int lane = threadIdx.x % WIDTH;
    const long long step = (long long)gridDim.x * (blockDim.x / WIDTH);
    for (long long line = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / WIDTH; line < nlines; line += step) {
        line_exponent<WIDTH>(x, line, K, cplx, s_out, s_in, s_k, n_in, lane, want_hist, sh_hist, &stats[0], &E[line]);
    }
    __syncthreads();
    hist_flush(sh_hist, want_hist, stats);
}

// K-major lines: a warp per line.
extern "C" __global__ void crt_line_exponents_warp(const double* __restrict__ x, long long s_out, long long s_in,
                                                   long long s_k, long long n_in, long long nlines, int K, int cplx,
                                                   int want_hist, int* __restrict__ E,
                                                   unsigned long long* __restrict__ stats) {
    line_exponents_lines<32>(x, s_out, s_in, s_k, n_in, nlines, K, cplx, want_hist, E, stats);
}

// Lines whose elements are strided (adjacent lines adjacent in memory): a thread per line.
extern "C" __global__ void crt_line_exponents_thread(const double* __restrict__ x, long long s_out, long long s_in,
                                                     long long s_k, long long n_in, long long nlines, int K, int cplx,
                                                     int want_hist, int* __restrict__ E,
                                                     unsigned long long* __restrict__ stats) {
    line_exponents_lines<1>(x, s_out, s_in, s_k, n_in, nlines, K, cplx, want_hist, E, stats);
}

// Contiguous lines (K-major, unit k stride): a block of LB_THREADS per line, each thread holding
// PER of the line's values (real, or Re and Im interleaved) in registers across the three steps
// (largest exponent, Sigma, depths), so the operand is read from memory once; the warp kernel
// read each line three times (the last two mostly from L2). With PER <= 8 the next line's values
// are loaded while this one is worked on. The scale stage of a complex d = 10 gate at 28 qubits
// on an H200: 3.68 -> 2.12 ms (with the histogram's per-key atomics, hist_add).
#define LB_THREADS 256
#define LB_WARPS (LB_THREADS / 32)

template <int PER>
__device__ __forceinline__ void load_line(const double* __restrict__ x, long long line, long long s_out,
                                          long long s_in, long long n_in, int nv, int n, double (&v)[PER]) {
    const long long q = line / n_in;
    const double* xl = x + (q * s_out + (line - q * n_in) * s_in) * nv;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int idx = threadIdx.x + LB_THREADS * j;
        v[j] = idx < n ? xl[idx] : 0.0;
    }
}

template <int PER>
__device__ void line_exponents_block(const double* __restrict__ x, long long s_out, long long s_in, long long n_in,
                                     long long nlines, int K, int cplx, int want_hist, int* __restrict__ E,
                                     unsigned long long* __restrict__ stats) {
    constexpr bool PREFETCH = PER <= 8;
    __shared__ unsigned int sh_hist[DCAP + 1];
    __shared__ int s_emax[LB_WARPS];
    __shared__ unsigned int s_bad[LB_WARPS];
    __shared__ unsigned long long s_sig[LB_WARPS];
    const unsigned full = 0xffffffffu;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    hist_clear(sh_hist);
    const int nv = cplx ? 2 : 1;
    const int n = K * nv;  // doubles of a line
    double v[PER], nx[PER];
    if (PREFETCH && blockIdx.x < nlines) load_line<PER>(x, blockIdx.x, s_out, s_in, n_in, nv, n, v);
    for (long long line = blockIdx.x; line < nlines; line += gridDim.x) {
        if (PREFETCH) {
            if (line + gridDim.x < nlines) load_line<PER>(x, line + gridDim.x, s_out, s_in, n_in, nv, n, nx);
        } else {
            load_line<PER>(x, line, s_out, s_in, n_in, nv, n, v);
        }
        int e[PER];
        int emax = INT_LOW;
        unsigned int bad = 0;
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            e[j] = frexp_exp(v[j]);
            if (!isfinite(v[j])) ++bad;
            else if (v[j] != 0.0) emax = max(emax, e[j]);
        }
        for (int o = 16; o > 0; o >>= 1) {
            emax = max(emax, __shfl_xor_sync(full, emax, o));
            bad += __shfl_xor_sync(full, bad, o);
        }
        if (lane == 0) {
            s_emax[warp] = emax;
            s_bad[warp] = bad;
        }
        __syncthreads();  // (the first time also: the histogram is cleared)
        emax = s_emax[0];
        bad = s_bad[0];
#pragma unroll
        for (int w = 1; w < LB_WARPS; ++w) {
            emax = max(emax, s_emax[w]);
            bad += s_bad[w];
        }
        unsigned long long sigma = 0;
        const bool live = !bad && emax != INT_LOW;  // block-uniform
        if (live) {
#pragma unroll
            for (int j = 0; j < PER; ++j) {
                if (v[j] == 0.0) continue;
                const int g = e[j] - emax + G_SHIFT;
                if (g >= 0) {
                    const unsigned long long m = mant4(v[j], e[j]);
                    sigma += (m * m) << (2 * g);
                } else {
                    sigma += 64ull;
                }
            }
            for (int o = 16; o > 0; o >>= 1) sigma += __shfl_xor_sync(full, sigma, o);
            if (lane == 0) s_sig[warp] = sigma;
        }
        __syncthreads();  // (s_emax and s_bad have been read: the next line may write them)
        if (live) {
            sigma = 0;
#pragma unroll
            for (int w = 0; w < LB_WARPS; ++w) sigma += s_sig[w];
            const int bl = sigma > 1 ? 64 - __clzll(sigma - 1) : 0;  // bit_length(sigma - 1)
            const int El = emax - G_SHIFT - 4 + (bl + 1) / 2;
            if (tid == 0) E[line] = El;
            if (want_hist) {
#pragma unroll
                for (int j = 0; j < PER; ++j) hist_add(sh_hist, v[j] == 0.0 ? -1 : depth(El, e[j]));
            }
        } else if (tid == 0) {
            if (bad) atomicAdd(&stats[0], (unsigned long long)bad);
            E[line] = bad ? 0 : ZERO_LINE;
        }
        if (PREFETCH) {
#pragma unroll
            for (int j = 0; j < PER; ++j) v[j] = nx[j];
        }
    }
    __syncthreads();
    hist_flush(sh_hist, want_hist, stats);
}

// One entry point per PER (gpu.line_exponents picks the smallest with PER * LB_THREADS >= the
// line's doubles).
#define CRT_LINE_BLOCK(PER)                                                                                          \
    extern "C" __global__ void __launch_bounds__(LB_THREADS) crt_line_exponents_block_##PER(                          \
        const double* __restrict__ x, long long s_out, long long s_in, long long n_in, long long nlines, int K,       \
        int cplx, int want_hist, int* __restrict__ E, unsigned long long* __restrict__ stats) {                      \
        line_exponents_block<PER>(x, s_out, s_in, n_in, nlines, K, cplx, want_hist, E, stats);                      \
    }
CRT_LINE_BLOCK(2)
CRT_LINE_BLOCK(4)
CRT_LINE_BLOCK(8)
CRT_LINE_BLOCK(16)
CRT_LINE_BLOCK(32)

// ---------------------------------------------------------------- exact small integers in FP32

#define MAGIC 12582912.0f   // 1.5 * 2^23: in [2^23, 2^24) the FP32 spacing is 1
#define TWO23 8388608.0f    // 2^23

// The FP32 table (gpu._ftable), FT floats per modulus p, every residue in the symmetric range
// (magnitude <= p/2 <= 128, exact in FP32):
//   [0] p   [1] inv_p = 1/p rounded to FP32   [3] s, s^2 = -1 (split; else 0)   [7] 2^16 mod p
//   [8 + j] 2^(14 j) mod p, j = 0..7   ([2], [4] - [6] unused, 0)

// r = x - p rint(x / p) for an integer x, |x| < 2^23 (exact in FP32).
// z = fma(x, inv_p, 1.5 * 2^23) rounds the exact x * inv_p once, to an integer (the spacing in
// [2^23, 2^24) is 1; |x * inv_p| < 2^22 since every modulus exceeds 2), so q = z - 1.5 * 2^23 = rint(x * inv_p) exactly.
// That is rint(x / p): with 2^(b-1) < p <= 2^b, inv_p is off 1/p by at most 2^(-b-24), so
// |x * inv_p - x / p| < 2^23 * 2^(-b-24) <= 1 / (2p), while for odd p x / p lies at least 1 / (2p)
// from every half-integer (x / p - k - 1/2 = (2x - (2k + 1) p) / (2p), an odd numerator): both
// round to the same integer and r is in [-(p-1)/2, (p-1)/2], the symmetric range. For p = 256,
// inv_p = 2^-8 is exact and rint's ties go to even: r is in [-128, 128], 128 = -128 (mod 256) the
// one value outside the symmetric range; to_byte wraps it to -128, and every other use needs only
// a representative. fma(-q, p, x) is exact: the result is the integer r and |q p| < 2^24.
// (Checked against exact integers for every |x| < 2^23 and every modulus of both families.)
__device__ __forceinline__ float red_sym(float x, float p, float inv_p) {
    const float q = __fadd_rn(__fmaf_rn(x, inv_p, MAGIC), -MAGIC);
    return __fmaf_rn(-q, p, x);
}

// The INT8 of a residue r in [-128, 128]: r + 1.5 * 2^23 is exact and its bit pattern is
// 0x4B400000 + r, whose low byte is r mod 256 (two's complement): r itself in [-128, 127] (every
// residue of an odd p), and 128 -> -128, the symmetric residue of 128 modulo 256.
__device__ __forceinline__ unsigned to_byte(float r) { return __float_as_uint(__fadd_rn(r, MAGIC)); }

// four bytes (the low byte of each word), a in the lowest address
__device__ __forceinline__ unsigned pack4(unsigned a, unsigned b, unsigned c, unsigned d) {
    return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// The residue and reconstruction kernels exist in the modules built with REC_FORM and REC_W
// (gpu._module_defines: a module per complex form and word count, both compile-time in them); the
// line exponents' module, built without, has only the kernels above.
#ifdef REC_FORM
#ifndef REC_W
#error "REC_FORM needs REC_W (gpu._module_defines)"
#endif

// ---------------------------------------------------------------- residues (cpu.residues)

// The two residue kernels' common steps. tile_line: line lbase + i of the block (i < its tile's
// lines) as its element offset (line l = q n_in + r sits at q s_out + r s_in) and its shift
// bits - E[l] (0 for a zero line); tile_value: element k of a line at offset off (Re, Im; zeros
// past the operand), as one 16-byte load where the complex data is aligned.
__device__ __forceinline__ void tile_line(int i, long long line0, long long lbase, long long nlines, long long n_in,
                                          long long s_out, long long s_in, const int* __restrict__ E, int bits,
                                          long long* lb_s, int* sh_s) {
    const long long l = line0 + lbase + i;
    long long o = 0;
    int sh = 0;
    if (lbase + i < nlines) {
        const long long q = l / n_in;
        o = q * s_out + (l - q * n_in) * s_in;
        const int e = E[l];
        sh = e == ZERO_LINE ? 0 : bits - e;
    }
    lb_s[i] = o;
    sh_s[i] = sh;
}
__device__ __forceinline__ void tile_value(const double* __restrict__ x, bool cplx, bool v2, bool live, long long off,
                                           double& re, double& im) {
    re = 0.0;
    im = 0.0;
    if (!live) return;
    if (!cplx) {
        re = x[off];
    } else if (v2) {
        const double2 z = reinterpret_cast<const double2*>(x)[off];
        re = z.x;
        im = z.y;
    } else {
        re = x[2 * off];
        im = x[2 * off + 1];
    }
}


// The scaled integer |t| = trunc(|v| 2^shift) of scale.scaled_integers, as J digits of DIGIT = 14
// bits: |t| = sum_j d_j 2^(14 j), d_0 .. d_(J-2) balanced in [-2^13, 2^13), d_(J-1) in [0, 2^14]
// (|t| < 2^(14 J): gpu.residues picks J = ceil((bits + 1) / 14), and |t| <= 2^bits since the
// line's 2-norm is). The digits come out with t's sign, as exact FP32 integers.
//
// |t| from the bits of v: |v| = m 2^(e - shift) with the 53-bit m, so |t| = m << e or m >> -e (a
// power-of-two scaling is exact, and trunc(ldexp(v, shift)) drops the same bits; a value below 1
// gives 0 both ways), held as 128 bits (hi, lo). Adding B = sum_(j < J-1) 2^13 2^(14 j) makes every
// 14-bit field f_j of |t| + B non-negative with d_j = f_j - 2^13 (the top field takes the carry).
// A field goes to FP32 through the bits of 2^23 + f_j (or of -(2^23 + f_j) for negative t), less
// the constant: exact, and no conversion instruction.
template <int J>
struct Bias {  // B as (hi, lo)
    __host__ __device__ static constexpr unsigned long long lo() {
        unsigned long long r = 0;
        for (int j = 0; j < J - 1; ++j)
            if (DIGIT * j + DIGIT - 1 < 64) r |= 1ull << (DIGIT * j + DIGIT - 1);
        return r;
    }
    __host__ __device__ static constexpr unsigned long long hi() {
        unsigned long long r = 0;
        for (int j = 0; j < J - 1; ++j)
            if (DIGIT * j + DIGIT - 1 >= 64) r |= 1ull << (DIGIT * j + DIGIT - 1 - 64);
        return r;
    }
};

template <int S>  // bits [S, S + 32) of (hi, lo)
__device__ __forceinline__ unsigned field(unsigned long long lo, unsigned long long hi) {
    if constexpr (S == 0) {
        return (unsigned)lo;
    } else if constexpr (S < 64) {
        return (unsigned)((lo >> S) | (hi << (64 - S)));
    } else {
        return (unsigned)(hi >> (S - 64));
    }
}

// |t| = trunc(m 2^e) as 128 bits (hi, lo) for a 53-bit m. |t| <= 2^bits < 2^80 bounds e by
// bits - log2(m): up to 27 for a normal m, but up to 79 for a subnormal one (a line of subnormals
// scaled to 77 bits), so shifts past 64 go to the high word.
__device__ __forceinline__ void magnitude128(unsigned long long m, int e, unsigned long long& lo,
                                             unsigned long long& hi) {
    lo = 0;
    hi = 0;
    if (e >= 64) {
        hi = m << (e - 64);  // e - 64 < 16: m < 2^53 and |t| < 2^80
    } else if (e > 0) {
        lo = m << e;
        hi = m >> (64 - e);
    } else if (e > -64) {
        lo = m >> -e;  // trunc toward zero of the magnitude
    }
}

template <int J, int j>
__device__ __forceinline__ void put_digits(unsigned long long lo, unsigned long long hi, unsigned sbits, float off,
                                           float off_top, float (&d)[J]) {
    if constexpr (j < J) {
        const unsigned f = field<DIGIT * j>(lo, hi) & (j < J - 1 ? 0x3fffu : 0x7fffffu);
        d[j] = __fadd_rn(__uint_as_float(sbits | f), j < J - 1 ? off : off_top);
        put_digits<J, j + 1>(lo, hi, sbits, off, off_top, d);
    }
}

template <int J>
__device__ __forceinline__ void digits(double v, int shift, float (&d)[J]) {
    const unsigned long long b = (unsigned long long)__double_as_longlong(v);
    const int be = (int)(b >> 52) & 0x7ff;
    const unsigned long long m = (b & 0xFFFFFFFFFFFFFull) | (be ? 1ull << 52 : 0ull);
    const int e = (be ? be : 1) - 1075 + shift;  // |v| 2^shift = m 2^e (subnormal v: no hidden bit)
    unsigned long long lo, hi;
    magnitude128(m, e, lo, hi);
    constexpr unsigned long long BLO = Bias<J>::lo(), BHI = Bias<J>::hi();
    const unsigned long long blo = lo + BLO;
    hi += BHI + (blo < lo ? 1ull : 0ull);
    lo = blo;
    const bool neg = (b >> 63) != 0;
    // -(2^23 + f) + 2^23 + 2^13 = -(f - 2^13); 2^23 + f - 2^23 - 2^13 = f - 2^13 (top: without 2^13)
    put_digits<J, 0>(lo, hi, neg ? 0xCB000000u : 0x4B000000u, neg ? 8396800.0f : -8396800.0f,
                     neg ? TWO23 : -TWO23, d);
}

// t mod p (a representative in [-128, 128], see red_sym) from t's digits and c_j = 2^(14 j) mod p
// in the symmetric range: x = sum_j d_j c_j (c_0 = 1). Every partial sum is an integer below
// 2^13 + (J - 2) 2^13 127 + 2^14 127 <= 8331264 < 2^23 for J <= 8 (odd p: |c_j| <= 127; p = 256:
// c_j = 0 for j >= 1), so each fma is exact and red_sym applies.
template <int J>
__device__ __forceinline__ float residue_raw(const float (&d)[J], const float (&c)[8]) {
    float x = d[0];
#pragma unroll
    for (int j = 1; j < J; ++j) x = __fmaf_rn(d[j], c[j], x);
    return x;
}
template <int J>
__device__ __forceinline__ float residue(const float (&d)[J], const float (&c)[8], float p, float inv_p) {
    return red_sym(residue_raw<J>(d, c), p, inv_p);
}

// The INT8 residues of 4 consecutive k at og: one 32-bit store, or (vec false) bytes up to nk.
__device__ __forceinline__ void store4(signed char* og, const float (&w)[4], bool vec, int nk) {
    if (vec) {
        *reinterpret_cast<unsigned*>(og) = pack4(to_byte(w[0]), to_byte(w[1]), to_byte(w[2]), to_byte(w[3]));
    } else {
#pragma unroll
        for (int m = 0; m < 4; ++m)
            if (m < nk) og[m] = (signed char)to_byte(w[m]);
    }
}

#define RES_TL 16                  // lines per tile (gpu.RES_TILE)
#define RES_TK 128                 // k per tile: 32 threads x 4 consecutive k
#define RES_PL (RES_TL * 33 + 8)   // doubles per plane of the tile (see below)

// A 16-line x 128-k tile per block of 32 x 8 threads. The operand's values go through shared
// memory so that reads follow the operand's layout (along k for K-major lines, across lines
// otherwise) and each thread then takes 4 consecutive k of two lines, writing each modulus' four
// INT8 residues as one 32-bit store (a warp: 128 contiguous bytes of a line). Element (line li,
// k ki) sits at (ki % 4) * RES_PL + li * 33 + ki / 4: the compute reads are consecutive doubles,
// and the 33 / +8 paddings keep the layout-following writes at two wavefronts a warp.
// The per-element work (the digits) is done once, outside the moduli loop; per modulus and part
// a residue costs J - 1 fma and the three operations of red_sym.
// out: int8 (n, G, lines_out, kp) for the block's lines; lines_out = nlines (x2 for 4m B lines).
// 4m stores the Im half at k + K: when K % 4 != 0 those words are unaligned and bytes are stored.
template <int J>
__device__ void residues_tile(const double* __restrict__ x, long long s_out, long long s_in, long long s_k,
                              long long n_in, long long line0, long long nlines, int K, int kmajor,
                              const int* __restrict__ E, int bits, const float4* __restrict__ ftab, int n, int role,
                              signed char* __restrict__ out, long long lines_out, int kp) {
    constexpr int form = REC_FORM;  // (gpu.residues shares the reconstruction's module)
    constexpr int cplx = REC_FORM != F_REAL;
    __shared__ double sv[2 * 4 * RES_PL];
    __shared__ float4 st[MAXN * FT / 4];
    __shared__ long long lb_s[RES_TL];
    __shared__ int sh_s[RES_TL];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
    const long long lbase = (long long)blockIdx.x * RES_TL;
    const int kbase = blockIdx.y * RES_TK;
    for (int i = tid; i < n * (FT / 4); i += 256) st[i] = ftab[i];
    if (tid < RES_TL) tile_line(tid, line0, lbase, nlines, n_in, s_out, s_in, E, bits, lb_s, sh_s);
    __syncthreads();
    const bool v2 = cplx && ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0);
#pragma unroll 4
    for (int it = 0; it < RES_TL * RES_TK / 256; ++it) {
        const int idx = tid + 256 * it;
        const int li = kmajor ? idx / RES_TK : idx % RES_TL;
        const int ki = kmajor ? idx % RES_TK : idx / RES_TL;
        const int k = kbase + ki;
        double re, im;
        tile_value(x, cplx, v2, lbase + li < nlines && k < K, lb_s[li] + (long long)k * s_k, re, im);
        const int a = (ki & 3) * RES_PL + li * 33 + (ki >> 2);
        sv[a] = re;
        sv[4 * RES_PL + a] = im;
    }
    __syncthreads();
    const int k0 = kbase + 4 * tx;
    if (k0 >= K) return;
    const int G = form == F_3M ? 3 : (form == F_2M ? 2 : 1);
    const long long slab = lines_out * (long long)kp;  // (n, G, lines_out, kp)
    // 4-byte stores: aligned (kp % 16 == 0, k0 % 4 == 0) except 4m's Im half when K % 4 != 0; past K
    // they write the zero residues of the zero padding (kp >= K rounded up to 16), except in 4m,
    // where the Im half follows
    const bool vec = form != F_4M || (K & 3) == 0;
    for (int j = ty; j < RES_TL; j += 8) {
        const long long l = lbase + j;
        if (l >= nlines) break;
        float dr[4][J], di[4][J];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const int a = m * RES_PL + j * 33 + tx;
            digits<J>(sv[a], sh_s[j], dr[m]);
            if (cplx) digits<J>(sv[4 * RES_PL + a], sh_s[j], di[m]);
        }
        signed char* o = out + l * kp + k0;  // this modulus' first output line (4m B lines: 2 l)
        if (form == F_4M && role != 0) o += l * kp;
        for (int i = 0; i < n; ++i, o += G * slab) {
            const float4 k0v = st[i * 4], ca = st[i * 4 + 2], cb = st[i * 4 + 3];
            const float p = k0v.x, inv_p = k0v.y, s = k0v.w;
            const float c[8] = {ca.x, ca.y, ca.z, ca.w, cb.x, cb.y, cb.z, cb.w};
            float rr[4], ri[4];
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                // 2m reduces rr only inside rr +- s ri (below): unreduced, |rr| <= 8331264 and
                // |s ri| <= 127 * 128, so the sum stays below 2^23, where red_sym is exact
                rr[m] = form == F_2M ? residue_raw<J>(dr[m], c) : residue<J>(dr[m], c, p, inv_p);
                ri[m] = cplx ? residue<J>(di[m], c, p, inv_p) : 0.0f;
            }
            if (form == F_REAL) {
                store4(o, rr, vec, K - k0);
            } else if (form == F_4M) {
                store4(o, rr, vec, K - k0);
                if (role == 0) {
                    store4(o + K, ri, vec, K - k0);
                } else {
                    // B lines [Re | -Im] and [Im | Re]: -r is in the symmetric range for odd p, and
                    // for p = 256 in [-128, 128], which to_byte wraps like any other residue
                    const float ni[4] = {-ri[0], -ri[1], -ri[2], -ri[3]};
                    store4(o + K, ni, vec, K - k0);
                    store4(o + kp, ri, vec, K - k0);
                    store4(o + kp + K, rr, vec, K - k0);
                }
            } else if (form == F_3M) {
                float w[4];
#pragma unroll
                for (int m = 0; m < 4; ++m) w[m] = red_sym(__fadd_rn(rr[m], ri[m]), p, inv_p);  // |rr + ri| <= 256
                store4(o, rr, vec, K - k0);
                store4(o + slab, ri, vec, K - k0);
                store4(o + 2 * slab, w, vec, K - k0);
            } else {
                // rr +- s ri with |s| <= 127 (split moduli are odd), |ri| <= 127 and rr unreduced (above):
                // below 2^23, exact; the CPU's s in [0, p) is the same class, and the symmetric
                // residue is unique
                float w1[4], w2[4];
#pragma unroll
                for (int m = 0; m < 4; ++m) {
                    w1[m] = red_sym(__fmaf_rn(s, ri[m], rr[m]), p, inv_p);
                    w2[m] = red_sym(__fmaf_rn(-s, ri[m], rr[m]), p, inv_p);
                }
                store4(o, w1, vec, K - k0);
                store4(o + slab, w2, vec, K - k0);
            }
        }
    }
}

// One entry point per digit count J (gpu.residues picks crt_residues_<J>): the digits of a thread's
// 8 elements stay in registers across the moduli loop; the form is the module's REC_FORM.
#define CRT_RESIDUES(J)                                                                                              \
    extern "C" __global__ void __launch_bounds__(256) crt_residues_##J(                                              \
        const double* __restrict__ x, long long s_out, long long s_in, long long s_k, long long n_in,                \
        long long line0, long long nlines, int K, int kmajor, const int* __restrict__ E, int bits,                   \
        const float4* __restrict__ ftab, int n, int role, signed char* __restrict__ out, long long lines_out,        \
        int kp) {                                                                                                    \
        residues_tile<J>(x, s_out, s_in, s_k, n_in, line0, nlines, K, kmajor, E, bits, ftab, n, role, out,          \
                         lines_out, kp);                                                                             \
    }
CRT_RESIDUES(2)
CRT_RESIDUES(3)
CRT_RESIDUES(4)
CRT_RESIDUES(5)
CRT_RESIDUES(6)

// ---------------------------------------------------------------- residues on INT8 tensor cores

// The residues of crt_residues_J as one exact INT8 matrix product per element group (gpu.residues
// with gpu.RESIDUES = "mma"; the same bytes). Why: crt_residues_J is issue-bound (ncu at d = 10:
// 36 instructions per modulus and complex element, 21 of them FP32 for the 14-bit digits' fma
// chains and the 2m images); here the digit sums of every modulus and part come from mma.sync and
// each output byte costs four FP32 operations.
//
// An element's scaled integer t (|t| <= 2^bits, scale.scaled_integers) is split into L balanced
// 8-bit limbs, t = sum_j l_j 2^(8 j) with l_j in [-128, 127]: with B = 0x80 in bytes 0 .. L-1 (the
// host's L = (bits + 9) / 8 makes |t| fit, gpu.limb_bias), u = t + B (128-bit two's complement) lies
// in [0, 2^(8 L)) and the limbs are the bytes of u ^ B. Re's limbs fill bytes 0-15 of the element's
// 32-byte row, Im's bytes 16-31 (real operands: zeros). The table (gpu.residue_table, K = 32 x the
// outputs) holds per output column (modulus i, slot s of the form) the coefficients
// sym(cr 2^(8 j) mod p_i) and sym(ci 2^(8 j) mod p_i), (cr, ci) the form's combination of Re and Im
// (2m: 1, +-s; 3m: (1, 0), (0, 1), (1, 1); 4m B lines: (1, 0), (0, -1), (0, 1), (1, 0)), so the
// product v is an integer representative of the output's residue class, |v| <= 32 * 128 * 128 =
// 2^19: exact in INT32. The accumulator starts at the bits of 1.5 * 2^23, so it ends as the bits of
// the exact float fv = 1.5 * 2^23 + v; red_sym's steps on v = fv - 1.5 * 2^23 give q = rint(v / p)
// and fma(-q, p, fv) = 1.5 * 2^23 + r, exact, whose low byte is r as to_byte makes it: the
// symmetric residue for odd p, and r mod 256 for p = 256.
//
// Layout: a block of 256 threads takes RZ_TL lines x RZ_TK = 64 k. Each thread converts 4 elements
// (read in the operand's layout, as crt_residues_J reads them) to limbs in shared memory, where a
// line's 64 elements form four m16 tiles: element k sits in tile (k % 8) / 2, row k / 8 + 8 (k % 2),
// so that D's rows g and g + 8 of the four tiles are the elements 8 g .. 8 g + 7 and a lane stores
// 8 consecutive bytes per output column (limb_chunk places the 16-byte halves of the rows). A warp
// takes a line: its A fragments by four ldmatrix.x4, then per n-tile of 8 output columns (B
// fragments from shared memory) four mma.sync m16n8k32.
#define RZ_TL 16                   // lines per block (gpu.RZ_TILE)
#define RZ_TK 64                   // k per block: one line's four m16 tiles (gpu.RZ_TILE)
#define RZ_MAXCOL 80               // output columns: 4 per modulus (4m B lines) x MAXN
#define RZ_OPM (REC_FORM == F_2M ? 2 : (REC_FORM == F_3M ? 3 : 1))  // columns per modulus (4m: 2 A, 4 B)

__device__ __forceinline__ void mma_s8_16832_acc(int (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                                                 int c) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %10, %10, %10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&a)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}

// Byte offset in the limb buffer of half h (0: Re, 1: Im) of row r of m16 tile q of line li: chunk
// 32 q + 2 r + h of the line's 2048 bytes with its low three bits (its 16-byte slot in a 128-byte
// bank cycle) XORed with (r / 4 ^ q) % 2 + 2 (q / 2) + 4 (r / 8), and with li % 8. Why: the
// limb stores of 8 lanes (one bank cycle of STS.128) are, for K-major lines, the elements
// 8 m .. 8 m + 7 of a line (q = 0..3, r = m or m + 8) and, for strided lines, one element of 8
// lines; ldmatrix reads rows 0..7 (or 8..15) of one tile, line and half. Each set meets 8
// distinct slots (without the XOR the K-major stores were 8-way conflicts).
__device__ __forceinline__ int limb_chunk(int li, int q, int r, int h) {
    const int sw = ((((r >> 2) ^ q) & 1) | (q & 2) | (((r >> 3) & 1) << 2)) ^ (li & 7);
    return li * (RZ_TK * 32) + (((32 * q + 2 * r + h) ^ sw) << 4);
}

// The 16 limb bytes of v scaled by 2^shift (above): (u ^ B) as 4 words, byte 0 the lowest limb.
__device__ __forceinline__ uint4 limbs16(double v, int shift, unsigned long long blo, unsigned long long bhi) {
    const unsigned long long b = (unsigned long long)__double_as_longlong(v);
    const int be = (int)(b >> 52) & 0x7ff;
    const unsigned long long m = (b & 0xFFFFFFFFFFFFFull) | (be ? 1ull << 52 : 0ull);
    unsigned long long lo, hi;
    magnitude128(m, (be ? be : 1) - 1075 + shift, lo, hi);
    if (b >> 63) {  // t = -|t| in two's complement (-0 and values truncated to 0 stay 0)
        lo = ~lo + 1ull;
        hi = ~hi + (lo == 0ull ? 1ull : 0ull);
    }
    const unsigned long long ulo = lo + blo;
    hi = hi + bhi + (ulo < lo ? 1ull : 0ull);
    const unsigned long long wlo = ulo ^ blo, whi = hi ^ bhi;
    return make_uint4((unsigned)wlo, (unsigned)(wlo >> 32), (unsigned)whi, (unsigned)(whi >> 32));
}

// The residue byte of an accumulator fv = bits of 1.5 * 2^23 + v (above), in the low byte.
__device__ __forceinline__ unsigned acc_byte(int acc, float p, float inv_p) {
    const float fv = __int_as_float(acc);
    const float x = __fadd_rn(fv, -MAGIC);                               // v, exact
    const float q = __fadd_rn(__fmaf_rn(x, inv_p, MAGIC), -MAGIC);       // rint(v / p) (red_sym)
    return __float_as_uint(__fmaf_rn(-q, p, fv));                        // 1.5 * 2^23 + r, exact
}

// out: int8 (n, G, lines_out, kp) as crt_residues_J; tab: per n-tile and lane the two B-fragment
// words (gpu.residue_table); blo / bhi: B (gpu.limb_bias).
extern "C" __global__ void __launch_bounds__(256) crt_residues_mma(
    const double* __restrict__ x, long long s_out, long long s_in, long long s_k, long long n_in, long long line0,
    long long nlines, int K, int kmajor, const int* __restrict__ E, int bits, const float4* __restrict__ ftab, int n,
    int role, signed char* __restrict__ out, long long lines_out, int kp, const uint2* __restrict__ tab,
    unsigned long long blo, unsigned long long bhi) {
    constexpr int form = REC_FORM;
    constexpr int cplx = REC_FORM != F_REAL;
    constexpr int G = form == F_3M ? 3 : (form == F_2M ? 2 : 1);
    __shared__ __align__(16) unsigned char sl[RZ_TL * RZ_TK * 32];  // limbs: a line's four m16 x 32-byte tiles
    __shared__ uint2 stab[RZ_MAXCOL / 8 * 32];
    __shared__ float2 scol[RZ_MAXCOL];       // per output column: p, 1/p
    __shared__ long long sdst[RZ_MAXCOL];    // per output column: offset of its line 0, k 0 in out
    __shared__ long long lb_s[RZ_TL];
    __shared__ int sh_s[RZ_TL];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const long long lbase = (long long)blockIdx.x * RZ_TL;
    const int kbase = blockIdx.y * RZ_TK;
    const int opm = form == F_4M ? (role == 0 ? 2 : 4) : RZ_OPM;
    const int ncol = n * opm, ntiles = (ncol + 7) / 8;
    const long long slab = lines_out * (long long)kp;  // (n, G, lines_out, kp)
    const int lmul = form == F_4M && role != 0 ? 2 : 1;  // 4m B: two output lines per line
    for (int i = tid; i < ntiles * 32; i += 256) stab[i] = tab[i];
    if (tid < ncol) {
        const int i = tid / opm, s = tid - i * opm;
        const float4 c = ftab[i * (FT / 4)];
        scol[tid] = make_float2(c.x, c.y);
        long long d;
        if (form == F_4M) {
            // A: [Re | Im]; B lines 2l: [Re | -Im], 2l + 1: [Im | Re] (columns Re, -Im, Im, Re)
            d = role == 0 ? (s ? K : 0) : (s >= 2 ? kp : 0) + (s & 1 ? K : 0);
            d += i * slab;
        } else {
            d = (i * (long long)G + s) * slab;
        }
        sdst[tid] = d;
    }
    if (tid < RZ_TL) tile_line(tid, line0, lbase, nlines, n_in, s_out, s_in, E, bits, lb_s, sh_s);
    __syncthreads();
    const bool v2 = cplx && ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0);
#pragma unroll
    for (int it = 0; it < RZ_TL * RZ_TK / 256; ++it) {
        const int idx = tid + 256 * it;
        const int li = kmajor ? idx / RZ_TK : idx % RZ_TL;
        const int ki = kmajor ? idx % RZ_TK : idx / RZ_TL;
        const int k = kbase + ki;
        double re, im;
        tile_value(x, cplx, v2, lbase + li < nlines && k < K, lb_s[li] + (long long)k * s_k, re, im);
        const int q = (ki & 7) >> 1, row = (ki >> 3) + 8 * (ki & 1);
        *reinterpret_cast<uint4*>(sl + limb_chunk(li, q, row, 0)) = limbs16(re, sh_s[li], blo, bhi);
        *reinterpret_cast<uint4*>(sl + limb_chunk(li, q, row, 1)) =
            cplx ? limbs16(im, sh_s[li], blo, bhi) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    // bytes a column stores: up to kp (the padding's limbs are zero, so are its residues) except
    // in 4m, where the Im half follows at K
    const int lim = form == F_4M ? K : kp;
    const int k0 = kbase + 8 * g;
    const bool vec = form != F_4M || (K & 7) == 0;  // 8-byte stores aligned (kp % 16 == 0)
    // ldmatrix.x4: lanes 8 j .. 8 j + 7 give the rows of matrix j = register j of the A fragment:
    // rows 0-7 then 8-15 of the tile, the Re half (k 0-15) then the Im half (k 16-31)
    const int ldm_row = (lane & 7) + 8 * ((lane >> 3) & 1), ldm_half = lane >> 4;
    const unsigned sl_s = (unsigned)__cvta_generic_to_shared(sl);
    for (int li = warp; li < RZ_TL; li += 8) {
        const long long l = lbase + li;
        if (l >= nlines) break;  // warp-uniform
        unsigned a[4][4];
#pragma unroll
        for (int q = 0; q < 4; ++q) ldmatrix_x4(a[q], sl_s + limb_chunk(li, q, ldm_row, ldm_half));
        const long long lk = l * lmul * kp + k0;
        for (int nt = 0; nt < ntiles; ++nt) {
            const uint2 b = stab[nt * 32 + lane];
            int d[4][4];
#pragma unroll
            for (int q = 0; q < 4; ++q) mma_s8_16832_acc(d[q], a[q], b.x, b.y, 0x4B400000);
            // D: c0, c1 row g (k 8 g + 2 q), columns 2 t, 2 t + 1; c2, c3 row g + 8 (k 8 g + 2 q + 1)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int col = 8 * nt + 2 * t + c;
                if (col >= ncol || k0 >= lim) continue;
                const float2 pc = scol[col];
                unsigned w[8];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    w[2 * q] = acc_byte(d[q][c], pc.x, pc.y);
                    w[2 * q + 1] = acc_byte(d[q][2 + c], pc.x, pc.y);
                }
                signed char* o = out + sdst[col] + lk;
                if (vec && k0 + 8 <= lim) {
                    *reinterpret_cast<uint2*>(o) =
                        make_uint2(pack4(w[0], w[1], w[2], w[3]), pack4(w[4], w[5], w[6], w[7]));
                } else {
#pragma unroll
                    for (int m = 0; m < 8; ++m)
                        if (k0 + m < lim) o[m] = (signed char)w[m];
                }
            }
        }
    }
}

// ---------------------------------------------------------------- reconstruction (cpu.reconstruct)

// A product's residue, a representative in [-128, 128] as an exact FP32 integer.
// INT32 product v (|v| < 2^31): v = a 2^16 + b with a = v >> 16 in [-2^15, 2^15) and b = v & 0xffff
// in [0, 2^16), each to FP32 through the bits of 1.5 * 2^23 + a and 2^23 + b; then
// |a (2^16 mod p) + b| <= 2^15 128 + 2^16 < 2^23 is exact and red_sym reduces it.
__device__ __forceinline__ float prod_residue(int v, float p, float inv_p, float c16) {
    const float a = __fadd_rn(__int_as_float(0x4B400000 + (v >> 16)), -MAGIC);
    const float b = __fadd_rn(__int_as_float(0x4B000000 | (v & 0xffff)), -TWO23);
    return red_sym(__fmaf_rn(a, c16, b), p, inv_p);
}

// A residue as its biased byte b = u + 128: for INT8 residues of products (crt_wgmma.cu: a
// representative u in [-128, 127]) byte j of w with its top bit flipped, in [0, 255] (one byte
// permute, zero-extended); for INT32 products through prod_residue (u in [-128, 128]), in [0, 256],
// from the bits 0x4B400000 + u of the exact 1.5 * 2^23 + u.
__device__ __forceinline__ int biased_byte(unsigned w_flipped, int j) {
    return (int)__byte_perm(w_flipped, 0u, 0x4440u + (unsigned)j);
}
__device__ __forceinline__ int biased_prod(int v, float p, float inv_p, float c16) {
    return __float_as_int(__fadd_rn(prod_residue(v, p, inv_p, c16), MAGIC)) - (0x4B400000 - 128);
}

// Re (vr) and Im (vi) of one modulus from its products' biased residues b_g (cpu.combine on
// representatives of the same classes) as non-negative integers, Re = vr - REC_OFF_R and
// Im = vi - REC_OFF_I: magnitudes at most 384, the forms' sums and differences in integer
// arithmetic (b_g in [0, 256] keeps every vr, vi in [0, 768]).
#if REC_FORM == F_3M
#define REC_OFF_R 256  // u0 - u1 = b0 - b1
#define REC_OFF_I 384  // u2 - u0 - u1 = b2 - b0 - b1 + 128
#elif REC_FORM == F_2M
#define REC_OFF_R 256  // u0 + u1 = b0 + b1 - 256
#define REC_OFF_I 256  // u0 - u1 = b0 - b1
#else
#define REC_OFF_R 128  // u0 = b0
#define REC_OFF_I 128  // u1 = b1
#endif
__device__ __forceinline__ void combine(int b0, int b1, int b2, int& vr, int& vi) {
    if (REC_FORM == F_3M) {
        vr = b0 - b1 + 256;
        vi = b2 - b0 - b1 + 512;
    } else if (REC_FORM == F_2M) {
        vr = b0 + b1;
        vi = b0 - b1 + 256;
    } else {
        vr = b0;
        vi = b1;
    }
}

// v - off as a double for a non-negative integer v < 2^31: the bits (0x43300000, v) are the double
// 2^52 + v, and one exact subtraction leaves v - off. Why: the conversion instructions (I2F.F64,
// cvt.f64.f32) issue at a quarter of the FP64 rate on sm_80 / sm_90.
template <int OFF>
__device__ __forceinline__ double int_double(int v) {
    return __dadd_rn(__hiloint2double(0x43300000, v), -(4503599627370496.0 + OFF));  // 2^52 + OFF
}

// rint(x) for |x| < 2^51 as (x + 1.5 * 2^52) - 1.5 * 2^52, where the double spacing is 1 and the
// addition rounds to nearest even as rint does; floor(x) the same with the addition rounded down.
// Why: FRND.F64 issues at a quarter of the FP64 add rate.
#define RINT_MAGIC 6755399441055744.0  // 1.5 * 2^52

// The balanced carry of cpu.finish: c = floor(lo 2^-38 + 1/2) (lo + 2^37 is exact, and the fma
// rounds the exact quotient once, down), lo -= c 2^38, hi += c. Every operation is exact (a
// power-of-two scaling, integers below 2^53), so it is the CPU's to the bit.
__device__ __forceinline__ void carry(double& lo_word, double& hi_word) {
    const double c = __dadd_rn(__fma_rd(__dadd_rn(lo_word, 137438953472.0), 1.0 / 274877906944.0, RINT_MAGIC),
                               -RINT_MAGIC);  // 2^37, 2^-38
    lo_word = __fma_rn(-c, 274877906944.0, lo_word);
    hi_word = hi_word + c;
}

// ldexp(x, -shift): one multiplication by 2^-shift where that power is a normal double (the
// product of x and a power of two is rounded once, as ldexp rounds: the same value, subnormal
// results included); else ldexp, which splits the scaling.
__device__ __forceinline__ double scale_down(double x, int shift) {
    if (shift >= -1023 && shift <= 1022) return x * __longlong_as_double((long long)(1023 - shift) << 52);
    return ldexp(x, -shift);
}

__device__ __forceinline__ void two_sum_add(double& hi, double& lo, double x) {
    const double s = hi + x;
    const double bb = s - hi;
    lo = lo + ((hi - (s - bb)) + (x - bb));
    hi = s;
}

// The CRT words of one part of one element (cpu.finish's S).
struct Words {
    double S0, S1, S2, S3, S4;
};

// c: one residue's Re or Im (|c| <= 384); d: the W words of its CRT weight (Moduli.weights).
// The words: c d_w + S_w is an integer below 2^51 (d_w < 2^38, at most 20 terms), so one fma is
// exact and equals the exact product and sum (the CPU's matmul sums the same exact integers).
__device__ __forceinline__ void add_digit(Words& a, double c, const double* __restrict__ d, int W) {
    a.S0 = __fma_rn(c, d[0], a.S0);
    if (W > 1) a.S1 = __fma_rn(c, d[1], a.S1);
    if (W > 2) a.S2 = __fma_rn(c, d[2], a.S2);
    if (W > 3) a.S3 = __fma_rn(c, d[3], a.S3);
    if (W > 4) a.S4 = __fma_rn(c, d[4], a.S4);
}

// cpu.finish: subtract q P, carry, sum the words most significant first (TwoSum), round once, scale.
// The W <= 5 words are scalars (an array indexed at run time would live in local memory); the
// factors 2^(38 w) are exact, as numpy's ldexp(S_w, 38 w).
// q = rint(S / P) from the two top words, as on the CPU: S = C' + q P with |C'| <= P / 4
// (moduli.alpha_beta), so q is the one integer within 1/4 of S / P; the words below the top two
// hold under 2^(52 + 38 (W - 3)) (< 2^-24 P, as P >= 2^(38 (W - 1))), and the roundings of
// (S_top 2^(38 (W-1)) + S_next 2^(38 (W-2))) / P add a relative 2^-51 to a ratio below 20 * 384:
// the fraction stays far from 1/2. (The rounding of the exact quotient here and the CPU's rint of
// its rounding give the same integer.) inv_P: 1 / P rounded to FP64.
__device__ double finish(Words a, const double* __restrict__ dp, int W, int shift, double inv_P) {
    const double X1 = 274877906944.0, X2 = 75557863725914323419136.0;  // 2^38, 2^76
    const double X3 = 2.0769187434139310514121985316880384e34, X4 = 5.708990770823839524233143877797980545530986496e45;
    const double top = W == 5 ? __dadd_rn(a.S4 * X4, a.S3 * X3)
                     : (W == 4 ? __dadd_rn(a.S3 * X3, a.S2 * X2)
                     : (W == 3 ? __dadd_rn(a.S2 * X2, a.S1 * X1) : (W == 2 ? __dadd_rn(a.S1 * X1, a.S0) : a.S0)));
    const double q = __dadd_rn(__fma_rn(top, inv_P, RINT_MAGIC), -RINT_MAGIC);
    // |q| <= 20 * 384 and words of P below 2^38: each q P_w and S_w - q P_w exact, one fma each
    a.S0 = __fma_rn(-q, dp[0], a.S0);
    if (W > 1) a.S1 = __fma_rn(-q, dp[1], a.S1);
    if (W > 2) a.S2 = __fma_rn(-q, dp[2], a.S2);
    if (W > 3) a.S3 = __fma_rn(-q, dp[3], a.S3);
    if (W > 4) a.S4 = __fma_rn(-q, dp[4], a.S4);
    if (W > 1) carry(a.S0, a.S1);
    if (W > 2) carry(a.S1, a.S2);
    if (W > 3) carry(a.S2, a.S3);
    if (W > 4) carry(a.S3, a.S4);
    double hi = W == 5 ? a.S4 * X4 : (W == 4 ? a.S3 * X3 : (W == 3 ? a.S2 * X2 : (W == 2 ? a.S1 * X1 : a.S0)));
    double lo = 0.0;
    if (W >= 5) two_sum_add(hi, lo, a.S3 * X3);
    if (W >= 4) two_sum_add(hi, lo, a.S2 * X2);
    if (W >= 3) two_sum_add(hi, lo, a.S1 * X1);
    if (W >= 2) two_sum_add(hi, lo, a.S0);
    return scale_down(hi + lo, shift);
}

#define REC_BC_I32 64  // columns (threads) of a reconstruction block: INT32 products (gpu.REC_COLUMNS)
#define REC_BC_I8 256  // INT8 residues
// INT8 columns a thread (gpu.REC_CPT): 2 or 4, and the blocks per multiprocessor the INT8 kernel's
// registers must allow (launch bounds). On an H200 (a complex d = 10 gate, 28 qubits) the
// reconstruction took 8.3 ms with 2 columns and 6 blocks of 128 threads (77 registers), 8.6-8.9 ms
// with 4 columns and 8 or 1 blocks of 64 (128-130 registers): it is bound by neither occupancy
// nor memory, but by the FP64 pipe and issue (benchmarks/results/crt_reconstruct_variants_h200.json).
#ifndef REC_CPT
#define REC_CPT 2
#endif
#if REC_CPT != 2 && REC_CPT != 4
#error "REC_CPT must be 2 or 4"
#endif
#ifndef REC_MINB
#define REC_MINB (REC_CPT == 2 ? 6 : 1)
#endif

// cp_async16, cp_commit, cp_wait: gemm/cuda/pipeline.cuh (prepended by gpu._fn)

// P: (n, G, rows, ldP) INT32 products or INT8 residues of them; a block of BC threads per BC
// output columns, walking rows blockIdx.y, + gridDim.y, ...; out in its final layout: element
// (r, c) of the (R, NC) line product at (c / n2) * R * n2 + r * n2 + c % n2 (B stacked: n2 = its
// last dimension; otherwise n2 = NC).
// A row's products of every modulus and part (n G planes of BC columns, x2 interleaved in 4m) are
// copied into shared memory with 16-byte cp.async, the next row's while this one is worked on.
// Why: read from global memory by each thread, one modulus ahead, every thread waited out a DRAM
// latency per modulus (a complex d = 10 gate at 28 qubits on an H100: 28 ms for 9 GB of INT8
// residues). Per modulus: the products' residues as biased bytes, the form's Re and Im in integer
// arithmetic, two exact conversions, then the FP64 words against the CRT weights (Moduli.weights,
// with y_i folded in: no reduction per modulus); the constants come from shared memory. Dynamic
// shared memory: 2 n G BC vw values (vw = 2 in 4m, else 1).
// REC_FORM and REC_W (gpu._reconstruct compiles a module per complex form and word count) make
// the form's branches and the word count compile-time: the per-modulus work had been a third
// comparisons and branches on them.
template <typename T, int BC>
__device__ void reconstruct_block(const T* __restrict__ P, int rows, int cols, int ldP, int n,
                                  const float4* __restrict__ ftab, const double* __restrict__ wt,
                                  const double* __restrict__ dp, const int* __restrict__ EA, const int* __restrict__ EB,
                                  int alpha, int beta, long long r0, long long c0, double* __restrict__ out,
                                  long long R, long long n2, double inv_P) {
    constexpr int form = REC_FORM, W = REC_W;
    constexpr int cplx = REC_FORM != F_REAL;  // a complex form exactly for complex operands
    extern __shared__ __align__(16) unsigned char rec_raw[];
    __shared__ float4 fs[MAXN * 2];
    // the W words of the Re and Im weights (wt: (2, n, W)), 2 DS doubles per modulus (Re's DS,
    // then Im's): an even stride puts each set of words on a 16-byte boundary, so that a pair of
    // words is one 16-byte shared-memory load
    constexpr int DS = (W + 1) & ~1;
    __shared__ __align__(16) double ds[MAXN * 2 * DS];
    for (int i = threadIdx.x; i < n * 2; i += blockDim.x) fs[i] = ftab[(i >> 1) * (FT / 4) + (i & 1)];
    for (int i = threadIdx.x; i < n * 2 * DS; i += blockDim.x) {
        const int mi = i / (2 * DS), part = (i / DS) & 1, w = i % DS;
        ds[i] = w < W ? wt[(part * n + mi) * W + w] : 0.0;
    }
    const int G = form == F_3M ? 3 : (form == F_2M ? 2 : 1);
    // values per modulus: 1 (real), 2 (4m: columns 2c and 2c + 1; 2m: two planes) or 3 (3m)
    const int nv = form == F_REAL ? 1 : (form == F_3M ? 3 : 2);
    const int vw = form == F_4M ? 2 : 1;
    const long long slab = (long long)rows * ldP;
    const int planes = n * G, seg = BC * vw;
    const int cps = seg * (int)sizeof(T) / 16;          // 16-byte chunks of one plane's row segment
    const int cb = blockIdx.x * BC;
    const int valid = min(BC, cols - cb) * vw;           // values of a segment that exist
    T* const buf = reinterpret_cast<T*>(rec_raw);  // two row buffers of planes * seg values
    // chunks past `valid` stay unread; those read end within the row's padding (ldP is a
    // multiple of 16 bytes, the block's start a multiple of BC values)
    auto load_row = [&](T* dst, int r) {
        const T* src = P + (long long)r * ldP + (long long)cb * vw;
        for (int i = threadIdx.x; i < planes * cps; i += blockDim.x) {
            const int q = i / cps, e0 = (i - q * cps) * (16 / (int)sizeof(T));
            if (e0 < valid) cp_async16(dst + q * seg + e0, src + q * slab + e0);
        }
        cp_commit();
    };
    // CPT consecutive columns a thread (INT8: REC_CPT, their bytes of a plane one 16- or 32-bit word,
    // twice that in 4m; INT32: 1): a quarter or half of the shared-memory reads
    constexpr int CPT = sizeof(T) == 1 ? REC_CPT : 1;
    const int tx = threadIdx.x, c1 = cb + CPT * tx;
    long long cq[CPT], cm[CPT];
    int eb[CPT];
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
        cq[j] = 0;
        cm[j] = 0;
        eb[j] = 0;
        if (c1 + j < cols) {
            const long long cg = c0 + c1 + j;
            cq[j] = cg / n2;  // once per thread: the 64-bit divisions stay out of the row loop
            cm[j] = cg - cq[j] * n2;
            eb[j] = EB[cg];
        }
    }
    int r = blockIdx.y, which = 0;
    if (r < rows) load_row(buf, r);
    for (; r < rows; r += gridDim.y, which ^= 1) {
        if (r + (int)gridDim.y < rows) {
            load_row(buf + (which ^ 1) * planes * seg, r + gridDim.y);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();  // (the first time also: the constant tables are in place)
        if (c1 < cols) {
            const T* cur = buf + which * planes * seg;
            Words wr[CPT], wi[CPT];
#pragma unroll
            for (int j = 0; j < CPT; ++j) {
                wr[j] = Words{0.0, 0.0, 0.0, 0.0, 0.0};
                wi[j] = Words{0.0, 0.0, 0.0, 0.0, 0.0};
            }
            // two moduli an iteration: their chains (shared-memory read, integer steps, conversion,
            // FP64 words) are independent, and with two warps a block the loads and conversions
            // of one modulus otherwise stalled the next
#pragma unroll 2
            for (int i = 0; i < n; ++i) {  // every modulus' products read once for Re and Im
                const double* dr = ds + i * 2 * DS;
                const double* di = dr + DS;
                int b[CPT][3];  // the products' residues, biased (biased_byte, biased_prod)
                if constexpr (sizeof(T) == 1) {  // INT8: CPT bytes of a plane (x2 interleaved in 4m)
                    // every byte's top bit flipped (biased_byte); w2: 4m's second word when CPT = 4
                    unsigned w[3] = {0u, 0u, 0u}, w2 = 0u;
                    const T* at = cur + CPT * vw * tx;
                    if constexpr (CPT * vw == 8) {
                        const uint2 q2 = *reinterpret_cast<const uint2*>(at + i * seg);
                        w[0] = q2.x ^ 0x80808080u;
                        w2 = q2.y ^ 0x80808080u;
                    } else if constexpr (CPT * vw == 4) {
#pragma unroll
                        for (int g = 0; g < 3; ++g)
                            if (g < nv / vw) w[g] = *reinterpret_cast<const unsigned*>(at + (i * G + g) * seg) ^ 0x80808080u;
                    } else {  // CPT = 2: two bytes a plane
#pragma unroll
                        for (int g = 0; g < 3; ++g)
                            if (g < nv)
                                w[g] = (unsigned)*reinterpret_cast<const unsigned short*>(at + (i * G + g) * seg) ^ 0x8080u;
                    }
#pragma unroll
                    for (int j = 0; j < CPT; ++j) {
                        if (vw == 2) {  // 4m: Re, Im of column j at bytes 2j, 2j + 1 of the pair
                            const unsigned src = j < 2 ? w[0] : w2;
                            b[j][0] = biased_byte(src, 2 * (j & 1));
                            b[j][1] = biased_byte(src, 2 * (j & 1) + 1);
                            b[j][2] = 0;
                        } else {
#pragma unroll
                            for (int g = 0; g < 3; ++g) b[j][g] = g < nv ? biased_byte(w[g], j) : 0;
                        }
                    }
                } else {
                    T v[3];
                    if (vw == 2) {
                        v[0] = cur[i * seg + 2 * tx];
                        v[1] = cur[i * seg + 2 * tx + 1];
                        v[2] = 0;
                    } else {
#pragma unroll
                        for (int g = 0; g < 3; ++g) v[g] = g < nv ? cur[(i * G + g) * seg + tx] : (T)0;
                    }
                    const float4 f0 = fs[2 * i], f1 = fs[2 * i + 1];  // p, inv_p, -, s | -, -, -, 2^16 mod p
#pragma unroll
                    for (int g = 0; g < 3; ++g) b[0][g] = g < nv ? biased_prod(v[g], f0.x, f0.y, f1.w) : 0;
                }
#pragma unroll
                for (int j = 0; j < CPT; ++j) {
                    int vr, vi;
                    combine(b[j][0], b[j][1], b[j][2], vr, vi);
                    add_digit(wr[j], int_double<REC_OFF_R>(vr), dr, W);
                    if (cplx) add_digit(wi[j], int_double<REC_OFF_I>(vi), di, W);
                }
            }
            const int ea = EA[r0 + r];
#pragma unroll
            for (int j = 0; j < CPT; ++j) {
                if (c1 + j >= cols) break;
                const int shift = (ea == ZERO_LINE ? 0 : alpha - ea) + (eb[j] == ZERO_LINE ? 0 : beta - eb[j]);
                const long long idx = cq[j] * R * n2 + (r0 + r) * n2 + cm[j];
                if (cplx) {
                    out[2 * idx] = finish(wr[j], dp, W, shift, inv_P);
                    out[2 * idx + 1] = finish(wi[j], dp, W, shift, inv_P);
                } else {
                    out[idx] = finish(wr[j], dp, W, shift, inv_P);
                }
            }
        }
        __syncthreads();  // this row's buffer is refilled by the next iteration's copies
    }
}

// form, cplx and W are the module's REC_FORM and REC_W.
extern "C" __global__ void crt_reconstruct(const int* __restrict__ P, int rows, int cols, int ldP, int n,
                                           const float4* __restrict__ ftab, const double* __restrict__ wt,
                                           const double* __restrict__ dp, const int* __restrict__ EA,
                                           const int* __restrict__ EB, int alpha, int beta, long long r0, long long c0,
                                           double* __restrict__ out, long long R, long long n2, double inv_P) {
    reconstruct_block<int, REC_BC_I32>(P, rows, cols, ldP, n, ftab, wt, dp, EA, EB, alpha, beta, r0, c0, out, R, n2,
                                       inv_P);
}

// The same on INT8 residues of the products (gpu.reconstruct_r8): a quarter of the bytes to read.
extern "C" __global__ void __launch_bounds__(REC_BC_I8 / REC_CPT, REC_MINB) crt_reconstruct_r8(const signed char* __restrict__ P, int rows, int cols, int ldP, int n,
                                              const float4* __restrict__ ftab, const double* __restrict__ wt,
                                              const double* __restrict__ dp, const int* __restrict__ EA,
                                              const int* __restrict__ EB, int alpha, int beta, long long r0,
                                              long long c0, double* __restrict__ out, long long R, long long n2,
                                              double inv_P) {
    reconstruct_block<signed char, REC_BC_I8>(P, rows, cols, ldP, n, ftab, wt, dp, EA, EB, alpha, beta, r0, c0, out, R,
                                              n2, inv_P);
}


// ---------------------------------------------------------------- reconstruction on INT8 tensor cores

// The word sums of the reconstruction as an INT8 matrix product (gpu.reconstruct_mma), for the
// INT8 residues of the products (crt_wgmma.cu) in the real, 2m and 3m forms (one byte per element
// and plane). Why: crt_reconstruct_r8 spends 8 DFMA and 2 DADD per modulus and complex element on
// S_w = sum_i c_i w_iw and is bound by the FP64 pipe (8.3 ms of a d = 10 gate at 28 qubits); the
// same exact integers come from the tensor cores.
// With u_q the residue of plane q (q = i G + g, in [-128, 127]) and c_i the form's combination of
// them, the word wd = part W + w is S = sum_q u_q v_q with v_q = +-w_iw or 0 (the combination's
// signs, and the 2m weights of Moduli.weights); each v_q (|v| < 2^38) is split into RM_LIMBS
// balanced 8-bit limbs, v_q = sum_l L_ql 2^(8 l), L in [-128, 127]. Then T_l = sum_q L_ql u_q is
// one INT32 product, exact (|T| <= 64 * 128 * 128 = 2^20), and S = sum_l T_l 2^(8 l) an integer
// below 2^53, exact in INT64 and as a double: the words are the FP64 kernel's, and finish() makes
// the same bits of them.
// Layout: a block of RM_BC columns (4 warps of 32) walks rows blockIdx.y, + gridDim.y, ... with the
// row's planes staged by cp.async as crt_reconstruct_r8 does. A warp's 32 columns are 4 n-tiles of
// m16n8k32 (D = limbs x residues: rows the limb sums, columns 8 elements): n-tile j holds the
// columns 4 n + j, so that the 4 bytes a thread reads from one plane (columns 4 g .. 4 g + 3) feed
// its B fragments of all four n-tiles after a 4 x 4 byte transpose of 4 planes. The limb matrix's
// rows (gpu.mma_limbs) put limb l of word wd = 8 grp + g in row 16 (3 grp + l / 2) + 8 (l % 2) + g:
// D's rows g and g + 8 of three m-tiles are the lane's, so each lane holds every limb sum of its
// word (g) for its 2 columns of each n-tile and makes the word in registers; the words go through
// shared memory (8 bytes each, a fifth of the limb sums' traffic) to one element a lane for the
// finish and the store.
#if REC_FORM != F_4M
#define RM_LIMBS 5                                     // gpu.MMA_LIMBS (l / 2 < 3 m-tiles)
#define RM_K 64                                        // gpu.MMA_K: bytes of an element's planes, padded
#define RM_BC 128                                      // gpu.MMA_COLUMNS
#define RM_PARTS (REC_FORM == F_REAL ? 1 : 2)
#define RM_NW (RM_PARTS * REC_W)                       // words an element
#define RM_GRP ((RM_NW + 7) / 8)                       // groups of 8 words (one a lane row g)
#define RM_MT (3 * RM_GRP)                             // m16 tiles (gpu.mma_limbs rows / 16)
#define RM_WS (RM_NW | 1)                              // odd: the word stores and reads take 2 wavefronts
#define RM_SEG (RM_BC + 16)                            // a plane's row segment in shared memory (see below)
// blocks a multiprocessor must hold (launch bounds): up to 128 registers a thread (ptxas's own
// choice, 80, spilled at the small word counts), 256 with two groups of words (their A fragments
// take 48 registers)
#define RM_MINB (RM_GRP == 1 ? 4 : 2)

__device__ __forceinline__ void mma_s8_16832(int (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 4 x 4 bytes transposed: w[p] holds byte j of plane p at byte j; x[j] gets byte p = plane p of column j.
__device__ __forceinline__ void transpose4(const unsigned (&w)[4], unsigned (&x)[4]) {
    const unsigned t0 = __byte_perm(w[0], w[1], 0x5140), t1 = __byte_perm(w[0], w[1], 0x7362);
    const unsigned t2 = __byte_perm(w[2], w[3], 0x5140), t3 = __byte_perm(w[2], w[3], 0x7362);
    x[0] = __byte_perm(t0, t2, 0x5410);
    x[1] = __byte_perm(t0, t2, 0x7632);
    x[2] = __byte_perm(t1, t3, 0x5410);
    x[3] = __byte_perm(t1, t3, 0x7632);
}

// P: (n, G, rows, ldP) INT8 residues of the products; limbs: (16 RM_MT, RM_K) int8 (gpu.mma_limbs);
// the rest as crt_reconstruct_r8. Dynamic shared memory: 2 n G RM_SEG bytes of row buffers, then
// 4 x 32 RM_WS doubles of words (gpu.reconstruct_mma).
extern "C" __global__ void __launch_bounds__(RM_BC, RM_MINB) crt_reconstruct_mma(
    const signed char* __restrict__ P, int rows, int cols, int ldP, int n, const signed char* __restrict__ limbs,
    const double* __restrict__ dp, const int* __restrict__ EA, const int* __restrict__ EB, int alpha, int beta,
    long long r0, long long c0, double* __restrict__ out, long long R, long long n2, double inv_P) {
    constexpr int W = REC_W;
    constexpr int cplx = REC_FORM != F_REAL;
    constexpr int G = REC_FORM == F_3M ? 3 : (REC_FORM == F_2M ? 2 : 1);
    extern __shared__ __align__(16) unsigned char rm_raw[];
    const int planes = n * G;               // <= 60 <= RM_K
    const int ksteps = (planes + 31) / 32;  // k-steps of 32 planes: 1 or 2 (warp-uniform)
    unsigned char* const buf = rm_raw;      // two row buffers of planes x RM_SEG bytes
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // (2 planes RM_SEG is a multiple of 16: the words start aligned)
    double* const Sw = reinterpret_cast<double*>(rm_raw + 2 * planes * RM_SEG) + warp * 32 * RM_WS;

    // A fragments (m16n8k32, s8): register 0 row g, k 4t .. 4t + 3; 1 row g + 8; 2 and 3 the same
    // rows at k + 16; rows 16 mt + ., k 32 ks + .
    unsigned a[RM_MT][2][4];
#pragma unroll
    for (int mt = 0; mt < RM_MT; ++mt)
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                const int row = 16 * mt + g + 8 * (h & 1), k = 32 * ks + 16 * (h >> 1) + 4 * t;
                a[mt][ks][h] = *reinterpret_cast<const unsigned*>(limbs + row * RM_K + k);
            }

    const int cb = blockIdx.x * RM_BC;
    const long long slab = (long long)rows * ldP;
    constexpr int cps = RM_BC / 16;  // 16-byte chunks of a plane's row segment
    const int valid = min(RM_BC, cols - cb);
    // chunks past `valid` stay unread; those read end within the row's padding (ldP is a multiple
    // of 16 bytes, the block's start a multiple of RM_BC): their bytes reach only columns >= cols,
    // which are not stored (each column is its own column of the products below)
    auto load_row = [&](unsigned char* dst, int r) {
        const signed char* src = P + (long long)r * ldP + cb;
        for (int i = threadIdx.x; i < planes * cps; i += RM_BC) {
            const int q = i / cps, e0 = (i - q * cps) * 16;
            if (e0 < valid) cp_async16(dst + q * RM_SEG + e0, src + q * slab + e0);
        }
        cp_commit();
    };
    // this lane's output column (one element a lane in the finish)
    const int c1 = cb + 32 * warp + lane;
    long long cq = 0, cm = 0;
    int eb = 0;
    if (c1 < cols) {
        const long long cg = c0 + c1;
        cq = cg / n2;
        cm = cg - cq * n2;
        eb = EB[cg];
    }
    const bool warp_live = cb + 32 * warp < cols;  // warp-uniform
    int r = blockIdx.y, which = 0;
    if (r < rows) load_row(buf, r);
    for (; r < rows; r += gridDim.y, which ^= 1) {
        if (r + (int)gridDim.y < rows) {
            load_row(buf + (which ^ 1) * planes * RM_SEG, r + gridDim.y);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (warp_live) {
            // B fragments: register 0 of column n = g is k 4t .. 4t + 3, register 1 k + 16. This lane
            // reads planes 32 ks + 16 h + 4 t + p (p = 0..3) at columns 4 g .. 4 g + 3 (one word each;
            // RM_SEG = RM_BC + 16 makes the t's two-way, not four-way, bank conflicts), whose
            // transpose gives x[ks][h][j], the register of column 4 g + j (n-tile j, column g).
            const unsigned char* cur = buf + which * planes * RM_SEG + 32 * warp + 4 * g;
            unsigned x[2][2][4];
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    unsigned w[4];
#pragma unroll
                    for (int p = 0; p < 4; ++p) {
                        const int q = 32 * ks + 16 * h + 4 * t + p;
                        // planes past n G read as zero (their limbs are zero too)
                        w[p] = q < planes ? *reinterpret_cast<const unsigned*>(cur + q * RM_SEG) : 0u;
                    }
                    transpose4(w, x[ks][h]);
                }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int d[RM_MT][4];
#pragma unroll
                for (int mt = 0; mt < RM_MT; ++mt) d[mt][0] = d[mt][1] = d[mt][2] = d[mt][3] = 0;
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                    if (ks < ksteps) {
#pragma unroll
                        for (int mt = 0; mt < RM_MT; ++mt) mma_s8_16832(d[mt], a[mt][ks], x[ks][0][j], x[ks][1][j]);
                    }
                }
                // D: c0, c1 row g, columns 2t, 2t + 1; c2, c3 row g + 8; column n is element 4 n + j.
                // Limb l of word 8 grp + g: m-tile 3 grp + l / 2, register 2 (l % 2) + the column's.
#pragma unroll
                for (int grp = 0; grp < RM_GRP; ++grp) {
                    const int wd = 8 * grp + g;
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int* L0 = d[3 * grp];
                        const int* L1 = d[3 * grp + 1];
                        const int* L2 = d[3 * grp + 2];
                        long long v = L2[c];               // l = 4
                        v = v * 256 + L1[2 + c];           // l = 3
                        v = v * 256 + L1[c];               // l = 2
                        v = v * 256 + L0[2 + c];           // l = 1
                        v = v * 256 + L0[c];               // l = 0
                        if (wd < RM_NW) Sw[(8 * t + 4 * c + j) * RM_WS + wd] = __ll2double_rn(v);  // |v| < 2^53: exact
                    }
                }
            }
            __syncwarp();
            if (c1 < cols) {
                const double* Se = Sw + lane * RM_WS;
                const int ea = EA[r0 + r];
                const int shift = (ea == ZERO_LINE ? 0 : alpha - ea) + (eb == ZERO_LINE ? 0 : beta - eb);
                const long long idx = cq * R * n2 + (r0 + r) * n2 + cm;
                const Words wr{Se[0], W > 1 ? Se[1] : 0.0, W > 2 ? Se[2] : 0.0, W > 3 ? Se[3] : 0.0,
                               W > 4 ? Se[4] : 0.0};
                if (cplx) {
                    const Words wi{Se[W], W > 1 ? Se[W + 1] : 0.0, W > 2 ? Se[W + 2] : 0.0,
                                   W > 3 ? Se[W + 3] : 0.0, W > 4 ? Se[W + 4] : 0.0};
                    out[2 * idx] = finish(wr, dp, W, shift, inv_P);
                    out[2 * idx + 1] = finish(wi, dp, W, shift, inv_P);
                } else {
                    out[idx] = finish(wr, dp, W, shift, inv_P);
                }
            }
            __syncwarp();  // the next row's words overwrite Sw
        }
        __syncthreads();  // this row's buffer is refilled by the next iteration's copies
    }
}
#endif  // REC_FORM != F_4M

#endif  // REC_FORM
