"""Fuzz of ``circuits.from_qasm`` with mutated OpenQASM 2 and 3 programs, under time and memory watches.

The mutants come from ``tests/fuzz/qasm_mutate.py`` (half OpenQASM 2, half OpenQASM 3). They run
in worker processes, a batch each, one after another: each case runs in-process under a
``signal.alarm`` watchdog (a case still running after ``--kill-s`` is stopped and counted), its
wall time is measured, and the worker's peak resident memory (``getrusage``) is read after it.
A worker that dies (a crash of native code) is reported with the case it was running, and the
next worker resumes after it.

The summary counts: exceptions other than CircuitError / FileNotFoundError / ImportError,
messages that quote the file outside the program's folder, cases over ``--max-s`` seconds or
whose worker peaked over ``--max-gb``, and crashes. All must be 0.

Usage::

    python -m benchmarks.bench.fuzz_qasm --cases 2000 --out benchmarks/results/fuzz_qasm.json
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from benchmarks.common import write_results

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    """tests/fuzz/qasm_mutate.py, loaded by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("qasm_mutate", ROOT / "tests" / "fuzz" / "qasm_mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def worker(start: int, stop: int, seed: int, kill_s: int) -> None:
    """Run cases ``start..stop-1``, one JSON line each on stdout, flushed before the next starts."""
    gen = _generator()

    def alarm(signum, frame):
        raise gen.CaseTimeout(f"still running after {kill_s} s")

    signal.signal(signal.SIGALRM, alarm)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gen.prepare(folder)
        for i in range(start, stop):
            m = gen.mutant(i, seed)
            print(json.dumps({"started": i}), flush=True)
            signal.alarm(kill_s)
            t0 = time.perf_counter()
            try:
                r = gen.run_case(m, folder)
            except gen.CaseTimeout:
                r = {"index": i, "version": m.version, "mutations": m.mutations, "outcome": "killed",
                     "allowed": False, "leak": False, "message": f"stopped after {kill_s} s",
                     "seconds": time.perf_counter() - t0}
            finally:
                signal.alarm(0)
            r["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(json.dumps(r), flush=True)


def run(cases: int, seed: int, batch: int, kill_s: int) -> list[dict]:
    """All cases, through worker processes; a worker that dies is recorded and skipped past."""
    results: list[dict] = []
    gen = _generator()
    i = 0
    while i < cases:
        stop = min(cases, i + batch)
        cmd = [sys.executable, "-m", "benchmarks.bench.fuzz_qasm", "--worker", f"{i}:{stop}", "--seed", str(seed),
               "--kill-s", str(kill_s)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        started, done = None, i
        for line in proc.stdout.splitlines():
            rec = json.loads(line)
            if "started" in rec:
                started = rec["started"]
            else:
                results.append(rec)
                done = rec["index"] + 1
        if done < stop:  # the worker died inside case `started`
            m = gen.mutant(started if started is not None else done, seed)
            results.append({"index": m.index, "version": m.version, "mutations": m.mutations, "outcome": "crash",
                            "allowed": False, "leak": False, "seconds": None, "peak_mb": None,
                            "message": f"worker exited with {proc.returncode}: {proc.stderr[-300:]}"})
            done = m.index + 1
        print(f"cases {i}..{done - 1}: {sum(not r['allowed'] for r in results)} bad so far", flush=True)
        i = done
    return results


def summarize(results: list[dict], max_s: float, max_gb: float) -> dict:
    """Counts by outcome and version, the failures (with their mutations), and the extremes."""
    timed = [r for r in results if r["seconds"] is not None]
    over_time = [r for r in timed if r["seconds"] > max_s]
    over_mem = [r for r in results if r.get("peak_mb") and r["peak_mb"] > max_gb * 1024]
    bad = [r for r in results if not r["allowed"]]
    leaks = [r for r in results if r["leak"]]

    def brief(r):
        return {k: r[k] for k in ("index", "version", "mutations", "outcome", "message", "seconds") if k in r}

    by_mutation = collections.Counter(name for r in results for name in set(r["mutations"]))
    return {
        "cases": len(results),
        "by_version": dict(collections.Counter(f"OpenQASM {r['version']}" for r in results)),
        "outcomes": dict(collections.Counter(r["outcome"] for r in results).most_common()),
        "mutations": dict(by_mutation.most_common()),
        "unexpected_exceptions": len(bad),
        "leaks": len(leaks),
        f"over_{max_s:g}_s": len(over_time),
        f"over_{max_gb:g}_gb": len(over_mem),
        "crashes": sum(r["outcome"] == "crash" for r in results),
        "max_seconds": max((r["seconds"] for r in timed), default=0.0),
        "slowest": [brief(r) for r in sorted(timed, key=lambda r: -r["seconds"])[:5]],
        "max_peak_mb": max((r["peak_mb"] or 0 for r in results), default=0.0),
        "failures": [brief(r) for r in bad + leaks + over_time + over_mem][:50],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=250, help="cases per worker process")
    p.add_argument("--max-s", type=float, default=10.0, help="a case slower than this is a failure")
    p.add_argument("--max-gb", type=float, default=2.0, help="a worker peaking above this is a failure")
    p.add_argument("--kill-s", type=int, default=60, help="stop a case after this long")
    p.add_argument("--out", default=None, help="write the summary JSON here")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        start, stop = (int(x) for x in args.worker.split(":"))
        worker(start, stop, args.seed, args.kill_s)
        return 0
    t0 = time.perf_counter()
    results = run(args.cases, args.seed, args.batch, args.kill_s)
    summary = summarize(results, args.max_s, args.max_gb)
    summary["wall_s"] = time.perf_counter() - t0
    summary["settings"] = {"seed": args.seed, "batch": args.batch, "max_s": args.max_s, "max_gb": args.max_gb,
                           "kill_s": args.kill_s}
    print(json.dumps({k: v for k, v in summary.items() if k not in ("failures", "slowest")}, indent=1))
    for f in summary["failures"][:20]:
        print("FAIL", f)
    if args.out:
        write_results(args.out, summary, module="benchmarks.bench.fuzz_qasm", argv=argv)
    failed = (summary["unexpected_exceptions"] or summary["leaks"] or summary["crashes"]
              or summary[f"over_{args.max_s:g}_s"] or summary[f"over_{args.max_gb:g}_gb"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
