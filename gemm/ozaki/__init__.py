"""The Ozaki scheme on INT8 (``int8``, ``int8-auto``): FP64-accurate products from exact INT8
tensor-core GEMMs.

``plan`` holds the arithmetic, ``cpu`` and ``gpu`` the two implementations of one stage
interface, ``cache`` the slices of operands used again, ``method`` the methods.
``gemm.ozaki.CACHE.clear()`` frees the cached slices.
"""

from gemm.ozaki.cache import CACHE

__all__ = ["CACHE"]
