"""Peak-memory reports: human units now; text/JSON/plots as the planner grows."""
from __future__ import annotations

from .text import format_bytes

__all__ = ["format_bytes"]
