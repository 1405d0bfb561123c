"""CC solver: textbook CCSD residual + Jacobi/DIIS reproduces PySCF's GCCSD.

Molecule: H2O at O 0 0 0.1173; H 0 +-0.7572 -0.4692 (Angstrom), all electrons correlated,
RHF reference, bases STO-3G, 6-31G and cc-pVDZ.  The reference energies are computed
here by PySCF (GCCSD, conv_tol 1e-12), not hard-coded; for the record, PySCF 2.14 gives
E_corr(CCSD) = -0.049438563027 (STO-3G), -0.135379499618 (6-31G), -0.213327426868
(cc-pVDZ) Eh.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyscf")
from pyscf import cc  # noqa: E402

from sequant_eval.chem.integrals import SpinOrbitalIntegrals  # noqa: E402
from sequant_eval.chem.solver import (  # noqa: E402
    CCResult,
    IterationRecord,
    denominators,
    mp2_guess,
    solve_cc,
)
from sequant_eval.errors import MissingTensor, ShapeMismatch  # noqa: E402

from tests.chem.pyscf_oracle import pyscf_gccsd, to_pyscf  # noqa: E402

try:  # run from the repository root (tests as a namespace package) or via pytest's rootdir
    from tests.chem.ccsd_reference import reference_residual
except ImportError:  # pragma: no cover - depends on how pytest was started
    from ccsd_reference import reference_residual

BASES = ["sto-3g", "6-31g", "cc-pvdz"]


def _residual_fn(ints: SpinOrbitalIntegrals):
    blocks = ints.tensors()

    def residual(t):
        e, r1, r2 = reference_residual(blocks["f"], blocks["g"], t["t1"], t["t2"])
        return e, {"t1": r1, "t2": r2}

    return residual


@pytest.fixture(scope="module", params=BASES)
def solved(request):
    ints = SpinOrbitalIntegrals.from_molecule("water", request.param)
    result = solve_cc(
        _residual_fn(ints), mp2_guess(ints), denominators(ints),
        conv_energy=1e-11, conv_residual=1e-10,
    )
    return request.param, ints, result


def test_ccsd_energy_matches_pyscf_gccsd(solved):
    basis, ints, result = solved
    assert result.converged, str(result)
    # the from-scratch cc-pVDZ run is test_ccsd_cc_pvdz_from_scratch (marked slow)
    mycc = pyscf_gccsd(ints, result, from_ours=basis == "cc-pvdz", normt=1e-8)
    assert result.e_corr == pytest.approx(mycc.e_corr, abs=1e-9)
    t1, t2 = to_pyscf(result.t["t1"], result.t["t2"])
    np.testing.assert_allclose(t1, mycc.t1, atol=1e-7)
    np.testing.assert_allclose(t2, mycc.t2, atol=1e-7)


def test_ccsd_energy_matches_pyscf_rccsd(solved):
    """Spin-adapted RCCSD gives the same energy; an independent from-scratch PySCF run."""
    _, ints, result = solved
    mycc = cc.CCSD(ints.scf)
    mycc.conv_tol = 1e-12
    mycc.conv_tol_normt = 1e-8
    mycc.kernel()
    assert mycc.converged
    assert result.e_corr == pytest.approx(mycc.e_corr, abs=1e-9)


@pytest.mark.slow
def test_ccsd_cc_pvdz_from_scratch():
    ints = SpinOrbitalIntegrals.from_molecule("water", "cc-pvdz")
    result = solve_cc(_residual_fn(ints), mp2_guess(ints), denominators(ints),
                      conv_residual=1e-10)
    mycc = cc.GCCSD(ints.scf)
    mycc.conv_tol = 1e-12
    mycc.conv_tol_normt = 1e-8
    mycc.kernel()
    assert result.e_corr == pytest.approx(mycc.e_corr, abs=1e-9)


@pytest.fixture(scope="module")
def water_631g():
    return SpinOrbitalIntegrals.from_molecule("water", "6-31g")


def _random_amplitudes(ints, seed=7, scale=0.05):
    """Antisymmetric, spin-conserving amplitudes (not a CC solution)."""
    rng = np.random.default_rng(seed)
    v, o = ints.nvir, ints.nocc
    spin_v, spin_o = np.arange(v) % 2, np.arange(o) % 2
    t1 = scale * rng.standard_normal((v, o)) * (spin_v[:, None] == spin_o[None, :])
    t2 = scale * rng.standard_normal((v, v, o, o))
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    sa, sb, si, sj = np.ix_(spin_v, spin_v, spin_o, spin_o)
    t2 = t2 * ((sa + sb) == (si + sj))
    return t1, t2


def test_reference_residual_matches_pyscf_update_amps(water_631g):
    """At arbitrary amplitudes PySCF's Jacobi step equals t + R / D, and energies agree."""
    ints = water_631g
    t1, t2 = _random_amplitudes(ints)
    e, r1, r2 = reference_residual(ints.fock, ints.eri, t1, t2)
    d = denominators(ints)
    mycc = cc.GCCSD(ints.scf)
    eris = mycc.ao2mo()
    p1, p2 = to_pyscf(t1, t2)
    new1, new2 = mycc.update_amps(p1, p2, eris)
    ours1, ours2 = to_pyscf(t1 + r1 / d["t1"], t2 + r2 / d["t2"])
    np.testing.assert_allclose(new1, ours1, atol=1e-11)
    np.testing.assert_allclose(new2, ours2, atol=1e-11)
    assert e == pytest.approx(mycc.energy(p1, p2, eris), abs=1e-12)


def test_mp2_guess_gives_mp2_energy(water_631g):
    ints = water_631g
    t = mp2_guess(ints)
    assert t["t1"].shape == (ints.nvir, ints.nocc) and not t["t1"].any()
    assert t["t2"].shape == (ints.nvir, ints.nvir, ints.nocc, ints.nocc)
    e, _, _ = reference_residual(ints.fock, ints.eri, t["t1"], t["t2"])
    from pyscf import mp

    assert e == pytest.approx(mp.MP2(ints.scf).run().e_corr, abs=1e-10)
    d = denominators(ints)
    eo, ev = ints.mo_energy[: ints.nocc], ints.mo_energy[ints.nocc:]
    assert d["t2"][3, 5, 1, 7] == pytest.approx(eo[1] + eo[7] - ev[3] - ev[5], abs=1e-14)
    assert np.all(d["t1"] < 0)


def test_noncanonical_orbitals_give_same_energy():
    """Rotating occupied and virtual orbitals among themselves leaves E_CCSD unchanged."""
    canonical = SpinOrbitalIntegrals.from_molecule("water", "sto-3g")
    mf = canonical.scf.copy()
    nocc = int(np.count_nonzero(mf.mo_occ > 0))
    nmo = mf.mo_coeff.shape[1]
    rng = np.random.default_rng(3)
    u = np.zeros((nmo, nmo))
    for sl in (slice(0, nocc), slice(nocc, nmo)):
        n = sl.stop - sl.start
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        u[sl, sl] = q
    mf.mo_coeff = mf.mo_coeff @ u
    rotated = SpinOrbitalIntegrals.from_scf(mf)
    assert np.abs(rotated.fock(("i", "i")) - np.diag(np.diag(rotated.fock(("i", "i"))))).max() > 1e-2
    results = [
        solve_cc(_residual_fn(x), mp2_guess(x), denominators(x), conv_residual=1e-10)
        for x in (canonical, rotated)
    ]
    assert all(r.converged for r in results)
    assert results[1].e_corr == pytest.approx(results[0].e_corr, abs=1e-10)


# ---------------------------------------------------------------- solver mechanics
def _linear_problem(n=30, seed=0):
    """R(t) = b - A t, A diagonally dominant: solution A^{-1} b.

    As in CC (R = -D t + ...), the Jacobi denominator is minus dR/dt's diagonal: D = diag(A).
    """
    rng = np.random.default_rng(seed)
    a = np.diag(rng.uniform(1.0, 3.0, n)) + 0.3 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    x = np.linalg.solve(a, b)

    def residual(t):
        r = b - a @ t["x"]
        return float(t["x"] @ b), {"x": r}

    return residual, {"x": np.zeros(n)}, {"x": np.diag(a).copy()}, x


def test_solver_on_linear_problem_with_and_without_diis():
    residual, t0, d, x = _linear_problem()
    with_diis = solve_cc(residual, t0, d, conv_residual=1e-12, conv_energy=1e-14)
    without = solve_cc(residual, t0, d, conv_residual=1e-12, conv_energy=1e-14, diis_space=0,
                       max_iter=500)
    for r in (with_diis, without):
        assert r.converged
        np.testing.assert_allclose(r.t["x"], x, atol=1e-11)
    assert with_diis.iterations < without.iterations
    assert t0["x"].sum() == 0.0  # input not modified


def test_nonconvergence_is_reported_not_raised():
    residual, t0, d, _ = _linear_problem()
    seen: list[IterationRecord] = []
    r = solve_cc(residual, t0, d, max_iter=3, callback=lambda rec, t: seen.append(rec))
    assert isinstance(r, CCResult) and not r.converged
    assert r.iterations == 3 and len(r.history) == 3 and seen == list(r.history)
    assert "NOT converged" in str(r) and "E_corr" in str(r)
    assert "iter" in str(r.history[0])
    with pytest.raises(Exception):
        r.converged = True  # frozen


def test_solver_input_errors():
    residual, t0, d, _ = _linear_problem()
    with pytest.raises(MissingTensor, match="y"):
        solve_cc(residual, {"x": t0["x"], "y": np.zeros(2)}, d)
    with pytest.raises(ShapeMismatch, match="'x'"):
        solve_cc(residual, t0, {"x": np.ones(3)})
    with pytest.raises(MissingTensor, match="'x'"):
        solve_cc(lambda t: (0.0, {}), t0, d)
