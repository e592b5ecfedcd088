"""Error-corrected TF32/FP16 tensor-core GEMM (``tf32tf32``, ``halfhalf``, ``tc-auto``) and the
uncorrected variants kept for comparison (``tf32``, ``fp16``, ``markidis``).

``split`` holds the bit-exact hi/lo split and FP16 range planning, ``debias`` the model of the
tensor core's truncation and its correction, ``emulate`` the CPU path, ``gpu`` the GPU stages
around the kernels of ``tcec.cu`` (and ``tcec_wgmma.cu``, ``tcec_tma.cu``, ``tcec_count.cu``),
``method`` the methods.
"""

from gemm.tcec.method import FP16RangeError, FP16RangeWarning

__all__ = ["FP16RangeError", "FP16RangeWarning"]
