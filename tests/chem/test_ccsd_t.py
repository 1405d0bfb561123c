"""The closed-shell (T) energy (chem/triples.py).

Oracles: PySCF's ``ccsd_t`` on the same mean field and the same amplitudes (computed in
the test), the unbatched evaluation for every budget, tracemalloc for what the process
allocates, and direct NumPy formulas for the denominator provider."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

pyscf = pytest.importorskip("pyscf")
from pyscf import cc, gto, scf  # noqa: E402

import sequant_eval as se  # noqa: E402
from sequant_eval.chem import CCSD  # noqa: E402
from sequant_eval.chem import triples  # noqa: E402
from sequant_eval.chem.closed_shell import ClosedShellIntegrals  # noqa: E402
from sequant_eval.chem.denominators import OrbitalDenominator  # noqa: E402
from tests.oracles.spin_orbital import refill_tuple_cache  # noqa: E402

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
AMMONIA = "N 0 0 0.1162; H 0 0.9377 -0.2711; H 0.8121 -0.4689 -0.2711; H -0.8121 -0.4689 -0.2711"


def _pyscf(atom: str, basis: str, frozen=0):
    mol = gto.M(atom=atom, basis=basis, verbose=0)
    mf = scf.RHF(mol).run(conv_tol=1e-12)
    ref = cc.CCSD(mf, frozen=frozen).set(conv_tol=1e-10).run()
    return mf, ref, ref.ccsd_t()


@pytest.mark.parametrize("atom, basis, frozen", [(WATER, "cc-pvdz", 0), (WATER, "cc-pvdz", 1),
                                                 (AMMONIA, "6-31g", 0)],
                         ids=["H2O/cc-pVDZ", "H2O/cc-pVDZ frozen 1", "NH3/6-31G"])
def test_triples_energy_equals_pyscfs(atom, basis, frozen):
    """At PySCF's own amplitudes, E(T) equals ``pyscf.cc.CCSD.ccsd_t()`` to 1e-9 Eh."""
    mf, ref, e_ref = _pyscf(atom, basis, frozen)
    ours = CCSD(mf, frozen=frozen)
    e_t = ours.ccsd_t(ref.t1, ref.t2)
    assert abs(e_t - e_ref) < 1e-9, (e_t, e_ref)
    assert ours.triples_result.meter.peak_bytes == ours.triples_result.report.peak_bytes


@pytest.mark.slow
def test_triples_energy_of_the_water_dimer_equals_pyscfs():
    """(H2O)2/cc-pVDZ, planned under a quarter of the unbatched peak (~20 s)."""
    atom = ("O -1.551 -0.115 0; H -1.934 0.763 0; H -0.600 0.041 0; "
            "O 1.351 0.111 0; H 1.680 -0.374 -0.759; H 1.680 -0.374 0.759")
    mf, ref, e_ref = _pyscf(atom, "cc-pvdz")
    e_t = CCSD(mf, budget="25%").ccsd_t(ref.t1, ref.t2)
    assert abs(e_t - e_ref) < 1e-9, (e_t, e_ref)


def test_run_then_ccsd_t_as_in_pyscf():
    """``CCSD(mf).run().ccsd_t()`` uses the run's amplitudes; before a run it refuses."""
    mf, ref, e_ref = _pyscf(WATER, "6-31g")
    with pytest.raises(se.SequantEvalError, match="run"):
        CCSD(mf).ccsd_t()
    ours = CCSD(mf, conv_tol=1e-10).run()
    assert abs(ours.ccsd_t() - e_ref) < 1e-8        # the two CCSD runs agree to ~1e-9
    assert ours.e_t == ours.triples_result.e_t


@pytest.mark.slow
def test_batched_triples_equal_unbatched_and_stay_within_budget():
    """Under a tenth of the unbatched peak the o³v³ values are batched: E(T) is the
    unbatched one to 1e-12 relative, metered = predicted <= budget, and what the process
    allocates (tracemalloc) stays within the budget in the first evaluation (the program
    built) and within 5 % of the prediction (arrays and program reserve) in the next. Slow: the first batched fit of the 288
    terms takes ~20 s (its minimum search), at any basis."""
    mf, ref, _ = _pyscf(WATER, "6-31g")
    ints = ClosedShellIntegrals.from_scf(mf)
    whole = triples.ccsd_t_energy(ints, ref.t1, ref.t2)
    small = triples.ccsd_t_energy(ints, ref.t1, ref.t2, budget="10%")
    assert abs(small.e_t - whole.e_t) <= 1e-12 * abs(whole.e_t)
    assert small.report.loops and small.report.peak_bytes < whole.report.peak_bytes / 3
    assert small.meter.peak_bytes == small.report.peak_bytes
    assert small.report.total_bytes <= small.budget_bytes
    ev = triples.triples_evaluator(ints, "10%")
    tensors = triples.triples_tensors(ints, ref.t1, ref.t2)
    predicted = ev.analyze().total_bytes             # planned before the trace

    def traced_evaluation():
        refill_tuple_cache()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        out = ev.evaluate(tensors)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        assert float(out["ET"]) == small.e_t
        return peak

    first = traced_evaluation()                      # the program built inside the trace
    assert first <= small.budget_bytes, (first, small.budget_bytes)
    again = traced_evaluation()
    assert again <= 1.05 * predicted, (again, predicted)


def test_a_budget_below_the_smallest_is_refused_before_work():
    mf, ref, _ = _pyscf(WATER, "sto-3g")
    ints = ClosedShellIntegrals.from_scf(mf)
    with pytest.raises(se.InfeasibleBudget, match="smallest feasible budget"):
        triples.ccsd_t_energy(ints, ref.t1, ref.t2, budget=1000)
    with pytest.raises(se.ShapeMismatch, match="t2"):
        triples.ccsd_t_energy(ints, ref.t1, ref.t2[0])


def test_unrestricted_ccsd_has_no_triples_yet():
    mol = gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0)
    mf = scf.UHF(mol).run()
    with pytest.raises(se.UnsupportedFeature, match="spin_orbital=True"):
        CCSD(mf).ccsd_t()


@pytest.mark.parametrize("spin", [0, 1], ids=["H2O/6-31G RHF", "OH/6-31G UHF"])
def test_spin_orbital_triples_equal_pyscfs_gccsd_t(spin):
    """The spin-orbital (T) at PySCF GCCSD's amplitudes equals its ``ccsd_t()`` (on the
    GHF of the RHF or UHF) to 1e-9 Eh."""
    atom = WATER if spin == 0 else "O 0 0 0; H 0 0 0.97"
    mol = gto.M(atom=atom, basis="6-31g", spin=spin, verbose=0)
    mf = (scf.RHF if spin == 0 else scf.UHF)(mol).run(conv_tol=1e-12)
    ref = cc.GCCSD(scf.addons.convert_to_ghf(mf)).set(conv_tol=1e-10).run()
    e_ref = ref.ccsd_t()
    ours = CCSD(mf, spin_orbital=True)
    assert abs(ours.ccsd_t(ref.t1, ref.t2) - e_ref) < 1e-9


@pytest.mark.parametrize("spin_orbital, terms", [(False, 232), (True, 63)])
def test_the_packaged_files_are_their_regeneration(spin_orbital, terms):
    text = triples.triples_text(spin_orbital)
    packaged = (triples.resources.files("sequant_eval.chem") / "data" /
                triples.TRIPLES_FILES[spin_orbital]).read_text(encoding="utf-8")
    assert packaged == text
    (eq,) = triples.triples_equations(spin_orbital)
    assert len(eq.terms) == terms


def test_the_denominator_is_made_per_block():
    """Whole and sub-block reads equal ``1/(e_i + e_j - e_a)`` formed by broadcasting."""
    rng = np.random.default_rng(3)
    eo, ev = -rng.random(4) - 1, rng.random(6) + 0.5
    d = OrbitalDenominator({"i": eo, "a": ev})
    whole = d(("i", "i", "a"))
    direct = 1 / (eo[:, None, None] + eo[None, :, None] - ev[None, None, :])
    assert np.allclose(whole, direct, rtol=1e-15, atol=0)
    part = d(("i", "i", "a"), ((1, 3), (0, 4), (2, 5)))
    assert np.array_equal(part, whole[1:3, 0:4, 2:5])
    with pytest.raises(se.MissingTensor, match="'x'"):
        d(("i", "x"))
