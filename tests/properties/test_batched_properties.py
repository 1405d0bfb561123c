"""Random forests × random budgets, executed: the batched run equals the unbatched one.

Oracles: the unbatched walk of the same forest (values, to 1e-12 relative), the static
sweep (the dry-run meter and the NumPy accounted peak must equal it to the byte), and the
cell-table validator (no violation).

Budgets are drawn between the forest-level minimum (``InfeasibleBudget.minimum`` of
``fit_forest`` at a 1-byte budget) and 90 % of the way up to the loop-free peak that
``fit_forest`` itself would reach (the unbatched plan with input blocks fetched per term,
``share_leaves=False``, which is at or below ``se.analyze``'s unbatched peak), so every
example is feasible and asserted on. Forests whose minimum is not below that peak have
nothing to batch (about 1 in 6 generated forests) and are rejected with ``assume``. Of the
examples that run, 199 of 200 ran batched in one probe and 98 to 100 of 100 in three more
(the fitted schedule has at least one loop).
``MIN_BATCHED`` = 80 % is checked at the end of each property run: below it the test fails
rather than pass vacuously.

A budget between the named minimum and the unbatched peak must fit: ``fit_forest`` once
refused budgets there (``test_a_budget_above_the_named_minimum_fits`` keeps the case that
showed it). Setting ``FIT_IS_MONOTONE`` to False would tolerate such a refusal (only if it
names a minimum above the refused budget, then checking the evaluation at that minimum).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import sequant_eval as se
from sequant_eval.plan import BatchPolicy
from sequant_eval.runtime import TensorSource
from sequant_eval.runtime.cells import validate
from sequant_eval.schedule import analyze_schedule

from tests.oracles.direct import direct_evaluate

from .forests import equation_sets

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.filter_too_much])


def _tensors(forest, extents, seed: int):
    """Random blocks, one fixed array per (tensor, spaces)."""
    rng = np.random.default_rng(seed)
    blocks = {}
    for v in forest.values:
        if v.tensor is not None and (v.tensor, v.spaces) not in blocks:
            blocks[(v.tensor, v.spaces)] = rng.standard_normal(
                tuple(extents[s] for s in v.spaces))
    names = {t for t, _ in blocks}
    return {n: {sp: arr for (t, sp), arr in blocks.items() if t == n} for n in names}


#: The smallest fraction of examples that must run batched (see the module docstring).
MIN_BATCHED = 0.8
#: fit_forest is monotone in the budget (see the module docstring).
FIT_IS_MONOTONE = True


def _policy(extents: dict, block: int, budget: float) -> BatchPolicy:
    return BatchPolicy.everything(budget, extents, block={s: block for s in extents},
                                  max_loops=2, program=False)   # forests of a few hundred B


def forest_minimum(text: str, extents: dict, block: int) -> float:
    """The smallest budget the forest-level fit can meet (fit_forest's bisection)."""
    try:
        se.Evaluator(text, extents, policy=_policy(extents, block, 1)).batched
    except se.InfeasibleBudget as err:
        return err.minimum
    return 1.0


def loop_free_peak(text: str, extents: dict) -> int:
    """The peak of the unbatched plan as fit_forest schedules it (blocks fetched per term)."""
    ev = se.Evaluator(text, extents)
    return analyze_schedule(ev.forest, replace(ev.plan(), share_leaves=False)).peak_bytes


def _run(text: str, extents: dict, position: float, block: int, seed: int) -> bool:
    """Run one example, asserting on it; True when the fitted schedule has a loop."""
    top = loop_free_peak(text, extents)
    low = forest_minimum(text, extents, block)
    assume(low < top)                       # else there is nothing to batch
    budget = low + position * (top - low)
    policy = _policy(extents, block, budget)
    ev = se.Evaluator(text, extents, policy=policy)
    try:
        program = ev.batched    # at or above the named minimum: must fit
    except se.InfeasibleBudget as err:
        assert err.minimum > budget, "a refusal must name a minimum above the refused budget"
        if FIT_IS_MONOTONE:
            raise
        event("refused above the minimum (known fit_forest bug)")
        policy = _policy(extents, block, err.minimum)
        ev = se.Evaluator(text, extents, policy=policy)
        program = ev.batched
    a = program.analysis
    assert not validate(program.table, a.ordered, a.forest)
    tensors = _tensors(ev.forest, extents, seed)
    given = {(n, sp): x.copy() for n, blocks in tensors.items() for sp, x in blocks.items()}
    source = TensorSource(ev.forest, tensors, extents)
    reference = direct_evaluate(ev.forest, source)
    out, meter = program.run("numpy", source)
    for (n, sp), x in given.items():  # batches are read as views of the caller's arrays
        assert np.array_equal(tensors[n][sp], x), f"input {n}{sp} was written to"
    _, dry = program.run("dryrun")
    assert meter.peak_bytes == dry.peak_bytes == a.peak_bytes
    assert meter.flops == dry.flops == a.flops
    assert a.peak_bytes <= policy.budget_bytes
    assert set(out) == set(reference)
    for name, ref in reference.items():
        scale = max(1.0, float(np.abs(ref).max()))
        assert np.abs(np.asarray(out[name]) - ref).max() <= 1e-12 * scale, name
    return bool(a.rich.loops)


def _property(max_examples: int, cases, blocks):
    """Run the property; return (examples, batched examples) of this run."""
    seen = {"examples": 0, "batched": 0}

    @settings(max_examples=max_examples, **SETTINGS)
    @given(cases, st.floats(0.0, 0.9), blocks, st.integers(0, 2**16))
    def check(case, position, block, seed):
        text, extents = case
        batched = _run(text, extents, position, block, seed)
        seen["examples"] += 1
        seen["batched"] += batched
        event("batched" if batched else "fits without a loop")

    check()
    return seen["examples"], seen["batched"]


def _assert_mostly_batched(examples: int, batched: int) -> None:
    assert examples > 0
    assert batched >= MIN_BATCHED * examples, (
        f"only {batched} of {examples} examples ran batched (< {MIN_BATCHED:.0%}): the "
        f"property no longer exercises batching; widen the budgets or the forests")


def test_batched_equals_unbatched():
    _assert_mostly_batched(*_property(80, equation_sets(max_terms=6, max_factors=5),
                                      st.integers(1, 4)))


@pytest.mark.slow
def test_batched_equals_unbatched_long():
    _assert_mostly_batched(*_property(1500, equation_sets(), st.integers(1, 5)))


KNOWN_NON_MONOTONE = (
    "R0{i_1,x_2} = Tii{i_1,i_11} * Txii{x_2,i_11,i_12} * Tii{i_12,i_13} * Ti{i_14} * "
    "Tii{i_13,i_14} + Tiii{i_1,i_15,i_16} * Txii{x_2,i_15,i_16} + Tixi{i_1,x_2,i_17} * "
    "Tii{i_17,i_18} * Ti{i_19} * Tiii{i_18,i_19,i_20} * Ti{i_20} + Txii{x_2,i_21,i_24} * "
    "Tii{i_22,i_24} * Tiii{i_1,i_22,i_23} * Tii{i_21,i_23} + Tii{i_1,i_11} * "
    "Txii{x_2,i_11,i_12} * Tii{i_12,i_13} * Ti{i_14} * Tii{i_13,i_14}\n"
    "R1{i_1,x_2} = Txi{x_2,i_28} * Ti{i_29} * Tiix{i_1,i_30,x_32} * Tiia{i_28,i_29,a_31} * "
    "Tiax{i_30,a_31,x_32}", {"i": 2, "a": 2, "x": 4})


def test_a_budget_above_the_named_minimum_fits():
    """Found by the property above (budgets 417..445 B were refused while 385 B fitted).
    Oracle: a plan that fits at the named minimum fits every larger budget too, so every
    budget from the minimum up to the loop-free peak must be accepted, within it."""
    text, extents = KNOWN_NON_MONOTONE
    low, top = forest_minimum(text, extents, 2), loop_free_peak(text, extents)
    assert low < top
    for budget in range(int(low), top + 1, 8):
        a = se.Evaluator(text, extents, policy=_policy(extents, 2, budget)).batched.analysis
        assert a.peak_bytes <= budget
