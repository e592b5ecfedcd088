"""The GPU checks of many-term observables and batched parameters, in one command (~2-4 minutes).

    python -m benchmarks.bench.observables_gpu_suite --out $OUT
    python -m benchmarks.bench.observables_gpu_suite --device cpu --skip-tests --qubits 12 \
        --batched-qubits 6 --compare-qubits 6 --bindings 20 --out dry_run   # the plumbing on a CPU (~1 min)

Runs, in order, each step's wall time recorded:

1. the GPU tests of ``tests/qsim_tc/test_observables.py`` and ``test_batched.py`` (``-m gpu``;
   junit XML in ``gpu_tests.xml``);
2. ``benchmarks.bench.observables --device gpu --qubits 28 --terms 3000`` (the grouped pass of
   :mod:`qsim_tc.observables_gpu` against simulating the benchmark's ``efficient_su2(28, reps=4)``;
   ``observables_gpu.json``), then the pass alone at 28 qubits with and without pacing its
   thread blocks (``pacing`` in the summary);
3. ``benchmarks.bench.batched --device gpu --qubits 12,16,20 --bindings 1000`` (the Estimator on
   1,000 bindings against a sample of a loop of ``Simulator().run``; ``batched_gpu.json``), with
   each block of states' layers through ``batched.cu`` and its term values through the GPU pass;
   then 20 qubits again with the array code's layers (``batched_gpu_array_layers.json``).

``suite.json`` sums them up: the tests' counts, the 28-qubit ratio to the simulation (target
<= 3) and the sweeps' speed-ups (target >= 10). The GPU kernels are switched on for the measurements
(:data:`qsim_tc.observables.GPU_KERNEL`, :data:`qsim_tc.batched.GPU_LAYER_KERNEL`, both on by
default; the 20-qubit sweep's second run switches the layers off). Exit status 1 when a test fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

TEST_FILES = ("tests/qsim_tc/test_observables.py", "tests/qsim_tc/test_batched.py")


def run_tests(out: Path) -> dict:
    """The GPU tests of both files in a child process; their counts and the output's tail."""
    xml = out / "gpu_tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", f"--junitxml={xml}",
           *TEST_FILES]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    row = {"command": " ".join(cmd[1:]), "returncode": done.returncode,
           "tail": done.stdout[-3000:] + done.stderr[-2000:]}
    if xml.exists():
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        row.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
        row["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                         if c.find("failure") is not None or c.find("error") is not None]
    print(f"GPU tests: return code {done.returncode}, {row.get('tests')} run, {row.get('failures')} failed, "
          f"{row.get('errors')} errors, {row.get('skipped')} skipped")
    return row


def pacing_ab(n: int, repeats: int = 3) -> dict:
    """The chemistry operator's GPU pass on a random ``n``-qubit state with the thread blocks
    paced (:data:`qsim_tc.observables_gpu.PACE_LAG`) and not: best seconds of each, in turn."""
    import cupy  # noqa: PLC0415 - GPU runs only
    import numpy as np  # noqa: PLC0415
    from qiskit.quantum_info import SparsePauliOp  # noqa: PLC0415

    from benchmarks.bench.observables import chemistry_terms  # noqa: PLC0415
    from qsim_tc import observables as obs  # noqa: PLC0415
    from qsim_tc import observables_gpu as og  # noqa: PLC0415

    terms, _ = obs.collect([SparsePauliOp.from_list(chemistry_terms(n, 3000))], n)
    rng = cupy.random.default_rng(3)  # (drawn on the device: a 28-qubit state is 4 GiB)
    psi = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    psi /= cupy.linalg.norm(psi)
    default = og.PACE_LAG
    best, values = {}, {}
    try:
        for _ in range(repeats):
            for lag in (default, -1):
                og.PACE_LAG = lag
                cupy.cuda.runtime.deviceSynchronize()
                t = time.perf_counter()
                values[lag] = obs.term_values(psi, terms)  # (the host copy waits for the device)
                best[lag] = min(best.get(lag, float("inf")), time.perf_counter() - t)
    finally:
        og.PACE_LAG = default
    row = {"lag": default, "paced_s": best[default], "unpaced_s": best[-1],
           "same_values": bool(np.array_equal(values[default], values[-1]))}
    print(f"pacing at {n} qubits: lag {default} {row['paced_s']:.3f} s, none {row['unpaced_s']:.3f} s, "
          f"same values: {row['same_values']}")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the JSON files")
    ap.add_argument("--qubits", type=int, default=28, help="the observable's state size")
    ap.add_argument("--batched-qubits", default="12,16,20")
    ap.add_argument("--bindings", type=int, default=1000)
    ap.add_argument("--compare-qubits", default="20",
                    help="sizes of the sweep run again with the array code's layers ('' for none)")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--device", default="gpu", choices=["gpu", "cpu"],
                    help="cpu: a dry run of the measurements' plumbing (with small sizes)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"steps_s": {}}

    t = time.perf_counter()
    if not args.skip_tests:
        summary["tests"] = run_tests(out)
    summary["steps_s"]["tests"] = time.perf_counter() - t

    from benchmarks.bench import batched, observables  # noqa: PLC0415 - after the tests' child process
    from qsim_tc import observables as obs  # noqa: PLC0415

    obs.GPU_KERNEL = True  # the GPU pass under measurement
    t = time.perf_counter()
    try:
        res = observables.main(["--device", args.device, "--qubits", str(args.qubits), "--terms", "3000",
                                "--repeats", "3",
                                "--out", str(out / "observables_gpu.json")])
        summary["observables"] = {k: {"ratio_to_simulate": v["ratio_to_simulate"], "grouped_s": v["grouped_s"],
                                      "x_groups": v["x_groups"],
                                      "max_abs_diff_to_array_code": v.get("max_abs_diff_to_array_code")}
                                  for k, v in res["hamiltonians"].items()}
        summary["observables_simulate_s"] = res["simulate_s"]
    except Exception as exc:  # noqa: BLE001 - recorded; the next step still runs
        summary["observables_error"] = repr(exc)
        print(f"observables benchmark failed: {exc!r}")
    summary["steps_s"]["observables"] = time.perf_counter() - t
    if args.device == "gpu":
        t = time.perf_counter()
        try:
            summary["pacing"] = pacing_ab(args.qubits)
        except Exception as exc:  # noqa: BLE001 - recorded
            summary["pacing_error"] = repr(exc)
        summary["steps_s"]["pacing"] = time.perf_counter() - t

    from qsim_tc import batched as batched_module  # noqa: PLC0415

    batched_module.GPU_LAYER_KERNEL = True  # the layers through batched.cu
    t = time.perf_counter()
    try:
        res = batched.main(["--device", args.device, "--qubits", args.batched_qubits, "--bindings", str(args.bindings),
                            "--out", str(out / "batched_gpu.json")])
        summary["batched"] = [{k: r[k] for k in ("qubits", "estimator_s", "loop_per_binding_s", "speedup",
                                                 "states_per_block", "max_abs_diff_to_qiskit")} for r in res["rows"]]
    except Exception as exc:  # noqa: BLE001 - recorded
        summary["batched_error"] = repr(exc)
        print(f"batched benchmark failed: {exc!r}")
    summary["steps_s"]["batched"] = time.perf_counter() - t
    if args.compare_qubits:  # the same sweep with the array code's layers, for what batched.cu gains
        batched_module.GPU_LAYER_KERNEL = False
        t = time.perf_counter()
        try:
            res = batched.main(["--device", args.device, "--qubits", args.compare_qubits, "--bindings",
                                str(args.bindings), "--rounds", "1", "--loop-sample", "5",
                                "--out", str(out / "batched_gpu_array_layers.json")])
            summary["batched_array_layers"] = [{k: r[k] for k in ("qubits", "estimator_s", "speedup")}
                                               for r in res["rows"]]
        except Exception as exc:  # noqa: BLE001 - recorded
            summary["batched_array_layers_error"] = repr(exc)
        summary["steps_s"]["batched_array_layers"] = time.perf_counter() - t
    summary["switches"] = ("qsim_tc.observables.GPU_KERNEL = True and qsim_tc.batched.GPU_LAYER_KERNEL = True "
                           "for the measurements (batched_gpu_array_layers.json: the latter False)")
    (out / "suite.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "tests"}, indent=1, default=str))
    tests = summary.get("tests", {})
    return 1 if tests.get("returncode", 0) not in (0, 5) else 0  # (5: no tests collected)


if __name__ == "__main__":
    sys.exit(main())
