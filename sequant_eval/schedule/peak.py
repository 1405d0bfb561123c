"""Static peak memory of an ordered schedule: footprints, liveness, sweep, replay.

The schedule is laid out as static points in execution order, one iteration per block:
a block's *open* (where the forms it assembles are allocated), its steps, one *escape*
point per output (the batch is summed or scattered into the assembled form) and its
*close*. A form is live from its production to its last read; a read from inside a deeper
block keeps it live until that block closes (it is needed by every batch). Every
iteration of a block repeats the same pattern at full block extent (the last batch is only
smaller), so the largest sum of live footprints over these points is the run's peak.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from math import prod

from ..forest.values import Forest
from ..plan.regime import footprint_bytes
from .forms import Form, FormKind
from .ordered import OrderedSchedule, walk_blocks

__all__ = ["Point", "Liveness", "PeakProfile", "schedule_points", "liveness", "live_bytes",
           "peak_profile_sweep", "peak_profile_replay", "footprint", "transients",
           "folded_into", "stream_rows", "STREAM_BYTES", "sunk_sums", "sink_piece",
           "sink_piece_bytes", "sink_write_bytes", "scaled_in_place", "common_factors"]


@dataclass(frozen=True)
class Point:
    """A static point of the ordered schedule: a block opening or closing, a build, or an
    escape."""

    kind: str            # open | build | escape | close
    path: tuple          # block path ((loop, pass), ...)
    form: int = -1       # build/escape: the form built or assembled
    entry: int = -1      # build of a sum entry


@dataclass(frozen=True)
class Liveness:
    """One form's footprint and the static points it is live over (inclusive)."""

    form: int
    footprint: int       # bytes, sliced modes at block extent
    first: int           # first static point it is live at (inclusive)
    last: int            # last static point it is live at (inclusive)


@dataclass(frozen=True)
class PeakProfile:
    """The peak of a schedule: its bytes, the point where it is reached, the forms live
    there."""

    peak_bytes: int
    binding_point: int
    live_at_binding: tuple[int, ...]

    def dump(self) -> str:
        """One line: peak bytes, binding point and the forms live there."""
        live = ",".join(f"f{f}" for f in self.live_at_binding)
        return f"peak {self.peak_bytes} B at point {self.binding_point} (live {live})\n"


def footprint(form: Form, forest: Forest, shapes, loops, itemsize: int = 8) -> int:
    """Bytes of a form: its value's shape with sliced modes at the loop's block extent."""
    return footprint_bytes(block_shape(form, shapes, loops), itemsize)


def block_shape(form: Form, shapes, loops) -> list:
    """A form's shape: its value's, with sliced modes at the loop's block extent."""
    shape = list(shapes[form.value])
    for pos, lid in form.sliced:
        shape[pos] = min(loops[lid].block, shape[pos])
    return shape


def schedule_points(sched: OrderedSchedule) -> list[Point]:
    """The static points of an ordered schedule, in execution order."""
    points: list[Point] = []
    for event, path, item in walk_blocks(sched.root):
        if event == "step":
            points.append(Point("build", path, item.form, item.entry))
        elif not path:
            continue                        # the root block opens and closes nothing
        elif event == "enter":
            points.append(Point("open", path))
        elif event == "escape":
            points.append(Point("escape", path, item.form))
        else:
            points.append(Point("close", path))
    return points


def _reads_of(p: Point, sched: OrderedSchedule) -> list[int]:
    forms = sched.forms
    if p.kind == "skip":
        return []
    if p.kind == "build":
        form = forms[p.form]
        if p.entry >= 0:
            return [form.operands[p.entry]]
        return list(form.operands)
    if p.kind == "escape":
        return [forms[p.form].source]
    return []


def _last_reads(points: list[Point], sched: OrderedSchedule) -> dict[int, int]:
    """Form → the last static point that reads it."""
    last: dict[int, int] = {}
    for k, p in enumerate(points):
        for r in _reads_of(p, sched):
            last[r] = k
    return last


#: The most bytes one chunk of a leaf streamed into a sum holds (see ``stream_rows``).
STREAM_BYTES = 1 << 18


def folded_into(sched: OrderedSchedule) -> dict[int, int]:
    """Term results and input blocks added straight into the equation sum that reads them.

    A top-level assembled form read only by entries of one sum is never allocated: each
    batch of it is added (scattered, for an external loop) into the sum, with the entry's
    permutation and coefficient, as the batch escapes its block. The sum is allocated when
    the first such block opens. A top-level leaf read only by entries of one sum (a term
    that is an input block, ``R2 += g{a1,a2;i1,i2}``) is never held whole either: at each
    entry reading it, the block is read from its source chunk by chunk (``stream_rows``
    rows of its first axis) and each chunk added into the sum. Returns form → sum form."""
    forms = sched.forms
    out = {}
    for f in forms:
        if f.kind in (FormKind.ASSEMBLE, FormKind.LEAF) and not f.scope:
            readers = sched.rich.readers.get(f.id, ())
            sums = {r for r, _ in readers}
            if readers and len(sums) == 1 and forms[min(sums)].kind is FormKind.SUM:
                out[f.id] = min(sums)
    return out


def stream_rows(shape: tuple[int, ...], itemsize: int) -> int:
    """Rows (first-axis entries) per chunk of a leaf streamed into a sum: as many as fit
    ``STREAM_BYTES``, at least one."""
    if not shape:
        return 1
    row = itemsize * prod(shape[1:])
    return max(1, min(shape[0], STREAM_BYTES // max(1, row)))


def _stream_bytes(leaf: Form, forest: Forest, shapes, itemsize: int) -> int:
    shape = tuple(int(n) for n in shapes[leaf.value])
    return stream_rows(shape, itemsize) * itemsize * prod(shape[1:]) if shape else itemsize


def sunk_sums(sched: OrderedSchedule, forest: Forest, sinks) -> dict[int, str]:
    """Sum form → sink kind of every equation result given a sink (``BatchPolicy.sinks``:
    result name → kind)."""
    kinds = dict(sinks)
    values = {r.value: kinds[r.name] for r in forest.roots if r.name in kinds}
    return {f.id: values[f.value] for f in sched.forms
            if f.kind is FormKind.SUM and f.value in values}


def sink_piece(shape: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """How a region of a sink is written: ``(axis, rows)`` — pieces of ``rows`` entries of
    ``axis``, every axis before it fixed to one entry and every axis after it whole: the
    largest such pieces of at most ``STREAM_BYTES`` (one element at least). ``(-1, 1)``
    for a scalar."""
    shape = tuple(int(n) for n in shape)
    for j in range(len(shape)):
        row = itemsize * prod(shape[j + 1:])
        if row <= STREAM_BYTES:
            return j, max(1, min(shape[j], STREAM_BYTES // row))
    return -1, 1


def sink_piece_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes of one piece of a sink region (``sink_piece``)."""
    j, rows = sink_piece(shape, itemsize)
    return itemsize * (rows * prod(int(n) for n in shape[j + 1:]) if j >= 0 else 1)


def sink_write_bytes(kind: str, region: tuple[int, ...], alpha: float, itemsize: int) -> int:
    """What one write of a block into a sink holds while it runs. An accumulating sink is
    read, added into and written back piece by piece (one piece; a second for the scaled
    addend when ``alpha`` is not ±1); a write-once sink (a callable) is handed the block as
    its own contiguous array in the result's layout (one block-sized copy)."""
    if kind == "once":
        return itemsize * prod(int(n) for n in region)
    return sink_piece_bytes(region, itemsize) * (1 if abs(alpha) == 1 else 2)


def moves(sched: OrderedSchedule, forest: Forest, points: list[Point]) -> set[int]:
    """Points where a sum's first entry takes over the entry's buffer (as the walk does);
    never into a sum that assembled terms are added into directly, nor into a sink."""
    forms = sched.forms
    sinks = sched.sinks
    fed = {s for f, s in folded_into(sched).items() if forms[f].kind is FormKind.ASSEMBLE}
    last = _last_reads(points, sched)
    out = set()
    for k, p in enumerate(points):
        if p.kind == "build" and p.entry == 0 and p.form not in fed and p.form not in sinks:
            src = forms[forms[p.form].operands[0]]
            perm = forest.values[forms[p.form].value].entries[0].perm
            if (last[src.id] == k and src.kind is not FormKind.LEAF and not src.scope
                    and perm == tuple(range(len(perm)))):
                out.add(k)
    return out


def common_factors(sched: OrderedSchedule, forest: Forest) -> dict:
    """Form → the coefficient magnitude every sum entry reading it shares (not ±1): an
    inner sum read through the permutations of an antisymmetrizer (``R3:A1``, 36 entries
    of ±1/36), or its batch added into the result. The form is scaled in place once, then
    each entry adds it with ±1 — no scaled copy per entry, and the same products."""
    forms = sched.forms
    folded = folded_into(sched)
    out = {}
    for f in forms:
        inner = f if f.kind is FormKind.SUM else (
            forms[f.source] if f.kind is FormKind.ASSEMBLE and f.id in folded else None)
        if inner is None or inner.kind is not FormKind.SUM:
            continue
        readers = sched.rich.readers.get(f.id, ())
        if len(readers) < 2 or any(forms[r].kind is not FormKind.SUM for r, _ in readers):
            continue
        mags = {abs(forest.values[forms[r].value].entries[leg].coefficient)
                for r, leg in readers}
        if len(mags) == 1 and 1 not in mags:
            out[f.id] = mags.pop()
    return out


def scaled_in_place(sched: OrderedSchedule, forest: Forest, points: list[Point]) -> set[int]:
    """Points where an entry of a sum built per batch (a sliced inner sum) with a
    coefficient other than ±1 scales its addend in place before adding it (no scaled
    copy): the addend is a per-batch result read there for the last time. A first entry
    makes the sum from it instead."""
    forms = sched.forms
    factors = common_factors(sched, forest)
    last = _last_reads(points, sched)
    out = set()
    for k, p in enumerate(points):
        if p.kind != "build" or p.entry <= 0:
            continue
        f = forms[p.form]
        if f.kind is not FormKind.SUM or not f.scope:
            continue
        src = forms[f.operands[p.entry]]
        coeff = forest.values[f.value].entries[p.entry].coefficient
        if abs(coeff) != 1 and src.kind is not FormKind.LEAF and last[src.id] == k and \
                src.id not in factors and \
                f.operands.count(src.id) == 1:
            out.add(k)
    return out


def liveness(sched: OrderedSchedule, forest: Forest, shapes, itemsize: int = 8,
             points: list[Point] | None = None, kept: frozenset[int] = frozenset(),
             stored: frozenset[int] = frozenset(),
             skipped: frozenset[int] = frozenset()) -> list[Liveness]:
    """Live interval of every form. For repeated evaluation: ``kept`` forms stay to the
    end (they persist), ``stored`` ones are present from the start (made by an earlier
    evaluation) and ``skipped`` ones are not made at all (only stored forms need them)."""
    points = schedule_points(sched) if points is None else points
    points = [p if p.form not in skipped and p.form not in stored else Point("skip", p.path)
              for p in points]
    forms = sched.forms
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    close_of: dict[tuple, int] = {}
    for k, p in enumerate(points):
        if p.kind == "close":
            close_of[p.path] = k
    depth_of = {f.id: len(f.scope) for f in forms}
    alloc = allocations(sched)
    folded = folded_into(sched)
    for k, p in enumerate(points):
        if p.kind == "open":
            for o in alloc.get(p.path, ()):
                if o not in skipped and o not in stored:
                    start[o] = k
                    if o in folded:
                        start[folded[o]] = min(start.get(folded[o], k), k)
        elif p.kind == "build" and p.entry <= 0:
            start.setdefault(p.form, k)
        for r in _reads_of(p, sched):
            d = depth_of[r]
            at = k if len(p.path) <= d else close_of[p.path[: d + 1]]
            end[r] = max(end.get(r, -1), at)
    for k in moves(sched, forest, points):
        src = forms[points[k].form].operands[0]
        end[src] = k - 1
    # a sum whose terms all cancelled is made (zeros) after every step, as the runtime's
    # last op: at a point of its own past the last step, where only the results live
    # (with no step at all, that is the one point)
    end_at = max(len(points) - 1, 0)
    cancelled = [f.id for f in forms
                 if f.id not in start and f.id not in stored and f.id not in skipped]
    if cancelled and points:
        end_at = len(points)
    for f in cancelled:
        start[f] = end_at
    for f in stored:
        start[f] = 0
    for f in kept | stored:
        end[f] = end_at
    return [Liveness(f.id, 0 if f.id in folded or f.id in sched.sinks else
                     footprint(f, forest, shapes, sched.loops, itemsize), start[f.id],
                     end.get(f.id, end_at if f.kind is FormKind.SUM else start[f.id]))
            for f in forms if f.id not in skipped]


def allocations(sched: OrderedSchedule) -> dict[tuple, list[int]]:
    """Block path → the assembled forms allocated when that block opens.

    An assembled form is the destination of its output block's batches; it is allocated
    when the outermost loop it assembles over opens (a joint scatter over several loops
    writes into one destination allocated at the outermost of them)."""
    out: dict[tuple, list[int]] = defaultdict(list)
    for event, path, o in walk_blocks(sched.root):
        if event == "escape":
            out[path[: len(sched.forms[o.form].scope) + 1]].append(o.form)
    return out


def transients(sched: OrderedSchedule, forest: Forest, shapes, points: list[Point],
               scratch: dict[int, int], itemsize: int = 8,
               skipped: frozenset[int] = frozenset()) -> dict[int, int]:
    """Point → bytes held there only while one operation runs: a contraction kernel's
    temporaries (``scratch``: elements per contraction form, see
    ``layouts.kernel_scratch``), the scaled copy ``alpha * x`` of an addend that a sum
    entry (or a batch added straight into a sum) with a coefficient other than ±1 makes,
    and a sink's writes (``sink_write_bytes``; an accumulating sink is zeroed piece by
    piece where the sum is first touched). Ops that run one after another at a point count
    by the larger."""
    forms = sched.forms
    folded = folded_into(sched)
    moved = moves(sched, forest, points)
    alloc = allocations(sched)
    sinks = sched.sinks
    scaled = scaled_in_place(sched, forest, points)
    factors = common_factors(sched, forest)
    made: set[int] = set()           # sums allocated (or sinks opened) so far
    out: dict[int, int] = {}

    def at(k: int, nbytes: int) -> None:
        out[k] = max(out.get(k, 0), nbytes)

    def touch(k: int, sid: int) -> None:
        if sid in sinks and sid not in made and sinks[sid] == "accumulate":
            at(k, sink_piece_bytes(shapes[forms[sid].value], itemsize))
        made.add(sid)

    def entry(sid: int, leg: int):
        return forest.values[forms[sid].value].entries[leg]

    for k, p in enumerate(points):
        if p.kind == "open":
            for o in alloc.get(p.path, ()):
                if o in folded:
                    touch(k, folded[o])
        if p.form in skipped or p.kind == "skip":
            continue
        if p.kind == "build" and p.entry < 0 and p.form in scratch:
            at(k, scratch[p.form] * itemsize)
        elif p.kind == "build" and p.entry >= 0:
            src = forms[forms[p.form].operands[p.entry]]
            e = entry(p.form, p.entry)
            coeff = e.coefficient / factors.get(src.id, 1)
            if src.id in folded and src.kind is FormKind.ASSEMBLE:
                continue                                 # added batch by batch at escapes
            if p.form in sinks:
                touch(k, p.form)
                shape = block_shape(src, shapes, sched.loops)
                if src.kind is FormKind.LEAF and src.id in folded:       # one chunk
                    if shape:                            # a scalar is one chunk of one
                        shape[0] = stream_rows(tuple(shape), itemsize)
                    chunk = itemsize * prod(shape)
                else:
                    chunk = 0
                region = tuple(shape[q] for q in e.perm)
                at(k, chunk + sink_write_bytes(sinks[p.form], region, coeff, itemsize))
            elif src.kind is FormKind.LEAF and src.id in folded:     # one chunk (scaled too)
                at(k, _stream_bytes(src, forest, shapes, itemsize) * (
                    1 if abs(coeff) == 1 else 2))
            elif p.form in made and abs(coeff) != 1 and k not in moved and k not in scaled:
                at(k, footprint(src, forest, shapes, sched.loops, itemsize))
            made.add(p.form)
        elif p.kind == "escape" and p.form in folded:
            sid = folded[p.form]
            src = forms[forms[p.form].source]
            legs = [entry(sid, leg) for _, leg in sched.rich.readers[p.form]]
            c = factors.get(p.form, 1)
            if sid in sinks:
                shape = block_shape(src, shapes, sched.loops)
                for e in legs:
                    at(k, sink_write_bytes(sinks[sid], tuple(shape[q] for q in e.perm),
                                           e.coefficient / c, itemsize))
            elif any(abs(e.coefficient / c) != 1 for e in legs):
                at(k, footprint(src, forest, shapes, sched.loops, itemsize))
    for f in forms:                  # a sum whose terms all cancelled: zeros at the end
        if f.id in sinks and f.kind is FormKind.SUM and not f.operands:
            at(len(points), sink_piece_bytes(shapes[f.value], itemsize))
    return out


def live_bytes(cells: list[Liveness], num_points: int) -> list[int]:
    """Bytes live at every static point: +footprint at ``first``, -footprint after
    ``last`` (transients aside); a schedule of no step (every term cancelled) has one
    point, where its results are made."""
    num_points = max([num_points, 1] + [c.last + 1 for c in cells])   # the end point too
    delta = [0] * (num_points + 1)
    for c in cells:
        delta[c.first] += c.footprint
        delta[c.last + 1] -= c.footprint
    out, running = [], 0
    for k in range(num_points):
        running += delta[k]
        out.append(running)
    return out


def peak_profile_sweep(cells: list[Liveness], num_points: int,
                       transient: dict[int, int] | None = None) -> PeakProfile:
    """Interval-event sweep over ``live_bytes``; a ``transient`` (point → bytes) counts at
    its point only."""
    transient = transient or {}
    best = at = 0
    for k, live in enumerate(live_bytes(cells, num_points)):
        if live + transient.get(k, 0) > best:
            best, at = live + transient.get(k, 0), k
    return PeakProfile(best, at, tuple(sorted(c.form for c in cells if c.first <= at <= c.last)))


def peak_profile_replay(sched: OrderedSchedule, forest: Forest, shapes,
                        itemsize: int = 8, scratch: dict[int, int] | None = None) -> PeakProfile:
    """Independent oracle: replay the schedule, allocating and freeing by read counts.

    Reads are counted per static reader; a read from a deeper block is settled when that
    block closes. It does not use the interval table of ``liveness``. ``scratch``
    (elements per contraction form) is held while that contraction is built.
    """
    scratch = scratch or {}
    points = schedule_points(sched)
    forms = sched.forms
    remaining: dict[int, int] = defaultdict(int)
    for p in points:
        for r in _reads_of(p, sched):
            remaining[r] += 1
    moved = moves(sched, forest, points)
    folded = folded_into(sched)
    size = {f.id: 0 if f.id in folded or f.id in sched.sinks else
            footprint(f, forest, shapes, sched.loops, itemsize) for f in forms}
    extra = transients(sched, forest, shapes, points, scratch, itemsize)
    live: dict[int, int] = {}
    pending: dict[tuple, list[int]] = defaultdict(list)
    alloc = allocations(sched)
    best, at, snapshot = 0, 0, ()
    made: set[int] = set()
    for k, p in enumerate(points):
        freed: list[int] = []
        if p.kind == "open":
            for o in alloc.get(p.path, ()):
                live[o] = size[o]
                if o in folded and folded[o] not in live:
                    live[folded[o]] = size[folded[o]]
        elif p.kind == "build" and p.entry <= 0 and p.form not in live:
            live[p.form] = size[p.form]
        if k in moved:
            src = forms[p.form].operands[0]
            live.pop(src)
            remaining[src] -= 1
        for r in _reads_of(p, sched):
            if k in moved and r == forms[p.form].operands[0]:
                continue
            if len(p.path) > len(forms[r].scope):
                pending[p.path[: len(forms[r].scope) + 1]].append(r)
            else:
                remaining[r] -= 1
                if remaining[r] == 0:
                    freed.append(r)
        if p.kind == "close":
            for r in pending.pop(p.path, []):
                remaining[r] -= 1
                if remaining[r] == 0:
                    freed.append(r)
        total = sum(live.values()) + extra.get(k, 0)
        if total > best:
            best, at, snapshot = total, k, tuple(sorted(live))
        for r in freed:
            if forms[r].kind is not FormKind.SUM or forms[r].scope:   # a sliced inner sum
                live.pop(r, None)
            made.add(r)
        made.update(live)
    # last, the zeros of every sum whose terms all cancelled (never made above): beside
    # what is still live, which by now is the results
    zeros = {f.id: size[f.id] for f in forms if f.kind is FormKind.SUM and f.id not in made
             and f.id not in live}
    if zeros:
        end = len(points)
        live.update(zeros)
        total = sum(live.values()) + extra.get(end, 0)
        if total > best:
            best, at, snapshot = total, end, tuple(sorted(live))
    return PeakProfile(best, at, snapshot)
