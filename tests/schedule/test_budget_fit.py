"""The forest-level fitter: monotone feasibility, a minimum that does not depend on the
budget asked for, instant refusal of hopeless budgets, and ``se.min_budget``.

Oracle: the fitter's own claim checked against the static sweep of the schedule it
returns (peak <= budget) at every budget of a grid, and against itself across budgets.
"""
from __future__ import annotations

import time

import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations

WATER = {"i": 10, "a": 38}       # H2O/cc-pVDZ spin orbitals


@pytest.fixture(scope="module")
def minimum():
    return se.min_budget(ccsd_equations(), WATER)


def test_hopeless_budget_is_refused_at_once():
    start = time.perf_counter()
    with pytest.raises(se.InfeasibleBudget) as info:
        se.analyze(ccsd_equations(), WATER, budget=1e4)
    assert time.perf_counter() - start < 2.0
    assert "equation results" in str(info.value)


def test_named_minimum_is_feasible_and_independent_of_the_budget(minimum):
    top = se.analyze(ccsd_equations(), WATER).peak_bytes
    assert 0 < minimum < 0.5 * top
    named = []
    for asked in (1e4, 0.5 * minimum, 0.9 * minimum):
        with pytest.raises(se.InfeasibleBudget) as info:
            se.analyze(ccsd_equations(), WATER, budget=asked)
        named.append(info.value.minimum)
    assert named == [minimum] * 3
    rep = se.analyze(ccsd_equations(), WATER, budget=minimum)
    assert rep.peak_bytes <= minimum


def test_feasibility_is_monotone_on_a_grid(minimum):
    """Every budget from the minimum up fits, and its schedule's peak is within it."""
    top = se.analyze(ccsd_equations(), WATER).peak_bytes
    grid = [minimum * (1 + 0.07 * k) for k in range(12)] + [0.25 * top, 0.5 * top, top]
    for budget in grid:
        rep = se.analyze(ccsd_equations(), WATER, budget=budget)
        assert rep.peak_bytes <= budget


def test_budget_shares_are_of_the_unbatched_peak():
    top = se.analyze(ccsd_equations(), WATER).peak_bytes
    half = se.analyze(ccsd_equations(), WATER, budget="50%")
    assert half.peak_bytes <= 0.5 * top
    assert se.Evaluator(ccsd_equations(), WATER, budget="50%").policy.budget_bytes == 0.5 * top
