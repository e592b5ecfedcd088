"""The ``dd`` method, a double-double (~106-bit) GEMM: the accuracy reference of the project.

``arith`` holds the elementwise double-double arithmetic, ``method`` the GEMM (and
:func:`matmul_pair`), ``gpu`` the FMA kernel of ``dd.cu``.
"""

from gemm.dd.method import DoubleDouble, matmul_pair, plan_pieces

__all__ = ["DoubleDouble", "matmul_pair", "plan_pieces"]
