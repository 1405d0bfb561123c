"""Loop fusion's fast paths against the plain rules they replace.

Oracles: the greedy fusion written out with the full rule check (``fusable.violates``
over every form for every candidate) and the canonical ids rebuilt from scratch after every
kept fusion (``boulevard._canonical_ids``): the fast fusion (incremental canonical ids,
``fusable.Checker`` looking only at what a fusion changes) must keep exactly the same fusions;
and the bisecting sequencability fallback (``_fuse_checked``) must keep what checking every
fusion keeps.
"""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_text, closed_shell_text
from sequant_eval.expr import parse
from sequant_eval.forest import build_forest
from sequant_eval.plan import BatchPlan, BatchPolicy
from sequant_eval.plan.planner import TermPlanner
from sequant_eval.schedule import boulevard, fusable
from sequant_eval.schedule.analysis import term_peak
from sequant_eval.schedule.forms import build_forms


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.filter_too_much])


def _reference_fuse(forms, loops, accept, start=None, alone=frozenset()):
    """The greedy fusion as it was: canonical ids rebuilt after every kept fusion, the
    full rule check per candidate."""
    uf = start.copy() if start is not None else fusable.UnionFind(l.id for l in loops)
    seen = defaultdict(list)
    canon = None
    for form in forms:
        if not (form.scope or form.span):
            continue
        for other in seen[boulevard._shape(form)]:
            if other.term == form.term or other.term in alone or form.term in alone:
                continue
            if canon is None:
                canon = boulevard._canonical_ids(forms, uf)
            if [canon[o] for o in other.operands] != [canon[o] for o in form.operands]:
                continue
            if other.source >= 0 and canon[other.source] != canon[form.source]:
                continue
            pairs = list(zip(form.scope, other.scope)) + [
                (x, y) for (_, x), (_, y) in zip(form.sliced, other.sliced)]
            pairs += list(zip(form.partial, other.partial)) + list(zip(form.span, other.span))
            trial = uf.copy()
            bad = False
            for x, y in pairs:
                lx, ly = loops[x], loops[y]
                if (lx.kind, lx.space, lx.block) != (ly.kind, ly.space, ly.block):
                    bad = True
                    break
                trial.union(x, y)
            if bad or all(uf.find(x) == uf.find(y) for x, y in pairs):
                continue
            if fusable.violates(forms, loops, trial):
                continue
            if accept(trial):
                uf, canon = trial, None
                break
        seen[boulevard._shape(form)].append(form)
    return uf


def _classes(uf, loops):
    return [uf.find(l.id) for l in loops]


@lru_cache(maxsize=None)
def _plan(name, share, block):
    text = TEXTS[name]()
    extents = {"i": 4, "a": 6}
    forest = build_forest(parse(text), extents)
    top = se.analyze(text, extents).peak_bytes
    policy = BatchPolicy.everything(max(1.0, share * top), extents,
                                    block={s: block for s in extents}, max_loops=2)
    plan = TermPlanner(forest, extents, policy,
                       term_peak(forest, BatchPlan(policy, extents, (), ()))).plan()
    forms, _ = build_forms(forest, plan)
    return forms, plan.loops


TEXTS = {"so": ccsd_text, "cs": closed_shell_text}
#: (text, share of the unbatched peak, block): each opens 30-60 loops in many terms, of
#: which 25-40 are fused (measured when written), so every case exercises the fast paths
CASES = [("so", 0.10, 1), ("so", 0.17, 2), ("cs", 0.27, 1), ("cs", 0.12, 2)]


@pytest.mark.parametrize("case", CASES)
def test_fast_fusion_keeps_what_the_plain_rules_keep(case):
    """The same loop classes as the reference greedy fusion, on CCSD plans with many
    fusions."""
    forms, loops = _plan(*case)
    fast = boulevard._fuse(forms, loops, lambda uf: True)
    slow = _reference_fuse(forms, loops, lambda uf: True)
    assert _classes(fast, loops) == _classes(slow, loops)
    assert sum(fast.find(l.id) != l.id for l in loops) >= 10


@settings(max_examples=3, **SETTINGS)
@given(st.sampled_from(CASES), st.integers(0, 2**16))
def test_bisecting_fallback_keeps_what_checking_each_fusion_keeps(case, seed):
    """``_fuse_checked`` against the greedy fusion that asks ``ok`` after every fusion,
    for an ``ok`` that, once false, stays false as loops are fused further (the case the
    bisection is exact for): "no more than k loops fused away", k 1-2 below the
    number the unchecked fusion keeps (as in the schedules that need the fallback: a few
    fusions refused), so in every example one or two fusions are refused."""
    forms, loops = _plan(*case)
    start = fusable.UnionFind(l.id for l in loops)
    full = len(loops)
    most = full - len({boulevard._fuse(forms, loops, lambda uf: True).find(l.id)
                       for l in loops})
    limit = max(0, most - 1 - seed % 2)

    def ok(uf):
        return full - len({uf.find(l.id) for l in loops}) <= limit

    def blame(uf):
        """None where ``ok``, else the loops a refusal would name: those of the largest
        class (the fusions that joined it are tried as pivots first)."""
        if ok(uf):
            return None
        classes = defaultdict(list)
        for l in loops:
            classes[uf.find(l.id)].append(l.id)
        return tuple(max(classes.values(), key=lambda c: (len(c), c)))

    fast = boulevard._fuse_checked(forms, loops, blame, start, frozenset())
    slow = _reference_fuse(forms, loops, ok, start)
    assert _classes(fast, loops) == _classes(slow, loops)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300), st.data())
def test_pivoted_bisection_finds_the_first_failing_count_in_few_checks(n, data):
    """``_first_failing`` against the answer it must give for a monotone ``ok`` (true
    below the count ``bad``, false from it on: the least failing count is ``bad``), with
    suspects drawn at random. In about half the examples the fusion to blame (``bad - 1``)
    is the latest suspect, as the sequencer's refusal usually makes it: then two checks
    at most, whatever ``n``; otherwise no more than the pivots' checks plus bisection's."""
    bad = data.draw(st.integers(1, n), label="bad")
    suspects = sorted(set(data.draw(st.lists(st.integers(0, n - 1), max_size=8),
                                    label="suspects")))
    blamed_last = data.draw(st.booleans(), label="blamed last")
    if blamed_last:
        suspects = [k for k in suspects if k < bad - 1] + [bad - 1]
    asked = []

    def ok(m):
        assert 0 < m < n, "ok(0) is known true and ok(n) false"
        asked.append(m)
        return m < bad

    assert boulevard._first_failing(n, suspects, ok) == bad
    if blamed_last:
        assert len(asked) <= 2
    assert len(asked) <= 2 * boulevard._PIVOTS + max(1, n).bit_length()


@pytest.mark.slow
def test_the_sequencers_refusal_names_the_loop_of_the_fusion_to_blame():
    """Unrestricted CCSD at OH/STO-3G-like extents, every term planned at its least peak:
    the fusions the rules allow cannot be sequenced as they stand (a reader would fall into
    a later pass of a loop than a per-batch form it reads), so the fuser bisects for the
    fusion to blame. Oracle: plain bisection over the kept fusions (no suspects). The
    fusions that joined the loop the sequencer's refusal names must hold it: found in two
    checks, the same one."""
    from importlib.resources import files
    from sequant_eval.schedule import budget

    text = (files("sequant_eval.chem") / "data" / "ccsd_u.txt").read_text(encoding="utf-8")
    extents = {"i": 5, "a": 1, "I": 4, "A": 2}
    forest = build_forest(parse(text), extents)
    fit = budget._fitting(forest, extents, BatchPolicy.everything(None, extents))
    planner = fit.planner(BatchPolicy.everything(1, extents))
    plan = fit.prepare(planner.plan({v: planner.menu(v).min_peak for v in forest.trees}))
    forms, terms = build_forms(forest, plan)
    start, kept = boulevard._tied(plan), []
    fused = boulevard._fuse(forms, plan.loops, lambda uf: True, start, frozenset(), kept=kept)

    def sequenced(uf):
        return boulevard._sequenced(boulevard._finish(forest, forms, terms, plan.loops, uf))

    ordered, named = sequenced(fused)
    assert ordered is None and named
    asked = []

    def ok(n):
        asked.append(n)
        return sequenced(boulevard._replayed(forms, start, kept[:n]))[0] is not None

    plain = boulevard._first_failing(len(kept), [], ok)
    assert len(asked) >= 5
    asked.clear()
    suspects = boulevard._suspects(forms, kept, fused, named)
    assert plain - 1 in suspects and len(suspects) < len(kept) / 10
    assert boulevard._first_failing(len(kept), suspects, ok) == plain and len(asked) <= 2
