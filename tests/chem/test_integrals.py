"""Spin-orbital integrals against PySCF's own GCCSD integrals, plus their symmetries.

Molecule: H2O, O 0 0 0.1173; H 0 +-0.7572 -0.4692 (Angstrom), RHF/6-31G unless stated.
PySCF's GHF made from an RHF interleaves spins (alpha, beta per spatial orbital, occupied
first) and stores ``eris.oovv[i, j, a, b] = <ij||ab>``; our blocks must equal those slices
exactly, so that amplitudes can be compared element by element.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

pyscf = pytest.importorskip("pyscf")
from pyscf import cc  # noqa: E402

from sequant_eval.chem.integrals import SCFNotConverged, SpinOrbitalIntegrals  # noqa: E402
from sequant_eval.chem.molecules import (  # noqa: E402
    UnknownBasis,
    UnknownMolecule,
    build_molecule,
    known_molecules,
)
from sequant_eval.errors import SequantEvalError, ShapeMismatch, UnknownSpace  # noqa: E402
from sequant_eval.errors import UnsupportedFeature  # noqa: E402

ALL_BLOCKS = ["".join(b) for b in itertools.product("ia", repeat=4)]


@pytest.fixture(scope="module")
def ints() -> SpinOrbitalIntegrals:
    return SpinOrbitalIntegrals.from_molecule("water", "6-31g")


@pytest.fixture(scope="module")
def pyscf_eris(ints):
    mycc = cc.GCCSD(ints.scf)
    return mycc, mycc.ao2mo()


def _full_g(ints: SpinOrbitalIntegrals) -> np.ndarray:
    """Assemble the whole <pq||rs> tensor from its 16 blocks."""
    o, n = ints.nocc, ints.nocc + ints.nvir
    sl = {"i": slice(0, o), "a": slice(o, n)}
    g = np.empty((n, n, n, n))
    for b in ALL_BLOCKS:
        g[tuple(sl[s] for s in b)] = ints.eri(tuple(b))
    return g


def test_sizes_and_extents(ints):
    assert (ints.nocc, ints.nvir) == (10, 16)
    assert list(ints.extents.items()) == [("i", 10), ("a", 16)]
    assert ints.mo_energy.shape == (26,)
    assert ints.e_hf == pytest.approx(ints.scf.e_tot, abs=0)
    assert "nocc=10" in repr(ints)


def test_pyscf_ghf_orbital_ordering(pyscf_eris):
    """GHF from RHF: spins alternate (0 = alpha, 1 = beta), which is our 2P / 2P+1 rule."""
    mycc, eris = pyscf_eris
    orbspin = np.asarray(eris.orbspin)
    np.testing.assert_array_equal(orbspin, np.arange(orbspin.size) % 2)


@pytest.mark.parametrize(
    "name,spaces",
    [("oooo", "iiii"), ("ooov", "iiia"), ("oovv", "iiaa"), ("ovov", "iaia"),
     ("ovvo", "iaai"), ("ovvv", "iaaa"), ("vvvv", "aaaa")],
)
def test_blocks_equal_pyscf_gccsd_eris(ints, pyscf_eris, name, spaces):
    _, eris = pyscf_eris
    np.testing.assert_allclose(ints.eri(tuple(spaces)), getattr(eris, name), rtol=0, atol=1e-12)


def test_fock_equals_pyscf_and_is_diagonal(ints, pyscf_eris):
    _, eris = pyscf_eris
    o = ints.nocc
    f = ints.tensors()["f"]
    full = np.block([[f(("i", "i")), f(("i", "a"))], [f(("a", "i")), f(("a", "a"))]])
    np.testing.assert_allclose(full, eris.fock, rtol=0, atol=1e-12)
    np.testing.assert_allclose(full, np.diag(ints.mo_energy), rtol=0, atol=1e-7)
    np.testing.assert_allclose(ints.mo_energy, np.repeat(ints.scf.mo_energy, 2), atol=1e-7)
    assert np.all(ints.mo_energy[:o, None] < ints.mo_energy[None, o:])


def test_g_antisymmetric_and_hermitian(ints):
    g = _full_g(ints)
    assert np.abs(g).max() > 0.1
    np.testing.assert_allclose(g, -g.transpose(1, 0, 2, 3), atol=1e-13)
    np.testing.assert_allclose(g, -g.transpose(0, 1, 3, 2), atol=1e-13)
    np.testing.assert_allclose(g, g.transpose(2, 3, 0, 1), atol=1e-13)  # real orbitals


def test_spin_structure(ints):
    """<pq||rs> vanishes unless the spins of p, q equal those of r, s (as multisets)."""
    g = _full_g(ints)
    spin = np.arange(g.shape[0]) % 2
    sp, sq, sr, ss = np.ix_(spin, spin, spin, spin)
    allowed = ((sp == sr) & (sq == ss)) | ((sp == ss) & (sq == sr))
    assert np.abs(g[~np.broadcast_to(allowed, g.shape)]).max() == 0.0


def test_any_block_order_is_a_slice_of_one_tensor(ints):
    """e.g. ("a","i","i","a") is g[v, o, o, v] and equals -<ai||ai> with slots 3, 4 swapped."""
    voov = ints.eri(("a", "i", "i", "a"))
    vovo = ints.eri(("a", "i", "a", "i"))
    np.testing.assert_allclose(voov, -vovo.transpose(0, 1, 3, 2), atol=1e-13)
    vvoo = ints.eri(("a", "a", "i", "i"))
    np.testing.assert_allclose(vvoo, ints.eri(("i", "i", "a", "a")).transpose(2, 3, 0, 1), atol=1e-13)


@pytest.mark.parametrize("spaces", ["iaai", "aaii", "aiai", "aaaa", "iiia"])
def test_per_block_transform_equals_full_transform(ints, spaces):
    lazy = SpinOrbitalIntegrals.from_scf(ints.scf, max_full_eri_bytes=0)
    np.testing.assert_allclose(lazy.eri(tuple(spaces)), ints.eri(tuple(spaces)), atol=1e-12)


def test_blocks_are_readonly_contiguous_float64(ints):
    for block in (ints.eri(("a", "i", "i", "a")), ints.fock(("a", "i"))):
        assert block.dtype == np.float64 and block.flags.c_contiguous
        assert not block.flags.writeable
    assert ints.eri(("a", "i", "i", "a")).shape == (16, 10, 10, 16)
    assert ints.eri(("a", "i", "i", "a")) is ints.eri(("a", "i", "i", "a"))  # cached


def test_bad_requests_raise_package_errors(ints):
    with pytest.raises(UnknownSpace, match="'x'"):
        ints.eri(("i", "x", "a", "a"))
    with pytest.raises(ShapeMismatch, match="4 slots"):
        ints.eri(("i", "a"))
    with pytest.raises(ShapeMismatch, match="2 slots"):
        ints.fock(("i", "a", "a"))


def test_molecules_registry():
    assert {"water", "water_dimer"} <= set(known_molecules())
    mol = build_molecule("water_dimer", "sto-3g")
    assert mol.natm == 6 and mol.nelectron == 20 and not mol.symmetry
    with pytest.raises(UnknownMolecule, match="water_dimer"):
        build_molecule("benzene", "sto-3g")
    with pytest.raises(UnknownBasis, match="no-such-basis"):
        build_molecule("water", "no-such-basis")
    assert issubclass(UnknownMolecule, SequantEvalError)


def test_refuses_uhf_and_unconverged():
    from pyscf import scf

    mol = build_molecule("water", "sto-3g")
    with pytest.raises(UnsupportedFeature, match="UHF"):
        SpinOrbitalIntegrals.from_scf(scf.UHF(mol).run())
    mf = scf.RHF(mol)
    mf.max_cycle = 1
    mf.kernel()
    with pytest.raises(SCFNotConverged):
        SpinOrbitalIntegrals.from_scf(mf)


def test_water_dimer_cc_pvdz_blocks():
    """(H2O)2 / cc-pVDZ (S22 geometry): 48 spatial -> 96 spin orbitals, per-block access."""
    ints = SpinOrbitalIntegrals.from_molecule("water_dimer", "cc-pvdz")
    assert (ints.nocc, ints.nvir) == (20, 76)
    oovv = ints.eri(("i", "i", "a", "a"))
    voov = ints.eri(("a", "i", "i", "a"))
    np.testing.assert_allclose(oovv, -oovv.transpose(1, 0, 2, 3), atol=1e-13)
    # <aj||ib> = -<ja||ib>, and <ja||ib> = <ib||ja> (real): check via the ovov block
    ovov = ints.eri(("i", "a", "i", "a"))
    np.testing.assert_allclose(voov, -ovov.transpose(1, 0, 2, 3), atol=1e-13)
    lazy = SpinOrbitalIntegrals.from_scf(ints.scf, max_full_eri_bytes=0)
    np.testing.assert_allclose(lazy.eri(("a", "i", "i", "a")), voov, atol=1e-12)
