"""Plan a whole forest: one batched DP per term tree, loops numbered in forest order."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial

from ..errors import InfeasibleBudget
from ..forest.values import Forest, TermTree
from ..units import format_budget, format_bytes
from .dp import TermDP, walk_first
from .loops import Loop, Open
from .menu import TermMenu
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
    peak_bytes: int                          # the term alone: exact (scheduled alone) with a
                                             # checker, as every budgeted fit has; else modelled
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
    sliced: tuple = ()             # inner sums sliced by tied loops (``slicing.SlicedSum``)

    def term(self, value: int) -> TermPlan:
        """The plan of the term whose root value is ``value``."""
        return next(t for t in self.terms if t.value == value)

    def dump(self) -> str:
        """Stable text: the policy, every loop, then one line per term."""
        lines = [self.policy.dump()]
        lines += [str(loop) for loop in self.loops]
        lines += [t.dump() for t in self.terms]
        lines += [f"v{s.value} sliced on modes {list(s.modes)} by "
                  f"{' = '.join('+'.join(f'L{l}' for l in ls) for ls in s.loops)}"
                  for s in self.sliced]
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


class TermPlanner:
    """Plans single terms under a budget, through one ``TermMenu`` per term.

    The DP ranks realizations by its profile model, and a realization's peak is that
    model with its kernels' scratch counted (``TermDP.profile_of(..., scratch=True)``).
    ``exact``, when given, measures what the model may miss (``menu.peak_rule``: a term
    that is one input block, has composite sizes, or reads an input twice) with the
    schedule stage's static sweep of the term alone; elsewhere the model is that sweep.
    Without it every peak is the plain model's. The forest's own sweep, which the fitter
    checks every plan with, stays the authority. ``menus`` (term value → TermMenu) may be
    shared by planners of the same forest, regime and policy that differ only in the
    budget: the DP and every peak are then computed once for all of them; ``solved``
    (shared the same way) holds each distinct DP problem's Pareto set, so terms that differ
    only in their labels' names solve it once.
    """

    def __init__(self, forest: Forest, extents: Mapping[str, int], policy: BatchPolicy,
                 exact: ExactPeak | None = None, progress=None,
                 menus: dict[int, TermMenu] | None = None,
                 solved: dict | None = None) -> None:
        self.progress = progress
        self.forest = forest
        self.extents = extents
        self.policy = policy
        self.sizer = Sizer(extents, policy)
        self.exact = exact
        self.menus: dict[int, TermMenu] = {} if menus is None else menus
        self.solved: dict = {} if solved is None else solved
        # what a menu calls back with: not a bound method, which would hold the planner and
        # so its menus (a reference cycle left to the cyclic collector)
        self._realize = partial(_realize, forest, self.sizer, exact)

    @property
    def min_peak(self) -> dict[int, int]:
        """Term value → its least peak, for the terms whose DP has run."""
        return {v: m.min_peak for v, m in self.menus.items() if m.solved}

    def menu(self, value: int) -> TermMenu:
        """The term's menu (made on first use)."""
        got = self.menus.get(value)
        if got is None:
            got = self.menus[value] = TermMenu(value, self.forest.trees[value], self.sizer,
                                               self.policy, self._realize, self.solved,
                                               self.forest.values, self.exact is not None)
        return got

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
            menu = self.menu(value)
            got = menu.choose(own, not self.policy.finite)
            if got is None:
                if worst is None or menu.min_peak > worst[0]:
                    worst = (menu.min_peak, self.forest.trees[value].where)
                continue
            tp, new = got
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


def _realize(forest: Forest, sizer: Sizer, exact: ExactPeak | None, value: int, config: dict,
             prof, base_flops: int, peak: int | None):
    """A configuration of term ``value`` as a term plan and its loops; its peak ``peak``, or
    where None the sweep's (``exact``), or without one the plain model's."""
    tp, new = _term_plan(value, forest.trees[value], config, sizer, prof, base_flops, 0, 0)
    if peak is None and exact is not None:
        peak = exact(tp, tuple(new))
    return (tp if peak is None else replace(tp, peak_bytes=peak)), new


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
