"""The package's import graph, read from the modules' own ``import`` statements (every one,
function-level included): no module imports a higher stage, and no two modules import
each other, directly or round a circle.

The order, bottom to top: ``expr`` < ``forest`` < ``plan`` < ``schedule`` < ``runtime`` <
``report`` < ``staged`` (equations read in stages; its per-stage evaluator is handed in) <
``api`` (with the package's ``__init__``) < ``chem`` < ``cli``.
Bottom helpers (``errors``, ``units``, ``budget``, ``checkout``) may be imported from
anywhere and import only each other.
"""
from __future__ import annotations

import ast
from pathlib import Path

import sequant_eval

PACKAGE = Path(sequant_eval.__file__).resolve().parent
ORDER = ["expr", "forest", "plan", "schedule", "runtime", "report", "staged", "api", "chem",
         "cli"]
BOTTOM = {"errors", "units", "budget", "checkout"}

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


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:                  # the package's __init__: the API's face
        return ORDER.index("api")
    if parts[1] in BOTTOM:
        return -1
    return ORDER.index(parts[1])


def test_every_module_has_a_layer():
    for module in _graph():
        _layer(module)                   # raises ValueError for a module outside the order


def test_no_import_runs_upward():
    """Oracle: the stage order in this module's docstring (the design's pipeline)."""
    upward = [f"{a} -> {b}" for a, deps in _graph().items() for b in sorted(deps)
              if _layer(b) > _layer(a) or (_layer(a) == -1 and _layer(b) != -1)]
    assert not upward, "imports running up the stage order:\n" + "\n".join(upward)


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
