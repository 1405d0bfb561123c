"""Result layouts and kernel scratch of the schedule's contractions.

Two decisions about contractions that the peak prediction depends on, so they are made
here rather than where the graph is built:

- a contraction read only by equation sums is written in the mode order most of those
  entries read it in (its adds are then contiguous), when the kernel model says that costs
  no more than its own order; else, where its own order leaves those adds no contiguous
  inner run, in the order a GEMM writes directly that lines up the most trailing axes
  with them, when that costs no more than what the adds save (``PERMUTED_ADD_US``) and
  its kernel little more scratch (a sixteenth of the result: operands much smaller than
  the result, as in the (T) energy's, may be transposed for it);
- every contraction's kernel plan (``plan/kernels.py``) may allocate temporaries beside its
  result (a transposing copy of an operand, a temporary result); their element count, at
  full block extent, is charged at the contraction's build point.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from ..forest.values import Forest
from ..plan.kernels import PERMUTED_ADD_US, ContractPlan, plan_contraction
from .forms import Form, FormKind, form_shape
from .ordered import OrderedSchedule

__all__ = ["sum_layouts", "kernel_plans", "kernel_scratch", "scratch_of", "form_kernel"]


def _integral(*shapes) -> bool:
    return all(float(x).is_integer() for s in shapes for x in s)


def form_kernel(form: Form, sched: OrderedSchedule, forest: Forest, shapes,
                layout: tuple[int, ...] | None = None) -> ContractPlan | None:
    """The kernel plan of a contraction form at full block extent (None: composite sizes)."""
    forms, values = sched.forms, forest.values
    v = values[form.value]
    own = form_shape(form, shapes, sched.loops)
    a = form_shape(forms[form.operands[0]], shapes, sched.loops)
    b = form_shape(forms[form.operands[1]], shapes, sched.loops)
    if not _integral(own, a, b):
        return None
    own, a, b = (tuple(int(x) for x in s) for s in (own, a, b))
    if layout is not None:
        v = replace(v, result=tuple(v.result[p] for p in layout))
        own = tuple(own[p] for p in layout)
    return plan_contraction(v, values[v.left.value], values[v.right.value], own, a, b)


def sum_layouts(sched: OrderedSchedule, forest: Forest, shapes,
                moved: set[tuple[int, int]]) -> dict[int, tuple[int, ...]]:
    """Contraction form → the mode order it is written in, where not its own.

    Only unbatched contractions read by sum entries alone qualify; one whose buffer a sum
    takes over (``moved``: (sum form, entry)) keeps its own order."""
    forms, rich = sched.forms, sched.rich
    out = {}
    for f in forms:
        if f.kind is not FormKind.CONTRACT or f.scope:
            continue
        readers = rich.readers.get(f.id, ())
        if not readers or any(forms[r].kind is not FormKind.SUM or (r, leg) in moved
                              for r, leg in readers):
            continue
        perms = [forest.values[forms[r].value].entries[leg].perm for r, leg in readers]
        best = max(perms, key=lambda p: (perms.count(p), -perms.index(p)))
        if best == tuple(range(len(best))):
            continue
        base = form_kernel(f, sched, forest, shapes)
        there = form_kernel(f, sched, forest, shapes, best)
        if base is None or there is None:
            continue
        if there.cost_us <= base.cost_us:
            out[f.id] = best
            continue
        near = _nearest_gemm_order(forest.values[f.value], best)
        if near is not None and _run(tuple(range(len(best))), best) == 0:
            plan = form_kernel(f, sched, forest, shapes, near)
            size = prod(form_shape(f, shapes, sched.loops))
            if (plan is not None
                    and plan.cost_us <= base.cost_us + PERMUTED_ADD_US * size * len(readers)
                    and plan.scratch_elements <= base.scratch_elements + size // 16):
                out[f.id] = near
    return out


def _run(layout: tuple[int, ...], perm: tuple[int, ...]) -> int:
    """How many trailing axes of a sum reading a contraction written in ``layout``
    through ``perm`` (its entry's permutation of the contraction's own modes) line up:
    the length of the contiguous inner run of that add."""
    read = [layout.index(p) for p in perm]
    n, run = len(read), 0
    while run < n and read[n - 1 - run] == n - 1 - run:
        run += 1
    return run


def _nearest_gemm_order(v, perm: tuple[int, ...]) -> tuple[int, ...] | None:
    """The order a GEMM can write without moving its result (one operand's free modes,
    then the other's) closest to ``perm``: each operand's modes in the order ``perm`` reads
    them, the two groups in the order that lines up more trailing axes (an add of a
    permuted addend runs at a fraction of a contiguous one's rate, and faster the longer
    its contiguous inner run). None where neither lines up any."""
    left = set(v.left.modes)
    mine = [ax for ax in perm if v.result[ax] in left]
    theirs = [ax for ax in perm if v.result[ax] not in left]
    if not mine or not theirs:
        return None
    options = [tuple(mine + theirs), tuple(theirs + mine)]
    best = max(options, key=lambda o: (_run(o, perm), -options.index(o)))
    return best if _run(best, perm) else None


def kernel_plans(sched: OrderedSchedule, forest: Forest, shapes,
                 layouts: dict[int, tuple[int, ...]]) -> dict[int, ContractPlan]:
    """Contraction form → its kernel plan at full block extent, in the layout it is written
    in (none where the sizes are composite). The runtime starts from these (a schedule
    read back from the cache then plans no kernel again)."""
    out = {}
    for f in sched.forms:
        if f.kind is FormKind.CONTRACT:
            plan = form_kernel(f, sched, forest, shapes, layouts.get(f.id))
            if plan is not None:
                out[f.id] = plan
    return out


def kernel_scratch(sched: OrderedSchedule, forest: Forest, shapes,
                   layouts: dict[int, tuple[int, ...]]) -> dict[int, int]:
    """Contraction form → elements its kernel allocates beside the result (nonzero only)."""
    return scratch_of(kernel_plans(sched, forest, shapes, layouts))


def scratch_of(plans: dict[int, ContractPlan]) -> dict[int, int]:
    """``kernel_scratch`` from the kernel plans."""
    return {f: p.scratch_elements for f, p in plans.items() if p.scratch_elements}
