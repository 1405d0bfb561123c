"""Arithmetic of an ordered schedule, counted exactly over all batches."""
from __future__ import annotations

from math import prod

from ..forest.values import Forest
from .forms import FormKind
from .ordered import OrderedSchedule

__all__ = ["schedule_flops", "contraction_flops"]


def contraction_flops(forest: Forest, shapes, vid: int) -> int:
    """2·multiply-adds of a contraction value over its full extents."""
    v = forest.values[vid]
    extent = dict(zip(v.left.modes, shapes[v.left.value])) | dict(
        zip(v.right.modes, shapes[v.right.value]))
    return 2 * prod(extent.values())


def schedule_flops(sched: OrderedSchedule, forest: Forest, shapes) -> int:
    """Contractions (with recompute under loops they do not use), sum entries (2 per
    element; none for a first entry that takes over the term's buffer unscaled) and batch
    sums (1 per element per batch)."""
    from .peak import folded_into, moves, schedule_points

    points = schedule_points(sched)
    folded = folded_into(sched)
    free = {points[k].form for k in moves(sched, forest, points)
            if forest.values[sched.forms[points[k].form].value].entries[0].coefficient == 1}
    loops = sched.loops
    total = -sum(2 * prod(shapes[sched.forms[sched.forms[f].operands[0]].value]) for f in free)
    for f in sched.forms:
        if f.kind is FormKind.CONTRACT:
            used = {l for _, l in f.sliced} | set(f.partial)
            total += contraction_flops(forest, shapes, f.value) * prod(
                loops[l].nbatches for l in f.scope if l not in used)
        elif f.kind is FormKind.SUM:
            total += sum(2 * prod(shapes[sched.forms[o].value]) for o in f.operands
                         if o not in folded or sched.forms[o].kind is FormKind.LEAF)
        elif f.kind is FormKind.ASSEMBLE and (f.id in folded or loops[f.via].kind.value == "C"):
            src = sched.forms[f.source]
            sliced = {l for _, l in src.sliced}
            batches = prod(shapes[src.value]) * prod(
                loops[l].nbatches for l in src.scope if l not in sliced)
            # added straight into the sum: 2 per element per entry, else 1 per batch sum
            total += batches * (2 * len(sched.rich.readers[f.id]) if f.id in folded else 1)
    return total
