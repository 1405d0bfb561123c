"""well_formed: each rule rejects a schedule that breaks it (and accepts the valid twin)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from sequant_eval.errors import ScheduleError
from sequant_eval.plan import BatchPolicy
from sequant_eval.schedule import BuildStep, OrderedSchedule, Output, OutputKind, ScopeBlock
from sequant_eval.schedule.ordered import well_formed

from .helpers import stamped


@pytest.fixture(scope="module")
def valid() -> OrderedSchedule:
    """Ex. 4's nest: {i:E} > {i:C} > {i:E}, R built innermost, chain scatter → sum → scatter."""
    a = stamped("R{i_1;i_2} = M{i_1;i_3} * N{i_3;i_2}", {"i": 8}, BatchPolicy(block={"i": 4}),
                {0: [("i_1", "E"), ("i_3", "C"), ("i_2", "E")]})
    return a.ordered


def _blocks(s: OrderedSchedule):
    outer = next(b for b in s.root.steps if isinstance(b, ScopeBlock))
    mid = next(b for b in outer.steps if isinstance(b, ScopeBlock))
    inner = next(b for b in mid.steps if isinstance(b, ScopeBlock))
    return outer, mid, inner


def _rebuild(s: OrderedSchedule, outer, mid, inner) -> OrderedSchedule:
    mid = replace(mid, steps=tuple(inner if isinstance(x, ScopeBlock) else x for x in mid.steps))
    outer = replace(outer, steps=tuple(mid if isinstance(x, ScopeBlock) else x
                                       for x in outer.steps))
    root = replace(s.root, steps=tuple(outer if isinstance(x, ScopeBlock) else x
                                       for x in s.root.steps))
    return replace(s, root=root)


def test_valid_schedule_passes(valid):
    well_formed(valid)


def _with_inner_steps(valid, steps):
    outer, mid, inner = _blocks(valid)
    return _rebuild(valid, outer, mid, replace(inner, steps=steps))


def test_out_of_range_form(valid):
    outer, mid, inner = _blocks(valid)
    bad = _with_inner_steps(valid, inner.steps + (BuildStep(999),))
    with pytest.raises(ScheduleError, match="out of range"):
        well_formed(bad)


def test_built_twice(valid):
    outer, mid, inner = _blocks(valid)
    bad = _with_inner_steps(valid, inner.steps + (inner.steps[-1],))
    with pytest.raises(ScheduleError, match="built twice"):
        well_formed(bad)


def test_built_outside_its_nest(valid):
    outer, mid, inner = _blocks(valid)
    step = inner.steps[-1]
    bad = _rebuild(valid, outer, replace(mid, steps=(step,) + mid.steps),
                   replace(inner, steps=inner.steps[:-1]))
    with pytest.raises(ScheduleError, match="lives in the nest"):
        well_formed(bad)


def test_read_before_produced(valid):
    outer, mid, inner = _blocks(valid)
    bad = _with_inner_steps(valid, tuple(reversed(inner.steps)))
    with pytest.raises(ScheduleError, match="before it is produced"):
        well_formed(bad)


def test_never_produced(valid):
    outer, mid, inner = _blocks(valid)
    root = replace(valid.root, steps=tuple(s for s in valid.root.steps
                                           if not isinstance(s, BuildStep) or s.entry < 0))
    with pytest.raises(ScheduleError, match="never produced"):
        well_formed(replace(valid, root=root))


def test_duplicate_sibling_blocks(valid):
    outer, mid, inner = _blocks(valid)
    bad = _rebuild(valid, outer, replace(mid, steps=mid.steps + (inner,)), inner)
    with pytest.raises(ScheduleError, match="sibling blocks"):
        well_formed(bad)


def test_loop_nested_in_itself(valid):
    outer, mid, inner = _blocks(valid)
    bad = _rebuild(valid, outer, mid, replace(inner, loop=outer.loop))
    with pytest.raises(ScheduleError, match="nested inside itself"):
        well_formed(bad)


def test_output_on_the_wrong_loop(valid):
    outer, mid, inner = _blocks(valid)
    bad = _rebuild(valid, outer, replace(mid, outputs=inner.outputs),
                   replace(inner, outputs=mid.outputs))
    with pytest.raises(ScheduleError, match="assembles loop"):
        well_formed(bad)


def test_output_that_is_not_assembled(valid):
    outer, mid, inner = _blocks(valid)
    built = inner.steps[-1].form
    bad = _rebuild(valid, outer, mid,
                   replace(inner, outputs=(Output(built, OutputKind.ACCUMULATE_SUM),)))
    with pytest.raises(ScheduleError, match="not an assembled form"):
        well_formed(bad)


def test_assembled_form_as_build_step(valid):
    outer, mid, inner = _blocks(valid)
    bad = _with_inner_steps(valid, inner.steps + (BuildStep(inner.outputs[0].form),))
    with pytest.raises(ScheduleError, match="assembled by a block output"):
        well_formed(bad)


def test_output_whose_batches_are_not_built_inside(valid):
    outer, mid, inner = _blocks(valid)
    bad = _with_inner_steps(valid, inner.steps[:-1])
    with pytest.raises(ScheduleError, match="never built inside"):
        well_formed(bad)


def test_broken_escape_chain(valid):
    """The outermost link forwards the innermost one directly, skipping the sum over k:
    the chain's sites no longer lie on consecutive depths of one path."""
    outer, mid, inner = _blocks(valid)
    rich = valid.rich
    top = outer.outputs[0].form
    skip = replace(rich.forms[top], source=inner.outputs[0].form)
    forms = tuple(skip if f.id == top else f for f in rich.forms)
    with pytest.raises(ScheduleError, match="escape chain"):
        well_formed(replace(valid, rich=replace(rich, forms=forms)))
