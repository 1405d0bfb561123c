"""Static points and loop identity over the whole forest → RichSchedule.

Every form gets a static point: the position at which a demand-driven walk of the forest
(equations in order, sum entries in order, operands in the planned child order) first
completes it; for no loops this is exactly the unbatched walk. Loops of different terms
are fused into one physical loop when they slice the same form in the same way, so the
form is built once per batch for all its users. A fusion is refused when it would

  (a) give one loop two modes of one form (or put a loop twice in one nest),
  (b) put a reader inside the loop of a reduction it needs complete,
  (c) join loops of different kind, space or block, or
  (d) create a nesting cycle (loop A outside B in one nest, inside it in another).
"""
from __future__ import annotations

from collections import defaultdict

from ..errors import ScheduleError
from ..forest.values import Forest
from ..plan.loops import Loop, LoopKind
from ..plan.planner import BatchPlan
from .forms import Form, FormKind, build_forms, drop_unread, reachable
from .ordered import build_ordered_schedule
from .rich import RichSchedule, readers_and_order

__all__ = ["compute_dag_boulevard"]


class _UnionFind:
    def __init__(self, ids) -> None:
        self.parent = {i: i for i in ids}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def copy(self) -> _UnionFind:
        out = _UnionFind(())
        out.parent = dict(self.parent)
        return out


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


def _canonical(forms: list[Form], uf: _UnionFind) -> tuple[list[int], list[Form]]:
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


def _canonical_ids(forms: list[Form], uf: _UnionFind) -> list[int]:
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


def _violates(forms: list[Form], loops: tuple[Loop, ...], uf: _UnionFind) -> bool:
    f = uf.find
    readers: dict[int, list[Form]] = defaultdict(list)
    edges: dict[int, set[int]] = defaultdict(set)
    for form in forms:
        nest = [f(l) for l in form.scope]
        sliced = [f(l) for _, l in form.sliced]
        if len(set(nest)) != len(nest) or len(set(sliced)) != len(sliced):
            return True                                              # (a)
        span = [f(l) for l in form.span]
        if set(span) & set(nest) or len(set(span)) != len(span):
            return True                                              # (a)
        for a, b in zip(nest, nest[1:] + span):
            edges[a].add(b)
        for o in form.operands:
            readers[o].append(form)
        if form.source >= 0:
            readers[form.source].append(form)
    for form in forms:                                               # (b)
        if form.kind is FormKind.ASSEMBLE and loops[form.via].kind is LoopKind.CONTRACTED:
            if any(f(form.via) in {f(l) for l in r.scope} for r in readers[form.id]):
                return True
    return _has_cycle(edges, list(edges))                            # (d)


def _has_cycle(edges, starts) -> bool:
    """Whether the directed graph ``edges`` (node → successors) has a cycle reachable from
    one of ``starts`` (depth-first, grey/black marks)."""
    state: dict[int, int] = {}

    def cyclic(n: int) -> bool:
        state[n] = 1
        for m in edges[n]:
            if state.get(m) == 1 or (m not in state and cyclic(m)):
                return True
        state[n] = 2
        return False

    return any(n not in state and cyclic(n) for n in starts)


def _pairs(a: Form, b: Form) -> list[tuple[int, int]]:
    """The loops that fusing forms ``a`` and ``b`` unites, pair by pair."""
    pairs = list(zip(a.scope, b.scope)) + [(x, y) for (_, x), (_, y) in zip(a.sliced, b.sliced)]
    pairs += list(zip(a.partial, b.partial))
    pairs += list(zip(a.span, b.span))
    return pairs


def _try_fuse(a: Form, b: Form, loops: tuple[Loop, ...], uf: _UnionFind,
              checker: _Checker) -> _UnionFind | None:
    pairs = _pairs(a, b)
    trial = uf.copy()
    for x, y in pairs:
        lx, ly = loops[x], loops[y]
        if (lx.kind, lx.space, lx.block) != (ly.kind, ly.space, ly.block):   # (c)
            return None
        trial.union(x, y)
    if all(uf.find(x) == uf.find(y) for x, y in pairs):
        return None                       # nothing new to fuse
    return None if checker.violates(uf, trial, pairs) else trial


def _shape(form: Form) -> tuple:
    return (form.kind, form.value, tuple(p for p, _ in form.sliced), len(form.partial),
            len(form.scope), len(form.span))


def _tied(plan: BatchPlan) -> _UnionFind:
    """Every loop its own, but the loops an inner sum is sliced by: one (``plan.sliced``)."""
    uf = _UnionFind(l.id for l in plan.loops)
    for s in plan.sliced:
        for lids in s.loops[1:]:
            for a, b in zip(s.loops[0], lids):
                uf.union(a, b)
    return uf


class _Checker:
    """``_violates`` for a fusion on top of a state that does not violate, touching only
    what the fusion changes.

    A new violation of (a) or (b) needs two loops newly in one class, so one of them
    changed its representative: only the forms that involve a changed loop, and for (b)
    their readers and what they read, are looked at. (d) runs on the distinct (outer, inner)
    loop pairs of all nests, mapped through the trial: a few hundred pairs, not every form.
    The result is ``_violates(forms, loops, trial)`` whenever ``_violates(forms, loops,
    uf)`` is False (a property test checks it against the full rule). When a fusion is
    kept, the maps move only the loops whose representative changed (``_advance``): on a
    schedule of 445 loops and 208 fusions, 27,000 look-ups of a representative instead of
    304,000."""

    def __init__(self, forms: list[Form], loops: tuple[Loop, ...], start: _UnionFind) -> None:
        self.forms = forms
        self.loops = loops
        self.uses: dict[int, list[int]] = defaultdict(list)
        self.readers: dict[int, list[int]] = defaultdict(list)
        pairs: set[tuple[int, int]] = set()
        for form in forms:
            for l in form.loops():
                self.uses[l].append(form.id)
            for o in form.operands:
                self.readers[o].append(form.id)
            if form.source >= 0:
                self.readers[form.source].append(form.id)
            nest = list(form.scope)
            pairs.update(zip(nest, nest[1:] + list(form.span)))
        self.pairs = sorted(pairs)
        self.broken = _violates(forms, loops, start)   # then every fusion is refused
        self._of: _UnionFind | None = None
        self._last: tuple[_UnionFind, dict[int, int]] | None = None   # trial, its merges

    def _contracted_assemble(self, fid: int) -> bool:
        form = self.forms[fid]
        return form.kind is FormKind.ASSEMBLE and self.loops[form.via].kind is LoopKind.CONTRACTED

    def _state(self, uf: _UnionFind) -> None:
        """Per state (it changes only when a fusion is kept): each loop's representative,
        each class's members, and the nest pairs between classes. A state that is the last
        trial passed (``moved``) is reached from the one before by moving only the loops
        whose representative changed."""
        if self._of is uf:
            return
        if self._last is not None and self._last[0] is uf and self._of is not None:
            self._advance(uf, self._last[1])
            return
        self._of = uf
        self.root = {l: uf.find(l) for l in uf.parent}
        self.members: dict[int, list[int]] = defaultdict(list)
        for l, r in self.root.items():
            self.members[r].append(l)
        root = self.root
        self.edges = sorted({(root[a], root[b]) for a, b in self.pairs})
        self.class_forms: dict[int, frozenset[int]] = {}

    def _advance(self, uf: _UnionFind, merged: dict[int, int]) -> None:
        """``_state(uf)`` from the current state, ``merged`` mapping each class that
        joined another to the new representative: the same maps, built in the time the
        moved loops take rather than all of them."""
        self._of = uf
        root, members, forms_of = self.root, self.members, self.class_forms
        for old, new in merged.items():
            moved = members.pop(old)
            for l in moved:
                root[l] = new
            members[new].extend(moved)
            forms_of.pop(old, None)
            forms_of.pop(new, None)
        self.edges = sorted({(merged.get(a, a), merged.get(b, b)) for a, b in self.edges})

    def moved(self, trial: _UnionFind) -> list[int]:
        """The loops whose representative ``trial`` (the last trial ``violates`` passed)
        changes."""
        assert self._last is not None and self._last[0] is trial
        return [l for old in self._last[1] for l in self.members[old]]

    def _forms_of(self, r: int) -> frozenset[int]:
        """The forms involving a loop of class ``r`` in the current state (remembered until
        a fusion is kept: most trials re-read the same large classes)."""
        got = self.class_forms.get(r)
        if got is None:
            uses = self.uses
            got = self.class_forms[r] = frozenset(
                fid for l in self.members[r] for fid in uses.get(l, ()))
        return got

    def violates(self, uf: _UnionFind, trial: _UnionFind, pairs) -> bool:
        """``_violates(forms, loops, trial)`` for ``trial``: ``uf`` with ``pairs`` united."""
        if self.broken:
            return True
        self._state(uf)
        root, f = self.root, trial.find
        merged = {}                        # old representative → new, where it changed
        for x, y in pairs:
            for r in (root[x], root[y]):
                new = f(r)
                if new != r:
                    merged[r] = new
        self._last = (trial, merged)
        touched = sorted(frozenset().union(*(self._forms_of(r) for r in merged)))
        forms = self.forms
        for fid in touched:                                          # (a)
            form = forms[fid]
            nest = [f(l) for l in form.scope]
            sliced = [f(l) for _, l in form.sliced]
            if len(set(nest)) != len(nest) or len(set(sliced)) != len(sliced):
                return True
            span = [f(l) for l in form.span]
            if set(span) & set(nest) or len(set(span)) != len(span):
                return True
        for fid in touched:                                          # (b)
            form = forms[fid]
            if self._contracted_assemble(fid):
                via = f(form.via)
                if any(via in {f(l) for l in forms[r].scope} for r in self.readers[fid]):
                    return True
            scope = {f(l) for l in form.scope}
            for o in form.operands + ((form.source,) if form.source >= 0 else ()):
                if self._contracted_assemble(o) and f(forms[o].via) in scope:
                    return True
        # (d): the state's class graph has no cycle, so a new one passes through a class
        # that grew; search from those
        edges: dict[int, set[int]] = defaultdict(set)
        for a, b in self.edges:
            edges[merged.get(a, a)].add(merged.get(b, b))
        return _has_cycle(edges, sorted(set(merged.values())))


class _Canon:
    """Canonical ids (as ``_canonical_ids``, before unread forms are dropped) for a prefix
    of the forms, kept up to date as fusion proceeds: a fusion changes the keys only of
    the forms from the first one involving a loop whose representative changed, so only
    that suffix of the prefix is recomputed, and forms are keyed only as far as the walk
    has reached."""

    def __init__(self, forms: list[Form], uf: _UnionFind) -> None:
        self.forms = forms
        self.uf = uf
        self.first: dict[int, int] = {}            # loop → first form involving it
        for form in forms:
            for l in form.loops():
                self.first.setdefault(l, form.id)
        self.canon: list[int] = []
        self.index: dict[tuple, int] = {}
        self.alias: dict[int, int] = {}
        self.log: list[tuple[int, tuple]] = []     # (form position, key) per index entry
        self.count = 0

    def ids(self, upto: int) -> list[int]:
        """Canonical ids of forms 0..upto (at least)."""
        f = self.uf.find
        leaf = FormKind.LEAF
        canon, index, alias, log = self.canon, self.index, self.alias, self.log
        for pos in range(len(canon), upto + 1):
            form = self.forms[pos]
            key, _ = _key(form, f, canon, alias)
            k = index.get(key)
            if k is None:
                k = index[key] = self.count
                self.count += 1
                log.append((pos, key))
                if form.kind is leaf:
                    bare = key[:8] + (-1,) + key[9:]
                    if bare not in index:
                        index[bare] = k
                        log.append((pos, bare))
                    alias[k] = index[bare]
            canon.append(k)
        return canon

    def fused(self, new: _UnionFind, changed: list[int]) -> None:
        """Move to ``new`` (a fusion kept, ``changed`` the loops whose representative it
        changed): forget the forms from the first one that involves one of them."""
        self.uf = new
        start = min((self.first.get(l, len(self.forms)) for l in changed),
                    default=len(self.forms))
        if start >= len(self.canon):
            return
        del self.canon[start:]
        while self.log and self.log[-1][0] >= start:
            del self.index[self.log.pop()[1]]
        self.count = max(self.index.values(), default=-1) + 1
        for k in [k for k in self.alias if k >= self.count]:
            del self.alias[k]


def _fuse(forms: list[Form], loops, accept, start: _UnionFind | None = None,
          alone: frozenset[int] = frozenset(), veto: frozenset = frozenset(),
          kept: list | None = None, begin: int = 0) -> _UnionFind:
    """Greedy fusion in form order; ``accept`` may veto a fusion the cheap checks allow.
    Loops of the terms in ``alone`` (the terms of sliced inner sums) are not fused with
    other terms' loops: inside the tied loop each term's batch is added into the inner
    sum as soon as it is made, not held until a fused block has made its neighbours'.
    ``veto``: (form, other) pairs not to fuse; ``kept``, when given, receives (form, other)
    for every fusion kept, in order (``_replayed`` makes the state after any of them).
    ``begin``: the forms
    before it are only seen, not fused (``start`` is what fusing them gave)."""
    uf = start.copy() if start is not None else _UnionFind(l.id for l in loops)
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
                checker, canon = _Checker(forms, loops, uf), _Canon(forms, uf)
            ids = canon.ids(form.id)
            if [ids[o] for o in other.operands] != [ids[o] for o in form.operands]:
                continue
            if other.source >= 0 and ids[other.source] != ids[form.source]:
                continue
            trial = _try_fuse(form, other, loops, uf, checker)
            if trial is not None and accept(trial):
                canon.fused(trial, checker.moved(trial))
                uf = trial
                if kept is not None:
                    kept.append((form.id, other.id))
                break
        seen[_shape(form)].append(form)
    return uf


def _fuse_checked(forms: list[Form], loops, ok, start: _UnionFind,
                  alone: frozenset[int], first: tuple | None = None) -> _UnionFind:
    """Greedy fusion in which every kept fusion leaves ``ok`` true (the schedule stays
    sequencable), found by bisection instead of checking each fusion: fuse everything the
    rules allow; if the result is not ``ok``, find the first kept fusion after which it is
    not (bisection over the kept sequence), refuse that one, and fuse again. The same
    result as checking each kept fusion as it is made wherever a state that is not ``ok``
    stays so as fusions are added; ``ok`` runs about log2(fusions) times per refusal.
    After a refusal fusion resumes at the refused fusion's form from the state before it:
    the fusions before it are the ones a fresh pass would keep again. ``first``: the
    unchecked pass from ``start`` already made and found not ``ok`` (its state and kept
    fusions), not made again."""
    if not ok(start):                   # (rare) check each fusion as it is made
        return _fuse(forms, loops, ok, start, alone)
    veto: set = set()
    base, begin = start, 0              # an ok state, and the form fusion resumes at
    while True:
        if first is not None:
            (uf, kept), first = first, None
        else:
            kept = []
            uf = _fuse(forms, loops, lambda uf: True, base, alone, frozenset(veto), kept,
                       begin)
            if not kept or ok(uf):
                return uf
        lo, hi = 0, len(kept)           # after lo fusions ok (0: base); after hi not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(_replayed(forms, base, kept[:mid])):
                lo = mid
            else:
                hi = mid
        veto.add(kept[hi - 1])
        base = _replayed(forms, base, kept[: hi - 1])
        begin = kept[hi - 1][0]


def _replayed(forms: list[Form], start: _UnionFind, fusions) -> _UnionFind:
    """``start`` with the fusions (form, other) made in turn: the state ``_fuse`` reached
    after them (rebuilt rather than kept, so a pass holds one state, not one per fusion)."""
    uf = start.copy()
    for a, b in fusions:
        for x, y in _pairs(forms[a], forms[b]):
            uf.union(x, y)
    return uf


def _ordered(rich: RichSchedule):
    """The sequenced schedule of ``rich``, or None when it cannot be sequenced."""
    try:
        return build_ordered_schedule(rich)
    except ScheduleError:
        return None


def _sequencable(rich: RichSchedule) -> bool:
    return _ordered(rich) is not None


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

    def finish(uf: _UnionFind) -> RichSchedule:
        return _finish(forest, forms, terms, loops, uf)

    alone = frozenset(forest.values[s.value].entries[k].value for s in plan.sliced
                      for k in range(len(s.loops)))
    kept: list = []
    fused = _fuse(forms, loops, lambda uf: True, _tied(plan), alone, kept=kept)
    rich = finish(fused)
    ordered = _ordered(rich)
    if ordered is None and retry and kept:
        # some fusion forces a cycle between a block and what it needs, or a reader into
        # a later pass than a per-batch form it reads: fuse again, checking each fusion
        rich = finish(_fuse_checked(forms, loops, lambda uf: _sequencable(finish(uf)),
                                    _tied(plan), alone, (fused, kept)))
        ordered = _ordered(rich)
        if ordered is None:
            rich = finish(_tied(plan))
            ordered = _ordered(rich)
    return rich, ordered


def _finish(forest: Forest, forms: list[Form], terms, loops, uf: _UnionFind) -> RichSchedule:
    canon, cforms = _canonical(forms, uf)
    alive = {uf.find(l.id) for l in loops}
    return _with_points(forest, cforms, {l: loops[l] for l in sorted(alive)},
                        {l.id: uf.find(l.id) for l in loops},
                        {v: canon[t.results[forest.trees[v].root]] for v, t in terms.items()},
                        canon)


def _with_points(forest: Forest, forms: list[Form], loops: dict[int, Loop],
                 fused: dict[int, int], term_results: dict[int, int],
                 canon: list[int]) -> RichSchedule:
    rank = [-1] * len(forms)
    acc_rank: dict[tuple[int, int], int] = {}
    counter = 0
    sums = {f.value: f.id for f in forms if f.kind is FormKind.SUM}

    def need(fid: int) -> None:
        nonlocal counter
        if rank[fid] >= 0:
            return
        form = forms[fid]
        if form.kind is FormKind.SUM:
            for k, op in enumerate(form.operands):
                need(op)
                acc_rank[(fid, k)] = counter
                counter += 1
            rank[fid] = acc_rank[(fid, 0)] if form.operands else counter
            if not form.operands:
                counter += 1
            return
        deps = list(form.operands)
        if form.kind is FormKind.CONTRACT and form.first == 1:
            deps.reverse()
        if form.source >= 0:
            deps = [form.source]
        for d in deps:
            need(d)
        rank[fid] = counter
        counter += 1

    for root in forest.roots:
        need(sums[root.value])
    readers, order = readers_and_order(forms)
    return RichSchedule(tuple(forms), loops, tuple(rank), acc_rank, readers, order, fused,
                        term_results, counter)
