"""Haar-random unitaries: QR of a complex Ginibre matrix with the phase correction (Mezzadri 2007)."""

from __future__ import annotations

import numpy as np


def haar_unitary(dim: int, rng: np.random.Generator) -> np.ndarray:
    """A (dim, dim) unitary drawn from the Haar measure.

    Without the correction, QR's sign convention biases the distribution; multiplying each
    column of Q by the phase of the matching diagonal entry of R removes the bias.
    """
    z = (rng.standard_normal((dim, dim)) + 1j * rng.standard_normal((dim, dim))) / np.sqrt(2.0)
    q, r = np.linalg.qr(z)
    d = np.diagonal(r)
    return q * (d / np.abs(d))
