"""The native methods: the library GEMM of the array module (BLAS through numpy, cuBLAS Z/CGEMM and
the 3M routine through cupy), in the operands' own precision."""
