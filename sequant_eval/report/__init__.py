"""Peak-memory reports: text in human units (``text``), the report itself (``memory``:
text and JSON) and a plot of live bytes over the schedule (``plot``).

Only the unit formatting is imported here: the planner uses it, and ``memory`` depends on
the schedule stage, which depends on the planner.
"""
from __future__ import annotations

from .text import format_bytes, format_flops

__all__ = ["format_bytes", "format_flops"]
