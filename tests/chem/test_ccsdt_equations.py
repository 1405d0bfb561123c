"""The packaged spin-orbital CCSDT equations (sequant_eval/chem/data/ccsdt_so.txt).

Oracles: the equations derived afresh by ``wickd`` and ebcc's generated GCCSDT code
(``tests/chem/ccsdt_oracles.py``), both evaluated at random antisymmetric amplitudes and
integrals against the stored text read by an einsum evaluator written in the test (not the
package's parser or forest); then the package's own evaluator against that reader; and
ebcc's GEBCC integrals of a small molecule. The fresh derivation is compared with the file
in a slow test.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem import derive
from sequant_eval.chem.equations import ccsdt_equations, ccsdt_text
from tests.chem.ccsdt_oracles import (ebcc_residuals, evaluate_text, random_inputs, read_text,
                                      relative_difference, wickd_residuals, wickd_terms)

RESULTS = ("E", "R1", "R2", "R3")


@pytest.fixture(scope="module")
def text() -> str:
    return ccsdt_text()


@pytest.fixture(scope="module")
def wickd():
    pytest.importorskip("wickd")
    return wickd_terms()


def test_structure(text):
    """Term counts (wickd's own counts of unique terms: 3, 15, 37, 47), the antisymmetrizer
    on every R2 and R3 term, and each term a closed product."""
    eqs = read_text(text)
    assert list(eqs) == list(RESULTS)
    assert [len(eqs[k][1]) for k in RESULTS] == [3, 15, 37, 47]
    assert [len(eq.terms) for eq in ccsdt_equations()] == [3, 15, 37, 47]
    for name in RESULTS:
        ext, terms = eqs[name]
        assert all(anti == (name in ("R2", "R3")) for _, anti, _ in terms)
        for coeff, _, factors in terms:
            assert coeff != 0
            assert sum(f[0] in ("f", "g") for f in factors) == 1
            counts: dict[str, int] = {}
            for _, bra, ket in factors:
                for x in bra + ket:
                    counts[x] = counts.get(x, 0) + 1
            assert all(counts[x] == 1 for x in ext)
            assert all(n == 2 for x, n in counts.items() if x not in ext)
    names = {f[0] for _, terms in eqs.values() for _, _, fs in terms for f in fs}
    assert names == {"f", "g", "t1", "t2", "t3"}
    assert "A{a_1,a_2,a_3;i_1,i_2,i_3} * g{a_1,a_2;a_4,i_1} * t2{a_3,a_4;i_2,i_3}" in text


def test_header(text):
    lines = text.splitlines()
    assert lines[0].startswith("# Spin-orbital CCSDT")
    assert any("GENERATED FILE" in ln for ln in lines[:3])
    assert any("sequant-eval regen-equations" in ln for ln in lines[:3])
    assert [ln for ln in lines if re.match(r"# \S+: \d+ terms", ln)] == [
        "# E: 3 terms", "# R1{a_1;i_1}: 15 terms", "# R2{a_1,a_2;i_1,i_2}: 37 terms",
        "# R3{a_1,a_2,a_3;i_1,i_2,i_3}: 47 terms"]


@pytest.mark.parametrize("no,nv,hermitian", [(3, 4, False), (4, 5, False), (3, 5, True)])
def test_against_wickd(text, wickd, no, nv, hermitian):
    """wickd (Hbar = BCH(H, T1+T2+T3), all its terms) at random inputs, also non-Hermitian
    f and g: equal to 1e-12 relative."""
    arrays = random_inputs(no, nv, seed=no + nv, hermitian=hermitian)
    got = evaluate_text(text, arrays, no, nv)
    want = wickd_residuals(wickd, arrays, no, nv)
    for name in RESULTS:
        assert relative_difference(got[name], want[name]) < 1e-12, name
        assert np.abs(want[name]).max() > 0.1               # not a vacuous comparison


@pytest.mark.parametrize("no,nv", [(3, 4), (4, 5)])
def test_against_ebcc_generated_code(text, no, nv):
    """ebcc's generated GCCSDT energy and residuals (real Hermitian integrals, as ebcc
    assumes) at random amplitudes: equal to 1e-12 relative."""
    pytest.importorskip("ebcc")
    arrays = random_inputs(no, nv, seed=10 + no, hermitian=True)
    got = evaluate_text(text, arrays, no, nv)
    want = ebcc_residuals(arrays, no, nv)
    for name in RESULTS:
        assert relative_difference(got[name], want[name]) < 1e-12, name


def test_package_evaluator_on_ccsdt(text):
    """The package's parser, forest and executor on the CCSDT text (antisymmetrizers over
    three pairs included) against the test's einsum reader of the same text."""
    no, nv = 3, 4
    arrays = random_inputs(no, nv, seed=5, hermitian=False)
    want = evaluate_text(text, arrays, no, nv)
    got = se.evaluate(ccsdt_equations(), arrays, {"i": no, "a": nv})
    for name in RESULTS:
        assert relative_difference(got[name], want[name]) < 1e-12, name


def test_against_ebcc_molecule(text):
    """ebcc GEBCC(ansatz="CCSDT") on LiH/STO-3G with its own Fock matrix and <pq||rs>, at
    random antisymmetric amplitudes: its generated residual code equals the text's."""
    ebcc = pytest.importorskip("ebcc")
    pytest.importorskip("pyscf")
    from pyscf import gto, scf

    mol = gto.M(atom="Li 0 0 0; H 0 0 1.6", basis="sto-3g", verbose=0)
    mf = scf.RHF(mol).run(conv_tol=1e-12)
    cc = ebcc.GEBCC(mf, ansatz="CCSDT", log=ebcc.NullLogger())
    no, nv = cc.nocc, cc.nvir
    eris, fock = cc.get_eris(), cc.fock
    n = no + nv
    f, g = np.zeros((n, n)), np.zeros((n,) * 4)
    sl = {"o": slice(0, no), "v": slice(no, n)}
    for blk in ("oo", "ov", "vo", "vv"):
        f[sl[blk[0]], sl[blk[1]]] = getattr(fock, blk)
    for blk in map("".join, itertools.product("ov", repeat=4)):
        g[tuple(sl[s] for s in blk)] = eris[blk]
    rand = random_inputs(no, nv, seed=3, hermitian=True)
    arrays = dict(rand, f=f, g=g)
    amps = ebcc.util.Namespace(t1=rand["t1"].T.copy(), t2=rand["t2"].transpose(2, 3, 0, 1).copy(),
                               t3=rand["t3"].transpose(3, 4, 5, 0, 1, 2).copy())
    func, kwargs = cc._load_function("update_amps", eris=eris, amplitudes=amps)
    res = func(**kwargs)
    got = evaluate_text(text, arrays, no, nv)
    want = {"E": cc.energy(eris=eris, amplitudes=amps), "R1": res["t1new"].T,
            "R2": res["t2new"].transpose(2, 3, 0, 1),
            "R3": res["t3new"].transpose(3, 4, 5, 0, 1, 2)}
    for name in RESULTS:
        assert relative_difference(got[name], want[name]) < 1e-12, name
        assert np.abs(want[name]).max() > 1e-3, name        # not a vacuous comparison


@pytest.mark.slow   # the whole --check, 9-12 s (test_closed_shell_equations runs it)
def test_regen_check_names_a_stale_ccsdt_file(text, monkeypatch, capsys, tmp_path):
    """``regen-equations --check`` compares the CCSDT file too; ``regenerate_ccsdt`` writes
    the derivation (both with the derivation replaced by a stand-in: its own test is slow)."""
    from sequant_eval.cli import main

    so = derive.DATA_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "derive_ccsd_text", lambda: so)
    monkeypatch.setattr(derive, "derive_ccsdt_text", lambda: text)
    assert main(["regen-equations", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert derive.regenerate_ccsdt(tmp_path / "sub" / "t.txt") == text
    assert (tmp_path / "sub" / "t.txt").read_text(encoding="utf-8") == text
    monkeypatch.setattr(derive, "derive_ccsdt_text", lambda: text + "# stale\n")
    assert main(["regen-equations", "--check"]) == 1
    assert "ccsdt_so.txt differs from a fresh derivation" in capsys.readouterr().out


@pytest.mark.slow
def test_stored_file_matches_derivation(text):
    """A fresh derivation (chem/wick.py, ~7 s) equals the packaged file byte for byte."""
    assert derive.derive_ccsdt_text() == text
