"""The packaged closed-shell CCSD equations (chem/data/ccsd_cs.txt) and how they are made.

Oracles: the spin trace of the packaged spin-orbital file (fast), a fresh sympy derivation
(slow), and a *different* spin-orbital text of the same equations — terms shuffled, dummies
renamed, factors reordered, antisymmetric slots swapped with a sign, mirror terms folded
with P operators or spelled out — whose spin trace must give the same file and the same
residuals at random tensors.
"""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem import derive
from sequant_eval.chem.equations import (ccsd_equations, closed_shell_equations,
                                         closed_shell_folded_equations, closed_shell_text)
from sequant_eval.chem.rccsd import EXCHANGE_FOLDS
from sequant_eval.cli import main
from sequant_eval.expr.exchange import fold_exchange
from sequant_eval.expr.spintrace import spin_trace

from tests.expr.test_spintrace import O, V, _blocks, _spatial_tensors


def test_packaged_file_is_the_spin_trace_of_the_spin_orbital_file():
    assert derive.closed_shell_text() == closed_shell_text()
    assert [len(e.terms) for e in closed_shell_equations()] == [5, 26, 97]


def _rename(t: se.Tensor, m: dict) -> se.Tensor:
    return se.Tensor(t.name, tuple(m.get(x, x) for x in t.bra), tuple(m.get(x, x) for x in t.ket))


def _respelled(eq: se.Equation, rng: random.Random, mirrors: str) -> se.Equation:
    """The same spin-orbital equation, written differently term by term; the mirror terms
    of R2 (antisymmetric in a_1, a_2 as a whole, so R2 = 1/2 P(a_1 a_2) R2) are folded with
    ``P`` (``mirrors="P"``), with ``P(a_1 a_2) P(i_1 i_2)`` (``"PP"``) or spelled out."""
    ix = se.Index
    dummies = {ix("i", 3): ix("i", 4), ix("i", 4): ix("i", 3),
               ix("a", 3): ix("a", 4), ix("a", 4): ix("a", 3)}
    mirror = {ix("a", 1): ix("a", 2), ix("a", 2): ix("a", 1)}
    out = []
    for term in eq.terms:
        c, factors = term.coefficient, list(term.factors)
        if rng.random() < 0.5:
            factors = [_rename(t, dummies) for t in factors]
        rng.shuffle(factors)
        for k, t in enumerate(factors):
            if len(t.bra) == 2 and rng.random() < 0.5:      # <pq||rs> = -<qp||rs>
                factors[k] = se.Tensor(t.name, t.bra[::-1], t.ket)
                c = -c
        if eq.name != "R2":
            out.append(se.Product(c, tuple(factors)))
            continue
        if mirrors == "P":
            out.append(se.Product(c / 2, tuple(factors),
                                  (se.Operator("P", (ix("a", 1), ix("a", 2))),)))
        elif mirrors == "PP":
            ops = (se.Operator("P", (ix("a", 1), ix("a", 2))),
                   se.Operator("P", (ix("i", 1), ix("i", 2))))
            out.append(se.Product(c / 4, tuple(factors), ops))
        else:              # 1/2 X - 1/2 X(a_1 <-> a_2)
            out.append(se.Product(c / 2, tuple(factors)))
            out.append(se.Product(-c / 2, tuple(_rename(t, mirror) for t in factors)))
    rng.shuffle(out)
    return se.Equation(eq.name, tuple(out), eq.result, eq.bare)


@pytest.mark.parametrize("seed, mirrors", [(1, "P"), (2, "PP"), (3, "spelled")])
def test_a_differently_written_spin_orbital_text_traces_to_the_same_equations(seed, mirrors):
    rng = random.Random(seed)
    text = se.to_text([_respelled(eq, rng, mirrors) for eq in ccsd_equations()])
    assert text != se.to_text(ccsd_equations())
    assert ("P{a_1,a_2}" in text) == (mirrors != "spelled")
    other = spin_trace(se.parse(text))
    assert se.to_text(other) == se.to_text(closed_shell_equations())
    f, g, t1, t2 = _spatial_tensors(seed)
    tensors = {"f": _blocks(f, O), "g": _blocks(g, O), "t1": {("a", "i"): t1},
               "t2": {("a", "a", "i", "i"): t2}}
    ext = {"i": O, "a": V}
    got = se.evaluate(other, tensors, ext)
    ref = se.evaluate(closed_shell_equations(), tensors, ext)
    for name in ("E", "R1", "R2"):
        assert np.allclose(got[name], ref[name], rtol=1e-12, atol=1e-12 * np.abs(ref[name]).max())


def test_the_packaged_fold_is_the_fold_of_the_closed_shell_file():
    """``ccsd_cs_folded.txt`` (what RCCSD reads) is ``fold_exchange`` of ``ccsd_cs.txt``,
    as text byte for byte and as parsed equations."""
    assert derive.FOLDED_PATH.read_text(encoding="utf-8") == derive.folded_text()
    assert closed_shell_folded_equations() == fold_exchange(closed_shell_equations(),
                                                            EXCHANGE_FOLDS)


def test_regenerate_writes_both_files(tmp_path, monkeypatch):
    so = derive.DATA_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "derive_ccsd_text", lambda: so)
    assert derive.regenerate(tmp_path / "ccsd_so.txt") == so
    assert (tmp_path / "ccsd_cs.txt").read_text(encoding="utf-8") == closed_shell_text()
    assert (tmp_path / "ccsd_cs_folded.txt").read_text(encoding="utf-8") == \
        derive.FOLDED_PATH.read_text(encoding="utf-8")


def test_regen_check_compares_both_files(monkeypatch, capsys):
    so = derive.DATA_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "derive_ccsd_text", lambda: so)
    triples = derive.CCSDT_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "derive_ccsdt_text", lambda: triples)   # its own test is slow
    assert main(["regen-equations", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    closed = derive.CLOSED_SHELL_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "closed_shell_text", lambda text=None: closed + "# stale\n")
    assert main(["regen-equations", "--check"]) == 1
    out = capsys.readouterr().out
    assert "ccsd_cs.txt differs" in out and "ccsd_cs_folded.txt" not in out
    monkeypatch.setattr(derive, "closed_shell_text", lambda text=None: closed)
    monkeypatch.setattr(derive, "folded_text", lambda text=None: "stale\n")
    assert main(["regen-equations", "--check"]) == 1
    assert "ccsd_cs_folded.txt differs" in capsys.readouterr().out


@pytest.mark.slow
def test_fresh_derivation_reproduces_both_files():
    """Re-derives with sympy (~100 s)."""
    text = derive.derive_ccsd_text()
    assert text == derive.DATA_PATH.read_text(encoding="utf-8")
    assert derive.closed_shell_text(text) == closed_shell_text()


def test_coefficients_are_small_integers():
    """Closed-shell CCSD has integer coefficients (1, 2, 4), no fractions left."""
    coeffs = {abs(t.coefficient) for e in closed_shell_equations() for t in e.terms}
    assert coeffs <= {Fraction(1), Fraction(2), Fraction(4)}
