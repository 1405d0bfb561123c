"""Plan a whole forest: one batched DP per term tree, loops numbered in forest order."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..errors import InfeasibleBudget
from ..forest.values import Forest, TermTree
from ..report.text import format_bytes
from .dp import TermDP, walk_first
from .loops import Loop, Open
from .policy import BatchPolicy
from .sizes import Sizer

__all__ = ["TermPlan", "BatchPlan", "plan_forest"]


@dataclass(frozen=True)
class TermPlan:
    """Loops opened on one term tree: per node, the ordered loop ids and the first child."""

    value: int                               # the term's root value
    tree: TermTree
    opens: tuple[tuple[int, ...], ...]       # per node: loop ids, outermost first
    first: tuple[int, ...]                   # per node: which child runs first (0 or 1)
    peak_bytes: int                          # the term alone, as scheduled (exact)
    flops: int
    unbatched_flops: int
    min_peak_bytes: int                      # the least peak any plan of this term reaches

    def dump(self, loops: tuple[Loop, ...]) -> str:
        parts = []
        for n, ids in enumerate(self.opens):
            if ids:
                parts.append(f"#{n}[{' > '.join(f'L{i}' for i in ids)}]")
        opened = " ".join(parts) or "no loops"
        return (f"v{self.value} ({self.tree.where}): {opened}; peak {self.peak_bytes} B, "
                f"flops {self.flops} (unbatched {self.unbatched_flops})")


@dataclass(frozen=True)
class BatchPlan:
    policy: BatchPolicy
    extents: dict[str, int]
    terms: tuple[TermPlan, ...]
    loops: tuple[Loop, ...]

    def term(self, value: int) -> TermPlan:
        return next(t for t in self.terms if t.value == value)

    @property
    def max_term_peak(self) -> int:
        return max((t.peak_bytes for t in self.terms), default=0)

    def dump(self) -> str:
        lines = [self.policy.dump()]
        lines += [str(loop) for loop in self.loops]
        lines += [t.dump(self.loops) for t in self.terms]
        return "\n".join(lines) + "\n"


def _term_plan(value: int, tree: TermTree, config: dict, sizer: Sizer, prof,
               base_flops: int, min_peak: int, first_loop: int) -> tuple[TermPlan, list[Loop]]:
    """Materialize a configuration (node → (opens, first)) with loop ids from ``first_loop``."""
    loops: list[Loop] = []
    opens, first = [], []
    for n, node in enumerate(tree.nodes):
        o, f = config.get(n, ((), 0))
        ids = []
        for op in o:
            ix = op.label
            loops.append(Loop(first_loop + len(loops), ix.space, op.kind, sizer.block(ix),
                              sizer.extent(ix), sizer.nbatches(ix), (value, n), ix))
            ids.append(loops[-1].id)
        opens.append(tuple(ids))
        first.append(f)
    return TermPlan(value, tree, tuple(opens), tuple(first), prof.peak, prof.flops, base_flops,
                    min_peak), loops


ExactPeak = Callable[[TermPlan, tuple[Loop, ...]], int]


def plan_forest(forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
                exact: ExactPeak | None = None) -> BatchPlan:
    """Plan every term; raise InfeasibleBudget (before any work) if some term cannot fit.

    The DP ranks realizations by its profile model. ``exact``, when given, measures a term
    plan as actually scheduled (the schedule stage passes its static sweep): a term tree
    that reads one form twice keeps it live in between, which the tree model cannot see.
    Candidates are then tried in order of preference until one truly fits.
    """
    sizer = Sizer(extents, policy)
    budget = policy.budget_bytes
    terms, loops = [], []
    worst: tuple[int, str] | None = None
    for value in sorted(forest.trees):
        tree = forest.trees[value]
        dp = TermDP(tree, sizer, policy)
        default = {n: ((), walk_first(tree, n)) for n, node in enumerate(tree.nodes)
                   if node.children}
        base = dp.profile_of(default)

        def realize(config: dict, prof, min_peak: int) -> tuple[TermPlan, list[Loop]]:
            tp, new = _term_plan(value, tree, config, sizer, prof, base.flops, min_peak,
                                 len(loops))
            if exact is not None:
                tp = replace(tp, peak_bytes=exact(tp, tuple(new)))
            return tp, new

        tp, new = realize(default, base, base.peak)
        if policy.finite and tp.peak_bytes > budget:
            cands = sorted(dp.solve(tree.root),
                           key=lambda c: (c.profile.flops, c.nloops, c.peak, repr(c.config)))
            least = min(cands, key=lambda c: (c.peak, c.profile.flops))
            chosen = None
            for c in cands:
                if c.peak > 2 * budget:
                    continue
                config = dict(default)
                config.update({n: (o, f) for n, o, f in c.config})
                trial = realize(config, c.profile, 0)
                if trial[0].peak_bytes <= budget:
                    chosen = trial
                    break
            config = dict(default)
            config.update({n: (o, f) for n, o, f in least.config})
            min_peak = min(tp.peak_bytes, realize(config, least.profile, 0)[0].peak_bytes)
            if chosen is None:
                if worst is None or min_peak > worst[0]:
                    worst = (min_peak, tree.where)
                continue
            tp, new = chosen
            tp = replace(tp, min_peak_bytes=min(min_peak, tp.peak_bytes))
        terms.append(tp)
        loops.extend(new)
    if worst is not None:
        need = max([worst[0]] + [t.min_peak_bytes for t in terms])
        raise InfeasibleBudget(
            f"budget {format_bytes(budget)} ({budget:.0f} B) is below the smallest feasible "
            f"plan {format_bytes(need)} ({need} B): {worst[1]} needs "
            f"{format_bytes(worst[0])} even batched", budget, need)
    return BatchPlan(policy, dict(extents), tuple(terms), tuple(loops))


def stamp_plan(forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
               stamps: Mapping[int, Mapping[int, tuple[tuple[Open, ...], int]]]) -> BatchPlan:
    """A hand-stamped plan: ``stamps[term value][node] = (opens, first child)``.

    For fixtures and experiments: the loops are taken as given (no DP, no budget check);
    unstamped nodes open nothing and keep the unbatched child order.
    """
    sizer = Sizer(extents, policy)
    terms, loops = [], []
    for value in sorted(forest.trees):
        tree = forest.trees[value]
        dp = TermDP(tree, sizer, policy)
        config = {n: ((), walk_first(tree, n)) for n, node in enumerate(tree.nodes)
                  if node.children}
        base = dp.profile_of(config)
        config.update(stamps.get(value, {}))
        prof = dp.profile_of(config)
        tp, new = _term_plan(value, tree, config, sizer, prof, base.flops, prof.peak, len(loops))
        terms.append(tp)
        loops.extend(new)
    return BatchPlan(policy, dict(extents), tuple(terms), tuple(loops))
