"""Mutation smoke: plant known bugs one at a time in a copy of the project; the CPU tests must catch each.

Run from the repository root (``tests`` has no ``__init__.py``; ``-m`` imports it as a namespace
package, and ``python tests/mutation_smoke.py`` works as well)::

    python -m tests.mutation_smoke            # every mutant
    python -m tests.mutation_smoke dd-lo ...  # the named ones

The project is copied once to a temporary directory. Each mutant is a fixed, exact text
replacement that must apply exactly once (a pattern that no longer matches fails the run, so the
list cannot rot silently); the copy's CPU tests that guard the mutated code run with
``pytest -x -q -p no:cacheprovider``; the file is restored before the next mutant. The run fails
if the unmutated copy fails its tests or if any mutant survives; a pytest run that hangs is stopped
after :data:`TEST_TIMEOUT_S` and fails the run. About 7 minutes on 2 cores (3 of them the
baseline), twice that when the cores are busy; the CPU kernel's mutant recompiles the kernels.

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
TEST_TIMEOUT_S = 900  # one pytest run (the baseline, or one mutant's tests)
IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", "results")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str  # exact text, must occur exactly once
    new: str
    tests: tuple[str, ...]  # test files (or node ids) that must catch it


STAGES = "tests/qsim_tc/test_stages.py"
STAGE_FUSION = "tests/qsim_tc/test_stage_fusion.py"
STAGE_PROGRAM = "tests/qsim_tc/test_stage_program.py"
STAGES_CPU = "tests/qsim_tc/test_stages_cpu.py"
RANKS = "tests/qsim_tc/test_distributed_ranks.py"
CALIBRATE_PRECISION = tuple(f"tests/qsim_tc/test_calibrate.py::{t}" for t in (
    "test_a_cached_table_of_one_precision_never_serves_the_other", "test_a_cached_single_table_never_serves_double",
    "test_a_gpu_cache_missing_a_precision_is_completed_not_borrowed"))
SWAPS = tuple(f"tests/qsim_tc/test_capacity.py::{t}" for t in (
    "test_swapped_bit_pairs_equal_permute_bits", "test_permute_in_place_equals_permute_bits",
    "test_pairs_between_is_at_most_two_involutions"))

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
    Mutant("crt-limbs-negation-carry", "gemm/ozaki/crt/limbs.py",
           "        nhi = ~hi + np.where(nlo == 0, np.uint64(1), zero)",
           "        nhi = ~hi + zero",
           ("tests/gemm/test_crt_limbs.py",)),
    Mutant("crt-limbs-2m-image-sign", "gemm/ozaki/crt/limbs.py",
           "                ci = s if ci > 0 else -s",
           "                ci = s",
           ("tests/gemm/test_crt_limbs.py",)),
    Mutant("small-gate-target-off-by-one", "qsim_tc/engine/small_gate/layout.py",
           "    tile_pos = low + [k + i for i in range(len(high))]",
           "    tile_pos = low + [k + i + 1 for i in range(len(high))]",
           ("tests/qsim_tc/test_small_gate_layout.py",)),
    # --- the stage planner ----------------------------------------------------------------------
    Mutant("planner-local-bound-off-by-one", "qsim_tc/stages/plan.py",
           "        if any(pos[q] >= big_l for q in needed[i]):",
           "        if any(pos[q] > big_l for q in needed[i]):",
           (STAGES,)),
    Mutant("planner-relabel-moves-nothing", "qsim_tc/stages/plan.py",
           "            phys[pa], phys[pb] = b, a",
           "            phys[pa], phys[pb] = a, b",
           (STAGES,)),
    Mutant("planner-dense-after-diagonal-unordered", "qsim_tc/stages/plan.py",
           "                preds[i].update(diag_since.pop(q, ()))",
           "                diag_since.pop(q, ())",
           (STAGES,)),
    Mutant("planner-ready-one-predecessor-early", "qsim_tc/stages/plan.py",
           "            if self.waiting[s] == 0:",
           "            if self.waiting[s] <= 1:",
           (STAGES,)),
    # --- in-stage fusion ------------------------------------------------------------------------
    Mutant("stage-fusion-drops-trailing-diagonal", "qsim_tc/stages/fusion.py",
           "    out.extend(waiting)\n",
           "    out.extend(waiting[1:])\n",
           (STAGE_FUSION,)),
    Mutant("stage-fusion-pre-phase-inverted", "qsim_tc/stages/fusion.py",
           "pre.extend(d for d in touch if not qubits & set(d.positions))",
           "pre.extend(d for d in touch if qubits & set(d.positions))",
           (STAGE_FUSION,)),
    Mutant("stage-fusion-global-slot-joins", "qsim_tc/stages/fusion.py",
           "all(p < local_qubits for p in op.positions)",
           "all(p <= local_qubits for p in op.positions)",
           (STAGE_FUSION,)),
    # --- stage programs (built on the host; checked by their interpreter) ------------------------
    Mutant("program-phase-moebius-sign", "qsim_tc/stages/program.py",
           "                c[v] = (c[v] - c[v ^ bit]) % _TURN",
           "                c[v] = (c[v] + c[v ^ bit]) % _TURN",
           (STAGE_PROGRAM,)),
    Mutant("program-control-slot-off-by-one", "qsim_tc/stages/program.py",
           "                cmask |= 1 << op.positions[b]\n",
           "                cmask |= 1 << op.positions[b] + 1\n",
           (STAGE_PROGRAM,)),
    Mutant("program-store-swap-ignores-renaming", "qsim_tc/stages/program.py",
           "store_swaps=tuple((p, sigma_before[g]) for p, g in exchanges)",
           "store_swaps=tuple((p, g) for p, g in exchanges)",
           (STAGE_PROGRAM,)),
    # --- the CPU stage executor -----------------------------------------------------------------
    Mutant("cpu-high-control-off-by-one", "qsim_tc/stages/cpu.py",
           "sum(1 << (c - geo.nbits) for c in controls if c >= geo.nbits)",
           "sum(1 << (c - geo.nbits) for c in controls if c > geo.nbits)",
           (STAGES_CPU,)),
    Mutant("cpu-diagonal-skips-partly-unit-rows", "qsim_tc/stages/cpu.py",
           "    ones = (table == 1).all(axis=2)",
           "    ones = (table == 1).any(axis=2)",
           (STAGES_CPU,)),
    Mutant("cpu-canonicalize-gathers-in-place", "qsim_tc/stages/cpu.py",
           "_gather(phys, src_bit, nbits, 1, none, scratch, None, in_place_ok=False, dst_bit=dst_bit)",
           "_gather(phys, src_bit, nbits, 1, none, scratch, None, dst_bit=dst_bit)",
           (STAGES_CPU,)),
    Mutant("cpu-canonicalize-inverts-the-layout", "qsim_tc/stages/cpu.py",
           "    src_bit = [where[q] for q in dst_bit]\n",
           "    src_bit = [int(phys.layout.phys[q]) for q in dst_bit]\n",
           (STAGES_CPU,)),
    Mutant("cpu-canonical-chunk-misses-a-source-bit", "qsim_tc/stages/cpu.py",
           "        extra = sorted(q for q in low if q >= a)",
           "        extra = sorted(q for q in low if q > a)",
           (STAGES_CPU,)),
    Mutant("cpu-vector-load-ignores-the-source-order", "qsim_tc/stages/cpu.py",
           "_bit_table(order), mode",
           "_bit_table(range(v, nbits)), mode",
           ("tests/qsim_tc/test_stages_cpu_kernels.py",)),
    Mutant("tc-mma-aligns-to-the-values", "gemm/tcec/emulate.py",
           "p_exp = np.where((p != 0) & np.isfinite(p), (ea - 1) + (eb - 1), none)",
           "p_exp = np.where((p != 0) & np.isfinite(p), np.frexp(np.where(np.isfinite(p), p, 0.0))[1] - 1, none)",
           ("tests/gemm/test_tcec.py",)),
    Mutant("cpu-vector-load-swaps-the-halves", "qsim_tc/stages/cpu_kernels.py",
           "put(builder.shuffle_vector(a, b, even), builder.shuffle_vector(a, b, odd), t)",
           "put(builder.shuffle_vector(a, b, even), builder.shuffle_vector(a, b, even), t)",
           ("tests/qsim_tc/test_stages_cpu_kernels.py",)),
    Mutant("cpu-amplitude-load-swaps-neighbours", "qsim_tc/stages/cpu_kernels.py",
           "parts = [builder.shuffle_vector(parts[k], parts[k + 1], idx) for k in range(0, len(parts), 2)]",
           "parts = [builder.shuffle_vector(parts[k + 1], parts[k], idx) for k in range(0, len(parts), 2)]",
           ("tests/qsim_tc/test_stages_cpu_kernels.py",)),
    Mutant("cpu-l2-cap-ignores-the-threshold", "qsim_tc/stages/host_cache.py",
           "if not l2_bytes or l2_bytes < L2_CAP_MIN_BYTES:",
           "if not l2_bytes:",
           (STAGES_CPU,)),
    Mutant("cpu-kernel-diagonal-sign", "qsim_tc/stages/cpu_kernels.py",
           "                    im[i] = a * xi + b * xr",
           "                    im[i] = a * xi - b * xr",
           ("tests/qsim_tc/test_stages_cpu_kernels.py",)),
    # --- the choice of method per block (backend="auto") and its cost tables -------------------
    Mutant("select-lookahead-prices-the-candidate", "qsim_tc/plan/select.py",
           "return min(self.gate_ms(m, d_next, n_qubits, placement_next) for m in own)",
           "return min(self.gate_ms(m, d_next, n_qubits, placement_next) for m in (name,))",
           ("tests/qsim_tc/test_select.py",)),
    Mutant("select-lookahead-reads-excluded", "qsim_tc/plan/select.py",
           "return min(self.gate_ms(m, d_next, n_qubits, placement_next) for m in own)",
           "return min(self.gate_ms(m, d_next, n_qubits, placement_next) for m in self.candidates)",
           ("tests/qsim_tc/test_select.py",)),
    Mutant("select-margin-strict", "qsim_tc/plan/select.py",
           "costs[first] <= costs[best] * (1 + SWITCH_MARGIN)",
           "costs[first] < costs[best] * (1 + SWITCH_MARGIN)",
           ("tests/qsim_tc/test_select.py",)),
    Mutant("costs-stand-in-of-another-precision", "qsim_tc/plan/costs.py",
           "    same = [r for r in rows if r.dtype == dtype]\n",
           "    same = [r for r in rows if r.dtype == dtype] or rows\n",
           ("tests/qsim_tc/test_costs.py",)),
    Mutant("calibrate-cache-of-another-precision", "qsim_tc/calibrate.py",
           "    if precision is not None and uncovered:",
           "    if precision is None and uncovered:",
           CALIBRATE_PRECISION),
    Mutant("calibrate-never-completes-a-cache", "qsim_tc/calibrate.py",
           "    missing = [p for p in precisions if table is None or not _covers(table, p)]",
           "    missing = [p for p in precisions if table is None]",
           CALIBRATE_PRECISION),
    Mutant("calibrate-complete-scale-inverted", "qsim_tc/calibrate.py",
           "        logs = [math.log(r.ms[d] / ref_ms(x, d, r.n_qubits)) for d in seen]",
           "        logs = [math.log(ref_ms(x, d, r.n_qubits) / r.ms[d]) for d in seen]",
           ("tests/qsim_tc/test_calibrate.py::test_complete_borrows_the_unmeasured_widths_and_methods_scaled",)),
    # --- distribution (8 and 16 thread ranks: global bits 2 and 3) -----------------------------
    Mutant("distributed-partner-of-global-bit", "qsim_tc/distributed/state.py",
           "        partner = self.rank ^ (1 << (g - big_l))",
           "        partner = self.rank ^ (g - big_l + 1)",
           (RANKS,)),
    Mutant("distributed-rank-bit-unmasked", "qsim_tc/distributed/state.py",
           "        return (self.rank >> (p - self.local_qubits)) & 1",
           "        return min(self.rank >> (p - self.local_qubits), 1)",
           (RANKS,)),
    Mutant("distributed-pauli-partner-shift", "qsim_tc/distributed/state.py",
           "        x_loc, x_rank = x & low, x >> big_l",
           "        x_loc, x_rank = x & low, (x >> big_l) & 3",
           (RANKS,)),
    Mutant("distributed-swap-many-wrong-member", "qsim_tc/distributed/state.py",
           "        members = [u for u in range(1 << k) if u != me]  # part `me` stays where it is",
           "        members = [u for u in range(1 << k) if u != 0]  # part `me` stays where it is",
           (RANKS,)),
    Mutant("distributed-free-swap-of-one-zero-qubit", "qsim_tc/distributed/plan.py",
           "            (r if free and zero[layout[p]] and zero[layout[g]] else m).append((p, g))",
           "            (r if free and (zero[layout[p]] or zero[layout[g]]) else m).append((p, g))",
           ("tests/qsim_tc/test_distributed_plan.py",)),
    Mutant("distributed-nccl-receives-at-the-round-start", "qsim_tc/distributed/exchange.py",
           "                self.nccl_comm.recv(device_ptr(recv[i * piece:]), count, nccl.NCCL_FLOAT64, peer, link.ptr)",
           "                self.nccl_comm.recv(device_ptr(recv), count, nccl.NCCL_FLOAT64, peer, link.ptr)",
           ("tests/qsim_tc/test_distributed_nccl_path.py",)),
    Mutant("distributed-pack-waits-for-nothing", "qsim_tc/distributed/exchange.py",
           "                    pack_s.wait_event(sent_ev[k])",
           "                    pass",
           ("tests/qsim_tc/test_distributed_nccl_path.py",)),
    Mutant("tc32-group-grid-one-bit-finer", "qsim_tc/stages/tc32.py",
           "GRID = 1.5 * 2.0**27",
           "GRID = 1.5 * 2.0**26",
           ("tests/qsim_tc/test_stage_tc32.py",)),
    Mutant("tc32-compiled-swaps-two-corrections", "qsim_tc/stages/tc32_compiled.py",
           "            cor = _product(cor, parts[1, r], exps[1, r], split[2], es[2], inner)\n"
           "            cor = _product(cor, parts[2, r], exps[2, r], split[1], es[1], inner)",
           "            cor = _product(cor, parts[2, r], exps[2, r], split[1], es[1], inner)\n"
           "            cor = _product(cor, parts[1, r], exps[1, r], split[2], es[2], inner)",
           ("tests/qsim_tc/test_stage_tc32_compiled.py",)),
    Mutant("tc32-k4-one-instruction-not-two", "qsim_tc/stages/tc32.py",
           "INSTRUCTION_K = 16",
           "INSTRUCTION_K = 32",
           ("tests/qsim_tc/test_stage_tc32.py",)),
    Mutant("fuse-calibration-of-another-host-trusted", "qsim_tc/stages/cpu_fuse_calibration.py",
           '        if data.get("key") != key:',
           "        if False:",
           ("tests/qsim_tc/test_cpu_fuse_calibration.py",)),
    Mutant("fuse-calibration-never-read", "qsim_tc/stages/cpu.py",
           "            FUSE_COST.update(measured)",
           "            pass",
           ("tests/qsim_tc/test_cpu_fuse_calibration.py",)),
    Mutant("distributed-rank-skips-a-stage", "qsim_tc/distributed/run.py",
           "        if any(op.kind != RELABEL for op in stage.ops):",
           "        if len(local):",
           (RANKS,)),
    # --- index-bit swaps ------------------------------------------------------------------------
    Mutant("swap-second-involution-off-by-one", "qsim_tc/engine/swap.py",
           "            j = (1 - i) % m",
           "            j = (2 - i) % m",
           SWAPS),
    Mutant("swap-misses-the-last-chunk", "qsim_tc/engine/swap.py",
           "        for c in range(t, n_chunks, len(tmps)):",
           "        for c in range(t, n_chunks - 1, len(tmps)):",
           SWAPS),
    # --- the GPU pass of observables (its host code, with the numpy model of its kernels) -------
    Mutant("gpu-pass-doubles-in-tile-masks", "qsim_tc/observables.py",
           "np.where((terms.x[order] >> tb) != 0, 2.0, 1.0)",
           "np.where(terms.x[order] != 0, 2.0, 1.0)",
           ("tests/qsim_tc/test_observables.py::test_gpu_pass_model_matches_the_cpu_pass",)),
    Mutant("gpu-pass-segment-top-bit-off-by-one", "qsim_tc/observables_gpu.py",
           "seg_top = np.array([int(v).bit_length() - 1 if v else 0",
           "seg_top = np.array([int(v).bit_length() if v else 0",
           ("tests/qsim_tc/test_observables.py::test_gpu_pass_model_matches_the_cpu_pass",)),
    Mutant("gpu-pass-records-lose-the-imaginary-keys", "qsim_tc/observables_gpu.py",
           "rec[:, 2] = self.g_u[:-1] | ((self.g_u[:-1] + n_re) << REC_KEY_BITS)",
           "rec[:, 2] = self.g_u[:-1] | (self.g_u[1:] << REC_KEY_BITS)",
           ("tests/qsim_tc/test_observables.py::test_gpu_pass_model_matches_the_cpu_pass",)),
    # --- the probe's model of one tensor-core instruction -----------------------------------------
    Mutant("tc-mma-ignores-the-kept-bits", "gemm/tcec/emulate.py",
           "extra = db.TC_EXTRA_BITS if extra_bits is None else extra_bits",
           "extra = db.TC_EXTRA_BITS",
           ("tests/gemm/test_tcec.py::test_probe_model_check_finds_the_gpus_kept_bits",)),
    Mutant("dynamic-merges-branches-of-different-states", "qsim_tc/dynamic.py",
           "            if _same_state(r.state, b.state):",
           "            if r.state is not None or b.state is not None:",
           ("tests/qsim_tc/test_qiskit_backend.py",)),
    Mutant("sampler-dynamic-drops-a-register-bit", "qsim_tc/qiskit.py",
           "bits[:, k] = ((clbits >> cb) & 1).astype(bool)",
           "bits[:, k] = ((clbits >> k) & 1).astype(bool)",
           ("tests/qsim_tc/test_primitives.py",)),
    Mutant("tc-mma-ignores-the-steps", "gemm/tcec/emulate.py",
           "if group is not None and group < k:",
           "if False:",
           ("tests/gemm/test_tcec.py::test_probe_model_check_finds_the_gpus_kept_bits",)),
)


def pytest_cmd(tests) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=",
            *tests]


def run_tests(copy: Path, tests) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    try:
        proc = subprocess.run(pytest_cmd(tests), cwd=copy, env=env, capture_output=True, text=True,
                              timeout=TEST_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # a mutant that makes the tests hang is reported, not waited on
        return -1, f"no result within {TEST_TIMEOUT_S} s"
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
