"""Closed-shell (spatial-orbital) Fock and two-electron integral blocks from a PySCF RHF.

The closed-shell equations (``data/ccsd_cs.txt``, spin-traced from the spin-orbital ones)
read two tensors over *spatial* orbitals, each block named by one index space per slot
(``"i"`` active occupied, ``"a"`` virtual):

* ``f[p, q]`` the Fock element ``<p|F|q>``, built from the full RHF density (frozen core
  orbitals included), in the MO basis;
* ``g[p, q, r, s] = <pq|rs> = (pr|qs)``, physicist notation, not antisymmetrized;
* ``L[p, q, r, s] = 2<pq|rs> - <pq|sr>`` for the exchange-folded equations.

Frozen orbitals: ``frozen=N`` drops the ``N`` lowest orbitals from the correlation
treatment, ``frozen=[0, 1, 12]`` the orbitals with those indices, occupied or virtual
(PySCF's ``cc.CCSD(mf, frozen=...)``); frozen occupied orbitals stay in the Fock operator
through the density.
Blocks are transformed on first request (``ao2mo.general`` per block), stored contiguous
and read-only, and served again from the cache (one copy per block read).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sequant_eval.errors import MissingTensor, ShapeMismatch, UnsupportedFeature

from .integrals import (FockBlocks, SCFNotConverged, _sub_block, _transform_rows,
                        active_orbitals, density_fitted)

__all__ = ["ClosedShellIntegrals"]


class ClosedShellIntegrals(FockBlocks):
    """Spatial ``f`` and ``<pq|rs>`` blocks of a converged closed-shell RHF reference.

    Attributes
    ----------
    nocc, nvir : int
        Active doubly occupied and virtual spatial orbitals.
    nfrozen : int
        Frozen orbitals (not correlated).
    frozen : tuple[int, ...]
        Their indices.
    e_hf : float
        Total RHF energy (with nuclear repulsion), Hartree.
    extents : dict[str, int]
        ``{"i": nocc, "a": nvir}``.
    scf : pyscf.scf.hf.RHF
        The mean-field object.
    """

    def __init__(self, mf: Any, frozen: Any = 0) -> None:
        mo_coeff = np.asarray(mf.mo_coeff, dtype=np.float64)
        mo_occ = np.asarray(mf.mo_occ)
        occ, vir, self.frozen = active_orbitals(frozen, mo_occ)
        self.nfrozen = len(self.frozen)
        self.scf = mf
        self.nocc, self.nvir = occ.size, vir.size
        self.e_hf = float(mf.e_tot)
        self.extents: dict[str, int] = {"i": self.nocc, "a": self.nvir}
        dm = mf.make_rdm1(mo_coeff, mo_occ)
        fock = mo_coeff.T @ mf.get_fock(dm=dm) @ mo_coeff
        active = np.concatenate([occ, vir])
        self._fock = np.ascontiguousarray(fock[np.ix_(active, active)])
        self._coeff = {"i": mo_coeff[:, occ], "a": mo_coeff[:, vir]}
        self._slices = {"i": slice(0, self.nocc), "a": slice(self.nocc, self.nocc + self.nvir)}
        self._eri_source = mf._eri if getattr(mf, "_eri", None) is not None else mf.mol
        self._g: dict[tuple[str, ...], np.ndarray] = {}

    @classmethod
    def from_scf(cls, mf: Any, frozen: Any = 0) -> "ClosedShellIntegrals":
        """Wrap a converged closed-shell PySCF RHF (refusing UHF, ROHF, DFT, DF, open shells)."""
        kind = type(mf).__name__
        istype = getattr(mf, "istype", None)
        if istype is None or not istype("RHF") or istype("ROHF") or istype("KohnShamDFT"):
            raise UnsupportedFeature(
                f"closed-shell CCSD needs a PySCF RHF object, got {kind}; use "
                "spin_orbital=True for other references")
        if density_fitted(mf):
            raise UnsupportedFeature(f"density-fitted mean field ({kind}) is not supported; "
                                     "run a conventional RHF")
        if mf.mol.spin != 0:
            raise UnsupportedFeature(f"open-shell molecule (spin={mf.mol.spin}): closed-shell "
                                     "CCSD needs spin=0")
        if mf.mo_coeff is None or not mf.converged:
            raise SCFNotConverged(
                f"the {kind} calculation did not converge (e_tot={mf.e_tot}); converge it "
                "(tighter conv_tol, more max_cycle) before CCSD")
        return cls(mf, frozen)

    # ------------------------------------------------------------------ providers
    def tensors(self) -> dict[str, Any]:
        """``{"f": fock, "g": eri, "L": exchange}`` block providers for an evaluator."""
        return {"f": self.fock, "g": self.eri, "L": self.exchange}

    def eri(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """``<pq|rs>`` block for ``(sp, sq, sr, ss)``, read-only, cached; with ``ranges``
        (one ``(start, stop)`` per slot) only that sub-block."""
        key = self._check("g", spaces, 4)
        block = self._g.get(key)
        if block is None:
            x, y, z, w = key
            block = np.ascontiguousarray(self._chem_block(x, z, y, w).transpose(0, 2, 1, 3))
            block.setflags(write=False)
            self._g[key] = block
        return _sub_block(block, ranges)

    def exchange(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """``L[p, q, r, s] = 2<pq|rs> - <pq|sr>`` for ``(sp, sq, sr, ss)``, read by the
        exchange-folded equations (:func:`sequant_eval.expr.exchange.fold_exchange`)."""
        key = ("L",) + self._check("L", spaces, 4)
        block = self._g.get(key)
        if block is None:
            x, y, z, w = key[1:]
            block = 2 * self.eri((x, y, z, w)) - self.eri((x, y, w, z)).transpose(0, 1, 3, 2)
            block.setflags(write=False)
            self._g[key] = block
        return _sub_block(block, ranges)

    def orbitals(self) -> dict[str, np.ndarray]:
        """The MO coefficients along each amplitude axis (``"i"``, ``"a"``: AO x orbitals)."""
        return {s: self._coeff[s] for s in ("i", "a")}

    def clear_cache(self) -> None:
        """Drop every cached integral block."""
        self._g.clear()

    # ------------------------------------------------------------------ internals
    #: :meth:`block_rows` works on any row range.
    ROW_STEP = 1

    def block_rows(self, tensor: str, spaces: tuple[str, ...], start: int,
                   stop: int) -> np.ndarray:
        """Rows ``start:stop`` (first axis) of block ``spaces`` of ``g`` or ``L``, computed
        afresh from ``ao2mo.general`` on those orbitals only (nothing cached, no whole block
        formed); used to write blocks to disk in slabs."""
        if tensor not in ("g", "L"):
            raise MissingTensor(f"ClosedShellIntegrals writes rows of tensors 'g' and 'L', "
                                f"not {tensor!r}")
        x, y, z, w = self._check(tensor, spaces, 4)
        n0 = self._slices[x].stop - self._slices[x].start
        if not 0 <= start < stop <= n0:
            raise ShapeMismatch(f"rows {start}:{stop} of block {spaces} of {tensor!r}: the "
                                f"first axis has {n0} rows")
        coeffs = lambda *sp: [self._coeff[t] for t in sp]
        coul = _transform_rows(self._eri_source, coeffs(x, z, y, w), start, stop)
        out = np.ascontiguousarray(coul.transpose(0, 2, 1, 3))          # <pq|rs> = (pr|qs)
        if tensor == "L":                                 # 2<pq|rs> - <pq|sr>, <pq|sr> = (ps|qr)
            exch = out.transpose(0, 1, 3, 2) if z == w else _transform_rows(
                self._eri_source, coeffs(x, w, y, z), start, stop).transpose(0, 2, 3, 1)
            exch = np.array(exch)                   # before `out` is overwritten below
            out *= 2
            out -= exch
        return out

    def take_block(self, tensor: str, spaces: tuple[str, ...]):
        """Block ``spaces`` of ``g`` handed over and dropped from the cache where it is
        cached (the packed ladder's ``vvvv`` block, made by :meth:`prefetch`), else None."""
        return self._g.pop(self._check(tensor, spaces, 4), None) if tensor == "g" else None

    def prefetch(self, blocks) -> None:
        """Transform the ``(tensor, spaces)`` blocks of ``g`` and ``L`` in one go: one
        four-index transform of all active orbitals (4-fold packed), each block cut from
        it, the packed array dropped. Done only when that array is no bigger than the
        largest block requested (it is then never the peak); otherwise nothing happens and
        blocks are transformed one by one on first request."""
        from pyscf import ao2mo

        chem = set()
        for name, sp in blocks:
            if name in ("g", "L"):
                x, y, z, w = self._check(name, sp, 4)
                chem.add((x, z, y, w))
                if name == "L":
                    chem.add((x, w, y, z))               # and <pq|sr>
        todo = [c for c in sorted(chem) if (c[0], c[2], c[1], c[3]) not in self._g]
        if not todo:
            return
        n = self.nocc + self.nvir
        pairs = n * (n + 1) // 2
        largest = max(np.prod([self.extents[s] for s in c]) for c in todo)
        if pairs * pairs > largest:
            return
        coeff = np.hstack([self._coeff["i"], self._coeff["a"]])
        packed = np.asarray(ao2mo.general(self._eri_source, (coeff,) * 4, compact=True))
        index = np.zeros((n, n), dtype=np.intp)
        rows, cols = np.tril_indices(n)
        index[rows, cols] = index[cols, rows] = np.arange(pairs)
        span = {s: np.arange(self._slices[s].start, self._slices[s].stop) for s in "ia"}
        self._packed = (packed, index, span)
        try:
            for x, z, y, w in todo:
                self.eri((x, y, z, w))
        finally:
            del self._packed

    def _chem_block(self, x: str, y: str, z: str, w: str) -> np.ndarray:
        """``(XY|ZW)`` over spatial orbitals, transformed for this request only (the
        physicist blocks built from it are what is cached: one copy of each), or cut from
        the packed transform while :meth:`prefetch` runs."""
        from pyscf import ao2mo

        if getattr(self, "_packed", None) is not None:
            packed, index, span = self._packed
            first = index[np.ix_(span[x], span[y])].ravel()
            second = index[np.ix_(span[z], span[w])].ravel()
            return packed[np.ix_(first, second)].reshape(
                len(span[x]), len(span[y]), len(span[z]), len(span[w]))

        n = {s: self._coeff[s].shape[1] for s in (x, y, z, w)}
        if n[z] * n[w] < n[x] * n[y]:     # the first half-transform costs most: (ZW|XY)ᵀ
            return np.ascontiguousarray(self._chem_block(z, w, x, y).transpose(2, 3, 0, 1))
        cs = [self._coeff[s] for s in (x, y, z, w)]
        block = np.asarray(ao2mo.general(self._eri_source, cs, compact=False))
        return block.reshape([c.shape[1] for c in cs])

    def __repr__(self) -> str:
        return (f"ClosedShellIntegrals(nocc={self.nocc}, nvir={self.nvir}, "
                f"nfrozen={self.nfrozen}, e_hf={self.e_hf:.10f})")
