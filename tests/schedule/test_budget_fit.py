"""The forest-level fitter: monotone feasibility, a minimum that does not depend on the
budget asked for, instant refusal of hopeless budgets, and ``se.min_budget``.

Oracle: the fitter's own claim checked against the static sweep of the schedule it
returns (peak <= budget) at every budget of a grid, and against itself across budgets.
"""
from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations, ccsd_text
from sequant_eval.forest import build_forest
from sequant_eval.plan import BatchPolicy
from sequant_eval.schedule import budget as fitter
from sequant_eval.schedule.budget import _CAPS, _ROUNDS, _STALL, _Verdict, _attempt, _capped

WATER = {"i": 10, "a": 38}       # H2O/cc-pVDZ spin orbitals


@pytest.fixture(scope="module")
def minimum():
    return se.min_budget(ccsd_equations(), WATER)


def test_hopeless_budget_is_refused_at_once(monkeypatch):
    """Oracle: structural, not a stopwatch. Below what the results alone hold, the refusal
    must come before any fitting attempt or minimum search: each is replaced by a function
    that fails the test if called, and the minimum is still unsearched when it arrives."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a hopeless budget started a fit or a minimum search")

    for name in ("_attempt", "_between", "minimum_budget"):
        monkeypatch.setattr(fitter, name, forbidden)
    with pytest.raises(se.InfeasibleBudget) as info:
        se.analyze(ccsd_equations(), WATER, budget=1e4)
    assert "equation results" in str(info.value)
    assert not info.value.searched


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


def test_the_fitter_remembers_the_latest_forests_not_every_one():
    """A process that fits forest after forest holds the fitter's memory (term menus,
    verdicts, analyses) of the latest few only: the first forest is freed once
    ``_REMEMBERED`` others have been fitted after it. (The memory was meant to be dropped
    with its forest, but it held the forest itself, so every forest ever fitted stayed
    alive: about 4 MiB more per CCSD fit.) Oracle: a weak reference to the forest."""
    extents = {"i": 4, "a": 6}

    def fit_one() -> weakref.ref:
        forest = build_forest(ccsd_equations(), extents)
        top = fitter.fit_forest(forest, extents, BatchPolicy()).peak_bytes
        fitter.fit_forest(forest, extents, BatchPolicy.everything(0.5 * top, extents))
        return weakref.ref(forest)

    first = fit_one()
    gc.collect()
    assert first() is not None                  # remembered while it is among the latest
    later = [fit_one() for _ in range(fitter._REMEMBERED)]
    gc.collect()
    assert first() is None
    assert later[-1]() is not None
    assert len(fitter._FITTINGS) <= fitter._REMEMBERED


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
    ev = se.Evaluator(ccsd_equations(), WATER, budget="50%")      # the program on top
    assert ev.policy.budget_bytes == 0.5 * top + ev.program_bytes > 0.5 * top


def test_a_fit_the_minimum_search_found_reports_the_budget_asked():
    """At a quarter of the unbatched peak (spin-orbital CCSD at i10a4) the direct fit
    misses and the minimum search finds a schedule within the budget; the report names
    the budget asked (arrays' share plus the program's reserve), not the budget of the
    search probe that found it (it named 1 B, so the peak read as over budget)."""
    ext = {"i": 10, "a": 4}
    top = se.analyze(ccsd_equations(), ext).peak_bytes
    reserve = se.Evaluator(ccsd_equations(), ext, budget=top).program_bytes
    asked = int(0.25 * top) + reserve
    report = se.analyze(ccsd_equations(), ext, budget=asked)
    assert report.schedule.plan.policy.budget_bytes + report.program_bytes == asked
    assert report.total_bytes <= asked
    assert f"({asked} B)" in report.memory().to_text().splitlines()[1]


def test_remembered_planning_gives_what_planning_afresh_gives():
    """The fitter remembers term menus and verdicts per forest; a forest that has already
    been fitted at other budgets (and had its minimum searched) must fit every budget
    exactly as a fresh forest does. Oracle: the dump of the fresh forest's schedule."""
    from sequant_eval.expr import parse
    from sequant_eval.forest import build_forest
    from sequant_eval.schedule.budget import fit_forest, minimum_budget
    from sequant_eval.schedule.dump import dump_analysis

    extents = {"i": 6, "a": 10}
    text = ccsd_text()
    warm = build_forest(parse(text), extents)
    top = fit_forest(warm, extents, BatchPolicy()).peak_bytes
    need = minimum_budget(warm, extents, BatchPolicy.everything(None, extents))[0]
    for budget in (top, 0.5 * top, 0.25 * top, 0.1 * top, need, 1.3 * need, 0.9 * need):
        policy = BatchPolicy.everything(budget, extents)
        got = []
        for forest in (warm, build_forest(parse(text), extents)):
            try:
                got.append(dump_analysis(fit_forest(forest, extents, policy)))
            except se.InfeasibleBudget as err:
                got.append(("refused", err.minimum))
        assert got[0] == got[1], f"budget {budget}"


ANTISYM = """R2{a_1,a_2;i_1,i_2} = A{a_1,a_2;i_1,i_2} * g{a_1,i_3;i_1,a_3} * t2{a_3,a_2;i_3,i_2}
  + A{a_1,a_2;i_1,i_2} * f{a_1;a_3} * t2{a_3,a_2;i_1,i_2}
  - 1/2 A{a_1,a_2;i_1,i_2} * g{i_3,i_4;a_3,a_4} * t2{a_1,a_3;i_1,i_3} * t2{a_2,a_4;i_4,i_2}
E = 1/4 g{i_1,i_2;a_1,a_2} * t2{a_1,a_2;i_1,i_2}"""


@pytest.mark.parametrize("sinks", [(), (("R2", "accumulate"),)])
def test_unsliced_floor_bounds_the_fitting_that_holds_inner_sums_whole(sinks):
    """The minimum search skips the fitting that holds the antisymmetrized inner sum whole
    when slicing beats ``unsliced_floor``; that is sound only if no such plan goes below the
    floor. Checked against that fitting's own minimum, searched in full, with and without
    a sink for the result; and the answer equals the smaller of both minima."""
    from sequant_eval.forest import build_forest
    from sequant_eval.plan import BatchPolicy
    from sequant_eval.plan.slicing import sliceable_sums

    extents = {"i": 6, "a": 10}
    forest = build_forest(tuple(se.parse(ANTISYM)), extents)
    policy = BatchPolicy.everything(None, extents, sinks=sinks)
    assert sliceable_sums(forest, policy)
    plain = fitter._minimum(fitter._fitting(forest, extents, policy), policy)[0]
    sliced = fitter._minimum(fitter._fitting(forest, extents, policy, sliced=True), policy)[0]
    floor = fitter.unsliced_floor(forest, extents, policy)
    assert plain >= floor > fitter.lower_bound(forest, extents, policy)
    assert fitter.minimum_budget(forest, extents, policy)[0] == min(plain, sliced)


class _Script:
    """A stand-in fitting whose re-planning rounds return the peaks of ``peaks`` in turn
    (the binding term always term 0, holding all but 5 B of it); every plan's terms alone
    peak at ``alone`` (term → bytes); ``asked`` records each round's term budgets."""

    def __init__(self, peaks, alone=None):
        self.peaks, self.rounds = list(peaks), 0
        self.alone = alone or {0: 0, 1: 0}
        self.forest = SimpleNamespace(trees=dict.fromkeys(self.alone))
        self.asked = []

    def planner(self, policy, progress=None):
        menu = SimpleNamespace(known_min_peak=lambda: 0)
        terms = tuple(SimpleNamespace(value=v, peak_bytes=p) for v, p in self.alone.items())

        def plan(budgets):
            self.asked.append(dict(budgets))
            return SimpleNamespace(terms=terms)
        return SimpleNamespace(plan=plan, menu=lambda term: menu)

    def prepare(self, plan):
        return plan

    def verdict(self, plan):
        self.rounds += 1
        peak = self.peaks[self.rounds - 1]
        return _Verdict(peak, 0, peak - 5)

    def analyze(self, plan):
        return "fitted"


@pytest.mark.parametrize("falling", [False, True])
def test_an_attempt_gives_up_once_its_rounds_stop_finding_a_lower_peak(falling):
    """Hand-worked: under a budget of 50 B, rounds whose peaks never go below the first
    (100, then 120, 110, 120 …) end after the first round and ``_STALL`` more; rounds that
    find a lower peak each time (100, 98, 96 …) go on past that and fit at 50."""
    peaks = list(range(100, 49, -2)) if falling else [100] + [120, 110] * _ROUNDS
    fit = _Script(peaks)
    got, best = _attempt(fit, BatchPolicy(budget=50))
    if falling:
        assert got == "fitted" and fit.rounds == 26 > _STALL + 1
    else:
        assert got is None and best == 100 and fit.rounds == _STALL + 1


def test_a_round_that_finds_no_lower_peak_replans_every_term_above_its_target():
    """Hand-worked, budget 50 B, the binding term (0) holding all but 5 B of the peak:
    round 1 (peak 100) gives term 0 the target 50 - 5 = 45 alone; round 2 reaches the
    same peak again, so its target (44: below the last) goes to every term whose plan
    alone peaks above it (term 1 at 60 B, not term 2 at 30 B); round 3 fits."""
    fit = _Script([100, 100, 40], alone={0: 90, 1: 60, 2: 30})
    got, best = _attempt(fit, BatchPolicy(budget=50))
    assert got == "fitted" and best == 40
    assert fit.asked == [{0: 50, 1: 50, 2: 50}, {0: 45, 1: 50, 2: 50},
                         {0: 44, 1: 44, 2: 50}]


def test_a_budget_above_the_minimum_is_met_with_a_cap_not_with_the_minimums_schedule():
    """Spin-orbital CCSD at H2O/cc-pVDZ extents, 9 % of the unbatched peak: the direct
    attempt fails (what the other terms hold at the binding point exceeds the budget), and
    the least-peak schedule, the minimum's (177 loops), fits. The fit is the capped
    schedule: within the budget, at most half the minimum's loops, no more flops (measured
    69 loops, 0.99x the flops; at 10 %, with loop blocks ordered by memory, the direct
    attempt fits). Oracle: the minimum search's own schedule."""
    from sequant_eval.expr import parse
    from sequant_eval.forest import build_forest

    forest = build_forest(parse(ccsd_text()), WATER)
    top = fitter.fit_forest(forest, WATER, BatchPolicy()).peak_bytes
    policy = BatchPolicy.everything(0.09 * top, WATER)
    assert _attempt(fitter._fitting(forest, WATER, policy), policy)[0] is None
    got = fitter.fit_forest(forest, WATER, policy)
    need, least = fitter.minimum_budget(forest, WATER, BatchPolicy.everything(None, WATER))
    assert need <= got.peak_bytes <= 0.09 * top
    assert 2 * len(got.plan.loops) <= len(least.plan.loops)
    assert got.flops <= least.flops


class _Caps:
    """A stand-in fitting for the capped search: terms alone peak at ``alone`` unbatched
    and at ``least`` at their least; a plan's forest peak is a 30 B background plus every
    term's planned bytes (its budget, or its unbatched peak when that is smaller)."""

    alone = {0: 80, 1: 40, 2: 10}
    least = {0: 20, 1: 12, 2: 10}

    def __init__(self, background=30, unordered=()):
        self.background = background
        self.unordered = set(unordered)     # caps whose fusions would need retrying
        self.forest = SimpleNamespace(trees=dict.fromkeys(self.alone))
        self.asked = []

    def planner(self, policy, progress=None):
        def menu(v):
            return SimpleNamespace(default=(SimpleNamespace(peak_bytes=self.alone[v]),),
                                   min_peak=self.least[v])

        def plan(budgets):
            self.asked.append(dict(budgets))
            return dict(budgets)
        return SimpleNamespace(plan=plan, menu=menu)

    def prepare(self, plan):
        return plan

    def verdict(self, plan):
        peak = self.background + sum(min(b, self.alone[v]) for v, b in plan.items())
        return _Verdict(peak, 0, 0)

    def greedy_verdict(self, plan):
        return None if round(plan[0], 2) in self.unordered else self.verdict(plan)

    def analyze(self, plan):
        return plan


@pytest.mark.parametrize("bisect", [1, 2])
def test_the_capped_search_halves_then_bisects_to_the_largest_cap_that_fits(bisect,
                                                                          monkeypatch):
    """Hand-worked, budget 100 B: cap 50 peaks at 30 + 50 + 40 + 10 = 130 (over); cap 25
    at 30 + 25 + 25 + 10 = 90 (fits); a bisection tries 100/2^1.5 = 35.4 (30 + 35.4
    + 35.4 + 10 = 110.7, over), a second 100/2^1.75 = 29.7 (99.5, fits). The last cap
    that fitted is returned. A term whose unbatched peak is within the cap gets the cap
    (term 2 throughout)."""
    monkeypatch.setattr(fitter, "_BISECT", bisect)
    fit = _Caps()
    got = _capped(fit, BatchPolicy(budget=100))
    caps = [round(b[0], 2) for b in fit.asked]
    assert caps == [50, 25, 35.36, 29.73][:2 + bisect]
    assert got == {0: 25, 1: 25, 2: 25} if bisect == 1 else got == fit.asked[-1]
    assert fit.verdict(got).peak <= 100
    assert all(b[2] == b[0] for b in fit.asked)


def test_the_capped_search_holds_a_term_at_its_least_and_gives_up_after_the_halvings():
    """Hand-worked, a 95 B background under a budget of 100 B: no cap fits. The caps are
    50, 25, 12.5, 6.25 (``_CAPS`` = 4 halvings), and once a cap is below a term's least
    peak that term is planned at its least (term 0 at 20 B, term 1 at 12 B)."""
    fit = _Caps(background=95)
    assert _capped(fit, BatchPolicy(budget=100)) is None
    assert [b[0] for b in fit.asked] == [50, 25, 20, 20] and len(fit.asked) == _CAPS
    assert [b[1] for b in fit.asked] == [50, 25, 12.5, 12]


def test_the_capped_search_passes_by_a_cap_whose_fusions_need_retrying():
    """Hand-worked as above, but the plan at cap 25 is one whose fusions greedy fusion
    cannot sequence (``greedy_verdict`` None: retrying them one by one can cost seconds):
    it counts as not fitting, so the search halves on to 12.5 (30 + 20 + 12.5 + 10 = 72.5,
    fits; term 0 held at its least, 20) and bisects towards 25: 100/2^2.5 = 17.7 (30 +
    20 + 17.7 + 10 = 77.7, fits), which is returned."""
    fit = _Caps(unordered={25})
    got = _capped(fit, BatchPolicy(budget=100))
    assert [round(b[1], 2) for b in fit.asked] == [50, 25, 12.5, 17.68]
    assert got == fit.asked[-1]


def test_a_near_miss_takes_the_first_cap_without_the_least_peak_schedule(monkeypatch):
    """Hand-worked, budget 100 B and no background: cap 50 peaks at 50 + 40 + 10 = 100
    (fits), the bisection's 100/2^0.5 = 70.7 at 70.7 + 40 + 10 = 120.7 (over), so the cap-50
    plan is taken and the least-peak schedule is never made. With a 30 B background cap 50
    is over (130): the usual path follows, which starts from the least-peak schedule (none
    here, so nothing fits between the attempt and the minimum search)."""
    made = []
    monkeypatch.setattr(fitter, "_least", lambda fit: made.append(1))
    fit = _Caps(background=0)
    assert fitter._between(fit, BatchPolicy(budget=100), near=True) == {0: 50, 1: 50, 2: 50}
    assert [round(b[0], 1) for b in fit.asked] == [50, 70.7] and not made
    fit = _Caps(background=30)
    assert fitter._between(fit, BatchPolicy(budget=100), near=True) is None and made == [1]
    assert [b[0] for b in fit.asked] == [50]


def test_greedy_analysis_is_the_analysis_or_none_where_fusions_need_retrying(monkeypatch):
    """``analyze_greedy`` gives what ``analyze_schedule`` gives (the same dump) where every
    fusion the rules allow can be sequenced, and None, without retrying the fusions one by
    one, where they cannot (made so here: the first sequencing refused), while
    ``analyze_schedule`` then retries and still schedules the plan."""
    from sequant_eval.expr import parse
    from sequant_eval.forest import build_forest
    from sequant_eval.schedule import analysis, boulevard
    from sequant_eval.schedule.dump import dump_analysis

    ext = {"i": 4, "a": 6}
    forest = build_forest(parse(ccsd_text()), ext)
    top = fitter.fit_forest(forest, ext, BatchPolicy()).peak_bytes
    plan = fitter.fit_forest(forest, ext, BatchPolicy.everything(0.3 * top, ext)).plan
    assert plan.loops
    assert dump_analysis(analysis.analyze_greedy(forest, plan)) == dump_analysis(
        analysis.analyze_schedule(forest, plan))
    sequenced, calls = boulevard._sequenced, []

    def first_refused(rich):
        calls.append(1)
        return (None, ()) if len(calls) == 1 else sequenced(rich)
    monkeypatch.setattr(boulevard, "_sequenced", first_refused)
    assert analysis.analyze_greedy(forest, plan) is None and len(calls) == 1
    calls.clear()
    assert analysis.analyze_schedule(forest, plan).peak_bytes > 0 and len(calls) > 1


def test_equations_whose_terms_all_cancel_fit_any_budget_over_the_reserve():
    """``R = f - f``, ``E = 0``: no step is scheduled. Under a budget the fitter looked up
    the step at the binding point and raised IndexError, and the prediction was 0 B while
    the run held the result (a hostile-input probe, 2026-12-07). Oracles: zeros of the
    result's shape, as unbatched; the meter equal to the prediction, the result's bytes."""
    extents = {"i": 4, "a": 7}
    f = np.arange(28.0).reshape(7, 4)
    for text, shape in (("R{a_1;i_1} = f{a_1;i_1} - f{a_1;i_1}", (7, 4)),
                        ("R{a_1;i_1} = 0 f{a_1;i_1}", (7, 4)), ("E = 0", ())):
        need = se.min_budget(text, extents)
        got = se.evaluate(text, {"f": f}, extents, budget=need)
        (name, value), = got.items()
        assert np.shape(value) == shape and not np.any(value), text
        ev = se.Evaluator(text, extents)
        ev.evaluate({"f": f})
        assert ev.last_meter.peak_bytes == ev.analyze().peak_bytes == value.nbytes, text


def test_a_cancelled_result_is_made_after_every_step():
    """A result whose terms all cancel is made (zeros) after every other step, where only
    the results live: ``R = f - f`` beside ``Q = U`` was charged at the last step, beside
    ``U``'s block (672 B predicted, 448 B metered). Oracles: the meter, the replay of
    the schedule (``peak_profile_replay``), and the results' bytes (2 x 7 x 4 x 8)."""
    from sequant_eval.schedule.peak import peak_profile_replay

    text = "R{a_1;i_1} = f{a_1;i_1} - f{a_1;i_1}\nQ{a_1;i_1} = U{a_1;i_1}"
    extents = {"i": 4, "a": 7}
    tensors = {"f": np.ones((7, 4)), "U": np.ones((7, 4))}
    for budget in (None, se.min_budget(text, extents)):
        ev = se.Evaluator(text, extents, budget=budget)
        ev.evaluate(tensors)
        a = ev.batched.analysis
        replay = peak_profile_replay(a.ordered, a.forest, a.shapes, scratch=a.scratch)
        assert ev.last_meter.peak_bytes == a.peak_bytes == replay.peak_bytes == 448


@pytest.mark.parametrize("refused", [False, True])
def test_the_fitter_pauses_the_collector_and_leaves_no_reference_cycles(refused):
    """The fitter runs with the cyclic garbage collector paused (it walks the whole heap
    every time a long fit has grown it by a quarter) and restores its state, also when it
    refuses. That is safe only while planning leaves no reference cycles behind, so the
    collector's own count of unreachable objects after a fit must be 0 (it was 78,183 on
    unrestricted CCSD at 10 % while recursive closures held the schedule's forms), and
    after the fitter forgets the forest (its menus once held their planner). A fit at
    half the unbatched peak, and a refusal at 1.2× the lower bound (the results whole;
    the minimum is 1.9× it here), which runs every phase: an attempt, the least-peak
    schedule, the capped search and the minimum search. Oracle: ``gc.collect()``'s count
    and ``gc.isenabled()`` seen from inside the fit."""
    from sequant_eval.chem.equations import unrestricted_equations

    extents = {"i": 3, "a": 5, "I": 2, "A": 4}
    forest = build_forest(unrestricted_equations(), extents)
    floor = fitter.lower_bound(forest, extents, BatchPolicy.everything(None, extents))
    if refused:
        budget = 1.2 * floor
    else:
        budget = 0.5 * fitter.fit_forest(build_forest(unrestricted_equations(), extents),
                                         extents, BatchPolicy()).peak_bytes
    inside = []
    real = fitter._attempt

    def attempt(*args, **kwargs):
        inside.append(gc.isenabled())
        return real(*args, **kwargs)

    gc.collect()
    gc.disable()
    try:
        fitter._attempt = attempt
        try:
            fitter.fit_forest(forest, extents, BatchPolicy.everything(budget, extents))
            assert not refused
        except se.InfeasibleBudget:
            assert refused
        assert gc.collect() == 0
    finally:
        fitter._attempt = real
        gc.enable()
    assert inside and not any(inside)
    with pytest.raises(se.InfeasibleBudget):            # restored after a refusal
        fitter.fit_forest(forest, extents, BatchPolicy.everything(0.5 * floor, extents))
    assert gc.isenabled()
    gc.disable()
    try:
        fitter.minimum_budget(forest, extents, BatchPolicy.everything(None, extents))
        assert not gc.isenabled()                 # a paused collector stays paused
    finally:
        gc.enable()
    gc.collect()
    gc.disable()
    try:                      # a fitting forgotten (term menus, DPs, analyses) is freed too
        for key in [k for k, got in fitter._FITTINGS.items() if got.origin is forest]:
            del fitter._FITTINGS[key]
        assert gc.collect() == 0
    finally:
        gc.enable()
