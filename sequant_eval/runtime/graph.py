"""The op graph: an append-only arena of small array operations.

A schedule unrolled batch by batch (``lower_schedule``) is this graph, run by the graph
executor (``engine.py``) on any backend: what the GPU layer places and the Dask layer cuts
(a one-device run executes the loop program, ``program.py``). Nodes are frozen; a rewrite
appends new nodes and returns remapped roots, so a graph only grows and old ids stay valid
(superseded nodes are simply no longer reachable). Placement (which device runs a node)
lives in a side table.

Memory semantics, which the meter follows: ``alloc`` ops make a new buffer; ``view`` ops
(permute, reshape) alias their input; ``inplace`` ops (accumulate, scatter, scale) write
into input 0 and return it; ``input`` nodes are the caller's arrays and ``sink`` nodes the
caller's destinations (neither metered).
"""
from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ScheduleError
from ..schedule.forms import reachable

__all__ = ["Op", "Device", "Node", "Graph", "Backend", "VIEWS", "INPLACE", "BINDINGS"]


class Op(enum.Enum):
    """The op kinds of the graph (see the module docstring for their memory semantics)."""

    INPUT = "input"          # a leaf block from the caller (params: forest value)
    SLICE = "slice"          # a batch of an input, as its own array (params: index ranges)
    ZEROS = "zeros"          # a zero-filled destination of the node's shape
    CONTRACT = "contract"    # binary contraction (params: forest value)
    SCALE = "scale"          # x *= alpha, in place (params: alpha)
    PERMUTE = "permute"      # transposed view (params: perm)
    RESHAPE = "reshape"      # reshaped view (params: shape)
    ACCUMULATE = "accumulate"  # target += alpha * src, in place (params: alpha)
    SCATTER = "scatter"      # target[index] = src, in place (params: index ranges)
    ADD_INTO = "add_into"    # target[index] += alpha * src.transpose(perm), in place
    #                          (params: index ranges of target, perm, alpha, flops)
    INIT = "init"            # out = alpha * src, a new buffer (params: alpha)
    COPY = "copy"            # to another device (params: target device)
    SINK = "sink"            # the caller's destination of a result, opened (zeroed); adds
    #                          into it write there (params: result name, fill)
    BRANCH = "branch"        # alternative routes (inputs: arm exits; params: reconverge)

    # the interpreter looks every op up by kind; members are singletons compared by
    # identity, so the identity hash serves (Enum's own hashes the name, in Python)
    __hash__ = object.__hash__


class Device(enum.Enum):
    """Where an op runs and its result lives."""

    CPU = "cpu"
    GPU = "gpu"


VIEWS = {Op.PERMUTE, Op.RESHAPE}
INPLACE = {Op.SCALE, Op.ACCUMULATE, Op.SCATTER, Op.ADD_INTO}
BINDINGS = {Op.INPUT, Op.SLICE, Op.ZEROS}      # device-neutral for run extraction
_BUFFER_SHARING = VIEWS | INPLACE


@dataclass(frozen=True, slots=True)
class Node:
    """One op: its kind, input node ids, parameters, static shape, emission position and a
    provenance tag."""

    op: Op
    inputs: tuple[int, ...]
    params: tuple = ()
    shape: tuple = ()
    seq: float = 0.0           # emission position: ties in the execution order
    tag: str = ""              # provenance for dumps ("f12 batch 3", "R2 entry 4")

    def key(self) -> tuple:
        """CSE identity: op, parameters, inputs (operand order kept: not bitwise safe)."""
        return (self.op, _bits(self.params), self.inputs)


def _bits(params: tuple) -> tuple:
    """Floats by bit pattern (0.0 and -0.0 differ), recursively."""
    import struct

    out = []
    for p in params:
        if isinstance(p, float):
            out.append(("f", struct.pack("<d", p)))
        elif isinstance(p, tuple):
            out.append(_bits(p))
        else:
            out.append(p)
    return tuple(out)


@dataclass
class Graph:
    """The arena: nodes by id, the placement side table, ordering edges, branches.

    ``memo`` holds what is derived from the arena (routes, read counts, owners); it is
    cleared on every push and edge rewrite."""

    nodes: list[Node] = field(default_factory=list)
    device: dict[int, Device] = field(default_factory=dict)     # placement side table
    after: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))  # ordering
    branches: dict[int, int] = field(default_factory=dict)      # branch node → reconverge
    memo: dict = field(default_factory=dict, repr=False, compare=False)  # derived; cleared
    # on every push and edge rewrite (placement is done before a graph is first run)

    def push(self, node: Node) -> int:
        """Append a node (its inputs must exist) and return its id; clears ``memo``."""
        self.memo.clear()                      # anything derived from the arena is stale
        for i in node.inputs:
            if not 0 <= i < len(self.nodes):
                raise ScheduleError(f"node input {i} out of range (graph has {len(self.nodes)})")
        self.nodes.append(node)
        return len(self.nodes) - 1

    def __len__(self) -> int:
        return len(self.nodes)

    def rewrite_input(self, n: int, old: int, new: int) -> None:
        """Redirect one edge in place (same shape): the one sanctioned mutation."""
        from dataclasses import replace

        self.memo.clear()
        node = self.nodes[n]
        if self.nodes[old].shape != self.nodes[new].shape:
            raise ScheduleError(f"rewrite_input n{n}: n{old} and n{new} differ in shape")
        self.nodes[n] = replace(node, inputs=tuple(new if i == old else i for i in node.inputs))

    def owner(self, n: int, inplace: bool = True) -> int:
        """The node that allocated the buffer ``n`` reads or writes, followed back through
        views and in-place updates; with ``inplace=False`` only through views, which gives
        the buffer *version* ``n`` reads (the node whose output it is)."""
        through = _BUFFER_SHARING if inplace else VIEWS
        while self.nodes[n].op in through:
            n = self.nodes[n].inputs[0]
        return n

    def device_of(self, n: int) -> Device | None:
        """Where ``n``'s output lives: its placement, else (views, in-place) its input's."""
        while n not in self.device and self.nodes[n].inputs and \
                self.nodes[n].op in _BUFFER_SHARING:
            n = self.nodes[n].inputs[0]
        return self.device.get(n)

    def reachable(self, roots) -> set[int]:
        """Every node ``roots`` depend on, through data inputs and ordering edges."""
        nodes, after = self.nodes, self.after
        return reachable(roots, lambda n: (*nodes[n].inputs, *after.get(n, ())))

    def order(self, roots) -> list[int]:
        """Execution order of everything ``roots`` need: a topological order over data and
        ordering edges, ties broken by emission position (so it is the lowering's order)."""
        live = self.reachable(roots)
        deps = {n: set(self.nodes[n].inputs) | set(self.after.get(n, ())) for n in live}
        users: dict[int, list[int]] = defaultdict(list)
        for n, ds in deps.items():
            for d in ds:
                users[d].append(n)
        import heapq

        waiting = {n: len(ds) for n, ds in deps.items()}
        ready = [(self.nodes[n].seq, n) for n, w in waiting.items() if w == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            _, n = heapq.heappop(ready)
            out.append(n)
            for u in users[n]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, (self.nodes[u].seq, u))
        if len(out) != len(live):
            raise ScheduleError("the op graph has a cycle (ordering edges contradict data)")
        return out

    def consumers(self, roots) -> dict[int, list[int]]:
        """Node → the nodes reading it, over what ``roots`` need, in execution order."""
        out: dict[int, list[int]] = defaultdict(list)
        for n in self.order(roots):
            for i in self.nodes[n].inputs:
                out[i].append(n)
        return out

    def dump(self, roots) -> str:
        """Stable text: the nodes ``roots`` need in execution order, with op, inputs,
        params, device and tag."""
        lines = []
        for n in self.order(roots):
            node = self.nodes[n]
            dev = self.device.get(n)
            lines.append(f"n{n} {node.op.value}({', '.join(f'n{i}' for i in node.inputs)})"
                         f"{' ' + repr(node.params) if node.params else ''}"
                         f"{' @' + dev.value if dev else ''}{' ' + node.tag if node.tag else ''}")
        return "\n".join(lines) + "\n"


class Backend(Protocol):
    """What a backend gives the executor: one array operation per op kind (``Op``), on its
    own arrays. NumpyBackend, ArrayApiBackend (and CupyBackend) and DryRunBackend implement
    it; ``_``-suffixed operations write into their first argument and return it."""

    name: str
    symbolic: bool             # True: arrays carry shapes only (the dry run)

    def asarray(self, x):
        """The caller's array ``x`` as this backend's array."""

    def take(self, block, index, shape):
        """A batch of a leaf block (an array or a ``LeafReader``) as a new array: the
        ``index`` ranges (None: the whole axis), of result shape ``shape``."""

    def zeros(self, shape):
        """A new zero array (a destination) in the evaluation's dtype."""

    def contract(self, values, vid: int, a, b, out_shape, layout=None):
        """The binary contraction ``values[vid]`` of ``a`` and ``b``, a new array of
        ``out_shape``; ``layout`` permutes the result's modes."""

    def scale_(self, x, alpha: float):
        """``x *= alpha`` in place."""

    def permute(self, x, perm):
        """A transposed view of ``x`` (axis k reads axis ``perm[k]``)."""

    def reshape(self, x, shape):
        """``x`` reshaped (a view where the backend can)."""

    def accumulate_(self, target, src, alpha: float):
        """``target += alpha * src`` in place."""

    def scatter_(self, target, src, index):
        """``target[index] = src`` in place: a batch written at its position."""

    def add_into_(self, target, src, index, perm, alpha: float):
        """``target[index] += alpha * src.transpose(perm)`` in place: a term batch (or a
        streamed chunk) added straight into its sum."""

    def init(self, src, alpha: float):
        """A new array ``alpha * src``: a sum's first entry."""

    def to_host(self, x):
        """``x`` as a host (NumPy) array, for a copy between devices."""

    def from_host(self, x):
        """A host array as this backend's array, for a copy between devices."""

    def nbytes(self, x) -> int:
        """Bytes ``x`` holds, as the meter counts them."""
