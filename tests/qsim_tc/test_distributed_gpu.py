"""The distributed state on GPUs: one GPU per rank, swaps and all-to-alls over NCCL, equal to the
single-process run (mpiexec in a subprocess with a timeout; R ranks need R GPUs). The in-place run it relies
on is tested on both devices in test_user_api."""

import subprocess
import sys

import pytest

from qsim_tc.distributed.launcher import find_mpiexec

pytestmark = pytest.mark.gpu
MPIEXEC = find_mpiexec()


def _gpus() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH")
@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.parametrize("extra", [[], ["--gate-by-gate", "--piece-bytes", "4096"]])
def test_gpu_ranks_equal_the_single_process_run(ranks, extra):
    """2, 4 and 8 GPUs (as many as the machine has): single swaps and all-to-alls over NCCL, bytes
    as theory (the selfcheck checks them), the state equal to one process's."""
    pytest.importorskip("mpi4py")
    if _gpus() < ranks:
        pytest.skip(f"needs {ranks} GPUs")
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "qsim_tc.distributed.selfcheck", "--device", "gpu",
           "--qubits", "6,12,18", "--seeds", "2", "--gates", "80", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")
