"""Binarize every product and intern all nodes into one forest.

Each product is split into binary contractions in an order that minimizes flops for the given
extents (opt_einsum's optimal search for small products, its dynamic program for larger ones).
Every contraction is then interned by a canonical key: label numbers are assigned by first
appearance over (left operand, right operand), and of the two operand orders the smaller key
wins. The key therefore ignores dummy names, operand order and result-mode order; the value's
mode layout is its result labels in key-number order (left operand's free modes, then the
right's), which is also the layout a GEMM produces without a final transpose.

A factor naming an index twice is a leaf holding its diagonal (``Value.diagonal``); an index
summed inside one factor is contracted with the reserved all-ones leaf (``ONES``), so both
are planned and batched as leaves and binary contractions.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from collections.abc import Mapping, Sequence
from fractions import Fraction

import opt_einsum

from ..errors import UnknownSpace, UnsupportedFeature
from ..expr.index import Index, mode_space
from ..expr.terms import Equation, Product, Tensor, index_counts, operator_terms
from .values import (ONES, Forest, Occurrence, Operand, Root, SumEntry, TermNode, TermTree,
                     Value, ValueKind)

__all__ = ["build_forest", "mode_extent"]

_OPTIMAL_UP_TO = 5  # operands; beyond this opt_einsum's exhaustive search gets slow


def mode_extent(space: str, extents: Mapping[str, int]) -> int:
    """Extent of a mode space; a composite ``a<k>`` without its own entry is sized as ``a``."""
    if space in extents:
        return extents[space]
    base = space.split("<", 1)[0]
    if base in extents:
        return extents[base]
    raise KeyError(space)


class _Interner:
    def __init__(self, extents: Mapping[str, int]) -> None:
        self.extents = extents
        self.values: list[Value] = []
        self.keys: dict[tuple, int] = {}
        self.binary_contractions = 0
        self.leaf_users: dict[int, str] = {}

    def _add(self, key: tuple, make) -> int:
        vid = self.keys.get(key)
        if vid is None:
            vid = len(self.values)
            self.values.append(make(vid))
            self.keys[key] = vid
        return vid

    def leaf(self, t: Tensor, where: str) -> Occurrence:
        """A use of tensor ``t``; an index repeated in its slots makes the leaf its
        diagonal (one mode per distinct index, first appearance order)."""
        if t.name == ONES:
            raise UnsupportedFeature(f"{where}: tensor name {ONES!r} is reserved (the all-ones "
                                     f"factor of sums inside one factor); rename the tensor")
        labels = tuple(dict.fromkeys(t.slots))
        diagonal = () if len(labels) == len(t.slots) else tuple(
            labels.index(ix) for ix in t.slots)
        composite = [ix for ix in labels if ix.protos and t.slots.count(ix) > 1]
        if composite:
            raise UnsupportedFeature(
                f"{where}: composite index {composite[0]} labels two slots of {t.name} (a "
                f"diagonal over a composite space); diagonals are taken over plain indices "
                f"only: rename one slot's index and add a delta factor, or write the "
                f"diagonal out as its own tensor")
        spaces = tuple(mode_space(ix) for ix in labels)
        groups = _groups(labels)
        vid = self._add(("leaf", t.name, spaces, groups, diagonal),
                        lambda i: Value(i, ValueKind.LEAF, spaces, tensor=t.name, groups=groups,
                                        diagonal=diagonal))
        self.leaf_users.setdefault(vid, where)
        return Occurrence(vid, labels)

    def ones(self, ix: Index) -> Occurrence:
        """The all-ones vector over ``ix``'s space: ``T{a,b}`` summed over ``b`` inside the
        factor is ``T{a,b} * 1{b}``, a contraction the planner batches like any other."""
        spaces, groups = (mode_space(ix),), _groups((ix,))
        vid = self._add(("leaf", ONES, spaces, groups, ()),
                        lambda i: Value(i, ValueKind.LEAF, spaces, tensor=ONES, groups=groups))
        self.leaf_users.setdefault(vid, "the sum inside a factor")
        return Occurrence(vid, (ix,))

    def contract_ordered(self, x: Occurrence, y: Occurrence,
                         keep: set[Index]) -> tuple[Occurrence, bool]:
        """Intern ``x·y``; also say whether ``y`` became the value's left operand."""
        self.binary_contractions += 1
        orders = ((x, y), (y, x))
        keys = [_contract_key(a, b, keep) for a, b in orders]
        pick = 0 if keys[0] <= keys[1] else 1
        key, numbering = keys[pick], _numbering(*orders[pick])
        label_of = {n: ix for ix, n in numbering.items()}
        labels = tuple(label_of[n] for n in key[5])
        spaces = tuple(mode_space(ix) for ix in labels)
        vid = self._add(key, lambda i: Value(
            i, ValueKind.CONTRACT, spaces, left=Operand(key[1], key[2]),
            right=Operand(key[3], key[4]), result=key[5], groups=_groups(labels)))
        return Occurrence(vid, labels), pick == 1

    def sum(self, name: str, spaces: tuple[str, ...], entries: dict,
            groups: tuple[int, ...] = ()) -> int:
        kept = [(v, p, c) for (v, p), c in entries.items() if c != 0]
        # entries reading one value are added one after another (first appearance order),
        # so a term result read by several entries (mirror terms) is freed after the last
        first: dict[int, int] = {}
        for v, _, _ in kept:
            first.setdefault(v, len(first))
        kept.sort(key=lambda e: first[e[0]])
        merged = tuple(SumEntry(c, v, p) for v, p, c in kept)
        vid = len(self.values)
        self.values.append(Value(vid, ValueKind.SUM, spaces, entries=merged, name=name,
                                 groups=groups))
        return vid

    def size(self, ix: Index, where: str) -> int:
        """Extent for the path search (a composite: its mean domain size, rounded)."""
        try:
            if ix.protos and hasattr(self.extents, "label_sizes"):
                return max(1, round(self.extents.label_sizes([ix])[0]))
            if hasattr(self.extents, "plain"):
                return self.extents.plain(mode_space(ix))
            return mode_extent(mode_space(ix), self.extents)
        except KeyError:
            raise UnknownSpace(f"index {ix} in {where}: space {ix.space!r} has no extent "
                               f"(known spaces: {', '.join(self.extents) or 'none'})") from None


def _groups(labels) -> tuple[int, ...]:
    """Per mode: -1 for a plain index, else the position of the first composite mode with
    the same proto set (composite modes sharing protos are sized together)."""
    protos = [ix.protos for ix in labels]
    return tuple(-1 if not p else protos.index(p) for p in protos)


def _numbering(a: Occurrence, b: Occurrence) -> dict[Index, int]:
    numbers: dict[Index, int] = {}
    for occ in (a, b):
        for ix in occ.labels:
            for p in ix.protos:
                numbers.setdefault(p, len(numbers))
            numbers.setdefault(ix, len(numbers))
    return numbers


def _contract_key(a: Occurrence, b: Occurrence, keep: set[Index]) -> tuple:
    n = _numbering(a, b)
    result = tuple(sorted(n[ix] for ix in keep))
    protos = tuple(sorted((n[ix], tuple(n[p] for p in ix.protos)) for ix in n if ix.protos))
    return ("contract", a.value, tuple(n[ix] for ix in a.labels),
            b.value, tuple(n[ix] for ix in b.labels), result, protos)


def _operands(interner: _Interner, product: Product, result: tuple[Index, ...],
              where: str) -> tuple[list[Occurrence], tuple[Index, ...], list[frozenset]]:
    """The product's factors as leaf occurrences in canonical order (an index summed
    inside one factor paired with an all-ones leaf), the labels in the order the path
    search names them, and per occurrence where it comes from (its factor's position, or
    the summed index of an all-ones leaf) as a one-element set."""
    leaves = [interner.leaf(t, where) for t in product.factors]
    origins = [frozenset([k]) for k in range(len(leaves))]
    order = _canonical_positions(leaves, result)
    occs, origins = [leaves[k] for k in order], [origins[k] for k in order]
    for ix in index_counts(product):
        interner.size(ix, where)
    counts = Counter(ix for o in occs for ix in o.labels)     # factors, not slots
    lonely = sorted(ix for ix, c in counts.items() if c == 1 and ix not in result)
    if lonely:      # summed inside one factor: contracted with the all-ones vector
        occs = occs + [interner.ones(ix) for ix in lonely]
        origins = origins + [frozenset([str(ix)]) for ix in lonely]
        order = _canonical_positions(occs, result)
        occs, origins = [occs[k] for k in order], [origins[k] for k in order]
    return occs, tuple(counts), origins


def _binarize(interner: _Interner, occs: list[Occurrence], labels: tuple[Index, ...],
              result: tuple[Index, ...], where: str, origins: Sequence[frozenset] = (),
              prefix: Sequence[tuple[frozenset, frozenset]] = ()) -> TermTree:
    """The term's binary tree: the ``prefix`` joins first (each names its two operands by
    the factors they are made of, ``origins`` saying that of each leaf), then
    opt_einsum's path for the rest."""
    occs = list(occs)
    made = list(origins)
    nodes: list[TermNode] = [TermNode(o.value, o.labels) for o in occs]
    ids = list(range(len(occs)))     # node index of each pending operand

    def join(kx: int, ky: int, rest: Sequence[Occurrence]) -> tuple[Occurrence, int]:
        x, y = nodes[kx].occurrence, nodes[ky].occurrence
        occ, swapped = interner.contract_ordered(x, y, _needed(x, y, rest, result))
        # children in the value's canonical operand order (left, right)
        nodes.append(TermNode(occ.value, occ.labels, (ky, kx) if swapped else (kx, ky)))
        return occ, len(nodes) - 1

    def walk(path) -> None:
        for step in path:
            picked = [ids[k] for k in step]
            if made:
                made.append(frozenset().union(*(made[k] for k in step)))
            for k in sorted(step, reverse=True):
                del occs[k]
                del ids[k]
                if made:
                    del made[k]
            while len(picked) > 2:  # opt_einsum may merge three at once; split left-deep
                kx, ky = picked.pop(0), picked.pop(0)
                rest = [nodes[k].occurrence for k in picked] + occs
                picked.insert(0, join(kx, ky, rest)[1])
            occ, k = join(picked[0], picked[1], occs)
            occs.append(occ)
            ids.append(k)

    for x, y in prefix:
        walk([(made.index(x), made.index(y))])
    if len(occs) == 2:                   # one way to join two: no path search
        walk([(0, 1)])
    elif len(occs) > 2:
        walk(_path(interner, occs, labels, result, where)[0])
    return TermTree(where, tuple(nodes), len(nodes) - 1 if len(nodes) > 1 else 0)


def _path(interner: _Interner, occs: Sequence[Occurrence], labels: tuple[Index, ...],
          result: Sequence[Index], where: str) -> tuple[list[tuple[int, ...]], int]:
    """opt_einsum's contraction path for ``occs`` (optimal for a few operands) and its flop
    count, the labels named in the order ``labels`` gives them.

    The path optimizer and the flop count are called directly, with the index sets and
    sizes ``contract_path`` would hand them (so the same path and count): what
    ``contract_path`` adds, an einsum string parsed back and a printable summary of every
    step, cost more than the search for a term of a few factors."""
    if len(occs) < 2:
        return [], 0
    symbols = {ix: opt_einsum.get_symbol(k) for k, ix in enumerate(labels)}
    sets = [frozenset(symbols[ix] for ix in o.labels) for o in occs]
    output = frozenset(symbols[ix] for ix in result)
    sizes = {symbols[ix]: int(interner.size(ix, where)) for o in occs for ix in o.labels}
    if len(occs) == 2:
        path = [(0, 1)]
    else:
        search = opt_einsum.paths.get_path_fn(
            "optimal" if len(occs) <= _OPTIMAL_UP_TO else "dp")
        path = search(sets, output, sizes, None)
    cost = 0
    for step in path:
        step = tuple(sorted(step, reverse=True))
        _, sets, removed, involved = opt_einsum.helpers.find_contraction(step, sets, output)
        cost += opt_einsum.helpers.flop_count(involved, bool(removed), len(step), sizes)
    return list(path), cost


def _cost(interner: _Interner, occs: Sequence[Occurrence], labels: tuple[Index, ...],
          result: Sequence[Index], where: str) -> int:
    """opt_einsum's flop count of contracting ``occs`` to ``result`` along its path."""
    return _path(interner, occs, labels, result, where)[1]


def _shared_prefixes(interner: _Interner, terms: Sequence[tuple]) -> list[list[tuple]]:
    """Per term, the joins to make before its own path search so that a sub-product common
    to several terms is computed once (each join names its operands by their factors).

    ``terms`` holds ``(occs, labels, result, where, origins)`` per term. Greedy, most
    widely shared pair first (ties by key, so deterministic): a pair of operands whose
    contraction has the same interning key in several terms is joined first in each term
    where that lowers the term's flops, the pair's own flops counted once over the terms
    that take it. Without this, each term's path is optimal alone and a value every term
    could read (the triples ``t2·g`` of (T)) is built by none."""
    ops = [list(t[0]) for t in terms]
    made = [list(t[4]) for t in terms]
    prefixes: list[list[tuple]] = [[] for _ in terms]
    cost = [_cost(interner, o, t[1], t[2], t[3]) for o, t in zip(ops, terms)]
    rejected: set[tuple] = set()
    found: dict[tuple, dict[int, tuple[int, int]]] = {}     # key → term → its first pair
    pairs: list[dict[tuple, tuple[int, int]]] = [{} for _ in terms]

    def index(n: int) -> None:       # (re)compute term n's pair keys; only it changed
        for key in pairs[n]:
            del found[key][n]
        o, t = ops[n], terms[n]
        pairs[n] = {}
        for p in range(len(o)):
            for q in range(p + 1, len(o)):
                rest = o[:p] + o[p + 1:q] + o[q + 1:]
                keep = _needed(o[p], o[q], rest, t[2])
                key = min(_contract_key(o[p], o[q], keep), _contract_key(o[q], o[p], keep))
                pairs[n].setdefault(key, (p, q))
        for key, pq in pairs[n].items():
            found.setdefault(key, {})[n] = pq

    for n in range(len(terms)):
        index(n)
    while True:
        shared = [k for k, where in found.items() if len(where) > 1 and k not in rejected]
        if not shared:
            return prefixes
        key = min(shared, key=lambda k: (-len(found[k]), k))
        takers = dict(found[key])
        merged = {}
        for n, (p, q) in takers.items():
            o, t = ops[n], terms[n]
            rest = o[:p] + o[p + 1:q] + o[q + 1:]
            keep = tuple(ix for ix in t[1] if ix in _needed(o[p], o[q], rest, t[2]))
            pair = _cost(interner, [o[p], o[q]], t[1], keep, t[3])
            after = _cost(interner, rest + [Occurrence(-1, keep)], t[1], t[2], t[3])
            merged[n] = (pair, after)
        taken = set(takers)
        while True:      # the pair's cost shared by the terms that take it
            now = {n for n in taken if merged[n][0] / len(taken) + merged[n][1] < cost[n]}
            if now == taken or not now:
                taken = now
                break
            taken = now
        if len(taken) < 2:
            rejected.add(key)
            continue
        for n in sorted(taken):
            p, q = takers[n]
            o, t, m = ops[n], terms[n], made[n]
            rest = o[:p] + o[p + 1:q] + o[q + 1:]
            occ, _ = interner.contract_ordered(o[p], o[q], _needed(o[p], o[q], rest, t[2]))
            ops[n] = rest + [occ]
            prefixes[n].append((m[p], m[q]))
            made[n] = m[:p] + m[p + 1:q] + m[q + 1:] + [m[p] | m[q]]
            cost[n] = merged[n][1]
            index(n)


def _canonical_positions(occs: list[Occurrence], result: tuple[Index, ...]) -> list[int]:
    """Sort factors by a label-free signature so that equal products tie-break alike.

    The path search breaks ties by operand position; without this, a relabeled copy of a term
    with its factors in another order could binarize differently and miss the sharing.
    A factor's signature is its value and, per slot, whether the label is external or which
    (value, slot) pairs of the other factors it is shared with.
    """
    where: dict[Index, list[tuple[int, int]]] = {}
    for occ in occs:
        for slot, ix in enumerate(occ.labels):
            where.setdefault(ix, []).append((occ.value, slot))
    external = set(result)

    def signature(occ: Occurrence) -> tuple:
        slots = []
        for slot, ix in enumerate(occ.labels):
            if ix in external:
                slots.append((0,))
            else:
                slots.append((1, *sorted(p for p in where[ix] if p != (occ.value, slot))))
        return (occ.value, tuple(slots))

    return sorted(range(len(occs)), key=lambda k: signature(occs[k]))


def _needed(x: Occurrence, y: Occurrence, rest: Sequence[Occurrence],
            result: tuple[Index, ...]) -> set[Index]:
    later = set(result).union(*(o.labels for o in rest)) if rest else set(result)
    return (set(x.labels) | set(y.labels)) & later


def _perm_to(occ: Occurrence, result: tuple[Index, ...]) -> tuple[int, ...]:
    return tuple(occ.labels.index(ix) for ix in result)


def build_forest(equations: Sequence[Equation], extents,
                 share_subproducts: bool = False) -> Forest:
    """Binarize and intern ``equations`` into one forest (one SUM root per equation).

    ``extents`` maps space → extent, or is a Regime (composite modes then sized by their
    domains' mean for the path search). With ``share_subproducts``, sub-products common to several
    terms are joined first where that lowers the summed flops (:func:`_shared_prefixes`);
    without it each term's path is the cheapest for that term alone."""
    interner = _Interner(extents)
    prefixes = _prefixes(extents, equations) if share_subproducts else {}
    roots = []
    trees: dict[int, TermTree] = {}
    for eq in equations:
        result = eq.indices
        spaces = tuple(mode_space(ix) for ix in result)
        direct: dict[tuple[int, tuple[int, ...]], Fraction] = {}
        groups: dict[tuple, dict] = {}
        for k, product in enumerate(eq.terms, start=1):
            where = f"term {k} of {eq.name}"
            if product.coefficient == 0:
                continue
            if not product.factors:
                raise UnsupportedFeature(f"{where} is a bare number; constant terms are not "
                                         f"supported")
            occs, labels, origins = _operands(interner, product, result, where)
            tree = _binarize(interner, occs, labels, result, where, origins,
                             prefixes.get(where, ()))
            occ = tree.root_occurrence
            trees.setdefault(occ.value, tree)
            expansion = tuple(operator_terms(product.operators, result))
            target = direct if len(expansion) == 1 and expansion[0][0] == 1 else (
                groups.setdefault(expansion, {}))
            slot = (occ.value, _perm_to(occ, result))
            target[slot] = target.get(slot, Fraction(0)) + product.coefficient
        for g, (expansion, entries) in enumerate(groups.items(), start=1):
            inner = interner.sum(f"{eq.name}:A{g}", spaces, entries, _groups(result))
            for w, perm in expansion:
                slot = (inner, perm)
                direct[slot] = direct.get(slot, Fraction(0)) + w
        roots.append(Root(eq.name, interner.sum(eq.name, spaces, direct, _groups(result)),
                          result))
    used = {e.value for v in interner.values if v.kind is ValueKind.SUM for e in v.entries}
    trees = {v: t for v, t in trees.items() if v in used}   # terms that cancelled are gone
    values = _entries_in_walk_order(interner.values, roots)
    return Forest(tuple(values), tuple(roots), interner.binary_contractions,
                  interner.leaf_users, trees)


def _prefixes(extents, equations: Sequence[Equation]) -> dict[str, list]:
    """:func:`_shared_prefixes` over every term of ``equations``, keyed by term name,
    worked out on a scratch interner (the forest itself is then built in the usual order,
    so with no join taken it is the forest built without sharing)."""
    scratch = _Interner(extents)
    terms, names = [], []
    for eq in equations:
        for k, product in enumerate(eq.terms, start=1):
            where = f"term {k} of {eq.name}"
            if product.coefficient == 0 or not product.factors:
                continue
            occs, labels, origins = _operands(scratch, product, eq.indices, where)
            terms.append((occs, labels, eq.indices, where, origins))
            names.append(where)
    return dict(zip(names, _shared_prefixes(scratch, terms)))


def _entries_in_walk_order(values: list[Value], roots: list[Root]) -> list[Value]:
    """Each sum's entries in the order a demand-driven walk completes their values.

    A term result that is also an intermediate of an earlier entry's term (equations from
    other generators share such values far apart in the text) is then added as soon as it
    exists instead of being kept alive until its own entry comes up; entries reading one
    value stay adjacent. The order is a function of the forest alone."""
    done: dict[int, int] = {}

    def walk(root: int) -> None:
        stack = [(root, False)]
        while stack:
            v, expanded = stack.pop()
            if v in done:
                continue
            if expanded:
                done[v] = len(done)
                continue
            stack.append((v, True))
            stack.extend((c, False) for c in reversed(values[v].children))

    for r in roots:
        walk(r.value)
    out = list(values)
    for v in values:
        if v.kind is ValueKind.SUM and v.id in done:
            ordered = sorted(v.entries, key=lambda e: done.get(e.value, len(done)))
            out[v.id] = replace(v, entries=tuple(ordered))
    return out
