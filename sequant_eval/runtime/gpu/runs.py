"""Runs: maximal straight-line, single-device stretches of the op graph.

A run is the dispatch unit (one CUDA stream's launch sequence, one capture unit; a plain
loop on the CPU). A new run starts at a decision point: a graph entry (no computed
predecessor), a branch's reconverge node, the first node of a branch arm, a residency seam
(a copy, or a device change from the single predecessor), a fan-in (more than one computed
predecessor), or wherever the node does not continue the open run. Bindings — inputs,
their slices, fresh destinations — are device-neutral and never split a run.

Branches give alternative routes; ``lower_picked_route`` executes one arm of each (arm 0
when unpicked) and the streaming form resolves each branch only when the walk reaches it,
emitting exactly what the one-shot form emits for the same picks.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..graph import BINDINGS, Device, Graph, Op

__all__ = ["Run", "effective_roots", "arm_nodes", "extract_runs", "lower_runs_arm0",
           "lower_picked_route", "lower_picked_route_streaming", "branch_density",
           "passes_fewness_gate", "device_alternating_order", "FEWNESS_THRESHOLD"]

FEWNESS_THRESHOLD = 0.05


@dataclass(frozen=True)
class Run:
    """A maximal straight-line single-device stretch: entry, exit, members, device."""

    entry: int
    exit: int
    members: tuple[int, ...]
    device: Device | None


def effective_roots(g: Graph, roots: Sequence[int]) -> list[int]:
    """Roots plus every branch whose reconverge node or an arm exit is needed."""
    out = list(roots)
    changed = True
    while changed:
        changed = False
        live = g.reachable(out)
        for b, merge in g.branches.items():
            if b not in out and (merge in live or any(i in live for i in g.nodes[b].inputs)):
                out.append(b)
                changed = True
    return out


def arm_nodes(g: Graph) -> tuple[dict[int, list[set[int]]], set[int]]:
    """Per branch node, the nodes of each of its arms (the cone of the arm's exit outside
    the prefix all arms share); and the arm entries (arm nodes with an input outside the
    arm, or none), where a run must start. Runs and residency both decide per arm."""
    arms: dict[int, list[set[int]]] = {}
    entries: set[int] = set()
    for b in g.branches:
        cones = [g.reachable([e]) for e in g.nodes[b].inputs]
        shared = set.intersection(*cones) if cones else set()
        arms[b] = [c - shared for c in cones]
        for arm in arms[b]:
            for n in arm:
                if any(i not in arm for i in g.nodes[n].inputs) or not g.nodes[n].inputs:
                    entries.add(n)
    return arms, entries


def extract_runs(g: Graph, roots: Sequence[int]) -> list[Run]:
    """The runs of the graph for ``roots``, in execution order (see the module docstring for
    where a run starts)."""
    eff = effective_roots(g, roots)
    order = [n for n in g.order(eff) if g.nodes[n].op is not Op.BRANCH]
    merges = set(g.branches.values())
    _, arm_entries = arm_nodes(g)
    runs: list[list[int]] = []
    devices: list[Device | None] = []
    last: int | None = None            # the open run's last computing member
    pending: list[int] = []            # bindings wait for the run that reads them
    for n in order:
        node = g.nodes[n]
        if node.op in BINDINGS:
            pending.append(n)
            continue
        preds = [i for i in node.inputs if g.nodes[i].op not in BINDINGS]
        dev = g.device.get(n)
        new = (not runs or not preds or n in merges or n in arm_entries
               or node.op is Op.COPY or len(preds) > 1
               or g.nodes[preds[0]].op is Op.COPY
               or preds[0] != last or dev != devices[-1])
        if new:
            runs.append(pending + [n])
            devices.append(dev)
        else:
            runs[-1].extend(pending + [n])
        pending = []
        last = n
    if pending:
        if runs:
            runs[-1].extend(pending)
        else:
            runs.append(pending)
            devices.append(None)
    out = []
    for members, dev in zip(runs, devices):
        compute = [m for m in members if g.nodes[m].op not in BINDINGS] or members
        out.append(Run(compute[0], compute[-1], tuple(members), dev))
    return out


def _skipped(arms: dict[int, list[set[int]]], picked: Mapping[int, int]) -> set[int]:
    """The nodes only arms not picked (missing or invalid picks: arm 0) hold."""
    skip: set[int] = set()
    for b, nodes in arms.items():
        if len(nodes) < 2:
            continue
        choice = picked.get(b, 0)
        choice = choice if 0 <= choice < len(nodes) else 0
        for k, arm in enumerate(nodes):
            if k != choice:
                skip |= arm - nodes[choice]
    return skip


def _clamped(arms: dict[int, list[set[int]]], picked: Mapping[int, int]) -> dict[int, int]:
    return {b: (picked.get(b, 0) if 0 <= picked.get(b, 0) < len(nodes) else 0)
            for b, nodes in arms.items()}


def lower_picked_route(g: Graph, roots: Sequence[int],
                       picked: Mapping[int, int] | None = None) -> list[int]:
    """The execution order for one choice of arm per branch (missing or invalid: arm 0).

    Runs are reordered across devices only within stretches that enter no branch arm, so
    that an upstream branch is always decided before anything after it runs."""
    runs = extract_runs(g, roots)
    arms, _ = arm_nodes(g)
    choice = _clamped(arms, picked or {})
    skip = _skipped(arms, choice)
    starts = {min((k for k, r in enumerate(runs) if any(r.entry in a for a in nodes)),
                  default=None) for nodes in arms.values()}
    out: list[int] = []
    segment: list[Run] = []
    for k, run in enumerate(runs):
        if k in starts:
            out.extend(n for j in device_alternating_order(g, segment)
                       for n in segment[j].members)
            segment = []
        if run.entry not in skip:
            segment.append(run)
    out.extend(n for j in device_alternating_order(g, segment) for n in segment[j].members)
    return out


def lower_runs_arm0(g: Graph, roots: Sequence[int]) -> list[int]:
    """The execution order with arm 0 of every branch."""
    return lower_picked_route(g, roots, {})


def lower_picked_route_streaming(g: Graph, roots: Sequence[int],
                                 resolve: Callable[[int], int]) -> list[int]:
    """Resolve each branch (``resolve(branch) -> arm``, called once) only when the walk
    first reaches one of its arms; the order equals the one-shot form's for those picks."""
    runs = extract_runs(g, roots)
    arms, _ = arm_nodes(g)
    picked: dict[int, int] = {}
    skip = _skipped(arms, {})
    out: list[int] = []
    segment: list[Run] = []
    for run in runs:
        for b, nodes in arms.items():
            if b not in picked and any(run.entry in arm for arm in nodes):
                out.extend(n for j in device_alternating_order(g, segment)
                           for n in segment[j].members)
                segment = []
                picked[b] = resolve(b)
                skip = _skipped(arms, _clamped(arms, picked))
        if run.entry not in skip:
            segment.append(run)
    out.extend(n for j in device_alternating_order(g, segment) for n in segment[j].members)
    return out


def branch_density(g: Graph, roots: Sequence[int]) -> float:
    """Branch nodes per live node."""
    live = g.reachable(effective_roots(g, roots))
    branches = sum(1 for n in live if g.nodes[n].op is Op.BRANCH)
    return branches / max(1, len(live))


def passes_fewness_gate(g: Graph, roots: Sequence[int]) -> bool:
    """Branches must be few (strictly under 5 % of nodes): fork at big seams, not per op."""
    return branch_density(g, roots) < FEWNESS_THRESHOLD


def device_alternating_order(g: Graph, runs: Sequence[Run]) -> list[int]:
    """A run order that interleaves devices (each device's heaviest downstream work first),
    so an asynchronous GPU overlaps CPU work. One device: the identity."""
    if len({r.device for r in runs if r.device is not None}) <= 1:
        return list(range(len(runs)))
    where = {n: k for k, r in enumerate(runs) for n in r.members}
    deps = [set() for _ in runs]
    for k, r in enumerate(runs):
        for n in r.members:
            for i in list(g.nodes[n].inputs) + list(g.after.get(n, ())):
                j = where.get(i)
                if j is not None and j != k:
                    deps[k].add(j)
    users = [set() for _ in runs]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].add(k)
    weight = [len(r.members) if g.nodes[r.entry].op is not Op.COPY else 0 for r in runs]
    down = list(weight)
    for k in reversed(range(len(runs))):
        for u in users[k]:
            down[k] = max(down[k], weight[k] + down[u])
    waiting = [len(d) for d in deps]
    out: list[int] = []
    last = None
    while len(out) < len(runs):
        ready = [k for k in range(len(runs)) if waiting[k] == 0 and k not in out]
        k = min(ready, key=lambda j: (-down[j], runs[j].device == last, j))
        out.append(k)
        last = runs[k].device
        waiting[k] = -1
        for u in users[k]:
            waiting[u] -= 1
    return out
