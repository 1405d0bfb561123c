"""The forest-level budget: the whole schedule's peak, not each term's, stays within it.

Terms are planned one by one, but the forest holds more than one term at a time: the
equation sums, intermediates shared between terms, a term's result waiting to be added.
After scheduling, the binding point of the sweep names the term being evaluated there and
the *background* live around it; that term is re-planned under the budget minus its
background, and the forest is scheduled again, until the swept peak fits. A round that
finds no lower peak re-plans every term whose plan alone peaks above that target at once
(the terms that bind in turn are usually alike), and an attempt ends after ``_STALL``
such rounds. Unsliced input blocks are fetched per term (not held from one term to the
next), which keeps the background small. If no re-planning fits but the least-peak
schedule (every term at its least peak) does with room, every term is planned under one
common cap, the largest that fits of a few halvings of the budget and a bisection: far
fewer loops than the least-peak schedule. Otherwise the smallest budget the planner can
meet is searched on a fixed geometric grid between a lower bound (the equation results,
whole) and the least-peak schedule's peak (galloping down, then bisection), independently
of the budget asked for, and named in InfeasibleBudget; any budget at or above it fits.

Everything a budget probe needs that does not depend on the budget is remembered per
forest, regime and policy (``_Fitting``, for the few latest forests): each term's DP and the
peak of every realization it has tried (``plan.menu.TermMenu``), and the verdict
of every distinct plan it has scheduled. A probe then costs menu look-ups plus one sweep
per plan not seen before; the probes of a minimum search mostly meet plans already seen.
"""
from __future__ import annotations

import gc
import math
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

from ..errors import InfeasibleBudget
from ..forest.values import Forest
from ..plan.menu import TermMenu
from ..plan.planner import BatchPlan, TermPlanner
from ..plan.policy import BatchPolicy
from ..plan.slicing import orient_sums, slice_sums, sliceable_sums
from ..units import format_budget, format_bytes
from .analysis import ScheduleAnalysis, analyze_greedy, analyze_schedule, term_peak

__all__ = ["fit_forest", "minimum_budget", "lower_bound"]

_ROUNDS = 40
#: Re-planning rounds without a new least peak after which an attempt gives up: measured
#: over the packaged texts at 50/25/10/5 %, a fit that succeeds never went more than 3
#: rounds without one, while failing attempts wander for up to 39 (the whole ``_ROUNDS``).
_STALL = 8


@dataclass(frozen=True)
class _Verdict:
    """What the fitter needs from a schedule's sweep: its peak, the term evaluated at the
    binding point (None: the equation sums) and that term's own bytes live there."""

    peak: int
    term: int | None
    own: int


class _Fitting:
    """What the fitter remembers for one forest, regime and policy (its budget aside): the
    term menus (each term's DP and realization peaks, shared by every budget), the verdict on
    every plan it has scheduled, the unbatched and least-peak schedules and the minimum.

    Probing many budgets then costs one sweep per *distinct* plan, not per probe."""

    def __init__(self, forest: Forest, extents, policy: BatchPolicy,
                 sliced: bool = False) -> None:
        self.forest = forest
        self.extents = extents
        self.policy = policy
        self.sliced = sliced             # inner sums sliced by tied loops (plan/slicing.py)
        self.origin = forest             # the forest asked about (``forest`` may be turned)
        self.exact = term_peak(forest, BatchPlan(policy, extents, (), ()))
        self.menus: dict[int, TermMenu] = {}
        self.solved: dict = {}                           # DP problem → Pareto set
        self.verdicts: dict[tuple, _Verdict] = {}
        self.refused: set[tuple] = set()                 # plans greedy fusion cannot order
        self.prepared: dict[tuple, tuple | None] = {}    # plan → what slicing makes of it
        self.kept: dict[tuple, ScheduleAnalysis] = {}    # the latest analyses, by plan
        self.top: ScheduleAnalysis | None = None
        self.least: tuple[ScheduleAnalysis | None] | None = None
        self.minimum: tuple[int, ScheduleAnalysis] | None = None   # as the search found it
        self.lean: ScheduleAnalysis | None = None        # the minimum's schedule to run

    def planner(self, policy: BatchPolicy, progress=None) -> TermPlanner:
        """A planner under ``policy`` (this one's but for the budget) that shares this
        forest's term menus."""
        return TermPlanner(self.forest, self.extents, policy, self.exact, progress,
                           self.menus, self.solved)

    def prepare(self, plan: BatchPlan) -> BatchPlan:
        """A planned forest as this fitting schedules it: leaves fetched per term, and the
        inner sums sliced when this is the sliced fitting (what slicing does to a plan's
        loops is remembered per plan: the budget does not enter it)."""
        plan = replace(plan, share_leaves=False)
        if not self.sliced:
            return plan
        key = _signature(plan)
        if key not in self.prepared:
            out = slice_sums(self.forest, plan, self.extents)
            self.prepared[key] = None if out is plan else (
                out.loops, out.sliced, tuple(t.opens for t in out.terms))
        got = self.prepared[key]
        if got is None:
            return plan
        loops, sliced, opens = got
        return replace(plan, terms=tuple(replace(t, opens=o) for t, o in zip(plan.terms, opens)),
                       loops=loops, sliced=sliced)

    def analyze(self, plan: BatchPlan) -> ScheduleAnalysis:
        """The schedule of ``plan`` (the last few are remembered)."""
        return self._analysis(plan, analyze_schedule)

    def verdict(self, plan: BatchPlan) -> _Verdict:
        """The verdict on ``plan``, scheduling it only if it is new."""
        got = self.verdicts.get(_signature(plan))
        return got if got is not None else _verdict(self.analyze(plan))

    def greedy_verdict(self, plan: BatchPlan) -> _Verdict | None:
        """``verdict``, or None where every fusion the rules allow cannot be sequenced
        (``analyze_greedy``: the fusions are not retried one by one)."""
        key = _signature(plan)
        if key in self.verdicts or key in self.refused:
            return self.verdicts.get(key)
        if self._analysis(plan, analyze_greedy) is None:
            self.refused.add(key)
        return self.verdicts.get(key)

    def _analysis(self, plan: BatchPlan, schedule) -> ScheduleAnalysis | None:
        """``schedule(forest, plan)`` (None passed through), its verdict recorded and the
        last two analyses kept."""
        key = _signature(plan)
        got = self.kept.pop(key, None)
        if got is None:
            got = schedule(self.forest, plan)
            if got is None:
                return None
            self.verdicts[key] = _verdict(got)
        self.kept[key] = got
        while len(self.kept) > 2:
            del self.kept[next(iter(self.kept))]
        return got if got.plan is plan else replace(got, plan=plan)   # same loops, another budget


def _signature(plan: BatchPlan) -> tuple:
    """Identity of a plan for the fitter: every term's loops and child order, the loops."""
    return (plan.share_leaves, plan.loops,
            tuple((t.value, t.opens, t.first) for t in plan.terms))


def _verdict(a: ScheduleAnalysis) -> _Verdict:
    b = a.profile.binding_point
    term = _active_term(a, b)
    own = 0
    if term is not None:
        own = sum(c.footprint for c in a.cells if c.first <= b <= c.last
                  and a.rich.forms[c.form].term == term) + a.transient().get(b, 0)
    return _Verdict(a.peak_bytes, term, own)


#: Fittings remembered, the least recently used dropped first. A fitting holds its forest
#: (its analyses and menus name it), so it cannot be dropped *with* the forest: the cache
#: is bounded instead (each fitting is a few MiB: its term menus and verdicts).
_REMEMBERED = 4
_FITTINGS: dict[tuple, _Fitting] = {}


def _fitting(forest: Forest, extents, policy: BatchPolicy, sliced: bool = False) -> _Fitting:
    """The fitter's memory for this forest and policy (one of the ``_REMEMBERED`` latest);
    ``sliced``: the fitting whose plans slice the inner sums (``plan/slicing.py``)."""
    key = _key(forest, extents, policy) + (sliced,)
    got = _FITTINGS.pop(key, None)
    if got is None or got.origin is not forest:
        unbudgeted = replace(policy, budget=math.inf)
        # sliced: the inner sums' terms turned within their readers' symmetry first
        planned = orient_sums(forest, unbudgeted, extents) if sliced else forest
        got = _Fitting(planned, extents, unbudgeted, sliced)
        got.origin = forest
    _FITTINGS[key] = got                                 # the most recently used last
    while len(_FITTINGS) > _REMEMBERED:
        del _FITTINGS[next(iter(_FITTINGS))]
    return got


def _attempt(fit: _Fitting, policy: BatchPolicy,
             progress=None) -> tuple[ScheduleAnalysis | None, float]:
    """Try to fit; returns (analysis or None, the best swept peak seen: inf where no plan
    was made)."""
    budget = policy.budget_bytes
    planner = fit.planner(policy, progress)
    budgets = {v: budget for v in fit.forest.trees}
    best, stall = None, 0
    for _ in range(_ROUNDS):
        try:
            plan = fit.prepare(planner.plan(budgets))
        except InfeasibleBudget:
            return None, best if best is not None else math.inf
        v = fit.verdict(plan)
        if best is None or v.peak < best:
            best, stall = v.peak, 0
        else:
            stall += 1
        if v.peak <= budget:
            return fit.analyze(plan), v.peak
        term = v.term
        if term is None or stall >= _STALL:
            return None, best
        target = min(budget - (v.peak - v.own), budgets[term] - 1)
        if target < (planner.menu(term).known_min_peak() or 0) or target <= 0:
            return None, best
        budgets[term] = target
        if stall:
            # no lower peak: the terms binding in turn are alike (mirror images, or one
            # input block read whole by many), so every one still above the target is
            # re-planned under it at once instead of one per round
            for t in plan.terms:
                if t.peak_bytes > target:
                    budgets[t.value] = min(budgets[t.value], target)
    return None, best


#: Caps tried after a failed attempt: the budget halved this many times at most.
_CAPS = 4
#: Bisections between the last cap that failed and the first that fitted (a second one
#: measured 62 loops against 69 on spin-orbital CCSD at 10 %, for one more sweep).
_BISECT = 1
#: The caps are tried only at budgets at least this many times the least-peak schedule's
#: peak: at the minimum itself (within one cell of the 2 % grid, GRID) they seldom win much
#: (closed-shell CCSD at i5a19: 379 → 358 loops for 0.39 s more) or fit at all (the DF
#: doubles: 0.34 s more); 4 % above it they took OH/cc-pVDZ UCCSD from 323 to 210 loops.
_ROOM = 1.02
#: How many more flops (relative) a capped schedule may cost than the least-peak one and
#: still be taken for having no more loops.
_FLOPS_SLACK = 0.01


#: A failed attempt whose best swept peak was within this factor of the budget tries the
#: first cap (half the budget) before the least-peak schedule is made: on the DF doubles
#: at 25 % (1.01× the budget) that cap fits, with 30 loops against the least-peak
#: schedule's 227, and the least-peak schedule (0.8 s of its 1.7 s) is not needed. Where
#: the cap fails (on the packaged texts: CCSDT at 25 %, at and below its minimum) it costs
#: one more sweep.
_NEAR = 1.5


def _between(fit: _Fitting, policy: BatchPolicy, near: bool = False
             ) -> ScheduleAnalysis | None:
    """After a failed attempt: when the least-peak schedule fits with room (``_ROOM``), the
    capped schedule (``_capped``) if it fits at about the same flops with no more loops,
    else None (the minimum search then decides). The least-peak schedule is what the
    minimum search starts from, so a refusal pays nothing more. ``near``: the attempt
    came within ``_NEAR`` of the budget; a first cap that fits is then taken as it is
    (the least-peak schedule, which holds every term at its least, has more loops)."""
    tried = 0
    if near:
        capped = _capped(fit, policy, halvings=1)
        if capped is not None:
            return capped
        tried = 1
    least = _least(fit)
    if least is None or least.peak_bytes * _ROOM > policy.budget_bytes:
        return None                       # none fits, or too little room for a cap to win
    capped = _capped(fit, policy, tried=tried)
    if capped is None or capped.flops > least.flops * (1 + _FLOPS_SLACK) \
            or len(capped.plan.loops) > len(least.plan.loops):
        return None
    return capped


def _capped(fit: _Fitting, policy: BatchPolicy, halvings: int = _CAPS, tried: int = 0
            ) -> ScheduleAnalysis | None:
    """A schedule that fits with every term planned under one cap (a term that cannot meet
    the cap at its own least peak), or None: the cap is halved from the budget until one
    fits (``halvings`` at most), then bisected ``_BISECT`` times (geometrically) between
    the last cap that failed and the first that fitted; ``tried``: the first halvings are
    known to fail (``_between`` tried them), not planned again.

    An attempt re-plans only the term at the binding point, so it fails where what the
    other terms hold there exceeds the budget by itself; the minimum search's schedule
    fits then, but at the smallest budget, with every term at its least peak (far more
    loops than the budget needs). A common cap lowers every term's share at once."""
    budget = policy.budget_bytes
    planner = fit.planner(policy)

    def at(cap: float) -> ScheduleAnalysis | None:
        budgets = {}
        for v in fit.forest.trees:
            menu = planner.menu(v)
            budgets[v] = cap if menu.default[0].peak_bytes <= cap else max(cap, menu.min_peak)
        plan = fit.prepare(planner.plan(budgets))
        got = fit.greedy_verdict(plan)      # a cap whose fusions need retrying is passed by
        return fit.analyze(plan) if got is not None and got.peak <= budget else None

    hi = tried                              # log2(budget / cap) of the last cap that failed
    for j in range(tried + 1, halvings + 1):
        got = at(budget / 2 ** j)
        if got is not None:
            lo = j
            break
        hi = j
    else:
        return None
    for _ in range(_BISECT):
        mid = (hi + lo) / 2
        better = at(budget / 2 ** mid)
        if better is None:
            hi = mid
        else:
            got, lo = better, mid
    return got


def _active_term(a: ScheduleAnalysis, point: int) -> int | None:
    for k in range(min(point, len(a.points) - 1), -1, -1):   # none: every term cancelled
        p = a.points[k]
        if p.form >= 0 and a.rich.forms[p.form].term >= 0:
            return a.rich.forms[p.form].term
    return None


def lower_bound(forest: Forest, extents, policy: BatchPolicy) -> int:
    """Bytes no plan can go below: every equation result is whole and alive at the end
    (one written to a sink is not held)."""
    from .analysis import value_shapes
    from ..plan.regime import footprint_bytes

    shapes = value_shapes(forest, extents)
    sunk = dict(policy.sinks)
    return sum(footprint_bytes(shapes[r.value], policy.itemsize) for r in forest.roots
               if r.name not in sunk)


#: Relative width of the budget grid the minimum is searched on.
GRID = 0.02

def _key(forest: Forest, extents, policy: BatchPolicy) -> tuple:
    regime = tuple(sorted(getattr(extents, "extents", extents).items()))
    moments = tuple(sorted(getattr(extents, "moments", {}).items()))
    return (id(forest), forest.roots, regime, moments,
            repr(replace(policy, budget=None)))


@contextmanager
def _collector_paused():
    """The cyclic garbage collector paused while the fitter runs (its state restored after).

    A fit keeps hundreds of thousands of small containers (Pareto sets, menus, verdicts),
    and each time the heap has grown by a quarter the collector walks all of it: 15–35 % of
    a fit of unrestricted CCSD at 10 %, more where the process holds much else. Planning
    leaves no reference cycles behind (a test), so nothing waits for the collector."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@_collector_paused()
def minimum_budget(forest: Forest, extents, policy: BatchPolicy,
                   progress=None, run: bool = True) -> tuple[int, ScheduleAnalysis]:
    """The smallest budget the fitter meets, on a geometric grid of ``GRID`` relative width
    between the lower bound and the unbatched peak, and the fitted schedule there: the
    least-peak schedule (every term at its least peak) or, below it, the smallest grid
    point a direct fit meets, searched down from it (galloping, then bisection).

    It depends on the policy's spaces and blocks, never on its budget, and is remembered
    per forest and policy (a second refusal is instant). Where inner sums can be sliced
    (``plan/slicing.py``) it is the smaller of the minima with and without slicing.
    ``run``: the schedule returned is the one to run at the minimum (the same budget
    planned the usual way where that fits at no more flops, else the search's); without
    it, the search's own, which is all a refusal needs (it names the term binding there)."""
    if not sliceable_sums(forest, policy):
        fit = _fitting(forest, extents, policy)
    else:
        fit = _fitting(forest, extents, policy, sliced=True)
        need = _minimum(fit, policy, progress)[0]
        if need >= unsliced_floor(forest, extents, policy):   # below it, slicing wins
            plain = _fitting(forest, extents, policy)
            if _minimum(plain, policy, progress)[0] <= need:
                fit = plain
    return _minimum(fit, policy, progress, run)


def unsliced_floor(forest: Forest, extents, policy: BatchPolicy) -> int:
    """Bytes no plan that holds the inner sums whole can go below: the lower bound, or a
    sliceable inner sum whole together with the results that read it (when they add it up,
    both exist whole; a result written to a sink aside), whichever is more. Where slicing
    meets a budget below this, the unsliced fitting need not run."""
    from .analysis import value_shapes
    from ..plan.regime import footprint_bytes

    shapes = value_shapes(forest, extents)
    sunk = dict(policy.sinks)
    held = {r.value for r in forest.roots if r.name not in sunk}

    def size(v: int) -> int:
        return footprint_bytes(shapes[v], policy.itemsize)

    whole = max((size(s) + sum(size(r.id) for r in forest.values if r.id in held
                               and any(e.value == s for e in r.entries))
                 for s in sliceable_sums(forest, policy)), default=0)
    return max(lower_bound(forest, extents, policy), whole)


def _minimum(fit: _Fitting, policy: BatchPolicy, progress=None, run: bool = False):
    if fit.minimum is None:
        fit.minimum = _search_minimum(fit, policy, progress)
    if not run:
        return fit.minimum
    if fit.lean is None:
        # the same budget planned the usual way (fewest flops, then fewest loops) often
        # fits too, with far fewer loops than every term at its least peak
        need, best = fit.minimum
        lean, _ = _attempt(fit, replace(policy, budget=need))
        fit.lean = lean if lean is not None and lean.peak_bytes <= need and \
            lean.flops <= best.flops else best
    return fit.minimum[0], fit.lean


def _search_minimum(fit: _Fitting, policy: BatchPolicy, progress=None):
    forest, extents = fit.forest, fit.extents
    floor = max(1, lower_bound(forest, extents, policy))
    least = _least(fit)                                 # every term at its least peak
    # the unbatched schedule holds each term's own unbatched peak while it runs, so a
    # least-peak schedule below the largest of those is below it too and needs no
    # comparison with it (every packaged text: the unbatched one is not scheduled)
    if least is not None and least.peak_bytes < max(
            (fit.planner(fit.policy).menu(v).default[0].peak_bytes for v in forest.trees),
            default=0):
        best = least
    else:
        best = _top(fit)
        if least is not None and least.peak_bytes < best.peak_bytes:
            best = least

    def index(b: float) -> int:                         # grid: floor·(1+GRID)^k
        return max(0, math.ceil(math.log(max(b, floor) / floor) / math.log1p(GRID) - 1e-9))

    # Galloping down from the best peak known, then bisecting the bracket: the smallest
    # feasible grid point of a monotone search, as plain bisection finds it, but where (as
    # usual) nothing below the least-peak schedule fits, one probe instead of log2(grid).
    lo, hi = -1, index(best.peak_bytes)
    rounds, step, galloping = 0, 1, True
    while hi - lo > 1:
        mid = max(lo + 1, hi - step) if galloping else (lo + hi) // 2
        if progress is not None:
            progress("searching the minimum", rounds, rounds + math.ceil(math.log2(hi - lo)))
        rounds += 1
        ok, _ = _attempt(fit, replace(policy, budget=floor * (1 + GRID) ** mid))
        if ok is None:
            lo, galloping = mid, False
        else:                     # its own peak is feasible too: the bracket may shrink more
            if ok.peak_bytes <= best.peak_bytes:
                best = ok
            hi, step = min(mid, index(ok.peak_bytes)), 2 * step
    return best.peak_bytes, best


def _top(fit: _Fitting) -> ScheduleAnalysis:
    """The unbatched schedule, leaves fetched per term (the search's upper end). No term
    is checked alone: with no loops there is no choice for an exact peak to decide."""
    if fit.top is None:
        unbatched = BatchPolicy(itemsize=fit.policy.itemsize, sinks=fit.policy.sinks)
        fit.top = analyze_schedule(fit.forest, replace(TermPlanner(
            fit.forest, fit.extents, unbatched).plan(), share_leaves=False))
    return fit.top


def _least(fit: _Fitting) -> ScheduleAnalysis | None:
    """The schedule with every term planned at its own least peak (a candidate minimum)."""
    if fit.least is None:
        planner = fit.planner(replace(fit.policy, budget=1))
        budgets = {v: planner.menu(v).min_peak for v in fit.forest.trees}
        try:
            fit.least = (fit.analyze(fit.prepare(planner.plan(budgets))),)
        except InfeasibleBudget:
            fit.least = (None,)
    return fit.least[0]


@_collector_paused()
def fit_forest(forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
               progress=None) -> ScheduleAnalysis:
    """Plan and schedule so the forest's swept peak is within the policy's budget.

    A budget at or above ``minimum_budget`` always fits (feasibility is monotone); below
    it the fitter tries the budget itself first, and refuses with the minimum named.
    ``progress(what, done, total)`` is called as planning proceeds (for a progress bar)."""
    if not policy.finite:             # every term unbatched: nothing to check alone
        return analyze_schedule(forest, TermPlanner(forest, extents, policy, None,
                                                    progress).plan())
    budget = policy.budget_bytes
    floor = lower_bound(forest, extents, policy)
    fit = _fitting(forest, extents, policy)
    if budget >= floor:
        found, best = None, math.inf
        slicing = sliceable_sums(forest, policy)
        if not slicing or budget >= unsliced_floor(forest, extents, policy):
            found, best = _attempt(fit, policy, progress)
        if found is None and slicing:                            # inner sums batched too
            found, best = _attempt(_fitting(forest, extents, policy, sliced=True), policy,
                                   progress)
        if found is None:
            found = _between(_fitting(forest, extents, policy, sliced=bool(slicing)), policy,
                             near=best <= _NEAR * budget)
        if found is not None:
            return found
    if budget < floor:                    # hopeless: refused at once, minimum on demand
        raise InfeasibleBudget(
            f"budget {format_budget(policy.budget, budget)} is below {format_bytes(floor)} "
            f"({floor} B), what the equation results alone hold at the end; the smallest "
            f"feasible budget is InfeasibleBudget.minimum (or se.min_budget)", budget,
            lambda: minimum_budget(forest, extents, policy, run=False)[0])
    need, best = minimum_budget(forest, extents, policy, progress, run=False)
    if need <= budget:                    # found under a probe's budget: report the caller's
        best = minimum_budget(forest, extents, policy, progress)[1]
        return replace(best, plan=replace(best.plan, policy=policy))
    term = _active_term(best, best.profile.binding_point)
    where = forest.trees[term].where if term is not None else "the equation sums"
    why = f"at the smallest the peak is reached while evaluating {where}"
    raise InfeasibleBudget(
        f"budget {format_budget(policy.budget, budget)} is below the smallest forest peak the "
        f"planner can meet, {format_bytes(need)} ({need} B); {why}. Raise the budget to at "
        f"least {need} B, or allow finer blocks (BatchPolicy(block=...))", budget, need)
