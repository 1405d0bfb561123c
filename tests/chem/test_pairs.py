"""The spin-orbital ladder over packed pairs of virtuals (chem/pairs.py).

Oracles: the same residual with the ladder unpacked (``packed_pairs=False``, the packaged
equations as derived), NumPy written here for what each packed array holds, and
tracemalloc for what a budgeted residual allocates."""
from __future__ import annotations

import numpy as np
import pytest

pyscf = pytest.importorskip("pyscf")
from pyscf import gto, scf  # noqa: E402

import sequant_eval as se  # noqa: E402
from sequant_eval.chem import CCSD  # noqa: E402
from sequant_eval.chem.equations import ccsd_equations  # noqa: E402
from sequant_eval.chem.pairs import PackedLadder, packed_ladder_equations  # noqa: E402
from sequant_eval.expr import parse  # noqa: E402
from tests.oracles.spin_orbital import traced_peak  # noqa: E402

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


@pytest.fixture(scope="module")
def water():
    mol = gto.M(atom=WATER, basis="6-31g", verbose=0)
    return scf.RHF(mol).run(conv_tol=1e-10)


def _amplitudes(o: int, v: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random amplitudes in the solver's layouts (``t1[a, i]``, ``t2[a, b, i, j]``,
    antisymmetric in each pair)."""
    rng = np.random.default_rng(seed)
    t2 = rng.standard_normal((v, v, o, o)) * 0.05
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    return {"t1": rng.standard_normal((v, o)) * 0.05, "t2": t2}


def test_the_packed_arrays_hold_what_the_module_says(water):
    """``gP``, ``tauP`` and the unpacking, each against NumPy written from the formulas."""
    ints = CCSD(water, spin_orbital=True).integrals
    o, v = ints.extents["i"], ints.extents["a"]
    ladder = PackedLadder(ints)
    rows, cols = np.triu_indices(v, 1)                      # p = (a < b), row order
    g = ints.eri(("a", "a", "a", "a"))
    np.testing.assert_array_equal(ladder.integrals, g[rows, cols][:, rows, cols])
    t = _amplitudes(o, v)
    t1, t2 = t["t1"], t["t2"]
    tau = t2 + np.einsum("ci,dj->cdij", t1, t1) - np.einsum("di,cj->cdij", t1, t1)
    (tau_p,) = ladder.amplitude_tensors(t)["tauP"].values()
    np.testing.assert_allclose(tau_p, tau[rows, cols], rtol=0, atol=1e-15)
    packed = np.random.default_rng(1).standard_normal((len(rows), o, o))
    r2 = np.random.default_rng(2).standard_normal((v, v, o, o))
    full = np.zeros_like(r2)
    full[rows, cols], full[cols, rows] = packed, -packed
    np.testing.assert_allclose(ladder.unpack(r2.copy(), packed), r2 + full, rtol=0,
                               atol=1e-15)


@pytest.mark.parametrize("budget", [None, "25%"])
def test_the_packed_ladder_gives_the_unpacked_residual(water, budget):
    """At 100 % and 25 % of its unbatched peak the packed residual equals the unpacked,
    unbudgeted one to 1e-12 relative, with metered = predicted peak; a quarter of the
    ladder's multiply-adds shows in the flops."""
    packed = CCSD(water, spin_orbital=True, budget=budget)
    plain = CCSD(water, spin_orbital=True, packed_pairs=False)
    ints = plain.integrals
    t = _amplitudes(ints.extents["i"], ints.extents["a"])
    meters: list = []
    e, r = packed.residual_function(meters)(t)
    e0, r0 = plain.residual_function()(t)
    assert abs(e - e0) <= 1e-12 * abs(e0)
    for k in ("t1", "t2"):
        assert np.abs(r[k] - r0[k]).max() <= 1e-12 * np.abs(r0[k]).max(), k
    report = packed.program().report()
    assert meters[-1].peak_bytes == report.peak_bytes
    assert "L" in {eq.name for eq in packed.equations}
    if budget is not None:
        assert report.peak_bytes < plain.program().report().peak_bytes
    else:
        assert report.flops < plain.program().report().flops


def test_a_budgeted_packed_residual_allocates_what_is_predicted(water):
    """What a 25 % residual allocates (tracemalloc over the call, its packed amplitudes
    made inside it) is within 5 % of the predicted arrays and program plus ``tauP``."""
    cc = CCSD(water, spin_orbital=True, budget="25%")
    ints = cc.integrals
    t = _amplitudes(ints.extents["i"], ints.extents["a"])
    residual = cc.residual_function()
    residual(t)                                              # programs built
    _, traced = traced_peak(lambda: residual(t))
    tau_bytes = cc.pairs().npair * ints.extents["i"] ** 2 * 8
    report = cc.program().report()
    assert traced <= 1.05 * (report.total_bytes + tau_bytes), (traced, report.total_bytes)


def test_equations_without_the_ladder_are_refused():
    """Equations whose R2 holds no ladder as the text writes it, or no R2, are refused
    with a typed error naming the way out."""
    eqs = [eq for eq in ccsd_equations() if eq.name != "R2"]
    with pytest.raises(se.UnsupportedFeature, match="R2"):
        packed_ladder_equations(eqs)
    other = parse("R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2}")
    with pytest.raises(se.UnsupportedFeature, match="without packed pairs"):
        packed_ladder_equations(other)
