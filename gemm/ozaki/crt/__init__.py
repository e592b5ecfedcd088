"""Ozaki scheme II on INT8 (``int8-crt``): residues modulo pairwise-coprime moduli <= 256, exact
INT8 GEMMs, and the Chinese remainder theorem in multi-word FP64.

``moduli`` holds the moduli sets and constants, ``scale`` the power-of-two line scaling, ``cpu``
and ``gpu`` the two implementations of one stage interface (``crt.cu`` beside ``gpu``),
``limbs`` the residues as an INT8 product of balanced limbs (the tensor-core residue kernel's
arithmetic and its numpy model), ``wgmma`` the fused products, ``method`` the method.
"""
