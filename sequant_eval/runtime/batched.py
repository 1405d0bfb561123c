"""Run an ordered schedule: blocks loop over exact batch ranges, forms live by their cells.

Per batch of a block: the batch range is set for its loop, the steps run in order (leaf
slices are fetched, contractions built, child blocks recurse), then every output of the
block takes the batch: AccumulateSum adds it into the destination, AccumulateScatter writes
it into its window (every position the batch is sliced on and the destination is not, so a
joint scatter over several loops is one write). Destinations are allocated when the
outermost loop they assemble over opens. Each form is released when its life (reads, from
the cell table) is spent. The meter counts every live form exactly as the static sweep
does, so a dry run's peak equals the prediction to the byte.
"""
from __future__ import annotations

from math import prod

from ..errors import ScheduleError
from ..forest.values import Forest, ValueKind
from ..schedule.analysis import ScheduleAnalysis
from ..schedule.forms import FormKind
from ..schedule.ordered import BuildStep, ScopeBlock
from ..schedule.peak import allocations, moves, schedule_points
from .cells import CellTable, build_cell_table, validate
from .executor import Meter
from .kernels import plan_contraction

__all__ = ["BatchedProgram", "run_batched"]


class BatchedProgram:
    """An analyzed schedule with its validated cell table, ready to run many times."""

    def __init__(self, analysis: ScheduleAnalysis, volatile: frozenset[str] = frozenset(),
                 persist: bool = False) -> None:
        self.analysis = analysis
        self.forest: Forest = analysis.forest
        self.sched = analysis.ordered
        self.table: CellTable = build_cell_table(self.sched, self.forest, volatile)
        bad = validate(self.table, self.sched, self.forest)
        if bad:
            raise ScheduleError("invalid cell table: " + "; ".join(map(str, bad[:5])))
        self.cells = {c.form: c for c in self.table.cells}
        self.persist = persist
        self.persistent = {c.form for c in self.table.cells if c.persistent} if persist else set()
        self.alloc = allocations(self.sched)
        points = schedule_points(self.sched)
        self.moved = {(points[k].form, points[k].entry) for k in moves(self.sched, self.forest,
                                                                        points)}
        self.plans: dict[tuple, object] = {}
        results = {r.value for r in self.forest.roots}
        self.roots = {f.id for f in self.sched.forms
                      if f.kind is FormKind.SUM and f.value in results}
        self.store: dict[int, object] = {}        # persistent forms kept across runs
        self.skip = self._skippable() if persist else set()
        # once persistent forms are stored, skipped readers forgo their reads
        self.warm_life = {c.form: 0 for c in self.table.cells}
        for r in self.table.reads:
            if r.consumer not in self.skip and r.consumer not in self.persistent:
                self.warm_life[r.source] += r.weight

    def _skippable(self) -> set[int]:
        """Forms needed only to make persistent ones (closed under 'all readers skipped')."""
        readers: dict[int, list[int]] = {}
        for r in self.table.reads:
            readers.setdefault(r.source, []).append(r.consumer)
        skip = set(self.persistent)
        changed = True
        while changed:
            changed = False
            for f in self.sched.forms:
                if f.id not in skip and f.id not in self.roots and readers.get(f.id) and all(
                        rd in skip for rd in readers[f.id]):
                    skip.add(f.id)
                    changed = True
        return skip - self.persistent

    def predicted_peak(self, warm: bool = False) -> int:
        """Static peak of one evaluation; ``warm``: with persistent forms already stored
        (every evaluation after the first when persistence is on)."""
        from ..schedule.peak import liveness, peak_profile_sweep

        a = self.analysis
        points = schedule_points(self.sched)
        cells = liveness(self.sched, self.forest, a.shapes, a.plan.policy.itemsize, points,
                         kept=frozenset(self.persistent),
                         stored=frozenset(self.persistent) if warm else frozenset(),
                         skipped=frozenset(self.skip) if warm else frozenset())
        return peak_profile_sweep(cells, len(points)).peak_bytes

    def plan_for(self, vid: int, out_shape, a_shape, b_shape):
        key = (vid, out_shape, a_shape, b_shape)
        plan = self.plans.get(key)
        if plan is None:
            v = self.forest.values
            val = v[vid]
            plan = plan_contraction(val, v[val.left.value], v[val.right.value], out_shape,
                                    a_shape, b_shape)
            self.plans[key] = plan
        return plan


def run_batched(prog: BatchedProgram, backend, source):
    """Execute; returns ``({equation: array}, Meter)``."""
    return _Run(prog, backend, source).run()


class _Run:
    def __init__(self, prog: BatchedProgram, backend, source) -> None:
        self.p = prog
        self.be = backend
        self.source = source
        self.forms = prog.sched.forms
        self.ctx: dict[int, tuple[int, int]] = {}
        self.arrays: dict[int, object] = {}
        self.remaining: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.live = self.peak = self.flops = 0
        self.peak_at: tuple[int, ...] = ()
        self.builds: dict[int, int] = {}
        self.warm = bool(prog.store)
        for fid, arr in prog.store.items():
            self._hold(fid, arr, life=None)

    # -- memory --------------------------------------------------------------------------------
    def _hold(self, fid: int, arr, life: int | None = None) -> None:
        self.arrays[fid] = arr
        self.sizes[fid] = self.be.nbytes(arr)
        self.live += self.sizes[fid]
        if life is None:
            life = self.p.warm_life[fid] if self.warm else self.p.cells[fid].life
        self.remaining[fid] = life
        if self.live > self.peak:
            self.peak, self.peak_at = self.live, tuple(sorted(self.arrays))

    def _release(self, fid: int) -> None:
        if fid in self.p.roots or fid in self.p.persistent:
            return
        self.live -= self.sizes.pop(fid)
        del self.arrays[fid]

    def _read(self, fid: int):
        arr = self.arrays[fid]
        self.remaining[fid] -= 1
        if self.remaining[fid] == 0:
            self._release(fid)
        return arr

    def _shape(self, fid: int) -> tuple[int, ...]:
        f = self.forms[fid]
        shape = list(self.p.analysis.shapes[f.value])
        for pos, loop in f.sliced:
            lo, hi = self.ctx[loop]
            shape[pos] = hi - lo
        return tuple(shape)

    def _skipped(self, fid: int) -> bool:
        """Stored by an earlier evaluation, or needed only to make stored forms."""
        return self.warm and (fid in self.p.store or fid in self.p.skip)

    # -- steps ---------------------------------------------------------------------------------
    def run(self):
        self._block(self.p.sched.root, ())
        results = {}
        for root in self.p.forest.roots:
            fid = next(f.id for f in self.forms
                       if f.kind is FormKind.SUM and f.value == root.value)
            if fid not in self.arrays:                  # every term cancelled
                self._hold(fid, self.be.zeros(self.p.analysis.shapes[root.value]), life=0)
            results[root.name] = self.arrays[fid]
        for fid in self.p.persistent:
            if fid in self.arrays:
                self.p.store[fid] = self.arrays[fid]
        return results, Meter(self.be.name, self.peak, -1, self.peak_at, self.flops,
                              dict(self.builds))

    def _block(self, block: ScopeBlock, path: tuple) -> None:
        for s in block.steps:
            if isinstance(s, ScopeBlock):
                self._loop(s, path + (s.path_item,))
            else:
                self._build(s)

    def _loop(self, block: ScopeBlock, path: tuple) -> None:
        loop = self.p.sched.loops[block.loop]
        for fid in self.p.alloc.get(path, ()):
            if self._skipped(fid):
                continue
            self.ctx[block.loop] = (0, loop.extent)    # destinations span the whole loop
            shape = self._shape(fid)
            self._hold(fid, self.be.zeros(shape))
            self.builds[fid] = self.builds.get(fid, 0) + 1
        for lo, hi in loop.ranges():
            self.ctx[block.loop] = (lo, hi)
            self._block(block, path)
            for out in block.outputs:
                if self._skipped(out.form):
                    continue
                f = self.forms[out.form]
                part = self._read(f.source)
                dest = self.arrays[out.form]
                if out.kind.value == "sum":
                    self.be.add_into(dest, part)
                    self.flops += prod(part.shape)
                else:
                    index = [slice(None)] * len(dest.shape)
                    src = self.forms[f.source]
                    for pos, l in src.sliced:
                        if l in f.span:
                            a, b = self.ctx[l]
                            index[pos] = slice(a, b)
                    self.be.write_into(dest, tuple(index), part)
        del self.ctx[block.loop]

    def _build(self, step: BuildStep) -> None:
        f = self.forms[step.form]
        if self._skipped(step.form):
            return
        if f.kind is FormKind.SUM:
            self._accumulate(step)
            return
        if f.kind is FormKind.LEAF:
            block = self.be.fetch(self.source, f.value)
            index = [slice(None)] * len(self.p.analysis.shapes[f.value])
            for pos, loop in f.sliced:
                index[pos] = slice(*self.ctx[loop])
            arr = self.be.take(block, tuple(index), self._shape(step.form))
        else:
            val = self.p.forest.values[f.value]
            a, b = self.arrays[f.operands[0]], self.arrays[f.operands[1]]
            if getattr(self.be, "symbolic", False):
                ext = dict(zip(val.left.modes, a.shape)) | dict(zip(val.right.modes, b.shape))
                arr = self.be.zeros(self._shape(step.form))
                self.flops += 2 * prod(ext.values())
            else:
                plan = self.p.plan_for(f.value, self._shape(step.form), tuple(a.shape),
                                       tuple(b.shape))
                arr = self.be.contract(plan, a, b)
                self.flops += plan.flops
            self._hold(step.form, arr)
            self.builds[step.form] = self.builds.get(step.form, 0) + 1
            for o in f.operands:
                self._read(o)
            return
        self._hold(step.form, arr)
        self.builds[step.form] = self.builds.get(step.form, 0) + 1

    def _accumulate(self, step: BuildStep) -> None:
        f = self.forms[step.form]
        entry = self.p.forest.values[f.value].entries[step.entry]
        src_id = f.operands[step.entry]
        src = self.arrays[src_id]
        move = (step.form, step.entry) in self.p.moved
        target = None if step.entry == 0 else self.arrays[step.form]
        out = self.be.accumulate(target, src, float(entry.coefficient), entry.perm, move)
        self.flops += 2 * prod(src.shape)
        if step.entry == 0:
            if move:
                self.live -= self.sizes.pop(src_id)
                del self.arrays[src_id]
                self.remaining[src_id] = 0
            self._hold(step.form, out)
            self.builds[step.form] = 1
        if not move:
            self._read(src_id)
