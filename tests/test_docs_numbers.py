"""The figures the docs print are the package's: each printed report is produced again by
the command the page shows, and compared line by line (a page that drifts fails here)."""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

from sequant_eval import cli

ROOT = Path(__file__).resolve().parents[1]


def _blocks(page: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w*)\n(.*?)```", page, re.S)


def test_the_memory_report_page_shows_what_the_command_prints(monkeypatch):
    """docs/memory-report.md: its first command (without the --json/--plot outputs) run
    through the CLI prints the report the page shows (the page elides the rest of the
    live forms with '...')."""
    page = (ROOT / "docs" / "memory-report.md").read_text(encoding="utf-8")
    blocks = _blocks(page)
    command = next(body for lang, body in blocks if lang == "bash")
    shown = next(body for lang, body in blocks if body.startswith("memory report:"))
    args = shlex.split(command.replace("\\\n", " "))
    assert args[:2] == ["sequant-eval", "report"]
    args = args[1:]
    for flag in ("--json", "--plot"):
        if flag in args:
            k = args.index(flag)
            del args[k:k + 2]
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(args) in (0, None)
    printed = out.getvalue().splitlines()
    want = shown.rstrip("\n").splitlines()
    if want[-1].strip() == "...":
        want = want[:-1]
    assert printed[:len(want)] == want
