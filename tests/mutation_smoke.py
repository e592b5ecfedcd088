"""Mutation smoke: plant known bugs one at a time in a copy of the project; the CPU tests must catch each.

Run from the repository root (``tests`` has no ``__init__.py``; ``-m`` imports it as a namespace
package, and ``python tests/mutation_smoke.py`` works as well)::

    python -m tests.mutation_smoke            # every mutant
    python -m tests.mutation_smoke dd-lo ...  # the named ones

The project is copied once to a temporary directory. Each mutant is a fixed, exact text
replacement that must apply exactly once (a pattern that no longer matches fails the run, so the
list cannot rot silently); the copy's CPU tests that guard the mutated code run with
``pytest -x -q -p no:cacheprovider``; the file is restored before the next mutant. The run fails
if the unmutated copy fails its tests or if any mutant survives. About 2-3 minutes on 2 cores.

Not collected by ``pytest`` (the file name does not match ``test_*.py``): run it before resolving
an issue that touches the numerics.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", "results")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str  # exact text, must occur exactly once
    new: str
    tests: tuple[str, ...]  # test files (or node ids) that must catch it


MUTANTS = (
    Mutant("ozaki-drop-accumulation-lo", "gemm/ozaki/cpu.py",
           "    return np.ldexp(hi + lo, eA[:, None] + ec[None, :])",
           "    return np.ldexp(hi, eA[:, None] + ec[None, :])",
           ("tests/gemm/test_ozaki.py",)),
    Mutant("qiskit-drop-definition-phase", "circuits/qiskit_import.py",
           '        walk.phase += _angle(definition.global_phase, "global_phase", name)',
           "        walk.phase += 0.0",
           ("tests/circuits/test_qiskit_import.py",)),
    Mutant("tcec-complex-sign", "gemm/tcec/split.py",
           "    w[..., :, 1, :, 0] = -bi",
           "    w[..., :, 1, :, 0] = bi",
           ("tests/gemm/test_tcec.py",)),
    # a bias toward zero of 2^-7 ulp on average: the norm drifts ~1e-16 over a circuit, 10x the
    # unbiased random walk, while every other metric stays at the FP64 level
    Mutant("ozaki-norm-bias", "gemm/ozaki/cpu.py",
           "    return np.ldexp(hi + lo, eA[:, None] + ec[None, :])",
           "    return np.ldexp(hi + (lo - hi * 2.0**-59), eA[:, None] + ec[None, :])",
           ("tests/gemm/test_ozaki.py",)),
    Mutant("int8-auto-one-split-fewer", "gemm/ozaki/plan.py",
           "            return s, means(s)",
           "            return max(s - 1, SPLITS_RANGE[0]), means(s)",
           ("tests/gemm/test_ozaki.py",)),
    Mutant("permute-bit-order", "qsim_tc/engine/permute.py",
           "    axes = [axis_of_run[r] for r in reversed(range(len(runs)))]",
           "    axes = [axis_of_run[r] for r in range(len(runs))]",
           ("tests/qsim_tc/test_layout_properties.py", "tests/qsim_tc/test_engine.py")),
    Mutant("dd-drop-lo", "gemm/dd/method.py",
           "            acc_lo = (acc_lo * sa) * sb",
           "            acc_lo = (acc_lo * sa) * sb * 0.0",
           ("tests/gemm/test_dd.py",)),
    Mutant("native-real-form-sign", "gemm/native/method.py",
           "    r[:, 1, :, 0] = -b.imag",
           "    r[:, 1, :, 0] = b.imag",
           ("tests/gemm/test_gemm_native.py", "tests/qsim_tc/test_engine.py")),
    Mutant("ozaki-complex-stacking-sign", "gemm/ozaki/cpu.py",
           "                view[:, 0, slot, K:2 * K] = -qs[1]",
           "                view[:, 0, slot, K:2 * K] = qs[1]",
           ("tests/gemm/test_ozaki.py",)),
    Mutant("dd-complex-sign", "gemm/dd/method.py",
           "xp.concatenate([-b.imag, b.real], axis=1)], axis=0)",
           "xp.concatenate([b.imag, b.real], axis=1)], axis=0)",
           ("tests/gemm/test_dd.py",)),
    Mutant("crt-3m-complex-sign", "gemm/ozaki/crt/cpu.py",
           "return U[i, 0] - U[i, 1] if part == 0 else U[i, 2] - U[i, 0] - U[i, 1]",
           "return U[i, 0] + U[i, 1] if part == 0 else U[i, 2] - U[i, 0] - U[i, 1]",
           ("tests/gemm/test_crt.py",)),
    Mutant("crt-2m-complex-sign", "gemm/ozaki/crt/cpu.py",
           "return U[i, 0] + U[i, 1] if part == 0 else U[i, 0] - U[i, 1]",
           "return U[i, 0] + U[i, 1] if part == 0 else U[i, 1] - U[i, 0]",
           ("tests/gemm/test_crt.py",)),
    Mutant("small-gate-target-off-by-one", "qsim_tc/engine/small_gate/layout.py",
           "    tile_pos = low + [k + i for i in range(len(high))]",
           "    tile_pos = low + [k + i + 1 for i in range(len(high))]",
           ("tests/qsim_tc/test_small_gate_layout.py",)),
)


def pytest_cmd(tests) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=",
            *tests]


def run_tests(copy: Path, tests) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(pytest_cmd(tests), cwd=copy, env=env, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("FAILED") or " passed" in x or " failed" in x]
    return proc.returncode, "; ".join(lines[-2:]) or proc.stdout[-300:] + proc.stderr[-300:]


def plant(copy: Path, m: Mutant) -> str:
    """Apply ``m`` in ``copy``; return the original text of the file."""
    f = copy / m.path
    text = f.read_text()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutant {m.name}: the pattern occurs {n} times in {m.path} (expected once): "
                         f"update the list\n  {m.old!r}")
    f.write_text(text.replace(m.old, m.new))
    return text


def check_copy_is_imported(copy: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(copy))
    code = "import gemm, circuits, qsim_tc; print(gemm.__file__, circuits.__file__, qsim_tc.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True).stdout
    if not all(p.startswith(str(copy)) for p in out.split()):
        raise SystemExit(f"the copy's packages are not the ones imported: {out}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="mutants to run (default: all)")
    args = p.parse_args(argv)
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        raise SystemExit(f"unknown mutant(s) {sorted(unknown)}; known: {[m.name for m in MUTANTS]}")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qsim-tc-mutants-") as tmp:
        copy = Path(tmp) / "project"
        shutil.copytree(ROOT, copy, ignore=IGNORE)
        check_copy_is_imported(copy)
        # every pattern must still match before anything runs
        for m in chosen:
            (copy / m.path).write_text(plant(copy, m))
        files = sorted({t for m in chosen for t in m.tests})
        t0 = time.perf_counter()
        rc, summary = run_tests(copy, files)
        print(f"baseline (no mutant): {'ok' if rc == 0 else 'FAILED'} in {time.perf_counter() - t0:.1f} s: {summary}")
        if rc != 0:
            print("the unmutated copy fails its tests: fix those first")
            return 1
        survivors = []
        for m in chosen:
            original = plant(copy, m)
            t0 = time.perf_counter()
            try:
                rc, summary = run_tests(copy, m.tests)
            finally:
                (copy / m.path).write_text(original)
            status = "caught" if rc == 1 else ("SURVIVED" if rc == 0 else f"error (pytest exit {rc})")
            if rc != 1:
                survivors.append(m.name)
            print(f"{m.name:32s} {status:8s} {time.perf_counter() - t0:5.1f} s  {summary}")
    print(f"{len(chosen) - len(survivors)}/{len(chosen)} mutants caught in {time.perf_counter() - t_all:.0f} s")
    if survivors:
        print("survived or errored: " + ", ".join(survivors))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
