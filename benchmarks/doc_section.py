"""Write one benchmark's section of ``docs/benchmarks.md``, keeping every other section."""
from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def write_section(heading: str, text: str, doc: Path = DOC) -> None:
    """Replace the section that starts at ``heading`` (a ``## `` line) with ``text``, or
    append ``text`` when there is no such section."""
    old = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    lines = old.splitlines()
    if heading in lines:
        start = lines.index(heading)
        end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## ")),
                   len(lines))
        lines[start:end] = text.rstrip("\n").splitlines() + ([""] if end < len(lines) else [])
    else:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", *text.rstrip("\n").splitlines()]
    doc.write_text("\n".join(lines) + "\n", encoding="utf-8")
