"""The INT8 products of the CRT scheme on Hopper's wgmma kernel (``crt_wgmma.cu``), each reduced
modulo its modulus in the epilogue, so that only one byte per product element reaches global
memory (cuBLAS's INT32 products take four, and the reconstruction reads them back).

:func:`products_r8` takes the residues of :func:`gemm.ozaki.crt.gpu.residues` (K-major, ``kp`` a
multiple of :data:`KP_ALIGN`) and returns ``(n, G, rows, ldo)`` int8 residues of the products, read
by :func:`gemm.ozaki.crt.gpu.reconstruct_r8`. cupy comes from the caller.
"""

from __future__ import annotations

import functools

import numpy as np

from gemm.cuda import tma
from gemm.cuda.compile import source, with_headers
from gemm.cuda.sm90a import compile_module
from gemm.device import sm_count
from gemm.ozaki.crt.gpu import sym
from gemm.ozaki.crt.moduli import recip32

KP_ALIGN = 128  # one 128-byte swizzle atom of k per pipeline stage
OUT_ALIGN = 16  # output rows padded to 16 bytes: the epilogue stores 16 at a time
STAGES = 4
NC = 2  # 128-column chunks per tile (tile 128 x 256)
LOADS = ("tma", "cpasync")  # stages loaded by a TMA producer warpgroup, or by every thread
LOAD = "tma"
KERNELS = ("auto", "wgmma", "cublas")  # the int8-crt option ``product_kernel``


def supported(cp) -> bool:
    """Whether the current device runs the kernel (sm_90: H100 / H200)."""
    return cp.cuda.Device().compute_capability == "90"


def use_fused(cp, kernel: str) -> bool:
    """Whether the products run on the fused kernel: ``"auto"`` wherever it is supported."""
    if kernel == "wgmma":
        if not supported(cp):
            raise ValueError("product_kernel='wgmma' needs an sm_90 GPU (H100/H200); use 'cublas' or 'auto'")
        return True
    return kernel == "auto" and supported(cp)


def _smem_bytes(nc: int, stages: int, load: str) -> int:
    """The stages and the 1024-byte alignment of the swizzle; with TMA also the pipeline's
    2 x stages barriers and the epilogue's own staging tile (128 rows of 128 nc + 4 bytes)."""
    base = stages * (128 + 128 * nc) * 128 + 1024
    return base + 16 * stages + 128 * (128 * nc + 4) if load == "tma" else base


@functools.lru_cache(maxsize=None)
def _kernel(device_id: int, nc: int, stages: int, load: str):
    mod = compile_module(with_headers(source(__package__, "crt_wgmma.cu")),
                         ("-std=c++17", f"-DCRT_NC={nc}", f"-DCRT_STAGES={stages}"), "crt_wgmma.cu")
    k = mod.get_function("crt_mod_gemm_tma" if load == "tma" else "crt_mod_gemm")
    k.max_dynamic_shared_size_bytes = _smem_bytes(nc, stages, load)
    return k


@functools.lru_cache(maxsize=None)
def _moduli_tables(device_id: int, values: tuple[int, ...]):
    import cupy as cp  # noqa: PLC0415 - optional dependency

    # per modulus (p, 2^17 mod p in the symmetric range) and 1/p rounded to FP32 (crt_wgmma.cu
    # mod_byte), with the helpers that make the residue kernels' constants
    pc = [(v, sym(1 << 17, v)) for v in values]
    return (cp.asarray(np.array(pc, dtype=np.int32).reshape(-1)),
            cp.asarray(np.array([recip32(v) for v in values], dtype=np.float32)))


def products_r8(cp, RA, RB, mods, nc: int = NC, stages: int = STAGES, load: str = LOAD, persistent: bool = True):
    """Residues ``R[i, g, r, c] = (RA[i, g, r] . RB[i, g, c]) mod p_i`` in ``[-128, 127]``:
    ``(n, G, rows, ldo)`` int8, ``ldo`` the columns rounded up to :data:`OUT_ALIGN`.

    ``load="tma"``: one block per SM walks the tiles (``persistent``; else one block a tile)."""
    n, G, rows, kp = RA.shape
    cols = RB.shape[2]
    if load not in LOADS:
        raise ValueError(f"load={load!r} is not valid; expected one of {', '.join(LOADS)}")
    if RA.dtype != np.int8 or RB.dtype != np.int8:
        raise ValueError(f"residues must be int8, got {RA.dtype} and {RB.dtype}")
    if RB.shape[:2] != (n, G) or len(mods.values) != n:
        raise ValueError(f"RA {RA.shape}, RB {RB.shape} and {len(mods.values)} moduli do not agree on (moduli, parts)")
    if kp <= 0 or kp % KP_ALIGN or RB.shape[3] != kp:
        raise ValueError(f"residue lines must be {KP_ALIGN}-byte multiples of one length, got {kp} and {RB.shape[3]}")
    if not (RA.flags.c_contiguous and RB.flags.c_contiguous):
        raise ValueError("residues must be C-contiguous")
    ldo = -(-cols // OUT_ALIGN) * OUT_ALIGN
    out = cp.empty((n, G, rows, ldo), dtype=cp.int8)
    # the epilogue's 16-byte stores need every row's start (out's base, z * rows * ldo, row * ldo)
    # on 16 bytes: ldo a multiple of 16, and the allocation's alignment (cupy's pool: 256 bytes)
    if ldo % OUT_ALIGN or out.data.ptr % OUT_ALIGN:
        raise ValueError(f"the product's rows must be {OUT_ALIGN}-byte multiples on a {OUT_ALIGN}-byte boundary")
    dev = cp.cuda.Device().id
    p_of, inv_of = _moduli_tables(dev, tuple(mods.values))
    bn = 128 * nc
    grid = (-(-cols // bn), -(-rows // 128), n * G)
    k = _kernel(dev, nc, stages, load)
    if load == "tma":
        Z = n * G
        map_a = tma.words_map(RA.data.ptr, Z, rows, kp // 4, 128)
        map_b = tma.words_map(RB.data.ptr, Z, cols, kp // 4, bn)
        tiles = grid[0] * grid[1] * grid[2]
        blocks = min(tiles, sm_count(cp)) if persistent else tiles
        tma.launch(k, blocks, 384, _smem_bytes(nc, stages, load), (
            map_a, map_b, out, np.int32(rows), np.int32(cols), np.int32(kp), np.int64(rows * ldo), np.int32(ldo),
            np.int32(G), p_of, inv_of, np.int32(grid[1]), np.int32(grid[0]), np.int32(tiles)))
    else:
        if grid[1] > 65535:
            raise ValueError(f"{rows} rows exceed one launch ({65535 * 128}); process them in blocks")
        k(grid, (256,), (RA, RB, out, np.int32(rows), np.int32(cols), np.int32(kp), np.int64(rows * kp),
                         np.int64(cols * kp), np.int64(rows * ldo), np.int32(ldo), np.int32(G), p_of, inv_of),
          shared_mem=_smem_bytes(nc, stages, load))
    return out
