// Kernels of the INT8 Ozaki scheme (gemm/ozaki_gpu.py loads this file with cupy.RawModule).
//
// An operand is read through a "line" view: line n = (n / n_in, n % n_in) at element offset
// (n / n_in) * s_out + (n % n_in) * s_in, element k of the line at + k * s_k. Offsets and strides
// count scalars for real operands and complex numbers for complex ones (the pointer is a double*;
// a complex element's real part is at 2 * offset, its imaginary part at 2 * offset + 1).
//
// Every operation here is exact or matches the numpy reference in gemm/ozaki.py operation by
// operation, so the GPU result is bit-identical to the CPU result.

#define SMAX 20          // most slices (the method's option range ends here)
#define NSTAT (SMAX + 2) // per operand: [non-finite count, nonzero count, loss sum for s = 1..SMAX]
#define DBL_BIG 1.7976931348623157e308

struct LineView {
    long long s_out, s_in, s_k;
    long long n_in;
};

__device__ __forceinline__ long long elem_offset(long long line, long long k, long long s_out,
                                                 long long s_in, long long s_k, long long n_in) {
    long long o = line / n_in;
    long long i = line - o * n_in;
    return o * s_out + i * s_in + k * s_k;
}

// Element (line, k) of the operand, or zero outside nlines x K: real part, and imaginary part
// (zero for real operands); the tile loaders' one read.
__device__ __forceinline__ void load_elem(const double* __restrict__ x, long long line, int k, long long nlines,
                                          int K, long long s_out, long long s_in, long long s_k, long long n_in,
                                          int cplx, long long line0, double& re, double& im) {
    re = 0.0;
    im = 0.0;
    if (line < nlines && k < K) {
        const long long off = elem_offset(line0 + line, k, s_out, s_in, s_k, n_in);
        if (cplx) {
            re = x[2 * off];
            im = x[2 * off + 1];
        } else {
            re = x[off];
        }
    }
}

__device__ __forceinline__ int frexp_exp(double v) {
    int e;
    frexp(v, &e);
    return e;
}

// Loss (in bits) of one nonzero element whose frexp exponent sits `delta` below its line's,
// when s slices of b bits are kept: clamp(p + delta - s*b, 0, p), p significant bits.
__device__ __forceinline__ void add_losses(unsigned int* acc, int delta, int b, int p) {
#pragma unroll
    for (int s = 1; s <= SMAX; ++s) {
        int l = p + delta - s * b;
        l = l < 0 ? 0 : (l > p ? p : l);
        acc[s - 1] += (unsigned int)l;
    }
}

__device__ __forceinline__ void flush_stats(unsigned int bad, unsigned int nz, unsigned int* acc,
                                            unsigned long long* stats, int want_loss) {
    // warp reduce, then one atomic per warp and value
    const unsigned full = 0xffffffffu;
    for (int off = 16; off > 0; off >>= 1) {
        bad += __shfl_down_sync(full, bad, off);
        nz += __shfl_down_sync(full, nz, off);
    }
    if ((threadIdx.x & 31) == 0) {
        if (bad) atomicAdd(&stats[0], (unsigned long long)bad);
        if (nz) atomicAdd(&stats[1], (unsigned long long)nz);
    }
    if (!want_loss) return;
#pragma unroll
    for (int s = 0; s < SMAX; ++s) {
        unsigned int v = acc[s];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(full, v, off);
        if ((threadIdx.x & 31) == 0 && v) atomicAdd(&stats[2 + s], (unsigned long long)v);
    }
}

// Mantissa losses of the nonzero finite elements k = k0, k0 + kstep, ... of one line, whose
// largest element has frexp exponent e (shared by the warp- and thread-per-line kernels).
__device__ __forceinline__ void line_losses(const double* __restrict__ x, long long line, int k0, int kstep, int K,
                                            long long s_out, long long s_in, long long s_k, long long n_in,
                                            int cplx, int e, int b, int p, unsigned int& nz, unsigned int* acc) {
    for (int k = k0; k < K; k += kstep) {
        long long off = elem_offset(line, k, s_out, s_in, s_k, n_in);
        for (int part = 0; part <= cplx; ++part) {
            double v = cplx ? x[2 * off + part] : x[off];
            double a = fabs(v);
            if (a > 0.0 && a <= DBL_BIG) {
                ++nz;
                add_losses(acc, e - frexp_exp(v), b, p);
            }
        }
    }
}

// Line exponents (frexp exponent of the line's largest |element|, 0 for an all-zero line), the
// count of non-finite elements and, when want_loss, the loss sums of int8-auto.
// One warp per line: for lines whose elements are contiguous (s_k small).
extern "C" __global__ void line_stats_warp(const double* __restrict__ x, long long s_out, long long s_in,
                                           long long s_k, long long n_in, long long nlines, int K,
                                           int cplx, int want_loss, int b, int p, int* __restrict__ e_line,
                                           unsigned long long* __restrict__ stats) {
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    unsigned int bad = 0, nz = 0;
    unsigned int acc[SMAX];
#pragma unroll
    for (int s = 0; s < SMAX; ++s) acc[s] = 0;
    for (long long line = warp; line < nlines; line += nwarps) {
        double m = 0.0;
        for (int k = lane; k < K; k += 32) {
            long long off = elem_offset(line, k, s_out, s_in, s_k, n_in);
            double v0 = cplx ? x[2 * off] : x[off];
            double a0 = fabs(v0);
            if (!(a0 <= DBL_BIG)) ++bad; else m = fmax(m, a0);
            if (cplx) {
                double a1 = fabs(x[2 * off + 1]);
                if (!(a1 <= DBL_BIG)) ++bad; else m = fmax(m, a1);
            }
        }
        for (int off = 16; off > 0; off >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, off));
        int e = m > 0.0 ? frexp_exp(m) : 0;
        if (lane == 0) e_line[line] = e;
        if (want_loss) line_losses(x, line, lane, 32, K, s_out, s_in, s_k, n_in, cplx, e, b, p, nz, acc);
    }
    flush_stats(bad, nz, acc, stats, want_loss);
}

// The same, one thread per line: for lines that are adjacent in memory (s_in small, s_k large).
extern "C" __global__ void line_stats_thread(const double* __restrict__ x, long long s_out, long long s_in,
                                             long long s_k, long long n_in, long long nlines, int K,
                                             int cplx, int want_loss, int b, int p,
                                             int* __restrict__ e_line, unsigned long long* __restrict__ stats) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    unsigned int bad = 0, nz = 0;
    unsigned int acc[SMAX];
#pragma unroll
    for (int s = 0; s < SMAX; ++s) acc[s] = 0;
    // lines past the end are skipped, not returned from: flush_stats' shuffles need the whole warp
    const long long rounds = (nlines + nthreads - 1) / nthreads;
    for (long long r = 0; r < rounds; ++r) {
        long long line = r * nthreads + tid;
        if (line >= nlines) continue;
        double m = 0.0;
        for (int k = 0; k < K; ++k) {
            long long off = elem_offset(line, k, s_out, s_in, s_k, n_in);
            for (int part = 0; part <= cplx; ++part) {
                double a = fabs(cplx ? x[2 * off + part] : x[off]);
                if (!(a <= DBL_BIG)) ++bad; else m = fmax(m, a);
            }
        }
        int e = m > 0.0 ? frexp_exp(m) : 0;
        e_line[line] = e;
        if (want_loss) line_losses(x, line, 0, 1, K, s_out, s_in, s_k, n_in, cplx, e, b, p, nz, acc);
    }
    flush_stats(bad, nz, acc, stats, want_loss);
}

// Split lines [line0, line0 + nlines) into s signed INT8 slices of b bits each (truncation).
// Block (32, 8) handles a tile of 32 lines x 32 k, staged through shared memory so that both the
// reads (along whichever index is contiguous) and the writes (along k) are coalesced.
//
// role 0 (row operand A): out line l holds [slice 1 | slice 2 | ... | slice s], each Kp wide;
//   a complex element puts its real part at k and its imaginary part at K + k.
// role 1 (column operand B): slices in reverse order [slice s | ... | slice 1]; a complex column j
//   becomes two out lines, 2j = [Re | -Im] and 2j + 1 = [Im | Re], so that one real product of
//   A's [Re | Im] lines with them gives the real and imaginary parts of the complex product.
extern "C" __global__ void split_tile(const double* __restrict__ x, long long s_out, long long s_in,
                                      long long s_k, long long n_in, long long line0, long long nlines,
                                      int K, int cplx, int kmajor, const int* __restrict__ e_line,
                                      signed char* __restrict__ out, long long ld_out, int Kp, int s, int b,
                                      int role) {
    __shared__ double sre[32][33];
    __shared__ double sim[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long lt = (long long)blockIdx.x * 32;  // first local line of the tile
    const int kt = blockIdx.y * 32;                   // first k of the tile
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int ll = kmajor ? ty + 8 * i : tx;
        int kl = kmajor ? tx : ty + 8 * i;
        double re, im;
        load_elem(x, lt + ll, kt + kl, nlines, K, s_out, s_in, s_k, n_in, cplx, line0, re, im);
        sre[ll][kl] = re;
        sim[ll][kl] = im;
    }
    __syncthreads();
    const double scale = (double)(1 << b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int ll = ty + 8 * i;
        long long line = lt + ll;
        int k = kt + tx;
        if (line >= nlines || k >= K) continue;
        int e = e_line[line0 + line];
        double tr = ldexp(sre[ll][tx], -e);
        double ti = ldexp(sim[ll][tx], -e);
        for (int q = 0; q < s; ++q) {
            tr = tr * scale;
            double qr = trunc(tr);
            tr = tr - qr;
            signed char cr = (signed char)(int)qr;
            if (role == 0) {
                signed char* row = out + line * ld_out + (long long)q * Kp;
                row[k] = cr;
                if (cplx) {
                    ti = ti * scale;
                    double qi = trunc(ti);
                    ti = ti - qi;
                    row[K + k] = (signed char)(int)qi;
                }
            } else {
                long long slot = (long long)(s - 1 - q) * Kp;
                if (cplx) {
                    ti = ti * scale;
                    double qi = trunc(ti);
                    ti = ti - qi;
                    signed char ci = (signed char)(int)qi;
                    signed char* re_line = out + (2 * line) * ld_out + slot;
                    signed char* im_line = re_line + ld_out;
                    re_line[k] = cr;
                    re_line[K + k] = (signed char)(-(int)ci);
                    im_line[k] = ci;
                    im_line[K + k] = cr;
                } else {
                    out[line * ld_out + slot + k] = cr;
                }
            }
        }
    }
}

// C = sum over groups of P_g * 2^(-b w_g) in double-double (TwoSum), smallest weight first (w = s+1 down to 2, chunks of
// at most `cap` slice pairs each), then times 2^(eA[r] + eB[c]); written to the caller's output
// layout: element (r, c) of the product at (c / N2) * (R * N2) + r * N2 + c % N2.
// P is [group][row][ldP] INT32; block rows r0.., block columns c0.. (B lines, not doubled).
extern "C" __global__ void accumulate(const int* __restrict__ P, long long slab, long long ldP,
                                      long long rows, long long colsp, long long r0, long long c0,
                                      const int* __restrict__ eA, const int* __restrict__ eB, int s,
                                      int cap, int b, int cplx, double* __restrict__ out, long long R,
                                      long long N2) {
    const long long total = rows * colsp;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long long rl = idx / colsp;
        long long cl = idx - rl * colsp;
        const int* src = P + rl * ldP + cl;
        double hi = 0.0, lo = 0.0;
        long long g = 0;
        for (int w = s + 1; w >= 2; --w) {
            double sc = ldexp(1.0, -b * w);
            int nch = (w - 1 + cap - 1) / cap;
            for (int ch = 0; ch < nch; ++ch, ++g) {
                double x = (double)src[g * slab] * sc;  // exact
                double t = __dadd_rn(hi, x);            // TwoSum, no contraction possible
                double bv = __dsub_rn(t, hi);
                double err = __dadd_rn(__dsub_rn(hi, __dsub_rn(t, bv)), __dsub_rn(x, bv));
                lo = __dadd_rn(lo, err);
                hi = t;
            }
        }
        double acc = __dadd_rn(hi, lo);
        long long c = c0 + (cplx ? (cl >> 1) : cl);
        long long r = r0 + rl;
        double v = ldexp(acc, eA[r] + eB[c]);
        long long hb = c / N2;
        long long off = hb * (R * N2) + r * N2 + (c - hb * N2);
        if (cplx) out[2 * off + (cl & 1)] = v; else out[off] = v;
    }
}

// ---- faster variants (same results bit for bit) ---------------------------------------------

__device__ __forceinline__ signed char slice_step(double& t, double scale) {
    t = t * scale;
    double q = trunc(t);
    t = t - q;
    return (signed char)(int)q;
}

__device__ __forceinline__ char4 neg4(char4 v) {
    return make_char4((signed char)(-(int)v.x), (signed char)(-(int)v.y), (signed char)(-(int)v.z),
                      (signed char)(-(int)v.w));
}

// split_tile for K % 4 == 0: a tile of 16 lines x 128 k; each thread cuts 4 adjacent elements of
// a line and stores 4 slices at once (char4), so a warp writes 128 contiguous bytes.
extern "C" __global__ void split_tile4(const double* __restrict__ x, long long s_out, long long s_in,
                                       long long s_k, long long n_in, long long line0, long long nlines,
                                       int K, int cplx, int kmajor, const int* __restrict__ e_line,
                                       signed char* __restrict__ out, long long ld_out, int Kp, int s, int b,
                                       int role) {
    __shared__ double sre[16][129];
    __shared__ double sim[16][129];
    const int tid = threadIdx.y * 32 + threadIdx.x;
    const long long lt = (long long)blockIdx.x * 16;
    const int kt = blockIdx.y * 128;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        int flat = i * 256 + tid;
        int ll = kmajor ? flat >> 7 : flat & 15;
        int kl = kmajor ? flat & 127 : flat >> 4;
        double re, im;
        load_elem(x, lt + ll, kt + kl, nlines, K, s_out, s_in, s_k, n_in, cplx, line0, re, im);
        sre[ll][kl] = re;
        sim[ll][kl] = im;
    }
    __syncthreads();
    const double scale = (double)(1 << b);
    const int k4 = (tid & 31) * 4;
    const int k = kt + k4;
    if (k >= K) return;
    for (int h = 0; h < 2; ++h) {
        int ll = (tid >> 5) + 8 * h;
        long long line = lt + ll;
        if (line >= nlines) continue;
        int e = e_line[line0 + line];
        double tr[4], ti[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            tr[j] = ldexp(sre[ll][k4 + j], -e);
            ti[j] = ldexp(sim[ll][k4 + j], -e);
        }
        for (int q = 0; q < s; ++q) {
            char4 cr, ci = make_char4(0, 0, 0, 0);
            cr.x = slice_step(tr[0], scale);
            cr.y = slice_step(tr[1], scale);
            cr.z = slice_step(tr[2], scale);
            cr.w = slice_step(tr[3], scale);
            if (cplx) {
                ci.x = slice_step(ti[0], scale);
                ci.y = slice_step(ti[1], scale);
                ci.z = slice_step(ti[2], scale);
                ci.w = slice_step(ti[3], scale);
            }
            if (role == 0) {
                signed char* row = out + line * ld_out + (long long)q * Kp;
                *reinterpret_cast<char4*>(row + k) = cr;
                if (cplx) *reinterpret_cast<char4*>(row + K + k) = ci;
            } else {
                long long slot = (long long)(s - 1 - q) * Kp;
                if (cplx) {
                    signed char* re_line = out + (2 * line) * ld_out + slot;
                    signed char* im_line = re_line + ld_out;
                    *reinterpret_cast<char4*>(re_line + k) = cr;
                    *reinterpret_cast<char4*>(re_line + K + k) = neg4(ci);
                    *reinterpret_cast<char4*>(im_line + k) = ci;
                    *reinterpret_cast<char4*>(im_line + K + k) = cr;
                } else {
                    *reinterpret_cast<char4*>(out + line * ld_out + slot + k) = cr;
                }
            }
        }
    }
}

__device__ __forceinline__ void two_sum_acc(double& hi, double& lo, double x) {
    double t = __dadd_rn(hi, x);
    double bv = __dsub_rn(t, hi);
    double err = __dadd_rn(__dsub_rn(hi, __dsub_rn(t, bv)), __dsub_rn(x, bv));
    lo = __dadd_rn(lo, err);
    hi = t;
}

// accumulate without 64-bit divisions: blockIdx.y walks the rows, threads the columns; for a
// complex product a thread takes the (Re, Im) pair of P columns 2j, 2j + 1 (int2 loads, one
// double2 store). Same operations in the same order as `accumulate`.
extern "C" __global__ void accumulate2(const int* __restrict__ P, long long slab, long long ldP, int rows,
                                       int ncols, long long r0, long long c0, const int* __restrict__ eA,
                                       const int* __restrict__ eB, int s, int cap, int b, int cplx,
                                       double* __restrict__ out, long long R, unsigned int N2) {
    for (int rl = blockIdx.y; rl < rows; rl += gridDim.y) {
        const long long r = r0 + rl;
        const int ea = eA[r];
        const int* prow = P + (long long)rl * ldP;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < ncols; j += gridDim.x * blockDim.x) {
            double h0 = 0.0, l0 = 0.0, h1 = 0.0, l1 = 0.0;
            long long g = 0;
            for (int w = s + 1; w >= 2; --w) {
                const double sc = __longlong_as_double((long long)(1023 - b * w) << 52);  // 2^(-b w)
                const int nch = (w - 1 + cap - 1) / cap;
                for (int ch = 0; ch < nch; ++ch, ++g) {
                    if (cplx) {
                        int2 v = *reinterpret_cast<const int2*>(prow + g * slab + 2 * j);
                        two_sum_acc(h0, l0, (double)v.x * sc);
                        two_sum_acc(h1, l1, (double)v.y * sc);
                    } else {
                        two_sum_acc(h0, l0, (double)prow[g * slab + j] * sc);
                    }
                }
            }
            const long long c = c0 + j;
            const int e = ea + eB[c];
            const unsigned int cc = (unsigned int)c;
            const unsigned int hb = cc / N2;
            const long long off = (long long)hb * (R * (long long)N2) + r * (long long)N2 + (cc - hb * N2);
            if (cplx) {
                *reinterpret_cast<double2*>(out + 2 * off) =
                    make_double2(ldexp(__dadd_rn(h0, l0), e), ldexp(__dadd_rn(h1, l1), e));
            } else {
                out[off] = ldexp(__dadd_rn(h0, l0), e);
            }
        }
    }
}
