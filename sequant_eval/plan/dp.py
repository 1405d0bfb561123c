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

import operator
from dataclasses import dataclass
from itertools import permutations
from math import prod

from ..expr.index import Index
from ..forest.values import TermTree
from .loops import LoopKind, Open
from .policy import BatchPolicy
from .profile import Profile, combine_held, held_upto, leaf_profile, node_profile
from .regime import footprint_bytes
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
    nesting and child order.

    Internally a loop a node may open is a small integer (an index into ``self.opens``) and
    a set of labels a bit mask, so the DP's inner loop hashes tuples of integers; footprints
    are remembered per (node, sliced labels). The results are those of the plain rules
    that the public methods (``combine``, ``profile_of``) spell out."""

    def __init__(self, tree: TermTree, sizer: Sizer, policy: BatchPolicy) -> None:
        self.tree = tree
        self.sizer = sizer
        self.policy = policy
        self.labels = [frozenset(node.labels) for node in tree.nodes]
        self.external = self.labels[tree.root]
        self.memo: dict[tuple[int, tuple[int, ...]], list[Candidate]] = {}
        every = sorted({ix for node in tree.nodes for ix in node.labels})
        self._bit = {ix: 1 << k for k, ix in enumerate(every)}
        self._mask = [self._mask_of(node.labels) for node in tree.nodes]
        self._opens: list[Open] = []
        self._open_id: dict[Open, int] = {}
        self._obit: list[int] = []            # per open: its label's bit
        self._oext: list[bool] = []           # per open: external kind
        self._obatches: list[int] = []        # per open: batches of its loop
        self._footprints: dict[tuple[int, int], int] = {}
        self._full_flops: dict[int, int] = {}
        self._menu: dict[int, tuple[list[int], list[int]]] = {}   # node → (contracted, external)

    # -- integer views ------------------------------------------------------------------------
    def _mask_of(self, labels) -> int:
        m = 0
        for ix in labels:
            m |= self._bit.get(ix, 0)
        return m

    def _oid(self, o: Open) -> int:
        k = self._open_id.get(o)
        if k is None:
            k = self._open_id[o] = len(self._opens)
            self._opens.append(o)
            self._obit.append(self._bit.get(o.label, 0))
            self._oext.append(o.kind is LoopKind.EXTERNAL)
            self._obatches.append(self.sizer.nbatches(o.label))
        return k

    def _ids(self, chain: tuple[Open, ...]) -> tuple[int, ...]:
        return tuple(self._oid(o) for o in chain)

    def _footprint(self, n: int, sliced: int) -> int:
        """Bytes of node n's array with the labels in mask ``sliced`` at block extent."""
        key = (n, sliced)
        got = self._footprints.get(key)
        if got is None:
            labels = self.tree.nodes[n].labels
            full = self.sizer.regime.label_sizes(labels)
            sizes = [self.sizer.block(ix) if self._bit[ix] & sliced else x
                     for ix, x in zip(labels, full)]
            got = self._footprints[key] = footprint_bytes(sizes, self.sizer.itemsize)
        return got

    def _sliced_mask(self, n: int, chain: tuple[int, ...]) -> int:
        m = 0
        for i in chain:
            m |= self._obit[i]
        return m & self._mask[n]

    def _prefix(self, chain: tuple[int, ...], mask: int) -> tuple[int, ...]:
        for k in range(len(chain) - 1, -1, -1):
            if self._obit[chain[k]] & mask:
                return chain[: k + 1]
        return ()

    # -- shared pieces ------------------------------------------------------------------------
    def involved(self, n: int) -> frozenset[Index]:
        """Labels of node n's two children: every mode its contraction runs over."""
        u, v = self.tree.nodes[n].children
        return self.labels[u] | self.labels[v]

    def contraction_flops(self, n: int, chain: tuple[Open, ...]) -> int:
        """2·multiply-adds of node n, times the batches of enclosing loops it does not use."""
        return self._flops(n, self._ids(chain))

    def _flops(self, n: int, chain: tuple[int, ...]) -> int:
        full = self._full_flops.get(n)
        if full is None:
            full = self._full_flops[n] = 2 * prod(self.sizer.sizes(sorted(self.involved(n))))
        u, v = self.tree.nodes[n].children
        involved = self._mask[u] | self._mask[v]
        for i in chain:
            if not self._obit[i] & involved:
                full *= self._obatches[i]
        return full

    def sliced(self, n: int, chain: tuple[Open, ...]) -> set[Index]:
        """Labels of node n that an enclosing loop of ``chain`` slices to a block."""
        return {o.label for o in chain if o.label in self.labels[n]}

    def combine(self, n: int, ctx: tuple[Open, ...], opens: tuple[Open, ...], first: int,
                kids: tuple[Profile, Profile]) -> Profile:
        """Node n's profile from its children's, opening ``opens`` under ``ctx`` with child
        ``first`` run first: its loops' accumulators and the per-batch part included."""
        return self._combine(n, self._ids(ctx), self._ids(opens), first, kids)

    def _combine(self, n: int, ctx: tuple[int, ...], opens: tuple[int, ...], first: int,
                 kids: tuple[Profile, Profile]) -> Profile:
        depth, accs, part, flops = self._node_terms(n, ctx, opens)
        a, b = (kids[0], kids[1]) if first == 0 else (kids[1], kids[0])
        return node_profile(a, b, depth, accs, part, flops)

    def _node_terms(self, n: int, ctx: tuple[int, ...], opens: tuple[int, ...]
                    ) -> tuple[int, tuple[int, ...], int, int]:
        """What node n adds when it opens ``opens`` under ``ctx``, whichever child runs
        first and however the children are realized: (depth, accumulators, per-batch part,
        flops), as ``node_profile`` takes them."""
        chain = ctx + opens
        part = self._footprint(n, self._sliced_mask(n, chain))
        # after the j-th own loop closes the node exists in this form, allocated when that
        # block opens; consecutive external loops scatter jointly into one destination
        depth = len(ctx)
        accs = tuple(0 if j and self._oext[opens[j - 1]] and self._oext[opens[j]]
                     else self._footprint(n, self._sliced_mask(n, chain[: depth + j]))
                     for j in range(len(opens)))
        if opens and n == self.tree.root and not ctx:
            # a term result assembled at top level is added into its equation's sum batch by
            # batch (schedule/peak.py, folded_into): no destination of its own
            accs = (0,) + accs[1:]
        if opens and self.policy.accumulation_factor != 1.0:
            part = int(part * self.policy.accumulation_factor)
        return depth, accs, part, self._flops(n, chain)

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
        return [self._opens[i] for i in self._candidates(n, self._ids(ctx))]

    def _candidates(self, n: int, ctx: tuple[int, ...]) -> list[int]:
        if len(ctx) >= self.policy.max_loops:
            return []
        menu = self._menu.get(n)
        if menu is None:
            involved = self.involved(n)
            contracted = [self._oid(Open(ix, LoopKind.CONTRACTED))
                          for ix in sorted(involved - self.labels[n])
                          if (not ix.protos and ix.space in self.policy.contracted
                              and self.sizer.nbatches(ix) > 1)]
            external = [self._oid(Open(ix, LoopKind.EXTERNAL))
                        for ix in sorted(self.labels[n] & self.external)
                        if (not ix.protos and ix.space in self.policy.external
                            and self.sizer.nbatches(ix) > 1)]
            menu = self._menu[n] = (contracted, external)
        taken = 0
        for i in ctx:
            taken |= self._obit[i]
        return menu[0] + [i for i in menu[1] if not self._obit[i] & taken]

    def solve(self, n: int, ctx: tuple[Open, ...] = ()) -> list[Candidate]:
        """The Pareto set of node n's subtree under the enclosing chain ``ctx`` (memoized): every
        choice of opens, nesting and child order, dominated ones dropped."""
        return self._solve(n, self._ids(ctx))

    def _solve(self, n: int, ctx: tuple[int, ...]) -> list[Candidate]:
        key = (n, ctx)
        got = self.memo.get(key)
        if got is not None:
            return got
        node = self.tree.nodes[n]
        if not node.children:
            size = self._footprint(n, self._sliced_mask(n, ctx))
            result = [Candidate(leaf_profile(len(ctx), size), (), 0)]
            self.memo[key] = result
            return result
        cands = self._candidates(n, ctx)
        room = self.policy.max_loops - len(ctx)
        options = [()] + [p for r in range(1, min(room, len(cands)) + 1)
                          for p in permutations(cands, r)]
        default_first = walk_first(self.tree, n)
        u, v = node.children
        found: list[Candidate] = []
        for opens in options:
            chain = ctx + opens
            fu = self._solve(u, self._prefix(chain, self._mask[u]))
            fv = self._solve(v, self._prefix(chain, self._mask[v]))
            spelled = tuple(self._opens[i] for i in opens)
            depth, accs, part, flops = self._node_terms(n, ctx, opens)
            inner = depth + len(accs)
            hu = [held_upto(c.profile, inner) for c in fu]
            hv = [held_upto(c.profile, inner) for c in fv]
            nopen = len(opens)
            for first in (default_first, 1 - default_first):
                mine = ((n, spelled, first),) if opens or first != default_first else ()
                for cu, su in zip(fu, hu):
                    pu, gu, lu = cu.profile, cu.config, cu.nloops + nopen
                    for cv, sv in zip(fv, hv):
                        if first == 0:
                            prof = combine_held(pu, su, cv.profile, sv, depth, accs, part,
                                                flops)
                        else:
                            prof = combine_held(cv.profile, sv, pu, su, depth, accs, part,
                                                flops)
                        found.append(Candidate(prof, gu + cv.config + mine, lu + cv.nloops))
        result = _pareto(found)
        self.memo[key] = result
        return result


def _pareto(cands: list[Candidate]) -> list[Candidate]:
    """Candidates no kept one dominates (``Profile.dominates`` with no more loops), in order
    of (flops, loops, peak); the dominance test spelled out on plain tuples."""
    cands = sorted(cands, key=lambda c: (c.profile.flops, c.nloops, c.peak))
    kept: list[Candidate] = []
    keys: list[tuple] = []
    le = operator.le
    for c in cands:
        p = c.profile
        pk, hold, res, flops, nloops = p.pk, p.hold, p.res, p.flops, c.nloops
        for kf, kn, kr, kpk, khold in keys:
            if (kf <= flops and kn <= nloops and kr <= res and all(map(le, kpk, pk))
                    and all(map(le, khold, hold))):
                break
        else:
            kept.append(c)
            keys.append((flops, nloops, res, pk, hold))
    return kept
