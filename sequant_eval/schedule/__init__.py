"""Schedules: loop identity, roles, the ordered block tree, and its static peak."""
from __future__ import annotations

from .analysis import ScheduleAnalysis, analyze_schedule
from .boulevard import compute_dag_boulevard
from .rich import RichSchedule
from .forms import Form, FormKind
from .ordered import (BuildStep, OrderedSchedule, Output, OutputKind, ScopeBlock,
                      build_ordered_schedule, walk_blocks, well_formed)
from .peak import Liveness, PeakProfile, peak_profile_replay, peak_profile_sweep

__all__ = ["RichSchedule", "compute_dag_boulevard", "Form", "FormKind", "BuildStep", "Output",
           "OutputKind", "ScopeBlock", "OrderedSchedule", "build_ordered_schedule",
           "well_formed", "walk_blocks", "Liveness", "PeakProfile", "peak_profile_sweep",
           "peak_profile_replay", "ScheduleAnalysis", "analyze_schedule"]
