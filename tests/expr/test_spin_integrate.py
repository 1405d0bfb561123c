"""Spin integration (sequant_eval.expr.spin_integrate): small terms whose spin blocks are
worked out by hand here, the canonical form's signs and symmetries, refusals, independence
of term order, and the whole spin-orbital CCSD checked numerically: its unrestricted blocks
evaluated on α/β arrays equal the spin-orbital residuals, evaluated on spin-orbital arrays
assembled from the same α/β arrays, projected on the blocks (tests/oracles/unrestricted.py,
plain NumPy)."""
from __future__ import annotations

import random

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations, ccsd_text, ccsdt_equations
from sequant_eval.expr.spin_integrate import (SpinIntegrationError, canonical_spin_product,
                                              spin_block_name, spin_integrate)

from tests.oracles.unrestricted import (antisymmetric_block, random_unrestricted,
                                        spin_orbital_tensor)


def _integrated(text: str, **kw) -> list[str]:
    return se.to_text(spin_integrate(se.parse(text), **kw)).strip().splitlines()


def test_fock_term_splits_into_one_block_per_spin():
    """R1{a;i} = f_ai: at (aα; iα) f_{aα iα} = fa_ai, at (aβ; iβ) fb_ai; the mixed blocks
    are zero (f conserves spin) and not written."""
    assert _integrated("R1{a_1;i_1} = f{a_1;i_1}") == [
        "R1a{a_1;i_1} = fa{a_1;i_1}", "R1b{A_1;I_1} = fb{A_1;I_1}"]


def test_energy_t2_g_term_by_hand():
    """1/4 Σ <ij||ab> t_ij^ab over spins (i j a b): αααα and ββββ give 1/4 gaa·t2aa and
    1/4 gbb·t2bb; the four mixed assignments (αβαβ, βαβα, αββα, βααβ) are each
    <iα jβ||aα bβ> t_{iα jβ}^{aα bβ} after sorting (signs cancel in pairs): 4 · 1/4 = 1
    gab·t2ab.  With real integrals <ij|ab> is spelled as its (a,b;i,j) transpose."""
    assert _integrated("E = 1/4 g{i_3,i_4;a_3,a_4} * t2{a_3,a_4;i_3,i_4}") == [
        "E = 1/4 gaa{a_1,a_2;i_1,i_2} * t2aa{a_1,a_2;i_1,i_2} "
        "+ gab{a_1,A_1;i_1,I_1} * t2ab{a_1,A_1;i_1,I_1} "
        "+ 1/4 gbb{A_1,A_2;I_1,I_2} * t2bb{A_1,A_2;I_1,I_2}"]
    assert _integrated("E = 1/4 g{i_3,i_4;a_3,a_4} * t2{a_3,a_4;i_3,i_4}", real=())[0].startswith(
        "E = 1/4 gaa{i_1,i_2;a_1,a_2} * t2aa{a_1,a_2;i_1,i_2} + gab{i_1,I_1;a_1,A_1}")


def test_particle_particle_ladder_by_hand():
    """1/2 Σ_cd <ab||cd> t_ij^cd: in the αβ block (c, d) = (α, β) and (β, α) give the same
    term after sorting (−1 from <aα bβ||dα cβ>, −1 from t_{..}^{dα cβ}): 2 · 1/2 = 1."""
    assert _integrated("R2{a_1,a_2;i_1,i_2} = 1/2 g{a_1,a_2;a_3,a_4} * t2{a_3,a_4;i_1,i_2}") == [
        "R2aa{a_1,a_2;i_1,i_2} = 1/2 gaa{a_1,a_2;a_3,a_4} * t2aa{a_3,a_4;i_1,i_2}",
        "R2ab{a_1,A_1;i_1,I_1} = gab{a_1,A_1;a_2,A_2} * t2ab{a_2,A_2;i_1,I_1}",
        "R2bb{A_1,A_2;I_1,I_2} = 1/2 gbb{A_1,A_2;A_3,A_4} * t2bb{A_3,A_4;I_1,I_2}"]


def test_singles_from_doubles_by_hand():
    """Σ_jb f_jb t_ij^ab at (aα; iα): (j, b) both α gives fa·t2aa, both β gives fb·t2ab
    (t_{iα jβ}^{aα bβ}); mixed spins vanish with f."""
    assert _integrated("R1{a_1;i_1} = f{i_3;a_3} * t2{a_1,a_3;i_1,i_3}") == [
        "R1a{a_1;i_1} = fa{a_2;i_2} * t2aa{a_1,a_2;i_1,i_2} "
        "+ fb{A_1;I_1} * t2ab{a_1,A_1;i_1,I_1}",
        "R1b{A_1;I_1} = fa{a_1;i_1} * t2ab{a_1,A_1;i_1,I_1} "
        "+ fb{A_2;I_2} * t2bb{A_1,A_2;I_1,I_2}"]


def test_operators_and_spelled_out_mirrors_agree():
    """P(a_1 a_2) f_{a_2 c} t_{a_1 c}: in the αβ block the image term −f_{a_1 c} t_{a_2 c}
    reads t_{..}^{bβ cα} = −t2ab{c, b}, so both terms come with +."""
    folded = "R2{a_1,a_2;i_1,i_2} = P{a_1,a_2} * f{a_2;a_3} * t2{a_1,a_3;i_1,i_2}"
    spelled = ("R2{a_1,a_2;i_1,i_2} = f{a_2;a_3} * t2{a_1,a_3;i_1,i_2} "
               "- f{a_1;a_3} * t2{a_2,a_3;i_1,i_2}")
    assert _integrated(folded) == _integrated(spelled)
    assert _integrated(folded)[1] == ("R2ab{a_1,A_1;i_1,I_1} = fa{a_1;a_2} * t2ab{a_2,A_1;i_1,I_1}"
                                      " + fb{A_1;A_2} * t2ab{a_1,A_2;i_1,I_1}")


def test_canonical_form_signs_and_symmetries():
    ix = se.Index
    ext = (ix("a", 1), ix("a", 2), ix("i", 1), ix("i", 2))

    def canon(text, externals=ext, **kw):
        return canonical_spin_product(se.parse(text)[0].terms[0], externals, **kw)

    # antisymmetry of a same-spin block: one swap, one sign
    assert str(canon("t2aa{a_2,a_1;i_1,i_2}")) == "-t2aa{a_1,a_2;i_1,i_2}"
    assert str(canon("t2aa{a_2,a_1;i_2,i_1}")) == "t2aa{a_1,a_2;i_1,i_2}"
    # gab: real Coulomb symmetry per column (p <-> r, q <-> s) and bra <-> ket, no sign
    ab = (ix("a", 1), ix("A", 1), ix("i", 1), ix("I", 1))
    spellings = ["gab{a_1,A_1;i_1,I_1}", "gab{i_1,A_1;a_1,I_1}", "gab{a_1,I_1;i_1,A_1}",
                 "gab{i_1,I_1;a_1,A_1}"]
    assert {str(canon(s, ab)) for s in spellings} == {"gab{a_1,A_1;i_1,I_1}"}
    # gaa = <pq||rs> has no column swap: <a i||j b> is not <j i||a b>
    assert str(canon("gaa{a_1,i_1;i_2,a_2}")) != str(canon("gaa{i_2,i_1;a_1,a_2}"))
    assert str(canon("gaa{a_1,i_1;i_2,a_2}")) == str(canon("gaa{i_2,a_2;a_1,i_1}"))
    # not real: no bra <-> ket swap
    assert str(canon("gab{i_1,I_1;a_1,A_1}", ab, real=())) == "gab{i_1,I_1;a_1,A_1}"
    # summed indices renamed; a term equal to minus itself is zero
    assert canon("gaa{a_3,a_4;i_1,i_2} * t1a{a_3;i_3} * t1a{a_4;i_3}") is None


def test_symmetric_zeros_and_cancelling_terms_are_dropped():
    text = ("R1{a_1;i_1} = f{a_1;i_1} + g{a_3,a_4;i_1,i_3} * t1{a_3;i_4} * t1{a_4;i_4} "
            "* t1{a_1;i_3} + f{a_1;a_3} * t1{a_3;i_1} - f{a_3;a_1} * t1{a_3;i_1}")
    assert _integrated(text) == ["R1a{a_1;i_1} = fa{a_1;i_1}", "R1b{A_1;I_1} = fb{A_1;I_1}"]
    with pytest.raises(SpinIntegrationError, match="every term vanishes"):
        spin_integrate(se.parse("R1{a_1;i_1} = f{a_1;a_3} * t1{a_3;i_1} - "
                                "f{a_3;a_1} * t1{a_3;i_1}"))


@pytest.mark.parametrize("text, culprit, kw", [
    ("R{a_1;i_1} = h{a_1,i_1;i_2} * t1{i_2;}", "not particle-conserving", {}),
    ("g{a_1,a_2;i_1,i_2}", "bare expression", {}),
    ("R{a_1;i_1} = B{a_1;i_1;Κ_1} * B{;;Κ_1}", "not particle-conserving", {}),
    ("R{a_1;i_1} = t1{a_3<i_1>;i_1} * f{a_1;a_3<i_1>}", "composite index", {}),
    ("R{Κ_1;Κ_2} = f{Κ_1;Κ_2}", "no default β space", {}),
    ("R{a_1;i_1} = f{a_1;i_1}", "collide", {"spaces": {"i": ("i", "a")}}),
])
def test_refusals_name_the_culprit(text, culprit, kw):
    with pytest.raises(SpinIntegrationError, match=culprit):
        spin_integrate(se.parse(text), **kw)


def test_spaces_and_block_names_can_be_chosen():
    assert spin_block_name("t3", (0, 0, 1)) == "t3aab"
    out = _integrated("R1{a_1;i_1} = f{i_3;a_3} * t2{a_1,a_3;i_1,i_3}",
                      spaces={"i": ("o", "O"), "a": ("v", "V")})
    # (the real f is spelled with the smaller space first: o before v)
    assert out[0] == ("R1a{v_1;o_1} = fa{o_2;v_2} * t2aa{v_1,v_2;o_1,o_2} "
                      "+ fb{O_1;V_1} * t2ab{v_1,V_1;o_1,O_1}")


def test_independent_of_term_order_and_dummy_names():
    """Shuffled terms, reversed factors and swapped dummy labels give the same text."""
    eqs = ccsd_equations()
    reference = se.to_text(spin_integrate(eqs))
    rng = random.Random(5)
    for _ in range(3):
        shuffled = []
        for eq in eqs:
            terms = list(eq.terms)
            rng.shuffle(terms)
            terms = [se.Product(t.coefficient, tuple(reversed(t.factors))) for t in terms]
            shuffled.append(se.Equation(eq.name, tuple(terms), eq.result, eq.bare))
        assert se.to_text(spin_integrate(shuffled)) == reference
    relabelled = ccsd_text().replace("a_3", "a_9").replace("a_4", "a_3").replace("a_9", "a_4")
    assert se.to_text(spin_integrate(se.parse(relabelled))) == reference


@pytest.mark.parametrize("seed", [3, 4])
def test_integrated_ccsd_equals_spin_blocks_of_spin_orbital_ccsd(seed):
    """Random real orbitals of each spin (tests/oracles/unrestricted.py), non-canonical
    Fock matrices: every unrestricted block equals the projected spin-orbital residual."""
    u = random_unrestricted(seed)
    tensors, extents = u.spin_orbital_tensors()
    ref = u.project(se.evaluate(ccsd_equations(), tensors, extents))
    got = se.evaluate(spin_integrate(ccsd_equations()), u.tensors(), u.extents)
    assert set(got) == set(ref)
    for name, want in ref.items():
        assert np.abs(np.asarray(got[name]) - want).max() <= 1e-12 * np.abs(want).max(), name


@pytest.mark.slow
def test_integrated_ccsdt_equals_spin_blocks_of_spin_orbital_ccsdt():
    """Any generator's equations: the packaged CCSDT (chem/wick.py, R2 and R3 written with
    antisymmetrizers) integrates to E, R1a.., R3aaa, R3aab, R3abb, R3bbb, each equal to the
    projected spin-orbital residual; t3 blocks antisymmetric within each spin's slots."""
    u = random_unrestricted(5, nao=7, no=(4, 3))
    rng = np.random.default_rng(9)
    t3 = {k: antisymmetric_block(rng, u.nv, u.no, k, 3) for k in range(4)}
    occ, vir = u.positions()
    tensors, extents = u.spin_orbital_tensors()
    tensors["t3"] = {("a", "a", "a", "i", "i", "i"): spin_orbital_tensor(t3, vir, occ)}
    so = se.evaluate(ccsdt_equations(), tensors, extents)
    ref = u.project(so)
    for k in (3, 2, 1, 0):                                   # the α-richest block first
        spins = [0] * k + [1] * (3 - k)
        ref[spin_block_name("R3", spins)] = np.asarray(so["R3"])[
            np.ix_(*([vir[s] for s in spins] + [occ[s] for s in spins]))]
    eqs = spin_integrate(ccsdt_equations())
    assert [e.name for e in eqs] == list(ref)
    blocks = u.tensors()
    for k in range(4):
        blocks[spin_block_name("t3", [0] * k + [1] * (3 - k))] = {
            tuple("a" * k + "A" * (3 - k) + "i" * k + "I" * (3 - k)): t3[k]}
    got = se.evaluate(eqs, blocks, u.extents)
    for name, want in ref.items():
        assert np.abs(want).max() > 1e-2, name
        assert np.abs(np.asarray(got[name]) - want).max() <= 1e-12 * np.abs(want).max(), name


def test_a_symmetric_tensor_takes_no_sorting_sign():
    """``1/4 Σ t_ij^ab D_ij^ab t_ij^ab`` with ``D`` symmetric: the four mixed assignments
    of (i j a b) each give ``t2ab · D2ab · t2ab`` with sign + (the two t2 signs cancel, D
    has none): 4 · 1/4 = 1; read as antisymmetric the D signs would cancel them in pairs."""
    text = "E = 1/4 t2{a_1,a_2;i_1,i_2} * D2{i_1,i_2;a_1,a_2} * t2{a_1,a_2;i_1,i_2}"
    assert _integrated(text, symmetric=("D2",)) == [
        "E = 1/4 D2aa{i_1,i_2;a_1,a_2} * t2aa{a_1,a_2;i_1,i_2} * t2aa{a_1,a_2;i_1,i_2} "
        "+ D2ab{i_1,I_1;a_1,A_1} * t2ab{a_1,A_1;i_1,I_1} * t2ab{a_1,A_1;i_1,I_1} "
        "+ 1/4 D2bb{I_1,I_2;A_1,A_2} * t2bb{A_1,A_2;I_1,I_2} * t2bb{A_1,A_2;I_1,I_2}"]
    with pytest.raises(SpinIntegrationError, match="symmetric tensor D1"):
        spin_integrate(se.parse("E = D1{i_1;a_1}"), symmetric=("D1",))   # i α, a β


def test_integrated_triples_energy_equals_the_spin_orbital_one():
    """The packaged unrestricted (T) file (the spin integration of ``ccsd_t_so.txt``)
    evaluated on α/β blocks equals the spin-orbital (T) energy evaluated on spin-orbital
    arrays assembled from the same blocks, the denominator made from random orbital
    energies per spin (plain NumPy in the spin-orbital case)."""
    from sequant_eval.chem.denominators import OrbitalDenominator
    from sequant_eval.chem.triples import triples_equations

    u = random_unrestricted(6, nao=6, no=(3, 2))
    rng = np.random.default_rng(2)
    e = {s: rng.random(n) - (2 if s in "iI" else -1) for s, n in u.extents.items()}
    occ, vir = u.positions()
    eo, ev = np.zeros(sum(u.no)), np.zeros(sum(u.nv))
    for s, (o, v) in enumerate((("i", "a"), ("I", "A"))):
        eo[occ[s]], ev[vir[s]] = e[o], e[v]
    d3 = 1 / (eo[:, None, None, None, None, None] + eo[None, :, None, None, None, None]
              + eo[None, None, :, None, None, None] - ev[None, None, None, :, None, None]
              - ev[None, None, None, None, :, None] - ev[None, None, None, None, None, :])
    tensors, extents = u.spin_orbital_tensors()
    tensors["D3"] = {("i",) * 3 + ("a",) * 3: d3}
    want = float(se.evaluate(triples_equations("spin-orbital"), tensors, extents)["ET"])
    blocks = u.tensors()
    denominator = OrbitalDenominator(e, occupied=("i", "I"))
    blocks.update({f"D3{x}": denominator for x in ("aaa", "aab", "abb", "bbb")})
    got = float(se.evaluate(triples_equations("unrestricted"), blocks, u.extents)["ET"])
    assert abs(got - want) <= 1e-12 * abs(want) and abs(want) > 1e-8
