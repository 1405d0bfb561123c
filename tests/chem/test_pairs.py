"""The CCSD ladder over packed pairs of virtuals (chem/pairs.py), spin-orbital and
closed-shell.

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
from sequant_eval.chem.pairs import (ClosedShellLadder, SpinOrbitalLadder,  # noqa: E402
                                     packed_ladder_equations)  # noqa: E402
from sequant_eval.expr import parse  # noqa: E402
from tests.oracles.spin_orbital import traced_peak  # noqa: E402

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


@pytest.fixture(scope="module")
def water():
    mol = gto.M(atom=WATER, basis="6-31g", verbose=0)
    return scf.RHF(mol).run(conv_tol=1e-10)


def _amplitudes(o: int, v: int, seed: int = 0, closed: bool = False) -> dict[str, np.ndarray]:
    """Random amplitudes in the solver's layouts (``t1[a, i]``, ``t2[a, b, i, j]``):
    spin orbitals antisymmetric in each pair, closed shell equal to their mirror image
    (``t2[b, a, j, i]``)."""
    rng = np.random.default_rng(seed)
    t2 = rng.standard_normal((v, v, o, o)) * 0.05
    if closed:
        t2 = t2 + t2.transpose(1, 0, 3, 2)
    else:
        t2 = t2 - t2.transpose(1, 0, 2, 3)
        t2 = t2 - t2.transpose(0, 1, 3, 2)
    return {"t1": rng.standard_normal((v, o)) * 0.05, "t2": t2}


def test_the_packed_arrays_hold_what_the_module_says(water):
    """``gP``, ``tauP`` and the unpacking, each against NumPy written from the formulas."""
    ints = CCSD(water, spin_orbital=True).integrals
    o, v = ints.extents["i"], ints.extents["a"]
    ladder = SpinOrbitalLadder(ints)
    rows, cols = np.triu_indices(v, 1)                      # p = (a < b), row order
    g = ints.eri(("a", "a", "a", "a"))
    # made afresh (block_rows), summed in another order: rounding only, 1e-12 of the scale
    np.testing.assert_allclose(ladder.integrals, g[rows, cols][:, rows, cols], rtol=0,
                               atol=1e-12 * np.abs(g).max())
    t = _amplitudes(o, v)
    t1, t2 = t["t1"], t["t2"]
    tau = t2 + np.einsum("ci,dj->cdij", t1, t1) - np.einsum("di,cj->cdij", t1, t1)
    (tau_p,) = ladder.amplitude_tensors(t)["tauP"].values()
    np.testing.assert_allclose(tau_p, tau[rows, cols], rtol=0, atol=1e-15)
    packed = np.random.default_rng(1).standard_normal((len(rows), o, o))
    r2 = np.random.default_rng(2).standard_normal((v, v, o, o))
    full = np.zeros_like(r2)
    full[rows, cols], full[cols, rows] = packed, -packed
    np.testing.assert_allclose(ladder.unpack(r2.copy(), {"L": packed}), r2 + full, rtol=0,
                               atol=1e-15)


def test_the_closed_shell_packed_arrays_hold_what_the_module_says(water):
    """``g±`` and ``τ±`` over ``a ≤ b`` / ``a < b`` and the unpacking, against NumPy
    written from the module docstring's formulas; the two packed products give the
    unpacked ladder ``Σ_cd g{a,b;c,d} τ{c,d;i,j}``."""
    ints = CCSD(water).integrals
    o, v = ints.extents["i"], ints.extents["a"]
    ladder = ClosedShellLadder(ints)
    g = ints.eri(("a", "a", "a", "a"))
    sym_rows, sym_cols = np.triu_indices(v)                   # q = (a <= b)
    rows, cols = np.triu_indices(v, 1)                        # p = (a < b)
    plus = g + g.transpose(0, 1, 3, 2)
    plus[:, :, np.arange(v), np.arange(v)] /= 2
    minus = g - g.transpose(0, 1, 3, 2)
    g_plus, g_minus = ladder.integrals
    scale = 1e-12 * np.abs(g).max()                           # rounding only, as above
    np.testing.assert_allclose(g_plus, plus[sym_rows, sym_cols][:, sym_rows, sym_cols],
                               rtol=0, atol=scale)
    np.testing.assert_allclose(g_minus, minus[rows, cols][:, rows, cols], rtol=0, atol=scale)
    t = _amplitudes(o, v, closed=True)
    tau = t["t2"] + np.einsum("ci,dj->cdij", t["t1"], t["t1"])
    packed = ladder.amplitude_tensors(t)
    (tau_plus,), (tau_minus,) = packed["tauS"].values(), packed["tauA"].values()
    sym = (tau + tau.transpose(1, 0, 2, 3)) / 2
    anti = (tau - tau.transpose(1, 0, 2, 3)) / 2
    np.testing.assert_allclose(tau_plus, sym[sym_rows, sym_cols], rtol=0, atol=1e-15)
    np.testing.assert_allclose(tau_minus, anti[rows, cols], rtol=0, atol=1e-15)
    out = {"Lq": np.einsum("pq,qij->pij", g_plus, tau_plus),
           "Lp": np.einsum("pq,qij->pij", g_minus, tau_minus)}
    ladder_full = np.einsum("abcd,cdij->abij", g, tau)
    got = ladder.unpack(np.zeros((v, v, o, o)), out)
    np.testing.assert_allclose(got, ladder_full, rtol=0, atol=1e-13 * np.abs(ladder_full).max())
    assert not out                                            # both packed results taken


@pytest.mark.parametrize("closed, budget, intermediates", [
    (False, None, None), (False, "25%", None), (True, None, None), (True, "25%", None),
    (True, None, True)],
    ids=["spin-orbital", "spin-orbital 25%", "closed-shell", "closed-shell 25%",
         "closed-shell with intermediates"])
def test_the_packed_ladder_gives_the_unpacked_residual(water, closed, budget, intermediates):
    """At 100 % and 25 % of its unbatched peak (and with the closed shell's
    intermediates) the packed residual equals the unpacked, unbudgeted one to 1e-12
    relative, with metered = predicted peak; fewer multiply-adds show in the flops."""
    kind = {} if closed else {"spin_orbital": True}
    packed = CCSD(water, budget=budget, intermediates=intermediates, **kind)
    plain = CCSD(water, packed_pairs=False, **kind)
    ints = plain.integrals
    t = _amplitudes(ints.extents["i"], ints.extents["a"], closed=closed)
    meters: list = []
    e, r = packed.residual_function(meters)(t)
    e0, r0 = plain.residual_function()(t)
    assert abs(e - e0) <= 1e-12 * abs(e0)
    for k in ("t1", "t2"):
        assert np.abs(r[k] - r0[k]).max() <= 1e-12 * np.abs(r0[k]).max(), k
    report = packed.program().report()
    assert meters[-1].peak_bytes == report.peak_bytes
    assert ({"Lq", "Lp"} if closed else {"L"}) <= {eq.name for eq in packed.equations}
    if closed:                        # the vvvv block went to the packing, not the cache
        assert packed.integrals.take_block("g", ("a",) * 4) is None
        assert plain.integrals.take_block("g", ("a",) * 4) is not None
    if budget is not None:
        assert report.peak_bytes < plain.program().report().peak_bytes
    else:
        assert report.flops < plain.program().report().flops


def test_a_budgeted_packed_residual_allocates_what_is_predicted(water):
    """What a 25 % residual allocates (tracemalloc over its second call, the programs built
    by the first; the packed amplitudes made inside it) is within 5 % of the predicted
    arrays and program plus ``tauP``."""
    cc = CCSD(water, spin_orbital=True, budget="25%")
    ints = cc.integrals
    t = _amplitudes(ints.extents["i"], ints.extents["a"])
    residual = cc.residual_function()
    residual(t)                                              # programs built
    _, traced = traced_peak(lambda: residual(t))
    tau_bytes = cc.pairs().extents({})["p"] * ints.extents["i"] ** 2 * 8
    report = cc.program().report()
    assert traced <= 1.05 * (report.total_bytes + tau_bytes), (traced, report.total_bytes)


def test_equations_without_the_ladder_are_refused():
    """Equations whose R2 holds no ladder as the text writes it, or no R2, are refused
    with a typed error naming the way out."""
    eqs = [eq for eq in ccsd_equations() if eq.name != "R2"]
    with pytest.raises(se.UnsupportedFeature, match="R2"):
        packed_ladder_equations(eqs, SpinOrbitalLadder.ladder, SpinOrbitalLadder.packed)
    other = parse("R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2}")
    with pytest.raises(se.UnsupportedFeature, match="without packed pairs"):
        packed_ladder_equations(other, SpinOrbitalLadder.ladder, SpinOrbitalLadder.packed)


def test_one_virtual_orbital_runs_the_ladder_unpacked():
    """H2/STO-3G has one virtual spatial orbital: no pair a < b to pack, so the closed
    shell runs the ladder as written (it raised UnknownSpace for a zero-extent pair space),
    and both kinds give PySCF's energy."""
    from pyscf import cc
    mol = gto.M(atom="H 0 0 0; H 0 0 0.74", basis="sto-3g", verbose=0)
    mf = scf.RHF(mol).run(conv_tol=1e-12)
    ref = cc.CCSD(mf).set(conv_tol=1e-10).run()
    closed = CCSD(mf, conv_tol=1e-10)
    assert closed.pairs() is None
    assert abs(closed.run().e_corr - ref.e_corr) < 1e-8
    spin = CCSD(mf, spin_orbital=True, conv_tol=1e-10)
    assert spin.pairs() is not None                       # two virtual spin orbitals
    assert abs(spin.run().e_corr - ref.e_corr) < 1e-8
