"""The one executor: walk the op graph in its order, each op by one small function.

``_OPS`` maps every op kind to the function that runs it on a backend and says how many
bytes it held as a temporary. The walk itself (``run_graph``) only looks ops up, keeps the
arrays that are still to be read (``_Live``) and tells ``Accounting`` what was made and
released. Memory semantics: an allocating op adds its bytes; views and in-place ops reuse
their input's buffer; an ``input`` node is only a reader of the caller's tensor (no data:
each batch's ``slice`` fetches its own sub-block and is counted at its size); a buffer is
released after the last read of any of its versions (roots and kept values stay); the
peak is taken after every allocation, including the op's temporary — the static sweep's
rule, so a dry run meters exactly the predicted peak.

One device: the order is the graph's own (``Graph.order``). A graph placed on two devices,
or with branches, runs along the route its caller gives (``order``; the GPU layer's
``gpu/runs.py``, branches resolved as the walk reaches them), a picked arm's exit standing
in for arm 0's wherever the merge reads it.
Each device backend may open a session for the evaluation (CuPy: one stream, the caller's
restored afterwards).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from ..errors import ScheduleError, SinkError
from ..forest.values import Forest
from .graph import INPLACE, VIEWS, Device, Graph, Node, Op
from .metering import Accounting, Meter
from .sinks import Sink
from .sources import LeafReader

__all__ = ["Meter", "run_graph"]


def run_graph(g: Graph, roots: Sequence[int], forest: Forest, backends: Mapping[Device, object],
              source=None, store: Mapping[int, object] | None = None,
              order: Callable[[Graph, Sequence[int]], Sequence[int]] | None = None,
              form_of: Mapping[int, int] | None = None):
    """Execute what ``roots`` need; returns ``({root node: array}, Meter)``.

    ``backends`` maps each device to its backend (the CPU's is the default); ``source``
    resolves input nodes to readers (``TensorSource``), ``store`` holds the arrays kept
    from an earlier evaluation; ``order(g, roots)`` is the walk of a graph placed on two
    devices or with branches (its arms picked); ``form_of`` (node → form) counts builds
    per form."""
    route = _route(g, roots, order)
    ex = _Executor(g, forest.values, backends, source, store, route.alias)
    book = Accounting(form_of)
    live = _Live(g, route, book)
    with ex.session():
        for k, n in enumerate(route.order):
            node = g.nodes[n]
            if node.op not in _OPS:                # branches are never executed
                continue
            device = ex.device(n)
            be = ex.backend(device)
            args = [live.out[route.alias.get(i, i)] for i in node.inputs]
            res, transient = _OPS[node.op](ex, be, node, args)
            live.put(n, res)
            book.op(k, n, node, be.nbytes(res) if _allocates(node) else None, device.value,
                    transient)
            live.read(node.inputs)
    pool = max((getattr(b, "pool_bytes", lambda: 0)() for b in backends.values()), default=0)
    name = "+".join(sorted({b.name for b in backends.values()}))
    return {r: live.out[route.alias.get(r, r)] for r in roots}, book.meter(name, pool)


def _allocates(node: Node) -> bool:
    """A new buffer: not a view, not in place, not a reader (a stored input is a buffer
    kept from an earlier evaluation, so it counts)."""
    return node.op not in VIEWS and node.op not in INPLACE and node.op is not Op.SINK and (
        node.op is not Op.INPUT or node.params[0] == "stored")


# -- the route and its read counts (memoized in ``g.memo``) ----------------------------------


@dataclass(frozen=True)
class _Route:
    order: list[int]
    alias: dict[int, int]            # arm 0's exit → the picked arm's exit
    counts: dict[int, int]           # buffer owner → reads over the route
    per_node: dict[int, int]         # node → reads over the route
    owner: dict[int, int]            # node on the route → its buffer's owner
    final: frozenset[int]            # the roots (aliased): never forgotten
    keep: frozenset[int]             # the roots' buffers: never released

    def owner_of(self, g: Graph, n: int) -> int:
        o = self.owner.get(n)
        return g.owner(n) if o is None else o


def _route(g: Graph, roots: Sequence[int], order) -> _Route:
    key = ("route", tuple(roots))
    if g.branches or key not in g.memo:        # a branchless route never changes: keep it
        g.memo[key] = _order(g, roots, order)
    order = g.memo[key]
    alias: dict[int, int] = {}
    for b in g.branches:                  # the merge reads arm 0; a picked arm stands in
        arms = g.nodes[b].inputs
        for n in order:
            if n in arms and n != arms[0]:
                alias[arms[0]] = n
    rkey = ("reads", tuple(roots), tuple(sorted(alias.items())))
    if rkey not in g.memo:
        g.memo[rkey] = _reads(g, order, alias)
    counts, per_node, owner = g.memo[rkey]
    route = _Route(order, alias, counts, per_node, owner, frozenset(), frozenset())
    final = frozenset(alias.get(r, r) for r in roots)
    keep = frozenset(route.owner_of(g, a) for a in final)
    return _Route(order, alias, counts, per_node, owner, final, keep)


def _order(g: Graph, roots: Sequence[int], order) -> list[int]:
    if order is not None:
        return list(order(g, roots))
    if g.branches or len(set(g.device.values())) > 1:
        raise ScheduleError("this op graph is placed on two devices or has branches: run it "
                            "along its route (order=, as runtime.gpu.Placed does)")
    return g.order(roots)


def _reads(g: Graph, order: Sequence[int], alias: Mapping[int, int]):
    """Owners and read counts, made once per route (inputs come first in the order: one
    pass, no chain walks)."""
    owner: dict[int, int] = {}
    for n in order:
        node = g.nodes[n]
        if node.op in VIEWS or node.op in INPLACE:
            src = node.inputs[0]
            owner[n] = owner[src] if src in owner else g.owner(src)
        else:
            owner[n] = n
    counts: dict[int, int] = {}
    per_node: dict[int, int] = {}
    for n in order:
        for i in g.nodes[n].inputs:
            a = alias.get(i, i)
            o = owner[a] if a in owner else g.owner(a)
            counts[o] = counts.get(o, 0) + 1
            per_node[a] = per_node.get(a, 0) + 1
    return counts, per_node, owner


class _Live:
    """The arrays held during the walk. Bookkeeping holds only what is partly read, so it
    stays as small as the live set: an old in-place version leaves ``out`` when its own
    reads are done; all versions of a buffer leave when the buffer's last read is done."""

    def __init__(self, g: Graph, route: _Route, book: Accounting) -> None:
        self.g, self.route, self.book = g, route, book
        self.out: dict[int, object] = {}
        self.versions: dict[int, set[int]] = {}   # owner → the nodes in ``out`` holding it
        self.reads: dict[int, int] = {}           # owner → reads left (partly read only)
        self.node_reads: dict[int, int] = {}      # node → reads left (partly read only)

    def put(self, n: int, res) -> None:
        self.out[n] = res
        self.versions.setdefault(self.route.owner_of(self.g, n), set()).add(n)

    def read(self, inputs: Sequence[int]) -> None:
        r = self.route
        for i in inputs:
            a = r.alias.get(i, i)
            left = self.node_reads.pop(a, r.per_node[a]) - 1
            o = r.owner_of(self.g, a)
            if left:
                self.node_reads[a] = left
            elif a not in r.final:                 # an old version: forget it
                self.out.pop(a, None)
                self.versions.get(o, set()).discard(a)
            left = self.reads.pop(o, r.counts[o]) - 1
            if left:
                self.reads[o] = left
            elif o not in r.keep and self.book.holds(o):
                self.book.release(o)
                for v in self.versions.pop(o, set()):    # views and in-place versions too
                    self.out.pop(v, None)


# -- the ops ---------------------------------------------------------------------------------


class _Executor:
    """What the op functions need: the graph, the forest's values, backends per device,
    the source of inputs and the store of kept arrays."""

    def __init__(self, g: Graph, values, backends: Mapping[Device, object], source, store,
                 alias: Mapping[int, int], sinks: Mapping[str, Sink] | None = None) -> None:
        self.g, self.values, self.backends = g, values, backends
        self.source, self.store, self.alias = source, store, alias
        self.sinks = sinks
        self.default = backends[Device.CPU]

    def device(self, n: int) -> Device:
        node = self.g.nodes[n]
        return Device(node.params[0]) if node.op is Op.COPY else \
            self.g.device.get(n, Device.CPU)

    def backend(self, device: Device | None):
        return self.backends.get(device or Device.CPU, self.default)

    def session(self) -> ExitStack:
        """Every distinct backend's evaluation session (those that have one), entered."""
        stack = ExitStack()
        seen: list[object] = []
        for be in self.backends.values():
            if hasattr(be, "session") and all(be is not s for s in seen):
                seen.append(be)
                stack.enter_context(be.session())
        return stack


def _input(ex: _Executor, be, node: Node, args):
    if node.params[0] == "stored":
        return ex.store[node.params[1]], 0
    if be.symbolic:
        return be.zeros(ex.source.shape(node.params[0])), 0
    return ex.source.reader(node.params[0]), 0          # a reader: no data read


def _contract(ex: _Executor, be, node: Node, args):
    p = node.params
    res = be.contract(ex.values, p[0], args[0], args[1], node.shape,
                      p[1] if len(p) > 2 else None)
    scratch = p[2] if len(p) > 3 else 0                   # the kernel's temporaries
    return res, scratch * (getattr(res, "itemsize", None) or 8) if scratch else 0


def _accumulate(ex: _Executor, be, node: Node, args):
    if isinstance(args[0], Sink):             # written to the caller's destination
        return args[0], args[0].add(None, None, node.params[0], _host(be, args[1]),
                                    not be.symbolic)
    res = be.accumulate_(args[0], args[1], node.params[0])
    return res, be.nbytes(args[1]) if abs(node.params[0]) != 1.0 else 0   # alpha * src


def _add_into(ex: _Executor, be, node: Node, args):
    if isinstance(args[0], Sink):
        at, perm, alpha = node.params[:3]
        return args[0], args[0].add(at, perm, alpha, _host(be, args[1]), not be.symbolic)
    res = be.add_into_(args[0], args[1], *node.params[:3])
    return res, be.nbytes(args[1]) if abs(node.params[2]) != 1.0 else 0


def _sink(ex: _Executor, be, node: Node, args):
    if ex.sinks is None or node.params[0] not in ex.sinks:
        raise SinkError(f"result {node.params[0]} was planned with a sink, but none was "
                        f"given for it (out={{{node.params[0]!r}: destination}})")
    s = ex.sinks[node.params[0]]
    return s, s.open(not be.symbolic, node.params[1] or None)


def _host(be, x):
    return x if be.symbolic else be.to_host(x)


def _copy(ex: _Executor, be, node: Node, args):
    """To ``be``'s device from the device the input lives on (a reader is read where it
    is sliced, so it moves as it is)."""
    x = args[0]
    if isinstance(x, LeafReader):
        return x, 0
    i = node.inputs[0]
    src = ex.backend(ex.g.device_of(ex.alias.get(i, i)))
    return (be.from_host(src.to_host(x)) if src is not be else x), 0


_OPS: dict[Op, Callable] = {
    Op.INPUT: _input,
    Op.SLICE: lambda ex, be, node, a: (be.take(a[0], node.params[0], node.shape), 0),
    Op.ZEROS: lambda ex, be, node, a: (be.zeros(node.shape), 0),
    Op.CONTRACT: _contract,
    Op.SCALE: lambda ex, be, node, a: (be.scale_(a[0], node.params[0]), 0),
    Op.PERMUTE: lambda ex, be, node, a: (be.permute(a[0], node.params[0]), 0),
    Op.RESHAPE: lambda ex, be, node, a: (be.reshape(a[0], node.params[0]), 0),
    Op.ACCUMULATE: _accumulate,
    Op.ADD_INTO: _add_into,
    Op.SCATTER: lambda ex, be, node, a: (be.scatter_(a[0], a[1], node.params[0]), 0),
    Op.INIT: lambda ex, be, node, a: (be.init(a[0], node.params[0]), 0),
    Op.COPY: _copy,
    Op.SINK: _sink,
}
