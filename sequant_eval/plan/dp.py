"""The batched DP of one term: which loops to open at which node, in which nesting order.

The term's contraction tree is fixed (the flop-optimal binarization of the forest). Bottom
up, every node under every enclosing loop chain gets the Pareto set of its subtree's
realizations: for each choice of loops opened at the node (contracted: modes summed here;
external: modes open on the term's result), each nesting order, and each child order, the
exact memory profile (plan/profile.py) and the flops including the recompute of nodes that
sit under loops they do not carry. Candidates dominated in every level of the profile and
in flops are dropped, so the set stays small while the optimum survives. An option whose
lower bound (flops, loops, result, peak, known before its children are solved under it)
a realization already found dominates is not tried: the same Pareto set for less work.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import permutations
from math import prod

from ..errors import UnsupportedFeature
from ..expr.index import Index
from ..forest.values import TermTree, Value
from .kernels import plan_contraction
from .loops import LoopKind, Open
from .policy import BatchPolicy
from .profile import Profile, held_upto, leaf_profile, node_profile
from .regime import footprint_bytes
from .sizes import Sizer

__all__ = ["Candidate", "TermDP", "prefix_for", "walk_first", "problem_key", "relabelled"]

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


def tree_labels(tree: TermTree) -> list[Index]:
    """Every label of the tree's nodes, once each, in sorted order."""
    return sorted({ix for node in tree.nodes for ix in node.labels})


def problem_key(tree: TermTree, sizer: Sizer, policy: BatchPolicy) -> tuple | None:
    """What a term's DP depends on, up to a renaming of its labels (and spaces): the
    tree's shape, and each label's ``signature``, the nodes it is a mode of and what the
    DP reads of its space. Two trees with the same key pose the same problem, their labels
    matched signature for signature (``relabelled``): the DP reads labels only as sets and
    through their spaces' extents, blocks and batchability (kernel scratch, which depends
    on the modes' order, is not in its search: ``TermDP``), so alike terms of different
    spins (unrestricted CCSD's alpha and beta spaces at equal extents) or whose summed
    labels are named in another order share one solution. None where a label is
    composite (its size is a power mean over its protos, which the key does not hold)."""
    if any(ix.protos for ix in tree_labels(tree)):
        return None
    return (tree.root, tuple(node.children for node in tree.nodes),
            tuple(sorted(signatures(tree, sizer, policy).values())))


def signatures(tree: TermTree, sizer: Sizer, policy: BatchPolicy) -> dict[Index, tuple]:
    """Per label of a tree without composite labels: the nodes it is a mode of, and its
    space's extent, block and whether the policy batches it contracted and external."""
    return {ix: (tuple(n for n, node in enumerate(tree.nodes) if ix in node.labels),
                 sizer.extent(ix), sizer.block(ix), ix.space in policy.contracted,
                 ix.space in policy.external) for ix in tree_labels(tree)}


def relabelled(cands: list[Candidate], old: TermTree, new: TermTree, sizer: Sizer,
               policy: BatchPolicy) -> list[Candidate]:
    """``old``'s Pareto set as ``new``'s (same ``problem_key``): each opened loop's label
    replaced by the label of ``new`` with the same signature (labels of one signature,
    which the problem cannot tell apart, matched in sorted order)."""
    def matched(tree: TermTree) -> list[Index]:
        sig = signatures(tree, sizer, policy)
        return sorted(sig, key=lambda ix: (sig[ix], ix))

    rename = dict(zip(matched(old), matched(new)))
    return [Candidate(c.profile, tuple((n, tuple(Open(rename[o.label], o.kind) for o in opens),
                                        first) for n, opens, first in c.config), c.nloops)
            for c in cands]


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
    that the public methods (``combine``, ``profile_of``) spell out.

    The search leaves out what a contraction kernel allocates beside its result while it
    runs (planning a kernel for every option would cost several times the search);
    ``profile_of(..., scratch=True)`` counts it for one configuration, from the forest's
    ``values``, which is how the planner checks the realizations it tries (``TermMenu``)."""

    def __init__(self, tree: TermTree, sizer: Sizer, policy: BatchPolicy,
                 values: Sequence[Value] | None = None) -> None:
        self.tree = tree
        self.values = values                  # the forest's, for kernel scratch
        self.sizer = sizer
        self.policy = policy
        self.labels = [frozenset(node.labels) for node in tree.nodes]
        self.external = self.labels[tree.root]
        self.memo: dict[tuple[int, tuple[int, ...]], list[Candidate]] = {}
        self._level_memo: dict[tuple, list[tuple]] = {}
        self._bit = {ix: 1 << k for k, ix in enumerate(tree_labels(tree))}
        self._mask = [self._mask_of(node.labels) for node in tree.nodes]
        self._opens: list[Open] = []
        self._open_id: dict[Open, int] = {}
        self._obit: list[int] = []            # per open: its label's bit
        self._oext: list[bool] = []           # per open: external kind
        self._obatches: list[int] = []        # per open: batches of its loop
        self._footprints: dict[tuple[int, int], int] = {}
        self._scratch: dict[tuple[int, int], int] = {}
        self._full_sizes: dict[int, tuple] = {}   # per node: its labels' unsliced sizes
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

    def _sizes(self, n: int, sliced: int) -> tuple:
        """Per mode of node n's array: its size, the labels in mask ``sliced`` at block
        extent."""
        labels = self.tree.nodes[n].labels
        full = self._full_sizes.get(n)
        if full is None:
            full = self._full_sizes[n] = self.sizer.regime.label_sizes(labels)
        return tuple(self.sizer.block(ix) if self._bit[ix] & sliced else x
                     for ix, x in zip(labels, full))

    def _footprint(self, n: int, sliced: int) -> int:
        """Bytes of node n's array with the labels in mask ``sliced`` at block extent."""
        key = (n, sliced)
        got = self._footprints.get(key)
        if got is None:
            got = self._footprints[key] = footprint_bytes(self._sizes(n, sliced),
                                                          self.sizer.itemsize)
        return got

    def _kernel_scratch(self, n: int, mask: int) -> int:
        """Bytes node n's contraction kernel allocates beside its result while it runs,
        with the labels in ``mask`` at block extent (``plan/kernels.py``: a transposing copy
        of an operand, a temporary result), as the schedule charges them at its build step.
        0 where a size is composite (no kernel plan)."""
        if self.values is None:
            raise UnsupportedFeature("kernel scratch is counted only by a TermDP given the "
                                     "forest's values: TermDP(tree, sizer, policy, "
                                     "forest.values)")
        u, v = self.tree.nodes[n].children
        mask &= self._mask[n] | self._mask[u] | self._mask[v]
        key = (n, mask)
        got = self._scratch.get(key)
        if got is None:
            shapes = [self._sizes(m, mask) for m in (n, u, v)]
            got = 0
            if all(float(x).is_integer() for s in shapes for x in s):
                own, a, b = (tuple(int(x) for x in s) for s in shapes)
                value = self.values[self.tree.nodes[n].value]
                plan = plan_contraction(value, self.values[value.left.value],
                                        self.values[value.right.value], own, a, b)
                got = plan.scratch_elements * self.sizer.itemsize
            self._scratch[key] = got
        return got

    def _chain_mask(self, chain: tuple[int, ...]) -> int:
        """The labels ``chain``'s loops run over, as a mask."""
        m = 0
        for i in chain:
            m |= self._obit[i]
        return m

    def _sliced_mask(self, n: int, chain: tuple[int, ...]) -> int:
        return self._chain_mask(chain) & self._mask[n]

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

    def _subtree_flops(self, n: int) -> int:
        """The least flops of node n's subtree: every contraction once, no loop around it
        that it does not use."""
        node = self.tree.nodes[n]
        if not node.children:
            return 0
        u, v = node.children
        return self._flops(n, ()) + self._subtree_flops(u) + self._subtree_flops(v)

    def sliced(self, n: int, chain: tuple[Open, ...]) -> set[Index]:
        """Labels of node n that an enclosing loop of ``chain`` slices to a block."""
        return {o.label for o in chain if o.label in self.labels[n]}

    def combine(self, n: int, ctx: tuple[Open, ...], opens: tuple[Open, ...], first: int,
                kids: tuple[Profile, Profile], scratch: bool = False) -> Profile:
        """Node n's profile from its children's, opening ``opens`` under ``ctx`` with child
        ``first`` run first: its loops' accumulators and the per-batch part included, and
        its kernel's scratch with ``scratch``."""
        ctx, opens = self._ids(ctx), self._ids(opens)
        depth, accs, part, flops, mask = self._terms(n, ctx, self._chain_mask(ctx), opens)
        a, b = (kids[0], kids[1]) if first == 0 else (kids[1], kids[0])
        return node_profile(a, b, depth, accs, part, flops,
                            self._kernel_scratch(n, mask) if scratch else 0)

    def _terms(self, n: int, ctx: tuple[int, ...], within: int, opens: tuple[int, ...]
               ) -> tuple[int, tuple[int, ...], int, int, int]:
        """What node n adds when it opens ``opens`` under ``ctx`` (``within``: the mask of
        ``ctx``'s labels), whichever child runs first and however the children are
        realized: (depth, accumulators, per-batch part, flops), as ``node_profile`` takes
        them, and the mask of the whole chain's labels."""
        # after the j-th own loop closes the node exists in this form, allocated when that
        # block opens; consecutive external loops scatter jointly into one destination
        mine, oext, obit = self._mask[n], self._oext, self._obit
        accs, outer, mask = [], False, within
        for o in opens:
            ext = oext[o]
            accs.append(0 if outer and ext else self._footprint(n, mask & mine))
            outer = ext
            mask |= obit[o]
        part = self._footprint(n, mask & mine)
        if opens and n == self.tree.root and not ctx:
            # a term result assembled at top level is added into its equation's sum batch by
            # batch (schedule/peak.py, folded_into): no destination of its own
            accs[0] = 0
        if opens and self.policy.accumulation_factor != 1.0:
            part = int(part * self.policy.accumulation_factor)
        return len(ctx), tuple(accs), part, self._flops(n, ctx + opens), mask

    def profile_of(self, config: dict[int, tuple[tuple[Open, ...], int]],
                   n: int | None = None, ctx: tuple[Open, ...] = (),
                   scratch: bool = False) -> Profile:
        """The profile of one fixed configuration (node → (opens, first child)); with
        ``scratch``, each contraction's kernel scratch counted at its step."""
        n = self.tree.root if n is None else n
        node = self.tree.nodes[n]
        if not node.children:
            return leaf_profile(len(ctx), self.sizer.bytes(node.labels, self.sliced(n, ctx)))
        opens, first = config.get(n, ((), walk_first(self.tree, n)))
        chain = ctx + opens
        kids = tuple(self.profile_of(config, c, prefix_for(chain, self.labels[c]), scratch)
                     for c in node.children)
        return self.combine(n, ctx, opens, first, kids, scratch)

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
        got = self._solve(n, self._ids(ctx))
        self._level_memo.clear()
        return got

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
        found: list[tuple] = []
        # (flops, loops, result, peak) of the realizations found so far that hold nothing
        # outside their own level: what ``_bounded_out`` compares an option's bound with
        front: list[tuple] = []
        least = self._subtree_flops(u) + self._subtree_flops(v)
        within = self._chain_mask(ctx)
        for opens in options:
            chain = ctx + opens
            depth, accs, part, flops, mask = self._terms(n, ctx, within, opens)
            if front and self._bounded_out(front, u, v, mask, accs, part, flops + least,
                                           len(opens)):
                continue
            inner = depth + len(accs)
            lu = self._levels_of(u, self._prefix(chain, self._mask[u]), depth, inner)
            lv = self._levels_of(v, self._prefix(chain, self._mask[v]), depth, inner)
            spelled = tuple(self._opens[i] for i in opens)
            got = _pairings(lu, lv, depth, accs, part, flops, len(opens),
                            ((n, spelled, 0),) if opens or default_first else (),
                            ((n, spelled, 1),) if opens or not default_first else (),
                            default_first)
            front += [(g[0], g[1], g[5], g[3][-1]) for g in got
                      if not any(g[3][:-1]) and not any(g[4])]
            found += got
        result = [Candidate(Profile(pk, hold, res, fl), config, nl)
                  for fl, nl, _, pk, hold, res, config in _pareto(found)]
        self.memo[key] = result
        return result

    def _bounded_out(self, front: list[tuple], u: int, v: int, mask: int,
                     accs: tuple[int, ...], part: int, flops: int, nloops: int) -> bool:
        """Whether a realization found earlier dominates every realization of an option
        (its children ``u``, ``v`` under a chain slicing the labels in ``mask``), told
        before the children are solved under it. Every one of the option's realizations
        has at least ``flops`` (the node's and each child contraction once), ``nloops``
        loops, its result (``accs[0]`` or ``part``: fixed by the option) and, at its own
        level, a peak of at least both children's results (as sliced by the chain) with
        its per-batch part and accumulators; at the outer levels and in what it holds
        there, at least 0. So a realization found earlier that holds nothing outside its
        own level and is no worse in those four numbers dominates them all. It also sorts
        before them at a tie, so the Pareto set is the same as without the test
        (transitivity: what would drop them drops it first). On CCSDT it skips about half
        the options; with it the DP takes about a third of its former time."""
        res = accs[0] if accs else part
        top = (self._footprint(u, mask & self._mask[u])
               + self._footprint(v, mask & self._mask[v]) + part + sum(accs))
        for kf, kn, kr, kt in front:
            if kf <= flops and kn <= nloops and kr <= res and kt <= top:
                return True
        return False

    def _levels_of(self, n: int, ctx: tuple[int, ...], depth: int, inner: int) -> list[tuple]:
        """``_levels`` of node n's Pareto set under ``ctx`` (remembered: the parent's loop
        choices with the same prefix over n pair the same set)."""
        key = (n, ctx, depth, inner)
        got = self._level_memo.get(key)
        if got is None:
            got = self._level_memo[key] = _levels(self._solve(n, ctx), depth, inner)
        return got


def _levels(cands: list[Candidate], depth: int, inner: int) -> list[tuple]:
    """Per candidate, what pairing it reads at levels 0..inner: its peaks (0 past its own
    levels), what it holds once its steps up to each level are done (``held_upto``), the
    same one level shifted, and what it leaves live at each level above ``depth``."""
    out = []
    for c in cands:
        p = c.profile
        pk, hold, nh = p.pk, p.hold, len(p.hold)
        peaks = list(pk) + [0] * (inner + 1 - len(pk))
        held = held_upto(p, inner)
        kept = tuple(hold[d] if d < nh else (p.res if d == nh else 0) for d in range(depth))
        out.append((peaks, held, [0] + held[:-1], kept, p.flops, c.config, c.nloops))
    return out


def _pairings(lu: list[tuple], lv: list[tuple], depth: int, accs: tuple[int, ...],
              part: int, flops: int, nopen: int, mine_u: tuple, mine_v: tuple,
              default_first: int) -> list[tuple]:
    """Every pairing of the children's realizations (their ``_levels``) at a node, child
    ``u`` run first and child ``v`` run first (``combine_held``'s rule, both orders from
    one pass), as ``(flops, loops, peak, pk, hold, res, config)`` in the order the DP lists
    them: the default order's pairings, then the other's. A pairing in the other order whose every
    level's peak is no lower than the same pairing's in the default order is left out:
    it ties that twin in flops, loops, holds and result and sorts after it, so the Pareto
    filter would drop it."""
    inner = depth + len(accs)
    acc, run = [0] * (inner + 1), 0
    for d in range(depth + 1, inner + 1):
        run += accs[d - depth - 1]
        acc[d] = run
    tail = part + run
    res = accs[0] if accs else part
    lower, upper = range(depth), range(depth, inner + 1)
    first, other = [], []
    for pu, hu, su, ku, flu, gu, nu in lu:
        for pv, hv, sv, kv, flv, gv, nv in lv:
            a, b = [], []
            for d in lower:
                x, y = pu[d] + sv[d], hu[d] + pv[d]
                a.append(x if x > y else y)
                x, y = pv[d] + su[d], hv[d] + pu[d]
                b.append(x if x > y else y)
            top_a = top_b = hu[inner] + hv[inner] + tail
            for d in upper:
                x, y = pu[d] + sv[d], hu[d] + pv[d]
                x = (x if x > y else y) + acc[d]
                if x > top_a:
                    top_a = x
                x, y = pv[d] + su[d], hv[d] + pu[d]
                x = (x if x > y else y) + acc[d]
                if x > top_b:
                    top_b = x
            a.append(top_a)
            b.append(top_b)
            hold = tuple(x + y for x, y in zip(ku, kv)) if ku else ()
            fl, nl, config = flu + flv + flops, nu + nv + nopen, gu + gv
            (pd, gd), (po, go) = ((a, mine_u), (b, mine_v)) if default_first == 0 else \
                ((b, mine_v), (a, mine_u))
            pd, po = tuple(pd), tuple(po)
            first.append((fl, nl, max(pd), pd, hold, res, config + gd))
            if po != pd and any(x < y for x, y in zip(po, pd)):
                other.append((fl, nl, max(po), po, hold, res, config + go))
    return first + other


def _pareto(cands: list[tuple]) -> list[tuple]:
    """Candidates ``(flops, loops, peak, pk, hold, res, config)`` no kept one dominates
    (``Profile.dominates`` with no more loops), in order of (flops, loops, peak), ties in
    the order given; the dominance test spelled out on plain tuples."""
    cands = sorted(cands, key=operator.itemgetter(0, 1, 2))
    kept: list[tuple] = []
    le = operator.le
    for c in cands:
        flops, nloops, _, pk, hold, res, _ = c
        for kf, kn, _, kpk, khold, kr, _ in kept:
            if (kf <= flops and kn <= nloops and kr <= res and all(map(le, kpk, pk))
                    and all(map(le, khold, hold))):
                break
        else:
            kept.append(c)
    return kept
