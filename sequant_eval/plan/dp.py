"""The batched DP of one term: which loops to open at which node, in which nesting order.

The term's contraction tree is fixed (the flop-optimal binarization of the forest). Bottom
up, every node under every enclosing loop chain gets the Pareto set of its subtree's
realizations: for each choice of loops opened at the node (contracted: modes summed here;
external: modes open on the term's result), each nesting order, and each child order, the
exact memory profile (plan/profile.py) and the flops including the recompute of nodes that
sit under loops they do not carry. Candidates dominated in every level of the profile and
in flops are dropped, so the set stays small while the optimum survives.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from math import prod

from ..expr.index import Index
from ..forest.values import TermTree
from .loops import LoopKind, Open
from .policy import BatchPolicy
from .profile import Profile, leaf_profile, node_profile
from .sizes import Sizer

__all__ = ["Candidate", "TermDP", "prefix_for", "walk_first"]

Config = tuple[tuple[int, tuple[Open, ...], int], ...]   # (node, opens, first child)


@dataclass(frozen=True)
class Candidate:
    """One realization of a subtree under an enclosing loop chain: its memory profile, flops
    and opened loops."""

    profile: Profile
    config: Config            # only nodes that open loops or deviate from the default order
    nloops: int

    @property
    def peak(self) -> int:
        """The profile's peak over all levels."""
        return self.profile.peak


def prefix_for(chain: tuple[Open, ...], labels: frozenset[Index]) -> tuple[Open, ...]:
    """The part of ``chain`` that encloses a child: up to the innermost loop slicing it."""
    for k in range(len(chain) - 1, -1, -1):
        if chain[k].label in labels:
            return chain[: k + 1]
    return ()


def walk_first(tree: TermTree, n: int) -> int:
    """The unbatched walk's child order: an intermediate before a leaf, else left first."""
    u, v = tree.nodes[n].children
    return 1 if (not tree.nodes[u].children and tree.nodes[v].children) else 0


class TermDP:
    """The per-term dynamic program over (node, enclosing loop chain) choosing loops,
    nesting and child order."""

    def __init__(self, tree: TermTree, sizer: Sizer, policy: BatchPolicy) -> None:
        self.tree = tree
        self.sizer = sizer
        self.policy = policy
        self.labels = [frozenset(node.labels) for node in tree.nodes]
        self.external = self.labels[tree.root]
        self.memo: dict[tuple[int, tuple[Open, ...]], list[Candidate]] = {}

    # -- shared pieces ------------------------------------------------------------------------
    def involved(self, n: int) -> frozenset[Index]:
        """Labels of node n's two children: every mode its contraction runs over."""
        u, v = self.tree.nodes[n].children
        return self.labels[u] | self.labels[v]

    def contraction_flops(self, n: int, chain: tuple[Open, ...]) -> int:
        """2·multiply-adds of node n, times the batches of enclosing loops it does not use."""
        involved = self.involved(n)
        full = 2 * prod(self.sizer.sizes(sorted(involved)))
        return full * prod(self.sizer.nbatches(o.label) for o in chain
                           if o.label not in involved)

    def sliced(self, n: int, chain: tuple[Open, ...]) -> set[Index]:
        """Labels of node n that an enclosing loop of ``chain`` slices to a block."""
        return {o.label for o in chain if o.label in self.labels[n]}

    def combine(self, n: int, ctx: tuple[Open, ...], opens: tuple[Open, ...], first: int,
                kids: tuple[Profile, Profile]) -> Profile:
        """Node n's profile from its children's, opening ``opens`` under ``ctx`` with child
        ``first`` run first: its loops' accumulators and the per-batch part included."""
        chain = ctx + opens
        labels = self.tree.nodes[n].labels
        part = self.sizer.bytes(labels, self.sliced(n, chain))
        # after the j-th own loop closes the node exists in this form, allocated when that
        # block opens; consecutive external loops scatter jointly into one destination
        accs = tuple(0 if j and opens[j - 1].kind is opens[j].kind is LoopKind.EXTERNAL
                     else self.sizer.bytes(labels, self.sliced(n, chain[: len(ctx) + j]))
                     for j in range(len(opens)))
        if opens and n == self.tree.root and not ctx:
            # a term result assembled at top level is added into its equation's sum batch by
            # batch (schedule/peak.py, folded_into): no destination of its own
            accs = (0,) + accs[1:]
        if opens and self.policy.accumulation_factor != 1.0:
            part = int(part * self.policy.accumulation_factor)
        a, b = (kids[0], kids[1]) if first == 0 else (kids[1], kids[0])
        return node_profile(a, b, len(ctx), accs, part, self.contraction_flops(n, chain))

    def profile_of(self, config: dict[int, tuple[tuple[Open, ...], int]],
                   n: int | None = None, ctx: tuple[Open, ...] = ()) -> Profile:
        """The profile of one fixed configuration (node → (opens, first child))."""
        n = self.tree.root if n is None else n
        node = self.tree.nodes[n]
        if not node.children:
            return leaf_profile(len(ctx), self.sizer.bytes(node.labels, self.sliced(n, ctx)))
        opens, first = config.get(n, ((), walk_first(self.tree, n)))
        chain = ctx + opens
        kids = tuple(self.profile_of(config, c, prefix_for(chain, self.labels[c]))
                     for c in node.children)
        return self.combine(n, ctx, opens, first, kids)

    # -- the DP -------------------------------------------------------------------------------
    def candidates(self, n: int, ctx: tuple[Open, ...]) -> list[Open]:
        """Loops node n may open under ``ctx``: summed modes (contracted) and the term's open
        modes not yet looped (external), in batchable spaces of more than one batch."""
        out = []
        if len(ctx) >= self.policy.max_loops:
            return out
        taken = {o.label for o in ctx}
        involved = self.involved(n)
        for ix in sorted(involved - self.labels[n]):
            if (not ix.protos and ix.space in self.policy.contracted
                    and self.sizer.nbatches(ix) > 1):
                out.append(Open(ix, LoopKind.CONTRACTED))
        for ix in sorted(self.labels[n] & self.external):
            if (not ix.protos and ix.space in self.policy.external and ix not in taken
                    and self.sizer.nbatches(ix) > 1):
                out.append(Open(ix, LoopKind.EXTERNAL))
        return out

    def solve(self, n: int, ctx: tuple[Open, ...] = ()) -> list[Candidate]:
        """The Pareto set of node n's subtree under the enclosing chain ``ctx`` (memoized): every
        choice of opens, nesting and child order, dominated ones dropped."""
        key = (n, ctx)
        if key in self.memo:
            return self.memo[key]
        node = self.tree.nodes[n]
        if not node.children:
            size = self.sizer.bytes(node.labels, self.sliced(n, ctx))
            result = [Candidate(leaf_profile(len(ctx), size), (), 0)]
            self.memo[key] = result
            return result
        cands = self.candidates(n, ctx)
        room = self.policy.max_loops - len(ctx)
        options = [()] + [p for r in range(1, min(room, len(cands)) + 1)
                          for p in permutations(cands, r)]
        default_first = walk_first(self.tree, n)
        found: list[Candidate] = []
        for opens in options:
            chain = ctx + opens
            fronts = [self.solve(c, prefix_for(chain, self.labels[c])) for c in node.children]
            for first in (default_first, 1 - default_first):
                for cu in fronts[0]:
                    for cv in fronts[1]:
                        prof = self.combine(n, ctx, opens, first, (cu.profile, cv.profile))
                        mine = ((n, opens, first),) if opens or first != default_first else ()
                        found.append(Candidate(prof, cu.config + cv.config + mine,
                                               cu.nloops + cv.nloops + len(opens)))
        result = _pareto(found)
        self.memo[key] = result
        return result


def _pareto(cands: list[Candidate]) -> list[Candidate]:
    cands = sorted(cands, key=lambda c: (c.profile.flops, c.nloops, c.peak))
    kept: list[Candidate] = []
    for c in cands:
        if not any(k.profile.dominates(c.profile) and k.nloops <= c.nloops for k in kept):
            kept.append(c)
    return kept
