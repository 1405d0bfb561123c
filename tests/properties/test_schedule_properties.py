"""Random forests × random budgets: the scheduling core's invariants.

Oracles: peak_profile_replay (an independent replay by read counts) for the sweep; the
unbatched walk's dry-run meter for the infinite budget; the budget itself per term.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sequant_eval as se
from sequant_eval.forest import build_forest
from sequant_eval.plan import (BatchPlan, BatchPolicy, LoopKind, Open, plan_forest,
                               stamp_plan)
from sequant_eval.runtime import TensorSource
from sequant_eval.runtime.backends import get_backend
from sequant_eval.runtime.engine import run_graph
from sequant_eval.runtime.graph import Device
from sequant_eval.runtime.lower import lower_schedule
from sequant_eval.schedule import FormKind, ScopeBlock, analyze_schedule, boulevard
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


def _contracted_on_x(forest, ext: dict, policy: BatchPolicy, share_leaves: bool = True):
    """The schedule of ``forest`` with every term stamped Contracted on ``x_1`` at its root
    (``share_leaves=False``: whole input blocks fetched per term, as the fitter plans)."""
    stamps = {}
    for v, tree in forest.trees.items():
        labels = {str(ix): ix for node in tree.nodes for ix in node.labels}
        stamps[v] = {tree.root: ((Open(labels["x_1"], LoopKind.CONTRACTED),), 0)}
    plan = stamp_plan(forest, ext, policy, stamps)
    return analyze_schedule(forest, replace(plan, share_leaves=share_leaves))


@settings(max_examples=25, **SETTINGS)
@given(st.integers(2, 4), st.integers(2, 4), st.integers(1, 4), st.integers(2, 12),
       st.integers(1, 3), st.integers(0, 2**31))
def test_fused_terms_reading_one_whole_block_fetch_it_once(terms, i, more, x, block, seed):
    """``terms`` terms ``(g·h)·(p_k·q)``, each stamped Contracted on ``x`` at its root and
    whole input blocks fetched per term (as the fitter plans): the shared ``g·h`` fuses
    the terms' loops into one ``{x}`` block in which every term reads ``q`` whole. The
    virtual extent is drawn above the occupied one (``a = i + more``), where the
    binarization makes ``g·h`` (checked over i 2-4, a up to 8, x 2-12, 2-4 terms), and
    every example has at least two terms: every one exercises the shared fetch.
    Oracles: ``np.einsum`` for the values (the schedule lowered and run); the replay for
    the peak; the same schedule with a fetch per term, whose peak is at least this one's
    and at most ``terms - 1`` copies of ``q`` above it."""
    a = i + more
    ext = {"i": i, "a": a, "x": x}
    text = "R{i_1,i_2;i_3,i_4} = " + " + ".join(
        f"g{{a_2;i_1;x_1}} * h{{i_3;a_2}} * p{k}{{a_3;i_2;x_1}} * q{{i_4;a_3}}"
        for k in range(terms))
    forest = build_forest(se.parse(text), ext)
    policy = BatchPolicy(block={"x": block})

    def analysis():
        return _contracted_on_x(forest, ext, policy, share_leaves=False)

    got = analysis()
    qs = [f for f in got.rich.forms if f.kind is FormKind.LEAF
          and forest.values[f.value].tensor == "q"]
    assert len(forest.trees) == terms and len(got.rich.loops) == 1      # one fused block
    assert len(qs) == 1 and sum(qs[0].id in f.operands for f in got.rich.forms) == terms
    assert got.peak_bytes == peak_profile_replay(got.ordered, forest, got.shapes,
                                                 scratch=got.scratch).peak_bytes

    rng = np.random.default_rng(seed)
    arrays = {"g": rng.standard_normal((a, i, x)), "h": rng.standard_normal((i, a)),
              "q": rng.standard_normal((i, a))}
    arrays |= {f"p{k}": rng.standard_normal((a, i, x)) for k in range(terms)}
    low = lower_schedule(got)
    out, _ = run_graph(low.graph, low.root_nodes(), forest, {Device.CPU: get_backend("numpy")},
                       TensorSource(forest, arrays, ext), None, None, low.form_of)
    want = sum(np.einsum("bix,kb,cjx,lc->ijkl", arrays["g"], arrays["h"], arrays[f"p{k}"],
                         arrays["q"]) for k in range(terms))
    result = np.asarray(out[low.roots["R"]])
    assert np.abs(result - want).max() <= 1e-12 * max(1.0, np.abs(want).max())

    original = boulevard._SharedFetches.reads
    boulevard._SharedFetches.reads = lambda self, form, key, ops: ops
    try:
        copies = analysis()
    finally:
        boulevard._SharedFetches.reads = original
    assert 0 <= copies.peak_bytes - got.peak_bytes <= (terms - 1) * i * a * 8


@settings(max_examples=30, **SETTINGS)
@given(st.integers(1, 4), st.integers(2, 4), st.integers(2, 5), st.integers(4, 12),
       st.integers(1, 4), st.integers(0, 2**31))
def test_fused_terms_sharing_a_slice_are_ordered_by_memory(middle, i, a, x, block, seed):
    """``g·p + h_1·p + ... + h_m·p + g·r`` (``middle`` = m terms between the two readers of
    g), each term stamped Contracted on ``x`` at its root: one fused ``{x}`` block in which
    the rank order holds the g slice through the middle terms (g, p, the first h slice and
    a partial live at once). Every example exercises the memory order: the block's order
    differs from the rank order's (asserted), and the peak is exactly one slice
    (i·a·block·8 B) lower (g's readers run last, after p's). Oracles: ``np.einsum`` for
    the values (the schedule lowered and run), the replay for the peak, and the same
    schedule sequenced without form sizes (the rank order)."""
    ext = {"i": i, "a": a, "x": x}
    terms = (["g{i_1;a_1;x_1} * p{a_1;i_2;x_1}"]
             + [f"h{j}{{i_1;a_1;x_1}} * p{{a_1;i_2;x_1}}" for j in range(middle)]
             + ["g{i_1;a_1;x_1} * r{a_1;i_2;x_1}"])
    forest = build_forest(se.parse("R{i_1;i_2} = " + " + ".join(terms)), ext)
    policy = BatchPolicy(block={"x": block})

    lean = _contracted_on_x(forest, ext, policy)
    original = boulevard.FormBytes
    boulevard.FormBytes = lambda forest, plan: None
    try:
        by_rank = _contracted_on_x(forest, ext, policy)
    finally:
        boulevard.FormBytes = original
    assert len(lean.rich.loops) == 1 and lean.ordered.root != by_rank.ordered.root
    for got in (lean, by_rank):
        assert got.peak_bytes == peak_profile_replay(got.ordered, forest, got.shapes,
                                                     scratch=got.scratch).peak_bytes
    assert by_rank.peak_bytes - lean.peak_bytes == i * a * min(block, x) * 8   # one slice

    rng = np.random.default_rng(seed)
    arrays = {name: rng.standard_normal((i, a, x)) for name in
              ["g"] + [f"h{j}" for j in range(middle)]}
    arrays |= {name: rng.standard_normal((a, i, x)) for name in ("p", "r")}
    low = lower_schedule(lean)
    out, _ = run_graph(low.graph, low.root_nodes(), forest, {Device.CPU: get_backend("numpy")},
                       TensorSource(forest, arrays, ext), None, None, low.form_of)
    want = np.einsum("iax,ajx->ij", arrays["g"], arrays["p"] + arrays["r"]) + sum(
        np.einsum("iax,ajx->ij", arrays[f"h{j}"], arrays["p"]) for j in range(middle))
    result = np.asarray(out[low.roots["R"]])
    assert np.abs(result - want).max() <= 1e-12 * max(1.0, np.abs(want).max())
