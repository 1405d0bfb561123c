"""A fitted schedule made runnable on one device: the validated cell table, the loop
program (``lower.py``, ``program.py``) and its executor (``interpreter.py``) on NumPy, an
array-API namespace or the dry run. A run on a GPU wraps this program in the GPU layer
(``gpu/placed.py``: the unrolled op graph, placed and routed); nothing here imports it.

Repeated evaluation (``persist=True``): contractions that depend on no volatile tensor and
feed volatile ones are kept after the first evaluation; later evaluations read them back
and skip everything only they needed.
"""
from __future__ import annotations

from ..errors import ScheduleError, SinkError
from ..schedule.analysis import ScheduleAnalysis
from ..schedule.forms import FormKind, form_shape
from ..schedule.peak import folded_into, liveness, peak_profile_sweep, schedule_points
from .backends import get_backend
from .cells import build_cell_table, validate
from .dryrun import ShapeSource
from .interpreter import run_program
from .lower import lower_program
from .sinks import Sink, check_sinks

__all__ = ["Compiled"]


class Compiled:
    """A fitted schedule made runnable: the validated cell table, the loop program, the
    backends (kept: their kernel plans are reused) and, with ``persist``, the store of
    kept intermediates. ``run`` evaluates."""

    def __init__(self, analysis: ScheduleAnalysis, volatile: frozenset[str] = frozenset(),
                 persist: bool = False) -> None:
        self.analysis = analysis
        self.forest = analysis.forest
        self.sched = analysis.ordered
        self.table = build_cell_table(self.sched, self.forest, volatile)
        bad = validate(self.table, self.sched, self.forest)
        if bad:
            raise ScheduleError("invalid cell table: " + "; ".join(map(str, bad[:5])))
        self.cells = {c.form: c for c in self.table.cells}
        self.persist = persist
        folded = folded_into(self.sched)        # added into sums batch by batch: not kept
        self.persistent = frozenset(c.form for c in self.table.cells
                                    if c.persistent and c.form not in folded) \
            if persist else frozenset()
        self.skip = self._skippable() if persist else frozenset()
        self.store: dict[int, object] = {}
        self.batched_leaves = frozenset(f.value for f in self.sched.forms
                                        if f.kind is FormKind.LEAF and f.sliced)
        self._backends: dict[str, object] = {}
        self._programs: dict[bool, object] = {}

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

    def program(self, warm: bool = False):
        """The loop program of a single-device run (cached per warm/cold)."""
        if warm not in self._programs:
            self._programs[warm] = lower_program(
                self.analysis, self.persistent,
                self.persistent if warm else frozenset(), self.skip if warm else frozenset())
        return self._programs[warm]

    def _kernel_plans(self) -> dict:
        """The schedule's kernel plans keyed as a NumPy backend asks for them (operand
        and result shapes of a full batch, the result in its layout)."""
        forms, loops, shapes = self.sched.forms, self.sched.loops, self.analysis.shapes
        out = {}
        for fid, plan in self.analysis.kernels.items():
            f = forms[fid]
            a, b = (tuple(int(x) for x in form_shape(forms[o], shapes, loops))
                    for o in f.operands)
            out[(f.value, a, b, tuple(plan.out_shape), self.analysis.layouts.get(fid))] = plan
        return out

    def contraction_plans(self) -> list:
        """The NumPy contraction plans made so far (after a NumPy run)."""
        be = self._backends.get("numpy")
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

    def run(self, backend: str = "numpy", source=None, sinks=None):
        """Evaluate on one device: ``({equation: NumPy array}, Meter)`` (a dry run gives
        shapes). ``backend``: numpy, dryrun or array_api_strict. ``sinks`` (result name →
        ``sinks.Sink``): the destinations of results planned with one
        (``BatchPolicy.sinks``); such a result is its destination."""
        if self.sched.sinks:
            self._check_sinks(sinks)
        if backend not in self._backends:            # kept: their kernel plans are reused
            be = self._backends[backend] = get_backend(backend)
            if hasattr(be, "know"):
                be.know(self._kernel_plans(), self.program(bool(self.store)).plan_cap)
        be = self._backends[backend]
        if source is None:
            source = ShapeSource(self.analysis.shapes)
        elif hasattr(source, "check_batched"):
            source.check_batched(self.batched_leaves)
        if hasattr(source, "dtype") and hasattr(be, "dtype"):
            be.dtype = source.dtype()
        if be.symbolic:
            be.itemsize = self.analysis.plan.policy.itemsize
        return self._run_program(bool(self.store), be, source, sinks)

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

    def _check_sinks(self, sinks) -> None:
        """The sinks this schedule was planned with are given, and can take their writes."""
        by_value = {r.value: r.name for r in self.forest.roots}
        names = {by_value[self.sched.forms[f].value] for f in self.sched.sinks}
        missing = sorted(names - set(sinks or ()))
        if missing:
            raise SinkError(f"results {', '.join(missing)} were planned with a sink but none "
                            f"was given; pass out={{{missing[0]!r}: destination}}")
        check_sinks(self.analysis, sinks)

