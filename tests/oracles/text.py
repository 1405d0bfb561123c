"""A reader of the package's equation text written for the tests, independent of the
package's parser: the tokens, the tensors and the logical lines (an equation with its
``+``/``-`` continuation lines joined, comments and blank lines dropped)."""
from __future__ import annotations

import re

TOKEN = re.compile(r"[+-]|\d+(?:/\d+)?|\w+\{[^}]*\}|\*|\S")
TENSOR = re.compile(r"(\w+)\{([^;}]*);([^}]*)\}")


def logical_lines(text: str) -> list[str]:
    """Each equation of ``text`` on one line."""
    logical: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s[0] in "+-":
            logical[-1] += " " + s
        else:
            logical.append(s)
    return logical
