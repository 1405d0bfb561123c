"""Spin tracing (sequant_eval.expr.spintrace): hand-checked small terms, and the whole
spin-orbital CCSD checked numerically against the spin-orbital equations evaluated on
spin-orbital tensors built from random spatial ones (the αβ block of the result, built in
this test with np.einsum, is the oracle)."""
from __future__ import annotations

import random

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations, ccsd_text
from sequant_eval.expr.spintrace import SpinTraceError, spin_trace


def _traced(text: str, **kw) -> str:
    return se.to_text(spin_trace(se.parse(text), **kw)).strip()


def test_ccsd_energy_term_gives_coulomb_minus_exchange():
    """1/4 Σ <ij||ab> t_ij^ab = Σ (2<ij|ab> - <ij|ba>) T_ij^ab: the αβ/βα spin blocks give
    the Coulomb part twice, the αα/ββ blocks <ij|ab> - <ij|ba> once each (by hand)."""
    got = _traced("E = 1/4 g{i_3,i_4;a_3,a_4} * t2{a_3,a_4;i_3,i_4}", real=())
    assert got == ("E = 2 g{i_1,i_2;a_1,a_2} * t2{a_1,a_2;i_1,i_2} "
                   "- g{i_1,i_2;a_1,a_2} * t2{a_1,a_2;i_2,i_1}")
    # with real integrals <ij|ab> = <ab|ij>, the canonical spelling is the (a,a;i,i) block
    assert _traced("E = 1/4 g{i_3,i_4;a_3,a_4} * t2{a_3,a_4;i_3,i_4}") == (
        "E = 2 g{a_1,a_2;i_1,i_2} * t2{a_1,a_2;i_1,i_2} "
        "- g{a_1,a_2;i_1,i_2} * t2{a_1,a_2;i_2,i_1}")


def test_closed_spin_loops_count_two_each():
    """Σ_iaσ f_iσ,aσ t_iσ^aσ = 2 Σ f_ia t_i^a; 1/2 <ij||ab> t_i^a t_j^b: the Coulomb part
    closes two spin loops (4 x 1/2), the exchange part one (2 x 1/2, negative) (by hand)."""
    assert _traced("E = f{i_3;a_3} * t1{a_3;i_3}", real=()) == "E = 2 f{i_1;a_1} * t1{a_1;i_1}"
    assert _traced("E = 1/2 g{i_3,i_4;a_3,a_4} * t1{a_3;i_3} * t1{a_4;i_4}", real=()) == (
        "E = 2 g{i_1,i_2;a_1,a_2} * t1{a_1;i_1} * t1{a_2;i_2} "
        "- g{i_1,i_2;a_1,a_2} * t1{a_1;i_2} * t1{a_2;i_1}")


def test_residuals_are_projected_on_the_alpha_beta_block():
    """R2 at (aα, bβ; iα, jβ): <ab||ij> keeps only its Coulomb part; f_ac t_cb^ij at the
    αβ block is f_ac T(c,b;i,j) - 0 (the exchange amplitude has mismatched spins)."""
    assert _traced("R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2}") == (
        "R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2}")
    assert _traced("R2{a_1,a_2;i_1,i_2} = f{a_1;a_3} * t2{a_3,a_2;i_1,i_2}") == (
        "R2{a_1,a_2;i_1,i_2} = f{a_1;a_3} * t2{a_2,a_3;i_2,i_1}")
    # R1{a;i} at (aα; iα): Σ_jσ f_jσ,bσ' t_ij^ab -> 2 f T(a,b;i,j) - f T(a,b;j,i)
    assert _traced("R1{a_1;i_1} = f{i_3;a_3} * t2{a_1,a_3;i_1,i_3}") == (
        "R1{a_1;i_1} = 2 f{a_2;i_2} * t2{a_1,a_2;i_1,i_2} - f{a_2;i_2} * t2{a_1,a_2;i_2,i_1}")


def test_operators_and_spelled_out_mirrors_agree():
    folded = "R2{a_1,a_2;i_1,i_2} = P{a_1,a_2} * f{a_2;a_3} * t2{a_1,a_3;i_1,i_2}"
    spelled = ("R2{a_1,a_2;i_1,i_2} = f{a_2;a_3} * t2{a_1,a_3;i_1,i_2} "
               "- f{a_1;a_3} * t2{a_2,a_3;i_1,i_2}")
    assert _traced(folded) == _traced(spelled)


def test_cancelling_terms_are_dropped_and_an_empty_result_refused():
    """g{a2,a1;i2,i1} = g{a1,a2;i1,i2} for an antisymmetric spin-orbital tensor."""
    text = ("R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2} - g{a_2,a_1;i_2,i_1} "
            "+ f{a_1;a_3} * t2{a_3,a_2;i_1,i_2}")
    assert "g{" not in _traced(text)
    with pytest.raises(SpinTraceError, match="every term vanishes"):
        spin_trace(se.parse("R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2} - g{a_2,a_1;i_2,i_1}"))


@pytest.mark.parametrize("text, culprit", [
    ("R{a_1;i_1} = h{a_1,i_1;i_2} * t1{i_2;}", "not particle-conserving"),
    ("g{a_1,a_2;i_1,i_2}", "bare expression"),
    ("R{a_1;i_1} = B{a_1;i_1;Κ_1} * B{;;Κ_1}", "not particle-conserving"),
])
def test_refusals_name_the_culprit(text, culprit):
    with pytest.raises(SpinTraceError, match=culprit):
        spin_trace(se.parse(text))


def test_independent_of_term_order_and_dummy_names():
    """Shuffled terms, swapped dummy labels and factor order give the same text."""
    eqs = ccsd_equations()
    rng = random.Random(7)
    shuffled = []
    for eq in eqs:
        terms = list(eq.terms)
        rng.shuffle(terms)
        terms = [se.Product(t.coefficient, tuple(reversed(t.factors))) for t in terms]
        shuffled.append(se.Equation(eq.name, tuple(terms), eq.result, eq.bare))
    assert se.to_text(spin_trace(shuffled)) == se.to_text(spin_trace(eqs))
    relabelled = ccsd_text().replace("i_3", "i_9").replace("i_4", "i_3").replace("i_9", "i_4")
    assert se.to_text(spin_trace(se.parse(relabelled))) == se.to_text(spin_trace(eqs))


# ---------------------------------------------------------------- numerical oracle
O, V = 3, 4


def _spatial_tensors(seed: int = 11):
    """Random f (symmetric), g = <pq|rs> with the 8-fold symmetry of real orbitals, t1,
    and t2 with T(a,b;i,j) = T(b,a;j,i); indices run over i (occupied) then a."""
    rng = np.random.default_rng(seed)
    n = O + V
    f = rng.standard_normal((n, n))
    f = f + f.T
    chem = rng.standard_normal((n, n, n, n))
    for perm in [(1, 0, 2, 3), (0, 1, 3, 2), (2, 3, 0, 1)]:
        chem = chem + chem.transpose(perm)
    g = chem.transpose(0, 2, 1, 3)                     # <pq|rs> = (pr|qs)
    t1 = 0.3 * rng.standard_normal((V, O))
    t2 = 0.3 * rng.standard_normal((V, V, O, O))
    t2 = t2 + t2.transpose(1, 0, 3, 2)
    return f, g, t1, t2


def _spin_orbital(f, g, t1, t2):
    """The antisymmetrized spin-orbital tensors of the module doc, index 2p + spin."""
    d = np.eye(2)
    n = f.shape[0]
    fso = np.einsum("pq,st->psqt", f, d).reshape(2 * n, 2 * n)
    gso = (np.einsum("pqrs,ac,bd->paqbrcsd", g, d, d)
           - np.einsum("pqsr,ad,bc->paqbrcsd", g, d, d)).reshape((2 * n,) * 4)
    t1so = np.einsum("ai,st->asit", t1, d).reshape(2 * V, 2 * O)
    t2so = (np.einsum("abij,ps,qt->apbqisjt", t2, d, d)
            - np.einsum("abji,pt,qs->apbqisjt", t2, d, d)).reshape(2 * V, 2 * V, 2 * O, 2 * O)
    return fso, gso, t1so, t2so


def _blocks(full, nocc):
    """A whole-space array as a block provider over spaces i (first nocc) and a."""
    sl = {"i": slice(0, nocc), "a": slice(nocc, full.shape[0])}
    return lambda spaces: np.ascontiguousarray(full[tuple(sl[s] for s in spaces)])


def test_traced_ccsd_equals_alpha_beta_block_of_spin_orbital_ccsd():
    f, g, t1, t2 = _spatial_tensors()
    fso, gso, t1so, t2so = _spin_orbital(f, g, t1, t2)
    so = se.evaluate(ccsd_equations(), {"f": _blocks(fso, 2 * O), "g": _blocks(gso, 2 * O),
                                        "t1": {("a", "i"): t1so},
                                        "t2": {("a", "a", "i", "i"): t2so}},
                     {"i": 2 * O, "a": 2 * V})
    cs = se.evaluate(spin_trace(ccsd_equations()),
                     {"f": _blocks(f, O), "g": _blocks(g, O), "t1": {("a", "i"): t1},
                      "t2": {("a", "a", "i", "i"): t2}}, {"i": O, "a": V})
    r1 = np.asarray(so["R1"]).reshape(V, 2, O, 2)[:, 0, :, 0]
    r2 = np.asarray(so["R2"]).reshape(V, 2, V, 2, O, 2, O, 2)[:, 0, :, 1, :, 0, :, 1]
    assert abs(float(cs["E"]) - float(so["E"])) <= 1e-12 * abs(float(so["E"]))
    assert np.abs(np.asarray(cs["R1"]) - r1).max() <= 1e-12 * np.abs(r1).max()
    assert np.abs(np.asarray(cs["R2"]) - r2).max() <= 1e-12 * np.abs(r2).max()
