"""The packaged unrestricted CCSD equations (chem/data/ccsd_u.txt) and how they are made.

Oracles: the spin integration of the packaged spin-orbital file; a differently written
spin-orbital text of the same equations (tests/chem/test_closed_shell_equations.py's
respelling: terms shuffled, dummies renamed, antisymmetric slots swapped with a sign,
mirror terms folded with P operators or spelled out), which must integrate to the same
file; and, at random amplitudes on the real integrals of a UHF (OH / cc-pVDZ, PySCF), the
spin-orbital residuals evaluated on spin-orbital arrays assembled from the α/β blocks
(tests/oracles/unrestricted.py) and projected on the spin blocks, the assembly itself
checked against the package's spin-orbital integrals of the same UHF.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem import derive
from sequant_eval.chem.equations import (ccsd_equations, unrestricted_equations,
                                         unrestricted_text)
from sequant_eval.cli import main
from sequant_eval.expr.spin_integrate import spin_integrate

from tests.chem.test_closed_shell_equations import _respelled
from tests.oracles.unrestricted import Unrestricted, random_amplitudes

NAMES = ("E", "R1a", "R1b", "R2aa", "R2ab", "R2bb")


def test_packaged_file_is_the_spin_integration_of_the_spin_orbital_file():
    assert derive.unrestricted_text() == unrestricted_text()
    eqs = unrestricted_equations()
    assert tuple(e.name for e in eqs) == NAMES
    assert [len(e.terms) for e in eqs] == [8, 26, 26, 97, 86, 97]
    assert unrestricted_text().startswith("# Unrestricted (UHF) CCSD")


@pytest.mark.parametrize("seed, mirrors", [(1, "P"), (2, "PP"), (3, "spelled")])
def test_a_differently_written_spin_orbital_text_integrates_to_the_same_equations(seed,
                                                                                   mirrors):
    rng = random.Random(seed)
    text = se.to_text([_respelled(eq, rng, mirrors) for eq in ccsd_equations()])
    assert text != se.to_text(ccsd_equations())
    assert se.to_text(spin_integrate(se.parse(text))) == se.to_text(unrestricted_equations())


def test_shuffled_terms_give_the_same_text():
    rng = random.Random(21)
    eqs = []
    for eq in ccsd_equations():
        terms = list(eq.terms)
        rng.shuffle(terms)
        eqs.append(se.Equation(eq.name, tuple(terms), eq.result, eq.bare))
    body = unrestricted_text().split("\n# E: ", 1)[1]
    assert derive._equations_text("", spin_integrate(eqs)).split("\n# E: ", 1)[1] == body


def test_regenerate_writes_all_three_files(tmp_path, monkeypatch):
    so = derive.DATA_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "derive_ccsd_text", lambda: so)
    assert derive.regenerate(tmp_path / "ccsd_so.txt") == so
    assert (tmp_path / "ccsd_u.txt").read_text(encoding="utf-8") == unrestricted_text()
    derive.regenerate(tmp_path / "a.txt", unrestricted_path=tmp_path / "sub_u.txt")
    assert (tmp_path / "sub_u.txt").read_text(encoding="utf-8") == unrestricted_text()


@pytest.mark.slow   # the whole --check, 9-12 s (test_closed_shell_equations runs it)
def test_regen_check_names_a_stale_unrestricted_file(monkeypatch, capsys):
    so = derive.DATA_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "derive_ccsd_text", lambda: so)
    triples = derive.CCSDT_PATH.read_text(encoding="utf-8")
    monkeypatch.setattr(derive, "derive_ccsdt_text", lambda: triples)   # its own test is slow
    assert main(["regen-equations", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    monkeypatch.setattr(derive, "unrestricted_text", lambda text=None: "stale\n")
    assert main(["regen-equations", "--check"]) == 1
    out = capsys.readouterr().out
    assert "ccsd_u.txt differs" in out and "ccsd_cs.txt" not in out


@pytest.mark.slow
def test_fresh_derivation_reproduces_the_unrestricted_file():
    """Re-derives with sympy (~100 s)."""
    assert derive.unrestricted_text(derive.derive_ccsd_text()) == unrestricted_text()


# ---------------------------------------------------------------- UHF oracle
def _uhf(basis: str):
    pytest.importorskip("pyscf")
    from pyscf import gto, scf

    mf = scf.UHF(gto.M(atom="O 0 0 0; H 0 0 0.97", basis=basis, spin=1, verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()


@pytest.fixture(scope="module")
def uhf():
    """OH / cc-pVDZ: 5 alpha, 4 beta occupied, 14 and 15 virtual orbitals."""
    return _uhf("cc-pvdz")


@pytest.fixture(scope="module")
def problem(uhf):
    """α/β Fock matrices (made non-canonical by a symmetric random perturbation) and
    integrals of the UHF, random amplitudes."""
    from pyscf import ao2mo

    rng = np.random.default_rng(21)
    c, fock = uhf.mo_coeff, uhf.get_fock()
    n = c[0].shape[1]
    f = []
    for s in (0, 1):
        noise = 0.05 * rng.standard_normal((n, n))
        f.append(c[s].T @ fock[s] @ c[s] + noise + noise.T)

    def eri(c1, c2):
        return ao2mo.general(uhf.mol, (c1, c1, c2, c2), compact=False).reshape((n,) * 4)

    integrals = {"aa": eri(c[0], c[0]), "ab": eri(c[0], c[1]), "bb": eri(c[1], c[1])}
    no = tuple(int(x) for x in uhf.nelec)
    return Unrestricted(f, integrals, no, random_amplitudes(rng, no, (n - no[0], n - no[1])))


@pytest.fixture(scope="module")
def oracle(problem):
    tensors, extents = problem.spin_orbital_tensors()
    return problem.project(se.evaluate(ccsd_equations(), tensors, extents))


def test_oracle_arrays_are_the_package_spin_orbital_integrals():
    """The assembly's ``f`` and ``<pq||rs>`` equal those of the package's spin-orbital path
    (GeneralSpinOrbitalIntegrals on the same UHF, OH / STO-3G; three blocks of ``g``), spin
    orbitals matched by orbspin: the oracle's conventions are the package's."""
    from pyscf import ao2mo

    from sequant_eval.chem.spin_orbital import GeneralSpinOrbitalIntegrals

    uhf = _uhf("sto-3g")
    c, fock = uhf.mo_coeff, uhf.get_fock()
    n = c[0].shape[1]
    eri = {k: ao2mo.general(uhf.mol, (c[x], c[x], c[y], c[y]), compact=False).reshape((n,) * 4)
           for k, (x, y) in {"aa": (0, 0), "ab": (0, 1), "bb": (1, 1)}.items()}
    no = tuple(int(x) for x in uhf.nelec)
    mine = Unrestricted([c[s].T @ fock[s] @ c[s] for s in (0, 1)], eri, no,
                        random_amplitudes(np.random.default_rng(0), no, (n - no[0], n - no[1])))
    so = mine.spin_orbital()
    ints = GeneralSpinOrbitalIntegrals(uhf)
    spin = np.asarray(ints.scf.mo_coeff.orbspin)
    occupied = np.asarray(ints.scf.mo_occ) > 0
    positions = mine._so()
    seen: dict = {}
    where: dict[str, list] = {"i": [], "a": []}
    for k in list(np.flatnonzero(occupied)) + list(np.flatnonzero(~occupied)):
        key = (int(spin[k]), bool(occupied[k]))
        where["i" if key[1] else "a"].append(positions[key][seen.setdefault(key, 0)])
        seen[key] += 1
    for spaces in (("i", "a"), ("a", "a"), ("i", "i")):
        block = so["f"][np.ix_(*(where[x] for x in spaces))]
        assert np.abs(block - ints.fock(spaces)).max() < 1e-10, spaces
    for spaces in (("i", "a", "i", "a"), ("i", "i", "a", "a"), ("a", "i", "a", "a")):
        block = so["g"][np.ix_(*(where[x] for x in spaces))]
        assert np.abs(block - ints.eri(spaces)).max() < 1e-10, spaces


def test_unrestricted_residuals_equal_the_projected_spin_orbital_ones(problem, oracle):
    """At random amplitudes on the UHF's real integrals: every block to 1e-10."""
    got = se.evaluate(unrestricted_equations(), problem.tensors(), problem.extents)
    assert set(got) == set(oracle) == set(NAMES)
    for name in NAMES:
        want = oracle[name]
        assert np.abs(want).max() > 1e-2, name                 # not a vacuous comparison
        assert np.abs(np.asarray(got[name]) - want).max() <= 1e-10, name


def test_batched_at_a_quarter_equals_unbatched(problem, oracle):
    tensors = problem.tensors()
    whole = se.evaluate(unrestricted_equations(), tensors, problem.extents)
    ev = se.Evaluator(unrestricted_equations(), problem.extents, budget="25%")
    report = ev.analyze()
    assert report.loops, "a quarter of the unbatched peak should need batch loops"
    assert report.peak_bytes <= 0.25 * se.analyze(unrestricted_equations(),
                                                  problem.extents).peak_bytes
    quarter = ev.evaluate(tensors)
    for name in NAMES:
        scale = max(1.0, float(np.abs(whole[name]).max()))
        assert np.abs(np.asarray(quarter[name]) - whole[name]).max() <= 1e-12 * scale, name
        assert np.abs(np.asarray(quarter[name]) - oracle[name]).max() <= 1e-10, name


def test_unrestricted_residual_needs_a_tenth_of_the_spin_orbital_flops():
    """(H2O)2+ / cc-pVDZ extents (10 α, 9 β occupied; 38 α, 39 β virtual; the spin-orbital
    problem 19 + 77): the package's dry-run flops, measured 10.5x fewer."""
    so = se.analyze(ccsd_equations(), {"i": 19, "a": 77}).flops
    u = se.analyze(unrestricted_equations(), {"i": 10, "a": 38, "I": 9, "A": 39}).flops
    assert 10 < so / u < 11
