"""One term's realizations for every budget at once: the DP solved once, each peak
computed once.

The per-term DP's Pareto set does not depend on the budget; only the choice among its
realizations does, and terms that pose the same DP problem up to a renaming of their labels
and spaces (``dp.problem_key``: the (T) energy's 232 products pose 42) share one solution. A
``TermMenu`` keeps them in order of preference (fewest flops, then fewer loops, then lower
model peak) and answers a budget with the first one whose peak fits, else the least-peak one
if it fits. A realization's peak is the DP's model with its kernels' scratch counted
(``TermDP.profile_of(..., scratch=True)``), or where the model may miss it the static sweep
of the term alone (``peak_rule``); it is computed when a budget first needs it and reused by
every later budget. Measuring every candidate with that sweep instead, as the planner did,
made the same plans on 86 of 88 fits of the packaged texts (the other two: one or two more
loops at the same peak) and took 1.3–1.6× as long on closed-shell CCSD at 10 %, at the
minimum and for a refusal.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..forest.values import TermTree, Value
from .dp import Candidate, TermDP, problem_key, relabelled, walk_first
from .policy import BatchPolicy
from .sizes import Sizer

__all__ = ["TermMenu", "Realized", "peak_rule", "MODELLED", "TWICE", "MEASURED"]

#: A realized choice: the term plan (loop ids from 0, its peak) and its loops.
Realized = tuple  # (TermPlan, list[Loop])


#: How a term's realization peaks are known (``peak_rule``).
MODELLED, TWICE, MEASURED = "modelled", "twice", "measured"


def peak_rule(tree: TermTree) -> str:
    """How the peaks of a term's realizations are known, when the planner can measure them
    (the schedule stage's sweep of the term alone):

    - ``MEASURED``: the term is one input block (the schedule adds it into its sum in
      chunks), or its sizes are composite (power means, which the model and the sweep
      group differently): every candidate tried is measured;
    - ``TWICE``: it reads an input twice (the schedule fetches a block once for both
      reads and keeps it live between them, where the model holds two copies for their own
      spans): the unbatched and the least-peak realizations are measured (what a term can
      reach is exact), the others modelled, a small block apart at most (one o·v array on
      CCSD);
    - ``MODELLED``: the model with kernel scratch, which is that sweep: 1,373 of 1,373
      realizations of the packaged CCSD texts (closed-shell, spin-orbital, unrestricted;
      the first six of each term and the unbatched one), and a property test on random
      forests (tests/plan/test_scratch_model.py)."""
    if not tree.nodes[tree.root].children or any(ix.protos for node in tree.nodes
                                                 for ix in node.labels):
        return MEASURED
    leaves = [node.value for node in tree.nodes if not node.children]
    return TWICE if len(set(leaves)) < len(leaves) else MODELLED


class TermMenu:
    """The realizations of one term tree under one policy (its budget aside)."""

    def __init__(self, value: int, tree: TermTree, sizer: Sizer, policy: BatchPolicy,
                 realize: Callable[[int, dict, object, int, int | None], Realized],
                 solved: dict | None = None, values: Sequence[Value] | None = None,
                 measure: bool = False) -> None:
        self.value = value
        self.tree = tree
        self.policy = policy
        self._realize = realize
        self._solved = solved                 # problem key → (tree, Pareto set), shared
        self.dp = TermDP(tree, sizer, policy, values)
        self.default_config = {n: ((), walk_first(tree, n)) for n, node in enumerate(tree.nodes)
                               if node.children}
        self.base = self.dp.profile_of(self.default_config)
        self._default: Realized | None = None
        self._cands: list[Candidate] | None = None
        self._least = -1
        self._realized: dict[int, Realized] = {}
        self._modelled: dict[int, int] = {}
        # without ``measure`` (no sweep to measure with) every peak is the plain model
        self.rule = peak_rule(tree) if measure and values is not None else None

    @property
    def default(self) -> Realized:
        """The unbatched realization (no loops, the unbatched walk's child order)."""
        if self._default is None:
            peak = self._model(self.default_config) if self.rule == MODELLED else None
            self._default = self._realize(self.value, self.default_config, self.base,
                                          self.base.flops, peak)
        return self._default

    @property
    def solved(self) -> bool:
        """Whether the DP has run (the least peak is known)."""
        return self._cands is not None

    def _solve(self) -> list[Candidate]:
        if self._cands is None:
            cands = sorted(self._pareto_set(),
                           key=lambda c: (c.profile.flops, c.nloops, c.peak, repr(c.config)))
            least = min(cands, key=lambda c: (c.peak, c.profile.flops))
            self._least = next(k for k, c in enumerate(cands) if c is least)
            self._cands = cands
            self.dp.memo.clear()          # the inner Pareto sets are not needed again
        return self._cands

    def _pareto_set(self) -> list[Candidate]:
        """The DP's Pareto set of the whole tree, or another term's of the same problem
        (``problem_key``) renamed to this one's labels."""
        sizer, policy = self.dp.sizer, self.dp.policy
        key = problem_key(self.tree, sizer, policy) if self._solved is not None else None
        if key is None:
            return self.dp.solve(self.tree.root)
        got = self._solved.get(key)
        if got is None:
            got = self._solved[key] = (self.tree, self.dp.solve(self.tree.root))
            return got[1]
        return relabelled(got[1], got[0], self.tree, sizer, policy)

    def _config(self, k: int) -> dict:
        config = dict(self.default_config)
        config.update({n: (o, f) for n, o, f in self._solve()[k].config})
        return config

    def _model(self, config: dict) -> int:
        """The model peak of a configuration, its kernels' scratch counted."""
        return self.dp.profile_of(config, scratch=True).peak

    def realized(self, k: int) -> Realized:
        """Candidate ``k`` (in order of preference) as a term plan with its peak (None
        passed: the planner measures it, or without a sweep takes the plain model)."""
        got = self._realized.get(k)
        if got is None:
            cands = self._solve()
            modelled = self.rule == MODELLED or (self.rule == TWICE and k != self._least)
            got = self._realized[k] = self._realize(
                self.value, self._config(k), cands[k].profile, self.base.flops,
                self.model_peak(k) if modelled else None)
        return got

    def model_peak(self, k: int) -> int:
        """Candidate ``k``'s model peak with its kernels' scratch counted."""
        got = self._modelled.get(k)
        if got is None:
            got = self._modelled[k] = self._model(self._config(k))
        return got

    @property
    def smallest(self) -> Realized:
        """The realization of least model peak without scratch (ties: fewer flops)."""
        self._solve()
        return self.realized(self._least)

    @property
    def min_peak(self) -> int:
        """The least peak the menu promises: the unbatched one or the smallest's."""
        return min(self.default[0].peak_bytes, self.smallest[0].peak_bytes)

    def known_min_peak(self) -> int | None:
        """``min_peak`` if the DP has run, else None (nothing is computed)."""
        return self.min_peak if self.solved else None

    def choose(self, budget: float, unlimited: bool = False) -> Realized | None:
        """The preferred realization within ``budget``, or None when none fits;
        ``unlimited``: the unbatched one whatever its peak."""
        tp = self.default[0]
        if unlimited or tp.peak_bytes <= budget:
            known = self.known_min_peak()
            return replace(tp, min_peak_bytes=min(tp.peak_bytes, known if known is not None
                                                  else tp.peak_bytes)), self.default[1]
        cands = self._solve()
        least = self.min_peak
        for k, c in enumerate(cands):
            if self.rule == MEASURED:
                if c.peak > 2 * budget:       # a measured peak may be well below the model
                    continue
            elif c.peak > budget or (self.rule is not None and self.model_peak(k) > budget):
                continue
            trial, loops = self.realized(k)
            if trial.peak_bytes <= budget:
                return replace(trial, min_peak_bytes=least), loops
        small = self.smallest
        if small[0].peak_bytes <= budget:   # the model ranks; a measured peak decides
            return replace(small[0], min_peak_bytes=least), small[1]
        return None
