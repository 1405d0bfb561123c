"""Batch planning: the policy, explicit loops, and the per-term batched DP."""
from __future__ import annotations

from .dp import TermDP
from .loops import Loop, LoopKind, Open
from .planner import BatchPlan, TermPlan, plan_forest, stamp_plan
from .policy import DEFAULT_BATCHES, BatchPolicy, parse_bytes
from .profile import Profile
from .sizes import Sizer

__all__ = ["BatchPolicy", "parse_bytes", "DEFAULT_BATCHES", "Loop", "LoopKind", "Open",
           "Profile", "Sizer", "TermDP", "TermPlan", "BatchPlan", "plan_forest",
           "stamp_plan"]
