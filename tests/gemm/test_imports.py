"""The import graph of the project's packages: no cycles, and dependencies pointing one way.

The graph is read from the source with ``ast`` (module-level and function-level imports alike),
so an import hidden inside a function still counts as a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gemm", "circuits", "qsim_tc")
# function-local imports allowed in gemm: optional dependencies only (import gemm works without them)
LAZY_OK = ("cupy", "cupy_backends", "matplotlib")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported dotted name refers to (its longest known prefix)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in MODULES:
            return cand
    return None


def _imports(module: str) -> list[tuple[str, bool, int]]:
    """(imported project module, inside a function, line) for every import in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            local = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # "from pkg import sub" names the submodule when there is one
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in child.names]
            for n in names:
                target = _resolve(n)
                if target is not None and target != module:
                    out.append((target, in_function, child.lineno))
            visit(child, local)

    visit(tree, False)
    return out


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m)} for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_graph_is_read():
    graph = _graph()
    assert "gemm.registry" in graph and "gemm.method" in graph["gemm.registry"]
    assert "gemm.tcec.gpu" in graph["gemm.tcec.method"]  # a lazily used module is still an edge


def test_cycle_detection_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package):
    cycles = [c for c in _cycles(_graph()) if any(m.split(".")[0] == package for m in c)]
    assert not cycles, f"import cycles involving {package}: {cycles}"


@pytest.mark.parametrize("package, forbidden", [("gemm", ("qsim_tc", "circuits")), ("circuits", ("qsim_tc", "gemm"))])
def test_dependencies_point_one_way(package, forbidden):
    bad = [(m, t, line) for m in MODULES if m.split(".")[0] == package
           for t, _, line in _imports(m) if t.split(".")[0] in forbidden]
    assert not bad, f"{package} imports {forbidden}: {bad}"


def test_gemm_function_local_imports_are_optional_dependencies():
    bad = []
    for m, path in MODULES.items():
        if m.split(".")[0] != "gemm":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                else:
                    continue
                bad += [(m, node.lineno, n) for n in names if n.split(".")[0] not in LAZY_OK]
    assert not bad, f"function-local imports in gemm that are not optional dependencies: {bad}"


# qsim_tc's layers, lowest first: a module imports modules of its own layer or lower ones only (the
# groups that must not import each other sideways are named in test_groups_stay_apart). The
# longest matching prefix names a module's group. runners.distributed runs a Simulator on each
# rank's slice: it sits above the Simulator, the other runners below it.
LAYERS = (
    ("qsim_tc.errors", "qsim_tc.layout", "qsim_tc.memory", "qsim_tc.progress", "qsim_tc.environment",
     "qsim_tc.transfer", "qsim_tc.cache_folder"),
    ("qsim_tc.plan", "qsim_tc.engine", "qsim_tc.error_bound", "qsim_tc.run_error"),
    ("qsim_tc.stages", "qsim_tc.state", "qsim_tc.observables", "qsim_tc.observables_gpu"),
    ("qsim_tc.runners", "qsim_tc.result", "qsim_tc.reference"),
    ("qsim_tc.calibrate",),
    ("qsim_tc.simulator",),
    ("qsim_tc.accuracy", "qsim_tc.qiskit", "qsim_tc.distributed", "qsim_tc.runners.distributed", "qsim_tc.cli",
     "qsim_tc"),
)
# the stage pipeline in data-path order: each module imports only those before it
STAGE_PIPELINE = ("structure", "plan", "fusion", "relabel", "tc32", "tc32_compiled", "program", "kernel", "gpu",
                  "cpu_kernels", "host_cache", "cpu_fuse_calibration", "cpu", "cpu_warmup", "choice", "cpu_fuse_measure")


def _group(module: str) -> tuple[int, str] | None:
    best = None
    for rank, groups in enumerate(LAYERS):
        for g in groups:
            if (module == g or module.startswith(g + ".")) and (best is None or len(g) > len(best[1])):
                best = (rank, g)
    return best


def test_every_qsim_tc_module_has_a_layer():
    missing = [m for m in MODULES if m.split(".")[0] == "qsim_tc" and _group(m) is None]
    assert not missing, f"modules without a layer in LAYERS: {missing}"


def test_layers_are_read():
    assert _group("qsim_tc.stages.kernel") == (2, "qsim_tc.stages")
    assert _group("qsim_tc.runners.distributed") == (6, "qsim_tc.runners.distributed")
    assert _group("qsim_tc") == (6, "qsim_tc")


def test_qsim_tc_imports_point_down_the_layers():
    bad = []
    for m in MODULES:
        if m.split(".")[0] != "qsim_tc":
            continue
        rank, group = _group(m)
        for t, _, line in _imports(m):
            if t.split(".")[0] != "qsim_tc":
                continue
            if _group(t)[0] > rank:
                bad.append(f"{m}:{line} imports {t} ({group} is in layer {rank}, {_group(t)[1]} in {_group(t)[0]})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_stage_pipeline_imports_point_back():
    assert set(STAGE_PIPELINE) == {m.rpartition(".")[2] for m in MODULES if m.startswith("qsim_tc.stages.")}
    bad = []
    for i, name in enumerate(STAGE_PIPELINE):
        for t, _, line in _imports(f"qsim_tc.stages.{name}"):
            if t.startswith("qsim_tc.stages") and (t == "qsim_tc.stages" or STAGE_PIPELINE.index(t.split(".")[2]) >= i):
                bad.append(f"qsim_tc.stages.{name}:{line} imports {t}")
    assert not bad, "the stage pipeline imports forward:\n" + "\n".join(bad)


@pytest.mark.parametrize("package, forbidden", [
    ("qsim_tc.plan", ("qsim_tc.engine", "qsim_tc.stages", "qsim_tc.state", "qsim_tc.runners")),
    ("qsim_tc.engine", ("qsim_tc.plan", "qsim_tc.stages", "qsim_tc.runners", "qsim_tc.calibrate")),
    ("qsim_tc.stages", ("qsim_tc.state", "qsim_tc.plan", "qsim_tc.runners", "qsim_tc.calibrate")),
    ("qsim_tc.state", ("qsim_tc.stages", "qsim_tc.plan")),
    ("qsim_tc.runners", ("qsim_tc.calibrate", "qsim_tc.simulator", "qsim_tc.result")),
])
def test_groups_stay_apart(package, forbidden):
    bad = [(m, t, line) for m in MODULES if m == package or m.startswith(package + ".")
           for t, _, line in _imports(m) if any(t == f or t.startswith(f + ".") for f in forbidden)]
    assert not bad, f"{package} imports {forbidden}: {bad}"
