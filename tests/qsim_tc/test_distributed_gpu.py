"""The distributed state on GPUs: one GPU per rank, swaps over NCCL, equal to the single-process
run (mpiexec in a subprocess with a timeout; two ranks need two GPUs). The in-place run it relies
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
@pytest.mark.parametrize("extra", [[], ["--gate-by-gate", "--piece-bytes", "4096"]])
def test_two_gpu_ranks_equal_the_single_process_run(extra):
    pytest.importorskip("mpi4py")
    if _gpus() < 2:
        pytest.skip("needs two GPUs")
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "qsim_tc.distributed.selfcheck", "--device", "gpu",
           "--qubits", "6,12,18", "--seeds", "2", "--gates", "80", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")
