"""The one executor: walk the op graph in its lowered order on the backend of each device.

Branches are resolved by the route picker as the walk reaches them (streaming form); a
picked arm's exit stands in for arm 0's wherever the merge reads it. Memory is metered per
buffer: an allocating op adds its bytes, views and in-place ops reuse their input's buffer,
an input node is only a reader of the caller's tensor (no data: each batch's ``slice``
fetches its own sub-block and is counted at its size), and a buffer is released after the last read of any
of its versions (roots and kept values stay). The peak is taken after every allocation —
the static sweep's rule — so a dry run meters exactly the predicted peak.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..forest.values import Forest
from .graph import INPLACE, VIEWS, Device, Graph, Op
from .runs import extract_runs, lower_picked_route_streaming
from .sources import LeafReader

__all__ = ["Meter", "run_graph"]


@dataclass(frozen=True)
class Meter:
    backend: str
    peak_bytes: int
    peak_step: int
    live_at_peak: tuple[int, ...]          # buffers (owner node ids) live at the peak
    flops: float
    builds: dict[int, int] = field(default_factory=dict, compare=False)  # form → times made
    device_peaks: dict[str, int] = field(default_factory=dict, compare=False)
    pool_peak: int = 0                      # CuPy memory-pool bytes after the run

    def dump(self) -> str:
        return (f"meter[{self.backend}]: peak {self.peak_bytes} B at step {self.peak_step}; "
                f"flops {self.flops:.6g}\n")


def _owner(g: Graph, n: int) -> int:
    while g.nodes[n].op in VIEWS or g.nodes[n].op in INPLACE:
        n = g.nodes[n].inputs[0]
    return n


def run_graph(g: Graph, roots: Sequence[int], forest: Forest, backends: Mapping[Device, object],
              source=None, store: Mapping[int, object] | None = None,
              resolve: Callable[[int], int] | None = None,
              form_of: Mapping[int, int] | None = None):
    """Execute; returns ``({root node: array}, Meter)``."""
    resolve = resolve or (lambda b: 0)
    key = ("route", tuple(roots))
    if g.branches or key not in g.memo:        # a branchless route never changes: keep it
        order = lower_picked_route_streaming(g, roots, resolve)
        run_of = {n: k for k, run in enumerate(extract_runs(g, roots)) for n in run.members}
        g.memo[key] = (order, run_of)
    order, run_of = g.memo[key]
    streams: dict[int, object] = {}       # GPU runs: one stream each (CuPy)
    values = forest.values
    default = backends[Device.CPU]
    alias: dict[int, int] = {}
    for b in g.branches:                  # the merge reads arm 0; a picked arm stands in
        arms = g.nodes[b].inputs
        for n in order:
            if n in arms and n != arms[0]:
                alias[arms[0]] = n
    rkey = ("reads", tuple(roots), tuple(sorted(alias.items())))
    if rkey not in g.memo:        # owners and read counts, made once per route
        owner: dict[int, int] = {}
        for n in order:           # inputs come first in the order: one pass, no chain walks
            node = g.nodes[n]
            if node.op in VIEWS or node.op in INPLACE:
                src = node.inputs[0]
                owner[n] = owner[src] if src in owner else _owner(g, src)
            else:
                owner[n] = n
        counts: dict[int, int] = {}
        for n in order:
            for i in g.nodes[n].inputs:
                o = owner.get(alias.get(i, i)) or _owner(g, alias.get(i, i))
                counts[o] = counts.get(o, 0) + 1
        per_node: dict[int, int] = {}
        for n in order:
            for i in g.nodes[n].inputs:
                per_node[alias.get(i, i)] = per_node.get(alias.get(i, i), 0) + 1
        g.memo[rkey] = (counts, per_node, owner)
    counts, per_node, owner_of = g.memo[rkey]
    # remaining reads of what is partly read (bookkeeping stays as small as the live set)
    reads: dict[int, int] = {}
    node_reads: dict[int, int] = {}        # a node whose reads are done leaves ``out``
    final = {alias.get(r, r) for r in roots}
    def _own(n: int) -> int:
        o = owner_of.get(n)
        return _owner(g, n) if o is None else o

    keep = {_own(alias.get(r, r)) for r in roots}
    out: dict[int, object] = {}
    versions: dict[int, set[int]] = {}     # owner → the nodes in ``out`` holding its buffer
    size: dict[int, int] = {}
    dev_live: dict[str, int] = {}
    dev_peak: dict[str, int] = {}
    live = peak = step = 0
    flops = 0.0
    snapshot: tuple[int, ...] = ()
    builds: dict[int, int] = {}
    for k, n in enumerate(order):
        node = g.nodes[n]
        device = g.device.get(n, Device.CPU)
        be = backends.get(device, default)
        if hasattr(be, "stream") and device is Device.GPU:
            run = run_of.get(n, -1)
            if run not in streams:
                streams[run] = be.stream()
            streams[run].use()
        args = [out[alias.get(i, i)] for i in node.inputs]
        op = node.op
        transient = 0
        if op is Op.INPUT:
            if node.params[0] == "stored":
                res = store[node.params[1]]
            else:
                res = source.reader(node.params[0]) if not be.symbolic else \
                    be.zeros(source.shape(node.params[0]))      # a reader: no data read
        elif op is Op.SLICE:
            res = be.take(args[0], node.params[0], node.shape)
        elif op is Op.ZEROS:
            res = be.zeros(node.shape)
        elif op is Op.CONTRACT:
            res = be.contract(values, node.params[0], args[0], args[1], node.shape,
                              node.params[1] if len(node.params) > 2 else None)
            if len(node.params) > 3 and node.params[2]:    # the kernel's temporaries
                transient = node.params[2] * (getattr(res, "itemsize", None) or 8)
        elif op is Op.SCALE:
            res = be.scale_(args[0], node.params[0])
        elif op is Op.PERMUTE:
            res = be.permute(args[0], node.params[0])
        elif op is Op.RESHAPE:
            res = be.reshape(args[0], node.params[0])
        elif op is Op.ACCUMULATE:
            res = be.accumulate_(args[0], args[1], node.params[0])
            if abs(node.params[0]) != 1.0:             # the scaled addend alpha * src
                transient = be.nbytes(args[1])
        elif op is Op.ADD_INTO:
            res = be.add_into_(args[0], args[1], *node.params[:3])
            if abs(node.params[2]) != 1.0:
                transient = be.nbytes(args[1])
        elif op is Op.SCATTER:
            res = be.scatter_(args[0], args[1], node.params[0])
        elif op is Op.INIT:
            res = be.init(args[0], node.params[0])
        elif op is Op.COPY:
            target = backends.get(Device(node.params[0]), default)
            if isinstance(args[0], LeafReader):      # a reader is read where it is sliced
                res = args[0]
            else:
                res = target.from_host(be.to_host(args[0]) if be is not target else args[0])
            device = Device(node.params[0])
            be = target
        else:                                  # branches are never executed
            continue
        out[n] = res
        versions.setdefault(_own(n), set()).add(n)
        flops += float(node.params[-1]) if op in _COUNTED and len(node.params) > 1 else 0.0
        if form_of is not None and n in form_of:
            builds[form_of[n]] = builds.get(form_of[n], 0) + 1
        metered = op not in VIEWS and op not in INPLACE and (
            op is not Op.INPUT or node.params[0] == "stored")   # kept from an earlier run
        if metered:
            size[n] = be.nbytes(res)
            live += size[n]
            dev_live[device.value] = dev_live.get(device.value, 0) + size[n]
            dev_peak[device.value] = max(dev_peak.get(device.value, 0), dev_live[device.value])
        if live + transient > peak:
            peak, step, snapshot = live + transient, k, tuple(sorted(size))
        for i in node.inputs:
            a = alias.get(i, i)
            left = node_reads.pop(a, per_node[a]) - 1
            if left:
                node_reads[a] = left
            elif a not in final:                 # an old version: forget it
                out.pop(a, None)
                versions.get(_own(a), set()).discard(a)
            o = _own(a)
            left = reads.pop(o, counts[o]) - 1
            if left:
                reads[o] = left
            elif o not in keep and o in size:
                live -= size[o]
                dev = g.device.get(o, Device.CPU).value
                dev_live[dev] = dev_live.get(dev, 0) - size.pop(o)
                for v in versions.pop(o, set()):    # views and in-place versions too
                    out.pop(v, None)
    pool = max((getattr(b, "pool_bytes", lambda: 0)() for b in backends.values()), default=0)
    name = "+".join(sorted({b.name for b in backends.values()}))
    results = {r: out[alias.get(r, r)] for r in roots}
    return results, Meter(name, peak, step, snapshot, flops, builds, dev_peak, pool)


_COUNTED = {Op.CONTRACT, Op.ACCUMULATE, Op.INIT, Op.SCALE, Op.ADD_INTO}
