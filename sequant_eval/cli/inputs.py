"""What the command line reads, checked before any work: equation files, regime files,
output paths, budgets and batch policies, ``SPACE=N`` and ``--frozen`` lists. Every mistake
is a ``UsageError`` (or the API's own typed error) whose message names the flag or file."""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import ParseError, UsageError


def _read_text(path: str) -> str:
    """A FILE argument as text; a missing, directory or non-UTF-8 file is a UsageError."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file")
    if p.is_dir():
        raise UsageError(f"{path}: is a directory; give the equation files in it "
                         f"(e.g. {Path(path) / '*.txt'})")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise UsageError(f"{path}: cannot read it ({err.strerror or err})") from err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
                         f"{err.start}); save the file as UTF-8") from err


def _read_equations(files: Sequence[str]) -> list:
    """Parse every file (bare expressions named after the file); errors name the file."""
    from ..expr import check_unique_results, parse

    eqs, origins = [], []
    for path in files:
        text = _read_text(path)
        try:
            parsed = parse(text, default_name=Path(path).stem)
        except ParseError as err:
            raise UsageError(f"{path}: {str(err).splitlines()[0]}") from err
        eqs += parsed
        origins += [path] * len(parsed)
    check_unique_results(eqs, origins)
    return eqs


def _regime(path: str):
    """A size regime JSON file, checked: an object with ``extents`` of positive integers."""
    from ..plan.regime import Regime

    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column "
                         f"{err.colno})") from err
    if not isinstance(data, dict) or not isinstance(data.get("extents"), dict):
        raise UsageError(f"{path}: a regime is a JSON object with \"extents\": "
                         f"{{\"i\": 80, \"a\": 896, ...}} (see data/water20/regime.json)")
    extents = {}
    for space, n in data["extents"].items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UsageError(f"{path}: extent of space {space!r} must be a positive integer, "
                             f"got {n!r}")
        extents[space] = n
    means = data.get("power_means", {})
    try:
        moments = {int(k): tuple(float(x) for x in v) for k, v in means.items()}
    except (AttributeError, TypeError, ValueError) as err:
        raise UsageError(f"{path}: \"power_means\" maps a proto count to a list of numbers, "
                         f"e.g. {{\"2\": [1.0, 23.2, 25.9]}}") from err
    name = data.get("name", Path(path).stem)
    return Regime(extents, moments, name if isinstance(name, str) else Path(path).stem)


def _output(path: str | None, flag: str) -> None:
    """Refuse, before any work, an output path whose folder does not exist."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    if not p.parent.is_dir():
        raise UsageError(f"{flag} {path}: folder {p.parent} does not exist; create it first")


def _write(path: str, flag: str, text: str) -> None:
    """Write an output file; a failure (disk full, read-only folder) is a StorageError."""
    from ..chem.files import storage_error

    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise storage_error(f"{flag}", path, err) from err


def _flag_budget(text: str | None, flag: str = "--budget"):
    """A budget flag read once (:class:`~sequant_eval.budget.Budget`); a bad one is the
    same BudgetError the API raises, its message led by the flag."""
    from ..budget import Budget
    from ..errors import BudgetError

    try:
        return Budget.parse(text)
    except BudgetError as err:
        raise BudgetError(f"{flag}: {err}", err.value) from None


def _budget(text: str | None, eqs, extents, program: bool = True):
    """``--budget``: bytes, or a share such as 25% of the unbatched peak of these equations
    (plus the program's reserve unless ``program`` is off, as ``Evaluator`` reads it)."""
    from ..api import Evaluator

    budget = _flag_budget(text)
    if budget.unlimited:
        return None
    if budget.share is not None:
        ev = Evaluator(eqs, extents)
        return budget.bytes_for(ev.analyze().peak_bytes, ev.program_reserve() if program else 0)
    return budget.fixed


def _policy(args: argparse.Namespace, eqs, extents):
    """The batch policy of ``--budget --contracted --external --block`` (None: unbatched)."""
    from ..plan import BatchPolicy

    contracted, external = _spaces(args.contracted), _spaces(args.external)
    block = _assignments(_spaces(args.block), "--block")
    if args.budget is None and not (contracted or external or block):
        return None
    known = getattr(extents, "extents", extents)
    if not contracted and not external:
        contracted = external = tuple(s for s in known if "<" not in s)
    program = not getattr(args, "arrays_only", False)
    policy = BatchPolicy(budget=None, contracted=contracted, external=external, block=block,
                         program=program)
    policy.check(extents)
    return replace(policy, budget=_budget(args.budget, eqs, extents, program))


def _assignments(items: Sequence[str], flag: str) -> dict[str, int]:
    """``["i=10", "a=38"]`` → ``{"i": 10, "a": 38}``; anything else names the flag."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        value = value.strip()
        if not sep or not name.strip() or not (value.isascii() and value.isdigit()) or (
                int(value) < 1):
            raise UsageError(f"{flag} expects SPACE=N with N a positive integer, got {item!r}")
        name = name.strip()
        if name in out and out[name] != int(value):
            raise UsageError(f"{flag} gives space {name!r} twice ({name}={out[name]} and "
                             f"{item.strip()}); give each space once")
        out[name] = int(value)
    return out


def _frozen(text: str):
    """``--frozen N`` (the N lowest orbitals) or ``--frozen 0,1,5`` (those orbitals)."""
    items = [x.strip() for x in text.split(",")]
    if not all(x.isascii() and x.isdigit() for x in items):
        raise UsageError(f"--frozen expects N or a list of orbital indices such as 0,1; got "
                         f"{text!r}")
    return int(items[0]) if len(items) == 1 and "," not in text else [int(x) for x in items]


def _spaces(text: str | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip()) if text else ()
