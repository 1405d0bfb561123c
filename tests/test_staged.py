"""Stage-by-stage evaluation (sequant_eval.api.staged): equations that read other equations'
results. Oracles: np.einsum written here; the plain (unfactored) closed-shell CCSD
equations evaluated in one program; tracemalloc for what the process allocates."""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import closed_shell_equations
from sequant_eval.errors import ExpressionError, InfeasibleBudget
from sequant_eval.expr.exchange import fold_exchange
from sequant_eval.chem.pyscf_ccsd import CLOSED_SHELL_SYMMETRIES
from sequant_eval.expr.factor import factor_common
from sequant_eval.api.staged import equation_stages, StagedEvaluator as _Staged


def StagedEvaluator(*args, **kw):
    """The staged evaluator with the package's per-stage Evaluator (as se.Evaluator
    builds it for equations read in stages)."""
    return _Staged(*args, stage=se.Evaluator, **kw)

from tests.runtime.test_real_memory import _traced  # second evaluation, tracemalloc peak

O, V = 5, 20
EXT = {"i": O, "a": V}


def test_stages_follow_what_each_equation_reads():
    eqs = se.parse("R{a_1;i_1} = W{a_1;i_2} * t{i_2;i_1}\n"
                   "W{a_1;i_1} = U{a_1;a_2} * t{a_2;i_1} + x{a_1;i_1}\n"
                   "U{a_1;a_2} = f{a_1;a_2}\n"
                   "E = f{a_1;i_1} * x{a_1;i_1}")
    stages = equation_stages(eqs)
    assert [[e.name for e in s] for s in stages] == [["U", "E"], ["W"], ["R"]]


def test_a_cycle_is_refused():
    eqs = se.parse("R{a_1;i_1} = W{a_1;i_1}\nW{a_1;i_1} = R{a_1;i_1}")
    with pytest.raises(ExpressionError, match="cycle .*R -> W -> R"):
        equation_stages(eqs)


def test_two_stages_equal_einsum():
    rng = np.random.default_rng(3)
    x, y, t = rng.standard_normal((V, V)), rng.standard_normal((V, V)), rng.standard_normal((V, O))
    eqs = se.parse("W{a_1;a_2} = X{a_1;a_2} - 2 Y{a_2;a_1}\nR{a_1;i_1} = W{a_1;a_2} * t{a_2;i_1}")
    ev = StagedEvaluator(eqs, EXT)
    out = ev.evaluate({"X": x, "Y": y, "t": t})
    assert set(out) == {"R"}                               # W is an intermediate
    want = np.einsum("ab,bi->ai", x - 2 * y.T, t)
    assert np.abs(out["R"] - want).max() <= 1e-13 * np.abs(want).max()
    with pytest.raises(ExpressionError, match="'W' is given as an input"):
        ev.evaluate({"X": x, "Y": y, "t": t, "W": x})


def test_an_evaluator_in_stages_shares_subproducts_and_prepares_every_stage():
    """``Evaluator(..., share_subproducts=True)`` of equations read in stages hands the
    option to every stage; its program reserve is the stages' together (the staged
    evaluator's), and ``prepare`` lowers every stage's program before any evaluation."""
    rng = np.random.default_rng(4)
    x, y, t = rng.standard_normal((V, V)), rng.standard_normal((V, V)), rng.standard_normal((V, O))
    eqs = se.parse("W{a_1;a_2} = X{a_1;a_2} - 2 Y{a_2;a_1}\nR{a_1;i_1} = W{a_1;a_2} * t{a_2;i_1}")
    ev = se.Evaluator(eqs, EXT, budget=1e6, share_subproducts=True)
    stages = ev._staged.evaluators
    assert len(stages) == 2 and all(st.share_subproducts for st in stages)
    assert ev.program_reserve() == _Staged(eqs, EXT, 1e6, stage=se.Evaluator).program_reserve()
    ev.prepare()
    assert all(st.batched._programs for st in stages)           # lowered, not yet run
    want = np.einsum("ab,bi->ai", x - 2 * y.T, t)
    assert np.abs(ev.evaluate({"X": x, "Y": y, "t": t})["R"] - want).max() <= (
        1e-13 * np.abs(want).max())


def _closed_shell_tensors(seed: int = 7):
    rng = np.random.default_rng(seed)
    n = O + V
    f = rng.standard_normal((n, n))
    f = f + f.T
    chem = rng.standard_normal((n,) * 4)
    for perm in [(1, 0, 2, 3), (0, 1, 3, 2), (2, 3, 0, 1)]:
        chem = chem + chem.transpose(perm)
    g = np.ascontiguousarray(chem.transpose(0, 2, 1, 3))
    L = 2 * g - g.transpose(0, 1, 3, 2)
    t1 = 0.1 * rng.standard_normal((V, O))
    t2 = 0.1 * rng.standard_normal((V, V, O, O))
    t2 = t2 + t2.transpose(1, 0, 3, 2)
    u2 = 2 * t2 - t2.transpose(0, 1, 3, 2)
    return {"f": f, "g": g, "L": L, "t1": {("a", "i"): t1}, "t2": {("a", "a", "i", "i"): t2},
            "u2": {("a", "a", "i", "i"): u2}}


@pytest.fixture(scope="module")
def ccsd():
    plain = fold_exchange(closed_shell_equations(), {"t2": "u2", "g": "L"})
    tensors = _closed_shell_tensors()
    return plain, factor_common(plain, EXT, **CLOSED_SHELL_SYMMETRIES), tensors, se.evaluate(
        plain, tensors, EXT)


@pytest.mark.parametrize("share", [None, 0.75, 0.5])
def test_staged_ccsd_within_budget_equals_plain(ccsd, share):
    """Batched stages equal the plain equations to 1e-12; the meter's peak (a stage plus
    what is held across it) equals the prediction, stays within the budget, and what the
    process allocates (tracemalloc) is within 5 % of it."""
    plain, factored, tensors, want = ccsd
    top = StagedEvaluator(factored, EXT).analyze().peak_bytes
    ev = StagedEvaluator(factored, EXT, budget=None if share is None else f"{share:.0%}")
    budget = ev.budget_bytes
    rep = ev.analyze()
    out, meter, traced = _traced(ev, tensors)
    for name in ("E", "R1", "R2"):
        ref = np.asarray(want[name])
        assert np.abs(np.asarray(out[name]) - ref).max() <= 1e-12 * np.abs(ref).max()
    assert meter.peak_bytes == rep.peak_bytes
    if budget is not None:
        assert rep.peak_bytes <= share * top < budget       # the programs are on top
        assert rep.loops                                    # it did batch
    # the stages' programs (kernel plans made inside the trace when no earlier test made
    # them) are charged to the budget as their reserves, on top of the arrays
    programs = ev._program_bytes() if budget is not None else 0
    assert traced <= 1.05 * rep.peak_bytes + programs
    assert rep.peak_bytes > max(rep.held_bytes) > 0         # the held results are charged


def test_a_share_is_of_the_staged_unbatched_peak(ccsd):
    _, factored, _, _ = ccsd
    top = StagedEvaluator(factored, EXT).analyze().peak_bytes
    staged = StagedEvaluator(factored, EXT, budget="60%")       # the stages' programs on top
    reserve = staged._program_bytes()
    assert reserve > 0
    assert staged.budget_bytes == pytest.approx(0.6 * top + reserve)


def test_a_budget_below_what_is_held_is_refused_naming_the_stage(ccsd):
    _, factored, tensors, _ = ccsd
    ev = StagedEvaluator(factored, EXT)
    held = max(ev.analyze().held_bytes)
    small = StagedEvaluator(factored, EXT, budget=held // 2)
    with pytest.raises(InfeasibleBudget, match=r"stage \d of \d .*held across it") as err:
        small.evaluate(tensors)
    least = err.value.minimum
    assert least > held
    fits = StagedEvaluator(factored, EXT, budget=least)
    assert fits.analyze().peak_bytes <= least


def test_bad_extents_are_typed():
    with pytest.raises(se.errors.UnknownSpace, match="extents must map"):
        StagedEvaluator(se.parse("R{a_1;i_1} = X{a_1;i_1}"), 5)


def test_the_public_api_takes_factored_equations(ccsd):
    """``se.evaluate`` / ``se.analyze`` / ``se.min_budget`` / ``se.Evaluator`` on equations
    that read other equations' results run them in stages: at 50 % the results equal the
    plain equations' to 1e-12, the report lists the stages, and the minimum is the staged
    evaluator's."""
    plain, factored, tensors, want = ccsd
    out = se.evaluate(factored, tensors, EXT, budget="50%")
    assert set(out) == {"E", "R1", "R2"}
    for name in out:
        ref = np.asarray(want[name])
        assert np.abs(np.asarray(out[name]) - ref).max() <= 1e-12 * np.abs(ref).max()
    rep = se.analyze(factored, EXT, budget="50%")
    assert len(rep.stages) > 1 and rep.peak_bytes <= StagedEvaluator(
        factored, EXT, budget="50%").budget_bytes
    assert len(se.analyze(plain, EXT).stages) == 1
    assert se.min_budget(factored, EXT) == StagedEvaluator(factored, EXT).min_budget()
    ev = se.Evaluator(factored, EXT)
    assert len(ev.stages) == len(rep.stages)
    with pytest.raises(se.UnsupportedFeature, match="stages"):
        ev.batched
