"""Shared fixtures; GPU tests skip cleanly where cupy or a CUDA device is missing."""

import numpy as np
import pytest

import gemm

try:
    from hypothesis import settings
except ImportError:  # hypothesis comes with the test extra; without it the property tests skip
    settings = None
else:
    # the same examples on every run and machine: a failure reproduces, CI never flakes on a new draw
    settings.register_profile("derandomized", derandomize=True, print_blob=True)
    settings.load_profile("derandomized")


_GPU_SKIP_REASON = "needs a CUDA GPU and cupy"


def pytest_collection_modifyitems(config, items):
    if gemm.gpu_available():
        return
    skip = pytest.mark.skip(reason=_GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line for the GPU tests skipped on a machine without one (instead of a line each)."""
    skipped = terminalreporter.stats.get("skipped", [])
    n_gpu = sum(1 for r in skipped if isinstance(r.longrepr, tuple) and _GPU_SKIP_REASON in str(r.longrepr[2]))
    if n_gpu:
        terminalreporter.write_line(f"{n_gpu} GPU tests skipped: no CUDA GPU")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def cp():
    """cupy, for tests marked gpu."""
    return pytest.importorskip("cupy")
