"""Many-term Pauli observables: the grouped expectation value against simulating the state.

    python -m benchmarks.bench.observables --qubits 20 --terms 3000 --out benchmarks/results/observables_cpu.json
    python -m benchmarks.bench.observables --device gpu --qubits 28 --kinds chemistry --out $OUT/observables_gpu.json

The Hamiltonians: ``chemistry`` has the structure of a Jordan-Wigner molecular Hamiltonian (Z and
ZZ terms; hopping terms X Z..Z X and Y Z..Z Y; double excitations: the 8 X/Y patterns with an
even number of Y over 4 orbitals, Z strings between them), so several terms share an X mask;
``random`` draws uniform Pauli strings (every term its own X mask: the worst case). The state is
a bound ``efficient_su2(n, reps=4)``; "simulate" is ``Simulator().run`` of it (warm), "grouped"
is :func:`qsim_tc.observables.expectation_values`, "term by term" is the state's former per-term
loop (one term, extrapolated from a sample of terms).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def chemistry_terms(n: int, n_terms: int, seed: int = 0) -> list[tuple[str, float]]:
    """Pauli terms (label, coefficient) shaped like a Jordan-Wigner molecular Hamiltonian."""
    from math import comb  # noqa: PLC0415

    most = n + 3 * comb(n, 2) + 8 * comb(n, 4)  # Z, ZZ, hopping XX and YY, double excitations
    if n_terms > most:
        raise ValueError(f"n_terms: a {n}-qubit chemistry-like operator has at most {most} distinct terms, "
                         f"got {n_terms}")
    rng = np.random.default_rng(seed)
    terms: dict[str, float] = {}

    def add(letters: dict[int, str]):
        label = "".join(letters.get(q, "I") for q in reversed(range(n)))
        terms[label] = terms.get(label, 0.0) + float(rng.normal())

    for p in range(n):
        add({p: "Z"})
        for q in range(p + 1, n):
            add({p: "Z", q: "Z"})
    for p in range(n):
        for q in range(p + 1, n):
            z = {k: "Z" for k in range(p + 1, q)}
            add({**z, p: "X", q: "X"})
            add({**z, p: "Y", q: "Y"})
    patterns = ["XXXX", "XXYY", "XYXY", "YXXY", "XYYX", "YXYX", "YYXX", "YYYY"]
    while len(terms) < n_terms:
        p, q, r, s = sorted(rng.choice(n, 4, replace=False).tolist())
        z = {k: "Z" for k in list(range(p + 1, q)) + list(range(r + 1, s))}
        for pat in patterns:
            if len(terms) >= n_terms:
                break
            add({**z, p: pat[0], q: pat[1], r: pat[2], s: pat[3]})
    return list(terms.items())[:n_terms]


def random_terms(n: int, n_terms: int, seed: int = 0) -> list[tuple[str, float]]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("IXYZ"))
    return [("".join(rng.choice(letters, n)), float(rng.normal())) for _ in range(n_terms)]


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _best_alternating(fns, repeats: int) -> list[float]:
    """Best time of each of ``fns``, run in turn ``repeats`` times: on a loaded machine both
    sides of a ratio see the same load."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], _best(fn, 1))
    return best


def _sync(device: str):
    """Wait for the device's queued work (GPU timings end there); nothing on the CPU."""
    if device == "gpu":
        import cupy  # noqa: PLC0415 - GPU runs only

        cupy.cuda.runtime.deviceSynchronize()


def main(argv=None) -> dict:
    from qiskit.circuit.library import efficient_su2
    from qiskit.quantum_info import SparsePauliOp

    from benchmarks.common import write_results
    from circuits.qiskit_import import from_qiskit
    from qsim_tc import Simulator
    from qsim_tc.observables import collect, expectation_values

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qubits", type=int, default=20)
    ap.add_argument("--terms", type=int, default=3000)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kinds", default="chemistry,random", help="Hamiltonians to time (comma-separated)")
    ap.add_argument("--per-term-sample", type=int, default=20,
                    help="terms of the former per-term loop timed (0: not timed)")
    ap.add_argument("--check-terms", type=int, default=200,
                    help="GPU: terms whose values the array code recomputes as a check (0: none)")
    ap.add_argument("--machine", default=None, help="where it ran, recorded in the result")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.device == "gpu":  # the GPU pass under measurement (qsim_tc.observables.GPU_KERNEL)
        from qsim_tc import observables  # noqa: PLC0415

        observables.GPU_KERNEL = True
    n = args.qubits
    qc = efficient_su2(n, reps=4)
    qc = qc.assign_parameters(np.random.default_rng(1).uniform(0, 2 * np.pi, qc.num_parameters))
    circ = from_qiskit(qc)
    sim = Simulator(device=args.device)
    state = sim.run(circ).state  # warm: compiles the executor
    _sync(args.device)

    def simulate():
        sim.run(circ)
        _sync(args.device)

    sim_s = float("inf")
    rows = {}
    makers = {"chemistry": chemistry_terms, "random": random_terms}
    for kind in args.kinds.split(","):
        make = makers[kind]
        op = SparsePauliOp.from_list(make(n, args.terms))
        terms, _ = collect([op], n)
        expectation_values(state, [op[:50]])  # compiles the pass (CPU or GPU)
        # simulate and grouped in turn, so that the ratio compares times under the same load
        kind_sim_s, grouped_s = _best_alternating([simulate, lambda: expectation_values(state, [op])], args.repeats)
        sim_s = min(sim_s, kind_sim_s)
        row = {"terms": len(op), "x_groups": int(len(np.unique(terms.x))), "grouped_s": grouped_s,
               "simulate_s": kind_sim_s, "ratio_to_simulate": grouped_s / kind_sim_s}
        if args.per_term_sample:
            sample = op[:args.per_term_sample]
            t = time.perf_counter()
            for label, c in sample.to_list():
                _per_term(state, label)
            row["term_by_term_s_extrapolated"] = (time.perf_counter() - t) / len(sample) * len(op)
        if args.device == "gpu":  # what the GPU pass reads: its tile, and half the state a high part
            row.update(_gpu_reads(terms, state))
            row["effective_GBps"] = row["state_reads"] * state.data().nbytes / grouped_s / 1e9
        if args.device == "gpu" and args.check_terms:
            row["max_abs_diff_to_array_code"] = _check_gpu(state, op[:args.check_terms])
        rows[kind] = row
        extra = f", term by term ~{row['term_by_term_s_extrapolated']:.1f} s" if args.per_term_sample else ""
        check = f", check {row['max_abs_diff_to_array_code']:.1e}" if "max_abs_diff_to_array_code" in row else ""
        if "high_parts" in row:
            check += (f"; {row['high_parts']} high parts, ~{row['state_reads']:.0f} state reads, "
                      f"{row['effective_GBps']:.0f} GB/s")
        print(f"{kind}: {len(op)} terms, {row['x_groups']} X masks: grouped {grouped_s:.3f} s "
              f"({grouped_s / kind_sim_s:.2f}x simulate, {kind_sim_s:.3f} s alongside){extra}{check}")
    print(f"simulate efficient_su2({n}, reps=4) on {args.device}: {sim_s:.3f} s")
    payload = {"qubits": n, "device": args.device, "machine": args.machine, "circuit": f"efficient_su2({n}, reps=4)",
               "simulate_s": sim_s, "hamiltonians": rows, "target": "grouped <= 3x simulate"}
    if args.device == "gpu":
        import cupy  # noqa: PLC0415 - GPU runs only

        payload["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    if args.out:
        write_results(args.out, payload, module="benchmarks.bench.observables", argv=argv)
    return payload


def _gpu_reads(terms, state) -> dict:
    """The distinct high parts of the X masks above the GPU pass's tiles, and the state reads they
    cost (the tiles once a launch, half the state for each nonzero high part)."""
    from qsim_tc import observables_gpu as og

    kind = "c128" if state.data().dtype == np.complex128 else "c64"
    tb = min(og.TILE_BITS[kind], state.n_qubits)
    high = np.unique(terms.x >> tb)
    launches = -(-len(terms.x) // og.LAUNCH_TERMS)
    return {"tile_bits": tb, "high_parts": int(len(high)),
            "state_reads": launches + 0.5 * int(np.count_nonzero(high))}


def _check_gpu(state, op) -> float:
    """The largest difference between the GPU pass's term values and the array code's (numpy
    formulas run by cupy, a separate implementation) for the terms of ``op``."""
    from qsim_tc import observables as obs

    terms, _ = obs.collect([op], state.n_qubits)
    fast = obs.term_values(state.data(), terms)
    arrays = obs.term_values(state.data(), terms, compiled=False)
    return float(np.max(np.abs(fast - arrays)))


def _per_term(state, label: str) -> complex:
    """One term as the state's former loop did: a flip and sign per letter, then a dot product."""
    n = state.n_qubits
    xp = state.xp
    psi = state.data().reshape((2,) * n)
    phi = psi
    for a, letter in enumerate(label):
        if letter in "ZY":
            shape = [1] * n
            shape[a] = 2
            phi = phi * xp.asarray(np.array([1.0, -1.0]).reshape(shape))
        if letter in "XY":
            phi = xp.flip(phi, axis=a)
    return complex(xp.vdot(psi, phi))


if __name__ == "__main__":
    main()
