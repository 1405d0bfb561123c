"""Plan → boulevard → ordered schedule → static peak, in one call."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..plan.regime import Regime
from ..forest.values import Forest
from ..plan.planner import BatchPlan
from .boulevard import boulevard_and_order
from .rich import RichSchedule
from .flops import schedule_flops
from .ordered import OrderedSchedule, build_ordered_schedule
from .layouts import kernel_plans, kernel_scratch, scratch_of, sum_layouts
from .peak import (Liveness, PeakProfile, Point, liveness, moves, peak_profile_sweep,
                   schedule_points, sunk_sums, transients)

__all__ = ["ScheduleAnalysis", "analyze_schedule", "value_shapes"]


def value_shapes(forest: Forest, extents) -> tuple[tuple[float, ...], ...]:
    """Per value, per mode: its size (an integer extent, or a composite's power mean)."""
    regime = extents if isinstance(extents, Regime) else Regime.from_extents(extents)
    return tuple(regime.mode_sizes(v.spaces, v.groups) for v in forest.values)


@dataclass(frozen=True)
class ScheduleAnalysis:
    """Everything the schedule stage derives from a forest and a plan: the rich and ordered
    schedules, shapes, liveness cells, static points, the peak profile, flops, sum layouts,
    kernel scratch and the kernel plans it was derived from."""

    forest: Forest
    plan: BatchPlan
    rich: RichSchedule
    ordered: OrderedSchedule
    points: tuple[Point, ...]
    cells: tuple[Liveness, ...]
    profile: PeakProfile
    flops: int
    shapes: tuple[tuple[int, ...], ...]
    layouts: dict = field(default_factory=dict, compare=False)   # contraction form → order
    scratch: dict = field(default_factory=dict, compare=False)   # contraction form → elements
    held: dict | None = field(default=None, compare=False)       # transient(), as swept
    kernels: dict = field(default_factory=dict, compare=False)   # contraction form → plan

    def transient(self, skipped: frozenset[int] = frozenset()) -> dict[int, int]:
        """Point → kernel scratch bytes held there (see ``layouts.kernel_scratch``)."""
        if not skipped and self.held is not None:
            return dict(self.held)
        return transients(self.ordered, self.forest, self.shapes, list(self.points),
                          self.scratch, self.plan.policy.itemsize, skipped)

    @property
    def peak_bytes(self) -> int:
        """The predicted peak, bytes (from the static sweep)."""
        return self.profile.peak_bytes


def term_peak(forest: Forest, plan: BatchPlan):
    """A checker for ``plan_forest(exact=...)``: the static peak of one term scheduled alone
    (its tree's forms only, without the equation sum it feeds).

    The one-term forest shares the forest's values, so their shapes are computed once for
    every term checked; only what the peak needs is derived (no flops)."""
    from dataclasses import replace as _replace

    from ..forest.values import Root, SumEntry, Value, ValueKind
    from .forms import FormKind

    regime = plan.extents if isinstance(plan.extents, Regime) else Regime.from_extents(
        plan.extents)
    base = value_shapes(forest, regime)
    itemsize = plan.policy.itemsize

    def exact(tp, loops) -> int:
        sid = len(forest.values)
        rank = len(forest.values[tp.value].spaces)
        total = Value(sid, ValueKind.SUM, forest.values[tp.value].spaces,
                      entries=(SumEntry(1, tp.value, tuple(range(rank))),), name="term")
        alone = Forest(forest.values + (total,), (Root("term", sid, ()),), 0, {},
                       {tp.value: tp.tree})
        shift = {l.id: k for k, l in enumerate(loops)}
        local = tuple(_replace(l, id=shift[l.id]) for l in loops)
        tp = _replace(tp, opens=tuple(tuple(shift[i] for i in o) for o in tp.opens))
        one = _replace(plan, terms=(tp,), loops=local)
        rich, ordered = boulevard_and_order(alone, one)
        if ordered is None:
            ordered = build_ordered_schedule(rich)  # raises: why it cannot be sequenced
        if one.policy.sinks:
            ordered = replace(ordered, sinks=sunk_sums(ordered, alone, one.policy.sinks))
        shapes = base + (regime.mode_sizes(total.spaces, total.groups),)
        points = schedule_points(ordered)
        cells = liveness(ordered, alone, shapes, itemsize, points)
        moved = {(points[k].form, points[k].entry) for k in moves(ordered, alone, points)}
        layouts = sum_layouts(ordered, alone, shapes, moved)
        scratch = kernel_scratch(ordered, alone, shapes, layouts)
        kept = [c for c in cells if rich.forms[c.form].kind is not FormKind.SUM]
        return peak_profile_sweep(kept, len(points), transients(
            ordered, alone, shapes, points, scratch, itemsize)).peak_bytes

    return exact


def analyze_schedule(forest: Forest, plan: BatchPlan) -> ScheduleAnalysis:
    """Schedule a planned forest: loop fusion, sequencing, layouts, kernel scratch, liveness
    and the peak sweep."""
    rich, ordered = boulevard_and_order(forest, plan)
    if ordered is None:
        ordered = build_ordered_schedule(rich)      # raises: why it cannot be sequenced
    return _analysis(forest, plan, rich, ordered)


def analyze_greedy(forest: Forest, plan: BatchPlan) -> ScheduleAnalysis | None:
    """``analyze_schedule`` where every fusion the rules allow can be sequenced as it
    stands, else None: the fusions are not retried one by one (the fitter's caps, which
    only look for a cheaper fit, skip such a plan)."""
    rich, ordered = boulevard_and_order(forest, plan, retry=False)
    return None if ordered is None else _analysis(forest, plan, rich, ordered)


def _analysis(forest: Forest, plan: BatchPlan, rich, ordered) -> ScheduleAnalysis:
    if plan.policy.sinks:
        ordered = replace(ordered, sinks=sunk_sums(ordered, forest, plan.policy.sinks))
    shapes = value_shapes(forest, plan.extents)
    points = schedule_points(ordered)
    cells = liveness(ordered, forest, shapes, plan.policy.itemsize, points)
    moved = {(points[k].form, points[k].entry) for k in moves(ordered, forest, points)}
    layouts = sum_layouts(ordered, forest, shapes, moved)
    kernels = kernel_plans(ordered, forest, shapes, layouts)
    scratch = scratch_of(kernels)
    itemsize = plan.policy.itemsize
    held = transients(ordered, forest, shapes, points, scratch, itemsize)
    profile = peak_profile_sweep(cells, len(points), dict(held))
    return ScheduleAnalysis(forest, plan, rich, ordered, tuple(points), tuple(cells), profile,
                            schedule_flops(ordered, forest, shapes), shapes, layouts, scratch,
                            held, kernels)
