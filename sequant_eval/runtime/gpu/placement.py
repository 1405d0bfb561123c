"""Placement: which device runs each op, decided by a cost model, within a GPU budget.

The cost of an op on a device is a roofline, ``max(flops/rate, bytes/bandwidth)`` plus a
launch overhead; moving a value between devices costs ``bytes/link + latency``. A
carry-forward DP over the execution order gives, per op and device, the cheapest way to
have its result there; the roots must end on the host. Views and in-place ops stay with
the buffer they touch; inputs live where the caller's arrays are. Under a GPU budget, ops
are moved back to the CPU (their whole buffer with them) until the budget can be met: by
default only until every step's working set fits — the values idle across a step are then
evicted and reloaded by the residency pass (``residency.py``); with ``Machine.evict``
false, until the whole live peak fits (the largest GPU buffers first).

Around it, the lock-step driver of the dispatch layer: pathfinders only *add* candidate
routes (a placement fork records a Branch where a run's CPU and GPU costs are close,
arm 0 the winner), and optimizers right after each pathfinder *merge or discard* (a
convergence optimizer collapses duplicate arms and drops arms whose device is not there,
never the last one).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from math import prod

from ..graph import BINDINGS, INPLACE, VIEWS, Device, Graph, Node, Op
from .runs import extract_runs

__all__ = ["CostModel", "Machine", "place", "gpu_live_peak", "gpu_profile", "DeviceProfile",
           "gpu_working_set", "PlacementForkPathfinder", "ConvergenceOptimizer",
           "run_lockstep", "node_flops", "node_bytes"]


@dataclass(frozen=True)
class CostModel:
    """Priors (overridable by ``measure``): flop/s, byte/s, per-op launch, link speed."""

    rate: dict = field(default_factory=lambda: {Device.CPU: 50e9, Device.GPU: 30e12})
    bandwidth: dict = field(default_factory=lambda: {Device.CPU: 10e9, Device.GPU: 2e12})
    launch: dict = field(default_factory=lambda: {Device.CPU: 1e-6, Device.GPU: 10e-6})
    link: float = 20e9
    latency: float = 10e-6

    def op_time(self, flops: float, nbytes: float, device: Device) -> float:
        """Seconds for one op on ``device``: compute- or bandwidth-bound, plus launch."""
        return max(flops / self.rate[device], nbytes / self.bandwidth[device]) + \
            self.launch[device]

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` between host and device (link rate plus latency)."""
        return nbytes / self.link + self.latency

    @classmethod
    def measure(cls, gpu: bool = False) -> CostModel:
        """One-shot micro-benchmark of this machine's GEMM rate and copy bandwidth."""
        import numpy as np

        a = np.random.default_rng(0).standard_normal((512, 512))
        a @ a
        t = time.perf_counter()
        a @ a
        cpu_rate = 2 * 512**3 / max(time.perf_counter() - t, 1e-9)
        b = np.empty(8 << 20)
        t = time.perf_counter()
        b.copy()
        cpu_bw = 2 * b.nbytes / max(time.perf_counter() - t, 1e-9)
        base = cls()
        return replace(base, rate=dict(base.rate) | {Device.CPU: cpu_rate},
                       bandwidth=dict(base.bandwidth) | {Device.CPU: cpu_bw})


@dataclass(frozen=True)
class Machine:
    """The devices an evaluation may use, the GPU memory budget and the cost model."""

    gpu: bool = False
    gpu_budget: float = float("inf")      # bytes the evaluation may hold on the GPU
    cost: CostModel = field(default_factory=CostModel)
    evict: bool = True                    # meet the budget by eviction (residency.py)

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices a node can be placed on: the CPU, and the GPU if there is one."""
        return (Device.CPU, Device.GPU) if self.gpu else (Device.CPU,)


def node_flops(g: Graph, n: int) -> float:
    """Floating-point operations of one node (for the cost model)."""
    node = g.nodes[n]
    if node.op is Op.CONTRACT:
        return float(node.params[-1]) if len(node.params) > 1 else float(prod(node.shape))
    if node.op in (Op.ACCUMULATE, Op.INIT, Op.SCALE):
        return 2.0 * prod(node.shape)
    return 0.0


def node_bytes(g: Graph, n: int) -> float:
    """Bytes of one node's output (float64; a scalar counts one element)."""
    return 8.0 * prod(g.nodes[n].shape) if g.nodes[n].shape else 8.0


def _forced(g: Graph, n: int) -> int | None:
    """The input whose device a node must share (views, in-place ops), if any."""
    op = g.nodes[n].op
    return g.nodes[n].inputs[0] if (op in VIEWS or op in INPLACE) else None


def place(g: Graph, roots: Sequence[int], machine: Machine,
          residency: dict[int, Device] | None = None) -> None:
    """Write a device for every reachable node into ``g.device``."""
    cost = machine.cost
    devs = machine.devices
    order = g.order(roots)
    best: dict[int, dict[Device, float]] = {}
    for n in order:
        node = g.nodes[n]
        if node.op is Op.INPUT:
            home = (residency or {}).get(n, Device.CPU)
            best[n] = {d: (0.0 if d is home else float("inf")) for d in devs}
            continue
        io = node_bytes(g, n) + sum(node_bytes(g, i) for i in node.inputs)
        own = {d: cost.op_time(node_flops(g, n), io, d) for d in devs}
        if node.op in BINDINGS or node.op in VIEWS:
            own = {d: 0.0 for d in devs}
        forced = _forced(g, n)
        total = {}
        for d in devs:
            t = own[d]
            for i in node.inputs:
                if i == forced:
                    t += best[i][d]
                else:
                    t += min(best[i][e] + (0 if e is d else cost.transfer_time(node_bytes(g, i)))
                             for e in devs)
            total[d] = t
        best[n] = total
    chosen: dict[int, Device] = {}
    for r in roots:
        chosen[r] = min(devs, key=lambda d: best[r][d] + (
            0 if d is Device.CPU else cost.transfer_time(node_bytes(g, r))))
    for n in reversed(order):
        d = chosen.setdefault(n, Device.CPU)
        forced = _forced(g, n)
        for i in g.nodes[n].inputs:
            if i in chosen:
                continue
            if i == forced:
                chosen[i] = d
            else:
                chosen[i] = min(devs, key=lambda e: best[i][e] + (
                    0 if e is d else cost.transfer_time(node_bytes(g, i))))
    g.device.update(chosen)
    _fit_gpu_budget(g, roots, machine)


@dataclass(frozen=True)
class DeviceProfile:
    """GPU-resident bytes along an execution order: the peak, the step it is first reached
    at, the buffers (owner nodes) live there, and each buffer's bytes."""

    peak: float
    step: int
    live: tuple[int, ...]
    size: dict = field(default_factory=dict, compare=False)


def gpu_profile(g: Graph, roots: Sequence[int],
                order: Sequence[int] | None = None) -> DeviceProfile:
    """The executor's accounting of GPU buffers, statically: a buffer is made by its
    allocating node and released after the last read of any of its versions (the roots'
    buffers are kept); the peak is taken after every allocation. ``order`` is the route
    the executor takes (default: ``g.order(roots)``)."""
    order = g.order(roots) if order is None else order
    last: dict[int, int] = {}
    for k, n in enumerate(order):
        for i in g.nodes[n].inputs:
            last[g.owner(i)] = k
    keep = {g.owner(r) for r in roots}
    live = peak = 0.0
    step, snap = 0, ()
    alive: dict[int, float] = {}
    for k, n in enumerate(order):
        node = g.nodes[n]
        if node.op not in VIEWS and node.op not in INPLACE and node.op is not Op.INPUT and \
                g.device.get(n) is Device.GPU:
            alive[n] = node_bytes(g, n)
            live += alive[n]
            if live > peak:
                peak, step, snap = live, k, tuple(sorted(alive))
        for i in node.inputs:
            o = g.owner(i)
            if last.get(o) == k and o in alive and o not in keep:
                live -= alive.pop(o)
    sizes = {o: node_bytes(g, o) for o in snap}
    return DeviceProfile(peak, step, snap, sizes)


def gpu_live_peak(g: Graph, roots: Sequence[int], order: Sequence[int] | None = None) -> float:
    """Peak bytes of GPU-resident buffers along the execution order (``gpu_profile``)."""
    return gpu_profile(g, roots, order).peak


def gpu_working_set(g: Graph, roots: Sequence[int]) -> tuple[float, int | None]:
    """The largest GPU working set of one step — a GPU op's new buffer plus every buffer it
    reads (wherever it lives now: it is copied over) — and that op: the floor below which
    no eviction can bring the GPU peak."""
    worst, at = 0.0, None
    for n in g.order(roots):
        node = g.nodes[n]
        if g.device.get(n) is not Device.GPU or node.op in VIEWS or node.op is Op.INPUT:
            continue
        read = {g.owner(i) for i in node.inputs}
        need = sum(node_bytes(g, o) for o in read if g.nodes[o].op is not Op.INPUT)
        if node.op not in INPLACE:
            need += node_bytes(g, n)
        if need > worst:
            worst, at = need, n
    return worst, at


def _fit_gpu_budget(g: Graph, roots: Sequence[int], machine: Machine) -> None:
    """Move GPU buffers (each with every node touching it) to the CPU until the budget can
    be met: each step's working set (``machine.evict``: the binding op goes) or else the
    whole live peak (the largest buffer goes)."""
    if not machine.gpu:
        return
    while True:
        if machine.evict:
            need, at = gpu_working_set(g, roots)
            if need <= machine.gpu_budget or at is None:
                return
            victim = g.owner(at)
        else:
            if gpu_live_peak(g, roots) <= machine.gpu_budget:
                return
            on_gpu = [n for n in g.reachable(roots) if g.device.get(n) is Device.GPU
                      and g.nodes[n].op not in VIEWS and g.nodes[n].op not in INPLACE]
            if not on_gpu:
                return
            victim = max(on_gpu, key=lambda n: (node_bytes(g, n), -n))
        for n in g.reachable(roots):            # the buffer and everything touching it
            if g.owner(n) == victim:
                g.device[n] = Device.CPU


# -- the lock-step driver ------------------------------------------------------------------


@dataclass
class Context:
    """What the lock-step driver's pathfinders and optimizers see: the machine and the near-
    equal tolerance."""

    machine: Machine
    tolerance: float = 0.1           # "near-equal": within 10 % of each other


def _run_time(g: Graph, members: Sequence[int], device: Device, cost: CostModel) -> float:
    inside = set(members)
    t = 0.0
    for n in members:
        node = g.nodes[n]
        if node.op in BINDINGS or node.op in VIEWS:
            continue
        io = node_bytes(g, n) + sum(node_bytes(g, i) for i in node.inputs)
        t += cost.op_time(node_flops(g, n), io, device)
        for i in node.inputs:
            if i not in inside and g.device.get(g.owner(i), Device.CPU) is not device:
                t += cost.transfer_time(node_bytes(g, i))
    return t


class PlacementForkPathfinder:
    """Adds a Branch where a run could run on either device at nearly the same cost."""

    def propose(self, g: Graph, roots: Sequence[int], ctx: Context) -> None:
        """Clone each near-tied single-exit run onto the other device, as arm 1 of a new
        Branch (in place on ``g``); no-op with one device."""
        if len(ctx.machine.devices) < 2:
            return
        users: dict[int, list[int]] = {}
        for n in g.order(roots):
            for i in g.nodes[n].inputs:
                users.setdefault(i, []).append(n)
        for run in extract_runs(g, roots):
            if run.device is None or g.nodes[run.entry].op is Op.COPY:
                continue
            members = [n for n in run.members if g.nodes[n].op not in BINDINGS]
            exits = users.get(run.exit, [])
            if not members or len(exits) != 1 or run.exit in roots:
                continue
            inside = set(run.members)
            if any(u not in inside for n in members if n != run.exit
                   for u in users.get(n, ())):
                continue                  # an arm's interior must not be read from outside
            other = Device.GPU if run.device is Device.CPU else Device.CPU
            here = _run_time(g, members, run.device, ctx.machine.cost)
            there = _run_time(g, members, other, ctx.machine.cost)
            if abs(here - there) > ctx.tolerance * max(here, there):
                continue
            clone: dict[int, int] = {}
            for n in members:
                node = g.nodes[n]
                new = replace(node, inputs=tuple(clone.get(i, i) for i in node.inputs),
                              tag=f"{node.tag} (arm 1)".strip())
                clone[n] = g.push(new)
                g.device[clone[n]] = other
            branch = g.push(Node(Op.BRANCH, (run.exit, clone[run.exit]), (exits[0],)))
            g.branches[branch] = exits[0]
            g.after[exits[0]].add(clone[run.exit])     # the merge waits for either arm


class ConvergenceOptimizer:
    """Collapses duplicate arms; drops arms on absent devices, never the last arm."""

    def prune(self, g: Graph, roots: Sequence[int], ctx: Context) -> None:
        """Drop, in place on ``g``, branch arms that duplicate another or run on a device
        the machine lacks (always keeping one arm)."""
        for b in list(g.branches):
            node = g.nodes[b]
            arms, seen = [], set()
            for exit_ in node.inputs:
                sig = self._signature(g, exit_)
                dev = g.device.get(exit_)
                if sig in seen:
                    continue
                if dev not in ctx.machine.devices and (arms or exit_ != node.inputs[-1]):
                    continue
                seen.add(sig)
                arms.append(exit_)
            if not arms:                      # never strand the last viable placement
                arms = [node.inputs[0]]
            dropped = set(node.inputs) - set(arms)
            waits = g.after.get(node.params[0])
            if dropped and waits:             # the merge no longer waits for a dropped arm,
                waits -= dropped              # which would pull it back into the route
                g.memo.clear()
            if len(arms) == 1:
                if arms[0] != node.inputs[0]:     # the merge reads the survivor directly
                    g.rewrite_input(node.params[0], node.inputs[0], arms[0])
                del g.branches[b]
            elif tuple(arms) != node.inputs:
                new = g.push(replace(node, inputs=tuple(arms)))
                del g.branches[b]
                g.branches[new] = node.params[0]

    @staticmethod
    def _signature(g: Graph, exit_: int) -> tuple:
        node = g.nodes[exit_]
        return (node.op, node.params, node.inputs, g.device.get(exit_))


def run_lockstep(g: Graph, roots: Sequence[int], ctx: Context, pathfinders, optimizers,
                 log: list | None = None) -> None:
    """Each pathfinder proposes, then every optimizer prunes right away."""
    for p in pathfinders:
        p.propose(g, roots, ctx)
        if log is not None:
            log.append(("propose", type(p).__name__))
        for o in optimizers:
            o.prune(g, roots, ctx)
            if log is not None:
                log.append(("prune", type(o).__name__))
