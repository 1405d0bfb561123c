"""The search over merge orders for :func:`~sequant_eval.expr.factor.factor_common`.

Merging the group with the largest saving first can hand a term to one group that another
group needed more (in closed-shell CCSD a ``g·t2·t2`` ring term is left with nobody once its
t1-dressed partners join the t1 group). The search keeps a few plans: each is extended by
its best few merges and the cheapest few distinct plans survive (width 1 is the greedy
merge). A plan's W's are placeholders until the search is done; then they are interned.
The functions take the factoring state of ``factor.py`` (its readings, costs, merges).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from math import prod

from .terms import Product, Tensor

__all__ = ["HOLDER", "Plan", "search", "plan_terms", "paired"]

#: Placeholder names of W's not yet interned (no tensor is named so).
HOLDER = "\u2047W"


@dataclass(frozen=True)
class Plan:
    """One state of the merge search: the terms, their mirror partners, the W's made so
    far ``(placeholder, content, indices, build flops)`` and the flops of it all."""

    terms: tuple[Product, ...]
    partner: tuple[int, ...] | None
    pending: tuple
    cost: int


def search(state, terms, partner, externals, mirror, limit, width: int) -> Plan:
    """The cheapest merge sequence found by a beam search of ``width`` (1: greedy): at
    every step each kept plan is extended by its ``width`` best merges, and the ``width``
    cheapest distinct results are kept."""
    start = Plan(tuple(terms), None if partner is None else tuple(partner), (), 0)
    start = replace(start, cost=plan_cost(state, start, externals))
    beam, best, seq = [start], start, 0
    while beam:
        children = []
        for plan in beam:
            for members, twin in moves(state, plan, externals, mirror, limit)[:width]:
                children.append((applied(state, plan, members, twin, externals), seq))
                seq += 1
        if not children:
            break
        children.sort(key=lambda c: (c[0].cost, c[1]))
        seen, beam = set(), []
        for child, _ in children:           # one plan per set of merges, whatever order
            sig = signature(child)
            if sig not in seen:
                seen.add(sig)
                beam.append(child)
            if len(beam) == width:
                break
        if beam[0].cost < best.cost:
            best = beam[0]
    return best


def moves(state, plan: Plan, externals, mirror, limit) -> list:
    """Profitable merges of ``plan``'s terms, best first: (members, twin)."""
    terms, partner = list(plan.terms), plan.partner
    groups: dict[tuple, list] = {}
    for k, p in enumerate(terms):
        for key, cand in state.candidates(k, p, externals):
            groups.setdefault(key, []).append(cand)
    found = []
    for key in sorted(groups):
        members = groups[key]
        if prod(state.size(ix) for ix in members[0].interface) > limit:
            continue
        twin = None
        if partner is not None:
            twin_key = state.mirror_key(members[0], mirror, externals)
            if twin_key != key:
                members, twin = paired(members, groups.get(twin_key, []), list(partner))
        if len(members) < 2:
            continue
        gain = state.gain(terms, members, externals)
        if twin:
            gain += state.gain(terms, twin, externals, made=True)
        if gain > 0:
            found.append((-gain, len(found), members, twin))
    found.sort(key=lambda f: f[:2])
    return [(m, t) for _, _, m, t in found]


def plan_cost(state, plan: Plan, externals) -> int:
    """Flops of the plan's terms (each in its best order) and of building its W's."""
    return (sum(state.cost(p.factors, externals) for p in plan.terms)
            + sum(build for *_, build in plan.pending))


def applied(state, plan: Plan, members, twin, externals) -> Plan:
    """``plan`` with one merge (and its mirror twin) made; its cost updated by the terms
    gone, the terms made and the W's built."""
    terms, partner, pending = state.merge(list(plan.terms), plan.partner, members, twin,
                                         plan.pending)
    gone = list(members) + list(twin or ())
    made = terms[len(plan.terms) - len(gone):]
    cost = (plan.cost - sum(c.own for c in gone) + sum(
        state.cost(p.factors, externals) for p in made)
        + sum(build for *_, build in pending[len(plan.pending):]))
    return Plan(tuple(terms), None if partner is None else tuple(partner), pending, cost)


def plan_terms(state, plan: Plan) -> list[Product]:
    """The plan's terms with every placeholder W interned (defined, or found equal to
    an earlier one up to the order of its indices)."""
    real: dict[str, tuple[str, tuple[int, ...]]] = {}
    for holder, content, iface, _ in plan.pending:
        real[holder] = state.intern(list(content), iface)
    out = []
    for p in plan.terms:
        factors = []
        for t in p.factors:
            if t.name in real:
                name, order = real[t.name]
                t = Tensor(name, tuple(t.bra[order[m]] for m in range(len(order))))
            factors.append(t)
        out.append(Product(p.coefficient, tuple(factors)))
    return out


def signature(plan: Plan) -> tuple:
    """The plan's terms with each placeholder W spelled as its content: equal for two
    plans that made the same merges in another order."""
    content = {holder: body for holder, body, _, _ in plan.pending}
    return frozenset(Counter(
        (p.coefficient, tuple((content.get(t.name, t.name), t.bra, t.ket) for t in p.factors))
        for p in plan.terms).items())


def paired(members: list, twins: list, partner: list[int]):
    """A group and its mirror group with each member's image in the other: members whose
    image is not in the twin group (or that are their own image) are left out."""
    by_term = {c.term: c for c in twins}
    mine, theirs, used = [], [], set()
    for c in members:
        j = partner[c.term]
        if c.term in used or j in used or j == c.term or j not in by_term:
            continue
        mine.append(c)
        theirs.append(by_term[j])
        used |= {c.term, j}
    return mine, theirs
