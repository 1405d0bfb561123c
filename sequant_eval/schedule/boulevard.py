"""Static points and loop identity over the whole forest → RichSchedule.

Every form gets a static point: the position at which a demand-driven walk of the forest
(equations in order, sum entries in order, operands in the planned child order) first
completes it; for no loops this is exactly the unbatched walk. Loops of different terms
are fused into one physical loop when they slice the same form in the same way, so the
form is built once per batch for all its users, unless a rule of ``fusable`` refuses it
or the schedule could not be sequenced.
"""
from __future__ import annotations

import heapq
from collections import defaultdict

from ..errors import ScheduleError
from ..forest.values import Forest
from ..plan.loops import Loop
from ..plan.planner import BatchPlan
from .forms import Form, FormBytes, FormKind, build_forms, drop_unread, reachable
from .fusable import Checker, UnionFind, pairs_of, try_fuse
from .ordered import build_ordered_schedule
from .rich import RichSchedule, readers_and_order

__all__ = ["compute_dag_boulevard"]


def _key(form: Form, find, canon: list[int], alias: dict[int, int]) -> tuple[tuple, tuple]:
    """A form's interning key under the loop classes ``find`` and the canonical ids
    ``canon`` of the forms before it (a non-leaf reads its operands through ``alias``: a
    leaf fetched per term is its block's first fetch), and its canonical operands."""
    operands = tuple(canon[o] for o in form.operands)
    reads = operands if form.kind is FormKind.LEAF else tuple(alias.get(o, o) for o in operands)
    key = (form.kind, form.value, tuple(sorted((p, find(l)) for p, l in form.sliced)),
           tuple(find(l) for l in form.partial), tuple(find(l) for l in form.scope), reads,
           canon[form.source] if form.source >= 0 else -1,
           find(form.via) if form.via >= 0 else -1, form.owner,
           tuple(find(l) for l in form.also))
    return key, operands


def _canonical(forms: list[Form], uf: UnionFind) -> tuple[list[int], list[Form]]:
    """Rewrite forms with surviving loop ids, merge the ones that became equal.

    With no loop fused the forms are already canonical (``build_forms`` shares and drops
    by the same keys), so they are returned as they are."""
    if all(uf.find(l) == l for l in uf.parent):
        return list(range(len(forms))), list(forms)
    f = uf.find
    canon: list[int] = []
    out: list[Form] = []
    index: dict[tuple, int] = {}
    alias: dict[int, int] = {}        # leaf fetched per term → first fetch of that block
    shared = _SharedFetches()
    for form in forms:
        key, operands = _key(form, f, canon, alias)
        leaf = form.kind is FormKind.LEAF
        if key not in index:
            _, _, sliced, partial, scope, _, source, via, _, also = key
            operands = shared.reads(form, key, operands)
            index[key] = len(out)
            out.append(Form(len(out), form.kind, form.value, form.term, sliced, partial, scope,
                            operands, source, via, form.first, form.owner, also))
            if leaf:
                alias[index[key]] = index.setdefault(key[:8] + (-1,) + key[9:], index[key])
                shared.fetched(index[key], key)
        canon.append(index[key])
    return _drop_unread(canon, out)


class _SharedFetches:
    """One fetch for the per-term copies of a block read inside one fused loop.

    A whole input block is fetched per term (``forms.build_forms``: not held from one
    term to the next), outside the loops of the term that reads it. When fusion puts the
    loops of several terms into one, each copy would be fetched before that loop and held
    through all of it: the same block several times at once. Readers inside the same
    outermost loop read the first copy instead, and the others are dropped as unread."""

    def __init__(self) -> None:
        self.bare: dict[int, tuple] = {}        # per-term copy → its key without the term
        self.first: dict[tuple, int] = {}       # (key without the term, loop) → first copy

    def fetched(self, k: int, key: tuple) -> None:
        """Canonical form ``k`` with ``key`` is a leaf; remember it if it is a copy."""
        if key[8] >= 0:
            self.bare[k] = key[:8] + key[9:]

    def reads(self, form: Form, key: tuple, operands: tuple[int, ...]) -> tuple[int, ...]:
        """``form``'s canonical operands with a copy read inside a loop replaced by the
        first copy read inside that loop."""
        scope = key[4]
        if form.kind is FormKind.LEAF or not scope or not any(o in self.bare
                                                              for o in operands):
            return operands
        return tuple(self.first.setdefault((self.bare[o], scope[0]), o)
                     if o in self.bare else o for o in operands)


def _canonical_ids(forms: list[Form], uf: UnionFind) -> list[int]:
    """``_canonical(forms, uf)[0]`` without building the rewritten forms: the same keys as
    tuples (fusion compares operands by these ids after every fusion it keeps)."""
    f = uf.find
    leaf = FormKind.LEAF
    canon: list[int] = []
    index: dict[tuple, int] = {}
    alias: dict[int, int] = {}
    links: list[tuple[int, ...]] = []      # per new form: what it reads (operands, source)
    sums: list[int] = []
    shared = _SharedFetches()
    for form in forms:
        key, operands = _key(form, f, canon, alias)
        source = key[6]
        k = index.get(key)
        if k is None:
            k = index[key] = len(links)
            links.append(shared.reads(form, key, operands) + ((source,) if source >= 0 else ()))
            if form.kind is FormKind.SUM:
                sums.append(k)
            if form.kind is leaf:
                alias[k] = index.setdefault(key[:8] + (-1,) + key[9:], k)
                shared.fetched(k, key)
        canon.append(k)
    keep = reachable(sums, links.__getitem__)        # drop_unread, on the links alone
    new = {old: n for n, old in enumerate(sorted(keep))}
    return [new.get(c, -1) for c in canon]


def _drop_unread(canon: list[int], forms: list[Form]) -> tuple[list[int], list[Form]]:
    new, out = drop_unread(forms, [f.id for f in forms if f.kind is FormKind.SUM])
    return [new.get(c, -1) for c in canon], out


def _shape(form: Form) -> tuple:
    return (form.kind, form.value, tuple(p for p, _ in form.sliced), len(form.partial),
            len(form.scope), len(form.span))


def _tied(plan: BatchPlan) -> UnionFind:
    """Every loop its own, but the loops an inner sum is sliced by: one (``plan.sliced``)."""
    uf = UnionFind(l.id for l in plan.loops)
    for s in plan.sliced:
        for lids in s.loops[1:]:
            for a, b in zip(s.loops[0], lids):
                uf.union(a, b)
    return uf


class _Canon:
    """Canonical ids (as ``_canonical_ids``, before unread forms are dropped, up to a
    renaming of the ids) for a prefix of the forms, kept up to date as fusion proceeds.

    Ids are hash-consed: a key keeps the id it was first given, so a form whose key did
    not change keeps its id. A fusion changes the keys of the forms that involve a loop
    whose representative changed; only those are keyed again, and then the readers of
    each one whose id changed (in form order: a key reads its operands' ids). Forms are
    keyed only as far as the walk has reached. Ids are compared only for equality, which
    the renaming keeps."""

    def __init__(self, forms: list[Form], uf: UnionFind) -> None:
        self.forms = forms
        self.uf = uf
        self.uses: dict[int, list[int]] = defaultdict(list)     # loop → forms keyed by it
        self.readers: dict[int, list[int]] = defaultdict(list)  # form → forms reading it
        for form in forms:
            loops = form.loops() | set(form.also) | ({form.via} if form.via >= 0 else set())
            for l in loops:
                self.uses[l].append(form.id)
            for o in set(form.operands) | ({form.source} if form.source >= 0 else set()):
                self.readers[o].append(form.id)
        self.canon: list[int] = []
        self.index: dict[tuple, int] = {}
        self.alias: dict[int, int] = {}
        self.stale: list[int] = []                 # heap of keyed forms to key again

    def _id(self, pos: int) -> int:
        key, _ = _key(self.forms[pos], self.uf.find, self.canon, self.alias)
        index = self.index
        k = index.get(key)
        if k is None:
            k = index[key] = len(index)
            if self.forms[pos].kind is FormKind.LEAF:
                bare = key[:8] + (-1,) + key[9:]
                if bare not in index:
                    index[bare] = k
                self.alias[k] = index[bare]
        return k

    def ids(self, upto: int) -> list[int]:
        """Canonical ids of forms 0..upto (at least)."""
        canon, stale = self.canon, self.stale
        while stale and stale[0] <= upto:          # those beyond upto wait for a later call
            pos = heapq.heappop(stale)
            while stale and stale[0] == pos:
                heapq.heappop(stale)
            k = self._id(pos)
            if k != canon[pos]:
                canon[pos] = k
                for r in self.readers.get(pos, ()):
                    if r < len(canon):
                        heapq.heappush(stale, r)
        for pos in range(len(canon), upto + 1):
            canon.append(self._id(pos))
        return canon

    def fused(self, new: UnionFind, changed: list[int]) -> None:
        """Move to ``new`` (a fusion kept, ``changed`` the loops whose representative it
        changed): the keyed forms that involve one of them are keyed again when next
        asked for."""
        self.uf = new
        n = len(self.canon)
        for l in changed:
            for pos in self.uses.get(l, ()):
                if pos < n:
                    heapq.heappush(self.stale, pos)


def _fuse(forms: list[Form], loops, accept, start: UnionFind | None = None,
          alone: frozenset[int] = frozenset(), veto: frozenset = frozenset(),
          kept: list | None = None, begin: int = 0) -> UnionFind:
    """Greedy fusion in form order; ``accept`` may veto a fusion the cheap checks allow.
    Loops of the terms in ``alone`` (the terms of sliced inner sums) are not fused with
    other terms' loops: inside the tied loop each term's batch is added into the inner
    sum as soon as it is made, not held until a fused block has made its neighbours'.
    ``veto``: (form, other) pairs not to fuse; ``kept``, when given, receives (form, other)
    for every fusion kept, in order (``_replayed`` makes the state after any of them).
    ``begin``: the forms
    before it are only seen, not fused (``start`` is what fusing them gave)."""
    uf = start.copy() if start is not None else UnionFind(l.id for l in loops)
    checker = canon = None                 # made when a first pair of forms is compared
    seen: dict[tuple, list[Form]] = defaultdict(list)
    for form in forms:
        if not (form.scope or form.span):
            continue
        if form.id < begin:
            seen[_shape(form)].append(form)
            continue
        for other in seen[_shape(form)]:
            if other.term == form.term or other.term in alone or form.term in alone:
                continue
            if (form.id, other.id) in veto:
                continue
            if canon is None:
                checker, canon = Checker(forms, loops, uf), _Canon(forms, uf)
            ids = canon.ids(form.id)
            if [ids[o] for o in other.operands] != [ids[o] for o in form.operands]:
                continue
            if other.source >= 0 and ids[other.source] != ids[form.source]:
                continue
            trial = try_fuse(form, other, loops, uf, checker)
            if trial is not None and accept(trial):
                canon.fused(trial, checker.moved(trial))
                uf = trial
                if kept is not None:
                    kept.append((form.id, other.id))
                break
        seen[_shape(form)].append(form)
    return uf


def _fuse_checked(forms: list[Form], loops, blame, start: UnionFind,
                  alone: frozenset[int], first: tuple | None = None) -> UnionFind:
    """Greedy fusion in which every kept fusion leaves the schedule sequencable, found by
    bisection instead of checking each fusion: fuse everything the rules allow; if the
    result cannot be sequenced, find the first kept fusion after which it cannot
    (``_first_failing``), refuse that one, and fuse again. The same result as
    checking each kept fusion as it is made wherever a state that cannot be sequenced stays
    so as fusions are added. ``blame(uf)``: None where ``uf``'s schedule is sequencable,
    else the loops the sequencer's refusal names. After a refusal fusion resumes at the
    refused fusion's form from the state before it: the fusions before it are the ones a
    fresh pass would keep again. ``first``: the unchecked pass from ``start`` already made
    and found unsequencable (its state, kept fusions and the loops named), not made
    again."""
    if blame(start) is not None:        # (rare) check each fusion as it is made
        return _fuse(forms, loops, lambda uf: blame(uf) is None, start, alone)
    veto: set = set()
    base, begin = start, 0              # a sequencable state, and the form fusion resumes at
    while True:
        if first is not None:
            (uf, kept, named), first = first, None
        else:
            kept = []
            uf = _fuse(forms, loops, lambda uf: True, base, alone, frozenset(veto), kept,
                       begin)
            named = blame(uf) if kept else None
            if named is None:
                return uf
        hi = _first_failing(
            len(kept), _suspects(forms, kept, uf, named),
            lambda n, base=base, kept=kept: blame(_replayed(forms, base, kept[:n])) is None)
        veto.add(kept[hi - 1])
        base = _replayed(forms, base, kept[: hi - 1])
        begin = kept[hi - 1][0]


def _suspects(forms: list[Form], kept: list, failed: UnionFind,
              named: tuple[int, ...]) -> list[int]:
    """The positions in ``kept`` of the fusions (form, other) that joined a loop of the
    classes the sequencer's refusal of ``failed`` (the state after all of them) names."""
    named_set = {failed.find(l) for l in named}
    return [k for k, (a, b) in enumerate(kept)
            if any(failed.find(x) in named_set for x, _ in pairs_of(forms[a], forms[b]))]


#: Suspects tried as pivots, the latest first, before plain bisection.
_PIVOTS = 2


def _first_failing(n: int, suspects: list[int], ok) -> int:
    """The least ``m`` with ``ok(m)`` false, given ``ok(0)`` true and ``ok(n)`` false: after
    how many of ``n`` fusions, made in turn, the schedule cannot be sequenced. A
    bisection whose first pivots are the latest ``_PIVOTS`` suspects (``_suspects``): the
    fusion to blame is usually the last that joined the loop the refusal names, found
    in two checks instead of log2(n). Where ``ok`` is monotone (what bisection assumes)
    the answer is bisection's: every check keeps ``ok(lo)`` true and ``ok(hi)`` false."""
    lo, hi = 0, n
    tried = 0
    for k in reversed(suspects):
        if tried == _PIVOTS or hi - lo <= 1:
            break
        if not lo <= k < hi:
            continue
        tried += 1
        if k > lo and not ok(k):        # to blame is an earlier fusion
            hi = k
            continue
        lo = k
        if k + 1 < hi:
            if ok(k + 1):
                lo = k + 1
            else:
                hi = k + 1
        break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return hi


def _replayed(forms: list[Form], start: UnionFind, fusions) -> UnionFind:
    """``start`` with the fusions (form, other) made in turn: the state ``_fuse`` reached
    after them (rebuilt rather than kept, so a pass holds one state, not one per fusion)."""
    uf = start.copy()
    for a, b in fusions:
        for x, y in pairs_of(forms[a], forms[b]):
            uf.union(x, y)
    return uf


def _ordered(rich: RichSchedule):
    """The sequenced schedule of ``rich``, or None when it cannot be sequenced."""
    return _sequenced(rich)[0]


def _sequenced(rich: RichSchedule) -> tuple:
    """(the sequenced schedule of ``rich``, None) or, where it cannot be sequenced, (None,
    the loops the sequencer's refusal names)."""
    try:
        return build_ordered_schedule(rich), None
    except ScheduleError as err:
        return None, err.loops


def compute_dag_boulevard(forest: Forest, plan: BatchPlan) -> RichSchedule:
    """The forest's forms under ``plan``, with static points and fused loop identity.

    Every fusion the rules (a)-(d) allow is tried first; if the result cannot be
    sequenced, fusions are retried one by one, each kept only when the schedule stays
    sequencable, and failing that no loops are fused."""
    return boulevard_and_order(forest, plan)[0]


def boulevard_and_order(forest: Forest, plan: BatchPlan, retry: bool = True):
    """``compute_dag_boulevard`` and the ordered schedule its sequencability check built
    (None when no fusion at all is sequencable: the caller's sequencer then says why).
    ``retry=False``: where every fusion the rules allow cannot be sequenced, the ordered
    schedule is None at once (no fusion retried one by one, which can cost seconds)."""
    forms, terms = build_forms(forest, plan)
    loops = plan.loops
    size = FormBytes(forest, plan)

    def finish(uf: UnionFind) -> RichSchedule:
        return _finish(forest, forms, terms, loops, uf, size)

    alone = frozenset(forest.values[s.value].entries[k].value for s in plan.sliced
                      for k in range(len(s.loops)))
    kept: list = []
    fused = _fuse(forms, loops, lambda uf: True, _tied(plan), alone, kept=kept)
    rich = finish(fused)
    ordered, named = _sequenced(rich)
    if ordered is None and retry and kept:
        # some fusion forces a cycle between a block and what it needs, or a reader into
        # a later pass than a per-batch form it reads: fuse again, checking each fusion
        passed: list = [None]           # the latest state found sequencable, as sequenced

        def blame(uf: UnionFind):
            got = finish(uf)
            done, named = _sequenced(got)
            if done is not None:
                passed[0] = (uf, got, done)
            return named

        uf = _fuse_checked(forms, loops, blame, _tied(plan), alone, (fused, kept, named))
        if passed[0] is not None and passed[0][0] is uf:    # its last check sequenced it
            rich, ordered = passed[0][1:]
        else:
            rich = finish(uf)
            ordered = _ordered(rich)
        if ordered is None:
            rich = finish(_tied(plan))
            ordered = _ordered(rich)
    return rich, ordered


def _finish(forest: Forest, forms: list[Form], terms, loops, uf: UnionFind,
            size=None) -> RichSchedule:
    canon, cforms = _canonical(forms, uf)
    alive = {uf.find(l.id) for l in loops}
    return _with_points(forest, cforms, {l: loops[l] for l in sorted(alive)},
                        {l.id: uf.find(l.id) for l in loops},
                        {v: canon[t.results[forest.trees[v].root]] for v, t in terms.items()},
                        canon, size)


def _rank_needed(fid: int, forms: list[Form], rank: list[int],
                 acc_rank: dict[tuple[int, int], int], counter: int) -> int:
    """Rank form ``fid`` in evaluation order after what it needs (a sum's entries in turn,
    each accumulation step ranked), from ``counter`` on; returns the next free rank. (A
    module function, not a recursive closure: that would be a reference cycle per
    schedule.)"""
    if rank[fid] >= 0:
        return counter
    form = forms[fid]
    if form.kind is FormKind.SUM:
        for k, op in enumerate(form.operands):
            counter = _rank_needed(op, forms, rank, acc_rank, counter)
            acc_rank[(fid, k)] = counter
            counter += 1
        rank[fid] = acc_rank[(fid, 0)] if form.operands else counter
        return counter if form.operands else counter + 1
    deps = list(form.operands)
    if form.kind is FormKind.CONTRACT and form.first == 1:
        deps.reverse()
    if form.source >= 0:
        deps = [form.source]
    for d in deps:
        counter = _rank_needed(d, forms, rank, acc_rank, counter)
    rank[fid] = counter
    return counter + 1


def _with_points(forest: Forest, forms: list[Form], loops: dict[int, Loop],
                 fused: dict[int, int], term_results: dict[int, int],
                 canon: list[int], size=None) -> RichSchedule:
    rank = [-1] * len(forms)
    acc_rank: dict[tuple[int, int], int] = {}
    counter = 0
    sums = {f.value: f.id for f in forms if f.kind is FormKind.SUM}
    for root in forest.roots:
        counter = _rank_needed(sums[root.value], forms, rank, acc_rank, counter)
    readers, order = readers_and_order(forms)
    return RichSchedule(tuple(forms), loops, tuple(rank), acc_rank, readers, order, fused,
                        term_results, counter, size)
