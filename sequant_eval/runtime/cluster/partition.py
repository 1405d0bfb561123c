"""Cut a fitted schedule's op graph into client work and one task per outer batch.

The schedule is lowered as for one process, without the rewriting passes (so every op is an
op of the single-process run with passes off, which gives bitwise the same results), and
with the node range of every batch of every *outermost* loop block marked. Each such batch
becomes a task: its nodes as a graph of their own that reads the values computed before
the block as stored inputs (computed once, shared with the workers) and the leaf inputs
through its own readers (each worker reads its batch's sub-blocks itself). In-place
updates of a buffer allocated outside the batch — a block's outputs, a joint scatter or a
term added into its equation's sum from an inner block — are applied by the client after
the task, in batch order (the single-process order). Everything else runs on the client,
in the single-process order. A block whose batches read one another's values is refused
for distribution and runs on the client (``Partition.client_loops`` names it).

The client's steps: ``pre`` (work before the first distributed block), then per block and
batch the ``applies`` segment run once that batch's task has come back.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
import uuid
from dataclasses import dataclass, field, replace

from ...forest.values import Forest
from ...plan.loops import Loop
from ...schedule.analysis import ScheduleAnalysis
from ..graph import INPLACE, VIEWS, Graph, Node, Op
from ..lower import _Lowering

__all__ = ["Segment", "Task", "Block", "Partition", "partition_schedule"]


@dataclass(frozen=True)
class Segment:
    """Nodes of the op graph run together, as their own graph: ``stored`` are the values
    (global node ids) it reads from earlier steps, ``gives`` the values it hands on (its
    ``graph``'s roots ``roots``, in the same order), ``step`` its place on the client."""

    graph: Graph
    roots: tuple[int, ...]
    gives: tuple[int, ...]
    stored: tuple[int, ...]
    step: int

    @property
    def empty(self) -> bool:
        """No roots: the segment gives nothing and need not run."""
        return not self.roots


@dataclass(frozen=True)
class Task:
    """One batch of an outer block, run on a worker."""

    block: int                      # index in ``Partition.blocks``
    batch: int
    span: tuple[int, int]           # the batch's element range on the block's loop
    segment: Segment


@dataclass(frozen=True)
class Block:
    """An outermost loop block run as tasks: its batches, and what the client applies after
    each (``applies[b]`` after ``tasks[b]``)."""

    loop: Loop
    pass_: int
    equations: tuple[str, ...]      # the equations its results feed
    tasks: tuple[Task, ...]
    applies: tuple[Segment, ...]

    @property
    def hoisted(self) -> tuple[int, ...]:
        """Values computed before the block and read by its tasks (scattered once)."""
        return tuple(sorted({i for t in self.tasks for i in t.segment.stored}))

    def describe(self) -> str:
        """One line: the loop, its batching and the equations it feeds."""
        lp = self.loop
        return (f"loop L{lp.id} {{{lp.space}:{lp.kind.value}}} ({lp.nbatches} batches of "
                f"{lp.block} over {lp.extent}; equations {', '.join(self.equations) or '-'})")


@dataclass(frozen=True)
class Partition:
    """The op graph cut for a cluster: client steps, distributed blocks, final results."""

    forest: Forest
    analysis: ScheduleAnalysis
    graph: Graph
    pre: Segment
    blocks: tuple[Block, ...]
    results: dict[str, int]         # equation → global node of its result
    last_use: dict[int, int]        # global node → last client step holding it
    client_loops: tuple[int, ...]   # outer loops kept on the client (batches not independent)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)   # names this program on
    # the workers: their kernel plans are cached per program (value ids are per forest)

    @property
    def steps(self) -> list[Segment]:
        """The client's steps in order: ``pre``, then every block's ``applies``, batch by batch."""
        return [self.pre] + [s for b in self.blocks for s in b.applies]

    @property
    def tasks(self) -> list[Task]:
        """Every task, block by block and batch by batch (the submission order)."""
        return [t for b in self.blocks for t in b.tasks]


class _Marked(_Lowering):
    """The lowering, recording the node range of every batch of every outermost block."""

    def __init__(self, a: ScheduleAnalysis) -> None:
        super().__init__(a, frozenset(), frozenset(), frozenset())
        self.bodies: list[tuple[tuple[int, int], int, int]] = []   # (block, first, end)

    def block(self, block, path: tuple = ()) -> None:
        if len(path) != 1:
            return super().block(block, path)
        start = len(self.g.nodes)
        super().block(block, path)
        self.bodies.append((path[0], start, len(self.g.nodes)))


def _is_reader(node: Node) -> bool:
    return node.op is Op.INPUT and node.params[0] != "stored"


def partition_schedule(a: ScheduleAnalysis) -> Partition:
    """Lower ``a`` and cut it: one task per batch of every outermost block whose batches are
    independent; the rest on the client."""
    m = _Marked(a)
    low = m.run()
    g = low.graph
    live = sorted(g.reachable(low.roots.values()))
    alive = set(live)
    owner = _owners(g)
    blocks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for key, start, end in m.bodies:
        blocks.setdefault(key, []).append((start, end))
    where: dict[int, tuple[int, int]] = {}
    kept, client_loops = [], []
    for key, ranges in blocks.items():
        trial = {n: (len(kept), b) for b, (s, e) in enumerate(ranges)
                 for n in range(s, e) if n in alive and not _is_reader(g.nodes[n])}
        moved = _moved(g, trial, owner)
        if _independent(g, trial, moved, ranges, alive, owner):
            where.update((n, kb) for n, kb in trial.items() if n not in moved)
            kept.append((key, ranges, moved))
        else:
            client_loops.append(key[0])
    # the client's steps: 0 = before the first distributed block, then one per task
    ends, step_of_task = [], {}
    for k, (_, ranges, _) in enumerate(kept):
        for b, (_, e) in enumerate(ranges):
            step_of_task[(k, b)] = len(ends) + 1
            ends.append(e)
    moved_to = {n: step_of_task[(k, b)] for k, (_, _, mv) in enumerate(kept)
                for n, b in mv.items()}
    step: dict[int, int] = {}
    for n in live:
        if n in where or _is_reader(g.nodes[n]):
            continue
        step[n] = moved_to.get(n) or bisect_right(ends, n)
    readers: dict[int, set] = defaultdict(set)      # node → the steps / tasks reading it
    for n in live:
        at = where.get(n, step.get(n))
        for i in g.nodes[n].inputs:
            if at is not None and at != where.get(i, step.get(i)):
                readers[i].add(at)
    finals = set(low.roots.values())
    last_use: dict[int, int] = {}
    for i, at in readers.items():
        for x in at:      # a task's read holds the value on the client to its block's end
            s = x if isinstance(x, int) else step_of_task[(x[0], len(kept[x[0]][1]) - 1)]
            last_use[i] = max(last_use.get(i, 0), s)
    for r in finals:
        last_use[r] = len(ends) + 1
    segments = _client_segments(g, step, len(ends) + 1, readers, finals, last_use)
    feeds = {name: g.reachable([r]) for name, r in low.roots.items()}
    out_blocks = []
    for k, (key, ranges, _) in enumerate(kept):
        loop = a.ordered.loops[key[0]]
        spans = loop.ranges()
        tasks = []
        for b in range(len(ranges)):
            nodes = [n for n in range(*ranges[b]) if where.get(n) == (k, b)]
            tasks.append(Task(len(out_blocks), b, spans[b],
                              _segment(g, nodes, (k, b), readers, finals)))
        applies = tuple(segments[step_of_task[(k, b)]] for b in range(len(ranges)))
        eqs = tuple(name for name, r in low.roots.items()
                    if any(where.get(n, (-1,))[0] == k for n in feeds[name]))
        out_blocks.append(Block(loop, key[1], eqs, tuple(tasks), applies))
    return Partition(a.forest, a, g, segments[0], tuple(out_blocks), dict(low.roots),
                     last_use, tuple(client_loops))


def _owners(g: Graph) -> list[int]:
    """Per node, the node that allocated its buffer (``Graph.owner``, in one pass)."""
    out: list[int] = []
    for n, node in enumerate(g.nodes):
        out.append(out[node.inputs[0]] if node.op in VIEWS or node.op in INPLACE else n)
    return out


def _moved(g: Graph, trial: dict[int, tuple[int, int]], owner: list[int]) -> dict[int, int]:
    """In-place updates in a batch of a buffer allocated outside it → the batch index: the
    client applies them after the task."""
    return {n: kb[1] for n, kb in trial.items()
            if g.nodes[n].op in INPLACE and trial.get(owner[n]) != kb}


def _independent(g: Graph, trial, moved, ranges, live, owner: list[int]) -> bool:
    """Whether the batches read only their own nodes, leaf readers and values made before
    the block that the client does not update in place while tasks may still run; no batch
    reads what the client applies; and what the client applies reads a batch's values in
    their final version (not one the batch overwrites afterwards)."""
    start, last = ranges[0][0], ranges[-1][0]
    later = {owner[n] for n in range(start, last) if n in live and n not in trial and
             g.nodes[n].op in INPLACE} | {owner[n] for n in moved}
    overwritten: dict[tuple, int] = {}      # (batch, buffer) → its last in-place update
    for n, kb in trial.items():
        if g.nodes[n].op in INPLACE and n not in moved:
            key = (kb, owner[n])
            overwritten[key] = max(overwritten.get(key, n), n)
    for n, kb in trial.items():
        for i in g.nodes[n].inputs:
            if _is_reader(g.nodes[i]):
                continue
            if n in moved:           # applied by the client: anything made before it
                if i in trial and trial[i] != kb and i not in moved:
                    return False
                if i in trial and i not in moved and \
                        overwritten.get((kb, owner[i]), -1) > n:
                    return False
            elif i in moved or (i in trial and trial[i] != kb):
                return False
            elif i not in trial and (i >= start or owner[i] in later):
                return False
    return True


def _client_segments(g: Graph, step: dict[int, int], count: int, readers, finals,
                     last_use: dict[int, int]):
    nodes: list[list[int]] = [[] for _ in range(count)]
    for n in sorted(step):
        nodes[step[n]].append(n)
    return [_segment(g, nodes[s], s, readers, finals, last_use) for s in range(count)]


def _segment(g: Graph, nodes: list[int], at, readers, finals,
             last_use: dict[int, int] | None = None) -> Segment:
    """``nodes`` as their own graph. Its roots: what later steps (or other tasks) read, the
    final results, and on the client the stored inputs that are held beyond this step (so
    that the segment's meter counts every buffer the client holds for it)."""
    inside = set(nodes)
    sub = Graph()
    local: dict[int, int] = {}
    stored = []
    for i in sorted({i for n in nodes for i in g.nodes[n].inputs if i not in inside}):
        node = g.nodes[i]
        if _is_reader(node):
            local[i] = sub.push(node)
        else:
            stored.append(i)
            local[i] = sub.push(Node(Op.INPUT, (), ("stored", i), node.shape, -1.0,
                                     f"n{i} {node.tag}"))
    for n in nodes:
        node = g.nodes[n]
        local[n] = sub.push(replace(node, inputs=tuple(local[i] for i in node.inputs)))
    gives = [n for n in nodes if n in finals or any(x != at for x in readers.get(n, ()))]
    if last_use is not None:              # a client step
        gives += [i for i in stored if last_use.get(i, -1) > at]
    return Segment(sub, tuple(local[n] for n in gives), tuple(gives), tuple(stored), at)
