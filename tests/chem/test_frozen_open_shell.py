"""``frozen`` means what PySCF means on the open shells too: for a UHF or ROHF (taken
through its GHF by the spin-orbital equations) ``frozen=N`` freezes the N lowest spatial
orbitals of *each* spin, a list names spatial orbitals of both spins and ``[alpha, beta]``
each spin's, as ``pyscf.cc.UCCSD(frozen=...)`` (``sc.GCCSD`` here: ``CCSD(mf)`` takes a UHF
to the unrestricted path, whose frozen orbitals tests/chem/test_uccsd.py checks). Oracle: PySCF ``cc.UCCSD`` on the same
mean field, run here at the same tight thresholds."""
from __future__ import annotations

import pytest

pytest.importorskip("pyscf")

from pyscf import cc, gto, scf  # noqa: E402

import sequant_eval.chem as sc  # noqa: E402
from sequant_eval.chem.spin_orbital import spin_orbitals_of_frozen  # noqa: E402
from sequant_eval.errors import UnsupportedFeature  # noqa: E402

TIGHT = {"conv_tol": 1e-11, "conv_tol_normt": 1e-9}
OH = "O 0 0 0; H 0 0 0.97"


def _uhf(atom, basis, spin, cls=scf.UHF):
    mf = cls(gto.M(atom=atom, basis=basis, spin=spin, verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()


def _uccsd(mf, frozen):
    ref = cc.UCCSD(mf, frozen=frozen)
    ref.conv_tol, ref.conv_tol_normt = 1e-11, 1e-9
    ref.kernel()
    assert ref.converged
    return ref.e_corr


@pytest.fixture(scope="module")
def oh_sto3g():
    return _uhf(OH, "sto-3g", 1)


@pytest.mark.slow
def test_oh_cc_pvdz_frozen_1_equals_uccsd():
    """OH/cc-pVDZ UHF, ``frozen=1``: E_corr equals PySCF ``UCCSD(frozen=1)`` to 1e-9
    (measured 5e-11; before, the O 1s alpha spin orbital alone was frozen, 7.95e-4 off)."""
    mf = _uhf(OH, "cc-pvdz", 1)
    ours = sc.GCCSD(mf, frozen=1, **TIGHT).run()
    assert ours.converged and ours.integrals.nfrozen == 2
    assert abs(ours.e_corr - _uccsd(mf, 1)) < 1e-9


def test_triplet_o2_frozen_2_equals_uccsd():
    """Triplet O2/6-31G UHF, ``frozen=2`` (the two 1s spatial orbitals of each spin):
    E_corr equals PySCF ``UCCSD(frozen=2)`` to 1e-9 (measured 2e-11)."""
    mf = _uhf("O 0 0 0; O 0 0 1.21", "6-31g", 2)
    ours = sc.GCCSD(mf, frozen=2, **TIGHT).run()
    assert ours.converged and ours.integrals.nfrozen == 4
    assert abs(ours.e_corr - _uccsd(mf, 2)) < 1e-9


def test_per_spin_lists_equal_uccsd(oh_sto3g):
    """``frozen=[[0], [0, 1]]``: one alpha, two beta orbitals (PySCF UCCSD's form)."""
    ours = sc.GCCSD(oh_sto3g, frozen=[[0], [0, 1]], **TIGHT).run()
    assert ours.integrals.nfrozen == 3
    assert abs(ours.e_corr - _uccsd(oh_sto3g, [[0], [0, 1]])) < 1e-9


def test_rohf_frozen_counts_spatial_orbitals():
    """ROHF OH/STO-3G ``frozen=1``: the O 1s of both spins (oracle: PySCF ``UCCSD`` on the
    same ROHF, which it converts to UHF with the same orbitals)."""
    mf = _uhf(OH, "sto-3g", 1, cls=scf.ROHF)
    ours = sc.GCCSD(mf, frozen=1, **TIGHT).run()
    assert ours.integrals.nfrozen == 2
    assert abs(ours.e_corr - _uccsd(scf.addons.convert_to_uhf(mf), 1)) < 1e-9


def test_spin_orbital_indices_of_a_uhf(oh_sto3g):
    """The conversion itself: spatial orbital p of spin s is the p-th GHF orbital of that
    spin (``mo_coeff.orbspin``)."""
    ghf = scf.addons.convert_to_ghf(oh_sto3g)
    orbspin = list(ghf.mo_coeff.orbspin)
    got = spin_orbitals_of_frozen(1, ghf)
    assert len(got) == 2 and sorted(orbspin[p] for p in got) == [0, 1]
    assert spin_orbitals_of_frozen([[], [0]], ghf) == (orbspin.index(1),)


@pytest.mark.parametrize("frozen, match", [(9, "between 0 and"), ([[0], [99]], "orbital 99"),
                                           ("core", "give the number")])
def test_bad_open_shell_frozen_is_refused(oh_sto3g, frozen, match):
    with pytest.raises(UnsupportedFeature, match=match):
        sc.GCCSD(oh_sto3g, frozen=frozen)
