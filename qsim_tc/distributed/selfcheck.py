"""``mpiexec -n R python -m qsim_tc.distributed.selfcheck``: random circuits run distributed
against the single-process result on every rank; exits 0 when all agree to ``--atol``, else 1.
Any exception aborts every rank (no rank is left waiting in a collective)."""

from __future__ import annotations

import argparse

import numpy as np


def random_circuit(n: int, n_gates: int, seed: int):
    """Gates of every structure on random qubits: dense 1-3 qubit, controlled (controls anywhere),
    diagonal, SWAP (a relabelling) and permutations."""
    from circuits import Circuit, Gate, haar_unitary  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    c = Circuit(n)
    x = np.array([[0, 1], [1, 0]], dtype=complex)
    for _ in range(n_gates):
        kind = rng.integers(6)
        if kind == 0:
            d = int(rng.integers(1, min(3, n) + 1))
            c.append(Gate(haar_unitary(1 << d, rng), tuple(int(q) for q in rng.choice(n, d, replace=False)), "u"))
        elif kind == 1 and n >= 2:  # controlled-U, 1 or 2 controls
            k = int(rng.integers(1, min(2, n - 1) + 1))
            qs = tuple(int(q) for q in rng.choice(n, k + 1, replace=False))
            m = np.eye(1 << (k + 1), dtype=complex)
            u = haar_unitary(2, rng)
            ones = (1 << k) - 1
            m[np.ix_([ones, ones | 1 << k], [ones, ones | 1 << k])] = u
            c.append(Gate(m, qs, "cu"))
        elif kind == 2:
            d = int(rng.integers(1, min(3, n) + 1))
            c.append(Gate(np.diag(np.exp(2j * np.pi * rng.random(1 << d))),
                          tuple(int(q) for q in rng.choice(n, d, replace=False)), "diag"))
        elif kind == 3 and n >= 2:
            swap = np.eye(4, dtype=complex)[[0, 2, 1, 3]]
            c.append(Gate(swap, tuple(int(q) for q in rng.choice(n, 2, replace=False)), "swap"))
        elif kind == 4 and n >= 2:
            cx = np.eye(4, dtype=complex)
            cx[np.ix_([1, 3], [1, 3])] = x
            c.append(Gate(cx, tuple(int(q) for q in rng.choice(n, 2, replace=False)), "cx"))
        else:
            c.append(Gate(haar_unitary(2, rng), (int(rng.integers(n)),), "u1"))
    c.global_phase = float(rng.uniform(0, 6))
    return c


def main(argv=None) -> int:
    from mpi4py import MPI  # noqa: PLC0415 - the mpi extra

    from qsim_tc.distributed import abort_on_error  # noqa: PLC0415

    comm = MPI.COMM_WORLD
    with abort_on_error(comm):  # one failing rank ends all of them, never a hang
        return _check(comm, argv)


def _check(comm, argv) -> int:
    from qsim_tc import Simulator  # noqa: PLC0415
    from qsim_tc.distributed import run_distributed  # noqa: PLC0415

    p = argparse.ArgumentParser(prog="python -m qsim_tc.distributed.selfcheck")
    p.add_argument("--qubits", default="6,9", help="comma list of N")
    p.add_argument("--gates", type=int, default=60)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--atol", type=float, default=1e-13)
    p.add_argument("--piece-bytes", type=int, default=None, help="the largest swap message (small: many pieces)")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--gate-by-gate", action="store_true",
                   help="each rank runs its stages gate by gate (plan=None), which leaves slices permuted")
    p.add_argument("--read-chunk", type=int, default=None,
                   help="amplitudes per readout step (small: readouts and expectations in many chunks)")
    p.add_argument("--fail-on-rank", type=int, default=None, help="raise on this rank (tests the abort)")
    args = p.parse_args(argv)
    if args.read_chunk:
        from qsim_tc.distributed import state  # noqa: PLC0415

        state.READ_CHUNK = args.read_chunk
    if args.fail_on_rank == comm.Get_rank():
        raise RuntimeError(f"planted failure on rank {comm.Get_rank()}")
    worst = 0.0
    for n in (int(x) for x in args.qubits.split(",")):
        for seed in range(args.seeds):
            c = random_circuit(n, args.gates, seed)
            st = run_distributed(c, comm, backend="native", device=args.device, piece_bytes=args.piece_bytes,
                                 **({"plan": None} if args.gate_by_gate else {}))
            ref_state = Simulator("native", device="cpu", plan=None, fuse=None).run(c).state
            ref = ref_state.to_numpy()
            full = st.gather(root=0)
            err = float(np.abs(full - ref).max()) if comm.Get_rank() == 0 else 0.0
            if comm.Get_rank() == 0:  # the run's error bound (summed over the ranks) holds against double-double
                from qsim_tc.reference import simulate_dd  # noqa: PLC0415

                hi, lo = simulate_dd(c, device="cpu").to_numpy()
                dd_err = float(np.linalg.norm((full - hi) - lo))
                if st.error is None or st.error.l2_bound is None or not dd_err <= st.error.l2_bound:
                    raise AssertionError(f"error {dd_err:.3g} against double-double exceeds the run's bound "
                                         f"{None if st.error is None else st.error.l2_bound}")
            # readouts that never gather the state
            i = int(np.argmax(np.abs(ref)))
            err = max(err, abs(st.amplitude(i) - ref[i]))
            qs = [0, n - 1] if n > 1 else [0]
            marg = np.bincount(sum(((np.arange(1 << n) >> q) & 1) << k for k, q in enumerate(qs)),
                               weights=np.abs(ref) ** 2, minlength=1 << len(qs))
            err = max(err, float(np.abs(st.probabilities(qs) - marg).max()), abs(st.norm() - 1.0))
            # Pauli expectations: random strings, and X/Y on the top (global) qubits
            rng = np.random.default_rng(seed + 100)
            labels = ["".join(rng.choice(list("IXYZ"), n)) for _ in range(3)]
            labels.append("Y" + "X" * min(1, n - 1) + "Z" * max(n - 2, 0))
            for label in labels:
                err = max(err, abs(st.expectation_value(label) - ref_state.expectation_value(label)))
            # sampling: the same marginal within 5 standard deviations
            shots = 4000
            draws = st.sample(shots, seed=seed)
            assert draws.shape == (shots,) and draws.min() >= 0 and draws.max() < (1 << n), "samples out of range"
            idx = sum(((draws >> q) & 1) << k for k, q in enumerate(qs))
            freq = np.bincount(idx, minlength=marg.size) / shots
            if np.any(np.abs(freq - marg) > 5 * np.sqrt(marg * (1 - marg) / shots) + 1e-3):
                raise AssertionError(f"sampled marginal {freq} is not {marg}")
            # bytes as theory: an exchange of k bits sends (1 - 2^-k) of the slice, from every rank
            slice_bytes = st.data.nbytes
            theory = sum(slice_bytes - (slice_bytes >> k) for k in st.exchange_bits)
            if st.bytes_sent != theory:
                raise AssertionError(f"rank {comm.Get_rank()} sent {st.bytes_sent} bytes in exchanges of "
                                     f"{st.exchange_bits} bits; theory {theory}")
            worst = max(worst, comm.allreduce(err, op=_max()))
            swaps = comm.allreduce(st.swaps, op=_max())
            if comm.Get_rank() == 0:
                print(f"n={n} seed={seed} ranks={comm.Get_size()}: max error {worst:.2e} (error bound "
                      f"{st.error.l2_bound:.2e}), {st.exchanges} exchanges, {swaps} swaps, "
                      f"{st.bytes_sent} bytes sent by rank 0", flush=True)
    ok = worst <= args.atol
    if comm.Get_rank() == 0:
        print("OK" if ok else f"FAILED: {worst:.2e} > {args.atol:.1e}", flush=True)
    return 0 if ok else 1


def _max():
    from mpi4py import MPI  # noqa: PLC0415

    return MPI.MAX


if __name__ == "__main__":
    raise SystemExit(main())
