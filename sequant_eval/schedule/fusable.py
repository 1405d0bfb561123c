"""When the loops of two terms may become one loop: the fusion rules and their checks.

Fusing forms of different terms unites their loops pairwise. A fusion is refused when it
would

  (a) give one loop two modes of one form (or put a loop twice in one nest),
  (b) put a reader inside the loop of a reduction it needs complete,
  (c) join loops of different kind, space or block, or
  (d) create a nesting cycle (loop A outside B in one nest, inside it in another).

``violates`` is the plain rule over every form; ``Checker`` the same answer for one more
fusion on top of a state that passes, looking only at what the fusion changes. The loops'
classes are kept in a union-find whose representative is always a class's least loop id.
"""
from __future__ import annotations

from collections import defaultdict

from ..plan.loops import Loop, LoopKind
from .forms import Form, FormKind

__all__ = ["UnionFind", "violates", "pairs_of", "try_fuse", "Checker"]


class UnionFind:
    """Classes of loop ids; a class's representative is its least id."""

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

    def copy(self) -> UnionFind:
        out = UnionFind(())
        out.parent = dict(self.parent)
        return out


def violates(forms: list[Form], loops: tuple[Loop, ...], uf: UnionFind) -> bool:
    """Whether the loop classes ``uf`` break rule (a), (b) or (d) anywhere in ``forms``."""
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
    return _has_cycle(edges.__getitem__, list(edges))                # (d)


def _has_cycle(successors, starts) -> bool:
    """Whether the directed graph ``successors(node)`` has a cycle reachable from one of
    ``starts`` (depth-first with grey/black marks, on an explicit stack: a recursive
    closure would be a reference cycle per call, left to the cyclic collector)."""
    state: dict[int, int] = {}                   # 1: on the path (grey), 2: done (black)
    for start in starts:
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(successors(start)))]
        while stack:
            n, rest = stack[-1]
            for m in rest:
                seen = state.get(m)
                if seen == 1:
                    return True
                if seen is None:
                    state[m] = 1
                    stack.append((m, iter(successors(m))))
                    break
            else:
                state[n] = 2
                stack.pop()
    return False


def pairs_of(a: Form, b: Form) -> list[tuple[int, int]]:
    """The loops that fusing forms ``a`` and ``b`` unites, pair by pair."""
    pairs = list(zip(a.scope, b.scope)) + [(x, y) for (_, x), (_, y) in zip(a.sliced, b.sliced)]
    pairs += list(zip(a.partial, b.partial))
    pairs += list(zip(a.span, b.span))
    return pairs


def try_fuse(a: Form, b: Form, loops: tuple[Loop, ...], uf: UnionFind,
              checker: Checker) -> UnionFind | None:
    """``uf`` with the loops of forms ``a`` and ``b`` united, or None where the rules
    refuse it or it unites nothing new."""
    pairs = pairs_of(a, b)
    for x, y in pairs:
        lx, ly = loops[x], loops[y]
        if (lx.kind, lx.space, lx.block) != (ly.kind, ly.space, ly.block):   # (c)
            return None
    if all(uf.find(x) == uf.find(y) for x, y in pairs):
        return None                       # nothing new to fuse
    trial = uf.copy()                     # (most pairs stop above: no copy made)
    for x, y in pairs:
        trial.union(x, y)
    return None if checker.violates(uf, trial, pairs) else trial


class Checker:
    """``violates`` for a fusion on top of a state that does not violate, touching only
    what the fusion changes.

    A new violation of (a) or (b) needs two loops newly in one class, so one of them
    changed its representative: only the forms that involve a changed loop, and for (b)
    their readers and what they read, are looked at. (d) runs on the distinct (outer, inner)
    loop pairs of all nests (the state's class graph, kept per state), searched from the
    classes that grew and mapped through the trial only as far as the search reaches.
    The result is ``violates(forms, loops, trial)`` whenever ``violates(forms, loops,
    uf)`` is False (a property test checks it against the full rule). When a fusion is
    kept, the maps move only the loops whose representative changed (``_advance``): on a
    schedule of 445 loops and 208 fusions, 27,000 look-ups of a representative instead of
    304,000."""

    def __init__(self, forms: list[Form], loops: tuple[Loop, ...], start: UnionFind) -> None:
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
        self.broken = violates(forms, loops, start)   # then every fusion is refused
        self._of: UnionFind | None = None
        self._last: tuple[UnionFind, dict[int, int]] | None = None   # trial, its merges

    def _contracted_assemble(self, fid: int) -> bool:
        form = self.forms[fid]
        return form.kind is FormKind.ASSEMBLE and self.loops[form.via].kind is LoopKind.CONTRACTED

    def _state(self, uf: UnionFind) -> None:
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
        self.succ: dict[int, set[int]] = defaultdict(set)     # class → inner classes
        self.pred: dict[int, set[int]] = defaultdict(set)     # class → outer classes
        for a, b in self.pairs:
            self.succ[root[a]].add(root[b])
            self.pred[root[b]].add(root[a])
        self.class_forms: dict[int, frozenset[int]] = {}

    def _advance(self, uf: UnionFind, merged: dict[int, int]) -> None:
        """``_state(uf)`` from the current state, ``merged`` mapping each class that
        joined another to the new representative: the same maps, built in the time the
        moved loops take rather than all of them."""
        self._of = uf
        root, members, forms_of = self.root, self.members, self.class_forms
        succ, pred = self.succ, self.pred
        for old, new in merged.items():
            moved = members.pop(old)
            for l in moved:
                root[l] = new
            members[new].extend(moved)
            forms_of.pop(old, None)
            forms_of.pop(new, None)
            for b in succ.pop(old, ()):            # the class's nest pairs, renamed
                pred[b].discard(old)
                pred[b].add(new)
                succ[new].add(b)
            for a in pred.pop(old, ()):
                succ[a].discard(old)
                succ[a].add(new)
                pred[new].add(a)

    def moved(self, trial: UnionFind) -> list[int]:
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

    def violates(self, uf: UnionFind, trial: UnionFind, pairs) -> bool:
        """``violates(forms, loops, trial)`` for ``trial``: ``uf`` with ``pairs`` united."""
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
        # that grew; search from those, through the state's graph seen under the trial
        # (only what the search reaches is mapped)
        joined: dict[int, list[int]] = defaultdict(list)
        for old, new in merged.items():
            joined[new].append(old)
        succ = self.succ

        def successors(n: int) -> set[int]:       # each node is entered once per search
            return {merged.get(m, m) for c in (n, *joined.get(n, ())) for m in succ.get(c, ())}

        return _has_cycle(successors, sorted(joined))
