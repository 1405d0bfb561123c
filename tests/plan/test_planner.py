"""Batch policy and the per-term DP on CCSD: infinite budget, tight budgets, infeasibility."""
from __future__ import annotations

import math

import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.plan import BatchPolicy, parse_bytes

WATER = {"i": 10, "a": 38}          # spin-orbitals of H2O/cc-pVDZ


def test_parse_bytes():
    assert parse_bytes("4GiB") == 4 * 2**30
    assert parse_bytes("25GB") == parse_bytes("25e9") == parse_bytes(25e9) == 25e9
    assert parse_bytes(None) == math.inf and parse_bytes("inf") == math.inf
    for bad in ("lots", "-3", 0, "12 parsecs"):
        with pytest.raises(se.SequantEvalError):
            parse_bytes(bad)


def test_policy_blocks_are_exact_ranges():
    p = BatchPolicy(block={"a": 16})
    assert p.block_of("a", 38) == 16 and p.nbatches("a", 38) == 3
    assert p.block_of("i", 10) == 3 and p.nbatches("i", 10) == 4   # default: 4 batches
    with pytest.raises(se.SequantEvalError, match="block size"):
        BatchPolicy(block={"a": 0})


@pytest.fixture(scope="module")
def unbatched():
    return se.analyze(ccsd_equations(), WATER)


def test_infinite_budget_is_exactly_the_unbatched_plan(unbatched):
    """Oracle: the unbatched walk of the same forest (its dry-run meter)."""
    rep = se.analyze(ccsd_equations(), WATER, policy=BatchPolicy.everything(None, WATER))
    assert rep.loops == ()
    assert rep.flops == unbatched.flops
    assert rep.peak_bytes == unbatched.peak_bytes
    plan = se.Evaluator(ccsd_equations(), WATER, policy=BatchPolicy(budget="inf")).plan()
    assert all(t.flops == t.unbatched_flops for t in plan.terms)
    assert all(not any(t.opens) for t in plan.terms)


@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_ccsd_plans_with_loops_under_a_fraction_of_the_peak(unbatched, fraction):
    budget = unbatched.peak_bytes * fraction
    ev = se.Evaluator(ccsd_equations(), WATER, budget=budget)
    plan = ev.plan()
    assert plan.loops, "a budget below the unbatched peak must open loops"
    assert all(t.peak_bytes <= budget for t in plan.terms)
    rep = ev.analyze()
    assert rep.loops and rep.recompute_overhead >= 1.0


def test_infeasible_budget_names_the_smallest_feasible_one(unbatched):
    with pytest.raises(se.InfeasibleBudget) as info:
        se.analyze(ccsd_equations(), WATER, budget=1e4)
    err = info.value
    assert err.budget == 1e4 and err.minimum > 1e4
    assert "smallest" in str(err) and "equation results" in str(err)
    # the named minimum really is feasible, for the whole forest
    rep = se.analyze(ccsd_equations(), WATER, budget=err.minimum)
    assert rep.peak_bytes <= err.minimum
