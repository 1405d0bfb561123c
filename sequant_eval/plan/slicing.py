"""Inner sums sliced by one shared loop, so no inner sum is held whole.

An antisymmetrized group of terms (``A{...} * ...``) is summed into an inner sum ``S``
that the equation reads through every permutation of the group (``R3`` reads ``R3:A1`` 36
times). Held whole, ``S`` is as large as the result. Sliced, every term of ``S`` opens one
external loop over the same mode of ``S`` as its outermost loop; the loops are tied into
one physical loop, so each batch of ``S`` is summed from its terms' batches inside that
loop and added, through each permutation, into the result's region of that batch — then
released. ``S`` costs one batch, and each of its terms' results a batch of that loop.

``slice_sums`` rewrites a plan: for each inner sum it can slice (read only by entries of
equation sums, every entry a term), the mode of its largest batchable space is sliced with
that space's block; in each term, the loops over the label at that mode are replaced by
one outermost loop on it. Operands of a term without that label are then made outside the
loop (once), as for any external loop at a term's root.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from ..forest.values import Forest, ValueKind
from .kernels import COPY_FLOPS
from .loops import Loop, LoopKind
from .planner import BatchPlan
from .sizes import Sizer

__all__ = ["SlicedSum", "slice_sums", "sliceable_sums", "orient_sums", "MODES"]

#: An inner sum is sliced on at most this many modes (the first of each of its largest
#: batchable spaces: for a triples residual one virtual and one occupied mode).
MODES = 2


@dataclass(frozen=True)
class SlicedSum:
    """An inner sum sliced on ``modes`` (outermost first) by tied loops: ``loops[k]`` are
    entry ``k``'s, one per mode; entry 0's name the physical loops."""

    value: int
    modes: tuple[int, ...]
    loops: tuple[tuple[int, ...], ...]


def sliceable_sums(forest: Forest, policy) -> dict[int, int]:
    """Inner sum value → the mode to slice it on: sums that are not equation results, read
    only by sums, whose entries are all terms read through distinct values, with a mode in
    a space the policy may batch as external (the largest such space, first mode of it)."""
    roots = {r.value for r in forest.roots}
    readers: dict[int, set[int]] = {}
    for v in forest.values:
        for e in v.entries:
            readers.setdefault(e.value, set()).add(v.id)
        if v.kind is ValueKind.CONTRACT:
            for op in (v.left, v.right):
                readers.setdefault(op.value, set()).add(v.id)
    out = {}
    for v in forest.values:
        if v.kind is not ValueKind.SUM or v.id in roots or not v.entries:
            continue
        if any(forest.values[r].kind is not ValueKind.SUM for r in readers.get(v.id, ())):
            continue
        terms = [e.value for e in v.entries]
        if len(set(terms)) != len(terms) or any(t not in forest.trees for t in terms):
            continue
        modes = [k for k, s in enumerate(v.spaces) if s in policy.external]
        if modes:
            out[v.id] = modes[0]
    return out


def _modes(forest: Forest, sid: int, policy, sizer: Sizer) -> tuple[int, ...]:
    """The modes an inner sum is sliced on: the first mode of each batchable space, the
    largest space first (at most ``MODES``)."""
    first: dict[str, int] = {}
    for k, sp in enumerate(forest.values[sid].spaces):
        if sp in policy.external:
            first.setdefault(sp, k)
    ranked = sorted(first.items(), key=lambda kv: (-sizer.regime.plain(kv[0]), kv[1]))
    return tuple(k for _, k in ranked[:MODES])


def _symmetries(forest: Forest, sid: int) -> list[tuple[tuple[int, ...], int]]:
    """The permutations ``g`` of the inner sum's modes that its readers cannot tell apart
    up to a sign: every reading entry's permutation composed with ``g`` is a reading
    entry's too, with the weight times ``sign``. (An antisymmetrizer's group: ``sign`` is
    the parity.) Returns ``(g, sign)`` pairs, the identity first."""
    reads = {}
    for v in forest.values:
        for e in v.entries:
            if e.value == sid:
                reads[(v.id, e.perm)] = reads.get((v.id, e.perm), 0) + e.coefficient
    out = []
    for (_, g) in reads:
        sign = None
        for (r, p), w in reads.items():
            q = tuple(g[p[k]] for k in range(len(p)))
            got = reads.get((r, q))
            if got is None or got not in (w, -w) or (sign is not None and got != sign * w):
                sign = 0
                break
            sign = 1 if got == w else -1
        if sign:
            out.append((g, sign))
    ident = tuple(range(len(forest.values[sid].spaces)))
    return sorted(out, key=lambda gs: gs[0] != ident)


def _recompute(tree, labels, sizer: Sizer) -> float:
    """Flops of a term's contractions times the batches of the tied loops over ``labels``
    each does not carry (inside the tied loops, such a node is made again every batch),
    plus, at the kernel model's price of a copied entry, the entries of each input block
    read whole again in every batch of a tied loop over a label it does not carry (a
    triples amplitude read once per batch of a label only a Fock factor has)."""
    total = 0.0
    for node in tree.nodes:
        again = prod(sizer.nbatches(ix) for ix in labels if ix not in node.labels)
        if not node.children:           # an input block: read whole in every such batch
            total += COPY_FLOPS * prod(sizer.extent(ix) for ix in node.labels) * (again - 1)
            continue
        seen = set(node.labels).union(*(tree.nodes[c].labels for c in node.children))
        total += prod(sizer.extent(ix) for ix in seen) * again
    return total


def orient_sums(forest: Forest, policy, extents) -> Forest:
    """``forest`` with every sliceable inner sum's terms turned, within the symmetry of its
    readers (``_symmetries``: an antisymmetrizer's permutations, with their signs), so the
    labels at the sliced modes are the ones the term's costly contractions and large input
    blocks carry — the least work made again inside the tied loops (``_recompute``: flops,
    and input entries read whole again at ``COPY_FLOPS`` each; without that price a
    triples amplitude was read whole in every batch of a label only a Fock factor has,
    and CCSDT at 10 % ran 2.1× its unbatched time). The results are unchanged: a term
    added through ``g`` with the sign of ``g`` is read by the equation as before."""
    from ..forest.values import SumEntry

    chosen = sliceable_sums(forest, policy)
    if not chosen:
        return forest
    sizer = Sizer(extents, policy)
    values = list(forest.values)
    changed = False
    for sid in sorted(chosen):
        modes = _modes(forest, sid, policy, sizer)
        syms = _symmetries(forest, sid)
        if len(syms) < 2:
            continue
        entries = []
        for e in forest.values[sid].entries:
            tree = forest.trees[e.value]
            root = tree.nodes[tree.root].labels
            best = None
            for g, sign in syms:
                perm = tuple(e.perm[g[k]] for k in range(len(g)))
                cost = _recompute(tree, [root[perm[m]] for m in modes], sizer)
                if best is None or cost < best[0]:
                    best = (cost, perm, sign)
            entries.append(SumEntry(e.coefficient * best[2], e.value, best[1]))
            changed |= best[1] != e.perm
        values[sid] = replace(values[sid], entries=tuple(entries))
    return replace(forest, values=tuple(values)) if changed else forest


def slice_sums(forest: Forest, plan: BatchPlan, extents) -> BatchPlan:
    """``plan`` with every sliceable inner sum sliced (see the module docstring); a term
    read by two sliced sums, or by a sliced one and another sum, keeps its own loops."""
    chosen = sliceable_sums(forest, plan.policy)
    if not chosen:
        return plan
    sizer = Sizer(extents, plan.policy)
    for v in list(chosen):
        chosen[v] = _modes(forest, v, plan.policy, sizer)
    users: dict[int, int] = {}
    for v in forest.values:
        for e in v.entries:
            users[e.value] = users.get(e.value, 0) + 1
    by_term = {tp.value: k for k, tp in enumerate(plan.terms)}
    terms = list(plan.terms)
    loops = list(plan.loops)
    sliced = []
    for sid, modes in sorted(chosen.items()):
        entries = forest.values[sid].entries
        if any(users[e.value] != 1 or e.value not in by_term for e in entries):
            continue
        tied = []
        for e in entries:
            k = by_term[e.value]
            tp = terms[k]
            root = tp.tree.root
            labels = [tp.tree.nodes[root].labels[e.perm[m]] for m in modes]
            lids = []
            for label in labels:
                lids.append(len(loops))
                loops.append(Loop(lids[-1], label.space, LoopKind.EXTERNAL,
                                  sizer.block(label), sizer.extent(label),
                                  sizer.nbatches(label), (tp.value, root), label))
            opens = [tuple(l for l in o if loops[l].label not in labels) for o in tp.opens]
            opens[root] = tuple(lids) + opens[root]
            terms[k] = replace(tp, opens=tuple(opens))
            tied.append(tuple(lids))
        sliced.append(SlicedSum(sid, modes, tuple(tied)))
    if not sliced:
        return plan
    return replace(plan, terms=tuple(terms), loops=tuple(loops), sliced=tuple(sliced))
