"""A fitted schedule made runnable: validated cells, then either the loop program (one
device: NumPy, an array-API namespace, the dry run) or the unrolled op graph with passes,
placement and routes (a GPU), each run by its executor.

Repeated evaluation (``persist=True``): contractions that depend on no volatile tensor and
feed volatile ones are kept after the first evaluation; later evaluations read them back
and skip everything only they needed (a second, "warm" graph).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from ..errors import ScheduleError, SinkError
from ..schedule.analysis import ScheduleAnalysis
from ..schedule.forms import FormKind
from ..schedule.peak import folded_into, liveness, peak_profile_sweep, schedule_points
from .backends import get_backend, gpu_available
from .cells import build_cell_table, validate
from .engine import run_graph
from .graph import Device, Op
from .interpreter import run_program
from .lower import Lowered, lower_program, lower_schedule
from .passes import bridge_arms, copy_roots_to_host, insert_copies, run_passes
from .placement import (ConvergenceOptimizer, Context, Machine, PlacementForkPathfinder,
                        place, run_lockstep)
from .residency import Residency, fit_residency
from .sinks import Sink, check_sinks

__all__ = ["Compiled", "RoutePicker"]


@dataclass
class RoutePicker:
    """Resolves a branch at run time: the CPU arm when there is no GPU or not enough free
    GPU memory for the arm, else arm 0 (the planned winner)."""

    graph: object
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

    def _device(self, exit_: int) -> Device:
        """The device an arm runs on (an exit bridged to the merge's device by a copy runs
        where the copy's input does)."""
        node = self.graph.nodes[exit_]
        if node.op is Op.COPY:
            exit_ = node.inputs[0]
        return self.graph.device.get(exit_, Device.CPU)

    def _need(self, exit_: int) -> float:
        from math import prod

        return 8.0 * prod(self.graph.nodes[exit_].shape or (1,))


class Compiled:
    """A fitted schedule made runnable: the validated cell table, the lowered (and, per
    machine, placed) op graph, the backends (kept: their kernel plans are reused) and,
    with ``persist``, the store of kept intermediates. ``run`` evaluates."""

    def __init__(self, analysis: ScheduleAnalysis, volatile: frozenset[str] = frozenset(),
                 persist: bool = False, passes: bool = True) -> None:
        self.analysis = analysis
        self.forest = analysis.forest
        self.sched = analysis.ordered
        self.table = build_cell_table(self.sched, self.forest, volatile)
        bad = validate(self.table, self.sched, self.forest)
        if bad:
            raise ScheduleError("invalid cell table: " + "; ".join(map(str, bad[:5])))
        self.cells = {c.form: c for c in self.table.cells}
        self.persist = persist
        self.use_passes = passes
        folded = folded_into(self.sched)        # added into sums batch by batch: not kept
        self.persistent = frozenset(c.form for c in self.table.cells
                                    if c.persistent and c.form not in folded) \
            if persist else frozenset()
        self.skip = self._skippable() if persist else frozenset()
        self.store: dict[int, object] = {}
        self.batched_leaves = frozenset(f.value for f in self.sched.forms
                                        if f.kind is FormKind.LEAF and f.sliced)
        self._backends: dict[str, dict] = {}
        self._lowered: dict[tuple, tuple[Lowered, list[int]]] = {}
        self._programs: dict[bool, object] = {}
        self._residency: dict[tuple, Residency] = {}
        self.residency: Residency | None = None   # of the graph last prepared (or run)

    def _skippable(self) -> frozenset[int]:
        readers: dict[int, list[int]] = {}
        for r in self.table.reads:
            readers.setdefault(r.source, []).append(r.consumer)
        sums = {f.id for f in self.sched.forms if f.kind is FormKind.SUM}
        skip = set(self.persistent)
        changed = True
        while changed:
            changed = False
            for f in self.sched.forms:
                if f.id not in skip and f.id not in sums and readers.get(f.id) and all(
                        r in skip for r in readers[f.id]):
                    skip.add(f.id)
                    changed = True
        return frozenset(skip - self.persistent)

    def lowered(self, warm: bool = False, machine: Machine | None = None):
        """The prepared graph and its roots (cached per warm/cold and machine)."""
        machine = machine or Machine()
        key = (warm, machine.gpu, machine.gpu_budget, machine.evict)
        if key not in self._lowered:
            low = lower_schedule(self.analysis, self.persistent,
                                 self.persistent if warm else frozenset(),
                                 self.skip if warm else frozenset())
            g, roots = low.graph, low.root_nodes()
            if self.use_passes:
                roots = run_passes(g, roots)
            place(g, roots, machine)
            if machine.gpu:
                run_lockstep(g, roots, Context(machine), [PlacementForkPathfinder()],
                             [ConvergenceOptimizer()])
                from .runs import effective_roots

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

    def program(self, warm: bool = False):
        """The loop program of a single-device run (cached per warm/cold)."""
        if warm not in self._programs:
            self._programs[warm] = lower_program(
                self.analysis, self.persistent,
                self.persistent if warm else frozenset(), self.skip if warm else frozenset())
        return self._programs[warm]

    def contraction_plans(self) -> list:
        """The NumPy contraction plans made so far (after a NumPy run)."""
        be = self._backends.get("numpy", {}).get(Device.CPU)
        return list(be.plans.values()) if be is not None else []

    def predicted_peak(self, warm: bool = False) -> int:
        """The static peak of this program, bytes; ``warm``: a repeated evaluation, with
        persistent forms already stored and what only they need skipped."""
        a = self.analysis
        points = schedule_points(self.sched)
        cells = liveness(self.sched, self.forest, a.shapes, a.plan.policy.itemsize, points,
                         kept=self.persistent,
                         stored=self.persistent if warm else frozenset(),
                         skipped=self.skip if warm else frozenset())
        skipped = self.skip | self.persistent if warm else frozenset()
        return peak_profile_sweep(cells, len(points), a.transient(skipped)).peak_bytes

    def run(self, backend: str = "numpy", source=None, gpu_budget: float = float("inf"),
            sinks=None):
        """Evaluate: ``({equation: NumPy array}, Meter)`` whatever the backend (a dry run
        gives shapes); on a GPU every result is copied back to the host in the op graph.
        ``sinks`` (result name → ``sinks.Sink``): the destinations of results planned with
        one (``BatchPolicy.sinks``); such a result is its destination."""
        warm = bool(self.store)
        gpu = backend in ("cupy", "auto") and gpu_available()
        if backend == "cupy" and not gpu:
            get_backend("cupy")                       # raises: no GPU here
        if self.sched.sinks:
            self._check_sinks(sinks, gpu)
        machine = Machine(gpu=True, gpu_budget=gpu_budget) if gpu else Machine()
        name = "cupy" if gpu else ("numpy" if backend == "auto" else backend)
        if name not in self._backends:               # kept: their kernel plans are reused
            self._backends[name] = ({Device.CPU: get_backend("numpy"),
                                     Device.GPU: get_backend("cupy")} if gpu
                                    else {Device.CPU: get_backend(name)})
            if gpu:                                  # device memory back when dropped
                weakref.finalize(self, self._backends[name][Device.GPU].release)
        backends = self._backends[name]
        if gpu:
            backends[Device.GPU].pool_limit = gpu_budget
        if source is None:
            source = _Shapes(self.analysis.shapes)
        elif hasattr(source, "check_batched"):
            source.check_batched(self.batched_leaves)
        dtype = source.dtype() if hasattr(source, "dtype") else None
        for be in backends.values():
            if dtype is not None and hasattr(be, "dtype"):
                be.dtype = dtype
            if be.symbolic:
                be.itemsize = self.analysis.plan.policy.itemsize
        if not gpu:
            return self._run_program(warm, backends[Device.CPU], source, sinks)
        low, roots = self.lowered(warm, machine)
        picker = RoutePicker(low.graph, machine.gpu, _free_gpu(machine))
        out, meter = run_graph(low.graph, roots, self.forest, backends, source, self.store,
                               picker, low.form_of)
        if self.persist:
            for form, node in low.kept.items():
                self.store[form] = out[node]
        return {name: _host(backends, low.graph, n, out[n])
                for name, n in low.roots.items()}, meter


    def _run_program(self, warm: bool, backend, source, sinks=None):
        prog = self.program(warm)
        if hasattr(backend, "plan_cap"):
            backend.plan_cap = prog.plan_cap
        out, meter = run_program(prog, self.forest, backend, source, self.store, sinks)
        if self.persist:
            for form, node in prog.kept.items():
                self.store[form] = out[node]
        return {name: (out[n].dest if isinstance(out[n], Sink) else
                       out[n] if backend.symbolic else backend.to_host(out[n]))
                for name, n in prog.roots.items()}, meter

    def _check_sinks(self, sinks, gpu: bool) -> None:
        """The sinks this schedule was planned with are given, and can take their writes."""
        by_value = {r.value: r.name for r in self.forest.roots}
        names = {by_value[self.sched.forms[f].value] for f in self.sched.sinks}
        missing = sorted(names - set(sinks or ()))
        if missing:
            raise SinkError(f"results {', '.join(missing)} were planned with a sink but none "
                            f"was given; pass out={{{missing[0]!r}: destination}}")
        if gpu:
            raise SinkError(f"result sinks ({', '.join(sorted(names))}) are written on the "
                            f"CPU path only; evaluate with backend='numpy', or without out=")
        check_sinks(self.analysis, sinks)


def _host(backends, g, n: int, x):
    """A result as a host array. A placed root is a host copy already (an op-graph node);
    a single-device array-API run (``array_api_strict``) hands its arrays over here."""
    if g.device_of(n) not in (None, Device.CPU):
        raise ScheduleError(f"result n{n} was left on {g.device_of(n).value}: "
                            f"the op graph has no copy of it to the host")
    be = backends[Device.CPU]
    return x if be.symbolic else be.to_host(x)


class _Shapes:
    def __init__(self, shapes) -> None:
        self.shapes = shapes

    def shape(self, vid: int):
        return self.shapes[vid]


def _free_gpu(machine: Machine) -> float:
    if not machine.gpu:
        return 0.0
    try:
        import cupy

        free, _ = cupy.cuda.runtime.memGetInfo()
        return float(free)
    except Exception:          # no way to ask: assume the budget is what is free
        return machine.gpu_budget
