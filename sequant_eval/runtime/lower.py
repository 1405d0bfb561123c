"""Lower an ordered schedule to the op graph, every block unrolled batch by batch.

Unrolling (rather than a loop node with a body) keeps every op concrete: static shapes,
one device, no control flow — what a CUDA stream or graph capture wants, and what the
passes and the run extraction can reason about. The node order is the schedule's order,
so metering the graph reproduces the static sweep.

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
from ..schedule.ordered import BuildStep, ScopeBlock
from ..schedule.peak import allocations, folded_into, moves, schedule_points, stream_rows
from .graph import Graph, Node, Op

__all__ = ["Lowered", "lower_schedule"]


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


class _Lowering:
    def __init__(self, a, persistent, stored, skipped) -> None:
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
        self.persistent, self.stored, self.skipped = persistent, stored, skipped
        self.seq = 0
        self.form_of: dict[int, int] = {}
        self.layouts = a.layouts          # contractions written in their sums' order
        self.folded = folded_into(self.sched)   # term results added straight into sums

    def emit(self, op: Op, inputs=(), params=(), shape=(), tag="") -> int:
        self.seq += 1
        return self.g.push(Node(op, tuple(inputs), tuple(params), tuple(shape), self.seq, tag))

    def shape(self, fid: int, whole: frozenset[int] = frozenset()) -> tuple:
        f = self.forms[fid]
        shape = list(self.a.shapes[f.value])
        for pos, loop in f.sliced:
            if loop not in whole:
                lo, hi = self.ctx[loop]
                shape[pos] = hi - lo
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
                self.node_of[fid] = self.emit(Op.ZEROS, params=(self.a.shapes[root.value],),
                                              shape=self.a.shapes[root.value], tag=root.name)
            roots[root.name] = self.node_of[fid]
        kept = {f: self.node_of[f] for f in self.persistent if f in self.node_of}
        return Lowered(self.g, roots, kept, self.form_of)

    def block(self, block: ScopeBlock, path: tuple = ()) -> None:
        # Not ``walk_blocks``: ``loop`` runs a block's body once per batch range, so the
        # recursion re-enters each nested block per batch of the loops around it.
        for s in block.steps:
            if isinstance(s, ScopeBlock):
                self.loop(s, path + (s.path_item,))
            elif not self._skip(s.form):
                self.build(s)

    def _skip(self, fid: int) -> bool:
        return fid in self.skipped or fid in self.stored

    def loop(self, block: ScopeBlock, path: tuple) -> None:
        loop = self.sched.loops[block.loop]
        for fid in self.alloc.get(path, ()):
            if self._skip(fid):
                continue
            if fid in self.folded:                  # its batches go straight into the sum
                target = self.folded[fid]
                if target not in self.node_of:
                    shape = self.a.shapes[self.forms[target].value]
                    self.node_of[target] = self.emit(Op.ZEROS, params=(shape,), shape=shape,
                                                     tag=f"f{target} sum")
                continue
            self.ctx[block.loop] = (0, loop.extent)
            shape = self.shape(fid)
            self.node_of[fid] = self.emit(Op.ZEROS, params=(shape,), shape=shape,
                                          tag=f"f{fid} destination")
        for lo, hi in loop.ranges():
            self.ctx[block.loop] = (lo, hi)
            self.block(block, path)
            for out in block.outputs:
                if self._skip(out.form):
                    continue
                f = self.forms[out.form]
                tag = f"f{out.form} L{block.loop} [{lo}:{hi}]"
                if out.form in self.folded:
                    self.add_into(f, tag)
                    continue
                part, dest = self.node_of[f.source], self.node_of[out.form]
                if out.kind.value == "sum":
                    adds = float(prod(self.g.nodes[part].shape))
                    self.node_of[out.form] = self.emit(Op.ACCUMULATE, (dest, part),
                                                       (1.0, adds), self.g.nodes[dest].shape,
                                                       tag)
                else:
                    index = [None] * len(self.g.nodes[dest].shape)
                    for pos, l in self.forms[f.source].sliced:
                        if l in f.span:
                            index[pos] = self.ctx[l]
                    self.node_of[out.form] = self.emit(Op.SCATTER, (dest, part),
                                                       (tuple(index),),
                                                       self.g.nodes[dest].shape, tag)
        del self.ctx[block.loop]

    def add_into(self, f, tag: str) -> None:
        """One batch of a folded term result, added into its sum once per entry reading it
        (at the batch's position, through the entry's permutation)."""
        target = self.folded[f.id]
        part = self.node_of[f.source]
        index = [None] * len(self.a.shapes[f.value])
        for pos, l in self.forms[f.source].sliced:
            if l in f.span:
                index[pos] = self.ctx[l]
        entries = self.a.forest.values[self.forms[target].value].entries
        for r, leg in self.a.rich.readers[f.id]:
            e = entries[leg]
            at = tuple(index[p] for p in e.perm)
            work = 2.0 * prod(self.g.nodes[part].shape)
            self.node_of[target] = self.emit(
                Op.ADD_INTO, (self.node_of[target], part),
                (at, e.perm, float(e.coefficient), work),
                self.g.nodes[self.node_of[target]].shape, f"{tag} -> f{target} entry {leg}")

    def stream(self, step: BuildStep, tag: str) -> None:
        """A leaf entry of a sum, read from its source ``stream_rows`` rows at a time, each
        chunk added into the sum through the entry's permutation (nothing held whole)."""
        f = self.forms[step.form]
        leaf = self.forms[f.operands[step.entry]]
        entry = self.a.forest.values[f.value].entries[step.entry]
        if step.form not in self.node_of:
            shape = self.a.shapes[f.value]
            self.node_of[step.form] = self.emit(Op.ZEROS, params=(shape,), shape=shape,
                                                tag=f"f{step.form} sum")
        shape = tuple(self.a.shapes[leaf.value])
        rows = stream_rows(shape, self.a.plan.policy.itemsize)
        for lo in range(0, shape[0], rows) if shape else (0,):
            index = ((lo, min(lo + rows, shape[0])),) + (None,) * (len(shape) - 1) \
                if shape else ()
            part_shape = (index[0][1] - lo,) + shape[1:] if shape else ()
            part = self.emit(Op.SLICE, (self.inputs[leaf.value],), (index,), part_shape,
                             f"f{leaf.id} [{lo}:{lo + rows}]")
            at = tuple(index[p] for p in entry.perm)
            target = self.node_of[step.form]
            self.node_of[step.form] = self.emit(
                Op.ADD_INTO, (target, part),
                (at, entry.perm, float(entry.coefficient), 2.0 * prod(part_shape)),
                self.g.nodes[target].shape, f"{tag} entry {step.entry} (streamed)")

    def build(self, step: BuildStep) -> None:
        f = self.forms[step.form]
        batch = ",".join(f"L{l}[{self.ctx[l][0]}:{self.ctx[l][1]}]" for l in f.scope)
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
                                                 2.0 * prod(ext.values())), shape, tag)
        self.form_of[self.node_of[step.form]] = step.form

    def accumulate(self, step: BuildStep, tag: str) -> None:
        f = self.forms[step.form]
        entry = self.a.forest.values[f.value].entries[step.entry]
        if f.operands[step.entry] in self.folded:
            if self.forms[f.operands[step.entry]].kind is FormKind.LEAF:
                self.stream(step, tag)
            return                                     # a term: added batch by batch
        src = self.node_of[f.operands[step.entry]]
        alpha = float(entry.coefficient)
        tag = f"{tag} entry {step.entry}"
        work = 2.0 * prod(self.g.nodes[src].shape)
        if (step.form, step.entry) in self.moved:       # the sum takes the term's buffer
            self.node_of[step.form] = src if alpha == 1.0 else self.emit(
                Op.SCALE, (src,), (alpha, work), self.g.nodes[src].shape, tag)
            return
        shape = self.g.nodes[src].shape
        layout = self.layouts.get(f.operands[step.entry])   # made in another order
        perm = entry.perm if layout is None else tuple(layout.index(p) for p in entry.perm)
        view = self.emit(Op.PERMUTE, (src,), (perm,), tuple(shape[p] for p in perm), tag)
        if step.form not in self.node_of:
            self.node_of[step.form] = self.emit(Op.INIT, (view,), (alpha, work),
                                                self.g.nodes[view].shape, tag)
        else:
            target = self.node_of[step.form]
            self.node_of[step.form] = self.emit(Op.ACCUMULATE, (target, view), (alpha, work),
                                                self.g.nodes[target].shape, tag)
