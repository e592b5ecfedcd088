"""Kernel sources and their compilation: the one place where a family's ``.cu`` file is read and
turned into a cupy ``RawModule``.

A family keeps its ``.cu`` files beside the Python module that launches them and passes its own
``__package__``: the source is read with ``importlib.resources`` (so it is found in an installed
wheel too), and each (source, options, device) is compiled once per process; cupy caches the
binary on disk by a hash of source and options.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.lru_cache(maxsize=None)
def source(package: str, name: str) -> str:
    """The text of the kernel source ``name`` shipped in ``package``.

    Args:
        package: the dotted package that holds the file (a module's ``__package__``).
        name: the file name, for example ``"ozaki.cu"``.

    Returns:
        The source text.

    Raises:
        FileNotFoundError: ``package`` ships no file ``name``.
    """
    return resources.files(package).joinpath(name).read_text()


PIPELINE = "pipeline.cuh"  # cp.async, wgmma, mbarrier and TMA helpers shared by the kernel families


def with_headers(text: str, headers: tuple[str, ...] = (PIPELINE,)) -> str:
    """``text`` after the shared headers of this package (``gemm/cuda/*.cuh``), in order. They are
    prepended rather than ``#include``d so that a kernel cache keyed by the source text sees them."""
    return "".join(source(__package__, h) for h in headers) + text


@functools.lru_cache(maxsize=None)
def raw_module(package: str, name: str, options: tuple[str, ...], device_id: int, headers: tuple[str, ...] = ()):
    """A ``cupy.RawModule`` of the source ``name`` in ``package``, built once per process, set of
    options and device.

    Args:
        package, name: where the source lives (see :func:`source`).
        options: NVRTC options (compile-time constants go here as ``-D...``, not into the text).
        device_id: the CUDA device the module is loaded on.
        headers: shared headers of this package to prepend (see :func:`with_headers`).

    Returns:
        The module; ``get_function`` compiles it on first use.
    """
    import cupy  # noqa: PLC0415 - optional dependency

    with cupy.cuda.Device(device_id):
        return cupy.RawModule(code=with_headers(source(package, name), headers), options=options)
