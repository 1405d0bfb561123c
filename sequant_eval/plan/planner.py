"""Plan a whole forest: one batched DP per term tree, loops numbered in forest order."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..errors import InfeasibleBudget
from ..forest.values import Forest, TermTree
from ..units import format_budget, format_bytes
from .dp import TermDP, walk_first
from .loops import Loop, Open
from .policy import BatchPolicy
from .regime import Regime
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

    def dump(self) -> str:
        """One line: the loops each node opens, then peak and flops (beside the unbatched flops)."""
        parts = []
        for n, ids in enumerate(self.opens):
            if ids:
                parts.append(f"#{n}[{' > '.join(f'L{i}' for i in ids)}]")
        opened = " ".join(parts) or "no loops"
        return (f"v{self.value} ({self.tree.where}): {opened}; peak {self.peak_bytes} B, "
                f"flops {self.flops} (unbatched {self.unbatched_flops})")


@dataclass(frozen=True)
class BatchPlan:
    """The planner's output: the policy, the regime and one TermPlan per term."""

    policy: BatchPolicy
    extents: Mapping[str, int] | Regime    # what the forest is sized by
    terms: tuple[TermPlan, ...]
    loops: tuple[Loop, ...]
    share_leaves: bool = True      # one fetched block per leaf for the whole forest

    def term(self, value: int) -> TermPlan:
        """The plan of the term whose root value is ``value``."""
        return next(t for t in self.terms if t.value == value)

    @property
    def max_term_peak(self) -> int:
        """The largest peak of one term scheduled alone (0 with no terms)."""
        return max((t.peak_bytes for t in self.terms), default=0)

    def dump(self) -> str:
        """Stable text: the policy, every loop, then one line per term."""
        lines = [self.policy.dump()]
        lines += [str(loop) for loop in self.loops]
        lines += [t.dump() for t in self.terms]
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


class _Infeasible(Exception):
    def __init__(self, min_peak: int) -> None:
        self.min_peak = min_peak


class TermPlanner:
    """Plans single terms under a budget; remembers every (term, budget) it has solved.

    The DP ranks realizations by its profile model. ``exact``, when given, measures a term
    plan as actually scheduled (the schedule stage passes its static sweep): a term tree
    that reads one form twice keeps it live in between, which the tree model cannot see.
    Candidates are then tried in order of preference until one truly fits.
    """

    def __init__(self, forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
                 exact: ExactPeak | None = None, progress=None) -> None:
        self.progress = progress
        self.forest = forest
        self.extents = extents
        self.policy = policy
        self.sizer = Sizer(extents, policy)
        self.exact = exact
        self.dps: dict[int, TermDP] = {}
        self.memo: dict[tuple[int, float], tuple[TermPlan, list[Loop]] | int] = {}
        self.min_peak: dict[int, int] = {}

    def _realize(self, value: int, config: dict, prof, base_flops: int):
        tp, new = _term_plan(value, self.forest.trees[value], config, self.sizer, prof,
                             base_flops, 0, 0)
        if self.exact is not None:
            tp = replace(tp, peak_bytes=self.exact(tp, tuple(new)))
        return tp, new

    def plan_term(self, value: int, budget: float) -> tuple[TermPlan, list[Loop]]:
        """The term's plan with loop ids from 0; raises _Infeasible(min peak)."""
        key = (value, budget)
        if key not in self.memo:
            try:
                self.memo[key] = self._solve(value, budget)
            except _Infeasible as err:
                self.memo[key] = err.min_peak
        got = self.memo[key]
        if isinstance(got, int):
            raise _Infeasible(got)
        return got

    def _solve(self, value: int, budget: float):
        tree = self.forest.trees[value]
        dp = self.dps.setdefault(value, TermDP(tree, self.sizer, self.policy))
        default = {n: ((), walk_first(tree, n)) for n, node in enumerate(tree.nodes)
                   if node.children}
        base = dp.profile_of(default)
        tp, new = self._realize(value, default, base, base.flops)
        if not self.policy.finite or tp.peak_bytes <= budget:
            return replace(tp, min_peak_bytes=min(tp.peak_bytes, self.min_peak.get(value, tp.peak_bytes))), new
        cands = sorted(dp.solve(tree.root),
                       key=lambda c: (c.profile.flops, c.nloops, c.peak, repr(c.config)))
        least = min(cands, key=lambda c: (c.peak, c.profile.flops))
        config = dict(default)
        config.update({n: (o, f) for n, o, f in least.config})
        smallest = self._realize(value, config, least.profile, base.flops)
        if value not in self.min_peak:
            self.min_peak[value] = min(tp.peak_bytes, smallest[0].peak_bytes)
        for c in cands:
            if c.peak > 2 * budget:
                continue
            config = dict(default)
            config.update({n: (o, f) for n, o, f in c.config})
            trial, loops = self._realize(value, config, c.profile, base.flops)
            if trial.peak_bytes <= budget:
                return replace(trial, min_peak_bytes=self.min_peak[value]), loops
        if smallest[0].peak_bytes <= budget:    # the model ranks; the exact peak decides
            return replace(smallest[0], min_peak_bytes=self.min_peak[value]), smallest[1]
        raise _Infeasible(self.min_peak[value])

    def plan(self, budgets: Mapping[int, float] | None = None) -> BatchPlan:
        """Every term under its budget (default: the policy's); InfeasibleBudget otherwise."""
        budget = self.policy.budget_bytes
        terms, loops = [], []
        worst: tuple[int, str] | None = None
        values = sorted(self.forest.trees)
        for k, value in enumerate(values):
            if self.progress is not None:
                self.progress("planning terms", k, len(values))
            own = budgets.get(value, budget) if budgets else budget
            try:
                tp, new = self.plan_term(value, own)
            except _Infeasible as err:
                if worst is None or err.min_peak > worst[0]:
                    worst = (err.min_peak, self.forest.trees[value].where)
                continue
            shift = len(loops)
            new = [replace(l, id=l.id + shift) for l in new]
            tp = replace(tp, opens=tuple(tuple(i + shift for i in o) for o in tp.opens))
            terms.append(tp)
            loops.extend(new)
        if worst is not None:
            need = max([worst[0]] + [t.min_peak_bytes for t in terms])
            raise InfeasibleBudget(
                f"budget {format_budget(self.policy.budget, budget)} is below the smallest "
                f"feasible plan {format_bytes(need)} ({need} B): {worst[1]} needs "
                f"{format_bytes(worst[0])} even batched", budget, need)
        return BatchPlan(self.policy, self.extents, tuple(terms), tuple(loops))


def plan_forest(forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
                exact: ExactPeak | None = None) -> BatchPlan:
    """Plan every term within the policy's budget (see TermPlanner)."""
    return TermPlanner(forest, extents, policy, exact).plan()


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
    return BatchPlan(policy, extents, tuple(terms), tuple(loops))
