"""Value forms: a forest value as it exists inside a nest of batch loops.

One forest value can be materialized in several forms: sliced on some of its modes by
enclosing loops, partial over a loop that sums into it, or assembled whole after a block.
Forms are what the schedule builds, frees and accounts; two uses of the same form (same
value, same slicing by the same loops, same scope) are one array.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..forest.values import Forest, ValueKind
from ..plan.dp import prefix_for
from ..plan.loops import LoopKind
from ..plan.planner import BatchPlan
from ..plan.regime import Regime, footprint_bytes

__all__ = ["FormKind", "Form", "TermForms", "build_forms", "drop_unread", "FormBytes",
           "form_shape"]


class FormKind(enum.Enum):
    """What a form is: a leaf block, a contraction, an equation's sum, or a value assembled
    after a block."""

    LEAF = "leaf"            # a block (or batch slice) of an input tensor
    CONTRACT = "contract"    # a binary contraction, built by a BuildStep
    SUM = "sum"              # an equation (or operator group) sum, built entry by entry
    ASSEMBLE = "assemble"    # a block's output: batches of `source` summed or scattered


@dataclass(frozen=True)
class Form:
    """A value as it exists in a nest: sliced on modes by loops, partial over loops that sum
    into it, built in the scope of its loops."""

    id: int
    kind: FormKind
    value: int                            # forest value id
    term: int                             # term-root value of the tree that made it (-1: sums)
    sliced: tuple[tuple[int, int], ...]   # (mode position, loop id), by position
    partial: tuple[int, ...]              # loops whose sum is still open in this form
    scope: tuple[int, ...]                # loop ids of the blocks it lives in, outermost first
    operands: tuple[int, ...] = ()        # CONTRACT: (left, right) forms; SUM: entry forms
    source: int = -1                      # ASSEMBLE: the per-batch form it assembles
    via: int = -1                         # ASSEMBLE: the loop whose batches it assembles
    first: int = 0                        # CONTRACT: which operand is made first (0 or 1)
    owner: int = -1                       # LEAF: the term it is fetched for, if not shared
    also: tuple[int, ...] = ()            # ASSEMBLE: outer loops scattered jointly with `via`

    @property
    def span(self) -> tuple[int, ...]:
        """ASSEMBLE: every loop it assembles over, outermost first (``via`` last)."""
        return self.also + ((self.via,) if self.via >= 0 else ())

    def key(self) -> tuple:
        """Identity for sharing: forms with equal keys are one computation (the id aside)."""
        return (self.kind, self.value, self.sliced, self.partial, self.scope, self.operands,
                self.source, self.via, self.owner, self.also)

    def loops(self) -> set[int]:
        """Every loop the form involves: slicing, partial, scope and span."""
        return {l for _, l in self.sliced} | set(self.partial) | set(self.scope) | set(self.span)

    def describe(self) -> str:
        """One stable line: id, kind, value, slicing, partial loops, what it is made from."""
        sl = ",".join(f"{p}/L{l}" for p, l in self.sliced)
        bits = [f"f{self.id} {self.kind.value} v{self.value}"]
        if sl:
            bits.append(f"sliced[{sl}]")
        if self.partial:
            bits.append(f"partial[{','.join(f'L{l}' for l in self.partial)}]")
        if self.kind is FormKind.ASSEMBLE:
            bits.append(f"<- f{self.source} over {'+'.join(f'L{l}' for l in self.span)}")
        elif self.operands:
            bits.append(f"<- {' '.join(f'f{o}' for o in self.operands)}")
        return " ".join(bits)


@dataclass(frozen=True)
class TermForms:
    """For one planned term tree: the result form of every node (by node index)."""

    value: int
    results: tuple[int, ...]
    builds: tuple[int, ...]               # the form each node's BuildStep makes


class _Builder:
    """The forms of one plan, each made once (``add``: equal keys are one form), as the
    walks of the planned term trees (``_TermWalk``) and of the equation sums
    (``sum_form``) ask for them. The walks recurse through methods, not closures: a
    recursive closure refers to itself, a reference cycle per schedule that only the cyclic
    collector would free (the fitter pauses it)."""

    def __init__(self, forest: Forest, plan: BatchPlan) -> None:
        self.forms: list[Form] = []
        self.index: dict[tuple, int] = {}
        self.alias: dict[int, int] = {}      # leaf form → first leaf form of that block
        self.forest = forest
        self.plan = plan
        self.sliced = {s.value: s for s in plan.sliced}
        self.tied = {forest.values[s.value].entries[k].value: lids
                     for s in plan.sliced for k, lids in enumerate(s.loops)}
        self.batch_of: dict[int, int] = {}   # tied term → its result inside the tied loop
        self.terms: dict[int, TermForms] = {}
        self.sums: dict[int, int] = {}

    def add(self, **kw) -> int:
        probe = Form(-1, **kw)
        # a contraction is one form whichever term's fetch of a leaf it reads
        key = probe.key()
        leaf = probe.kind is FormKind.LEAF
        if not leaf:
            key = key[:5] + (tuple(self.alias.get(o, o) for o in probe.operands),) + key[6:]
        fid = self.index.get(key)
        if fid is None:
            fid = len(self.forms)
            self.forms.append(Form(fid, **kw))
            self.index[key] = fid
            if leaf:
                self.alias[fid] = self.index.setdefault(key[:8] + (-1,) + key[9:], fid)
        return fid

    def sum_form(self, vid: int) -> int:
        """The form of equation (or inner) sum ``vid``, its entries' forms made first."""
        sums, sliced, forest = self.sums, self.sliced, self.forest
        if vid in sums:
            return sums[vid]
        if vid in sliced:            # built batch by batch in the tied loops, then escapes
            lids = sliced[vid].loops[0]
            inner = self.add(kind=FormKind.SUM, value=vid, term=-1,
                             sliced=tuple(sorted(zip(sliced[vid].modes, lids))), partial=(),
                             scope=lids, operands=tuple(self.batch_of[e.value]
                                                        for e in forest.values[vid].entries))
            sums[vid] = self.add(kind=FormKind.ASSEMBLE, value=vid, term=-1, sliced=(),
                                 partial=(), scope=(), source=inner, via=lids[-1],
                                 also=lids[:-1])
            return sums[vid]
        ops = []
        for e in forest.values[vid].entries:
            if forest.values[e.value].kind is ValueKind.SUM:
                ops.append(self.sum_form(e.value))
            else:
                ops.append(self.terms[e.value].results[forest.trees[e.value].root])
        sums[vid] = self.add(kind=FormKind.SUM, value=vid, term=-1, sliced=(), partial=(),
                             scope=(), operands=tuple(ops))
        return sums[vid]


class _TermWalk:
    """The walk of one planned term tree: every node's forms, its children's first."""

    def __init__(self, b: _Builder, tp) -> None:
        self.b = b
        self.tp = tp
        nodes = tp.tree.nodes
        self.results = [-1] * len(nodes)
        self.builds = [-1] * len(nodes)
        self.labels = [frozenset(n.labels) for n in nodes]

    def forms(self) -> TermForms:
        self.visit(self.tp.tree.root, ())
        return TermForms(self.tp.value, tuple(self.results), tuple(self.builds))

    def chain_labels(self, chain: tuple[int, ...]):
        loops = self.b.plan.loops
        return tuple(_LoopLabel(loops[l].label, l) for l in chain)

    def visit(self, n: int, ctx: tuple[int, ...]) -> None:
        b, tp = self.b, self.tp
        loops, tied, batch_of = b.plan.loops, b.tied, b.batch_of
        tree, results, labels = tp.tree, self.results, self.labels
        node = tree.nodes[n]
        chain = ctx + tp.opens[n]

        def sliced_on(lids: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
            pos = {ix: p for p, ix in enumerate(node.labels)}
            return tuple(sorted((pos[loops[l].label], l) for l in lids
                                if loops[l].label in pos))

        if not node.children:
            if n == tree.root and tp.value in tied:
                ctx = tp.opens[n]            # a term that is one block, read by batch
                batch_of[tp.value] = -1
            # an unsliced block fetched for one term is not kept for the next one
            # unless the plan shares leaves (the unbatched walk does)
            mine = -1 if b.plan.share_leaves or ctx else tp.value
            fid = b.add(kind=FormKind.LEAF, value=node.value, term=tp.value,
                        sliced=sliced_on(ctx), partial=(), scope=ctx, owner=mine)
            results[n] = self.builds[n] = fid
            if batch_of.get(tp.value) == -1:
                batch_of[tp.value] = fid
            return
        lids = tied.get(tp.value, ())
        k = len(lids)
        for c in node.children:
            sub = tuple(x.loop for x in prefix_for(self.chain_labels(chain), labels[c]))
            if k and chain[:k] == lids and sub[:k] != lids:
                # inside tied loops everything is made per batch (the other terms of
                # the sliced sum share them): what lacks their labels is made again
                sub = lids + tuple(x.loop for x in prefix_for(self.chain_labels(chain[k:]),
                                                               labels[c]))
            self.visit(c, sub)
        contracted = tuple(l for l in tp.opens[n] if loops[l].label not in labels[n])
        fid = b.add(kind=FormKind.CONTRACT, value=node.value, term=tp.value,
                    sliced=sliced_on(chain), partial=contracted, scope=chain,
                    operands=tuple(results[c] for c in node.children), first=tp.first[n])
        self.builds[n] = fid
        opens = tp.opens[n]
        # a tied loop (an inner sum sliced on it) keeps its own escape: the term's
        # batch of it is what the inner sum's batch reads
        split = len(lids) if n == tree.root and lids and opens[:len(lids)] == lids else 0
        if split:
            batch_of[tp.value] = fid
        j = len(opens)
        while j > 0:
            # a run of external loops scatters jointly: one destination, no
            # intermediate forms between them
            i = j - 1
            while i > (split if j > split else 0) and _external(
                    loops, opens[i - 1]) and _external(loops, opens[j - 1]):
                i -= 1
            outer = ctx + opens[:i]
            fid = b.add(kind=FormKind.ASSEMBLE, value=node.value, term=tp.value,
                        sliced=sliced_on(outer),
                        partial=tuple(l for l in contracted if l in outer),
                        scope=outer, source=fid, via=opens[j - 1], also=opens[i : j - 1])
            if split and i == split:
                batch_of[tp.value] = fid
            j = i
        results[n] = fid


def build_forms(forest: Forest, plan: BatchPlan) -> tuple[list[Form], dict[int, TermForms]]:
    """Forms of every planned term tree and of every equation sum."""
    b = _Builder(forest, plan)
    for tp in plan.terms:
        b.terms[tp.value] = _TermWalk(b, tp).forms()
    roots = [b.sum_form(root.value) for root in forest.roots]
    return _prune(b.forms, b.terms, roots)


def form_shape(form: Form, shapes, loops) -> tuple:
    """The shape of one batch of ``form`` at full block extent (``shapes``: per value;
    ``loops``: loop id → its loop)."""
    shape = list(shapes[form.value])
    for pos, lid in form.sliced:
        shape[pos] = min(loops[lid].block, shape[pos])
    return tuple(shape)


class FormBytes:
    """A form's bytes under a plan (its value's shape, each sliced mode at its loop's
    block), remembered per value and slicing: what the sequencer weighs a block's orders
    by (``ordered.py``). Fused loops share their block, so a canonical loop id reads the
    same block as the planned ones it stands for. A class, not a closure: a remembered
    fit is pickled with its schedule (``memo.py``)."""

    def __init__(self, forest: Forest, plan: BatchPlan) -> None:
        extents = plan.extents
        self.regime = extents if isinstance(extents, Regime) else Regime.from_extents(extents)
        self.values = forest.values
        self.loops = {l.id: l for l in plan.loops}
        self.itemsize = plan.policy.itemsize
        self.memo: dict[tuple, int] = {}

    def __call__(self, form: Form) -> int:
        key = (form.value, form.sliced)
        got = self.memo.get(key)
        if got is None:
            value = self.values[form.value]
            shapes = {form.value: self.regime.mode_sizes(value.spaces, value.groups)}
            got = self.memo[key] = footprint_bytes(form_shape(form, shapes, self.loops),
                                                   self.itemsize)
        return got


def _prune(forms: list[Form], terms: dict[int, TermForms],
           roots: list[int]) -> tuple[list[Form], dict[int, TermForms]]:
    new, out = drop_unread(forms, roots)
    mapped = {v: TermForms(v, tuple(new.get(x, -1) for x in t.results),
                           tuple(new.get(x, -1) for x in t.builds)) for v, t in terms.items()}
    return out, mapped


def reachable(roots: Iterable[int], successors: Callable[[int], Iterable[int]]) -> set[int]:
    """Every id ``roots`` reach through ``successors`` (the roots included): what a form, a
    canonical form (``boulevard.py``) or an op-graph node (``Graph.reachable``) needs."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(successors(n))
    return seen


def drop_unread(forms: list[Form], roots: list[int]) -> tuple[dict[int, int], list[Form]]:
    """Keep what ``roots`` read (a term's own fetch for a contraction another term already
    made is dropped); ids renumbered in order. Returns (old id → new id, forms)."""
    keep = reachable(roots, lambda f: forms[f].operands + (
        (forms[f].source,) if forms[f].source >= 0 else ()))
    new = {old: k for k, old in enumerate(sorted(keep))}
    out = []
    for old in sorted(keep):
        f = forms[old]
        out.append(Form(new[old], f.kind, f.value, f.term, f.sliced, f.partial, f.scope,
                        tuple(new[o] for o in f.operands),
                        new[f.source] if f.source >= 0 else -1, f.via, f.first, f.owner,
                        f.also))
    return new, out


def _external(loops, lid: int) -> bool:
    return loops[lid].kind is LoopKind.EXTERNAL


@dataclass(frozen=True)
class _LoopLabel:
    """A loop in a chain, seen through the label it runs over (for ``prefix_for``)."""

    label: object
    loop: int
