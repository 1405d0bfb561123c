"""Human-readable units, as the reports print them (defined in ``sequant_eval.units``, the
bottom layer, so that planning and scheduling can name budgets without importing reports)."""
from __future__ import annotations

from ..units import format_bytes, format_flops

__all__ = ["format_bytes", "format_flops"]
