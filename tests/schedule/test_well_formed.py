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


def _swap(block: ScopeBlock, old: ScopeBlock, new: ScopeBlock) -> ScopeBlock:
    """``block`` with ``old`` (somewhere below it) replaced by ``new``."""
    if block is old:
        return new
    return replace(block, steps=tuple(_swap(s, old, new) if isinstance(s, ScopeBlock) else s
                                      for s in block.steps))


def test_a_sliced_sum_escapes_only_after_its_last_entry(monkeypatch):
    """A sliced inner sum of three entries (the antisymmetrized doubles at 30 % of the
    unbatched peak) read by its block's output. Reading it needs every entry, not only
    the first (which allocates it): sized so that the memory-weighed order would gain by
    escaping the sum right after its first entry (its entries' operands one byte smaller,
    as a composite size's rounding could make them), the sequencer still escapes it after
    the last, and the values are the unbatched ones (the schedule lowered and run);
    ``well_formed`` rejects the same schedule with the escape moved after the first entry.
    (Found by review: the order only ranks had kept right.)"""
    import numpy as np

    import sequant_eval as se
    from sequant_eval.runtime import TensorSource
    from sequant_eval.runtime.backends import get_backend
    from sequant_eval.runtime.engine import run_graph
    from sequant_eval.runtime.graph import Device
    from sequant_eval.runtime.lower import lower_schedule
    from sequant_eval.schedule import FormKind, analyze_schedule, boulevard
    from sequant_eval.schedule.forms import FormBytes
    from tests.chem.ccsdt_oracles import random_inputs
    from tests.schedule.test_budget_fit import ANTISYM

    ext = {"i": 4, "a": 7}
    top = se.analyze(ANTISYM, ext).peak_bytes
    ev = se.Evaluator(ANTISYM, ext, policy=BatchPolicy.everything(0.3 * top, ext, program=False))
    planned = ev._compiled().analysis
    forest, plan = planned.forest, planned.plan
    (total,) = [f for f in planned.rich.forms if f.kind is FormKind.SUM and f.scope]
    assert len(total.operands) == 3
    addends = {(planned.rich.forms[o].value, planned.rich.forms[o].sliced)
               for o in total.operands}

    class Skewed(FormBytes):
        def __call__(self, form):
            return super().__call__(form) - ((form.value, form.sliced) in addends)

    monkeypatch.setattr(boulevard, "FormBytes", Skewed)
    a = analyze_schedule(forest, plan)
    (home,) = [b for b in a.ordered.root.blocks() if any(
        isinstance(s, BuildStep) and s.form == total.id for s in b.steps)]
    body = list(home.body())
    entries = [k for k, s in enumerate(body) if isinstance(s, BuildStep) and s.form == total.id]
    (escape,) = [k for k, s in enumerate(body) if isinstance(s, Output)
                 and a.rich.forms[s.form].source == total.id]
    assert len(entries) == 3 and escape > entries[-1]

    arrays = random_inputs(ext["i"], ext["a"], seed=3, hermitian=True)
    arrays = {k: arrays[k] for k in ("f", "g", "t2")}
    want = np.asarray(se.evaluate(ANTISYM, arrays, ext)["R2"])
    low = lower_schedule(a)
    out, _ = run_graph(low.graph, low.root_nodes(), forest, {Device.CPU: get_backend("numpy")},
                       TensorSource(forest, arrays, ext), None, None, low.form_of)
    got = np.asarray(out[low.roots["R2"]])
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()

    first = sum(not isinstance(s, Output) for s in body[: entries[0] + 1])   # steps before
    early = replace(home, escapes=(first,))
    with pytest.raises(ScheduleError, match="before the last entry"):
        well_formed(replace(a.ordered, root=_swap(a.ordered.root, home, early)))
