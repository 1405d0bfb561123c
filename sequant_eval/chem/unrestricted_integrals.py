"""Alpha/beta Fock and two-electron integral blocks of a PySCF UHF or ROHF reference.

The unrestricted equations (``data/ccsd_u.txt``, spin-integrated from the spin-orbital
ones) read five tensors over *spatial* orbitals of each spin, each block named by one
index space per slot: ``"i"``/``"a"`` the active occupied/virtual α orbitals,
``"I"``/``"A"`` the β ones:

* ``fa[p, q]``, ``fb[P, Q]``: the α and β Fock matrices ``<p|F_σ|q>``, built from the
  full density (frozen core included), in the MO basis — all blocks, so a non-canonical
  reference is exact;
* ``gaa[p, q, r, s] = <pq||rs> = (pr|qs) - (ps|qr)`` over α orbitals, ``gbb`` over β;
* ``gab[p, Q, r, S] = <pQ|rS> = (pr|QS)``, ``p, r`` α and ``Q, S`` β (no exchange part).

An ROHF is taken as PySCF's ``UCCSD`` takes it: converted to a UHF with the same orbitals
for both spins (``scf.addons.convert_to_uhf``). Its orbitals are not canonical for either
spin's Fock operator: the off-diagonal blocks of ``fa`` and ``fb`` (``f_ia`` included) are
*carried* into the equations, not rotated away (no semicanonicalization); the solver's
denominators use only their diagonals, which changes the path to convergence, not the
converged energy (PySCF's ``UCCSD`` on the same ROHF does the same).

``frozen`` is PySCF ``UCCSD``'s: a number ``N`` freezes the ``N`` lowest orbitals of each
spin, a list of indices the same orbitals of both spins, a pair of lists ``[alpha,
beta]`` each spin's (:func:`~sequant_eval.chem.spin_orbital.spin_orbitals_of_frozen`
reads the same forms for the spin-orbital path). Blocks are transformed on first request
(``ao2mo.general`` on the coefficient sets of the four spaces), stored contiguous and
read-only, and served again from the cache.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sequant_eval.errors import MissingTensor, ShapeMismatch, UnsupportedFeature

from .integrals import (SCFNotConverged, _sub_block, _transform_rows, active_orbitals,
                        check_request, density_fitted)
from .spin_orbital import _per_spin_lists

__all__ = ["UnrestrictedIntegrals", "SPIN_SPACES", "per_spin_frozen"]

#: The spaces of each spin: α occupied/virtual, β occupied/virtual.
SPIN_SPACES = (("i", "a"), ("I", "A"))

#: Per tensor, the spin (0 α, 1 β) of each slot.
_SLOT_SPINS = {"fa": (0, 0), "fb": (1, 1), "gaa": (0, 0, 0, 0), "gbb": (1, 1, 1, 1),
               "gab": (0, 1, 0, 1)}


def per_spin_frozen(frozen: Any) -> tuple[Any, Any]:
    """PySCF ``UCCSD``'s ``frozen`` as ``(alpha, beta)``: a number or a list of indices
    for both spins, or a pair of lists each spin's."""
    pair = _per_spin_lists(frozen)
    return pair if pair is not None else (frozen, frozen)


class UnrestrictedIntegrals:
    """α/β ``fa``, ``fb``, ``gaa``, ``gab``, ``gbb`` blocks of a converged UHF or ROHF.

    Attributes
    ----------
    nocc, nvir : tuple[int, int]
        Active occupied and virtual orbitals of each spin (α, β), as PySCF's
        ``UCCSD.nocc`` / ``nmo``.
    frozen : tuple[int, ...]
        The frozen orbitals: α orbital ``p`` as ``p``, β orbital ``p`` as ``nmo + p``
        (``frozen_per_spin`` has them apart).
    nfrozen : int
        Frozen orbitals of both spins together (``frozen=1``: 2).
    e_hf : float
        The reference energy (``mf.e_tot``), Hartree.
    extents : dict[str, int]
        ``{"i": nocc_a, "a": nvir_a, "I": nocc_b, "A": nvir_b}``.
    scf
        The UHF object (for an ROHF, the UHF it was converted to); ``reference`` the class
        name of the SCF handed over.
    """

    #: :meth:`block_rows` works on any row range.
    ROW_STEP = 1
    #: The Fock tensors and the spaces each is over (an integral file keeps all blocks).
    FOCK = {"fa": SPIN_SPACES[0], "fb": SPIN_SPACES[1]}
    #: The blocks the MP2 guess reads (an integral file always holds them).
    GUESS_BLOCKS = (("gaa", ("a", "a", "i", "i")), ("gab", ("a", "A", "i", "I")),
                    ("gbb", ("A", "A", "I", "I")))

    def __init__(self, mf: Any, frozen: Any = 0) -> None:
        from pyscf import scf

        self.reference = type(mf).__name__
        uhf = mf if mf.istype("UHF") else scf.addons.convert_to_uhf(mf)
        mo = np.asarray(uhf.mo_coeff, dtype=np.float64)
        mo_occ = np.asarray(uhf.mo_occ)
        nmo = mo.shape[2]
        fock_ao = uhf.get_fock(dm=uhf.make_rdm1(mo, mo_occ))    # frozen core included
        self._coeff: dict[str, np.ndarray] = {}
        self._fock, self._slices, frozen_spin = [], [], []
        for spin, spin_frozen in enumerate(per_spin_frozen(frozen)):
            o, v = SPIN_SPACES[spin]
            try:
                occ, vir, gone = active_orbitals(spin_frozen, mo_occ[spin])
            except UnsupportedFeature as err:
                raise UnsupportedFeature(
                    f"{'αβ'[spin]} spin: {err}; the unrestricted equations need an active "
                    "occupied and virtual orbital of each spin (a reference with one spin "
                    "empty, e.g. an H atom, runs through its spin orbitals: CCSD(mf) picks "
                    "that, or spin_orbital=True)") from None
            active = np.concatenate([occ, vir])
            self._coeff[o], self._coeff[v] = mo[spin][:, occ], mo[spin][:, vir]
            f = mo[spin].T @ fock_ao[spin] @ mo[spin]
            self._fock.append(np.ascontiguousarray(f[np.ix_(active, active)]))
            self._slices.append({o: slice(0, occ.size), v: slice(occ.size, active.size)})
            frozen_spin.append(tuple(gone))
        self.frozen_per_spin = tuple(frozen_spin)
        self.frozen = frozen_spin[0] + tuple(nmo + p for p in frozen_spin[1])
        self.nfrozen = len(self.frozen)
        self.scf, self.e_hf = uhf, float(mf.e_tot)
        self.extents = {s: self._coeff[s].shape[1] for s in ("i", "a", "I", "A")}
        self.nocc = (self.extents["i"], self.extents["I"])
        self.nvir = (self.extents["a"], self.extents["A"])
        self._eri_source = uhf._eri if getattr(uhf, "_eri", None) is not None else uhf.mol
        self._g: dict[tuple[str, ...], np.ndarray] = {}

    @classmethod
    def from_scf(cls, mf: Any, frozen: Any = 0) -> "UnrestrictedIntegrals":
        """Wrap a converged PySCF UHF or ROHF (refusing RHF, GHF, DFT, density fitting)."""
        kind = type(mf).__name__
        istype = getattr(mf, "istype", None)
        if istype is None or istype("KohnShamDFT") or istype("GHF") or not (
                istype("UHF") or istype("ROHF")):
            raise UnsupportedFeature(
                f"unrestricted CCSD needs a PySCF UHF or ROHF object, got {kind}; use "
                "sequant_eval.chem.CCSD(mf), which picks the method for the reference")
        if density_fitted(mf):
            raise UnsupportedFeature(f"density-fitted mean field ({kind}) is not supported; "
                                     "run a conventional UHF or ROHF")
        if getattr(mf, "mo_coeff", None) is None or not mf.converged:
            raise SCFNotConverged(
                f"the {kind} calculation did not converge (e_tot={mf.e_tot}); converge it "
                "(tighter conv_tol, more max_cycle) before CCSD")
        return cls(mf, frozen)

    # ------------------------------------------------------------------ providers
    def tensors(self) -> dict[str, Any]:
        """``fa``, ``fb``, ``gaa``, ``gab``, ``gbb`` block providers for an evaluator."""
        return {name: (lambda spaces, ranges=None, name=name: self.block(name, spaces, ranges))
                for name in _SLOT_SPINS}

    def block(self, tensor: str, spaces: Any, ranges=None) -> np.ndarray:
        """Block ``spaces`` of ``tensor`` (read-only; with ``ranges``, one ``(start,
        stop)`` per slot, only that sub-block); the two-electron blocks are cached."""
        key = self._check(tensor, spaces)
        if tensor in ("fa", "fb"):
            spin = _SLOT_SPINS[tensor][0]
            sl = self._slices[spin]
            out = np.ascontiguousarray(self._fock[spin][sl[key[0]], sl[key[1]]])
            out.setflags(write=False)
            return _sub_block(out, ranges)
        block = self._g.get((tensor,) + key)
        if block is None:
            block = self._physicist(tensor, key)
            block.setflags(write=False)
            self._g[(tensor,) + key] = block
        return _sub_block(block, ranges)

    def fock_diagonal(self, space: str) -> np.ndarray:
        """The diagonal of the Fock matrix of ``space``'s spin over ``space`` (its orbital
        energies for a canonical UHF)."""
        name = "fa" if space in SPIN_SPACES[0] else "fb"
        return np.ascontiguousarray(np.diagonal(self.block(name, (space, space))))

    def orbitals(self) -> dict[str, np.ndarray]:
        """The MO coefficients along each amplitude axis (``"i"``, ``"a"``, ``"I"``,
        ``"A"``: AO x orbitals)."""
        return dict(self._coeff)

    def clear_cache(self) -> None:
        """Drop every cached integral block."""
        self._g.clear()

    # ------------------------------------------------------------------ rows, uncached
    def block_rows(self, tensor: str, spaces: tuple[str, ...], start: int,
                   stop: int) -> np.ndarray:
        """Rows ``start:stop`` (first axis) of block ``spaces`` of ``gaa``, ``gab`` or
        ``gbb``, computed afresh from ``ao2mo.general`` on those orbitals only (nothing
        cached, no whole block formed); used to write blocks to disk in slabs."""
        if tensor not in ("gaa", "gab", "gbb"):
            raise MissingTensor(f"UnrestrictedIntegrals writes rows of gaa, gab and gbb, not "
                                f"{tensor!r}")
        key = self._check(tensor, spaces)
        n0 = self.extents[key[0]]
        if not 0 <= start < stop <= n0:
            raise ShapeMismatch(f"rows {start}:{stop} of block {spaces} of {tensor!r}: the "
                                f"first axis has {n0} rows")
        return self._physicist(tensor, key, slice(start, stop))

    # ------------------------------------------------------------------ internals
    def _check(self, tensor: str, spaces: Any) -> tuple[str, ...]:
        spins = _SLOT_SPINS.get(tensor)
        if spins is None:
            raise MissingTensor(f"the unrestricted integrals have no tensor {tensor!r}; they "
                                f"serve {', '.join(_SLOT_SPINS)}")
        key = check_request(tensor, spaces, len(spins), self.extents)
        for slot, (space, spin) in enumerate(zip(key, spins)):
            if space not in SPIN_SPACES[spin]:
                raise ShapeMismatch(
                    f"tensor {tensor!r} slot {slot + 1} is {'αβ'[spin]}: ask for space "
                    f"{' or '.join(SPIN_SPACES[spin])}, got {space!r} in {key}")
        return key

    def _physicist(self, tensor: str, key: tuple[str, ...], rows: slice = slice(None)):
        """``<pq|rs>`` (``gab``) or ``<pq||rs>`` (``gaa``, ``gbb``) for spaces ``key``,
        rows ``rows`` of the first axis: a new contiguous array."""
        x, y, z, w = key
        out = np.ascontiguousarray(self._chem((x, z, y, w), rows).transpose(0, 2, 1, 3))
        if tensor != "gab":                         # <pq|sr> = (ps|qr)
            exch = out.transpose(0, 1, 3, 2) if z == w else \
                self._chem((x, w, y, z), rows).transpose(0, 2, 3, 1)
            out -= np.array(exch)
        return out

    def _chem(self, spaces: tuple[str, ...], rows: slice) -> np.ndarray:
        """``(XY|ZW)`` over the coefficient sets of ``spaces``, orbitals ``rows`` of X."""
        n = self.extents[spaces[0]]
        p0, p1, _ = rows.indices(n)
        return _transform_rows(self._eri_source, [self._coeff[s] for s in spaces], p0, p1)

    def __repr__(self) -> str:
        return (f"UnrestrictedIntegrals(nocc={self.nocc}, nvir={self.nvir}, "
                f"nfrozen={self.nfrozen}, e_hf={self.e_hf:.10f})")
