"""A CI-sized fuzz of circuits.from_qasm: 200 mutated OpenQASM 2/3 programs (tests/fuzz/qasm_mutate.py).

Every mutant must import or raise CircuitError / FileNotFoundError / ImportError, never quote
the file outside the program's folder, and finish in seconds. The full run of 2,000+ mutants
with time and memory watches is benchmarks/bench/fuzz_qasm.py.
"""

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("qiskit")
if importlib.util.find_spec("qiskit_qasm3_import") is None:
    pytest.skip("needs qiskit-qasm3-import for the OpenQASM 3 half", allow_module_level=True)

# loaded by path: tests/ is not a package, and the generator is shared with the benchmark
_SPEC = importlib.util.spec_from_file_location("qasm_mutate", Path(__file__).resolve().parents[1] / "fuzz" /
                                               "qasm_mutate.py")
qasm_mutate = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = qasm_mutate  # dataclasses look their module up while the class is made
_SPEC.loader.exec_module(qasm_mutate)
mutants, prepare, run_case = qasm_mutate.mutants, qasm_mutate.prepare, qasm_mutate.run_case


def test_200_mutants_raise_only_circuit_errors(tmp_path):
    prepare(tmp_path)
    bad, slow = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in mutants(200, seed=7):
            r = run_case(m, tmp_path)
            if not r["allowed"] or r["leak"]:
                bad.append((m.index, m.mutations, r["outcome"], r["message"][:120]))
            if r["seconds"] > 5:
                slow.append((m.index, m.mutations, round(r["seconds"], 1)))
    assert not bad, bad
    assert not slow, slow
