"""The source checkout, for development commands (``sequant-eval snapshots``).

Development tools live in the checkout's ``tools/`` folder, beside the data they read
(``schedules/``, ``data/water20/``), not in the library: an installed wheel carries none of
them. The checkout is the one this package was installed from in editable mode, or else
the current directory; outside a checkout a development command says so.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .errors import UsageError

__all__ = ["source_root", "load_tool"]


def _is_checkout(root: Path) -> bool:
    return ((root / "pyproject.toml").is_file() and (root / "schedules").is_dir()
            and (root / "data" / "water20").is_dir() and (root / "tools").is_dir())


def source_root() -> Path:
    """The source checkout holding ``tools/``, ``schedules/`` and ``data/water20/``."""
    for root in (Path(__file__).resolve().parents[1], Path.cwd().resolve()):
        if _is_checkout(root):
            return root
    raise UsageError("snapshots is a development command: it needs a source checkout of "
                     "sequant-eval (tools/, schedules/ and data/water20/), which an "
                     "installed wheel does not carry; run it from the repository root, or "
                     "install the checkout editable (pip install -e .)")


def load_tool(name: str) -> ModuleType:
    """The module ``tools/<name>.py`` of the source checkout (loaded once)."""
    path = source_root() / "tools" / f"{name}.py"
    key = f"_sequant_eval_tools.{name}:{path}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(f"_sequant_eval_tools_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]
