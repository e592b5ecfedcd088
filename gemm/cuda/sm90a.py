"""Compiling CUDA source for sm_90a, the target of Hopper's architecture-specific instructions
(``wgmma``, ``setmaxnreg``).

cupy's ``RawModule`` compiles for the device's plain architecture (sm_90), where those
instructions do not assemble. NVRTC, which cupy ships with, compiles for sm_90a when asked; the
cubin is kept in a per-user cache directory (keyed by source and options, like cupy's own kernel
cache) and loaded through ``RawModule(path=...)``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

ARCH = "sm_90a"


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc  # noqa: PLC0415
    except ImportError:  # older layouts
        from cupy.cuda import nvrtc  # noqa: PLC0415
    return nvrtc


def cache_dir() -> str:
    base = os.environ.get("CUPY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")
    return os.path.join(base, "qsim_tc_" + ARCH)


def compile_cubin(source: str, options: tuple[str, ...], name: str = "kernel.cu") -> bytes:
    """NVRTC compile of ``source`` for sm_90a; a compile error raises with NVRTC's log."""
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(source, name, (), ())
    try:
        try:
            nvrtc.compileProgram(prog, tuple(options) + (f"--gpu-architecture={ARCH}",))
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"NVRTC could not compile {name} for {ARCH}:\n{nvrtc.getProgramLog(prog)}") from e
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def compile_module(source: str, options: tuple[str, ...], name: str = "kernel.cu"):
    """A ``cupy.RawModule`` of ``source`` built for sm_90a (compiled once per source and options)."""
    import cupy  # noqa: PLC0415

    nvrtc_version = ".".join(map(str, _nvrtc().getVersion()))
    key = hashlib.sha256("\0".join((source, *options, nvrtc_version)).encode()).hexdigest()[:32]
    path = os.path.join(cache_dir(), key + ".cubin")
    if not os.path.exists(path):
        cubin = compile_cubin(source, options, name)
        os.makedirs(cache_dir(), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".part")  # atomic: concurrent processes
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        os.replace(tmp, path)
    return cupy.RawModule(path=path)
