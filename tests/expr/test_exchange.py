"""Exchange folding (sequant_eval.expr.exchange): by hand on the closed-shell energy, and
numerically on the whole closed-shell CCSD (oracle: the unfolded equations evaluated with
the same random tensors; L and u2 built here with np.einsum-free array algebra)."""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import closed_shell_equations
from sequant_eval.expr.exchange import fold_exchange
from sequant_eval.expr.spintrace import SpinTraceError

from tests.expr.test_spintrace import O, V, _blocks, _spatial_tensors

FOLDS = {"t2": "u2", "g": "L"}


def test_energy_folds_by_hand():
    """2<ab|ij>T(ab;ij) - <ab|ij>T(ab;ji) = L(ab;ij) T(ab;ij) with L = 2g - g~ ... and
    the same for the t1 t1 pair; 2 f t1 has no partner and stays."""
    energy = closed_shell_equations()[0]
    assert se.to_text(fold_exchange(energy, {"g": "L"})).strip() == (
        "E = L{a_1,a_2;i_1,i_2} * t2{a_1,a_2;i_1,i_2} + 2 f{a_1;i_1} * t1{a_1;i_1} "
        "+ L{a_1,a_2;i_1,i_2} * t1{a_1;i_1} * t1{a_2;i_2}")


def test_folded_ccsd_equals_unfolded():
    f, g, t1, t2 = _spatial_tensors(4)
    L = 2 * g - g.transpose(0, 1, 3, 2)
    u2 = 2 * t2 - t2.transpose(0, 1, 3, 2)
    ext = {"i": O, "a": V}
    base = {"f": _blocks(f, O), "g": _blocks(g, O), "t1": {("a", "i"): t1},
            "t2": {("a", "a", "i", "i"): t2}}
    ref = se.evaluate(closed_shell_equations(), base, ext)
    folded = fold_exchange(closed_shell_equations(), FOLDS)
    assert [len(e.terms) for e in folded] == [3, 16, 75]
    got = se.evaluate(folded, dict(base, L=_blocks(L, O), u2={("a", "a", "i", "i"): u2}), ext)
    for name, want in ref.items():
        assert np.abs(np.asarray(got[name]) - want).max() <= 1e-12 * np.abs(want).max()


def test_a_fold_needs_a_new_name():
    with pytest.raises(SpinTraceError, match="new name"):
        fold_exchange(closed_shell_equations(), {"t2": "t2"})
