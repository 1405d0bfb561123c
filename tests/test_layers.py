"""The package's import graph, read from the modules' own ``import`` statements (every one,
function-level included): no module imports a higher stage, and no two modules import
each other, directly or round a circle.

The order, bottom to top: ``expr`` < ``forest`` < ``plan`` < ``schedule`` < ``runtime``
(the CPU core) < ``runtime.gpu`` and ``runtime.cluster`` (side by side: neither imports the
other) < ``report`` < ``api`` (the ``Evaluator``, its stage-by-stage form ``api.staged``, and
the package's ``__init__``) < ``chem`` < ``cli``.
Bottom helpers (``errors``, ``units``, ``budget``, ``checkout``, ``memo``) may be imported from
anywhere and import only each other.

And at run time: the CPU path (a batched NumPy evaluation, a dry run, an analysis) loads
no module of the GPU layer or the Dask layer (a fresh process's ``sys.modules``).
"""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import sequant_eval

PACKAGE = Path(sequant_eval.__file__).resolve().parent
ORDER = [{"expr"}, {"forest"}, {"plan"}, {"schedule"}, {"runtime"},
         {"runtime.gpu", "runtime.cluster"}, {"report"}, {"api"}, {"chem"},
         {"cli"}]
PARTS = set().union(*ORDER)
BOTTOM = {"errors", "units", "budget", "checkout", "memo"}

# Circles accepted for now (none): an entry here must name a circle that still exists (the
# last test below says so).
KNOWN_CIRCLES: list[frozenset[str]] = []


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules) -> set[str]:
    """The package modules ``name`` imports (a name imported from a package that is itself
    a module counts as that module)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:           # ``import sequant_eval.x.y`` → the module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _part(module: str) -> str:
    """The part of the order a module belongs to: its longest dotted prefix (below the
    package) that names one (``runtime.gpu.placed`` → ``runtime.gpu``)."""
    parts = module.split(".")[1:]
    if not parts:                        # the package's __init__: the API's face
        return "api"
    if parts[0] in BOTTOM:
        return "bottom"
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in PARTS:
            return ".".join(parts[:k])
    raise ValueError(f"{module} is in no part of the order")


def _layer(module: str) -> int:
    part = _part(module)
    return -1 if part == "bottom" else next(k for k, ps in enumerate(ORDER) if part in ps)


def test_every_module_has_a_layer():
    for module in _graph():
        _layer(module)                   # raises ValueError for a module outside the order


def test_no_import_runs_upward():
    """Oracle: the stage order in this module's docstring (the design's pipeline)."""
    upward = [f"{a} -> {b}" for a, deps in _graph().items() for b in sorted(deps)
              if _layer(b) > _layer(a) or (_layer(a) == -1 and _layer(b) != -1)]
    assert not upward, "imports running up the stage order:\n" + "\n".join(upward)


def test_side_by_side_parts_import_neither_each_other():
    """The GPU layer and the Dask layer each stand on the CPU core alone."""
    across = [f"{a} -> {b}" for a, deps in _graph().items() for b in sorted(deps)
              if _layer(a) == _layer(b) and _part(a) != _part(b)]
    assert not across, "imports between side-by-side parts:\n" + "\n".join(across)


CPU_PATH = textwrap.dedent("""
    import sys
    import numpy as np
    import sequant_eval as se

    eqs = se.parse(
        "R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2} + 1/2 g{a_1,a_2;a_3,a_4} * t2{a_3,a_4;i_1,i_2}"
        " + P{a_1,a_2} * f{a_1;a_3} * t2{a_3,a_2;i_1,i_2}")
    extents = {"i": 3, "a": 8}
    rng = np.random.default_rng(0)
    n = sum(extents.values())
    tensors = {"f": rng.random((n, n)), "g": rng.random((n, n, n, n)),
               "t2": {("a", "a", "i", "i"): rng.random((8, 8, 3, 3))}}
    ev = se.Evaluator(eqs, extents, budget="40%")
    out, meter = ev.evaluate(tensors, return_meter=True)
    assert ev.batched.sched.loops, "the budget should batch"
    assert np.allclose(out["R2"], se.evaluate(eqs, tensors, extents)["R2"], rtol=1e-12)
    ev.batched.run("dryrun")
    se.analyze(eqs, extents, budget="40%")
    layers = ("sequant_eval.runtime.gpu", "sequant_eval.runtime.cluster")
    print(sorted(m for m in sys.modules
                 if m.startswith(layers) or m.split(".")[0] in ("cupy", "dask", "distributed")))
""")


def test_the_cpu_path_loads_neither_the_gpu_nor_the_dask_layer():
    """A batched NumPy evaluation, the same evaluation unbatched, a dry run and an analysis in
    a fresh process leave no module of ``runtime.gpu`` or ``runtime.cluster`` (nor CuPy,
    Dask) in ``sys.modules``: the CPU path neither imports nor calls them."""
    run = subprocess.run([sys.executable, "-c", CPU_PATH], capture_output=True, text=True,
                         cwd=PACKAGE.parent, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout


def test_the_layer_check_sees_a_gpu_run_load_the_gpu_layer():
    """Control for the test above: asking for backend='auto' (the GPU layer decides whether
    there is a GPU) loads ``runtime.gpu``, so an empty list above is not a blind check."""
    code = CPU_PATH.replace("ev.evaluate(tensors, return_meter=True)",
                            "ev.evaluate(tensors, backend='auto', return_meter=True)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "sequant_eval.runtime.gpu" in run.stdout, run.stdout


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    circles = [c for c in _circles(_graph()) if c not in KNOWN_CIRCLES]
    assert not circles, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in circles)


def test_known_circles_are_still_there():
    """A known circle that is gone must leave KNOWN_CIRCLES (so it cannot come back)."""
    found = _circles(_graph())
    assert all(c in found for c in KNOWN_CIRCLES), "remove the untied circle from KNOWN_CIRCLES"


def test_the_reader_sees_imports_as_they_are():
    """Self-check on two known edges, so an empty graph cannot pass the tests above."""
    g = _graph()
    assert "sequant_eval.schedule.ordered" in g["sequant_eval.schedule.boulevard"]
    assert "sequant_eval.units" in g["sequant_eval.plan.planner"]
    assert "sequant_eval.runtime.graph" in g["sequant_eval.runtime.gpu.placement"]
    assert _part("sequant_eval.runtime.cluster.run") == "runtime.cluster"
    assert _part("sequant_eval.runtime.engine") == "runtime"
