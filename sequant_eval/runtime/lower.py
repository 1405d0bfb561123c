"""Lower an ordered schedule: to a loop program, or to the op graph unrolled batch by batch.

``lower_program`` keeps every batch loop a loop (``program.py``): each block is emitted once,
its nodes' shapes and ranges naming the current batch, so the program does not grow with
the number of batches. This is what a single-device run executes.

``lower_schedule`` unrolls every block batch by batch: every op concrete — static shapes,
one device, no control flow — what a CUDA stream or graph capture wants, and what the
placement passes, the run extraction and the cluster partition reason about.

Both walk the schedule the same way (one class, two modes), so the unrolled graph is the
loop program expanded. The node order is the schedule's order, so metering either
reproduces the static sweep.

Each form becomes, per batch, the node that holds its current buffer: a leaf batch is a
``slice`` of an ``input``; a destination is ``zeros`` when its outermost loop opens and
each batch ``accumulate``s or ``scatter``s into it (in place); an equation's sum is the
first entry (``init``, or the term's own buffer ``scale``d in place when that was its last
read) followed by in-place ``accumulate``s of ``permute``d term results.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..schedule.analysis import ScheduleAnalysis
from ..schedule.forms import FormKind
from ..schedule.ordered import BuildStep, Output, ScopeBlock
from ..schedule.peak import (allocations, common_factors, folded_into, moves,
                             scaled_in_place, schedule_points, stream_rows)
from .graph import Graph, Node, Op
from .program import Block, Extent, LoopProgram, Rows, Span, Work, symbolic

__all__ = ["Lowered", "lower_schedule", "lower_program"]


@dataclass
class Lowered:
    """A lowered op graph: the node of each equation's result, of each kept (persistent)
    form, and the producing node → form map."""

    graph: Graph
    roots: dict[str, int]                  # equation → node of its final sum
    kept: dict[int, int] = field(default_factory=dict)   # persistent form → its node
    form_of: dict[int, int] = field(default_factory=dict)  # producing node → form

    def root_nodes(self) -> list[int]:
        """Nodes to keep: each equation's result, then each kept form."""
        return list(self.roots.values()) + list(self.kept.values())


def lower_schedule(a: ScheduleAnalysis, persistent: frozenset[int] = frozenset(),
                   stored: frozenset[int] = frozenset(),
                   skipped: frozenset[int] = frozenset()) -> Lowered:
    """``stored`` forms come from an earlier evaluation (an ``input`` node each) and
    ``skipped`` ones are not made; ``persistent`` ones are kept as extra roots."""
    return _Lowering(a, persistent, stored, skipped).run()


def lower_program(a: ScheduleAnalysis, persistent: frozenset[int] = frozenset(),
                  stored: frozenset[int] = frozenset(),
                  skipped: frozenset[int] = frozenset()) -> LoopProgram:
    """The schedule as a loop program (same arguments as ``lower_schedule``)."""
    low = _Lowering(a, persistent, stored, skipped, loops=True)
    done = low.run()
    low.root.body[:0] = low.readers        # inputs are readers: made once, up front
    low.root.freeze()
    low.held.clear()
    return LoopProgram(done.graph, low.root, done.roots, done.kept, done.form_of)


class _Lowering:
    def __init__(self, a, persistent, stored, skipped, loops: bool = False) -> None:
        self.a = a
        self.forms = a.rich.forms
        self.sched = a.ordered
        self.g = Graph()
        self.ctx: dict[int, tuple[int, int]] = {}
        self.node_of: dict[int, int] = {}
        self.inputs: dict[int, int] = {}
        self.alloc = allocations(self.sched)
        points = schedule_points(self.sched)
        self.moved = {(points[k].form, points[k].entry)
                      for k in moves(self.sched, a.forest, points)}
        self.scaled = {(points[k].form, points[k].entry)
                       for k in scaled_in_place(self.sched, a.forest, points)}
        self.factors = common_factors(self.sched, a.forest)    # form → shared |coefficient|
        self.factored: set[int] = set()         # nodes already scaled by their factor
        self.persistent, self.stored, self.skipped = persistent, stored, skipped
        self.seq = 0
        self.form_of: dict[int, int] = {}
        self.layouts = a.layouts          # contractions written in their sums' order
        self.folded = folded_into(self.sched)   # term results added straight into sums
        self.loops = loops                      # a loop program (else unrolled)
        self.blocks = 0
        self.depth = 0                          # loop blocks open around what is emitted
        self.root = Block(None, 0)
        self.body = self.root.body              # where emitted nodes go (loop program)
        self.readers: list[int] = []            # input nodes (loop program: up front)
        self.held: dict = {}                    # interned tuples and symbolic values
        self.sinks = self.sched.sinks           # sums written to the caller's destination
        self.names = {r.value: r.name for r in a.forest.roots}
        self.batch_sums: dict[int, list[int]] = {}          # loop → sums built per batch
        for f in self.forms:
            if f.kind is FormKind.SUM and f.scope:
                self.batch_sums.setdefault(f.scope[-1], []).append(f.id)

    def emit(self, op: Op, inputs=(), params=(), shape=(), tag="") -> int:
        self.seq += 1
        if self.loops:                # one copy of each repeated shape, range, parameter
            params, shape = self.intern(tuple(params)), self.intern(tuple(shape))
        n = self.g.push(Node(op, tuple(inputs), tuple(params), tuple(shape), self.seq, tag))
        if self.loops:
            (self.readers if op is Op.INPUT else self.body).append(n)
        return n

    def intern(self, x):
        """``x`` (tuples within tuples, symbolic values) as the one copy held of each value
        of the same types (``(2, 2)`` and ``(2.0, 2.0)`` are equal, but not the same)."""
        if isinstance(x, tuple):
            x = tuple(self.intern(y) for y in x)
        elif isinstance(x, Work):
            x = Work(x.coef, self.intern(x.dims))
        elif not isinstance(x, (Extent, Span, float)):     # floats: flops, coefficients
            return x
        return self.held.setdefault(repr(x), x)       # repr: 2 and 2.0 differ

    def extent(self, loop: int) -> int | Extent:
        """The current batch's length on ``loop``."""
        r = self.ctx[loop]
        return Extent(r.level) if isinstance(r, Span) else r[1] - r[0]

    def span(self, loop: int) -> str:
        """The batch, for a tag: none in the loop program (the block around the node names
        its loop; a tag per node repeating it would grow the program with the loops)."""
        r = self.ctx[loop]
        return "" if isinstance(r, Span) else f"L{loop}[{r[0]}:{r[1]}]"

    def shape(self, fid: int, whole: frozenset[int] = frozenset()) -> tuple:
        f = self.forms[fid]
        shape = list(self.a.shapes[f.value])
        for pos, loop in f.sliced:
            if loop not in whole:
                shape[pos] = self.extent(loop)
        return tuple(shape)

    def run(self) -> Lowered:
        for fid in sorted(self.stored):
            self.node_of[fid] = self.emit(Op.INPUT, params=("stored", fid),
                                          shape=self.a.shapes[self.forms[fid].value],
                                          tag=f"f{fid} stored")
        self.block(self.sched.root)
        roots = {}
        for root in self.a.forest.roots:
            fid = next(f.id for f in self.forms
                       if f.kind is FormKind.SUM and f.value == root.value)
            if fid not in self.node_of:               # every term cancelled
                self.node_of[fid] = self.emit(Op.ZEROS, shape=self.a.shapes[root.value],
                                              tag=root.name) \
                    if fid not in self.sinks else self.open_sink(fid, fill=True)
            roots[root.name] = self.node_of[fid]
        kept = {f: self.node_of[f] for f in self.persistent if f in self.node_of}
        return Lowered(self.g, roots, kept, self.form_of)

    def block(self, block: ScopeBlock, path: tuple = ()) -> None:
        # Not ``walk_blocks``: ``loop`` runs a block's body once per batch range, so the
        # recursion re-enters each nested block per batch of the loops around it.
        for s in block.body():
            if isinstance(s, ScopeBlock):
                self.loop(s, path + (s.path_item,))
            elif isinstance(s, Output):
                self.output(block, s)
            elif not self._skip(s.form):
                self.build(s)

    def _skip(self, fid: int) -> bool:
        return fid in self.skipped or fid in self.stored

    def loop(self, block: ScopeBlock, path: tuple) -> None:
        loop = self.sched.loops[block.loop]
        self.allocate(block, path, loop)
        if not self.loops:
            for lo, hi in loop.ranges():
                self.ctx[block.loop] = (lo, hi)
                self.batch(block, path)
        else:
            self.blocks += 1
            inner, outer = Block(loop, self.blocks), self.body
            outer.append(inner)
            self.body = inner.body
            self.ctx[block.loop] = Span(self.depth)
            self.depth += 1
            self.batch(block, path)
            self.depth -= 1
            self.body = outer
        del self.ctx[block.loop]

    def allocate(self, block: ScopeBlock, path: tuple, loop) -> None:
        """The destinations allocated when ``block`` opens (sinks opened after them)."""
        sinks = []
        for fid in self.alloc.get(path, ()):
            if self._skip(fid):
                continue
            if fid in self.folded:                  # its batches go straight into the sum
                target = self.folded[fid]
                if target in self.sinks:
                    if target not in self.node_of and target not in sinks:
                        sinks.append(target)
                elif target not in self.node_of:
                    shape = self.a.shapes[self.forms[target].value]
                    self.node_of[target] = self.emit(Op.ZEROS, shape=shape,
                                                     tag=f"f{target} sum")
                continue
            self.ctx[block.loop] = (0, loop.extent)
            shape = self.shape(fid)
            self.node_of[fid] = self.emit(Op.ZEROS, shape=shape,
                                          tag=f"f{fid} destination")
        for target in sinks:
            self.node_of[target] = self.open_sink(target)

    def open_sink(self, fid: int, fill: bool = False) -> int:
        """The caller's destination of sum ``fid``'s result, opened (zeroed when it
        accumulates, or when ``fill``: no term wrote it)."""
        value = self.forms[fid].value
        name = self.names[value]
        return self.emit(Op.SINK, params=(name, fill), shape=self.a.shapes[value],
                         tag=f"f{fid} sink {name}")

    def batch(self, block: ScopeBlock, path: tuple) -> None:
        """One batch of ``block`` (the loop program: its body, for every batch)."""
        for fid in self.batch_sums.get(block.loop, ()):    # a sliced inner sum starts anew
            self.node_of.pop(fid, None)
        self.block(block, path)

    def output(self, block: ScopeBlock, out: Output) -> None:
        """One batch of ``block`` leaving it: accumulated or scattered into its destination,
        or added into the sum it is folded into."""
        if self._skip(out.form):
            return
        f = self.forms[out.form]
        tag = f"f{out.form} {self.span(block.loop)}".rstrip()
        if out.form in self.folded:
            self.add_into(f, tag)
            return
        part, dest = self.node_of[f.source], self.node_of[out.form]
        if out.kind.value == "sum":
            adds = _work(1.0, self.g.nodes[part].shape)
            self.node_of[out.form] = self.emit(Op.ACCUMULATE, (dest, part), (1.0, adds),
                                               self.g.nodes[dest].shape, tag)
        else:
            index = [None] * len(self.g.nodes[dest].shape)
            for pos, l in self.forms[f.source].sliced:
                if l in f.span:
                    index[pos] = self.ctx[l]
            self.node_of[out.form] = self.emit(Op.SCATTER, (dest, part), (tuple(index),),
                                               self.g.nodes[dest].shape, tag)

    def add_into(self, f, tag: str) -> None:
        """One batch of a folded term result, added into its sum once per entry reading it
        (at the batch's position, through the entry's permutation). Each add is tagged with
        the term result it adds (its target and entry are its input and parameters)."""
        target = self.folded[f.id]
        part = self.node_of[f.source]
        factor = self.factors.get(f.id, 1)
        if factor != 1:                       # every entry shares it: scaled once, here
            part = self.emit(Op.SCALE, (part,), (float(factor), 0.0),
                             self.g.nodes[part].shape, f"{tag} x {factor}")
        index = [None] * len(self.a.shapes[f.value])
        for pos, l in self.forms[f.source].sliced:
            if l in f.span:
                index[pos] = self.ctx[l]
        entries = self.a.forest.values[self.forms[target].value].entries
        for r, leg in self.a.rich.readers[f.id]:
            e = entries[leg]
            at = tuple(index[p] for p in e.perm)
            work = _work(2.0, self.g.nodes[part].shape)
            self.node_of[target] = self.emit(
                Op.ADD_INTO, (self.node_of[target], part),
                (at, e.perm, float(e.coefficient / factor), work),
                self.g.nodes[self.node_of[target]].shape, tag)

    def stream(self, step: BuildStep, tag: str) -> None:
        """A leaf entry of a sum, read from its source ``stream_rows`` rows at a time, each
        chunk added into the sum through the entry's permutation (nothing held whole)."""
        f = self.forms[step.form]
        leaf = self.forms[f.operands[step.entry]]
        entry = self.a.forest.values[f.value].entries[step.entry]
        if step.form in self.sinks and step.form not in self.node_of:
            self.node_of[step.form] = self.open_sink(step.form)
        elif step.form not in self.node_of:
            shape = self.a.shapes[f.value]
            self.node_of[step.form] = self.emit(Op.ZEROS, shape=shape,
                                                tag=f"f{step.form} sum")
        shape = tuple(self.a.shapes[leaf.value])
        rows = stream_rows(shape, self.a.plan.policy.itemsize)
        if self.loops and shape and shape[0] > rows:     # one block, run once per chunk
            self.blocks += 1
            inner, outer = Block(Rows(leaf.id, rows, shape[0]), self.blocks), self.body
            outer.append(inner)
            self.body = inner.body
            self.chunk(step, leaf, entry, (Span(self.depth),) + (None,) * (len(shape) - 1),
                       (Extent(self.depth),) + shape[1:], f"f{leaf.id} rows", tag)
            self.body = outer
            return
        for lo in range(0, shape[0], rows) if shape else (0,):
            index = ((lo, min(lo + rows, shape[0])),) + (None,) * (len(shape) - 1) \
                if shape else ()
            part_shape = (index[0][1] - lo,) + shape[1:] if shape else ()
            self.chunk(step, leaf, entry, index, part_shape, f"f{leaf.id} [{lo}:{lo + rows}]",
                       tag)

    def chunk(self, step: BuildStep, leaf, entry, index: tuple, part_shape: tuple,
              chunk_tag: str, tag: str) -> None:
        """One chunk of a streamed leaf (rows ``index``), added into its sum."""
        part = self.emit(Op.SLICE, (self.inputs[leaf.value],), (index,), part_shape,
                         chunk_tag)
        target = self.node_of[step.form]
        self.node_of[step.form] = self.emit(
            Op.ADD_INTO, (target, part),
            (tuple(index[p] for p in entry.perm), entry.perm, float(entry.coefficient),
             _work(2.0, part_shape)),
            self.g.nodes[target].shape, f"{tag} entry {step.entry} (streamed)")

    def build(self, step: BuildStep) -> None:
        f = self.forms[step.form]
        batch = ",".join(filter(None, (self.span(l) for l in f.scope)))
        tag = f"f{step.form}" + (f" {batch}" if batch else "")
        if f.kind is FormKind.SUM:
            self.accumulate(step, tag)
        elif f.kind is FormKind.LEAF:
            if f.value not in self.inputs:
                self.inputs[f.value] = self.emit(Op.INPUT, params=(f.value,),
                                                 shape=self.a.shapes[f.value],
                                                 tag=self.a.forest.values[f.value].tensor)
            if step.form in self.folded:            # streamed into its sum, chunk by chunk
                return
            index = [None] * len(self.a.shapes[f.value])
            for pos, loop in f.sliced:
                index[pos] = self.ctx[loop]
            self.node_of[step.form] = self.emit(Op.SLICE, (self.inputs[f.value],),
                                                (tuple(index),), self.shape(step.form), tag)
        else:
            ops = tuple(self.node_of[o] for o in f.operands)
            v = self.a.forest.values[f.value]
            ext = dict(zip(v.left.modes, self.g.nodes[ops[0]].shape)) | dict(
                zip(v.right.modes, self.g.nodes[ops[1]].shape))
            layout = self.layouts.get(step.form)
            shape = self.shape(step.form)
            if layout is not None:
                shape = tuple(shape[p] for p in layout)
            scratch = self.a.scratch.get(step.form, 0)       # kernel temporaries, elements
            self.node_of[step.form] = self.emit(Op.CONTRACT, ops,
                                                (f.value, layout, scratch,
                                                 _work(2.0, tuple(ext.values()))), shape, tag)
        if f.kind is not FormKind.SUM:              # a sum is made entry by entry
            self.form_of[self.node_of[step.form]] = step.form

    def accumulate(self, step: BuildStep, tag: str) -> None:
        f = self.forms[step.form]
        entry = self.a.forest.values[f.value].entries[step.entry]
        if f.operands[step.entry] in self.folded:
            if self.forms[f.operands[step.entry]].kind is FormKind.LEAF:
                self.stream(step, tag)
            return                                     # a term: added batch by batch
        src = self.node_of[f.operands[step.entry]]
        tag = f"{tag} entry {step.entry}"
        factor = self.factors.get(f.operands[step.entry], 1)
        if factor != 1 and src not in self.factored:    # scaled once for all its entries
            src = self.emit(Op.SCALE, (src,), (float(factor), 0.0), self.g.nodes[src].shape,
                            f"{tag} x {factor}")
            self.node_of[f.operands[step.entry]] = src
            self.factored.add(src)
        alpha = float(entry.coefficient / factor)
        work = _work(2.0, self.g.nodes[src].shape)
        if (step.form, step.entry) in self.moved:       # the sum takes the term's buffer
            self.node_of[step.form] = src if alpha == 1.0 else self.emit(
                Op.SCALE, (src,), (alpha, work), self.g.nodes[src].shape, tag)
            return
        shape = self.g.nodes[src].shape
        if (step.form, step.entry) in self.scaled:      # its last read: scaled in place
            half = _work(1.0, shape)
            src = self.emit(Op.SCALE, (src,), (alpha, half), shape, tag)
            alpha, work = 1.0, half
        layout = self.layouts.get(f.operands[step.entry])   # made in another order
        perm = entry.perm if layout is None else tuple(layout.index(p) for p in entry.perm)
        view = self.emit(Op.PERMUTE, (src,), (perm,), tuple(shape[p] for p in perm), tag)
        if step.form in self.sinks and step.form not in self.node_of:
            self.node_of[step.form] = self.open_sink(step.form)
        if step.form not in self.node_of:
            self.node_of[step.form] = self.emit(Op.INIT, (view,), (alpha, work),
                                                self.g.nodes[view].shape, tag)
        else:
            target = self.node_of[step.form]
            self.node_of[step.form] = self.emit(Op.ACCUMULATE, (target, view), (alpha, work),
                                                self.g.nodes[target].shape, tag)


def _work(coef: float, dims: tuple) -> float | Work:
    """``coef * prod(dims)``: a number, or symbolic where a dim is a batch's length (the
    numbers folded into the coefficient, so the few batch lengths left are one shared
    tuple; whole numbers below 2**53, the product is exact in either order)."""
    batch = tuple(d for d in dims if symbolic(d))
    if not batch:
        return coef * float(prod(dims))
    return Work(coef * float(prod(d for d in dims if not symbolic(d))), batch)

