"""Diagnostics of the GEMM layer, not part of its core: the test matrices of the accuracy
literature (``testmats``), the accuracy tests run over every method (``accuracy_tests``) and the
probe of the tensor cores' numerical behaviour (``probe``, kernels in ``probe.cu``)."""
