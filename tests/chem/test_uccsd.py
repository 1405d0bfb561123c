"""Unrestricted CCSD (chem/uccsd.py) on UHF and ROHF references.

Oracle: PySCF ``cc.UCCSD`` on the same mean field, run in the test at the same tight
thresholds (1e-11 energy, 1e-9 amplitudes); for the batched and on-disk runs, the
in-memory unbatched run of the same method.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyscf")

from pyscf import cc, gto, scf  # noqa: E402

import sequant_eval.chem as sc  # noqa: E402
from sequant_eval.errors import UnsupportedFeature  # noqa: E402

from tests.chem.references import TIGHT  # noqa: E402

OH = "O 0 0 0; H 0 0 0.97"
WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


def _mean_field(atom, basis, spin, charge=0, cls=scf.UHF):
    mf = cls(gto.M(atom=atom, basis=basis, spin=spin, charge=charge, verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()


def _uccsd(mf, frozen=0):
    ref = cc.UCCSD(mf, frozen=frozen)
    ref.conv_tol, ref.conv_tol_normt = 1e-11, 1e-9
    ref.kernel()
    assert ref.converged
    return ref


@pytest.fixture(scope="module")
def oh_631g():
    return _mean_field(OH, "6-31g", 1)


@pytest.fixture(scope="module")
def oh_631g_reference(oh_631g):
    return _uccsd(oh_631g)


@pytest.fixture(scope="module")
def oh_631g_ours(oh_631g):
    return sc.CCSD(oh_631g, **TIGHT).run()


def _agree(ours, ref, tol=1e-9):
    assert isinstance(ours, sc.UCCSD) and ours.converged
    assert abs(ours.e_corr - ref.e_corr) < tol
    assert abs(ours.e_tot - ref.e_tot) < tol


def test_oh_631g_equals_uccsd(oh_631g_ours, oh_631g_reference):
    """OH/6-31G UHF: E_corr and the amplitudes (PySCF's layouts) equal PySCF UCCSD's."""
    _agree(oh_631g_ours, oh_631g_reference)
    for ours, ref in zip(oh_631g_ours.t1 + oh_631g_ours.t2,
                         oh_631g_reference.t1 + oh_631g_reference.t2):
        assert ours.shape == ref.shape
        assert np.abs(ours - ref).max() < 1e-7


@pytest.fixture(scope="module")
def oh_dz():
    return _mean_field(OH, "cc-pvdz", 1)


@pytest.fixture(scope="module")
def oh_dz_ours(oh_dz):
    return sc.CCSD(oh_dz, **TIGHT).run()


@pytest.mark.slow
def test_oh_cc_pvdz_equals_uccsd(oh_dz, oh_dz_ours):
    """OH/cc-pVDZ UHF (measured 3.5e-11; PySCF's run ~20 s here)."""
    _agree(oh_dz_ours, _uccsd(oh_dz))


@pytest.mark.slow
def test_water_cation_cc_pvdz_frozen_1_equals_uccsd():
    """H2O+/cc-pVDZ UHF, ``frozen=1`` (the O 1s of each spin)."""
    mf = _mean_field(WATER, "cc-pvdz", 1, charge=1)
    ours = sc.CCSD(mf, frozen=1, **TIGHT).run()
    assert ours.integrals.nfrozen == 2 and ours.nocc == (4, 3)
    _agree(ours, _uccsd(mf, 1))


def test_triplet_o2_631g_equals_uccsd():
    """Triplet O2/6-31G UHF (9 alpha, 7 beta electrons)."""
    mf = _mean_field("O 0 0 0; O 0 0 1.21", "6-31g", 2)
    ours = sc.CCSD(mf, **TIGHT).run()
    assert ours.nocc == (9, 7)
    _agree(ours, _uccsd(mf))


def test_rohf_oh_equals_uccsd_on_the_same_rohf():
    """ROHF OH/6-31G: the off-diagonal Fock blocks carried (no semicanonicalization);
    PySCF's UCCSD takes the same ROHF object (converted to UHF inside)."""
    mf = _mean_field(OH, "6-31g", 1, cls=scf.ROHF)
    ours = sc.CCSD(mf, **TIGHT).run()
    assert ours.integrals.reference == "ROHF"
    assert np.abs(ours.integrals.block("fa", ("i", "a"))).max() > 1e-3   # not canonical
    _agree(ours, _uccsd(mf))


def test_frozen_per_spin_lists_equal_uccsd(oh_631g):
    """``frozen=[[0], [0, 1]]``: one alpha, two beta orbitals (UCCSD's form)."""
    ours = sc.CCSD(oh_631g, frozen=[[0], [0, 1]], **TIGHT).run()
    assert ours.integrals.frozen_per_spin == ((0,), (0, 1)) and ours.nocc == (4, 2)
    _agree(ours, _uccsd(oh_631g, [[0], [0, 1]]))


def test_residual_vanishes_at_pyscf_amplitudes(oh_631g, oh_631g_reference):
    """At PySCF's converged amplitudes (its layouts) every residual block is ~0 and the
    energy is PySCF's: the layouts (``t2ab[i, J, a, B]``) and conventions agree."""
    ref = oh_631g_reference
    e, *r = sc.UCCSD(oh_631g).residual(*ref.t1, *ref.t2)
    assert abs(e - ref.e_corr) < 1e-9
    assert [x.shape for x in r] == [x.shape for x in ref.t1 + ref.t2]
    assert max(np.abs(x).max() for x in r) < 1e-7
    mycc = sc.UCCSD(oh_631g, **TIGHT)
    e_corr, t1, t2 = mycc.kernel(ref.t1, ref.t2)
    assert mycc.iterations <= 5 and abs(e_corr - ref.e_corr) < 1e-9 and len(t2) == 3


def test_intermediates_and_plain_equations_agree(oh_631g, oh_631g_ours):
    """The default runs with intermediates (staged); ``intermediates=False`` evaluates the
    plain equations: the same residual to 1e-12 and the same energy."""
    assert oh_631g_ours.staged
    plain = sc.UCCSD(oh_631g, intermediates=False, **TIGHT)
    assert not plain.staged
    amplitudes = oh_631g_ours.t1 + oh_631g_ours.t2
    for a, b in zip(plain.residual(*amplitudes), oh_631g_ours.residual(*amplitudes)):
        assert np.abs(np.asarray(a) - b).max() < 1e-12
    assert abs(plain.run().e_corr - oh_631g_ours.e_corr) < 1e-10


@pytest.mark.slow    # tests/chem/test_unrestricted_equations.py batches the same equations
def test_batched_at_a_quarter_equals_unbatched(oh_dz, oh_dz_ours):
    """OH/cc-pVDZ at a 25 % budget (batch loops planned): the residual at amplitudes off
    the solution equals the unbatched one to 1e-12, and the solve from the unbatched
    solution stays there (its energy to 1e-11), each residual within the budget. (A
    whole batched solve from the guess equals the unbatched one too, 5.6e-17 measured,
    but takes ~16 s here.)"""
    quarter = sc.CCSD(oh_dz, budget="25%", **TIGHT)
    assert quarter.program().report().loops
    amplitudes = [1.3 * x for x in oh_dz_ours.t1 + oh_dz_ours.t2]   # t2aa stays antisymmetric
    batched, whole = quarter.residual(*amplitudes), oh_dz_ours.residual(*amplitudes)
    for a, b in zip(batched, whole):
        assert np.abs(np.asarray(b)).max() > 1e-4
        assert np.abs(np.asarray(a) - b).max() <= 1e-12 * max(1.0, np.abs(b).max())
    quarter.kernel(oh_dz_ours.t1, oh_dz_ours.t2)
    assert quarter.converged and quarter.meter.peak_bytes <= quarter.budget_bytes
    assert abs(quarter.e_corr - oh_dz_ours.e_corr) < 1e-11


def test_on_disk_equals_in_memory(tmp_path, oh_631g, oh_631g_ours):
    """Integrals, doubles and DIIS vectors on disk (HDF5): the same energy as in memory;
    the integral file holds the unrestricted blocks and is reused."""
    ours = sc.CCSD(oh_631g, integrals_on_disk=tmp_path, **TIGHT).run()
    assert ours.out_of_core and ours.converged
    assert abs(ours.e_corr - oh_631g_ours.e_corr) < 1e-10
    assert np.abs(ours.t2[1] - oh_631g_ours.t2[1]).max() < 1e-8
    assert {t for t, _ in ours.integrals.tensors().items()} == {"fa", "fb", "gaa", "gab",
                                                                "gbb"}
    assert "integrals on disk" in ours.summary()
    again = sc.CCSD(oh_631g, integrals_on_disk=tmp_path, **TIGHT)
    assert again.integrals.reused
    ours.close(), again.close()
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["integrals"]


def test_restart_from_checkpoint_reaches_the_same_energy(tmp_path, oh_631g, oh_631g_ours):
    """Four iterations written to a checkpoint, then ``restart=True``: the energy of the
    uninterrupted run."""
    chk = tmp_path / "oh.chk"
    first = sc.CCSD(oh_631g, chkfile=chk, max_cycle=4, **TIGHT).run()
    assert not first.converged and chk.is_file()
    again = sc.CCSD(oh_631g, chkfile=chk, restart=True, **TIGHT).run()
    assert again.converged and again.iterations_run < again.iterations
    assert abs(again.e_corr - oh_631g_ours.e_corr) < 1e-10


def test_factory_and_the_spin_orbital_path(oh_631g, oh_631g_ours):
    """``CCSD(uhf)`` is UCCSD; ``spin_orbital=True`` (or ``GCCSD``) the spin-orbital path,
    to the same energy."""
    gccsd = sc.CCSD(oh_631g, spin_orbital=True, **TIGHT)
    assert type(gccsd) is sc.GCCSD and type(oh_631g_ours) is sc.UCCSD
    assert type(sc.CCSD(oh_631g, spin_orbital=False)) is sc.UCCSD
    assert abs(gccsd.run().e_corr - oh_631g_ours.e_corr) < 1e-9
    assert oh_631g_ours.to_dict()["equations"] == "unrestricted"


def test_refusals(oh_631g):
    rhf = scf.RHF(gto.M(atom="H 0 0 0; H 0 0 0.74", basis="sto-3g", verbose=0)).run()
    with pytest.raises(UnsupportedFeature, match="UHF or ROHF"):
        sc.UCCSD(rhf)
    with pytest.raises(UnsupportedFeature, match="intermediates"):
        sc.UCCSD(oh_631g, intermediates=True, integrals_on_disk=".")
    with pytest.raises(UnsupportedFeature, match=r"t1 = \(t1a, t1b\)"):
        sc.UCCSD(oh_631g).kernel(t1=(np.zeros((5, 6)),))


def test_a_reference_with_one_spin_empty_takes_the_spin_orbital_path():
    """An H atom (one α electron, no β): ``CCSD(mf)`` runs GCCSD (E_corr 0, as PySCF's
    UCCSD); ``UCCSD`` itself refuses, naming the spin and the way out; so does a frozen
    core that leaves one spin no active occupied orbital (Li, ``frozen=1``)."""
    h = _mean_field("H 0 0 0", "6-31g", 1)
    ours = sc.CCSD(h, **TIGHT)
    assert type(ours) is sc.GCCSD and abs(ours.run().e_corr) < 1e-12
    with pytest.raises(UnsupportedFeature, match="β spin.*spin_orbital=True"):
        sc.UCCSD(h)
    li = _mean_field("Li 0 0 0", "6-31g", 1)
    with pytest.raises(UnsupportedFeature, match="β spin: frozen=1"):
        sc.CCSD(li, frozen=1)
