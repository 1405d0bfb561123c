"""The chemistry front end stays small-grained: no function in ``sequant_eval/chem/`` over
60 lines, none with more than 8 parameters (read from the source with ``ast``; the oracle
is the limit as written, issue 19)."""
from __future__ import annotations

import ast
from pathlib import Path

import sequant_eval.chem

CHEM = Path(sequant_eval.chem.__file__).resolve().parent
MAX_LINES, MAX_PARAMETERS = 60, 8


def _functions():
    for path in sorted(CHEM.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(CHEM.parent), node


def _parameters(node) -> int:
    a = node.args
    return (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None)
            + (a.kwarg is not None))


def test_no_function_over_60_lines():
    long = [f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, node in _functions() if node.end_lineno - node.lineno + 1 > MAX_LINES]
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_no_function_with_more_than_8_parameters():
    wide = [f"{path}:{node.lineno} {node.name} ({_parameters(node)} parameters)"
            for path, node in _functions() if _parameters(node) > MAX_PARAMETERS]
    assert not wide, "functions with more than 8 parameters:\n" + "\n".join(wide)


def test_the_reader_sees_the_functions():
    """Self-check: the walk finds the front end's known functions."""
    names = {node.name for _, node in _functions()}
    assert {"kernel", "run", "solve_cc", "CCSD"} <= names
