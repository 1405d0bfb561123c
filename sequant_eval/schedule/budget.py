"""The forest-level budget: the whole schedule's peak, not each term's, stays within it.

Terms are planned one by one, but the forest holds more than one term at a time: the
equation sums, intermediates shared between terms, a term's result waiting to be added.
After scheduling, the binding point of the sweep names the term being evaluated there and
the *background* live around it; that term is re-planned under the budget minus its
background, and the forest is scheduled again, until the swept peak fits. Unsliced input
blocks are fetched per term (not held from one term to the next), which keeps the
background small. If no re-planning fits, the smallest budget the planner can meet is
found by bisection and named in InfeasibleBudget.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..errors import InfeasibleBudget
from ..forest.values import Forest
from ..plan.planner import BatchPlan, TermPlanner
from ..plan.policy import BatchPolicy
from ..report.text import format_bytes
from .analysis import ScheduleAnalysis, analyze_schedule, term_peak

__all__ = ["fit_forest"]

_ROUNDS = 40


def _attempt(forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
             planner: TermPlanner) -> tuple[ScheduleAnalysis | None, int]:
    """Try to fit; returns (analysis or None, the best swept peak seen)."""
    budget = policy.budget_bytes
    budgets = {v: budget for v in forest.trees}
    best = None
    for _ in range(_ROUNDS):
        try:
            plan = replace(planner.plan(budgets), share_leaves=False)
        except InfeasibleBudget:
            return None, best if best is not None else budget
        a = analyze_schedule(forest, plan)
        if best is None or a.peak_bytes < best:
            best = a.peak_bytes
        if a.peak_bytes <= budget:
            return a, a.peak_bytes
        b = a.profile.binding_point
        term = _active_term(a, b)
        if term is None:
            return None, best
        own = sum(c.footprint for c in a.cells if c.first <= b <= c.last
                  and a.rich.forms[c.form].term == term)
        target = min(budget - (a.peak_bytes - own), budgets[term] - 1)
        if target < planner.min_peak.get(term, 0) or target <= 0:
            return None, best
        budgets[term] = target
    return None, best


def _active_term(a: ScheduleAnalysis, point: int) -> int | None:
    for k in range(point, -1, -1):
        p = a.points[k]
        if p.form >= 0 and a.rich.forms[p.form].term >= 0:
            return a.rich.forms[p.form].term
    return None


def fit_forest(forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
               progress=None) -> ScheduleAnalysis:
    """Plan and schedule so the forest's swept peak is within the policy's budget.

    ``progress(what, done, total)`` is called as planning proceeds (for a progress bar)."""
    exact = term_peak(forest, BatchPlan(policy, extents, (), ()))
    planner = TermPlanner(forest, extents, policy, exact, progress)
    if not policy.finite:
        return analyze_schedule(forest, planner.plan())
    found, _ = _attempt(forest, extents, policy, planner)
    if found is not None:
        return found
    lo, hi, best = policy.budget_bytes, None, None
    probe = policy.budget_bytes
    for _ in range(14):            # find a budget that fits, then bisect down to 1 %
        probe = probe * 2 if hi is None else (lo + hi) / 2
        p = replace(policy, budget=probe)
        if progress is not None:
            progress("searching the minimum", _, 14)
        ok, _ = _attempt(forest, extents, p, TermPlanner(forest, extents, p, exact))
        if ok is None:
            lo = probe
        else:
            hi, best = probe, ok
        if hi is not None and hi - lo <= 0.01 * hi:
            break
    budget = policy.budget_bytes
    if best is None:
        raise InfeasibleBudget(
            f"budget {format_bytes(budget)} ({budget:.0f} B) cannot be met: no plan fits even "
            f"{format_bytes(probe)}", budget, float("inf"))
    need = int(hi) + 1
    term = _active_term(best, best.profile.binding_point)
    where = forest.trees[term].where if term is not None else "the equation sums"
    raise InfeasibleBudget(
        f"budget {format_bytes(budget)} ({budget:.0f} B) is below the smallest forest peak the "
        f"planner can meet, {format_bytes(need)} ({need} B); there the peak is reached while "
        f"evaluating {where}", budget, need)
