"""Closed-shell CCSD through ``sequant_eval.chem.CCSD(mf)``, checked against PySCF.

Oracles, all computed in the test: PySCF ``cc.CCSD(mf)`` (production RHF CCSD) for the
converged energies and amplitudes; PySCF ``rccsd.RCCSD.update_amps`` turned back into
residuals, ``R = (t_new - t) * D``, at random amplitudes; the unbatched evaluation of the
same equations for the batched runs; PySCF ``cc.UCCSD`` for the spin-orbital path on UHF.
Geometries (Angstrom) are below.
"""
from __future__ import annotations

import numpy as np
import pytest

pyscf = pytest.importorskip("pyscf")

from pyscf import cc, gto, scf  # noqa: E402
from pyscf.cc import rccsd  # noqa: E402

import sequant_eval as se  # noqa: E402
import sequant_eval.chem as sc  # noqa: E402
from sequant_eval.chem import rccsd as closed_shell_method  # noqa: E402
from sequant_eval.chem.equations import closed_shell_equations  # noqa: E402
from sequant_eval.errors import (InfeasibleBudget, SequantEvalError,  # noqa: E402
                                 UnsupportedFeature)

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
AMMONIA = "N 0 0 0.1173; H 0 0.9377 -0.2737; H 0.8121 -0.4689 -0.2737; H -0.8121 -0.4689 -0.2737"
TIGHT = {"conv_tol": 1e-11, "conv_tol_normt": 1e-9}


def rhf(atom: str, basis: str, **kw):
    mf = scf.RHF(gto.M(atom=atom, basis=basis, verbose=0, **kw))
    mf.conv_tol = 1e-12
    mf.kernel()
    assert mf.converged
    return mf


def pyscf_ccsd(mf, frozen=0, t1=None, t2=None):
    ref = cc.CCSD(mf, frozen=frozen)
    ref.conv_tol, ref.conv_tol_normt = 1e-11, 1e-9
    ref.kernel(t1, t2)
    assert ref.converged
    return ref


def _energy_matches_pyscf(atom, basis, frozen):
    mf = rhf(atom, basis)
    ours = sc.CCSD(mf, frozen=frozen, **TIGHT).run()
    assert ours.converged and not ours.spin_orbital
    # starting PySCF from our amplitudes saves its iterations; it still iterates to its
    # own fixed point (conv_tol_normt 1e-9), so a wrong solution would be moved away
    ref = pyscf_ccsd(mf, frozen, ours.t1, ours.t2)
    assert abs(ours.e_corr - ref.e_corr) < 1e-9
    assert abs(ours.e_tot - ref.e_tot) < 1e-9
    assert np.abs(ours.t2 - ref.t2).max() < 1e-6 and np.abs(ours.t1 - ref.t1).max() < 1e-6
    return ours


@pytest.mark.parametrize("atom, basis, frozen", [
    (WATER, "sto-3g", 0), (WATER, "6-31g", 0), (AMMONIA, "6-31g", 0), (WATER, "6-31g", 1)])
def test_energy_equals_pyscf_ccsd(atom, basis, frozen):
    _energy_matches_pyscf(atom, basis, frozen)


@pytest.mark.slow
@pytest.mark.parametrize("frozen", [0, 1])
def test_energy_equals_pyscf_ccsd_cc_pvdz(frozen):
    _energy_matches_pyscf(WATER, "cc-pvdz", frozen)


@pytest.fixture(scope="module")
def water_631g():
    return rhf(WATER, "6-31g")


def _random_amplitudes(o, v, seed=5):
    """Random closed-shell amplitudes in PySCF layout, t2[i,j,a,b] = t2[j,i,b,a]."""
    rng = np.random.default_rng(seed)
    t1 = 0.05 * rng.standard_normal((o, v))
    t2 = 0.05 * rng.standard_normal((o, o, v, v))
    return t1, t2 + t2.transpose(1, 0, 3, 2)


@pytest.mark.parametrize("frozen", [0, 1])
def test_residuals_equal_pyscf_rccsd_update(water_631g, frozen):
    mf = water_631g
    ours = sc.CCSD(mf, frozen=frozen)
    ref = rccsd.RCCSD(mf, frozen=frozen)
    eris = ref.ao2mo()
    o = ours.nocc
    t1, t2 = _random_amplitudes(o, ours.nvir)
    n1, n2 = ref.update_amps(t1, t2, eris)
    eia = eris.mo_energy[:o, None] - eris.mo_energy[None, o:]
    eijab = eia[:, None, :, None] + eia[None, :, None, :]
    r1, r2 = (n1 - t1) * eia, (n2 - t2) * eijab
    e, got1, got2 = ours.residual(t1, t2)
    assert abs(e - ref.energy(t1, t2, eris)) <= 1e-12 * abs(e)
    assert np.abs(got1 - r1).max() <= 1e-10 * np.abs(r1).max()
    assert np.abs(got2 - r2).max() <= 1e-10 * np.abs(r2).max()


@pytest.fixture(scope="module")
def water_dz():
    return rhf(WATER, "cc-pvdz")


def test_batched_equals_unbatched(water_dz):
    """Oracle: the unbatched evaluation of the same closed-shell equations (cc-pVDZ: on
    6-31G a quarter of the peak is below the smallest feasible budget)."""
    ints = sc.CCSD(water_dz).integrals
    o, v = ints.nocc, ints.nvir
    t1, t2 = _random_amplitudes(o, v, seed=9)
    tensors = dict(ints.tensors(), t1={("a", "i"): t1.T.copy()},
                   t2={("a", "a", "i", "i"): t2.transpose(2, 3, 0, 1).copy()})
    eqs = closed_shell_equations()
    top = se.analyze(eqs, ints.extents).peak_bytes
    ref = se.evaluate(eqs, tensors, ints.extents)
    for share in (0.5, 0.25):
        ev = se.Evaluator(eqs, ints.extents, budget=f"{share:.0%}")   # + the program
        out, meter = ev.evaluate(tensors, return_meter=True)
        assert ev.analyze().loops, "a budget below the unbatched peak must open loops"
        assert meter.peak_bytes <= top * share
        for name, want in ref.items():
            scale = max(np.abs(want).max(), 1e-300)
            assert np.abs(np.asarray(out[name]) - want).max() <= 1e-12 * scale, name


def test_batched_run_converges_to_the_unbatched_energy(water_dz):
    free = sc.CCSD(water_dz, frozen=1, intermediates=True, **TIGHT).run()
    half = sc.CCSD(water_dz, frozen=1, budget="50%", intermediates=True, **TIGHT).run()
    assert free.staged and half.staged            # with intermediates, both
    assert abs(half.e_corr - free.e_corr) < 1e-10
    assert half.meter.peak_bytes == half.report.peak_bytes <= 0.5 * free.report.peak_bytes
    assert "budget" in half.summary() and "-> equal" in half.summary()


def test_intermediates_give_the_plain_residual(water_631g):
    """Oracle: the plain (unfactored) equations in one program, same amplitudes."""
    staged = sc.CCSD(water_631g, frozen=1, intermediates=True)
    plain = sc.CCSD(water_631g, frozen=1, intermediates=False)
    assert staged.staged and not plain.staged
    t1, t2 = _random_amplitudes(staged.nocc, staged.nvir, seed=3)
    (e, r1, r2), (e0, p1, p2) = staged.residual(t1, t2), plain.residual(t1, t2)
    assert abs(e - e0) <= 1e-12 * abs(e0)
    assert np.abs(r1 - p1).max() <= 1e-12 * np.abs(p1).max()
    assert np.abs(r2 - p2).max() <= 1e-12 * np.abs(p2).max()
    assert staged.evaluator().analyze().flops < 0.8 * plain.evaluator().analyze().flops


def test_the_default_finds_intermediates_from_a_ladder_size(water_631g, monkeypatch):
    """H2O/6-31G (2 o² v⁴ = 2.6e5 flops) is below ``FACTOR_FROM``: the default runs the
    plain equations; with the threshold below it, the same system is staged."""
    assert not sc.CCSD(water_631g).staged
    monkeypatch.setattr(closed_shell_method, "FACTOR_FROM", 0)
    assert sc.CCSD(water_631g).staged


def test_a_budget_too_small_for_the_intermediates(water_dz, monkeypatch):
    """A quarter of the peak cannot hold the intermediates between stages: the default
    (asked to find them on this small system) evaluates the plain equations (same
    residual), ``intermediates=True`` is refused."""
    monkeypatch.setattr(closed_shell_method, "FACTOR_FROM", 0)
    quarter = sc.CCSD(water_dz, frozen=1, budget="25%")
    t1, t2 = _random_amplitudes(quarter.nocc, quarter.nvir, seed=4)
    e, r1, r2 = quarter.residual(t1, t2)
    assert not quarter.staged
    e0, _, p2 = sc.CCSD(water_dz, frozen=1).residual(t1, t2)
    assert abs(e - e0) <= 1e-12 * abs(e0) and np.abs(r2 - p2).max() <= 1e-12 * np.abs(p2).max()
    with pytest.raises(InfeasibleBudget, match="held across it"):
        sc.CCSD(water_dz, frozen=1, budget="25%", intermediates=True).evaluator()


def test_spin_orbital_path_gives_the_same_energy():
    mf = rhf(WATER, "sto-3g")
    cs = sc.CCSD(mf, frozen=1, **TIGHT).run()
    so = sc.CCSD(mf, frozen=1, spin_orbital=True, **TIGHT).run()
    assert so.spin_orbital and so.t1.shape == (2 * cs.nocc, 2 * cs.nvir)
    assert abs(cs.e_corr - so.e_corr) < 1e-10


def test_uhf_reference_takes_the_spin_orbital_path_when_asked():
    """Oracle: PySCF UCCSD on the OH radical, STO-3G (O 0 0 0; H 0 0 0.97); without
    ``spin_orbital=True`` a UHF takes the unrestricted path (tests/chem/test_uccsd.py)."""
    mf = scf.UHF(gto.M(atom="O 0 0 0; H 0 0 0.97", spin=1, basis="sto-3g", verbose=0))
    mf.conv_tol = 1e-12
    mf.kernel()
    ours = sc.CCSD(mf, spin_orbital=True, **TIGHT).run()
    ref = cc.UCCSD(mf)
    ref.conv_tol, ref.conv_tol_normt = 1e-11, 1e-9
    ref.kernel()
    assert ours.spin_orbital and ours.converged
    assert abs(ours.e_corr - ref.e_corr) < 1e-9
    assert type(sc.CCSD(mf)) is sc.UCCSD


def test_result_attributes_and_memory_report(water_631g):
    lines = []
    mycc = sc.CCSD(water_631g, callback=lambda rec, s, peak: lines.append((rec, s, peak)))
    with pytest.raises(SequantEvalError, match="run"):
        mycc.e_tot
    assert mycc.run() is mycc
    assert mycc.t1.shape == (5, 8) and mycc.t2.shape == (5, 5, 8, 8)
    assert mycc.e_tot == water_631g.e_tot + mycc.e_corr
    assert len(lines) == mycc.iterations and all(p == mycc.report.peak_bytes for *_, p in lines)
    assert mycc.meter.peak_bytes == mycc.report.peak_bytes > 0
    d = mycc.to_dict()
    assert d["equations"] == "closed-shell" and len(d["history"]) == mycc.iterations
    assert "closed shell" in mycc.summary() and "-> equal" in mycc.summary()


@pytest.mark.parametrize("frozen, message", [
    (5, "between 0 and 4"), (-1, "between 0 and 4"), ([0, 13], "not between 0 and 12"),
    ([0, 1, 2, 3, 4], "no active occupied"), ("1", "a list of orbital indices"),
    ([0.5], "a list of orbital indices"), (True, "a list of orbital indices")])
def test_bad_frozen_is_refused(water_631g, frozen, message):
    with pytest.raises(UnsupportedFeature, match=message):
        sc.CCSD(water_631g, frozen=frozen)


def test_prefetched_blocks_equal_blocks_transformed_one_by_one(water_dz, water_631g,
                                                              monkeypatch):
    """Oracle: ``ao2mo.general`` per block (the path without prefetch). The packed
    four-index transform cuts every block the equations read, frozen core included; where
    the packed array would be bigger than the largest block (6-31G: 78² pairs against 8⁴
    vvvv elements) nothing is prefetched."""
    from sequant_eval.chem.closed_shell import ClosedShellIntegrals

    blocks = [("g", sp) for sp in [("a", "a", "a", "a"), ("a", "i", "a", "i"),
                                   ("i", "i", "a", "a"), ("a", "a", "a", "i")]]
    blocks.append(("L", ("a", "i", "i", "i")))
    one = ClosedShellIntegrals.from_scf(water_dz, frozen=1)
    ref = {sp: one.eri(sp) for _, sp in blocks} | {"L": one.exchange(("a", "i", "i", "i"))}
    fetched = ClosedShellIntegrals.from_scf(water_dz, frozen=1)
    fetched.prefetch(blocks)
    assert len(fetched._g) >= len(blocks)                # all made by the prefetch
    for _, sp in blocks[:-1]:
        assert np.abs(fetched.eri(sp) - ref[sp]).max() <= 1e-12
    assert np.abs(fetched.exchange(("a", "i", "i", "i")) - ref["L"]).max() <= 1e-12
    from pyscf import ao2mo

    def no_transform(*args, **kw):
        raise AssertionError("a block the cache holds was transformed again")

    monkeypatch.setattr(ao2mo, "general", no_transform)
    fetched.prefetch(blocks)                             # every block cached: nothing to do
    monkeypatch.undo()
    small = ClosedShellIntegrals.from_scf(water_631g, frozen=1)
    small.prefetch(blocks)
    assert not small._g
