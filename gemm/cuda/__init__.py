"""CUDA helpers shared by the method families: kernel sources and their compilation
(:mod:`gemm.cuda.compile`), cuBLAS calls (:mod:`gemm.cuda.cublas`), sm_90a builds
(:mod:`gemm.cuda.sm90a`) and TMA tensor maps (:mod:`gemm.cuda.tma`).

Nothing here imports cupy at module level: ``import gemm`` works without it.
"""
