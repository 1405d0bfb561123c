"""CCSD through the fused-forest evaluator, checked against PySCF and a plain-einsum residual.

Molecule: H2O at O 0 0 0.1173; H 0 ±0.7572 -0.4692 (Angstrom), all electrons correlated,
RHF reference. Oracles: PySCF GCCSD run in the test (not hard-coded numbers), and the
textbook spin-orbital residual in tests/chem/ccsd_reference.py (plain np.einsum, written
independently of the package).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyscf")

import sequant_eval as se  # noqa: E402
from sequant_eval.chem.gccsd import residual_function  # noqa: E402
from sequant_eval.chem.equations import ccsd_equations  # noqa: E402
from sequant_eval.chem.integrals import SpinOrbitalIntegrals  # noqa: E402
from sequant_eval.chem.solver import denominators, mp2_guess, solve_cc  # noqa: E402

from tests.chem.ccsd_reference import reference_residual  # noqa: E402
from tests.chem.pyscf_oracle import pyscf_gccsd  # noqa: E402


@pytest.fixture(scope="module", params=["sto-3g", "6-31g", "cc-pvdz"])
def solved(request):
    ints = SpinOrbitalIntegrals.from_molecule("water", request.param)
    result = solve_cc(residual_function(ints), mp2_guess(ints), denominators(ints),
                      conv_energy=1e-11, conv_residual=1e-10)
    return request.param, ints, result


def test_energy_equals_pyscf_gccsd(solved):
    basis, ints, result = solved
    assert result.converged, str(result)
    mycc = pyscf_gccsd(ints, result, from_ours=basis == "cc-pvdz")
    assert abs(result.e_corr - mycc.e_corr) < 1e-9


@pytest.fixture(scope="module")
def water_631g():
    return SpinOrbitalIntegrals.from_molecule("water", "6-31g")


def _random_amplitudes(ints, seed=3):
    """Random amplitudes, antisymmetric in (a,b) and (i,j); not spin-adapted on purpose."""
    rng = np.random.default_rng(seed)
    o, v = ints.nocc, ints.nvir
    t1 = 0.1 * rng.standard_normal((v, o))
    t2 = 0.1 * rng.standard_normal((v, v, o, o))
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    return {"t1": t1, "t2": t2}


def test_residuals_equal_plain_einsum_reference(water_631g):
    ints = water_631g
    t = _random_amplitudes(ints)
    e, r = residual_function(ints)(t)
    blocks = ints.tensors()
    e_ref, r1_ref, r2_ref = reference_residual(blocks["f"], blocks["g"], t["t1"], t["t2"])
    assert abs(e - e_ref) <= 1e-12 * abs(e_ref)
    for got, ref in ((r["t1"], r1_ref), (r["t2"], r2_ref)):
        assert np.abs(got - ref).max() <= 1e-12 * np.abs(ref).max()


def test_dry_run_peak_equals_numpy_accounted_peak_on_ccsd(water_631g):
    ints = water_631g
    ev = se.Evaluator(ccsd_equations(), ints.extents)
    t = _random_amplitudes(ints)
    tensors = dict(ints.tensors(), t1={("a", "i"): t["t1"]}, t2={("a", "a", "i", "i"): t["t2"]})
    _, meter = ev.evaluate(tensors, return_meter=True)
    report = ev.analyze()
    assert meter.peak_bytes == report.peak_bytes > 0
    assert meter.flops == report.flops


def test_interning_shares_work_on_ccsd():
    """CSE is real: the permutation-expanded CCSD terms share most contractions."""
    forest = se.Evaluator(ccsd_equations(), {"i": 10, "a": 38}).forest
    assert forest.distinct_contractions < 0.6 * forest.binary_contractions


@pytest.fixture(scope="module")
def water_dz():
    ints = SpinOrbitalIntegrals.from_molecule("water", "cc-pvdz")
    ref = solve_cc(residual_function(ints), mp2_guess(ints), denominators(ints),
                   conv_energy=1e-11, conv_residual=1e-9)
    top = se.analyze(ccsd_equations(), ints.extents).peak_bytes
    return ints, ref, top


def _smallest(ints, top) -> float:
    with pytest.raises(se.InfeasibleBudget) as info:
        se.analyze(ccsd_equations(), ints.extents, budget=top / 100)
    return info.value.minimum


# "smallest" (87 loops, about 4 s per residual evaluation) is slow; 0.25 and 0.5 batch in CI
@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.25,
                                      pytest.param("smallest", marks=pytest.mark.slow)])
def test_batched_ccsd_converges_to_the_same_energy(water_dz, fraction):
    """Oracle: the unbatched CCSD of the same equations (which matches PySCF above), and
    the dry run of the fitted schedule (peak and flops of every residual evaluation).
    Spin-orbital CCSD has no persistent intermediate (every contraction involves an
    amplitude), so with ``persist=True`` every evaluation rebuilds the same forms: none is
    cached (a stale one would be a wrong residual) and none is skipped."""
    ints, ref, top = water_dz
    budget = _smallest(ints, top) if fraction == "smallest" else top * fraction
    ev = se.Evaluator(ccsd_equations(), ints.extents, budget=budget, persist=True,
                      volatile=("t1", "t2"))
    meters: list = []
    res = solve_cc(residual_function(ints, ev, meters=meters), mp2_guess(ints),
                   denominators(ints), conv_energy=1e-11, conv_residual=1e-9)
    assert res.converged
    assert abs(res.e_corr - ref.e_corr) < 1e-10
    predicted = ev.analyze()
    assert len(meters) >= 2                  # the comparisons below are not vacuous
    assert all(m.peak_bytes == predicted.peak_bytes <= budget for m in meters)
    assert all(m.flops == predicted.flops for m in meters)
    assert not any(c.persistent for c in ev.batched.table.cells)
    assert meters[0].builds and all(m.builds == meters[0].builds for m in meters[1:])
    if fraction != 1.0:                      # below the unbatched peak: really batched
        assert ev.batched.analysis.rich.loops and predicted.peak_bytes < top
