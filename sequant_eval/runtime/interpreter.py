"""Run a loop program: each block's body once per batch range, each node by the executor's
op table (``engine._OPS``), on one device.

A node's shapes and parameters are resolved against the current batch ranges as it is
reached. Memory follows the unrolled executor's rule exactly — a buffer is released after
the last read of any of its versions — found statically on the program instead of by
counting reads over an unrolled route: the textually last reader of a buffer is its last
reader in time, and it is the last read once every loop around the reader that does not
also enclose the buffer's maker is in its last batch. So the meter equals the static
sweep, to the byte, as for the unrolled graph. (The program's own memory is not metered:
it is charged to the budget before the arrays are planned, ``LoopProgram.reserved_bytes``.)
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ScheduleError
from ..forest.values import Forest
from .engine import _OPS, _allocates, _Executor
from .graph import Device, Node
from .metering import Accounting
from .program import Block, LoopProgram, resolve, symbolic

__all__ = ["run_program"]


#: ``_Tables.flags`` per node: not run (unreachable from the roots), run as built, or
#: run with its shapes and parameters resolved against the current batch.
_DEAD, _RUN, _RESOLVE = 0, 1, 2


@dataclass(frozen=True)
class _Tables:
    """What the walk needs, made once per program, indexed by node (a byte and a slot
    each: the same few bytes per node whatever the loops): how to run it (``flags``), and
    what to let go after it (``after``): ``(node, depth, ...)`` pairs, flat — a version to
    forget (``node``) or a buffer to release (``~node``), once every block of the reader's
    chain from ``depth`` on is in its last batch (``None``: nothing)."""

    flags: bytes
    after: list


def _tables(prog: LoopProgram) -> _Tables:
    if "tables" in prog.memo:
        return prog.memo["tables"]
    g = prog.graph
    roots = prog.root_nodes()
    alive = g.reachable(roots)
    chain: dict[int, tuple[int, ...]] = {}
    last_version: dict[int, int] = {}
    last_owner: dict[int, int] = {}
    for n, around in prog.root.walk():
        if n not in alive:
            continue
        chain[n] = around
        for i in g.nodes[n].inputs:
            last_version[i] = n
            last_owner[g.owner(i)] = n
    final = set(roots)
    keep = {g.owner(r) for r in roots}
    after: dict[int, list[int]] = {}
    for last, never, code in ((last_version, final, lambda x: x),
                              (last_owner, keep, lambda x: ~x)):
        for x, r in sorted(last.items()):
            if x in never:
                continue
            shared = 0                       # blocks around both the maker and the reader
            for a, b in zip(chain[x], chain[r]):
                if a != b:
                    break
                shared += 1
            after.setdefault(r, []).extend((code(x), shared))
    flags = bytearray(len(g.nodes))
    for n in alive:
        node = g.nodes[n]
        flags[n] = _RESOLVE if symbolic(node.shape) or symbolic(node.params) else _RUN
    todo: list = [None] * len(g.nodes)
    for r, v in after.items():
        todo[r] = tuple(v)
    t = _Tables(bytes(flags), todo)
    prog.memo["tables"] = t
    return t


def run_program(prog: LoopProgram, forest: Forest, backend, source=None,
                store: Mapping[int, object] | None = None, sinks: Mapping | None = None):
    """Execute ``prog`` on one backend; returns ``({root node: array}, Meter)``.

    ``source`` resolves input nodes to readers (``TensorSource``), ``store`` holds the
    arrays kept from an earlier evaluation, ``sinks`` the destinations of results planned
    with one (result name → ``sinks.Sink``)."""
    t = _tables(prog)
    flags, after = t.flags, t.after
    g = prog.graph
    ex = _Executor(g, forest.values, {Device.CPU: backend}, source, store, {}, sinks)
    book = Accounting(prog.form_of)
    out: dict[int, object] = {}
    ranges: dict[int, tuple[int, int]] = {}       # level → the current batch range
    # busy[d]: the deepest block at depth <= d (of the walk's current chain) that is not in
    # its last batch, as depth + 1 (0: none) — a let-go from depth p waits while busy > p
    busy = [0]
    step = 0

    def run(n: int) -> None:
        nonlocal step
        node = g.nodes[n]
        if flags[n] == _RESOLVE:
            node = Node(node.op, node.inputs, resolve(node.params, ranges),
                        resolve(node.shape, ranges), node.seq, node.tag)
        args = [out[i] for i in node.inputs]
        res, transient = _OPS[node.op](ex, backend, node, args)
        out[n] = res
        new = _allocates(node)
        if new and book.holds(n):
            raise ScheduleError(f"loop program: n{n} ({node.tag}) made again while its "
                                f"previous batch is still held")
        book.op(step, n, node, backend.nbytes(res) if new else None, "cpu", transient)
        step += 1
        todo = after[n]
        if todo:
            wait = busy[-1]
            for k in range(0, len(todo), 2):
                if wait > todo[k + 1]:
                    continue
                x = todo[k]
                if x >= 0:
                    out.pop(x, None)
                elif book.holds(~x):
                    book.release(~x)

    # ``walk`` recurses through its argument, not its own name: a closure naming itself is
    # a reference cycle that would keep ``out`` (this evaluation's arrays) and the inputs
    # alive until the garbage collector runs
    def walk(block: Block, again) -> None:
        for item in block.body:
            if not isinstance(item, Block):
                if flags[item]:
                    run(item)
                continue
            spans = item.ranges()
            depth = len(busy)
            for k, r in enumerate(spans):
                ranges[depth - 1] = r                 # symbolic values name the level
                busy.append(busy[-1] if k == len(spans) - 1 else depth)
                again(item, again)
                busy.pop()
            del ranges[depth - 1]

    with ex.session():
        walk(prog.root, walk)
    pool = getattr(backend, "pool_bytes", lambda: 0)()
    return {r: out[r] for r in prog.root_nodes()}, book.meter(backend.name, pool)

