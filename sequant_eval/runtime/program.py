"""The loop program: the lowered schedule with its batch loops kept as loops.

The ordered schedule is lowered once (``lower.lower_program``) into op-graph nodes whose
shapes and parameters may name the *current batch* of a loop instead of a number, laid out
in a tree of ``Block``s: a block is a loop whose body (nodes and nested blocks) runs once
per batch range. So the program's size and the time to build it depend on the schedule
(forms, steps, loops), never on the number of batches; the executor
(``engine.run_program``) resolves each node's shapes and parameters as it reaches it.

Symbolic values, resolved against the current ranges ``{level: (lo, hi)}``, where a loop's
level is its depth in the block tree (0: a loop of the root's body). Naming the level, not
the loop, lets sibling loops share one copy of each shape and range: the program holds a
tuple per distinct pattern, not one per loop.

- ``Span(level)``: the batch's element range ``(lo, hi)`` (slice and scatter positions);
- ``Extent(level)``: its length ``hi - lo`` (a sliced mode's size);
- ``Work(coef, dims)``: ``coef * prod(dims)`` (an op's flops, over sliced sizes).

The unrolled op graph (``lower.lower_schedule``) is what the GPU dispatch layer and the
cluster partition work on: every op concrete, as a CUDA stream or graph capture wants.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from math import prod

from ..plan.loops import Loop
from .graph import Graph, Op

__all__ = ["Span", "Extent", "Work", "Rows", "Block", "LoopProgram", "resolve", "symbolic",
           "reserve_bound", "PROGRAM_BYTES_PER_NODE", "PROGRAM_BYTES_FIXED", "PLAN_BYTES",
           "GROWTH"]


@dataclass(frozen=True, slots=True)
class Span:
    """The current batch range ``(lo, hi)`` of the loop open at depth ``level``."""

    level: int


@dataclass(frozen=True, slots=True)
class Extent:
    """The length of the current batch of the loop open at depth ``level``."""

    level: int


@dataclass(frozen=True, slots=True)
class Work:
    """``coef * prod(dims)``, each dim a number or an ``Extent``."""

    coef: float
    dims: tuple


def resolve(x, ranges: Mapping[int, tuple[int, int]]):
    """``x`` with every symbolic value replaced by its value under ``ranges``."""
    kind = type(x)
    if kind is tuple:          # plain members are taken as they are: no call per number
        return tuple([y if type(y) in _PLAIN else resolve(y, ranges) for y in x])
    if kind is Span:
        return ranges[x.level]
    if kind is Extent:
        lo, hi = ranges[x.level]
        return hi - lo
    if kind is Work:
        return x.coef * prod(resolve(x.dims, ranges))
    return x


#: Types ``resolve`` never looks inside (the parameters' numbers, names and blanks).
_PLAIN = frozenset({int, float, str, bool, type(None)})


def symbolic(x) -> bool:
    """Whether ``x`` names a batch anywhere (so it must be resolved per batch)."""
    if isinstance(x, tuple):
        return any(symbolic(y) for y in x)
    return isinstance(x, (Span, Extent, Work))


@dataclass(frozen=True)
class Rows:
    """The loop over a streamed leaf's rows (``stream_rows`` of them a pass): a leaf entry
    of a sum read from its source chunk by chunk, as a loop of the program rather than a
    node pair per chunk, so the program does not grow with the size of the data."""

    form: int           # the leaf form streamed
    block: int          # rows a pass
    extent: int         # rows in all

    @property
    def nbatches(self) -> int:
        return -(-self.extent // self.block)

    def ranges(self) -> list[tuple[int, int]]:
        """The row range of every pass (the last short)."""
        return [(lo, min(lo + self.block, self.extent))
                for lo in range(0, self.extent, self.block)]


@dataclass(slots=True)
class Block:
    """A loop of the program (``loop`` None at the root): its body, in execution order,
    holds node ids and nested blocks; ``index`` numbers the blocks of one program."""

    loop: Loop | None
    index: int
    body: list | tuple = field(default_factory=list)     # int (node id) | Block

    def freeze(self) -> None:
        """The body, and every nested block's, as a tuple: the tree is complete (a tuple
        holds no spare room for appends)."""
        for item in self.body:
            if isinstance(item, Block):
                item.freeze()
        self.body = tuple(self.body)

    def ranges(self) -> list[tuple[int, int]]:
        """The batch ranges the body runs over (one pass for the root)."""
        return [(0, 0)] if self.loop is None else self.loop.ranges()

    def walk(self, chain: tuple[int, ...] = ()) -> Iterator[tuple[int, tuple[int, ...]]]:
        """Every node in textual order with the chain of blocks (indices) around it."""
        for item in self.body:
            if isinstance(item, Block):
                yield from item.walk(chain + (item.index,))
            else:
                yield item, chain


#: What one node of the program holds, bounded from above (the node, its tuples, the
#: executor's per-node release tables), bytes; measured by ``tests/runtime/test_program``.
PROGRAM_BYTES_PER_NODE = 800
#: What a program holds whatever its size (the block tree, the executor's tables), bytes.
PROGRAM_BYTES_FIXED = 64 * 1024
#: One kernel plan a backend keeps, with its key, bytes (bounded from above); a program
#: is charged two per contraction (its first plan and one in the LRU cache).
PLAN_BYTES = 1792


#: How much larger than the unbatched program a batched one of the same forest is allowed
#: to be before it is charged its own size (loops add destinations, outputs, sliced forms).
GROWTH = 1.5


def reserve_bound(unbatched: "LoopProgram", growth: float = GROWTH) -> int:
    """The bytes every batched program of a forest is charged, from its unbatched program:
    ``growth`` times its nodes and kernel plans (the same at every budget, so feasibility
    stays monotone in the budget; a program that outgrows it is charged its own size).
    ``growth=1`` is the charge of the unbatched program itself, where that is what runs."""
    nodes = math.ceil(growth * unbatched.nodes)
    plans = 2 * math.ceil(growth * unbatched.contractions)
    return PROGRAM_BYTES_FIXED + PROGRAM_BYTES_PER_NODE * nodes + PLAN_BYTES * plans


@dataclass
class LoopProgram:
    """A lowered schedule as a loop program: the node arena, the block tree, each
    equation's result node, each kept (persistent) form's node, node → form."""

    graph: Graph
    root: Block
    roots: dict[str, int]
    kept: dict[int, int] = field(default_factory=dict)
    form_of: dict[int, int] = field(default_factory=dict)
    memo: dict = field(default_factory=dict, repr=False)   # the executor's tables

    def root_nodes(self) -> list[int]:
        """Nodes to keep: each equation's result, then each kept form."""
        return list(self.roots.values()) + list(self.kept.values())

    @property
    def nodes(self) -> int:
        """Nodes in the program (each run once per batch of the blocks around it)."""
        return len(self.graph.nodes)

    @property
    def contractions(self) -> int:
        """Contraction nodes in the program."""
        return sum(1 for node in self.graph.nodes if node.op is Op.CONTRACT)

    @property
    def plan_cap(self) -> int:
        """Kernel plans a NumPy backend keeps for this program beside each contraction's
        first (full-batch) plan: one per contraction, least recently used out (a short
        batch's plan is the first one's grouping at its extents: no search)."""
        return self.contractions

    @property
    def reserved_bytes(self) -> int:
        """The memory the program itself is charged while it runs (its nodes and the
        executor's tables, bounded per node, plus a fixed part)."""
        return (PROGRAM_BYTES_FIXED + PROGRAM_BYTES_PER_NODE * self.nodes
                + PLAN_BYTES * self.plan_cap)

    def dump(self) -> str:
        """Stable text: the block tree with each node's op, inputs and symbolic params."""
        lines: list[str] = []

        def show(block: Block, depth: int) -> None:
            pad = "  " * depth
            for item in block.body:
                if isinstance(item, Block):
                    lp = item.loop
                    what = f"rows of f{lp.form}" if isinstance(lp, Rows) else \
                        f"L{lp.id} {{{lp.space}}}"
                    lines.append(f"{pad}loop {what} {lp.nbatches} x {lp.block} over "
                                 f"{lp.extent}:")
                    show(item, depth + 1)
                else:
                    node = self.graph.nodes[item]
                    lines.append(f"{pad}n{item} {node.op.value}("
                                 f"{', '.join(f'n{i}' for i in node.inputs)})"
                                 f"{' ' + repr(node.params) if node.params else ''}"
                                 f"{' ' + node.tag if node.tag else ''}")

        show(self.root, 0)
        return "\n".join(lines) + "\n"
