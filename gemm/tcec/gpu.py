"""GPU path of the error-corrected TF32/FP16 methods: stages around the kernels of ``tcec.cu``.

range (FP16 only; one small host read) -> split (hi/lo workspaces, K-contiguous, zero padded)
-> [corrections: lo*hi + hi*lo through cuBLAS, error-corrected "hybrid" product]
-> product (``tcec_gemm``, mma.sync) into a fresh output.

Operand forms. The kernel computes a real ``C = A @ B`` from workspaces ``A (m', k')`` and
``B^T (n', k')``. Real operands go as they are. Complex operands use one of two real forms, the
smaller operand being the one expanded to 2x2 blocks (4x its size, but it is the gate matrix):

* ``"interleaved-A"``: ``[Ar Ai] @ [[Br Bi], [-Bi Br]]``: A read as it lies in memory (re/im
  interleaved along k), the product lands interleaved in C: the bottom orientation ``S @ U.T``.
* ``"interleaved-B"``: ``[[Ar -Ai], [Ai Ar]] @ [Br; Bi]`` with B's columns split on the fly and
  the rows of the expanded A ordered so that each thread of the epilogue holds the real and
  imaginary parts of the same entries: the top and batched orientations ``U @ S``.

Every stride pattern is accepted: the split kernel reads the operand through its strides
(tiles of 32 x 32, read along whichever axis is contiguous) and transposes where needed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gemm.cuda import cublas as blas
from gemm.cuda import tma
from gemm.cuda.compile import PIPELINE, raw_module, source, with_headers
from gemm.cuda.sm90a import compile_module
from gemm.device import sm_count
from gemm.tcec import debias as db
from gemm.tcec.split import FP16_MIN_EXP, LO_SHIFT, pow2

PRODUCT_KERNELS = ("auto", "wgmma", "mma")  # the product_kernel option: see use_wgmma

# name -> (BM, BN, WARPS_M, WARPS_N, STAGES); chosen per shape class by tile_config()
TILES = {
    "square": (128, 128, 2, 4, 4),
    "square16": (128, 128, 4, 4, 4),  # 16 warps of 32 x 32 (128 registers): more warps to hide latency
    "narrow-n": (256, 64, 4, 2, 3),
    "tiny-n": (256, 32, 8, 1, 3),
    "tiny16": (256, 16, 8, 1, 3),  # 3-qubit complex gates at the bottom (16 real columns)
    "tiny8": (256, 8, 8, 1, 3),  # 1-, 2-qubit complex gates at the bottom (4, 8 real columns)
    "narrow-m": (64, 128, 2, 4, 4),
    "tiny-m": (16, 256, 1, 8, 4),  # a small gate on the left (top and batched orientations)
    "half2": (128, 64, 4, 2, 3),  # 8 warps of 32 x 32, two blocks per SM
}
TILE_MIN_BLOCKS = {"half2": 2}
SROW = 24
BKW = 16
MODES = {"ec": 0, "plain": 1, "markidis": 2, "ec-hybrid": 3}
FMT_IDS = {"tf32": 0, "fp16": 1}
# The wgmma product (tcec_wgmma.cu, sm_90a) serves the plain and the hybrid error-corrected hi*hi
# products on the "square" tile class, in a configuration chosen per mode and padded width
# (WG_CHOICE). Its stages are loaded by TMA (tcec_tma.cu): on the 28-qubit d = 10 gate that took
# the plain TF32 product from 11.6 to 5.7 ms and the TF32 hi*hi from 19.2 to 11.9 ms against the
# same kernel loading with cp.async (benchmarks/results/tcec_h200.json). The plain product takes
# 128 x 256 tiles where the width allows (fewer bytes per flop); the hi*hi product, whose
# additions leave the tensor cores idle part of the time, is fastest on 128 x 128 tiles.
WG_MODES = frozenset({"plain", "ec-hybrid", "ec"})
WG_TILE = "square"


class WgConfig(NamedTuple):
    bn: int  # tile columns
    tmp: int  # hi*hi temporaries: 2 ping-pong, 1 (the accumulator of 256 columns leaves room for one)
    atoms: int  # 32-word blocks of k per stage
    stages: int
    chain: int = 1  # k-steps per hi*hi product summed inside the tensor core
    nc: int = 128  # columns per hi*hi wgmma (64: half-size temporaries); the plain product takes 128
    load: str = "cp.async"  # how stages are loaded: "cp.async" (all threads) or "tma" (tcec_tma.cu)
    parts: int = 1  # 2: the stages hold the lo parts too (the fused error-corrected product, mode "ec")

    @property
    def smem_bytes(self) -> int:
        """Its stages, plus 1 KB to align them to 1024 bytes (and the TMA kernel's barriers)."""
        return (self.stages * self.atoms * self.parts * (128 + self.bn) * 128 + 1024
                + (16 * self.stages if self.load == "tma" else 0))

    @property
    def threads(self) -> int:
        return 384 if self.load == "tma" else 256


WG_CONFIGS = {"n128": WgConfig(128, 2, 2, 3), "n256": WgConfig(256, 1, 1, 4),
              "n256x64": WgConfig(256, 2, 1, 4, nc=64),
              "n128-tma": WgConfig(128, 2, 2, 3, load="tma"), "n256-tma": WgConfig(256, 1, 1, 4, load="tma"),
              "n256x64-tma": WgConfig(256, 2, 1, 4, nc=64, load="tma"),
              "n128-ec": WgConfig(128, 2, 1, 3, nc=64, load="tma", parts=2)}
# mode -> (configuration where the padded width is a multiple of 256 (None: none), elsewhere)
WG_CHOICE = {"plain": ("n256-tma", "n128-tma"), "ec-hybrid": (None, "n128-tma"), "ec": (None, "n128-ec")}
WG_K_WORDS = 64  # k padding of the square tile class: a multiple of every configuration's stage


def wg_config(n_p: int, mode: str) -> str:
    wide, narrow = WG_CHOICE[mode]
    return wide if wide and n_p % 256 == 0 else narrow


SQUARE_TILE = "square"  # the tile of large products (benchmarks/bench/tcec.py --square-tile compares)


def tile_config(m: int, n: int) -> str:
    """Tile shape for a real product of m' x n' (gate shapes: m' huge, n' = 2^(d+1), or the
    transpose): the narrowest tile that holds the small side, so that padding wastes at most half
    of the tensor-core work (padded to 64 rows, a 2-qubit gate in the batched orientation took
    29 ms at 28 qubits; on 16 rows 22 ms, benchmarks/results/tcec_small_tiles_h200.json)."""
    if n <= 8:
        return "tiny8"
    if n <= 16:
        return "tiny16"
    if n <= 32:
        return "tiny-n"
    if n <= 64:
        return "narrow-n"
    if m <= 16:
        return "tiny-m"
    if m <= 64:
        return "narrow-m"
    return SQUARE_TILE


def smem_bytes(tile: str, mode: str) -> int:
    """Dynamic shared memory of the product kernel; the modes without lo parts stage half."""
    bm, bn, _, _, stages = TILES[tile]
    return stages * (1 if mode in ("plain", "ec-hybrid") else 2) * (bm + bn) * SROW * 4


def _source(name: str = "tcec.cu") -> str:
    return source(__package__, name)


def _product_source(*names: str) -> str:
    """tcec.cu and the wgmma / TMA parts appended to it, after the shared pipeline helpers."""
    return with_headers(_source() + "".join(_source(n) for n in names))


@functools.lru_cache(maxsize=None)
def _stage_kernels(device_id: int, fmt: str):
    """(range, split) kernels of one format: they depend on nothing else, so one module per
    format serves every scheme, tile and product kernel (compiled without the product)."""
    mod = raw_module(__package__, "tcec.cu", ("-std=c++17", f"-DFMT={FMT_IDS[fmt]}", "-DTCEC_NO_MMA_GEMM"), device_id,
                     (PIPELINE,))
    return StageKernels(*(mod.get_function(n) for n in ("tcec_range", "tcec_split", "tcec_range_rows",
                                                         "tcec_split_rows")))


class StageKernels(NamedTuple):
    range: object  # any strides: tiles of 32 x 32 units through shared memory
    split: object
    range_rows: object  # rows of contiguous floats (rows_contiguous): float4 loads, vector stores
    split_rows: object


def rows_contiguous(op: "Operand") -> bool:
    """Whether each row of ``op`` is one 16-byte aligned run of floats, a multiple of 4 long, at
    16-byte aligned row and batch strides: the stage kernels then read it with float4 loads (the
    state in the gate orientations; 28 qubits, complex64: split 2.7 -> ms, range 1.5 -> ms)."""
    return (op.sc == op.unit and (op.units * op.unit) % 4 == 0 and op.sr % 4 == 0
            and (op.batch == 1 or op.sb % 4 == 0) and op.array.data.ptr % 16 == 0)


def _grid_stride_blocks(cp, n_threads: int) -> int:
    return int(max(1, min(-(-n_threads // 256), sm_count(cp) * 16)))


def mma_kernel(device_id: int, fmt: str, mode: str, tile: str, debias: bool = True, debias_mode: str = "epilogue"):
    """The mma.sync product kernel of one configuration (``mode``: a scheme, or "ec-hybrid";
    ``debias_mode``: "product" only for the fused "ec" mode, see :func:`debias_mode_of`), compiled
    once per process and device; the accumulation constants are read from ``gemm.tcec.debias`` (the
    CPU emulation uses the same)."""
    return _compiled(device_id, fmt, mode, tile, debias, db.HH_CHAIN, debias_mode)


def debias_mode_of(mode: str, wg: bool, k: int) -> str:
    """How a product debiases: per product only the mma.sync fused kernel ("ec", not wgmma) with a
    short k (gemm.tcec.debias.debias_mode); the hybrid has no correction accumulator in its k loop and
    the wgmma kernel adds its debias in the epilogue."""
    return db.debias_mode(k) if mode == "ec" and not wg else "epilogue"


@functools.lru_cache(maxsize=None)
def _compiled(device_id: int, fmt: str, mode: str, tile: str, debias: bool, chain: int, debias_mode: str):
    opts = _options(fmt, mode, tile, debias, chain, debias_mode)
    mod = raw_module(__package__, "tcec.cu", opts, device_id, (PIPELINE,))
    gemm_k = mod.get_function("tcec_gemm")
    gemm_k.max_dynamic_shared_size_bytes = smem_bytes(tile, mode)
    return gemm_k


def _options(fmt: str, mode: str, tile: str, debias: bool, chain: int, debias_mode: str) -> tuple[str, ...]:
    bm, bn, wm, wn, stages = TILES[tile]
    minb = TILE_MIN_BLOCKS.get(tile, 1)
    debias_id = 0 if not debias else (1 if debias_mode == "product" else 2)
    return ("-std=c++17", f"-DFMT={FMT_IDS[fmt]}", f"-DMODE={MODES[mode]}", f"-DBM={bm}", f"-DBN={bn}",
            f"-DWARPS_M={wm}", f"-DWARPS_N={wn}", f"-DSTAGES={stages}", f"-DMINB={minb}",
            f"-DHH_CHAIN={chain}", f"-DDEBIAS={debias_id}")


def wgmma_supported() -> bool:
    """The wgmma product needs an sm_90 device (H100/H200): its instructions exist only there."""
    import cupy  # noqa: PLC0415

    return cupy.cuda.Device().compute_capability == "90"


def use_wgmma(product_kernel: str, tile: str, mode: str) -> bool:
    """Whether the product runs on the wgmma kernel: "auto" takes it wherever it applies."""
    if product_kernel not in PRODUCT_KERNELS:
        raise ValueError(f"product_kernel={product_kernel!r} is not valid; expected one of "
                         f"{', '.join(PRODUCT_KERNELS)}")
    applies = tile == WG_TILE and mode in WG_MODES  # its error-corrected product debiases in the epilogue
    if product_kernel == "wgmma":
        if not applies:
            raise ValueError(f"product_kernel='wgmma' serves the plain and the error-corrected products (debias "
                             f"in the epilogue) on {WG_TILE} tiles; this product is {mode!r} on {tile!r} tiles")
        if not wgmma_supported():
            raise ValueError("product_kernel='wgmma' needs an sm_90 GPU (H100/H200)")
        return True
    return product_kernel == "auto" and applies and wgmma_supported()


@functools.lru_cache(maxsize=None)
def _wg_kernel(device_id: int, fmt: str, mode: str, debias: bool, cfg: WgConfig, debias_mode: str):
    """The wgmma product, compiled for sm_90a by NVRTC (cupy's own compile targets plain sm_90)."""
    if (cfg.parts == 2) != (mode == "ec"):
        raise ValueError(f"wgmma configuration {cfg} does not serve mode {mode!r}: the fused error-corrected "
                         "product (and only it) stages the lo parts (parts=2)")
    opts = _options(fmt, mode, WG_TILE, debias, cfg.chain, debias_mode) + (
        f"-DWG_BN={cfg.bn}", f"-DWG_TMP={cfg.tmp}", f"-DWG_ATOMS={cfg.atoms}", f"-DWG_STAGES={cfg.stages}",
        f"-DWG_CHAIN={cfg.chain}", f"-DWG_NC={cfg.nc if mode != 'plain' else 128}", "-DTCEC_NO_MMA_GEMM")
    if cfg.load == "tma":
        mod = compile_module(_product_source("tcec_wgmma.cu", "tcec_tma.cu"),
                             opts + ("-DTCEC_NO_WG_CPASYNC",), "tcec_tma.cu")
        k = mod.get_function("tcec_gemm_tma")
    else:
        mod = compile_module(_product_source("tcec_wgmma.cu"), opts, "tcec_wgmma.cu")
        k = mod.get_function("tcec_gemm_wg")
    k.max_dynamic_shared_size_bytes = cfg.smem_bytes
    return k


@dataclass
class Operand:
    """A logical operand ``batch x rows x units`` (unit = 1 float, or 2 for complex), read from
    ``array`` at float offset ``b*sb + r*sr + c*sc``."""

    array: object
    batch: int
    rows: int
    units: int
    unit: int
    sb: int
    sr: int
    sc: int

    @property
    def r_fast(self) -> int:
        return int(abs(self.sr) < abs(self.sc))


def _fstrides(x) -> tuple[int, ...]:
    return tuple(s // 4 for s in x.strides)


def _as_a(x, complex_: bool) -> Operand:
    """``x`` (…, m, k) as a left operand: rows m, units k."""
    st = _fstrides(x)
    return Operand(x, x.shape[0] if x.ndim == 3 else 1, x.shape[-2], x.shape[-1], 2 if complex_ else 1,
                   st[0] if x.ndim == 3 else 0, st[-2], st[-1])


def _as_bt(x, complex_: bool) -> Operand:
    """``x`` (…, k, n) as a right operand read transposed: rows n, units k."""
    st = _fstrides(x)
    return Operand(x, x.shape[0] if x.ndim == 3 else 1, x.shape[-1], x.shape[-2], 2 if complex_ else 1,
                   st[0] if x.ndim == 3 else 0, st[-1], st[-2])


def _dense(x) -> Operand:
    """A C-contiguous float32 (batch, rows, k) array as an operand."""
    b, r, k = x.shape
    return Operand(x, b, r, k, 1, r * k, k, 1)


def _expand_b(cp, b):
    """``[[Br Bi], [-Bi Br]]`` transposed: (batch, 2n, 2k) float32, row (j, c), column (k, c')."""
    b3 = b if b.ndim == 3 else b[None]
    br = b3.real.transpose(0, 2, 1)
    bi = b3.imag.transpose(0, 2, 1)
    w = cp.empty((b3.shape[0], b3.shape[2], 2, b3.shape[1], 2), cp.float32)
    w[:, :, 0, :, 0] = br
    w[:, :, 0, :, 1] = -bi
    w[:, :, 1, :, 0] = bi
    w[:, :, 1, :, 1] = br
    return w.reshape(b3.shape[0], 2 * b3.shape[2], 2 * b3.shape[1])


def _expand_a(cp, a):
    """``[[Ar -Ai], [Ai Ar]]`` with rows in 16-row groups: row 16r+g is Re of complex row 8r+g and
    row 16r+8+g its Im. Returns (batch, 16*ceil(m/8), 2k) float32."""
    a3 = a if a.ndim == 3 else a[None]
    bsz, m, k = a3.shape
    m8 = -(-m // 8) * 8
    v = cp.zeros((bsz, m8 // 8, 2, 8, k, 2), cp.float32)
    ar = cp.zeros((bsz, m8, k), cp.float32)
    ai = cp.zeros((bsz, m8, k), cp.float32)
    ar[:, :m] = a3.real
    ai[:, :m] = a3.imag
    ar = ar.reshape(bsz, m8 // 8, 8, k)
    ai = ai.reshape(bsz, m8 // 8, 8, k)
    v[:, :, 0, :, :, 0] = ar
    v[:, :, 0, :, :, 1] = -ai
    v[:, :, 1, :, :, 0] = ai
    v[:, :, 1, :, :, 1] = ar
    return v.reshape(bsz, 2 * m8, 2 * k)


@dataclass
class Plan:
    """The real product the kernel computes and how C is written."""

    form: str
    a: Operand
    b: Operand  # read transposed (rows = n')
    m: int  # real rows of the product
    n: int  # real columns
    k: int  # real inner size
    epi: int
    m_out: int  # rows checked by the epilogue (complex rows for epi 1)
    n_out: int
    ldc: int
    sc: int


def make_plan(cp, ops) -> Plan:
    """Choose the real form of ``ops`` and describe both operands for the split kernel."""
    a, b = ops.a, ops.b
    m, k, n = ops.m, ops.k, ops.n
    if not ops.is_complex:
        return Plan("real", _as_a(a, False), _as_bt(b, False), m, n, k, 0, m, n, n, m * n)
    if b.size <= a.size:  # B is the small one: expand it
        w = _expand_b(cp, b)
        return Plan("interleaved-A", _as_a(a, True), _dense(w), m, 2 * n, 2 * k, 0, m, 2 * n, 2 * n, 2 * m * n)
    v = _expand_a(cp, a)
    return Plan("interleaved-B", _dense(v), _as_bt(b, True), v.shape[1], n, 2 * k, 1, m, n, n, 2 * m * n)


def exponent_ranges(cp, plan: Plan, fmt: str):
    """Device-side exponent range of both operands; returns the (2, 4) uint64 array, still on the device."""
    out = cp.zeros((2, 4), cp.uint64)
    out[:, 1] = 0xFFFFFFFF
    for i, op in enumerate((plan.a, plan.b)):
        _range(cp, op, fmt, out[i])
    return out


def _range(cp, op: Operand, fmt: str, out) -> None:
    """Accumulates the exponent range of ``op`` into ``out`` (4 uint64 on the device)."""
    kernels = _stage_kernels(cp.cuda.Device().id, fmt)
    if rows_contiguous(op):
        w = op.units * op.unit
        kernels.range_rows((_grid_stride_blocks(cp, op.batch * op.rows * w // 4),), (256,),
                           (op.array, np.int64(op.rows), np.int64(w), np.int64(op.sb), np.int64(op.sr),
                            np.int64(op.batch), out))
    else:
        range_k = kernels.range
        tiles_r, tiles_c = -(-op.rows // 32), -(-op.units // 32)
        ntiles = op.batch * tiles_r * tiles_c
        range_k((min(ntiles, 2048), 1, 1), (32, 8, 1),
                (op.array, np.int64(op.rows), np.int64(op.units), np.int32(op.unit), np.int64(op.sb),
                 np.int64(op.sr), np.int64(op.sc), np.int32(op.r_fast), np.int64(tiles_r), np.int64(tiles_c),
                 np.int64(ntiles), out))


def _split(cp, op: Operand, rows_p: int, k_p: int, fmt: str, scheme: str, scale_exp: int):
    """hi, lo workspaces (uint32 words, batch x rows_p x k_p/epw)."""
    kernels = _stage_kernels(cp.cuda.Device().id, fmt)
    epw = 1 if fmt == "tf32" else 2
    kw = k_p // epw
    hi = cp.empty(op.batch * rows_p * kw, cp.uint32)
    lo = cp.empty_like(hi)  # the plain scheme does not read it
    ku_p = k_p // op.unit
    lo_shift = 0 if scheme == "markidis" else LO_SHIFT
    scales = (np.float32(pow2(scale_exp)), np.float32(pow2(lo_shift)))
    if rows_contiguous(op):
        n_vec = op.batch * rows_p * k_p // 4
        kernels.split_rows((_grid_stride_blocks(cp, n_vec),), (256,),
                           (op.array, np.int64(op.rows), np.int64(op.units * op.unit), np.int64(op.sb),
                            np.int64(op.sr), np.int64(op.batch), np.int64(rows_p), np.int64(k_p), hi, lo, *scales))
        return hi, lo, kw
    tiles_r = -(-rows_p // 32)  # the kernel skips rows at and past rows_p (tiles narrower than 32)
    grid = (op.batch * tiles_r, -(-ku_p // 32), 1)
    kernels.split(grid, (32, 8, 1), (op.array, np.int64(op.rows), np.int64(op.units), np.int32(op.unit),
                                     np.int64(op.sb), np.int64(op.sr), np.int64(op.sc), np.int32(op.r_fast),
                                     np.int64(tiles_r), np.int64(rows_p), np.int64(ku_p), np.int64(rows_p * kw),
                                     hi, lo, *scales))
    return hi, lo, kw


def resolve_ec_product(ec_product: str, product_kernel: str, tile: str, k: int) -> str:
    """``"auto"``: the fused product where the wgmma kernel serves it (all three products in one
    kernel: TF32 d = 10 gate 22.9 ms against 27.4 for the hybrid, FP16 14.9 against 17.9,
    benchmarks/results/tcec_h200.json) or the real inner dimension ``k`` is short enough for the
    per-product debias (gemm.tcec.debias.PRODUCT_DEBIAS_MAX_K: gates of up to 5 qubits, whose products
    run at the memory rate), else the hybrid (cuBLAS's corrections beat the mma.sync fused kernel:
    46 against 57 ms at d = 10)."""
    if ec_product != "auto":
        return ec_product
    small = db.debias_mode(k) == "product"
    return "fused" if small or use_wgmma(product_kernel, tile, "ec") else "hybrid"


def workspace_bytes(plan_m: int, plan_n: int, plan_k: int, batch_a: int, batch_b: int, fmt: str, scheme: str,
                    ec_product: str = "auto", product_kernel: str = "auto") -> int:
    """hi/lo workspaces of both operands, plus the hybrid product's correction term (one float
    per padded output element)."""
    tile = tile_config(plan_m, plan_n)
    if scheme == "ec":
        ec_product = resolve_ec_product(ec_product, product_kernel, tile, plan_k)
    bm, bn, _, _, _ = TILES[tile]
    kp = _pad(plan_k, k_quantum(fmt, tile))
    words = kp // (1 if fmt == "tf32" else 2)
    total = 4 * 2 * words * (batch_a * _pad(plan_m, bm) + batch_b * _pad(plan_n, bn))
    batch = max(batch_a, batch_b)
    m_p, n_p = _pad(plan_m, bm), _pad(plan_n, bn)
    if use_hybrid(scheme, ec_product, m_p, n_p, batch, batch * plan_m * plan_n):
        total += 4 * batch * m_p * n_p
    return total


HYBRID_MAX_EXTRA = 1.25  # the correction buffer (padded tiles) may exceed the output this much


def use_hybrid(scheme: str, ec_product: str, m_p: int, n_p: int, batch: int, out_floats: int) -> bool:
    """Whether the corrections go to cuBLAS: asked for, and the padded buffer stays near the size
    of the output. Products with few real columns padded to a wide tile, or many small batches,
    would need a buffer many times the state (1-qubit gates in the batched orientation: 64x); those
    take the fused kernel. Also fused: dimensions beyond cuBLAS's int32."""
    return (scheme == "ec" and ec_product == "hybrid"
            and max(m_p, n_p) < 2**31 and batch * m_p * n_p <= HYBRID_MAX_EXTRA * max(out_floats, 1))


_F32_ONE, _F32_ZERO = np.array(1, np.float32), np.array(0, np.float32)


def _corrections(cp, fmt, a_hi, a_lo, b_hi, b_lo, ccor, m_p, n_p, kw, sa, sb, batch):
    """``ccor = A_lo B_hi^T + A_hi B_lo^T`` (row-major m_p x n_p floats per batch) through cuBLAS.

    The workspaces are K-contiguous rows, i.e. column-major (k x rows): the TN layout cuBLAS runs
    fastest. The parts are exact in TF32/FP16, so cuBLAS's tensor cores multiply them exactly;
    its in-core accumulation truncates, as the fused kernel's correction accumulator does (these
    terms are 2^-11 of the result). Two calls, the second accumulating (beta = 1).
    """
    from cupy.cuda import cublas  # noqa: PLC0415 - optional dependency

    handle = blas.host_scalar_handle()
    epw = 1 if fmt == "tf32" else 2  # elements per 32-bit word
    k = kw * epw
    dtype = blas.CUDA_R_32F if fmt == "tf32" else blas.CUDA_R_16F
    compute = blas.COMPUTE_32F_FAST_TF32 if fmt == "tf32" else blas.COMPUTE_32F
    for bw, aw, beta in ((b_hi, a_lo, _F32_ZERO), (b_lo, a_hi, _F32_ONE)):
        if batch == 1:
            cublas.gemmEx(handle, blas.OP_T, blas.OP_N, n_p, m_p, k, _F32_ONE.ctypes.data, bw.data.ptr, dtype, k,
                          aw.data.ptr, dtype, k, beta.ctypes.data, ccor.data.ptr, blas.CUDA_R_32F, n_p, compute, -1)
        else:
            cublas.gemmStridedBatchedEx(
                handle, blas.OP_T, blas.OP_N, n_p, m_p, k, _F32_ONE.ctypes.data, bw.data.ptr, dtype, k, sb * epw,
                aw.data.ptr, dtype, k, sa * epw, beta.ctypes.data, ccor.data.ptr, blas.CUDA_R_32F, n_p, m_p * n_p,
                batch, compute, -1)


# Bytes of L2 the tiles of the small operand that one group of the raster reuses may take (H100
# and H200: 50 MB of L2). The d = 10 gate's whole expanded gate (hi and lo, 32 MB) fits: one
# group, n fastest; at d = 11 (128 MB) groups of 8 column tiles: the fused TF32 product 44.2 ->
# 39.8 ms, FP16 30.7 -> 28.7 (budgets 8, 16, 32 MB and none: benchmarks/results/tcec_raster_h200.json).
RASTER_L2_BYTES = 32 << 20


def raster(tiles_m: int, tiles_n: int, a_big: bool, small_tile_bytes: int) -> int:
    """Tile order of the product kernels (``tile_coords`` in tcec.cu): the tiles of the small
    operand are re-read by every tile of the big one, so they go fastest, in groups whose bytes
    (``small_tile_bytes`` per tile) stay within RASTER_L2_BYTES; positive: column groups (A big)."""
    across = tiles_n if a_big else tiles_m
    g = int(max(1, min(across, RASTER_L2_BYTES // max(small_tile_bytes, 1))))
    return min(g, 2**31 - 1) if a_big else -min(g, 2**31 - 1)


def raster_order(tiles_m: int, tiles_n: int, ras: int) -> list[tuple[int, int]]:
    """(tm, tn) of blocks 0, 1, ... of one batch: ``tile_coords`` replayed (for tests)."""
    cols = ras > 0
    across, along = (tiles_n, tiles_m) if cols else (tiles_m, tiles_n)
    g = min(abs(ras), across)
    full = across // g
    in_full = full * g * along
    out = []
    for rem in range(tiles_m * tiles_n):
        grp = rem // (g * along) if rem < in_full else full
        gw = g if rem < in_full else across - full * g
        r2 = rem - grp * g * along
        fast, slow = grp * g + r2 % gw, r2 // gw
        out.append((slow, fast) if cols else (fast, slow))
    return out


def _pad(x: int, q: int) -> int:
    return -(-x // q) * q


def k_quantum(fmt: str, tile: str) -> int:
    """Elements of k the workspaces are padded to: a stage of the product kernel (on the tile class
    the wgmma kernel may take, its longer stage, whichever kernel then runs)."""
    words = WG_K_WORDS if tile == WG_TILE else BKW
    return words * (1 if fmt == "tf32" else 2)


def run(cp, ops, plan: Plan, fmt: str, scheme: str, scales: tuple[int, int], timer, report, debias: bool = True,
        ec_product: str = "auto", product_kernel: str = "auto"):
    """Split both operands and run the product; returns C (complex64 or float32, ops.out_shape).

    ``ec_product`` (error-corrected scheme only): ``"hybrid"`` computes lo*hi + hi*lo with cuBLAS
    (tensor cores at cuBLAS's rate) and the hi*hi part, whose accumulation needs round-to-nearest,
    in the kernel; ``"fused"`` computes all three in the kernel (the mma.sync one is the CPU
    emulation's model); ``"auto"``: see :func:`resolve_ec_product`.
    ``product_kernel``: ``"auto"`` runs the wgmma kernel (sm_90) where it applies, ``"mma"`` the
    mma.sync kernel, ``"wgmma"`` insists on the former.
    """
    tile = tile_config(plan.m, plan.n)
    if scheme == "ec":
        ec_product = resolve_ec_product(ec_product, product_kernel, tile, plan.k)
    bm, bn, wm, wn, _ = TILES[tile]
    k_p = _pad(plan.k, k_quantum(fmt, tile))
    m_p, n_p = _pad(plan.m, bm), _pad(plan.n, bn)
    batch = ops.batch or 1
    out_floats = int(np.prod(ops.out_shape)) * (2 if ops.is_complex else 1)
    hybrid = use_hybrid(scheme, ec_product, m_p, n_p, batch, out_floats)
    mode = "ec-hybrid" if hybrid else scheme
    wg = use_wgmma(product_kernel, tile, mode)
    with timer.stage("split"):
        a_hi, a_lo, kw = _split(cp, plan.a, m_p, k_p, fmt, scheme, scales[0])
        b_hi, b_lo, _ = _split(cp, plan.b, n_p, k_p, fmt, scheme, scales[1])
    if wg:
        cfg_name = wg_config(n_p, mode)
        cfg = WG_CONFIGS[cfg_name]
        gemm_k = _wg_kernel(cp.cuda.Device().id, fmt, mode, debias, cfg, "epilogue")
        nthreads, smem = cfg.threads, cfg.smem_bytes
        bn = cfg.bn
        tiles_n = n_p // bn
    else:
        gemm_k = mma_kernel(cp.cuda.Device().id, fmt, mode, tile, debias, debias_mode_of(mode, wg, plan.k))
        nthreads, smem = wm * wn * 32, smem_bytes(tile, mode)
        tiles_n = n_p // bn
    tiles_m = m_p // bm
    # debias, times 2^11 (it goes through the correction): the epilogue's beta, calibrated on
    # circuits for the hi*hi products added one by one (the hybrid, the fused wgmma product); the
    # mma.sync fused product's per-product scale (or the model's beta in its epilogue mode)
    chain = cfg.chain if wg else db.HH_CHAIN
    per_product = debias_mode_of(mode, wg, plan.k) == "product"
    if mode == "ec-hybrid" or (wg and mode == "ec"):
        beta = db.hybrid_debias_beta(fmt, plan.k, chain)
    elif per_product:
        beta = float(db.product_debias_scale(fmt, plan.k)) * 2.0**-LO_SHIFT
    else:
        beta = db.debias_beta(chain)
    out_dtype = cp.complex64 if ops.is_complex else cp.float32
    c = cp.empty(ops.out_shape, out_dtype)
    sa = m_p * kw if plan.a.batch > 1 else 0
    sb = n_p * kw if plan.b.batch > 1 else 0
    sc = plan.sc if batch > 1 else 0
    vec = int(plan.ldc % 2 == 0 and sc % (4 if plan.epi else 2) == 0)
    a_big = plan.a.batch * plan.a.rows * plan.a.units >= plan.b.batch * plan.b.rows * plan.b.units
    parts = 2 if mode in ("ec", "markidis") else 1  # hi and lo of each operand read by the product
    small_tile_bytes = (bn if a_big else bm) * kw * 4 * parts
    ras = raster(tiles_m, tiles_n, a_big, small_tile_bytes)
    ccor, scc = c, 0  # unused unless hybrid
    if mode == "ec-hybrid":
        ccor = cp.empty(batch * m_p * n_p, cp.float32)
        scc = m_p * n_p if batch > 1 else 0
        with timer.stage("corrections"):
            _corrections(cp, fmt, a_hi, a_lo, b_hi, b_lo, ccor, m_p, n_p, kw, sa, sb, batch)
    tail = (np.int64(sc), np.int64(plan.ldc), np.int32(plan.epi), np.int32(vec), np.int32(ras),
            np.float32(pow2(-LO_SHIFT)), np.float32(pow2(-scales[0])), np.float32(pow2(-scales[1])),
            ccor, np.int64(n_p), np.int64(scc), np.float32(beta * 2.0**LO_SHIFT))
    grid = batch * tiles_m * tiles_n
    with timer.stage("product"):
        if wg and cfg.load == "tma":
            maps = [tma.words_map(w.data.ptr, op.batch, rows, kw, box)
                    for w, op, rows, box in ((a_hi, plan.a, m_p, 128), (b_hi, plan.b, n_p, cfg.bn))]
            if mode == "ec":
                maps += [tma.words_map(w.data.ptr, op.batch, rows, kw, box)
                         for w, op, rows, box in ((a_lo, plan.a, m_p, 128), (b_lo, plan.b, n_p, cfg.bn))]
            else:
                maps += maps  # not read
            tma.launch(gemm_k, grid, nthreads, smem,
                       (*maps, c, np.int64(plan.m_out), np.int64(plan.n_out), np.int64(kw), np.int64(tiles_m),
                        np.int64(tiles_n), np.int32(plan.a.batch > 1), np.int32(plan.b.batch > 1)) + tail)
        else:
            gemm_k((grid, 1, 1), (nthreads, 1, 1),
                   (a_hi, a_lo, b_hi, b_lo, c, np.int64(plan.m_out), np.int64(plan.n_out), np.int64(kw),
                    np.int64(tiles_m), np.int64(tiles_n), np.int64(sa), np.int64(sb)) + tail, shared_mem=smem)
    report.choices["form"] = plan.form
    report.choices["tile"] = f"{tile} {bm}x{bn}"
    report.choices["product_kernel"] = f"wgmma {cfg_name}" if wg else "mma.sync"
    if scheme == "ec" and debias and per_product:
        report.choices["debias_fraction"] = db.product_debias_fraction(fmt, plan.k)
    elif scheme == "ec" and debias:
        report.choices["debias_beta"] = float(np.float32(beta * 2.0**LO_SHIFT)) * 2.0**-LO_SHIFT
    if scheme == "ec":
        report.choices["ec_product"] = "hybrid" if hybrid else "fused"
        if ec_product == "hybrid" and not hybrid:
            report.notes.append("ec_product: fused (the hybrid's correction buffer would be far larger "
                                "than the output for this shape)")
    report.workspace_bytes = 2 * int(a_hi.nbytes + b_hi.nbytes) + (int(ccor.nbytes) if mode == "ec-hybrid" else 0)
    return c


@functools.lru_cache(maxsize=None)
def _count_below_kernel(device_id: int):
    import cupy  # noqa: PLC0415

    return cupy.RawKernel(_source("tcec_count.cu"), "count_below")


def count_below(cp, x, scale_exp: int) -> int:
    """``gemm.tcec.split.count_below`` on the device for a float32/complex64 cupy array: one pass over
    its float view (real and imaginary parts together), one host read. (abs and two masks of a
    2 GB state took 11 ms; a cupy ReductionKernel to one scalar, 430 ms.)"""
    flat = cp.ascontiguousarray(x).view(cp.float32).ravel()
    out = cp.zeros(1, cp.uint64)
    n = flat.size
    grid = _grid_stride_blocks(cp, n)
    _count_below_kernel(cp.cuda.Device().id)((grid,), (256,), (flat, np.int64(n),
                                                                np.float32(2.0 ** (FP16_MIN_EXP - scale_exp)), out))
    return int(out.get()[0])
