"""Shared fixtures; GPU tests skip cleanly where cupy or a CUDA device is missing."""

import numpy as np
import pytest

import gemm


def pytest_collection_modifyitems(config, items):
    if gemm.gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and cupy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def cp():
    """cupy, for tests marked gpu."""
    return pytest.importorskip("cupy")
