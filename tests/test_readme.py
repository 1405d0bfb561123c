"""The README's ten-line example runs as printed, and its batched result is the same."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np


def test_readme_example_runs():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## Ten lines\n\n```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    out, small = scope["out"], scope["small"]
    assert set(out) == {"R2", "E"} and out["R2"].shape == (38, 38, 10, 10)
    for name in out:
        assert np.allclose(small[name], out[name], rtol=1e-12, atol=1e-9)
