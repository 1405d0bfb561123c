"""Common-factor extraction (sequant_eval.expr.factor): by hand on small equations, and
numerically on closed-shell CCSD. Oracles: the hand-written factored text; the unfactored
equations evaluated on the same random tensors (the factored ones staged, through
sequant_eval.api.staged); for the flop count, PySCF's RCCSD, whose ring part is four o³v³
contractions of t2 with its intermediates (rccsd.update_amps)."""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import closed_shell_equations
from sequant_eval.expr.exchange import fold_exchange
from sequant_eval.chem.pyscf_ccsd import CLOSED_SHELL_SYMMETRIES
from sequant_eval.expr.factor import factor_common
from sequant_eval.forest.values import ValueKind
from sequant_eval.api.staged import StagedEvaluator as _Staged


def StagedEvaluator(*args, **kw):
    """The staged evaluator with the package's per-stage Evaluator (as se.Evaluator
    builds it for equations read in stages)."""
    return _Staged(*args, stage=se.Evaluator, **kw)

from tests.expr.test_spintrace import O, V, _blocks, _spatial_tensors

FOLDS = {"t2": "u2", "g": "L"}


def test_terms_ending_in_one_factor_become_one_contraction():
    """X·t + Y·t − 2 Z·t = (X + Y − 2 Z)·t: one W of three terms, one contraction."""
    eqs = se.parse("R{a_1;i_1} = X{a_1;a_2} * t{a_2;i_1} + Y{a_1;a_2} * t{a_2;i_1}"
                   " - 2 Z{a_1;a_2} * t{a_2;i_1}")
    out = factor_common(eqs, {"i": 5, "a": 2})
    assert se.to_text(out).strip() == (
        "W1{a_1,a_2;} = X{a_1;a_2} + Y{a_1;a_2} - 2 Z{a_1;a_2}\n"
        "R{a_1;i_1} = W1{a_1,a_2;} * t{a_2;i_1}")
    assert tuple(se.parse(se.to_text(out))) == out      # the text reads back


def test_factors_read_differently_are_not_merged():
    """X{a_1;a_2}·t{a_2;i_1} and Y{a_2;a_1}·t{a_2;i_1} read t alike, but the second term's
    W is Y transposed: still one group. t{a_2;i_1} against t{a_1;i_2}-like readings (an
    external index on another slot) are different groups: nothing to merge."""
    eqs = se.parse("R{a_1;i_1} = X{a_1;a_2} * t{a_2;i_1} + Y{a_2;a_1} * t{a_2;i_1}")
    out = factor_common(eqs, {"i": 5, "a": 2})
    assert se.to_text(out).strip().splitlines()[0] == "W1{a_1,a_2;} = X{a_1;a_2} + Y{a_2;a_1}"
    eqs = se.parse("R{a_1,a_2;i_1,i_2} = X{a_1,i_1;i_3,a_3} * t{a_2,a_3;i_2,i_3}"
                   " + Y{a_1,i_2;i_3,a_3} * t{a_2,a_3;i_1,i_3}")
    assert factor_common(eqs, {"i": 2, "a": 3}) == tuple(eqs)


def test_no_intermediate_larger_than_the_result():
    """W{i_1,a_1,a_2} (o·v²) would be held between stages: bigger than R (o²), refused
    although it would save a contraction."""
    eqs = se.parse("R{i_1;i_2} = X{i_1;a_1,a_2} * Y{a_1,a_2;i_2}"
                   " + Z{i_1;a_1,a_2} * Y{a_1,a_2;i_2}")
    assert factor_common(eqs, {"i": 2, "a": 6}) == tuple(eqs)
    assert len(factor_common(eqs, {"i": 6, "a": 2})) == 2        # o·v² ≤ o² here


def _ccsd_inputs():
    f, g, t1, t2 = _spatial_tensors(5)
    L = 2 * g - g.transpose(0, 1, 3, 2)
    u2 = 2 * t2 - t2.transpose(0, 1, 3, 2)
    return {"f": _blocks(f, O), "g": _blocks(g, O), "L": _blocks(L, O),
            "t1": {("a", "i"): t1}, "t2": {("a", "a", "i", "i"): t2},
            "u2": {("a", "a", "i", "i"): u2}}


def _check_equal(got, want):
    for name in ("E", "R1", "R2"):
        ref = np.asarray(want[name])
        assert np.abs(np.asarray(got[name]) - ref).max() <= 1e-12 * np.abs(ref).max(), name


@pytest.mark.parametrize("extents", [{"i": O, "a": V}, {"i": 15, "a": 57}])
def test_factored_ccsd_equals_the_plain_equations(extents):
    """Whatever the extents make profitable (they decide the merges), the factored
    equations give the plain equations' numbers (random tensors with the symmetries of
    real orbitals and a mirror-symmetric t2)."""
    plain = fold_exchange(closed_shell_equations(), FOLDS)
    factored = factor_common(plain, extents, **CLOSED_SHELL_SYMMETRIES)
    assert len(factored) > len(plain)
    ext = {"i": O, "a": V}
    tensors = _ccsd_inputs()
    _check_equal(StagedEvaluator(factored, ext).evaluate(tensors), se.evaluate(plain, tensors, ext))


def test_term_order_does_not_change_the_numbers():
    """The packaged equations with every term list reversed: other groups may be found
    first, the residuals are the same."""
    plain = fold_exchange(closed_shell_equations(), FOLDS)
    flipped = tuple(type(e)(e.name, e.terms[::-1], e.result, e.bare) for e in plain)
    ext = {"i": 15, "a": 57}
    a = factor_common(plain, ext, **CLOSED_SHELL_SYMMETRIES)
    b = factor_common(flipped, ext, **CLOSED_SHELL_SYMMETRIES)
    assert factor_common(plain, ext, **CLOSED_SHELL_SYMMETRIES) == a        # deterministic
    small = {"i": O, "a": V}
    tensors = _ccsd_inputs()
    _check_equal(StagedEvaluator(b, small).evaluate(tensors),
                 StagedEvaluator(a, small).evaluate(tensors))


def _o3v3_contractions(equations, ext) -> int:
    """Distinct contractions over all stages whose loop space is o³v³."""
    stages = StagedEvaluator(equations, ext).stage_equations
    count = 0
    for stage in stages:
        forest = se.Evaluator(stage, ext).forest
        for v in forest.values:
            if v.kind is ValueKind.CONTRACT:
                modes = {}
                for op in (v.left, v.right):
                    modes.update(zip(op.modes, forest.values[op.value].spaces))
                spaces = sorted(modes.values())
                count += spaces == ["a"] * 3 + ["i"] * 3
    return count


def test_ring_terms_merge_to_rccsd_count():
    """At (H2O)3/cc-pVDZ extents the plain equations make 15 distinct o³v³ contractions;
    PySCF's RCCSD makes 8 (3 building Wvoov, 1 Wvovo, 4 contracting them with t2). The
    factored equations make no more than RCCSD."""
    ext = {"i": 15, "a": 57}
    plain = fold_exchange(closed_shell_equations(), FOLDS)
    assert _o3v3_contractions(plain, ext) == 15
    assert _o3v3_contractions(factor_common(plain, ext, **CLOSED_SHELL_SYMMETRIES), ext) <= 8


def test_cofactors_that_cancel_leave_nothing():
    """g·t − g~·t with g~ = g by particle symmetry (its columns swapped): the group's W
    would be zero; both terms go and nothing is made. Without the symmetry declared the
    two spellings are different tensors and nothing cancels."""
    eqs = se.parse("R{a_1,a_2;i_1,i_2} = g{a_1,i_3;i_1,a_3} * t{a_2,a_3;i_2,i_3}"
                   " - g{i_3,a_1;a_3,i_1} * t{a_2,a_3;i_2,i_3} + g{a_1,a_2;i_1,i_2}")
    out = factor_common(eqs, {"i": 4, "a": 2}, symmetric=("g", "t"))
    assert se.to_text(out).strip() == "R{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2}"
    kept = factor_common(eqs, {"i": 4, "a": 2})
    assert len(kept) == 2 and len(kept[0].terms) == 2       # W = g − g~, taken as written


def test_a_space_without_extent_is_a_typed_error():
    eqs = se.parse("R{a_1;i_1} = X{a_1;m_1} * t{m_1;i_1}")
    with pytest.raises(se.errors.UnknownSpace, match="m_1 of X .*'m'"):
        factor_common(eqs, {"i": 2, "a": 3})


@pytest.mark.parametrize("o, v", [(4, 8), (10, 38), (15, 57)])
def test_the_beam_search_is_never_worse_than_greedy(o, v):
    """The search keeps the cheapest plans; at these extents it finds fewer (or equal)
    flops than merging the largest saving first."""
    plain = fold_exchange(closed_shell_equations(), FOLDS)
    ext = {"i": o, "a": v}

    def flops(beam):
        eqs = factor_common(plain, ext, beam=beam, **CLOSED_SHELL_SYMMETRIES)
        return StagedEvaluator(eqs, ext).analyze().flops

    assert flops(8) <= flops(1)


@pytest.mark.parametrize("given, error", [
    ([1, 2], se.errors.InputTypeError), (None, se.errors.InputTypeError),
    ("R{a_1;i_1} = X{a_1;i_1", se.errors.ParseError)])
def test_bad_equations_are_typed_errors(given, error):
    with pytest.raises(error):
        factor_common(given, {"i": 2, "a": 3})
    with pytest.raises(se.errors.UnknownSpace, match="positive integer"):
        factor_common("R{a_1;i_1} = X{a_1;i_1}", {"i": 0, "a": 3})
