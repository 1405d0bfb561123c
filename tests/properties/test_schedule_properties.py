"""Random forests × random budgets: the scheduling core's invariants.

Oracles: peak_profile_replay (an independent replay by read counts) for the sweep; the
unbatched walk's dry-run meter for the infinite budget; the budget itself per term.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sequant_eval as se
from sequant_eval.plan import BatchPlan, BatchPolicy, plan_forest
from sequant_eval.schedule import FormKind, ScopeBlock, analyze_schedule
from sequant_eval.schedule.analysis import term_peak
from sequant_eval.schedule.peak import peak_profile_replay

from .forests import equation_sets

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.filter_too_much])


def _produced_once(a) -> None:
    seen: dict = {}

    def walk(block: ScopeBlock) -> None:
        for s in block.steps:
            if isinstance(s, ScopeBlock):
                walk(s)
                for o in s.outputs:
                    seen[(o.form, -1)] = seen.get((o.form, -1), 0) + 1
            else:
                seen[(s.form, s.entry)] = seen.get((s.form, s.entry), 0) + 1

    walk(a.ordered.root)
    for f in a.rich.forms:
        keys = [(f.id, k) for k in range(len(f.operands))] if f.kind is FormKind.SUM else [
            (f.id, -1)]
        for key in keys:
            assert seen.get(key) == 1, f"f{f.id} produced {seen.get(key, 0)} times"


def _check(text: str, extents: dict, policy: BatchPolicy):
    ev = se.Evaluator(text, extents, policy=policy)
    forest = ev.forest
    try:
        plan = plan_forest(forest, extents, policy,
                           exact=term_peak(forest, BatchPlan(policy, extents, (), ())))
    except se.InfeasibleBudget as err:
        assert err.minimum > policy.budget_bytes
        return None
    for t in plan.terms:
        assert t.peak_bytes <= policy.budget_bytes
    a = analyze_schedule(forest, plan)
    replay = peak_profile_replay(a.ordered, forest, a.shapes, scratch=a.scratch)
    assert a.profile.peak_bytes == replay.peak_bytes
    assert a.profile.binding_point == replay.binding_point
    _produced_once(a)
    return a


def _budget_between(text, extents, block, position, **kw) -> BatchPolicy:
    """A budget ``position`` of the way from the smallest feasible one up to the unbatched
    peak (negative positions are below the smallest feasible budget)."""
    top = se.analyze(text, extents).peak_bytes
    low = top
    try:
        se.Evaluator(text, extents, policy=BatchPolicy.everything(
            1, extents, block={s: block for s in extents}, **kw)).plan()
    except se.InfeasibleBudget as err:
        low = err.minimum
    budget = max(1.0, low + position * (top - low)) if position >= 0 else low * 0.9
    return BatchPolicy.everything(budget, extents, block={s: block for s in extents}, **kw)


@settings(max_examples=200, **SETTINGS)
@given(equation_sets(), st.floats(-0.2, 1.0), st.integers(1, 4))
def test_random_forests_random_budgets(case, position, block):
    text, extents = case
    policy = _budget_between(text, extents, block, position, max_loops=2)
    a = _check(text, extents, policy)
    if position >= 0:
        assert a is not None, "a budget at or above the named minimum must be feasible"


@settings(max_examples=60, **SETTINGS)
@given(equation_sets())
def test_infinite_budget_is_the_unbatched_walk(case):
    """Oracle: tests/oracles/direct.py's walk of the same forest (peak and flops)."""
    from tests.oracles.direct import unbatched_walk

    text, extents = case
    a = _check(text, extents, BatchPolicy.everything(None, extents))
    scratch = {a.rich.forms[f].value: n for f, n in a.scratch.items()}   # kernel model
    peak, flops = unbatched_walk(a.forest, a.shapes, scratch=scratch)
    assert not a.rich.loops
    assert a.flops == flops
    assert a.peak_bytes == peak


@pytest.mark.slow
@settings(max_examples=2000, **SETTINGS)
@given(equation_sets(), st.floats(-0.2, 1.0), st.integers(1, 5))
def test_random_forests_random_budgets_long(case, position, block):
    text, extents = case
    a = _check(text, extents, _budget_between(text, extents, block, position))
    if position >= 0:
        assert a is not None
