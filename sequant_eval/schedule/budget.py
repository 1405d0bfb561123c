"""The forest-level budget: the whole schedule's peak, not each term's, stays within it.

Terms are planned one by one, but the forest holds more than one term at a time: the
equation sums, intermediates shared between terms, a term's result waiting to be added.
After scheduling, the binding point of the sweep names the term being evaluated there and
the *background* live around it; that term is re-planned under the budget minus its
background, and the forest is scheduled again, until the swept peak fits. Unsliced input
blocks are fetched per term (not held from one term to the next), which keeps the
background small. If no re-planning fits, the smallest budget the planner can meet is
searched by bisection on a fixed geometric grid between a lower bound (the equation
results, whole) and the unbatched peak, independently of the budget asked for, and named
in InfeasibleBudget; any budget at or above it fits.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from ..errors import InfeasibleBudget
from ..forest.values import Forest
from ..plan.planner import BatchPlan, TermPlanner
from ..plan.policy import BatchPolicy
from ..units import format_budget, format_bytes
from .analysis import ScheduleAnalysis, analyze_schedule, term_peak

__all__ = ["fit_forest", "minimum_budget", "lower_bound"]

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
                  and a.rich.forms[c.form].term == term) + a.transient().get(b, 0)
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


def lower_bound(forest: Forest, extents, policy: BatchPolicy) -> int:
    """Bytes no plan can go below: every equation result is whole and alive at the end."""
    from .analysis import value_shapes
    from ..plan.regime import footprint_bytes

    shapes = value_shapes(forest, extents)
    return sum(footprint_bytes(shapes[r.value], policy.itemsize) for r in forest.roots)


#: Relative width of the budget grid the minimum is searched on.
GRID = 0.02

_MINIMA: dict[tuple, tuple[int, ScheduleAnalysis]] = {}


def _key(forest: Forest, extents, policy: BatchPolicy) -> tuple:
    regime = tuple(sorted(getattr(extents, "extents", extents).items()))
    moments = tuple(sorted(getattr(extents, "moments", {}).items()))
    return (id(forest), forest.roots, regime, moments,
            repr(replace(policy, budget=None)))


def minimum_budget(forest: Forest, extents, policy: BatchPolicy,
                   progress=None) -> tuple[int, ScheduleAnalysis]:
    """The smallest budget the fitter meets, on a geometric grid of ``GRID`` relative width
    between the lower bound and the unbatched peak, and the fitted schedule there.

    It depends on the policy's spaces and blocks, never on its budget, and is remembered
    per forest and policy (a second refusal is instant)."""
    key = _key(forest, extents, policy)
    hit = _MINIMA.get(key)
    if hit is not None and hit[1].forest is forest:
        return hit
    exact = term_peak(forest, BatchPlan(policy, extents, (), ()))
    top = analyze_schedule(forest, replace(TermPlanner(forest, extents, BatchPolicy(),
                                                       exact).plan(), share_leaves=False))
    floor = max(1, lower_bound(forest, extents, policy))
    best = top
    least = _least(forest, extents, policy, exact)      # every term at its least peak
    if least is not None and least.peak_bytes < best.peak_bytes:
        best = least

    def index(b: float) -> int:                         # grid: floor·(1+GRID)^k
        return max(0, math.ceil(math.log(max(b, floor) / floor) / math.log1p(GRID) - 1e-9))

    lo, hi = -1, index(best.peak_bytes)
    rounds = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if progress is not None:
            progress("searching the minimum", rounds, rounds + math.ceil(math.log2(hi - lo)))
        rounds += 1
        p = replace(policy, budget=floor * (1 + GRID) ** mid)
        ok, _ = _attempt(forest, extents, p, TermPlanner(forest, extents, p, exact))
        if ok is None:
            lo = mid
        else:                     # its own peak is feasible too: the bracket may shrink more
            if ok.peak_bytes <= best.peak_bytes:
                best = ok
            hi = min(mid, index(ok.peak_bytes))
    need = best.peak_bytes
    # the same budget planned the usual way (fewest flops, then fewest loops) often fits
    # too, with far fewer loops than every term at its least peak
    p = replace(policy, budget=need)
    lean, _ = _attempt(forest, extents, p, TermPlanner(forest, extents, p, exact))
    if lean is not None and lean.peak_bytes <= need and lean.flops <= best.flops:
        best = lean
    _MINIMA[key] = (need, best)
    return need, best


def _least(forest: Forest, extents, policy: BatchPolicy, exact) -> ScheduleAnalysis | None:
    """The schedule with every term planned at its own least peak (a candidate minimum)."""
    planner = TermPlanner(forest, extents, replace(policy, budget=1), exact)
    try:
        planner.plan()
    except InfeasibleBudget:
        pass
    budgets = {v: planner.min_peak.get(v, 1) for v in forest.trees}
    try:
        return analyze_schedule(forest, replace(planner.plan(budgets), share_leaves=False))
    except InfeasibleBudget:
        return None


def fit_forest(forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
               progress=None) -> ScheduleAnalysis:
    """Plan and schedule so the forest's swept peak is within the policy's budget.

    A budget at or above ``minimum_budget`` always fits (feasibility is monotone); below
    it the fitter tries the budget itself first, and refuses with the minimum named.
    ``progress(what, done, total)`` is called as planning proceeds (for a progress bar)."""
    exact = term_peak(forest, BatchPlan(policy, extents, (), ()))
    planner = TermPlanner(forest, extents, policy, exact, progress)
    if not policy.finite:
        return analyze_schedule(forest, planner.plan())
    budget = policy.budget_bytes
    floor = lower_bound(forest, extents, policy)
    if budget >= floor:
        found, _ = _attempt(forest, extents, policy, planner)
        if found is not None:
            return found
    if budget < floor:                    # hopeless: refused at once, minimum on demand
        raise InfeasibleBudget(
            f"budget {format_budget(policy.budget, budget)} is below {format_bytes(floor)} "
            f"({floor} B), what the equation results alone hold at the end; the smallest "
            f"feasible budget is InfeasibleBudget.minimum (or se.min_budget)", budget,
            lambda: minimum_budget(forest, extents, policy)[0])
    need, best = minimum_budget(forest, extents, policy, progress)
    if need <= budget:
        return best
    term = _active_term(best, best.profile.binding_point)
    where = forest.trees[term].where if term is not None else "the equation sums"
    why = f"at the smallest the peak is reached while evaluating {where}"
    raise InfeasibleBudget(
        f"budget {format_budget(policy.budget, budget)} is below the smallest forest peak the "
        f"planner can meet, {format_bytes(need)} ({need} B); {why}. Raise the budget to at "
        f"least {need} B, or allow finer blocks (BatchPolicy(block=...))", budget, need)
