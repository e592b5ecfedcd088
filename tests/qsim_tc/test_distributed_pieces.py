"""The pieces a swap's half slice is sent in (no MPI needed): every amplitude of the half exactly
once, no piece above the bound, contiguous runs sent as they are."""

import numpy as np
import pytest

from qsim_tc.distributed.exchange import half_pieces


@pytest.mark.parametrize("local", [1, 3, 6])
@pytest.mark.parametrize("piece", [1, 2, 3, 8, 64, 1000])
def test_half_pieces_cover_the_half_once_within_the_bound(local, piece):
    for p in range(local):
        for b in (0, 1):
            data = np.arange(1 << local)
            half = data.reshape(-1, 2, 1 << p)[:, 1 - b, :]
            seen = []
            for view in half_pieces(half, piece):
                assert view.size <= max(piece, 1)
                assert np.shares_memory(view, data)
                if (1 << p) >= piece:
                    assert view.flags.c_contiguous
                seen.extend(np.asarray(view).reshape(-1).tolist())
            want = [i for i in range(1 << local) if ((i >> p) & 1) == 1 - b]
            assert sorted(seen) == want
