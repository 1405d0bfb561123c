"""Spin-orbital Fock and antisymmetrized two-electron integrals from a PySCF RHF.

Equations derived symbolically (spin-orbital coupled cluster) read blocks of two tensors:
the Fock matrix ``f`` and the antisymmetrized integrals ``g``, each block named by one
index space per slot (``"i"`` occupied, ``"a"`` virtual).  The derivation decides which
blocks it reads and in which slot order (``("a","i","i","a")``, ``("a","a","i","i")``, ...),
so this module serves *any* block on demand instead of the handful PySCF's GCCSD stores.

Conventions (identical to PySCF's GHF obtained from an RHF, hence to ``pyscf.cc.GCCSD``,
so amplitudes are directly comparable):

* spatial orbital ``P`` becomes spin orbitals ``2P`` (alpha) and ``2P+1`` (beta);
  occupied spin orbitals come first (``0 .. nocc-1``), then virtuals;
* ``f[p, q]`` is the Fock element ``<p|F|q>`` (bra ``p``, ket ``q``);
* ``g[p, q, r, s] = <pq||rs> = <pq|rs> - <pq|sr>`` in physicist notation, bra ``pq``,
  with ``<pq|rs> = (pr|qs)`` (chemist notation over spatial orbitals, times spin deltas).

Blocks are computed lazily: the spatial MO integrals are transformed once (the whole
``nmo**4`` tensor when it fits ``max_full_eri_bytes``, otherwise per block of spaces),
spin-blocked on request, and cached.  Returned arrays are read-only views of the cache.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sequant_eval.errors import (MissingTensor, SequantEvalError, ShapeMismatch, UnknownSpace,
                                 UnsupportedFeature)

__all__ = ["SCFNotConverged", "SpinOrbitalIntegrals", "BlockProvider", "FockBlocks",
           "full_arrays", "active_orbitals", "density_fitted"]

#: A provider: takes one space name per slot and the element ranges wanted (one
#: ``(start, stop)`` per slot, or None for the whole block) and returns that sub-block.
BlockProvider = Callable[..., np.ndarray]

def check_request(tensor: str, spaces: Any, rank: int, known) -> tuple[str, ...]:
    """The block request ``spaces`` as a tuple of ``rank`` known space names, else a typed
    error naming the tensor (shared by every integral class here)."""
    key = tuple(spaces) if isinstance(spaces, (tuple, list)) else None
    if key is None or len(key) != rank:
        raise ShapeMismatch(f"tensor {tensor!r} has {rank} slots; ask for a tuple of "
                            f"{rank} space names, got {spaces!r}")
    for s in key:
        if s not in known:
            raise UnknownSpace(f"tensor {tensor!r}: unknown index space {s!r} in {key}; "
                               "known spaces: i, a")
    return key


def _sub_block(block: np.ndarray, ranges) -> np.ndarray:
    """``block`` restricted to ``ranges`` (one ``(start, stop)`` per slot; None: all)."""
    if ranges is None:
        return block
    return block[tuple(slice(lo, hi) for lo, hi in ranges)]


def _spin_blocked(coul: np.ndarray, exch: np.ndarray) -> np.ndarray:
    """Spin-orbital ``<pq||rs>`` (index ``2P + sigma``) from spatial ``<PQ|RS>`` and
    ``<PQ|SR>`` arrays of one shape."""
    n = coul.shape
    out = np.zeros((n[0], 2, n[1], 2, n[2], 2, n[3], 2))
    for s in (0, 1):
        for t in (0, 1):
            out[:, s, :, t, :, s, :, t] += coul
            out[:, s, :, t, :, t, :, s] -= exch
    return out.reshape(2 * n[0], 2 * n[1], 2 * n[2], 2 * n[3])


def _transform_rows(eri_source: Any, coeffs: list[np.ndarray], p0: int, p1: int,
                    max_memory_mb: float = 256) -> np.ndarray:
    """``(XY|ZW)`` over MO coefficient sets ``coeffs`` with only columns ``p0:p1`` of the
    first one: ``ao2mo.general`` on that slice (AO integrals in memory when the SCF kept
    them, else computed on the fly within ``max_memory_mb``)."""
    from pyscf import ao2mo

    cs = [coeffs[0][:, p0:p1]] + list(coeffs[1:])
    extra = {} if isinstance(eri_source, np.ndarray) else {"max_memory": max_memory_mb}
    block = ao2mo.general(eri_source, cs, compact=False, **extra)
    return np.asarray(block).reshape([c.shape[1] for c in cs])


def density_fitted(mf: Any) -> bool:
    """Whether ``mf`` is density fitted. Read from the instance: a missing attribute on a
    PySCF SCF object goes through its ``__getattr__``, which imports every PySCF module
    (``pyscf.__all__``, ~17 MiB resident) to look for a method of that name."""
    attrs = getattr(mf, "__dict__", None)
    if attrs is None:
        return getattr(mf, "with_df", None) is not None
    return attrs.get("with_df") is not None


def _frozen_indices(frozen: Any, nocc: int, nmo: int) -> tuple[int, ...]:
    """``frozen`` as sorted orbital indices: a count N is the N lowest orbitals; None
    (PySCF's default) none."""
    if frozen is None:
        return ()
    if isinstance(frozen, (int, np.integer)) and not isinstance(frozen, bool):
        if not 0 <= int(frozen) < nocc:
            raise UnsupportedFeature(
                f"frozen={frozen} must be between 0 and {nocc - 1}: the molecule has {nocc} "
                "occupied orbitals and at least one must stay active")
        return tuple(range(int(frozen)))
    items = list(frozen) if isinstance(frozen, (list, tuple, range, np.ndarray)) else None
    if items is None or not all(isinstance(p, (int, np.integer)) and not isinstance(p, bool)
                                for p in items):
        raise UnsupportedFeature(
            f"frozen={frozen!r}: give the number of lowest orbitals to freeze (an int) or a "
            "list of orbital indices, e.g. [0, 1]")
    for p in items:
        if not 0 <= int(p) < nmo:
            raise UnsupportedFeature(f"frozen={frozen!r}: orbital {p} is not between 0 and "
                                     f"{nmo - 1} (the reference has {nmo} orbitals)")
    return tuple(sorted({int(p) for p in items}))


def active_orbitals(frozen: Any, mo_occ: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """``(occupied, virtual, frozen)``: the indices of the active occupied and virtual
    orbitals and of the frozen ones, from PySCF's ``frozen`` (a number ``N``: the ``N``
    lowest orbitals; or a list of orbital indices, occupied or virtual). Refused
    (``UnsupportedFeature``) unless at least one occupied and one virtual stay active."""
    occ_mask = np.asarray(mo_occ) > 0
    nmo, nocc = occ_mask.size, int(np.count_nonzero(occ_mask))
    if nocc in (0, nmo):
        raise UnsupportedFeature(
            f"the reference has no {'virtual' if nocc else 'occupied'} orbitals ({nocc} of "
            f"its {nmo} orbitals are occupied): there is nothing to correlate"
            + ("; use a larger basis set" if nocc else ""))
    gone = _frozen_indices(frozen, nocc, nmo)
    keep = np.ones(nmo, dtype=bool)
    keep[list(gone)] = False
    occ, vir = np.flatnonzero(keep & occ_mask), np.flatnonzero(keep & ~occ_mask)
    if occ.size == 0 or vir.size == 0:
        raise UnsupportedFeature(f"frozen={frozen!r} leaves no active "
                                 f"{'occupied' if occ.size == 0 else 'virtual'} orbital")
    return occ, vir, gone


class FockBlocks:
    """``fock(spaces, ranges)`` of an integral class that holds the active-orbital Fock
    matrix ``_fock`` (occupied first) and the space → row range map ``_slices``, and the
    request check of its other blocks."""

    _fock: np.ndarray
    _slices: dict[str, slice]

    def _check(self, tensor: str, spaces: Any, rank: int) -> tuple[str, ...]:
        return check_request(tensor, spaces, rank, self._slices)

    def fock(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Fock block for ``(space_p, space_q)``, read-only, shape ``(n_p, n_q)``; with
        ``ranges`` (one ``(start, stop)`` per slot) only that sub-block."""
        sp, sq = check_request("f", spaces, 2, self._slices)
        block = np.ascontiguousarray(self._fock[self._slices[sp], self._slices[sq]])
        block.setflags(write=False)
        return _sub_block(block, ranges)


class SCFNotConverged(SequantEvalError):
    """The mean-field calculation handed over did not converge."""


class SpinOrbitalIntegrals:
    """Spin-orbital ``f`` and ``<pq||rs>`` blocks of a closed-shell RHF reference.

    Build with :meth:`from_molecule` or :meth:`from_scf`; hand :meth:`tensors` to an
    evaluator.

    Attributes
    ----------
    nocc, nvir : int
        Numbers of active occupied and virtual *spin* orbitals (``frozen=N`` leaves the
        ``N`` lowest spatial orbitals, ``2N`` spin orbitals, uncorrelated; a list names
        spatial orbitals, occupied or virtual).
    frozen : tuple[int, ...]
        The frozen spatial orbitals.
    e_hf : float
        Total RHF energy (including nuclear repulsion), Hartree.
    mo_energy : numpy.ndarray
        Spin-orbital energies, shape ``(nocc + nvir,)``: the diagonal of ``f`` (as in
        PySCF's CC ``eris.mo_energy``), i.e. each canonical RHF orbital energy twice.
    extents : dict[str, int]
        ``{"i": nocc, "a": nvir}``.
    scf : pyscf.scf.hf.RHF
        The converged mean-field object the integrals came from.
    """

    def __init__(self, mf: Any, *, max_full_eri_bytes: float = 1 << 30, frozen: Any = 0) -> None:
        mo_all = np.asarray(mf.mo_coeff, dtype=np.float64)
        mo_occ = np.asarray(mf.mo_occ)
        occ, vir, self.frozen = active_orbitals(frozen, mo_occ)
        mo_coeff = mo_all[:, np.concatenate([occ, vir])]
        nocc_sp = occ.size
        self.nfrozen = len(self.frozen)
        self.scf = mf
        self._mo_coeff = mo_coeff
        self._nocc_sp = nocc_sp
        self._nmo_sp = mo_coeff.shape[1]
        self._slices = {
            "i": slice(0, nocc_sp),
            "a": slice(nocc_sp, self._nmo_sp),
        }
        self.nocc = 2 * nocc_sp
        self.nvir = 2 * (self._nmo_sp - nocc_sp)
        self.e_hf = float(mf.e_tot)
        self.extents: dict[str, int] = {"i": self.nocc, "a": self.nvir}

        # Fock matrix rebuilt from the density (as PySCF's CC codes do), in the MO basis.
        dm = mf.make_rdm1(mo_all, mo_occ)     # the full density: frozen core included
        fock_ao = mf.get_fock(dm=dm)
        fock_sp = mo_coeff.T @ fock_ao @ mo_coeff
        self._fock = np.kron(fock_sp, np.eye(2))  # index 2P+sigma, spin-diagonal
        self.mo_energy = np.diagonal(self._fock).copy()

        self._eri_source = mf._eri if getattr(mf, "_eri", None) is not None else mf.mol
        full_bytes = 8.0 * self._nmo_sp**4
        self._eri_full: np.ndarray | None = None
        self._full_allowed = full_bytes <= max_full_eri_bytes
        self._chem_cache: dict[tuple[str, ...], np.ndarray] = {}
        self._g_cache: dict[tuple[str, ...], np.ndarray] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_scf(cls, mf: Any, **kwargs: Any) -> "SpinOrbitalIntegrals":
        """Wrap a converged closed-shell PySCF RHF object.

        Raises
        ------
        UnsupportedFeature
            If ``mf`` is not a closed-shell restricted Hartree-Fock (UHF, ROHF, GHF, DFT,
            open shells) or is density fitted.
        SCFNotConverged
            If ``mf.converged`` is false.
        """
        kind = type(mf).__name__
        istype = getattr(mf, "istype", None)
        if istype is None or not istype("RHF") or istype("ROHF") or istype("KohnShamDFT"):
            raise UnsupportedFeature(
                f"SpinOrbitalIntegrals needs a closed-shell PySCF RHF object, got {kind}"
            )
        if density_fitted(mf):
            raise UnsupportedFeature(f"density-fitted mean field ({kind}) is not supported")
        if mf.mol.spin != 0:
            raise UnsupportedFeature(f"open-shell molecule (spin={mf.mol.spin}) is not supported")
        if mf.mo_coeff is None or not mf.converged:
            raise SCFNotConverged(
                f"the {kind} calculation did not converge (e_tot={mf.e_tot}); "
                "converge it (tighter conv_tol, more max_cycle) before building integrals"
            )
        return cls(mf, **kwargs)

    @classmethod
    def from_molecule(
        cls, name: str, basis: str, *, conv_tol: float = 1e-12, **kwargs: Any
    ) -> "SpinOrbitalIntegrals":
        """Run RHF on a named molecule (see :mod:`sequant_eval.chem.molecules`) and wrap it.

        ``conv_tol`` is PySCF's energy threshold; the orbital-gradient threshold is set to
        ``max(sqrt(conv_tol) / 100, 1e-9)`` so that the Fock matrix is diagonal to ~1e-8.
        """
        from pyscf import scf

        from sequant_eval.chem.molecules import build_molecule

        mol = build_molecule(name, basis)
        mf = scf.RHF(mol)
        mf.conv_tol = conv_tol
        mf.conv_tol_grad = max(conv_tol**0.5 / 100.0, 1e-9)
        mf.max_cycle = 200
        mf.kernel()
        return cls.from_scf(mf, **kwargs)

    # ------------------------------------------------------------------ providers
    def tensors(self) -> dict[str, BlockProvider]:
        """``{"f": fock_provider, "g": eri_provider}``; see :meth:`fock` and :meth:`eri`."""
        return {"f": self.fock, "g": self.eri}

    def fock(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Fock block ``f[p, q]`` for ``spaces = (space_p, space_q)``, e.g. ``("i", "a")``.

        Returns a read-only C-contiguous float64 array of shape
        ``(extents[space_p], extents[space_q])``.
        """
        sp, sq = self._check("f", spaces, 2)
        block = np.ascontiguousarray(self._fock[self._spin_slice(sp), self._spin_slice(sq)])
        block.setflags(write=False)
        return _sub_block(block, ranges)

    def eri(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Antisymmetrized block ``<pq||rs>`` for ``spaces = (sp, sq, sr, ss)``.

        Any order of spaces works, e.g. ``("a", "i", "i", "a")`` gives ``<aj||ib>``
        indexed ``[a, j, i, b]``.  Returns a read-only C-contiguous float64 array of shape
        ``tuple(extents[s] for s in spaces)``; blocks are cached (see :meth:`clear_cache`).
        """
        key = self._check("g", spaces, 4)
        block = self._g_cache.get(key)
        if block is None:
            block = self._spin_block(*key)
            block.setflags(write=False)
            self._g_cache[key] = block
        return _sub_block(block, ranges)

    def orbitals(self) -> dict[str, np.ndarray]:
        """The MO coefficients along each amplitude axis (``"i"``, ``"a"``; spin orbital
        ``2P + σ`` has spatial orbital ``P``'s column)."""
        return {s: np.repeat(self._mo_coeff[:, self._slices[s]], 2, axis=1) for s in ("i", "a")}

    def clear_cache(self) -> None:
        """Drop all cached integral blocks (spatial and spin-orbital)."""
        self._chem_cache.clear()
        self._g_cache.clear()
        self._eri_full = None

    # ------------------------------------------------------------------ internals
    def _check(self, tensor: str, spaces: Any, rank: int) -> tuple[str, ...]:
        return check_request(tensor, spaces, rank, self._slices)

    def _spin_slice(self, space: str) -> slice:
        sl = self._slices[space]
        return slice(2 * sl.start, 2 * sl.stop)

    def _chem(self, x: str, y: str, z: str, w: str) -> np.ndarray:
        """Spatial chemist-notation block ``(XY|ZW)``, shape ``(nX, nY, nZ, nW)``."""
        if self._full_allowed:
            if self._eri_full is None:
                from pyscf import ao2mo

                nmo = self._nmo_sp
                eri = ao2mo.full(self._eri_source, self._mo_coeff, compact=False)
                self._eri_full = np.asarray(eri).reshape(nmo, nmo, nmo, nmo)
            s = self._slices
            return self._eri_full[s[x], s[y], s[z], s[w]]
        key = (x, y, z, w)
        block = self._chem_cache.get(key)
        if block is None:
            from pyscf import ao2mo

            cs = [self._mo_coeff[:, self._slices[t]] for t in key]
            block = ao2mo.general(self._eri_source, cs, compact=False)
            block = np.asarray(block).reshape([c.shape[1] for c in cs])
            self._chem_cache[key] = block
        return block

    def _spin_block(self, x: str, y: str, z: str, w: str) -> np.ndarray:
        """``<pq||rs>`` over spin orbitals for the spaces ``(x, y, z, w)``."""
        coul = self._chem(x, z, y, w).transpose(0, 2, 1, 3)  # <PQ|RS> = (PR|QS)
        exch = self._chem(x, w, y, z).transpose(0, 2, 3, 1)  # <PQ|SR> = (PS|QR)
        return _spin_blocked(coul, exch)

    # ------------------------------------------------------------------ rows, uncached
    #: :meth:`block_rows` is cheapest for row ranges on this grid (one spatial orbital).
    ROW_STEP = 2

    def block_rows(self, tensor: str, spaces: tuple[str, ...], start: int,
                   stop: int) -> np.ndarray:
        """Rows ``start:stop`` (first axis) of block ``spaces`` of ``g``, computed afresh.

        Nothing is cached and no whole block is formed: the spatial integrals of just the
        spatial orbitals under those rows are transformed (``ao2mo.general`` on a slice of
        the MO coefficients), spin-blocked and returned, shape
        ``(stop - start, n_q, n_r, n_s)``. Used to write blocks to disk in slabs.
        """
        if tensor != "g":
            raise MissingTensor(f"SpinOrbitalIntegrals writes rows of tensor 'g' only, "
                                f"not {tensor!r}")
        x, y, z, w = self._check("g", spaces, 4)
        n0 = 2 * (self._slices[x].stop - self._slices[x].start)
        if not 0 <= start < stop <= n0:
            raise ShapeMismatch(f"rows {start}:{stop} of block {spaces} of 'g': the first "
                                f"axis has {n0} rows")
        p0, p1 = start // 2, (stop + 1) // 2
        coul = self._chem_rows((x, z, y, w), p0, p1).transpose(0, 2, 1, 3)
        if z == w:                                           # (PS|QR) = <PQ|SR> = coul^T
            exch = coul.transpose(0, 1, 3, 2)
        else:
            exch = self._chem_rows((x, w, y, z), p0, p1).transpose(0, 2, 3, 1)
        out = _spin_blocked(coul, exch)
        lo = start - 2 * p0
        return out[lo:lo + stop - start]

    def _chem_rows(self, spaces: tuple[str, ...], p0: int, p1: int) -> np.ndarray:
        """Spatial ``(XY|ZW)`` restricted to orbitals ``p0:p1`` of X; never cached."""
        return _transform_rows(self._eri_source,
                               [self._mo_coeff[:, self._slices[t]] for t in spaces], p0, p1)

    def __repr__(self) -> str:
        return (
            f"SpinOrbitalIntegrals(nocc={self.nocc}, nvir={self.nvir}, "
            f"e_hf={self.e_hf:.10f}, basis={self.scf.mol.basis!r})"
        )


def full_arrays(ints) -> tuple[np.ndarray, np.ndarray]:
    """``f[p, q]`` and ``g[p, q, r, s] = <pq||rs>`` over all active spin orbitals of
    spin-orbital integrals (``nocc`` occupied first, ``fock``/``eri`` blocks): whole arrays,
    for oracles and other codes."""
    no, nv = ints.nocc, ints.nvir
    sl = {"i": slice(0, no), "a": slice(no, no + nv)}
    f, g = np.zeros((no + nv,) * 2), np.zeros((no + nv,) * 4)
    for p in "ia":
        for q in "ia":
            f[sl[p], sl[q]] = ints.fock((p, q))
            for r in "ia":
                for t in "ia":
                    g[sl[p], sl[q], sl[r], sl[t]] = ints.eri((p, q, r, t))
    return f, g
