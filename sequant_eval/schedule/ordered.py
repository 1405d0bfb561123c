"""The deterministic sequencer: RichSchedule → OrderedSchedule (a tree of ScopeBlocks).

Every form lives in the block path given by its scope, each loop tagged with a *pass*: a
form read inside loop L after it was completed by an earlier block over L must run in a
later pass, i.e. a sibling block over the same loop. Contractions, fetches and sum entries
are BuildSteps in their block; a form assembled from a block's batches is that block's
output (AccumulateSum for a contracted loop, AccumulateScatter for an external one), so a
value escaping several loops forms a chain: built in the deepest block, forwarded above.
Inside each block, steps, child blocks and outputs are ordered by a topological sort of what
they produce and need, laid out from the end: each item as late as its readers allow, the
latest static point first among the candidates (so nothing finished waits through
unrelated work, however the equations were written). An output is an item of that sort
too: a batch's slice escapes as soon as it is complete, not at the end of the body, so the
partials of many fused terms are never held at once. Inside a loop, where fused terms share
forms (a slice of one input read by several terms), the static points can put two readers
of one slice far apart; there a second sort weighs each candidate by the bytes it leaves
live (``RichSchedule.size``; an output goes with the item that makes its batch, where
nothing else reads that batch), and the block takes whichever of the two orders holds
fewer of its own bytes at once. ``walk_blocks`` is the one walk over the resulting tree
that every later pass shares.
"""
from __future__ import annotations

import enum
import heapq
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import ScheduleError
from ..plan.loops import LoopKind
from .rich import RichSchedule
from .forms import FormKind

__all__ = ["OutputKind", "BuildStep", "Output", "ScopeBlock", "OrderedSchedule",
           "build_ordered_schedule", "well_formed", "form_paths", "walk_blocks"]

Path = tuple[tuple[int, int], ...]      # ((loop id, pass), ...) from the root


class OutputKind(enum.Enum):
    """How a block's batches leave it: summed into a destination, or scattered into it."""

    ACCUMULATE_SUM = "sum"
    ACCUMULATE_SCATTER = "scatter"


@dataclass(frozen=True)
class BuildStep:
    """One step of a block: build a form (for a sum, accumulate its entry ``entry``)."""

    form: int
    entry: int = -1          # SUM forms: which entry this step accumulates


@dataclass(frozen=True)
class Output:
    """A value a block assembles from its batches (an ASSEMBLE form) and how."""

    form: int                # the ASSEMBLE form this block's batches build
    kind: OutputKind


@dataclass(frozen=True)
class ScopeBlock:
    """A loop block (the root block has ``loop`` -1): its ordered steps and nested blocks,
    and the outputs its batches assemble."""

    loop: int                                # -1 for the root
    axis: str                                # the loop's space ("" at the root)
    kind: LoopKind | None
    level: int                               # nesting depth (root 0)
    pass_: int
    steps: tuple[BuildStep | ScopeBlock, ...]
    outputs: tuple[Output, ...] = ()
    escapes: tuple[int, ...] = ()     # outputs[k] escapes after steps[:escapes[k]] (else last)

    @property
    def path_item(self) -> tuple[int, int]:
        """This block's item in a block path: (loop, pass)."""
        return (self.loop, self.pass_)

    def blocks(self) -> Iterator[ScopeBlock]:
        """Every block below (and including) this one, pre-order."""
        return (item for event, _, item in walk_blocks(self) if event == "enter")

    def body(self) -> Iterator[BuildStep | ScopeBlock | Output]:
        """The block's steps with each output where it escapes: a batch leaves the block as
        soon as what it is made of is built, not at the end of the batch, so it is not held
        while the block's unrelated work runs."""
        k = 0
        for i, s in enumerate(self.steps):
            while k < len(self.outputs) and k < len(self.escapes) and self.escapes[k] <= i:
                yield self.outputs[k]
                k += 1
            yield s
        yield from self.outputs[k:]


def walk_blocks(root: ScopeBlock, path: Path = ()
                ) -> Iterator[tuple[str, Path, BuildStep | ScopeBlock]]:
    """The block tree in execution order, as ``(event, path, item)``: ``("enter", path,
    block)`` before a block's steps, ``("step", path, step)`` for each BuildStep of the block
    at ``path``, ``("escape", path, output)`` where each of its outputs escapes (between
    the steps: ``ScopeBlock.body``), ``("exit", path, block)`` after them.

    ``path`` is the block path ((loop, pass), ...) of the block entered, exited or holding
    the step; ``root`` is entered and exited too, at ``path`` (empty for a schedule's root).
    The passes over a schedule (static points, allocations, the cell table, the dump,
    well_formed) are all this one walk.
    """
    yield "enter", path, root
    for s in root.body():
        if isinstance(s, ScopeBlock):
            yield from walk_blocks(s, path + (s.path_item,))
        elif isinstance(s, Output):
            yield "escape", path, s
        else:
            yield "step", path, s
    yield "exit", path, root


@dataclass(frozen=True)
class OrderedSchedule:
    """The ordered tree of scope blocks over a RichSchedule: the schedule the runtime lowers
    and the peak analysis sweeps. ``sinks``: the equation sums written to the caller's
    destination (sum form → sink kind, ``BatchPolicy.sinks``), never held."""

    root: ScopeBlock
    rich: RichSchedule
    sinks: dict = field(default_factory=dict, compare=False)

    @property
    def forms(self):
        """The forms of the underlying RichSchedule (ids index this tuple)."""
        return self.rich.forms

    @property
    def loops(self):
        """Loop id → Loop of the underlying RichSchedule."""
        return self.rich.loops


def form_paths(rich: RichSchedule) -> list[Path]:
    """Block path of every form: its scope loops, each with the pass it must run in.

    Forward, in production order: a form reading a value completed by a block over L (an
    assembled form via L) from inside L runs one pass later than that block; otherwise it
    runs in the latest pass of what it reads. Backward: a form that does not escape L is
    lifted to the earliest pass of its readers inside L, so it is built in the pass that
    uses it. A reader in a later pass than a per-batch form it needs is refused: that form
    would have to be materialized whole.
    """
    forms = rich.forms

    def done(f: int) -> float:       # a sum built per batch is complete after its last entry
        form = forms[f]
        if form.kind is FormKind.SUM and form.scope and form.operands:
            return max(rich.rank[o] for o in form.operands) + 0.5
        return rich.rank[f]

    order = sorted(range(len(forms)), key=done)
    reads = [list(f.operands) + ([f.source] if f.source >= 0 else []) for f in forms]
    escapes = {(forms[f].source, loop) for f in range(len(forms))
               if forms[f].kind is FormKind.ASSEMBLE for loop in forms[f].span}
    passes: list[dict[int, int]] = [dict() for _ in forms]
    for fid in order:
        for loop in forms[fid].scope:
            p = 0
            for r in reads[fid]:
                src = forms[r]
                if src.kind is FormKind.ASSEMBLE and loop in src.span:
                    p = max(p, passes[src.source].get(loop, 0) + 1)
                elif loop in src.scope:
                    p = max(p, passes[r][loop])
            passes[fid][loop] = p
    for fid in reversed(order):
        for loop in forms[fid].scope:
            if (fid, loop) in escapes:
                continue
            inside = [passes[rd][loop] for rd, _ in rich.readers.get(fid, ())
                      if loop in forms[rd].scope]
            if inside:
                passes[fid][loop] = max(passes[fid][loop], min(inside))
    for fid in order:
        for r in reads[fid]:
            for loop in set(forms[r].scope) & set(forms[fid].scope):
                if passes[r][loop] != passes[fid][loop]:
                    raise ScheduleError(
                        f"form f{fid} (v{forms[fid].value}) in pass {passes[fid][loop]} of loop "
                        f"L{loop} reads f{r}, which exists per batch only in pass "
                        f"{passes[r][loop]}; it would have to be materialized whole", (loop,))
    return [tuple((l, passes[f][l]) for l in forms[f].scope) for f in range(len(forms))]


class _Node:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.builds: list[BuildStep] = []
        self.outputs: list[Output] = []
        self.children: dict[tuple[int, int], _Node] = {}


def build_ordered_schedule(rich: RichSchedule) -> OrderedSchedule:
    """The sequencer: forms placed in block paths of (loop, pass), steps in each block
    ordered by a topological sort of their dependencies (ties: static point), escapes as
    block outputs. Raises ScheduleError when a block would need its own output."""
    forms = rich.forms
    paths = form_paths(rich)
    root = _Node(())

    def node(path: Path) -> _Node:
        cur = root
        for k, item in enumerate(path):
            cur = cur.children.setdefault(item, _Node(path[: k + 1]))
        return cur

    for form in forms:
        if form.kind is FormKind.SUM:
            for k in range(len(form.operands)):
                node(paths[form.id]).builds.append(BuildStep(form.id, k))
        elif form.kind is FormKind.ASSEMBLE:
            kind = (OutputKind.ACCUMULATE_SUM if rich.loops[form.via].kind is LoopKind.CONTRACTED
                    else OutputKind.ACCUMULATE_SCATTER)
            node(paths[form.source]).outputs.append(Output(form.id, kind))
        else:
            node(paths[form.id]).builds.append(BuildStep(form.id))
    sched = OrderedSchedule(_assemble(root, rich), rich)
    well_formed(sched)
    return sched


def _step_rank(rich: RichSchedule, s: BuildStep) -> int:
    if s.entry >= 0:
        return rich.accumulate_rank[(s.form, s.entry)]
    return rich.rank[s.form]


def _complete(rich: RichSchedule, f: int) -> list[tuple]:
    """What reading form ``f`` whole needs: the form (made by its first entry, for a sum)
    and, for a sum of several entries, its last entry: a reader must not run between
    them, whatever order a block's items are given in."""
    form = rich.forms[f]
    if form.kind is FormKind.SUM and len(form.operands) > 1:
        return [("form", f), ("entry", f, len(form.operands) - 1)]
    return [("form", f)]


def _reads(rich: RichSchedule, s: BuildStep) -> list[tuple]:
    form = rich.forms[s.form]
    if s.entry >= 0:
        need = _complete(rich, form.operands[s.entry])
        if s.entry > 0:
            need.append(("entry", s.form, s.entry - 1))
        return need
    return [tok for o in form.operands for tok in _complete(rich, o)]


def _assemble(n: _Node, rich: RichSchedule) -> ScopeBlock:
    kids = [_assemble(c, rich) for _, c in sorted(n.children.items())]
    items: list[BuildStep | ScopeBlock | Output] = list(n.builds) + kids + list(n.outputs)
    produces: list[set] = []
    needs: list[set] = []
    ranks: list[int] = []
    for it in items:
        prod, need, rank = _summary(it, rich)
        produces.append(prod)
        needs.append(need - prod)
        ranks.append(rank)
    # an output is complete only when the loop ends: nothing inside the block reads it
    owner = {tok: k for k, prod in enumerate(produces) for tok in prod
             if not isinstance(items[k], Output)}
    deps = [{owner[t] for t in need if t in owner and owner[t] != k} for k, need in enumerate(needs)]
    users = defaultdict(set)
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].add(k)
    backwards = _by_rank(ranks, deps, users)
    if rich.size is not None and n.path and any(len(u) > 1 for u in users.values()):
        # inside a loop: forms shared by several fused terms are read where each term's
        # rank puts it, possibly far apart; ordered by memory instead, where that holds
        # less at once (where no item is read by two others, the rank order is kept)
        read = set().union(*needs)
        held = {t: rich.size(rich.forms[t[1]]) for t in owner
                if t[0] == "form" and t in read}
        maker = {}                  # an output → the item making its batch, if only it reads it
        for k, it in enumerate(items):
            if isinstance(it, Output):
                j = owner.get(("form", rich.forms[it.form].source))
                if j is not None and users[j] == {k}:
                    maker[k] = j
        lean = _by_memory(ranks, deps, users, produces, needs, held, maker)
        if _held_peak(lean, produces, needs, held) < \
                _held_peak(backwards, produces, needs, held):
            backwards = lean
    order = [items[k] for k in reversed(backwards)]
    placed = set(backwards)
    waiting = [0 if k in placed else 1 for k in range(len(items))]
    if len(order) != len(items):
        stuck = [k for k in range(len(items)) if waiting[k]]
        raise ScheduleError(f"dependency cycle among the steps of block {n.path}: "
                            f"{len(stuck)} items wait on each other",
                            tuple(loop for loop, _ in n.path))
    steps = tuple(it for it in order if not isinstance(it, Output))
    outputs = tuple(it for it in order if isinstance(it, Output))
    escapes, k = [], 0
    for it in order:
        if isinstance(it, Output):
            escapes.append(k)
        else:
            k += 1
    if not n.path:
        return ScopeBlock(-1, "", None, 0, 0, steps, outputs, tuple(escapes))
    loop_id, pass_ = n.path[-1]
    loop = rich.loops[loop_id]
    return ScopeBlock(loop_id, loop.space, loop.kind, len(n.path), pass_, steps, outputs,
                      tuple(escapes))


def _by_rank(ranks: list[int], deps: list[set], users) -> list[int]:
    """A block's items placed from the end (the order reversed): each as late as its
    readers allow, the latest rank first among those whose readers are all placed, so a
    finished value is not held while unrelated work runs before its reader."""
    left = [len(users[k]) for k in range(len(ranks))]
    ready = [(-ranks[k], -k) for k in range(len(ranks)) if not left[k]]
    heapq.heapify(ready)
    backwards = []
    while ready:
        _, k = heapq.heappop(ready)
        k = -k
        backwards.append(k)
        for d in sorted(deps[k]):
            left[d] -= 1
            if not left[d]:
                heapq.heappush(ready, (-ranks[d], -d))
    return backwards


def _by_memory(ranks: list[int], deps: list[set], users, produces: list[set],
               needs: list[set], held: dict, maker: dict[int, int]) -> list[int]:
    """Like ``_by_rank``, but the item placed next (from the end) is the one that leaves
    the fewest bytes of ``held`` (what the block makes and reads itself) live before it:
    what it reads and is not yet live, less what it makes that a later item reads
    (ties: latest rank). An output goes with the item that makes its batch (``maker``):
    placed together, the batch is live only between them, so an output is not left to the
    end of the block with every partial held until then."""
    left = [len(users[k]) for k in range(len(ranks))]
    ready = {k for k in range(len(ranks)) if not left[k]}
    live: set = set()
    backwards = []

    def after(k: int, before: set) -> set:
        return (before - produces[k]) | {t for t in needs[k] if t in held}

    def cost(k: int) -> tuple:
        new = after(k, live)
        if k in maker:
            new = after(maker[k], new)
        return sum(held[t] for t in new) - sum(held[t] for t in live), -ranks[k], -k

    def place(k: int) -> None:
        nonlocal live
        ready.discard(k)
        backwards.append(k)
        live = after(k, live)
        for d in deps[k]:
            left[d] -= 1
            if not left[d]:
                ready.add(d)

    while ready:
        k = min(ready, key=cost)
        place(k)
        if k in maker:
            place(maker[k])        # ready: the output was its only reader
    return backwards


def _held_peak(backwards: list[int], produces: list[set], needs: list[set],
               held: dict) -> int:
    """The most bytes of ``held`` live at once when the items run in this order (placed
    from the end): each made by its item and live to its last reader in the block."""
    order = backwards[::-1]
    last = {t: i for i, k in enumerate(order) for t in needs[k]}
    live = peak = 0
    for i, k in enumerate(order):
        live += sum(held.get(t, 0) for t in produces[k])
        peak = max(peak, live)
        live -= sum(held.get(t, 0) for t in needs[k] if last.get(t) == i)
    return peak


def _summary(item, rich: RichSchedule) -> tuple[set, set, int]:
    """What an item produces, what it needs, and its rank (first use)."""
    if isinstance(item, Output):
        return ({("form", item.form)}, set(_complete(rich, rich.forms[item.form].source)),
                rich.rank[item.form])
    if isinstance(item, BuildStep):
        prod = {("entry", item.form, item.entry)} if item.entry >= 0 else {("form", item.form)}
        if item.entry == 0:
            prod.add(("form", item.form))
        return prod, set(_reads(rich, item)), _step_rank(rich, item)
    prod, need, rank = set(), set(), None
    for s in item.steps:
        p, q, r = _summary(s, rich)
        prod |= p
        need |= q
        rank = r if rank is None else min(rank, r)
    for o in item.outputs:
        prod.add(("form", o.form))
        need.update(_complete(rich, rich.forms[o.form].source))
        rank = rich.rank[o.form] if rank is None else min(rank, rich.rank[o.form])
    return prod, need - prod, rank if rank is not None else 0


def well_formed(sched: OrderedSchedule) -> None:
    """Raise ScheduleError naming the first violated rule."""
    rich = sched.rich
    forms = rich.forms
    built: dict[tuple[int, int], tuple] = {}
    escapes: dict[int, tuple] = {}
    done: set = set()
    for event, path, item in walk_blocks(sched.root):
        if event == "enter":
            if path:
                if item.loop in {l for l, _ in path[:-1]}:
                    raise ScheduleError(f"loop L{item.loop} is nested inside itself at "
                                        f"{path[:-1]}")
                if item.loop not in rich.loops:
                    raise ScheduleError(f"block over unknown loop L{item.loop}")
            sibs = [s.path_item for s in item.steps if isinstance(s, ScopeBlock)]
            if len(set(sibs)) != len(sibs):
                raise ScheduleError(f"block {path}: two sibling blocks over the same loop and "
                                    f"pass")
        elif event == "step":
            _check_step(item, path, rich, built, done)
        elif event == "escape":
            _check_output(item, path, rich, done)
            escapes[item.form] = path
        elif path:                   # complete once the loop ends: read only after it
            done.update(("form", o.form) for o in item.outputs)
    for form in forms:
        if form.kind is FormKind.SUM:
            missing = [k for k in range(len(form.operands)) if (form.id, k) not in built]
        elif form.kind is FormKind.ASSEMBLE:
            missing = [] if ("form", form.id) in done else [0]
        else:
            missing = [] if (form.id, -1) in built else [0]
        if missing:
            raise ScheduleError(f"f{form.id} (v{form.value}) is never produced")
    for fid, path in escapes.items():
        src = forms[forms[fid].source]
        if src.kind is FormKind.ASSEMBLE:
            inner = escapes[src.id]
            if inner[: len(path)] != path or len(inner) != len(path) + len(src.span):
                raise ScheduleError(f"escape chain of v{src.value} is broken: f{src.id} leaves "
                                    f"{inner} but f{fid} forwards it from {path}")


def _check_step(s: BuildStep, path: Path, rich: RichSchedule, built: dict, done: set) -> None:
    """well_formed's rules for one BuildStep: a known, built form, once, in its own nest,
    after what it reads; records what it produces."""
    forms = rich.forms
    n = len(forms)
    if not 0 <= s.form < n:
        raise ScheduleError(f"BuildStep names form f{s.form}, out of range 0..{n - 1}")
    form = forms[s.form]
    if form.kind is FormKind.ASSEMBLE:
        raise ScheduleError(f"f{s.form} is assembled by a block output, not built")
    if (s.form, s.entry) in built:
        raise ScheduleError(f"f{s.form} (v{form.value}) is built twice: at "
                            f"{built[(s.form, s.entry)]} and {path}")
    built[(s.form, s.entry)] = path
    if tuple(l for l, _ in path) != form.scope:
        raise ScheduleError(f"f{s.form} (v{form.value}) is built at {path} but lives in "
                            f"the nest {form.scope}")
    for tok in _reads(rich, s):
        if tok not in done:
            raise ScheduleError(f"f{s.form} (v{form.value}) at {path} reads {tok} "
                                f"before it is produced")
    done.add(("entry", s.form, s.entry) if s.entry >= 0 else ("form", s.form))
    if s.entry == 0:
        done.add(("form", s.form))


def _check_output(o: Output, path: Path, rich: RichSchedule, done: set) -> None:
    """well_formed's rules for a block's output: an assembled form over this block's loop
    whose batches were built inside it before it escapes."""
    forms = rich.forms
    if not 0 <= o.form < len(forms) or forms[o.form].kind is not FormKind.ASSEMBLE:
        raise ScheduleError(f"output f{o.form} of block {path} is not an assembled form")
    form = forms[o.form]
    loop = path[-1][0] if path else -1
    if form.via != loop:
        raise ScheduleError(f"f{o.form} assembles loop L{form.via} but is an output of "
                            f"the block over L{loop}")
    if ("form", form.source) not in done:
        raise ScheduleError(f"output f{o.form} of block {path}: its batches f{form.source}"
                            f" are never built inside the block before it escapes")
    if any(tok not in done for tok in _complete(rich, form.source)):
        raise ScheduleError(f"output f{o.form} of block {path} escapes before the last "
                            f"entry of its batches' sum f{form.source} is added")
