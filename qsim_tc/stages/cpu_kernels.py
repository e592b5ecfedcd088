"""Compiled (numba) kernels of the CPU stage executor (:mod:`qsim_tc.stages.cpu`).

The executor hands :func:`run_chunks` a range of chunks of the state and a stage's gates encoded
as flat integer and float tables (see ``cpu._encode``). A chunk is 2^B contiguous
amplitudes whose low W bits are *lanes* (global qubits that no gate of the stage mixes) and
whose next L bits are the stage's local qubits, so every target of a gate is a chunk bit >= W
and every gate loop runs over at least 2^W consecutive amplitudes. Per chunk:

1. load it, deinterleaved into two real arrays (``re``, ``im``; the loops below vectorize on
   split real data, not on interleaved complex numbers), from wherever the previous stage's
   layout holds its amplitudes: the index-bit swaps between stages are folded into this load.
   A vector of the chunk (its low bits) at a time: two plain loads where those bits are the
   source's, else one load an amplitude merged by shuffles (``_gather_load``); chunks narrower
   than a vector, and where the low bits change with ``cpu.GATHER_LOAD`` off,
   load element by element through run tables, the runs that land in the same cache lines of
   the chunk together (``run_chunks``);
2. apply every gate of the stage, in order, to ``re``/``im``:

   - dense (dense, permutation and controlled gates; controls inside the chunk fix bits to 1,
     controls above it enable or skip the gate for the whole chunk): for each group of 2^d
     amplitude runs, ``out_r = sum_c M[r, c] x_c`` over the run. 2-4 targets whose runs are at
     least a vector long (``_dense_vec``): per strip of one vector register of lanes (``VECTOR_BYTES``), the 2^d
     inputs are loaded into registers once and every output is accumulated from them
     (``_make_group``, LLVM IR built per d; see there why not a numba loop). On the 2-core
     AVX-512 host (single core, a 2^19-amplitude chunk, 4 targets): 58 GFMA/s in complex64
     (the 512-bit FMA peak measured there: 102) against 32 for the accumulating kernel below,
     29 against 18 in complex128; 3 targets 53-67 against 25 (complex64), 24-26 against
     11-14 (complex128); 2 targets 0.9-1.3x the unrolled loop where the chunk is in L3 (2^19
     amplitudes, memory bound), 1.2-1.7x where it is in L2 (2^17). On a host without AVX-512 the
     strips are 256 bits and the blocks smaller (``_host_vector_bytes``). 1-qubit gates keep their unrolled loop (memory bound either way), and
     gates whose runs are shorter than a vector (controls in lanes, chunks without lanes) the
     kernels below: 2-qubit gates unrolled, wider gates first copy the group's input runs (at
     most 512 amplitudes each) into a scratch block whose rows are padded apart (runs 2^k
     apart, as targets at high chunk bits give, share L1 cache sets: 1.5-2x slower), then
     accumulate two output rows at a time from it, four inputs per sweep (``_dense_any``);
   - diagonal: for each combination of the gate's local bits whose entries (over the lanes)
     are not all 1, multiply the runs where those bits hold that combination, lane by lane;

3. store it back, interleaved, contiguously (into the other state buffer when the load was
   permuted across chunks), with non-temporal stores (``_store``, ``_interleave_nt``: no read
   of the lines it overwrites; QV-24 complex128 3.54 -> 3.25 s, brickwork(24, 4, 10) complex128
   2.34 -> 1.87 s, complex64 within the noise, 2 cores).

Indices are unsigned (``_u``): numba checks signed indices for negative wraparound, and that
check keeps LLVM from vectorizing the loops (measured: 6-10x slower). The arrays touched by one loop are few (at most
the two halves of the chunk, four streams for a 1-qubit gate, eight for a 2-qubit gate), so
LLVM's runtime alias checks stay within its limits and the loops vectorize.
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_u = np.uint64
DENSE_OP = 0
DIAGONAL_OP = 1
# columns of the op table
K_KIND, K_DIM, K_OFFS, K_FIX, K_NFIX, K_CMASK, K_HMASK, K_DATA, K_HIGH, K_NHIGH = range(10)
N_COLUMNS = 10
XS_PAD = 16  # the padding between the rows of a wide gate's input copy (_dense_any)


def _host_vector_bytes() -> int:
    """The width of the host's vector registers that the register-blocked kernels are built for:
    64 bytes where the CPU has AVX-512, else 32 (AVX2; LLVM splits wider vectors where there is
    less). numba's on-disk cache is keyed by the CPU's name and features, so a kernel built for
    one width is never loaded on a host of another."""
    features = llvm.get_host_cpu_features()
    return 64 if features.get("avx512f", False) else 32


HOST_CPU = llvm.get_host_cpu_name()  # LLVM's name for this CPU (e.g. "znver5"): per-host tables key on it
VECTOR_BYTES = _host_vector_bytes()  # one register: the lane strip of the register-blocked kernels (_dense_vec)
VEC_DIMS = (4, 8, 16)  # the gate dimensions (2-4 targets) that _dense_vec applies
# output rows per block in _make_group: 2 * rows accumulators and 2 matrix broadcasts beside the
# inputs. AVX-512 (32 registers): 8 rows, 18 registers beside a 2-target group's 8 inputs.
# AVX2 (16): 3 rows, 8 beside the 8. Built with the AVX-512 shape on an AVX2 host (Zen 3, one
# core, in-cache chunk) the kernels spilled and ran at 20 / 13 / 12 GFMA/s (complex64, 2 / 3 / 4
# targets; 11 / 9 / 9 complex128); with 256-bit strips and 3 rows 32 / 36 / 36 (17 / 19 / 18),
# 80-90% of that core's FMA peak (39 / 20); 2 or 4 rows were within the host's noise of 3.
_VEC_ROWS = 8 if VECTOR_BYTES == 64 else 3
# the chunk load's modes (``_gather_load``'s ``mode``): a vector whose amplitudes are adjacent in the
# source, one whose amplitudes are fetched one by one (8- or 16-byte loads merged by shuffles), or
# by the hardware gather (kept for A/B runs on other hosts)
LOAD_CONTIGUOUS, LOAD_AMPLITUDES, LOAD_HARDWARE_GATHER = 1, 0, 2

_jit = njit(cache=True, nogil=True, fastmath=True, error_model="numpy")


@_jit
def _insert_zeros(g, lo, fixed, f0, nf):
    """The index whose bits below ``lo`` are 0 and whose other bits are those of g with a 0
    inserted at each of ``fixed[f0:f0+nf]`` (ascending, all >= lo)."""
    base = g << lo
    for k in range(f0, f0 + nf):
        f = fixed[k]
        base = ((base >> f) << (f + 1)) | (base & ((1 << f) - 1))
    return base


@_jit
def _dense2(re, im, m_re, m_im, m0, offs, o0, fixed, f0, nf, cmask, nbits):
    a_r, a_i = m_re[m0], m_im[m0]
    b_r, b_i = m_re[m0 + 1], m_im[m0 + 1]
    c_r, c_i = m_re[m0 + 2], m_im[m0 + 2]
    d_r, d_i = m_re[m0 + 3], m_im[m0 + 3]
    lo = fixed[f0]
    run = 1 << lo
    for g in range(1 << (nbits - nf - lo)):
        base = _insert_zeros(g, lo, fixed, f0, nf) | cmask
        p0 = base + offs[o0]
        p1 = base + offs[o0 + 1]
        for v in range(run):
            i0 = _u(p0 + v)
            i1 = _u(p1 + v)
            x0r, x0i = re[i0], im[i0]
            x1r, x1i = re[i1], im[i1]
            re[i0] = a_r * x0r - a_i * x0i + b_r * x1r - b_i * x1i
            im[i0] = a_r * x0i + a_i * x0r + b_r * x1i + b_i * x1r
            re[i1] = c_r * x0r - c_i * x0i + d_r * x1r - d_i * x1i
            im[i1] = c_r * x0i + c_i * x0r + d_r * x1i + d_i * x1r


@_jit
def _dense4(re, im, m_re, m_im, m0, offs, o0, fixed, f0, nf, cmask, nbits):
    m00r, m00i = m_re[m0 + 0], m_im[m0 + 0]
    m01r, m01i = m_re[m0 + 1], m_im[m0 + 1]
    m02r, m02i = m_re[m0 + 2], m_im[m0 + 2]
    m03r, m03i = m_re[m0 + 3], m_im[m0 + 3]
    m10r, m10i = m_re[m0 + 4], m_im[m0 + 4]
    m11r, m11i = m_re[m0 + 5], m_im[m0 + 5]
    m12r, m12i = m_re[m0 + 6], m_im[m0 + 6]
    m13r, m13i = m_re[m0 + 7], m_im[m0 + 7]
    m20r, m20i = m_re[m0 + 8], m_im[m0 + 8]
    m21r, m21i = m_re[m0 + 9], m_im[m0 + 9]
    m22r, m22i = m_re[m0 + 10], m_im[m0 + 10]
    m23r, m23i = m_re[m0 + 11], m_im[m0 + 11]
    m30r, m30i = m_re[m0 + 12], m_im[m0 + 12]
    m31r, m31i = m_re[m0 + 13], m_im[m0 + 13]
    m32r, m32i = m_re[m0 + 14], m_im[m0 + 14]
    m33r, m33i = m_re[m0 + 15], m_im[m0 + 15]
    lo = fixed[f0]
    run = 1 << lo
    for g in range(1 << (nbits - nf - lo)):
        base = _insert_zeros(g, lo, fixed, f0, nf) | cmask
        p0 = base + offs[o0 + 0]
        p1 = base + offs[o0 + 1]
        p2 = base + offs[o0 + 2]
        p3 = base + offs[o0 + 3]
        for v in range(run):
            i0 = _u(p0 + v)
            i1 = _u(p1 + v)
            i2 = _u(p2 + v)
            i3 = _u(p3 + v)
            x0r, x0i = re[i0], im[i0]
            x1r, x1i = re[i1], im[i1]
            x2r, x2i = re[i2], im[i2]
            x3r, x3i = re[i3], im[i3]
            re[i0] = (m00r * x0r - m00i * x0i + m01r * x1r - m01i * x1i
                      + m02r * x2r - m02i * x2i + m03r * x3r - m03i * x3i)
            im[i0] = (m00r * x0i + m00i * x0r
                      + m01r * x1i + m01i * x1r + m02r * x2i + m02i * x2r + m03r * x3i + m03i * x3r)
            re[i1] = (m10r * x0r - m10i * x0i + m11r * x1r - m11i * x1i
                      + m12r * x2r - m12i * x2i + m13r * x3r - m13i * x3i)
            im[i1] = (m10r * x0i + m10i * x0r
                      + m11r * x1i + m11i * x1r + m12r * x2i + m12i * x2r + m13r * x3i + m13i * x3r)
            re[i2] = (m20r * x0r - m20i * x0i + m21r * x1r - m21i * x1i
                      + m22r * x2r - m22i * x2i + m23r * x3r - m23i * x3i)
            im[i2] = (m20r * x0i + m20i * x0r
                      + m21r * x1i + m21i * x1r + m22r * x2i + m22i * x2r + m23r * x3i + m23i * x3r)
            re[i3] = (m30r * x0r - m30i * x0i + m31r * x1r - m31i * x1i
                      + m32r * x2r - m32i * x2i + m33r * x3r - m33i * x3i)
            im[i3] = (m30r * x0i + m30i * x0r
                      + m31r * x1i + m31i * x1r + m32r * x2i + m32i * x2r + m33r * x3i + m33i * x3r)


@_jit
def _dense_any(re, im, m_re, m_im, m0, dim, offs, o0, fixed, f0, nf, cmask, nbits, acc_re, acc_im, xs):
    """3 or more target qubits (``dim`` a multiple of 4): per group, the ``dim`` input runs of at
    most ``acc_re.size // 2`` amplitudes are first copied into ``xs`` (real rows, then imaginary
    rows, ``XS_PAD`` apart beyond the run, so that the rows do not share cache sets as input runs
    2^k apart do); then two output rows at a time are accumulated in ``acc_*`` from four inputs a
    sweep (32 FMAs to 4 accumulator stores) and written over the group's amplitudes.

    Now for runs shorter than a vector and for 5 or more targets (``_dense_vec`` takes the rest).
    Measured on the EPYC host when it took every wide gate: one sweep per input was bound by the
    accumulator's stores (1.4x slower); the copy and the second row gave 1.3x on
    brickwork(24, 4, 10) in complex128, 1.15x in complex64; a BLAS product on the same copy was
    1.3-1.5x slower than this loop."""
    lo = fixed[f0]
    run = 1 << lo
    step = min(run, acc_re.size // 2)
    stride = step + XS_PAD
    d = dim * stride  # the imaginary rows
    for g in range(1 << (nbits - nf - lo)):
        base = _insert_zeros(g, lo, fixed, f0, nf) | cmask
        for v0 in range(0, run, step):
            for c in range(dim):
                p = base + offs[o0 + c] + v0
                q = c * stride
                for v in range(step):
                    xs[_u(q + v)] = re[_u(p + v)]
                    xs[_u(d + q + v)] = im[_u(p + v)]
            for r in range(0, dim, 2):
                for c in range(0, dim, 4):
                    k = m0 + r * dim + c
                    a0, b0 = m_re[_u(k)], m_im[_u(k)]
                    a1, b1 = m_re[_u(k + 1)], m_im[_u(k + 1)]
                    a2, b2 = m_re[_u(k + 2)], m_im[_u(k + 2)]
                    a3, b3 = m_re[_u(k + 3)], m_im[_u(k + 3)]
                    k += dim
                    e0, f0_ = m_re[_u(k)], m_im[_u(k)]
                    e1, f1_ = m_re[_u(k + 1)], m_im[_u(k + 1)]
                    e2, f2_ = m_re[_u(k + 2)], m_im[_u(k + 2)]
                    e3, f3_ = m_re[_u(k + 3)], m_im[_u(k + 3)]
                    p0 = c * stride
                    p1 = p0 + stride
                    p2 = p1 + stride
                    p3 = p2 + stride
                    if c == 0:
                        for v in range(step):
                            x0r, x0i = xs[_u(p0 + v)], xs[_u(d + p0 + v)]
                            x1r, x1i = xs[_u(p1 + v)], xs[_u(d + p1 + v)]
                            x2r, x2i = xs[_u(p2 + v)], xs[_u(d + p2 + v)]
                            x3r, x3i = xs[_u(p3 + v)], xs[_u(d + p3 + v)]
                            acc_re[_u(v)] = (a0 * x0r - b0 * x0i + a1 * x1r - b1 * x1i
                                             + a2 * x2r - b2 * x2i + a3 * x3r - b3 * x3i)
                            acc_im[_u(v)] = (a0 * x0i + b0 * x0r + a1 * x1i + b1 * x1r
                                             + a2 * x2i + b2 * x2r + a3 * x3i + b3 * x3r)
                            acc_re[_u(step + v)] = (e0 * x0r - f0_ * x0i + e1 * x1r - f1_ * x1i
                                                    + e2 * x2r - f2_ * x2i + e3 * x3r - f3_ * x3i)
                            acc_im[_u(step + v)] = (e0 * x0i + f0_ * x0r + e1 * x1i + f1_ * x1r
                                                    + e2 * x2i + f2_ * x2r + e3 * x3i + f3_ * x3r)
                    else:
                        for v in range(step):
                            x0r, x0i = xs[_u(p0 + v)], xs[_u(d + p0 + v)]
                            x1r, x1i = xs[_u(p1 + v)], xs[_u(d + p1 + v)]
                            x2r, x2i = xs[_u(p2 + v)], xs[_u(d + p2 + v)]
                            x3r, x3i = xs[_u(p3 + v)], xs[_u(d + p3 + v)]
                            acc_re[_u(v)] += (a0 * x0r - b0 * x0i + a1 * x1r - b1 * x1i
                                              + a2 * x2r - b2 * x2i + a3 * x3r - b3 * x3i)
                            acc_im[_u(v)] += (a0 * x0i + b0 * x0r + a1 * x1i + b1 * x1r
                                              + a2 * x2i + b2 * x2r + a3 * x3i + b3 * x3r)
                            acc_re[_u(step + v)] += (e0 * x0r - f0_ * x0i + e1 * x1r - f1_ * x1i
                                                     + e2 * x2r - f2_ * x2i + e3 * x3r - f3_ * x3i)
                            acc_im[_u(step + v)] += (e0 * x0i + f0_ * x0r + e1 * x1i + f1_ * x1r
                                                     + e2 * x2i + f2_ * x2r + e3 * x3i + f3_ * x3r)
                p = base + offs[o0 + r] + v0
                q = base + offs[o0 + r + 1] + v0
                for v in range(step):
                    re[_u(p + v)] = acc_re[_u(v)]
                    im[_u(p + v)] = acc_im[_u(v)]
                for v in range(step):
                    re[_u(q + v)] = acc_re[_u(step + v)]
                    im[_u(q + v)] = acc_im[_u(step + v)]


def _data(context, builder, signature, args, k):
    """The data pointer of array argument ``k`` of an intrinsic (LLVM IR codegen)."""
    return context.make_array(signature.args[k])(context, builder, args[k]).data


def _vector_at(builder, ptr, i, vty):
    """A pointer to the vector of type ``vty`` that starts at element ``i`` of ``ptr``."""
    return builder.bitcast(cgutils.gep(builder, ptr, i), vty.as_pointer())


def _vector_attributes(builder) -> None:
    """Ask LLVM for ``VECTOR_BYTES``-wide vectors in the function being built (its x86 tuning
    prefers 256 bits; see ``_make_group``)."""
    attrs = builder.function.attributes  # llvmlite knows no string attributes: set.add
    try:
        set.add(attrs, f'"prefer-vector-width"="{VECTOR_BYTES * 8}"')
        set.add(attrs, f'"min-legal-vector-width"="{VECTOR_BYTES * 8}"')
    except TypeError:  # an llvmlite whose attributes are no set: LLVM's own width (correct, slower)
        pass


def _make_group(d: int):
    """A numba intrinsic that applies a d-target gate to one group of 2^d amplitude runs: per strip
    of ``VECTOR_BYTES`` of lanes, the group's 2^d inputs (real and imaginary parts) are loaded into
    vector registers once, and every output is accumulated from them with the matrix entries as
    broadcast scalars, ``_VEC_ROWS`` output rows at a time (the accumulators of a block are
    independent chains, emitted interleaved, so FMAs of different rows overlap their latency).

    Written as LLVM IR rather than as a loop for numba's vectorizer, for three reasons measured on
    the 2-core AVX-512 host: LLVM's x86 tuning prefers 256-bit vectors in vectorized loops (the
    512-bit FMAs are 2x the 256-bit ones here: 102 against 55 GFMA/s on one core); in a loop over
    the lanes LICM hoisted the 2 * 4^d matrix broadcasts out of the loop and spilled them as full
    vectors (32 KiB for d = 4, over the stack, reloaded for every FMA); and fastmath
    reassociation turned each output's sum into one serial FMA chain. Here the matrix entries
    are loaded inside the strip loop (a 4-byte broadcast load from the matrix, which stays in L1)
    and the vector width is set by the function attributes. The inputs are loaded before any
    output is stored, so a group is updated in place without a copy. The same scheme written as
    a numba loop over a strip buffer (source text generated per d) ran at 24-26 GFMA/s (4 targets,
    complex64), below the accumulating ``_dense_any`` (32), with the 512-bit attribute and
    without reassociation alike; this IR runs at 55-62."""
    dim = 1 << d

    @intrinsic
    def group(typingctx, re, im, m_re, m_im, m0, offs, o0, base, run):
        sig = types.void(re, im, m_re, m_im, types.uint64, offs, types.uint64, types.uint64, types.uint64)

        def codegen(context, builder, signature, args):
            _vector_attributes(builder)
            real = signature.args[0].dtype
            width = VECTOR_BYTES * 8 // real.bitwidth
            vty = ir.VectorType(context.get_value_type(real), width)
            i64 = ir.IntType(64)
            align = real.bitwidth // 8

            d_re, d_im, d_mre, d_mim, d_offs = (_data(context, builder, signature, args, k) for k in (0, 1, 2, 3, 5))
            m0_, o0_, base_, run_ = args[4], args[6], args[7], args[8]
            mr = cgutils.gep(builder, d_mre, m0_)
            mi = cgutils.gep(builder, d_mim, m0_)
            start = [builder.add(base_, builder.load(cgutils.gep(builder, d_offs, builder.add(o0_, i64(c)))))
                     for c in range(dim)]
            # fmuladd: an FMA where the target has one, a multiply and an add elsewhere
            fmuladd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                                     f"llvm.fmuladd.v{width}f{real.bitwidth}")
            undef = ir.Constant(vty, ir.Undefined)
            zeros = ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width)

            def splat(ptr, k):
                x = builder.load(cgutils.gep(builder, ptr, i64(k)))
                return builder.shuffle_vector(builder.insert_element(undef, x, ir.IntType(32)(0)), undef, zeros)

            def vector_at(ptr, i):
                return _vector_at(builder, ptr, i, vty)

            with cgutils.for_range_slice(builder, i64(0), run_, i64(width), intp=i64) as (v, _):
                at = [builder.add(p, v) for p in start]
                xr = [builder.load(vector_at(d_re, i), align=align) for i in at]
                xi = [builder.load(vector_at(d_im, i), align=align) for i in at]
                for r0 in range(0, dim, _VEC_ROWS):
                    rows = range(r0, min(dim, r0 + _VEC_ROWS))
                    acc_r: dict = {}
                    acc_i: dict = {}
                    for c in range(dim):
                        for r in rows:
                            a, b = splat(mr, r * dim + c), splat(mi, r * dim + c)
                            if c == 0:
                                acc_r[r] = builder.fmul(a, xr[c])
                                acc_i[r] = builder.fmul(a, xi[c])
                            else:
                                acc_r[r] = builder.call(fmuladd, [a, xr[c], acc_r[r]])
                                acc_i[r] = builder.call(fmuladd, [a, xi[c], acc_i[r]])
                            acc_r[r] = builder.call(fmuladd, [builder.fneg(b), xi[c], acc_r[r]])
                            acc_i[r] = builder.call(fmuladd, [b, xr[c], acc_i[r]])
                    for r in rows:
                        builder.store(acc_r[r], vector_at(d_re, at[r]), align=align)
                        builder.store(acc_i[r], vector_at(d_im, at[r]), align=align)
            return context.get_dummy_value()

        return sig, codegen

    return group


_group2, _group3, _group4 = (_make_group(d) for d in (2, 3, 4))


@_jit
def _dense_vec(re, im, m_re, m_im, m0, dim, offs, o0, fixed, f0, nf, cmask, nbits):
    """2-4 targets, runs of at least one vector (``VECTOR_BYTES``): group by group, ``_make_group``."""
    lo = fixed[f0]
    run = _u(1 << lo)
    for g in range(1 << (nbits - nf - lo)):
        base = _u(_insert_zeros(g, lo, fixed, f0, nf) | cmask)
        if dim == 4:
            _group2(re, im, m_re, m_im, _u(m0), offs, _u(o0), base, run)
        elif dim == 8:
            _group3(re, im, m_re, m_im, _u(m0), offs, _u(o0), base, run)
        else:
            _group4(re, im, m_re, m_im, _u(m0), offs, _u(o0), base, run)


@_jit
def _diagonal(re, im, t_re, t_im, t0, skip, s0, n_entries, lanes, fixed, f0, nf, nbits):
    """Row bits ``fixed[f0:f0+nf]`` (all >= log2(lanes)); entry e of the 2^nf combinations is
    the lane vector ``t[t0 + e*lanes : t0 + (e+1)*lanes]``, skipped where ``skip`` says it is all 1."""
    if nf == 0:
        lo = nbits
    else:
        lo = fixed[f0]
    run = 1 << lo
    for e in range(n_entries):
        if skip[s0 + e]:
            continue
        pattern = 0
        for k in range(nf):
            pattern |= ((e >> k) & 1) << fixed[f0 + k]
        te = t0 + e * lanes
        for g in range(1 << (nbits - nf - lo)):
            base = _insert_zeros(g, lo, fixed, f0, nf) | pattern
            for v0 in range(base, base + run, lanes):
                for j in range(lanes):
                    i = _u(v0 + j)
                    a = t_re[_u(te + j)]
                    b = t_im[_u(te + j)]
                    xr = re[i]
                    xi = im[i]
                    re[i] = a * xr - b * xi
                    im[i] = a * xi + b * xr


@intrinsic
def _gather_load(typingctx, src, base, stab, dtab, lane, re, im, q0, q1, mode):
    """The chunk load by vectors: for q in q0 .. q1-1 and j < V (one vector, ``VECTOR_BYTES``),
    ``re[dtab[q] + j], im[dtab[q] + j] = src[2 * a], src[2 * a + 1]`` with
    ``a = base + stab[q] + lane[j]`` (``src``: the state as interleaved real and imaginary parts).

    ``mode`` :data:`LOAD_CONTIGUOUS` (``lane[j] == j``: the chunk's low bits are the source's): a
    vector is two plain loads of interleaved pairs, split into its real and imaginary halves by
    shuffles. :data:`LOAD_AMPLITUDES`: the V amplitudes are loaded one (re, im) pair each (8 or
    16 bytes), merged by shuffles into one vector of pairs and split the same way.
    :data:`LOAD_HARDWARE_GATHER`: one hardware gather of (re, im) pairs (complex64: a pair is one
    64-bit element) or two (complex128: the real and the imaginary parts).

    Why: the element-by-element load through index tables that this replaces ran at 1.6-7x a
    copy's time on any stage that changes the layout (24 qubits, 2-core AVX-512 Xeon;
    docs/results.md, section 11), being issue-bound at several instructions an amplitude. The
    hardware gather moved a vector in a few instructions and made those stages 0.81-0.99x as
    long there; on a 2-core AVX-512 Zen 5 it was slower than the element-by-element load in
    complex128 (a gather of 8 doubles is 8 loads, and complex128 needs two over the same 8
    amplitudes). Loading the amplitudes one by one takes half the loads of complex128's two
    gathers, and on the Zen 5 (24 qubits, 2 threads, loads alone, the two builds alternating in
    separate processes) took complex128 brickwork(24, 4, 10) 0.330-0.343 -> 0.175-0.193 s and
    QFT 0.206-0.246 -> 0.108-0.149 s, complex64 quantum volume 0.429-0.435 -> 0.306-0.332 s and
    QFT 0.098-0.099 -> 0.062-0.065 s, against the hardware gather; results are bit-identical."""
    sig = types.void(src, types.uint64, stab, dtab, lane, re, im, types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        _vector_attributes(builder)
        real = signature.args[0].dtype
        width = VECTOR_BYTES * 8 // real.bitwidth
        i1, i32, i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
        fty = context.get_value_type(real)
        vty = ir.VectorType(fty, width)
        ivty = ir.VectorType(i64, width)
        d_src, d_stab, d_dtab, d_lane, d_re, d_im = (_data(context, builder, signature, args, k)
                                                      for k in (0, 2, 3, 4, 5, 6))
        base, q0, q1, mode = args[1], args[7], args[8], args[9]
        align = real.bitwidth // 8
        undef = ir.Constant(ivty, ir.Undefined)
        zeros = ir.Constant(ir.VectorType(i32, width), [0] * width)

        def splat(x):
            return builder.shuffle_vector(builder.insert_element(undef, x, i32(0)), undef, zeros)

        even = ir.Constant(ir.VectorType(i32, width), [2 * j for j in range(width)])
        odd = ir.Constant(ir.VectorType(i32, width), [2 * j + 1 for j in range(width)])
        mask = ir.Constant(ir.VectorType(i1, width), [1] * width)
        # a gathered element: a (re, im) pair of float32 as one i64, or one float64
        ety = i64 if real.bitwidth == 32 else fty
        gvty = ir.VectorType(ety, width)
        pvty = ir.VectorType(ety.as_pointer(), width)
        pointee = "" if str(ety.as_pointer()) == "ptr" else str(ety)  # opaque or typed pointers
        gather = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(gvty, [pvty, i32, ir.VectorType(i1, width), gvty]),
            f"llvm.masked.gather.v{width}{ety}.v{width}p0{pointee}")
        lane = builder.load(builder.bitcast(d_lane, ivty.as_pointer()), align=8)
        origin = splat(builder.ptrtoint(d_src, i64))
        pair = ir.Constant(ivty, [2 * align] * width)
        passthru = ir.Constant(gvty, ir.Undefined)
        is_contig = builder.icmp_unsigned("==", mode, i64(LOAD_CONTIGUOUS))
        is_hardware = builder.icmp_unsigned("==", mode, i64(LOAD_HARDWARE_GATHER))

        def fetch(addr):
            return builder.call(gather, [builder.inttoptr(addr, pvty), i32(align), mask, passthru])

        p2ty = ir.VectorType(fty, 2)

        def put(r, m, t):  # a vector's real and imaginary parts into the chunk at t
            builder.store(r, _vector_at(builder, d_re, t, vty), align=align)
            builder.store(m, _vector_at(builder, d_im, t, vty), align=align)

        def amplitudes(off):
            # the V amplitudes one (re, im) load each, merged by shuffles (a tree of concatenations)
            # into one vector of pairs, then split into the real and imaginary vectors
            parts = []
            for j in range(width):
                at = builder.mul(builder.add(off, builder.load(cgutils.gep(builder, d_lane, i64(j)))), i64(2))
                parts.append(builder.load(builder.bitcast(cgutils.gep(builder, d_src, at), p2ty.as_pointer()),
                                          align=align))
            while len(parts) > 1:
                w = 2 * parts[0].type.count
                idx = ir.Constant(ir.VectorType(i32, w), list(range(w)))
                parts = [builder.shuffle_vector(parts[k], parts[k + 1], idx) for k in range(0, len(parts), 2)]
            both = parts[0]
            return builder.shuffle_vector(both, both, even), builder.shuffle_vector(both, both, odd)

        with cgutils.for_range_slice(builder, q0, q1, i64(1), intp=i64) as (q, _):
            off = builder.add(base, builder.load(cgutils.gep(builder, d_stab, q)))
            t = builder.load(cgutils.gep(builder, d_dtab, q))
            with builder.if_else(is_contig) as (then, other):
                with then:
                    p = builder.mul(off, i64(2))
                    a = builder.load(_vector_at(builder, d_src, p, vty), align=align)
                    b = builder.load(_vector_at(builder, d_src, builder.add(p, i64(width)), vty), align=align)
                    put(builder.shuffle_vector(a, b, even), builder.shuffle_vector(a, b, odd), t)
                with other:
                    with builder.if_else(is_hardware) as (hw, one_by_one):
                        with hw:
                            addr = builder.add(builder.mul(builder.add(splat(off), lane), pair), origin)
                            if real.bitwidth == 32:
                                both = builder.bitcast(fetch(addr), ir.VectorType(fty, 2 * width))
                                r = builder.shuffle_vector(both, both, even)
                                m = builder.shuffle_vector(both, both, odd)
                            else:
                                r = fetch(addr)
                                m = fetch(builder.add(addr, ir.Constant(ivty, [align] * width)))
                            put(r, m, t)
                        with one_by_one:
                            put(*amplitudes(off), t)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _interleave_nt(typingctx, dst, start, re, im, i0, i1):
    """``dst[2 * (start + i)], dst[2 * (start + i) + 1] = re[i], im[i]`` for i in i0 .. i1-1 (i1 - i0
    a multiple of a vector, ``dst`` at 2 * (start + i0) aligned to ``VECTOR_BYTES``), one vector
    of re and one of im interleaved into two vectors by shuffles and written with non-temporal
    stores, then a fence (the stores are weakly ordered; the chunk must be in memory before
    another thread reads it in the next pass).

    Non-temporal because the store writes the whole state: a plain store first reads each line
    it writes (read for ownership), a third stream beside the load's read and the write. On the
    2-core host, 24 qubits, the store of every chunk took 9.2 ms with plain stores (numba's
    vectorized loop) and 4.0 with these (complex64, 1 MiB chunks, 2 threads; complex128 22.4
    and 9.2); load and store together 18.3 -> 11.3 ms, the 11 ms of a 2-thread copy. numba's
    loops cannot ask for non-temporal stores: here they are LLVM metadata on the store."""
    sig = types.void(dst, types.uint64, re, im, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        real = signature.args[0].dtype
        width = VECTOR_BYTES * 8 // real.bitwidth
        vty = ir.VectorType(context.get_value_type(real), width)
        i32, i64 = ir.IntType(32), ir.IntType(64)

        d_dst, d_re, d_im = (_data(context, builder, signature, args, k) for k in (0, 2, 3))
        start, i0, i1 = args[1], args[4], args[5]
        nt = builder.module.add_metadata([i32(1)])
        # element j of the pair (a, b) takes re[v + j // 2] (even j) or im[v + j // 2] (odd j)
        first = ir.Constant(ir.VectorType(i32, width), [j // 2 + (width if j % 2 else 0) for j in range(width)])
        second = ir.Constant(ir.VectorType(i32, width),
                             [width // 2 + j // 2 + (width if j % 2 else 0) for j in range(width)])
        align = real.bitwidth // 8

        def vector_at(ptr, i):
            return _vector_at(builder, ptr, i, vty)

        with cgutils.for_range_slice(builder, i0, i1, i64(width), intp=i64) as (v, _):
            r = builder.load(vector_at(d_re, v), align=align)
            m = builder.load(vector_at(d_im, v), align=align)
            p = builder.mul(builder.add(start, v), i64(2))
            a = builder.store(builder.shuffle_vector(r, m, first), vector_at(d_dst, p), align=VECTOR_BYTES)
            b = builder.store(builder.shuffle_vector(r, m, second), vector_at(d_dst, builder.add(p, i64(width))),
                              align=VECTOR_BYTES)
            a.set_metadata("nontemporal", nt)
            b.set_metadata("nontemporal", nt)
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@_jit
def _store(dst, start, re, im):
    """Chunk ``re``/``im`` to ``dst[2 * start ...]``, interleaved: the aligned body by
    ``_interleave_nt``, a head up to the first aligned vector and the tail by a loop (all of it
    when the amplitudes are not aligned to their size)."""
    n = re.size
    amp = 2 * dst.itemsize
    addr = dst.ctypes.data + 2 * start * dst.itemsize
    head = n
    if addr % amp == 0:
        head = min(n, ((-addr) % VECTOR_BYTES) // amp)
    width = VECTOR_BYTES // dst.itemsize
    body = head + (n - head) // width * width
    for i in range(head):
        dst[_u(2 * (start + i))] = re[_u(i)]
        dst[_u(2 * (start + i) + 1)] = im[_u(i)]
    if body > head:
        _interleave_nt(dst, _u(start), re, im, _u(head), _u(body))
    for i in range(body, n):
        dst[_u(2 * (start + i))] = re[_u(i)]
        dst[_u(2 * (start + i) + 1)] = im[_u(i)]


@_jit
def run_chunks(src, dst, c0, c1, nbits, lanes, high_src, run_bits, src_tab, dst_tab, scatter, ops, offs, fixed, highs,
               m_re, m_im, skip, re, im, acc_re, acc_im, xs, v_lane, v_stab, v_dtab, v_mode, s_tab, s_high, fresh=False):
    """Apply the encoded ops to chunks ``c0 .. c1-1`` of the state: chunk h is read from ``src``
    (bit-permuted: see below), changed, and written to ``dst`` as ``s_tab.size`` equal parts,
    part r to the amplitudes from ``out(h) | s_tab[r]`` on, where ``out(h)`` puts bit j of h at
    bit ``s_high[j]`` (a stage: one part, ``s_high`` = nbits, nbits + 1, ..., so chunk h is
    amplitudes h*2^nbits .. (h+1)*2^nbits - 1). ``src`` and ``dst`` are the states viewed as
    interleaved real and imaginary parts; they may be the same array when the permutation keeps
    every chunk in its place.

    With ``v_lane`` not empty the load is ``_gather_load``'s, by vectors (tables from
    ``cpu._vector_tables``). Otherwise it reads runs of 2^run_bits
    contiguous source amplitudes: run o starts at ``base(h) | src_tab[o]``, where ``base(h)``
    puts bit j of h at bit ``high_src[j]``, and its element j goes to chunk element
    ``dst_tab[o] + scatter[j]`` (``scatter`` empty: ``dst_tab[o] + j``, no permutation). Bit m
    of o sets chunk bit log2(dst_tab[2^m]); the runs that differ only in the bits that select
    chunk bits inside a 64-byte line are loaded together, element j of each in turn.

    ``fresh``: ``src`` is not read; each chunk starts as the part of |0...0> it holds (amplitude
    0 of chunk 0 is 1, all else 0: the state is |0...0> in any layout), so a run from |0...0>
    needs no pass to zero the state and its first stage none to read it.
    """
    size = 1 << nbits
    run = 1 << run_bits
    direct = scatter.size == 0
    n_runs = size >> run_bits
    # the run-index bits that select chunk bits inside a cache line: the runs that differ only
    # in them fill the same lines, so they are loaded together, element by element (see below)
    line = VECTOR_BYTES // re.itemsize
    tile_bits = np.zeros(64, np.int64)
    n_tile = 0
    m = 0
    while (1 << m) < n_runs:
        if dst_tab[1 << m] < line:
            tile_bits[n_tile] = m
            n_tile += 1
        m += 1
    tile = np.zeros(1 << n_tile, np.int64)
    for j in range(1 << n_tile):
        for b in range(n_tile):
            tile[j] |= ((j >> b) & 1) << tile_bits[b]
    t_src = np.zeros(1 << n_tile, np.int64)
    t_dst = np.zeros(1 << n_tile, np.int64)
    for h in range(c0, c1):
        base = 0
        for j in range(high_src.size):
            base |= ((h >> j) & 1) << high_src[j]
        if fresh:
            for i in range(size):
                re[i] = 0.0
                im[i] = 0.0
            if h == 0:
                re[0] = 1.0
        elif v_lane.size:
            _gather_load(src, _u(base), v_stab, v_dtab, v_lane, re, im, _u(0), _u(v_stab.size), _u(v_mode))
        elif n_tile == 0:
            for o in range(n_runs):
                s = 2 * (base | src_tab[o])
                t = dst_tab[o]
                if direct:
                    for i in range(run):
                        re[_u(t + i)] = src[_u(s + 2 * i)]
                        im[_u(t + i)] = src[_u(s + 2 * i + 1)]
                else:
                    for i in range(run):
                        d = _u(t + scatter[_u(i)])
                        re[d] = src[_u(s + 2 * i)]
                        im[d] = src[_u(s + 2 * i + 1)]
        else:
            # Runs that scatter into the chunk's low bits (lanes that change between stages):
            # loaded run by run, every store went to another cache line and each line was
            # stored to by 2^n_tile runs far apart in time (one thread, lanes 0-5 exchanged
            # with chunk bits 13-18 of a 2^19-amplitude complex64 chunk: 9.1 ms a chunk, an
            # unpermuted load 1.2). Element i of the 2^n_tile runs of a tile lands in one
            # line: those stores are made one after the other (2.2 ms).
            for g in range(n_runs >> n_tile):
                o = _insert_zeros(g, 0, tile_bits, 0, n_tile)
                for j in range(1 << n_tile):
                    t_src[j] = 2 * (base | src_tab[o | tile[j]])
                    t_dst[j] = dst_tab[o | tile[j]]
                for i in range(run):
                    d = i if direct else scatter[_u(i)]
                    for j in range(1 << n_tile):
                        s = _u(t_src[j] + 2 * i)
                        t = _u(t_dst[j] + d)
                        re[t] = src[s]
                        im[t] = src[s + 1]
        for k in range(ops.shape[0]):
            kind = ops[k, K_KIND]
            dim = ops[k, K_DIM]
            if kind == DENSE_OP:
                hmask = ops[k, K_HMASK]
                if (h & hmask) != hmask:
                    continue  # a control above the chunk is 0 here
                if dim in VEC_DIMS and (1 << fixed[ops[k, K_FIX]]) * re.itemsize >= VECTOR_BYTES:
                    _dense_vec(re, im, m_re, m_im, ops[k, K_DATA], dim, offs, ops[k, K_OFFS], fixed, ops[k, K_FIX],
                               ops[k, K_NFIX], ops[k, K_CMASK], nbits)
                elif dim == 2:
                    _dense2(re, im, m_re, m_im, ops[k, K_DATA], offs, ops[k, K_OFFS], fixed, ops[k, K_FIX],
                            ops[k, K_NFIX], ops[k, K_CMASK], nbits)
                elif dim == 4:
                    _dense4(re, im, m_re, m_im, ops[k, K_DATA], offs, ops[k, K_OFFS], fixed, ops[k, K_FIX],
                            ops[k, K_NFIX], ops[k, K_CMASK], nbits)
                else:
                    _dense_any(re, im, m_re, m_im, ops[k, K_DATA], dim, offs, ops[k, K_OFFS], fixed, ops[k, K_FIX],
                               ops[k, K_NFIX], ops[k, K_CMASK], nbits, acc_re, acc_im, xs)
            else:
                hv = 0
                for j in range(ops[k, K_NHIGH]):
                    hv |= ((h >> highs[ops[k, K_HIGH] + j]) & 1) << j
                t0 = ops[k, K_DATA] + hv * dim * lanes
                s0 = ops[k, K_OFFS] + hv * dim
                _diagonal(re, im, m_re, m_im, t0, skip, s0, dim, lanes, fixed, ops[k, K_FIX], ops[k, K_NFIX], nbits)
        out = 0
        for j in range(s_high.size):
            out |= ((h >> j) & 1) << s_high[j]
        part = size // s_tab.size
        for r in range(s_tab.size):
            _store(dst, out | s_tab[r], re[r * part:(r + 1) * part], im[r * part:(r + 1) * part])
