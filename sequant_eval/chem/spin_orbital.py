"""Spin-orbital integrals for any PySCF reference: RHF, UHF, ROHF or GHF.

An RHF goes through :class:`~sequant_eval.chem.integrals.SpinOrbitalIntegrals` (spin
orbitals ``2P + σ``, PySCF's GHF-from-RHF order).  Any other reference is converted to GHF
(``pyscf.scf.addons.convert_to_ghf``) and served by :class:`GeneralSpinOrbitalIntegrals`:
``f[p, q]`` and ``g[p, q, r, s] = <pq||rs>`` over its spin orbitals, the order of
``pyscf.cc.GCCSD`` on the same GHF, so energies and amplitudes compare directly.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sequant_eval.errors import MissingTensor, ShapeMismatch, UnsupportedFeature

from .integrals import (FockBlocks, SCFNotConverged, SpinOrbitalIntegrals, _frozen_indices,
                        _sub_block, active_orbitals, density_fitted)

__all__ = ["GeneralSpinOrbitalIntegrals", "spin_orbital_integrals", "spin_orbitals_of_frozen"]


def spin_orbital_integrals(mf: Any, frozen: Any = 0):
    """Spin-orbital integral blocks of ``mf``.

    ``frozen`` is PySCF's for the reference: for an RHF, UHF or ROHF it counts spatial
    orbitals *per spin* (``frozen=N``: the ``N`` lowest orbitals of each spin, ``2N`` spin
    orbitals, as ``pyscf.cc.CCSD`` / ``pyscf.cc.UCCSD(frozen=N)``); a list names spatial
    orbital indices frozen in both spins, a pair of lists ``[alpha, beta]`` each spin's (as
    ``UCCSD``). For a GHF it counts spin orbitals (as ``pyscf.cc.GCCSD``).
    """
    if not getattr(mf, "converged", False) or getattr(mf, "mo_coeff", None) is None:
        raise SCFNotConverged(f"the {type(mf).__name__} calculation did not converge; "
                              "converge it before CCSD")
    if density_fitted(mf):
        raise UnsupportedFeature(f"density-fitted mean field ({type(mf).__name__}) is not "
                                 "supported; run a conventional SCF")
    istype = getattr(mf, "istype", None)
    if istype is not None and istype("KohnShamDFT"):
        raise UnsupportedFeature(f"{type(mf).__name__} is a DFT object; CCSD needs a "
                                 "Hartree-Fock reference")
    if istype is not None and istype("RHF") and not istype("ROHF"):
        return SpinOrbitalIntegrals.from_scf(mf, frozen=frozen)
    return GeneralSpinOrbitalIntegrals(mf, frozen)


def _per_spin_lists(frozen: Any) -> tuple[Any, Any] | None:
    """``(alpha, beta)`` when ``frozen`` is a pair of index lists (UCCSD's form), else None."""
    if not isinstance(frozen, (list, tuple)) or len(frozen) != 2:
        return None
    if all(isinstance(x, (list, tuple, range, np.ndarray)) for x in frozen):
        return frozen[0], frozen[1]
    return None


def spin_orbitals_of_frozen(frozen: Any, ghf: Any) -> tuple[int, ...]:
    """PySCF ``UCCSD``'s ``frozen`` (spatial orbitals per spin: a count ``N``, a list of
    indices for both spins, or ``[alpha, beta]`` lists) as the indices of the spin
    orbitals of ``ghf``, a GHF converted from a UHF or ROHF (``convert_to_ghf``, whose
    ``mo_coeff.orbspin`` says the spin of each orbital; the orbitals of one spin keep their
    spatial order)."""
    orbspin = np.asarray(ghf.mo_coeff.orbspin)
    occupied = np.asarray(ghf.mo_occ) > 0
    by_spin = [np.flatnonzero(orbspin == s) for s in (0, 1)]
    nmo = by_spin[0].size
    nocc = [int(np.count_nonzero(occupied[idx])) for idx in by_spin]
    pair = _per_spin_lists(frozen)
    if pair is None:
        same = _frozen_indices(frozen, max(nocc), nmo)
        pair = (same, same)
    out = []
    for s, spatial in enumerate(pair):
        out += [int(by_spin[s][p]) for p in _frozen_indices(list(spatial), nocc[s], nmo)]
    return tuple(sorted(out))


class GeneralSpinOrbitalIntegrals(FockBlocks):
    """``f`` and ``<pq||rs>`` blocks over the spin orbitals of a (converted) GHF.

    ``frozen`` counts spatial orbitals per spin for a UHF or ROHF ``mf`` (PySCF ``UCCSD``'s
    meaning, :func:`spin_orbitals_of_frozen`), spin orbitals for a GHF (``GCCSD``'s).

    Attributes: ``nocc``, ``nvir`` (active spin orbitals), ``frozen`` (the frozen spin
    orbitals' indices), ``nfrozen``, ``e_hf``, ``extents``, ``scf`` (the converted GHF object),
    ``reference`` (the class name of the SCF it was converted from).
    """

    def __init__(self, mf: Any, frozen: Any = 0) -> None:
        from pyscf import scf

        e_tot = float(mf.e_tot)
        ghf = mf if mf.istype("GHF") else scf.addons.convert_to_ghf(mf)
        mo = np.asarray(ghf.mo_coeff)
        if np.iscomplexobj(mo):
            raise UnsupportedFeature("complex GHF orbitals are not supported")
        occ_idx = np.asarray(ghf.mo_occ)
        if ghf is not mf:                        # UHF / ROHF: PySCF counts per spin
            frozen = list(spin_orbitals_of_frozen(frozen, ghf))
        occ, vir, self.frozen = active_orbitals(frozen, occ_idx)
        self.scf, self.nfrozen, self.e_hf = ghf, len(self.frozen), e_tot
        self.reference = type(mf).__name__       # UHF or ROHF: the GHF is converted from it
        self.nocc, self.nvir = occ.size, vir.size
        self.extents: dict[str, int] = {"i": self.nocc, "a": self.nvir}
        fock = mo.T @ ghf.get_fock(dm=ghf.make_rdm1(mo, occ_idx)) @ mo
        active = np.concatenate([occ, vir])
        self._fock = fock[np.ix_(active, active)]
        self._mo = mo[:, active]
        self._nao = mo.shape[0] // 2
        self._slices = {"i": slice(0, self.nocc), "a": slice(self.nocc, self.nocc + self.nvir)}
        self._g: dict[tuple[str, ...], np.ndarray] = {}

    def tensors(self) -> dict[str, Any]:
        """``{"f": fock, "g": eri}`` block providers."""
        return {"f": self.fock, "g": self.eri}

    def eri(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """``<pq||rs>`` block for ``(sp, sq, sr, ss)``, read-only, cached."""
        key = self._check("g", spaces, 4)
        if key not in self._g:
            x, y, z, w = key
            coul = self._chem(x, z, y, w).transpose(0, 2, 1, 3)
            exch = self._chem(x, w, y, z).transpose(0, 2, 3, 1)
            block = np.ascontiguousarray(coul - exch)
            block.setflags(write=False)
            self._g[key] = block
        return _sub_block(self._g[key], ranges)

    def orbitals(self) -> dict[str, np.ndarray]:
        """The GHF coefficients along each amplitude axis (``"i"``, ``"a"``)."""
        return {s: self._mo[:, self._slices[s]] for s in ("i", "a")}

    #: :meth:`block_rows` works on any row range.
    ROW_STEP = 1

    def block_rows(self, tensor: str, spaces: tuple[str, ...], start: int,
                   stop: int) -> np.ndarray:
        """Rows ``start:stop`` (first axis) of block ``spaces`` of ``g``, computed afresh
        (nothing cached, no whole block formed); used to write blocks to disk in slabs."""
        if tensor != "g":
            raise MissingTensor(f"GeneralSpinOrbitalIntegrals writes rows of tensor 'g' only, "
                                f"not {tensor!r}")
        x, y, z, w = self._check("g", spaces, 4)
        n0 = self._slices[x].stop - self._slices[x].start
        if not 0 <= start < stop <= n0:
            raise ShapeMismatch(f"rows {start}:{stop} of block {spaces} of 'g': the first "
                                f"axis has {n0} rows")
        rows = slice(start, stop)
        out = np.ascontiguousarray(self._chem(x, z, y, w, rows=rows).transpose(0, 2, 1, 3))
        exch = out.transpose(0, 1, 3, 2) if z == w else \
            self._chem(x, w, y, z, rows=rows).transpose(0, 2, 3, 1)
        out -= np.array(exch)
        return out

    def _chem(self, *spaces: str, rows: slice = slice(None)) -> np.ndarray:
        """``(XY|ZW)`` over spin orbitals: the sum over the two spins of each electron;
        ``rows`` restricts the orbitals of X."""
        from pyscf import ao2mo

        n = self._nao
        cs = [self._mo[:, self._slices[s]] for s in spaces]
        cs[0] = cs[0][:, rows]
        shape = [c.shape[1] for c in cs]
        out = np.zeros(shape)
        for s1 in (slice(0, n), slice(n, 2 * n)):
            for s2 in (slice(0, n), slice(n, 2 * n)):
                part = ao2mo.general(self.scf.mol, [cs[0][s1], cs[1][s1], cs[2][s2], cs[3][s2]],
                                     compact=False)
                out += np.asarray(part).reshape(shape)
        return out

