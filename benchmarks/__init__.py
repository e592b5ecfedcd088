"""Benchmarks of qsim-tc, run as modules from the repository root with the project importable
(installed, or on PYTHONPATH):

    python -m benchmarks.bench.apply --device gpu --qubits 28 --custatevec --json out.json

``bench/`` measures speed and accuracy against the native method and peers, ``tune/`` searches
kernel and model parameters, ``profile/`` runs one case under a profiler. Results go to
``results/`` as JSON holding the command, the machine, the library versions and the commit
(:func:`benchmarks.common.write_results`).
"""
