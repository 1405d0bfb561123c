"""A compiled schedule run on the host and a GPU: the unrolled op graph, rewritten by the
passes, placed on devices, its arms bridged and its device seams copied, fitted to the GPU
budget, and run by the graph executor along the route its placement picks.

``Compiled`` (``runtime/compiled.py``) is the CPU core's program: the loop program, run on
one device. ``Placed`` wraps one for a machine with a GPU, sharing its cell table, its
persistent forms and its store of kept intermediates; nothing here runs on the CPU path.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from math import prod

from ...errors import ScheduleError, SinkError
from ..compiled import Compiled
from ..engine import run_graph
from ..graph import Device, Graph, Op
from ..lower import Lowered, lower_schedule
from .backend import gpu_backends
from .passes import bridge_arms, copy_roots_to_host, insert_copies, run_passes
from .placement import (ConvergenceOptimizer, Context, Machine, PlacementForkPathfinder,
                        place, run_lockstep)
from .residency import Residency, fit_residency
from .runs import effective_roots, lower_picked_route_streaming

__all__ = ["Placed", "RoutePicker"]


@dataclass
class RoutePicker:
    """Resolves a branch at run time: the CPU arm when there is no GPU or not enough free
    GPU memory for the arm, else arm 0 (the planned winner)."""

    graph: Graph
    gpu: bool
    free_gpu_bytes: float = float("inf")

    def __call__(self, branch: int) -> int:
        g = self.graph
        arms = g.nodes[branch].inputs
        for k, exit_ in enumerate(arms):
            dev = self._device(exit_)
            if dev is Device.GPU and (not self.gpu or self._need(exit_) > self.free_gpu_bytes):
                continue
            return k
        return next((k for k, e in enumerate(arms) if self._device(e) is not Device.GPU), 0)

    def route(self, g: Graph, roots) -> list[int]:
        """The executor's walk (``run_graph(order=...)``): each branch resolved as reached."""
        return lower_picked_route_streaming(g, roots, self)

    def _device(self, exit_: int) -> Device:
        """The device an arm runs on (an exit bridged to the merge's device by a copy runs
        where the copy's input does)."""
        node = self.graph.nodes[exit_]
        if node.op is Op.COPY:
            exit_ = node.inputs[0]
        return self.graph.device.get(exit_, Device.CPU)

    def _need(self, exit_: int) -> float:
        return 8.0 * prod(self.graph.nodes[exit_].shape or (1,))


class Placed:
    """``compiled`` prepared for a machine: the lowered, rewritten (``passes``) and placed op
    graph per machine and warm/cold (cached), the residency moves of the graph last prepared
    (``residency``), and ``run``, which evaluates on NumPy and CuPy."""

    def __init__(self, compiled: Compiled, passes: bool = True) -> None:
        self.compiled = compiled
        self.use_passes = passes
        self._lowered: dict[tuple, tuple[Lowered, list[int]]] = {}
        self._residency: dict[tuple, Residency] = {}
        self.residency: Residency | None = None   # of the graph last prepared (or run)
        self._backends: dict | None = None

    def lowered(self, warm: bool = False, machine: Machine | None = None):
        """The prepared graph and its roots (cached per warm/cold and machine)."""
        machine = machine or Machine()
        key = (warm, machine.gpu, machine.gpu_budget, machine.evict)
        if key not in self._lowered:
            c = self.compiled
            low = lower_schedule(c.analysis, c.persistent,
                                 c.persistent if warm else frozenset(),
                                 c.skip if warm else frozenset())
            g, roots = low.graph, low.root_nodes()
            if self.use_passes:
                roots = run_passes(g, roots)
            place(g, roots, machine)
            if machine.gpu:
                run_lockstep(g, roots, Context(machine), [PlacementForkPathfinder()],
                             [ConvergenceOptimizer()])
                bridge_arms(g, roots)                            # arm exits on the merge's
                eff = effective_roots(g, roots)                  # device
                roots = insert_copies(g, eff)[: len(roots)]      # arms are bridged too
                roots = copy_roots_to_host(g, roots)             # results end on the host
            self._residency[key] = fit_residency(g, roots, machine)   # idle values out
            names = dict(zip(low.roots, roots[: len(low.roots)]))
            kept = dict(zip(low.kept, roots[len(low.roots):]))
            self._lowered[key] = (Lowered(g, names, kept, low.form_of), roots)
        self.residency = self._residency.get(key)
        return self._lowered[key]

    def run(self, source, gpu_budget: float = float("inf"), sinks=None):
        """Evaluate on the host and the GPU: ``({equation: NumPy array}, Meter)``, every
        result copied back to the host in the op graph. Result sinks are the CPU path's."""
        c = self.compiled
        if c.sched.sinks or sinks:
            raise SinkError("result sinks are written on the CPU path only; evaluate with "
                            "backend='numpy', or without out=")
        if self._backends is None:                   # kept: their kernel plans are reused
            self._backends = gpu_backends()
            weakref.finalize(self, self._backends[Device.GPU].release)   # device memory back
        backends = self._backends
        backends[Device.GPU].pool_limit = gpu_budget
        source.check_batched(c.batched_leaves)
        for be in backends.values():
            if hasattr(be, "dtype"):
                be.dtype = source.dtype()
        machine = Machine(gpu=True, gpu_budget=gpu_budget)
        low, roots = self.lowered(bool(c.store), machine)
        picker = RoutePicker(low.graph, machine.gpu, _free_gpu(machine))
        out, meter = run_graph(low.graph, roots, c.forest, backends, source, c.store,
                               picker.route, low.form_of)
        if c.persist:
            for form, node in low.kept.items():
                c.store[form] = out[node]
        return {name: _host(backends, low.graph, n, out[n])
                for name, n in low.roots.items()}, meter


def _host(backends, g: Graph, n: int, x):
    """A result as a host array: a placed root is a host copy already (an op-graph node)."""
    if g.device_of(n) not in (None, Device.CPU):
        raise ScheduleError(f"result n{n} was left on {g.device_of(n).value}: "
                            f"the op graph has no copy of it to the host")
    return backends[Device.CPU].to_host(x)


def _free_gpu(machine: Machine) -> float:
    try:
        import cupy

        free, _ = cupy.cuda.runtime.memGetInfo()
        return float(free)
    except Exception:          # no way to ask: assume the budget is what is free
        return machine.gpu_budget
