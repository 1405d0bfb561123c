"""Peak-memory reports: text in human units (``text``), the report itself (``memory``:
text and JSON) and a plot of live bytes over the schedule (``plot``).

The report sits above the schedule stage (``memory`` reads its analysis) and below the
API; the units themselves are ``sequant_eval.units``, re-exported here.
"""
from __future__ import annotations

from ..units import format_bytes, format_flops

__all__ = ["format_bytes", "format_flops"]
