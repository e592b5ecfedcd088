"""The distributed state over MPI ranks (CPU): equal to the single-process run, readouts without
gathering, exchange volumes, and a failing rank ending every rank. Each test runs mpiexec in a
subprocess with a timeout, so a hang fails the test instead of the suite."""

import subprocess
import sys

import pytest

from qsim_tc.distributed.launcher import find_mpiexec

pytest.importorskip("mpi4py")
MPIEXEC = find_mpiexec()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install '.[mpi]')")


def _mpi(ranks: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "qsim_tc.distributed.selfcheck", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(("ranks", "qubits"), [(2, "4,7,10"), (4, "5,8,11")])
def test_random_circuits_equal_the_single_process_run(ranks, qubits):
    proc = _mpi(ranks, "--qubits", qubits, "--seeds", "3", "--gates", "70")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")
    assert "swaps" in proc.stdout


@pytest.mark.parametrize("ranks", [2, 4])
def test_permuted_slices_and_small_pieces_equal_the_single_process_run(ranks):
    # gate by gate, the engine leaves slices permuted (absorbed where the ranks agree, undone where
    # they differ); 64-byte pieces split every swap into many messages, packed and contiguous;
    # readouts and Pauli expectations (chunks traded between ranks) go 8 amplitudes at a time
    proc = _mpi(ranks, "--qubits", "5,7,10", "--seeds", "2", "--gates", "60", "--gate-by-gate",
                "--piece-bytes", "64", "--read-chunk", "8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")


def test_each_swap_sends_half_a_slice():
    proc = _mpi(2, "--qubits", "7", "--seeds", "2", "--gates", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in proc.stdout.splitlines():
        if "swaps" in line:
            swaps = int(line.split(" swaps")[0].split()[-1])
            sent = int(line.split(" bytes")[0].split()[-1])
            # rank 0's slice: 2^6 complex128; half of it per swap (rank 0 takes part in each)
            assert sent == swaps * (1 << 5) * 16


def test_a_failing_rank_ends_every_rank():
    proc = _mpi(2, "--qubits", "6", "--seeds", "1", "--fail-on-rank", "1", timeout=120)
    assert proc.returncode != 0
    assert "planted failure on rank 1" in proc.stderr


def test_too_many_ranks_for_a_gate_is_a_clear_error():
    proc = _mpi(4, "--qubits", "3", "--seeds", "1", timeout=120)
    assert proc.returncode != 0 and "use fewer ranks" in proc.stderr


def test_cli_brickwork_under_mpiexec_matches_one_process(tmp_path):
    import json

    from circuits import brickwork
    from qsim_tc import Simulator

    out = tmp_path / "d.json"
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "qsim_tc.cli", "brickwork", "--qubits", "10", "--gate-qubits",
           "2", "--depth", "6", "--seed", "3", "--device", "cpu", "--backend", "native", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 ranks of 9 local qubits" in proc.stdout
    data = json.loads(out.read_text())
    assert data["ranks"] == 2 and len(data["swaps_per_rank"]) == 2
    want = Simulator("native", device="cpu").run(brickwork(10, 2, 6, 3)).state.amplitude(0)
    assert abs(complex(*data["amp0"]) - want) <= 1e-13


def test_eight_ranks_equal_the_single_process_run():
    # three global bits: the swaps of global bit 2 and up, which 2 and 4 ranks never reach
    proc = _mpi(8, "--qubits", "6,8", "--seeds", "1", "--gates", "50", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")


_API_FAILS_ON_ONE_RANK = """
from mpi4py import MPI
from circuits import brickwork
from qsim_tc.distributed import run_distributed
comm = MPI.COMM_WORLD
circ = brickwork(6, 2, 4, seed=1)
# rank 1 passes a wrong argument and raises at once; rank 0 goes on into the first exchange
run_distributed(circ if comm.Get_rank() == 0 else "not a circuit", comm, backend="native", device="cpu")
print("rank", comm.Get_rank(), "finished")
"""


def test_an_exception_on_one_rank_through_the_api_ends_every_rank():
    # without the CLI's guard: run_distributed itself must abort the others, never leave rank 0
    # waiting in a collective (a hang fails this test through the timeout)
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", _API_FAILS_ON_ONE_RANK],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "circuit must be a circuits.Circuit" in proc.stderr
    assert "rank 0 finished" not in proc.stdout
