"""GPU stages of the CRT scheme: kernels from ``crt.cu`` and the INT8 products through cuBLAS
``gemmEx`` (CUDA_R_8I in, CUDA_R_32I out, CUBLAS_COMPUTE_32I, TN: residues stored K-major, k padded
to a multiple of 16), batched over the moduli (:func:`gemm.cuda.cublas.gemm_s8_batched`).

The same stage interface as :mod:`gemm.ozaki.crt.cpu`, cupy first; the results are bit-identical:
residues are residues of exact integers (unique), computed in ``crt.cu`` with exact FP32 / INT32
arithmetic from the constants of :func:`_ftable` (or, with :data:`RESIDUES` ``"mma"``, as INT8
tensor-core products of balanced limbs, :mod:`gemm.ozaki.crt.limbs`); the reconstruction's words are exact integer sums
that, once the quotient is taken off and the carries balance them, are the unique digits of the
exact product (whichever representatives of the products' residues came in), and the final word
sum repeats the CPU operations in order (``crt.cu`` is built with ``--fmad=false``). One reconstruction kernel per
block of lines reads every modulus' INT32 products (or, :func:`reconstruct_r8`, INT8 residues of
them) and writes the FP64 / complex128 output once, in its final layout. cupy comes from the
caller; nothing here imports it at module level.
"""

from __future__ import annotations

import os

import numpy as np

from gemm.cuda import cublas
from gemm.cuda.compile import PIPELINE, raw_module
from gemm.device import sm_count
from gemm.ozaki.crt import limbs
from gemm.ozaki.crt.moduli import MAX_MODULI, PARTS, Moduli, b_lines, dot_length, recip32
from gemm.ozaki.crt.scale import DCAP
from gemm.ozaki.gpu import kmajor, line_view

KP_ALIGN = 16  # residue lines padded to 16 bytes (cuBLAS's INT8 TN needs multiples of 4)
ITEM_RES, ITEM_PROD = 1, 4  # int8 residues, int32 products
FORM_CODE = {None: 0, "4m": 1, "3m": 2, "2m": 3}
NSTAT = DCAP + 2  # per operand: [NaN/Inf count, depth histogram 0..DCAP]
_i32, _i64 = np.int32, np.int64
_TABLES: dict = {}
FT = 16  # floats per modulus in the FP32 table (crt.cu FT)
RES_DIGIT, RES_JMAX = 14, 6  # digit bits of a scaled integer and the most digits (crt.cu DIGIT, JMAX)
RES_TILE = (16, 128)  # lines x k per residue block (crt.cu RES_TL, RES_TK)


def _module_defines(mods: Moduli, form) -> tuple[str, ...]:
    """A module per complex form and word count: both compile-time in the residue and reconstruction
    kernels (their per-modulus work had been a third comparisons and branches on them), which only
    such a module holds; the line exponents' module, built without defines, has those kernels alone."""
    return (f"REC_FORM={FORM_CODE[form]}", f"REC_W={mods.words}", f"REC_CPT={REC_CPT}")


def _fn(cp, name, defines: tuple[str, ...] = ()):
    """Kernel ``name`` of ``crt.cu``, compiled once per process, device and set of ``-D`` defines."""
    opts = ("-std=c++17", "--fmad=false") + tuple(f"-D{d}" for d in defines)
    return raw_module(__package__, "crt.cu", opts, cp.cuda.Device().id, (PIPELINE,)).get_function(name)


def sym(r: int, p: int) -> int:
    """``r mod p`` in the symmetric range ``[-floor(p/2), ceil(p/2) - 1]`` (as :func:`cpu.sym`)."""
    r %= p
    return r - p if r > (p - 1) // 2 else r


def _ftable(mods: Moduli) -> np.ndarray:
    """The FP32 constants of ``crt.cu``'s residue and reconstruction kernels: float32 ``(n, FT)``.

    Per modulus p: ``p, 1/p (rounded to float32), 0, s, 0, 0, 0, 2^16 mod p, 2^(14 j) mod p for
    j = 0..7`` with ``s`` from :attr:`Moduli.table` and every residue in the symmetric range
    (magnitude <= 128): exact small integers in float32, the bounds ``crt.cu`` states rest on these
    magnitudes. (Slots 2 and 4-6 held the reconstruction's multipliers, now folded into
    :meth:`Moduli.weights`; they stay so that the kernels' float4 reads keep their places.)
    """
    out = np.zeros((len(mods), FT), dtype=np.float32)
    for i, p in enumerate(mods.values):
        out[i, :8] = (p, recip32(p), 0, sym(int(mods.table[i, 3]), p), 0, 0, 0, sym(1 << 16, p))
        out[i, 8:] = [sym(1 << (RES_DIGIT * j), p) for j in range(8)]
    return out


def _tables(cp, mods: Moduli, form):
    """The moduli constants on the current device (uploaded once per moduli set, form and device):
    ``(weights, digits_p, ftable)``, the weights' words of ``form`` (:meth:`Moduli.weights`)."""
    key = (mods.values, mods.family, form if form == "2m" else None, cp.cuda.Device().id)
    if key not in _TABLES:
        if len(mods) > MAX_MODULI:
            raise ValueError(f"at most {MAX_MODULI} moduli (crt.cu MAXN), got {len(mods)}")
        _TABLES[key] = (cp.asarray(np.ascontiguousarray(mods.weights(form))), cp.asarray(mods.digits_p),
                        cp.asarray(_ftable(mods)))
    return _TABLES[key]


def residue_digits(bits: int) -> int:
    """Digits of :data:`RES_DIGIT` bits for the scaled integers of a ``bits`` operand
    (``|a'| <= 2^bits``, so ``bits + 1`` bits of magnitude), at least 2 (the smallest kernel)."""
    J = max(2, -(-(bits + 1) // RES_DIGIT))
    if J > RES_JMAX:
        raise ValueError(f"scaled integers of {bits} bits need {J} digits; crt.cu is built for {RES_JMAX}")
    return J


LB_THREADS, LB_PER = 256, (2, 4, 8, 16, 32)  # crt.cu's block-per-line kernels: threads, values a thread
LB_COPY_BYTES = 64 << 20  # strided operands up to this size are copied K-major for the block kernel


def _block_per(X, cplx) -> int:
    """Values a thread for the block-per-line exponent kernel, or 0 where a line is not contiguous
    or has fewer than 512 or more than 8192 doubles (the warp or thread kernel takes those)."""
    so, si, sk, n_in = (int(v) for v in line_view(X))
    n = X.shape[2] * (2 if cplx else 1)
    if sk != 1 or not LB_THREADS * LB_PER[0] <= n <= LB_THREADS * LB_PER[-1]:
        return 0
    return next(p for p in LB_PER if p * LB_THREADS >= n)


def line_exponents(cp, XA, XB, cplx, want_hist):
    """Norm exponents of A's rows and B's columns, NaN/Inf counts and depth histograms, with one
    small host read.

    Returns:
        ``(E_a, E_b, (bad_a, bad_b, hist_a, hist_b))``: int32 device arrays, ints, numpy int64
        histograms (None when not wanted).
    """
    stats = cp.zeros(2 * NSTAT, dtype=cp.uint64)
    es = []
    for i, X in enumerate((XA, XB)):
        nlines = X.shape[0] * X.shape[1]
        E = cp.empty(nlines, dtype=cp.int32)
        so, si, sk, n_in = line_view(X)
        args = (X, so, si, sk, n_in, _i64(nlines), _i32(X.shape[2]), _i32(cplx), _i32(want_hist), E,
                stats[i * NSTAT:(i + 1) * NSTAT])
        per = _block_per(X, cplx)
        if not per and not kmajor(X) and X.nbytes <= LB_COPY_BYTES:
            # strided lines (B's columns): a K-major copy for the block kernel, since the thread
            # kernel gives the 1024 columns of a d = 10 gate four blocks of 256 threads
            Xc = cp.ascontiguousarray(X)
            per = _block_per(Xc, cplx)
            if per:
                X = Xc
                so, si, sk, n_in = line_view(X)
        if per:
            _fn(cp, f"crt_line_exponents_block_{per}")((int(min(nlines, 8192)),), (LB_THREADS,), (
                X, so, si, n_in, _i64(nlines), _i32(X.shape[2]), _i32(cplx), _i32(want_hist), E,
                stats[i * NSTAT:(i + 1) * NSTAT]))
        elif kmajor(X):
            _fn(cp, "crt_line_exponents_warp")((int(min(-(-nlines // 8), 8192)),), (256,), args)
        else:
            _fn(cp, "crt_line_exponents_thread")((int(min(-(-nlines // 256), 8192)),), (256,), args)
        es.append(E)
    host = stats.get().astype(np.int64)  # the one host read of the call
    out = []
    for i in range(2):
        h = host[i * NSTAT:(i + 1) * NSTAT]
        out.append((int(h[0]), h[1:] if want_hist else None))
    return es[0], es[1], (out[0][0], out[1][0], out[0][1], out[1][1])


# The residue kernel: "fp32" (crt_residues_J, the digits' FP32 fma chains) or "mma"
# (crt_residues_mma, the limbs' sums on the INT8 tensor cores, :mod:`gemm.ozaki.crt.limbs`); the
# same bytes either way
RESIDUE_KERNELS = ("fp32", "mma")
RESIDUES = os.environ.get("QSIM_TC_CRT_RESIDUES", "fp32")
if RESIDUES not in RESIDUE_KERNELS:
    raise ValueError(f"QSIM_TC_CRT_RESIDUES={RESIDUES!r} is not valid; expected one of {', '.join(RESIDUE_KERNELS)}")
RZ_TILE = (16, 64)  # lines x k per block of crt_residues_mma (crt.cu RZ_TL, RZ_TK)
_FRAGS: dict = {}


def _fragments_on_device(cp, mods: Moduli, form, role):
    key = (mods.values, mods.family, form, role, cp.cuda.Device().id)
    if key not in _FRAGS:
        _FRAGS[key] = cp.asarray(limbs.fragments(limbs.table(mods, form, role)))
    return _FRAGS[key]


def residues(cp, X, E, bits, line0, nlines, mods: Moduli, form, role, kp, kernel: str | None = None):
    """INT8 residues of lines ``[line0, line0 + nlines)`` scaled to ``bits``: ``(n, G, lines_out, kp)``.

    ``kernel`` (default :data:`RESIDUES`): ``"fp32"`` or ``"mma"``, the same bytes.

    Raises:
        ValueError: an unknown ``kernel``, or ``kp`` not a multiple of 4 (8 for ``"mma"``).
    """
    kernel = kernel or RESIDUES
    if kernel not in RESIDUE_KERNELS:
        raise ValueError(f"residue kernel {kernel!r} is not valid; expected one of {', '.join(RESIDUE_KERNELS)}")
    if kp % (8 if kernel == "mma" else 4):  # the kernels' 64- and 32-bit stores
        raise ValueError(f"residue lines must be multiples of {8 if kernel == 'mma' else 4} bytes, got {kp}")
    G = PARTS[form]
    lines_out = nlines * (b_lines(form) if role == "b" else 1)
    out = cp.empty((len(mods), G, lines_out, kp), dtype=cp.int8)
    kdot = dot_length(form, X.shape[2])
    if kp > kdot:  # the padding columns must read as zeros in the products
        out[..., kdot:] = 0
    ftab = _tables(cp, mods, form)[2]
    so, si, sk, n_in = line_view(X)
    K = X.shape[2]
    if kernel == "mma":
        blo, bhi = limbs.bias(bits)
        tl, tk = RZ_TILE
        grid = (int(-(-nlines // tl)), int(-(-K // tk)))
        _fn(cp, "crt_residues_mma", _module_defines(mods, form))(grid, (256,), (
            X, so, si, sk, n_in, _i64(line0), _i64(nlines), _i32(K), _i32(kmajor(X)), E, _i32(bits), ftab,
            _i32(len(mods)), _i32(0 if role == "a" else 1), out, _i64(lines_out), _i32(kp),
            _fragments_on_device(cp, mods, form, role), np.uint64(blo), np.uint64(bhi)))
        return out
    tl, tk = RES_TILE
    grid = (int(-(-nlines // tl)), int(-(-K // tk)))
    _fn(cp, f"crt_residues_{residue_digits(bits)}", _module_defines(mods, form))(grid, (32, 8), (
        X, so, si, sk, n_in, _i64(line0), _i64(nlines), _i32(K), _i32(kmajor(X)), E, _i32(bits), ftab,
        _i32(len(mods)), _i32(0 if role == "a" else 1), out, _i64(lines_out), _i32(kp)))
    return out


def products(cp, RA, RB, mods: Moduli, form):
    """INT32 products ``P[i, g, r, c] = RA[i, g, r] . RB[i, g, c]``: ``(n, G, rows, ldP)``, one
    cuBLAS call per part batched over the moduli."""
    n, G, rows, kp = RA.shape
    cols = RB.shape[2]
    ldP = -(-cols // 4) * 4
    P = cp.empty((n, G, rows, ldP), dtype=cp.int32)
    for g in range(G):
        # column-major C (cols x rows) = RB_g^T RA_g: row-major P[i, g] with leading dimension ldP
        cublas.gemm_s8_batched(cols, rows, kp, RB[:, g].data.ptr, kp, G * cols * kp,
                               RA[:, g].data.ptr, kp, G * rows * kp, P[:, g].data.ptr, ldP, G * rows * ldP, n)
    return P


def new_output(cp, R, NC, dtype, out_shape):
    """The output of a whole product in its final layout (the blocks write into it)."""
    return cp.empty(out_shape, dtype=dtype)


REC_COLUMNS = {4: 64, 1: 256}  # columns a reconstruction block: INT32 products, INT8 residues (crt.cu)
REC_CPT = 2  # INT8 output columns a reconstruction thread (crt.cu REC_CPT: 2 or 4)
REC_BLOCKS_PER_SM = 16  # reconstruction blocks a launch aims at, per multiprocessor of the device


def _reconstruct(cp, kernel, P, mods: Moduli, form, E_a, E_b, r0, c0, cols, out):
    n, G, rows, ldP = P.shape
    R, NC = int(E_a.size), int(E_b.size)
    wt, dp, ftab = _tables(cp, mods, form)
    if out.ndim == 3 and out.shape[1] == R and out.shape[0] * out.shape[2] == NC:
        n2 = out.shape[2]  # B stacked: column c = h * L + l
    else:
        n2 = NC
    bc = REC_COLUMNS[P.dtype.itemsize]
    vw = 2 if form == "4m" else 1
    smem = 2 * n * G * bc * vw * P.dtype.itemsize  # two row buffers of every plane (crt.cu)
    gx = -(-cols // bc)
    # rows per block: enough blocks to fill the device several times over, each walking a few rows
    # so that its next row's copies overlap this one's work
    gy = max(1, min(rows, 65535, -(-(REC_BLOCKS_PER_SM * sm_count(cp)) // gx)))
    threads = bc // (REC_CPT if P.dtype.itemsize == 1 else 1)  # INT8: REC_CPT columns a thread (crt.cu)
    _fn(cp, kernel, _module_defines(mods, form))((gx, gy), (threads,), (
        P, _i32(rows), _i32(cols), _i32(ldP), _i32(n), ftab, wt, dp, E_a, E_b, _i32(mods.alpha), _i32(mods.beta),
        _i64(r0), _i64(c0), out, _i64(R), _i64(n2), np.float64(mods.inv_P)), shared_mem=smem)


def reconstruct(cp, P, mods: Moduli, form, E_a, E_b, r0, c0, cols, out):
    """One block's INT32 products (rows ``r0..``, ``cols`` B lines from ``c0``) rebuilt by the CRT
    and written into ``out`` (one kernel)."""
    _reconstruct(cp, "crt_reconstruct", P, mods, form, E_a, E_b, r0, c0, cols, out)


def reconstruct_r8(cp, R8, mods: Moduli, form, E_a, E_b, r0, c0, cols, out):
    """:func:`reconstruct` from INT8 residues of the products instead of the INT32 products:
    ``R8`` int8 ``(n, G, rows, ld)`` in the products' layout, each value any representative in
    ``[-128, 127]`` of its product modulo ``p_i`` (:func:`gemm.ozaki.crt.wgmma.products_r8`).
    The output is the same bit for bit."""
    if R8.dtype != np.int8 or not R8.flags.c_contiguous:
        raise ValueError(f"reconstruct_r8 needs C-contiguous int8 residues, got {R8.dtype}")
    if R8.shape[-1] % 16 or R8.data.ptr % 16:  # the kernel copies rows in 16-byte pieces
        raise ValueError(f"reconstruct_r8 needs rows of a multiple of 16 bytes on a 16-byte boundary, "
                         f"got {R8.shape[-1]}")
    _reconstruct(cp, "crt_reconstruct_r8", R8, mods, form, E_a, E_b, r0, c0, cols, out)


# The reconstruction's word sums on INT8 tensor cores (crt.cu crt_reconstruct_mma): the forms it
# takes (one residue byte per element and plane), the limbs of a weight word, the padded planes
# of an element and the columns of a block.
MMA_FORMS = (None, "2m", "3m")
MMA_LIMBS, MMA_K, MMA_COLUMNS = 5, 64, 128
RECONSTRUCT_KERNELS = ("fp64", "mma")
# the reconstruction of the wgmma products' INT8 residues: "fp64" (crt_reconstruct_r8, FP64 word
# sums) or "mma" (crt_reconstruct_mma where the form allows); the same bits either way
RECONSTRUCT = os.environ.get("QSIM_TC_CRT_RECONSTRUCT", "fp64")
if RECONSTRUCT not in RECONSTRUCT_KERNELS:
    raise ValueError(f"QSIM_TC_CRT_RECONSTRUCT={RECONSTRUCT!r} is not valid; expected one of "
                     f"{', '.join(RECONSTRUCT_KERNELS)}")
_LIMBS: dict = {}


def _signs(form):
    """Per part (Re, Im), the sign of each product plane g in the form's combination c_i
    (:func:`gemm.ozaki.crt.cpu.combine`)."""
    if form is None:
        return ((1,),)
    if form == "2m":
        return ((1, 1), (1, -1))
    if form == "3m":
        return ((1, -1, 0), (-1, -1, 1))
    raise ValueError(f"the INT8 tensor-core reconstruction takes the forms {MMA_FORMS}, got {form!r}")


def balanced_limbs(v: int, count: int = MMA_LIMBS) -> list[int]:
    """``v = sum_l L_l 2^(8 l)`` with every ``L_l`` in ``[-128, 127]`` (``|v| < 2^39`` for 5 limbs)."""
    out = []
    for _ in range(count):
        lo = (v + 128) % 256 - 128
        out.append(lo)
        v = (v - lo) // 256
    if v:
        raise ValueError(f"{count} balanced 8-bit limbs do not hold the value")
    return out


def mma_row(word: int, limb: int) -> int:
    """Row of the limb matrix that holds ``limb`` of word ``word`` (crt.cu crt_reconstruct_mma):
    ``16 (3 grp + limb // 2) + 8 (limb % 2) + word % 8`` with ``grp = word // 8``, so that the lane
    rows g and g + 8 of three m16 tiles hold every limb of word g."""
    grp = word // 8
    return 16 * (3 * grp + limb // 2) + 8 * (limb % 2) + word % 8


def mma_limbs(mods: Moduli, form) -> np.ndarray:
    """The limb matrix of crt.cu's ``crt_reconstruct_mma``: int8 ``(48 ceil(NW / 8), MMA_K)`` for
    ``NW = parts W`` words an element; row :func:`mma_row` of word ``part W + w`` and limb ``l``,
    column the plane ``q = i G + g``: limb l of the signed weight word ``sign_g w_iw`` of the part
    (:meth:`Moduli.weights`), zero elsewhere. With ``u_q`` the products' residues,
    ``sum_q u_q (a word's rows)`` are the limb sums whose ``sum_l T_l 2^(8 l)`` are the FP64
    kernel's words ``S_w = sum_i c_i w_iw``."""
    signs = _signs(form)
    G = PARTS[form]
    wts = mods.weights(form)  # (2, n, W) exact integers below 2^38
    W, n = mods.words, len(mods)
    if n * G > MMA_K:
        raise ValueError(f"{n * G} product planes exceed the tensor-core reconstruction's {MMA_K}")
    nw = len(signs) * W
    out = np.zeros((48 * -(-nw // 8), MMA_K), dtype=np.int8)
    for part, sg in enumerate(signs):
        for i in range(n):
            for w in range(W):
                word = int(wts[part, i, w])
                for g, sign in enumerate(sg):
                    if sign:
                        for k, limb in enumerate(balanced_limbs(sign * word)):
                            out[mma_row(part * W + w, k), i * G + g] = limb
    return out


def _limbs_on_device(cp, mods: Moduli, form):
    key = (mods.values, mods.family, form, cp.cuda.Device().id)
    if key not in _LIMBS:
        _LIMBS[key] = cp.asarray(mma_limbs(mods, form))
    return _LIMBS[key]


def use_mma_reconstruct(form, kernel: str | None = None) -> bool:
    """Whether the INT8 residues of the products are rebuilt on the tensor cores: ``kernel``
    (default :data:`RECONSTRUCT`) is ``"mma"`` and the form has one byte per element and plane."""
    return (kernel or RECONSTRUCT) == "mma" and form in MMA_FORMS


def reconstruct_mma(cp, R8, mods: Moduli, form, E_a, E_b, r0, c0, cols, out):
    """:func:`reconstruct_r8` with the word sums as INT8 tensor-core products (crt.cu
    ``crt_reconstruct_mma``; the real, 2m and 3m forms): the same bits."""
    if form not in MMA_FORMS:
        raise ValueError(f"the INT8 tensor-core reconstruction takes the forms {MMA_FORMS}, got {form!r}")
    if R8.dtype != np.int8 or not R8.flags.c_contiguous:
        raise ValueError(f"reconstruct_mma needs C-contiguous int8 residues, got {R8.dtype}")
    if R8.shape[-1] % 16 or R8.data.ptr % 16:  # the kernel copies rows in 16-byte pieces
        raise ValueError(f"reconstruct_mma needs rows of a multiple of 16 bytes on a 16-byte boundary, "
                         f"got {R8.shape[-1]}")
    _reconstruct_mma(cp, R8, mods, form, E_a, E_b, r0, c0, cols, out)


def _reconstruct_mma(cp, R8, mods: Moduli, form, E_a, E_b, r0, c0, cols, out):
    n, G, rows, ldP = R8.shape
    R, NC = int(E_a.size), int(E_b.size)
    _, dp, _ = _tables(cp, mods, form)
    limbs = _limbs_on_device(cp, mods, form)
    if out.ndim == 3 and out.shape[1] == R and out.shape[0] * out.shape[2] == NC:
        n2 = out.shape[2]  # B stacked: column c = h * L + l
    else:
        n2 = NC
    ws = ((1 if form is None else 2) * mods.words) | 1
    smem = 2 * n * G * (MMA_COLUMNS + 16) + (MMA_COLUMNS // 32) * 32 * ws * 8  # crt.cu RM_SEG, RM_WS
    gx = -(-cols // MMA_COLUMNS)
    gy = max(1, min(rows, 65535, -(-(REC_BLOCKS_PER_SM * sm_count(cp)) // gx)))
    _fn(cp, "crt_reconstruct_mma", _module_defines(mods, form))((gx, gy), (MMA_COLUMNS,), (
        R8, _i32(rows), _i32(cols), _i32(ldP), _i32(n), limbs, dp, E_a, E_b, _i32(mods.alpha), _i32(mods.beta),
        _i64(r0), _i64(c0), out, _i64(R), _i64(n2), np.float64(mods.inv_P)), shared_mem=smem)


def to_layout(cp, out, R, NC, out_shape):
    """The output as it is: :func:`reconstruct` writes the final layout."""
    return out
