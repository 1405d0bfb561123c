"""The hostile-input case list (``tests/hostile_cases.md``) names tests that exist: every
``file.py::name`` (and ``::name`` after it on one line) is a test function of that file,
every file named is there (oracle: the test files' own ``def test_`` lines, read with
``ast``)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CASES = TESTS / "hostile_cases.md"


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _references():
    for line in CASES.read_text(encoding="utf-8").splitlines():
        current = None
        for ref in re.findall(r"`([\w/]*\.py)?(::\w+)?(?:\[[^\]]*\])?`", line):
            path, name = ref
            current = path or current
            if current:
                yield current, name[2:] if name else None


def test_every_case_names_a_test_that_exists():
    refs = list(_references())
    assert len(refs) >= 30
    missing = []
    for path, name in refs:
        file = TESTS / path
        if not file.is_file():
            missing.append(path)
        elif name is not None and name not in _functions(file):
            missing.append(f"{path}::{name}")
    assert not missing, missing
