"""int8-crt on the GPU at every moduli count a tolerance may choose (``Simulator(tolerance=...)``
runs ``moduli=n`` for any n in 2..20, qsim_tc.run_error.tune_precision): bit-identical to the
CPU path with each residue and reconstruction kernel, including the one- and two-word
reconstructions (n <= 4, n <= 9) that the data-chosen counts (16-20) never take."""

import numpy as np
import pytest

import gemm
from circuits.haar import haar_unitary
from gemm.ozaki.crt import gpu, wgmma
from gemm.ozaki.crt.moduli import MAX_MODULI, MIN_MODULI

pytestmark = pytest.mark.gpu
CRT = "int8-crt"


def _gate_and_state(rng, d=6, cols=3000):
    u = haar_unitary(1 << d, rng)
    x = rng.standard_normal((1 << d, cols)) + 1j * rng.standard_normal((1 << d, cols))
    return u, x / np.linalg.norm(x)


@pytest.mark.parametrize("n", range(MIN_MODULI, MAX_MODULI + 1))
@pytest.mark.parametrize("residues, reconstruct", [("fp32", "fp64"), ("mma", "mma")])
def test_every_count_bit_identical_to_cpu(cp, rng, monkeypatch, n, residues, reconstruct):
    if reconstruct == "mma" and not wgmma.supported(cp):
        pytest.skip("the mma reconstruction reads the wgmma products (sm_90)")
    monkeypatch.setattr(gpu, "RESIDUES", residues)
    monkeypatch.setattr(gpu, "RECONSTRUCT", reconstruct)
    u, x = _gate_and_state(rng)
    c_cpu, r_cpu = gemm.matmul(u, x, method=CRT, moduli=n, return_report=True)
    c_gpu, r_gpu = gemm.matmul(cp.asarray(u), cp.asarray(x), method=CRT, moduli=n, return_report=True)
    assert r_cpu.choices["moduli"] == r_gpu.choices["moduli"] == n
    assert r_gpu.choices["residues_kernel"] == residues
    got = cp.asnumpy(c_gpu)
    assert np.array_equal(got, c_cpu), f"n={n}: max |gpu - cpu| = {np.abs(got - c_cpu).max()}"
    # the state operand as the engine passes it at the bottom: S @ U.T
    c_cpu = gemm.matmul(x.T, u.T, method=CRT, moduli=n)
    assert np.array_equal(cp.asnumpy(gemm.matmul(cp.asarray(x).T, cp.asarray(u).T, method=CRT, moduli=n)), c_cpu)


def test_a_tolerance_run_on_the_gpu_takes_the_cpus_count_and_meets_its_bound(cp):
    from circuits import brickwork
    from qsim_tc import Simulator
    from qsim_tc.plan.costs import CostRow, CostTable
    from qsim_tc.reference import simulate_dd

    c = brickwork(12, 6, 3, seed=3)
    states, counts, bounds = [], [], []
    for device in ("cpu", "gpu"):
        table = CostTable({"device": device}, tuple(
            CostRow(device, "complex128", m, 12, {1: ms}, overhead_ms=0.0, placement="any")
            for m, ms in (("native", 10.0), (CRT, 5.0))), "given")
        res = Simulator(device=device, cost_table=table, plan=None, fuse=None, tolerance=1e-9).run(c)
        assert set(res.metadata["auto"]["blocks_per_method"]) == {CRT}
        counts.append(res.metadata["auto"]["precision_settings"][CRT]["6"]["options"]["moduli"])
        states.append(res.state.to_numpy())
        bounds.append(res.error.l2_bound)
        assert res.error.l2_bound <= 1e-9
    assert counts[0] == counts[1] < 16
    # (the engines may orient a product differently on the two devices: the same count, not
    # necessarily the same bits)
    hi, lo = simulate_dd(c, device="cpu").to_numpy()
    for state, bound in zip(states, bounds):
        assert np.linalg.norm((state - hi) - lo) <= bound
