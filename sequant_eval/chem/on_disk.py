"""Integral blocks written once to an HDF5 file and served to the evaluator from disk.

The CC equations read a handful of blocks of the two-electron integrals (``g{a,a;a,a}``,
``g{a,i;i,a}``, ...). :meth:`IntegralFile.write` computes each block in slabs along its
first axis (``block_rows`` of the in-memory integral classes: ``ao2mo.general`` on a slice
of the MO coefficients, spin-blocked for spin orbitals) and writes each slab before the
next is computed, so no whole block is ever in memory: the writer holds one slab
(``slab_bytes``) and the spatial integrals under it. :meth:`IntegralFile.tensors` then
hands the evaluator a block mapping of ``h5py`` datasets, which it reads per batch
(``docs/design.md`` §5.7): every batch is charged its footprint and read from the file
when needed. The Fock matrix is small and stays in memory.

The file is named after the reference (geometry, basis, orbitals, frozen core and the
blocks), so a second run on the same mean field reuses it; it is written under a temporary
name and renamed when complete, so a half-written file is never read.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sequant_eval.errors import MissingTensor, SequantEvalError, UsageError

from .files import discard, storage_error
from .integrals import _sub_block
from .process_memory import release_free_memory
from .diis import slabs
from .solver import OrbitalDenominators

__all__ = ["IntegralFile", "AmplitudeFile", "integral_blocks", "DEFAULT_SLAB_BYTES"]

#: The writer's slab: at most this many bytes of one block are computed at a time.
DEFAULT_SLAB_BYTES = 32 << 20

_FORMAT = 1


def integral_blocks(equations, extents: Mapping[str, int],
                    tensors: Iterable[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(tensor, spaces)`` of every block of ``tensors`` the equations read, sorted."""
    from sequant_eval.api import Evaluator
    from sequant_eval.forest.values import ValueKind

    wanted = set(tensors)
    forest = Evaluator(equations, extents).forest
    return tuple(sorted({(v.tensor, tuple(v.spaces)) for v in forest.values
                         if v.kind is ValueKind.LEAF and v.tensor in wanted}))


def _dataset_name(tensor: str, spaces: tuple[str, ...]) -> str:
    return f"{tensor}/{','.join(spaces)}"


def _fingerprint(ints: Any, blocks) -> str:
    """A digest of what the integrals depend on: molecule and basis (PySCF's ``_atm``,
    ``_bas``, ``_env``), orbitals, frozen orbitals, the integral class and the blocks."""
    mf = ints.scf
    mol = mf.mol
    h = hashlib.sha256()
    h.update(f"{_FORMAT}:{type(ints).__name__}:{tuple(ints.frozen)}:{sorted(ints.extents.items())}"
             f":{blocks}".encode())
    for part in (mol._atm, mol._bas, mol._env, np.asarray(mf.mo_coeff), np.asarray(mf.mo_occ)):
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()[:16]


class IntegralFile:
    """Integral blocks of one reference in an HDF5 file, read per batch by the evaluator.

    Build with :meth:`write`. It stands in for the in-memory integral classes wherever the
    solver needs them: ``nocc``, ``nvir``, ``frozen``, ``nfrozen``, ``e_hf``, ``extents``, ``scf``,
    ``fock(spaces, ranges)``, ``eri(spaces, ranges)`` (read from disk, never cached) and
    :meth:`tensors` for the evaluator. ``path`` is the file, ``written_bytes`` the bytes of
    the blocks in it, ``reused`` whether an existing complete file was opened instead.
    """

    def __init__(self, path: Path, ints: Any, fock: dict[tuple[str, ...], np.ndarray],
                 h5: Any, reused: bool) -> None:
        self.path = path
        self.nocc, self.nvir = ints.nocc, ints.nvir
        self.frozen, self.nfrozen = tuple(ints.frozen), ints.nfrozen
        self.e_hf = ints.e_hf
        self.extents = dict(ints.extents)
        self.scf = ints.scf
        self.kind = type(ints).__name__
        self.reused = reused
        self._orbitals = {s: np.array(c) for s, c in ints.orbitals().items()}
        self._fock = fock
        self._h5 = h5
        self._data: dict[str, dict[tuple[str, ...], Any]] = {}
        for tensor in h5:
            for name, ds in h5[tensor].items():
                self._data.setdefault(tensor, {})[tuple(name.split(","))] = ds
        self.written_bytes = sum(ds.size * ds.dtype.itemsize
                                 for blocks in self._data.values() for ds in blocks.values())

    # ------------------------------------------------------------------ construction
    @classmethod
    def write(cls, ints: Any, directory: str | os.PathLike,
              blocks: Iterable[tuple[str, tuple[str, ...]]], *,
              slab_bytes: float = DEFAULT_SLAB_BYTES, reuse: bool = True) -> "IntegralFile":
        """Write ``blocks`` (``(tensor, spaces)`` pairs) of ``ints`` to an HDF5 file in
        ``directory`` and open it for reading.

        ``ints`` is an in-memory integral object with ``block_rows`` (spin-orbital or
        closed-shell); nothing it caches is filled. Each block is computed and written in
        slabs of at most ``slab_bytes`` (at least one row step), so the writer's peak is
        one slab plus the spatial integrals under it: within two slabs and a fixed
        ~128 KiB (h5py objects, NumPy's ufunc buffers; ``tests/chem/test_out_of_core.py``).
        ``g{a,a;i,i}`` is always included (the MP2 guess reads it).

        Raises
        ------
        UsageError
            ``directory`` does not exist.
        StorageError
            ``directory`` cannot be written (read-only) or the disk is full.
        """
        import h5py

        folder = Path(directory)
        if not folder.is_dir():
            raise UsageError(f"integrals on disk: folder {folder} does not exist; create it "
                             f"first")
        if not hasattr(ints, "block_rows"):
            raise MissingTensor(f"{type(ints).__name__} cannot write its integrals in slabs "
                                f"(no block_rows); use a spin-orbital or closed-shell RHF")
        blocks = tuple(sorted(set(blocks) | {("g", ("a", "a", "i", "i"))}))
        path = folder / f"integrals-{_fingerprint(ints, blocks)}.h5"
        fock = {}
        for sp in (("i", "i"), ("i", "a"), ("a", "i"), ("a", "a")):
            fock[sp] = np.array(ints.fock(sp))
            fock[sp].setflags(write=False)
        if reuse and path.is_file():
            try:
                h5 = h5py.File(path, "r")
                if h5.attrs.get("complete", False) and all(
                        _dataset_name(t, s) in h5 for t, s in blocks):
                    return cls(path, ints, fock, h5, reused=True)
                h5.close()
            except OSError:
                pass                                  # unreadable: written afresh below
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            with h5py.File(partial, "w") as h5:
                h5.attrs["format"] = _FORMAT
                h5.attrs["integrals"] = type(ints).__name__
                for tensor, spaces in blocks:
                    _write_block(h5, ints, tensor, spaces, slab_bytes)
                h5.attrs["complete"] = True
            os.replace(partial, path)
            release_free_memory()
        except OSError as err:
            discard(partial)
            raise storage_error("integrals on disk", partial, err) from err
        return cls(path, ints, fock, h5py.File(path, "r"), reused=False)

    # ------------------------------------------------------------------ providers
    def tensors(self) -> dict[str, Any]:
        """``{"f": {spaces: array}, "g": {spaces: h5py dataset}, ...}`` for the evaluator."""
        return {"f": dict(self._fock), **{t: dict(b) for t, b in self._data.items()}}

    def fock(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Fock block for ``(space_p, space_q)`` (in memory, read-only)."""
        return _sub_block(self._fock[tuple(spaces)], ranges)

    def eri(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Block ``spaces`` of ``g`` (or its sub-block at ``ranges``), read from the file."""
        return self._read("g", spaces, ranges)

    def exchange(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Block ``spaces`` of ``L`` (closed shell), read from the file."""
        return self._read("L", spaces, ranges)

    def orbitals(self) -> dict[str, np.ndarray]:
        """The orbitals of the integrals written (see the in-memory classes)."""
        return self._orbitals

    def close(self) -> None:
        """Close the file (the evaluator cannot read it afterwards)."""
        self._h5.close()

    def _read(self, tensor: str, spaces, ranges) -> np.ndarray:
        key = tuple(spaces)
        ds = self._data.get(tensor, {}).get(key)
        if ds is None:
            raise MissingTensor(f"{self.path} holds no block {key} of {tensor!r}; it holds "
                                f"{sorted((t, s) for t, b in self._data.items() for s in b)}")
        if ranges is None:
            return ds[()]
        return ds[tuple(slice(lo, hi) for lo, hi in ranges)]

    def __repr__(self) -> str:
        return (f"IntegralFile({str(self.path)!r}, {self.kind}, nocc={self.nocc}, "
                f"nvir={self.nvir}, {self.written_bytes / 2**30:.2f} GiB)")


def _write_block(h5: Any, ints: Any, tensor: str, spaces: tuple[str, ...],
                 slab_bytes: float) -> None:
    """One dataset, written in slabs of whole rows (a multiple of ``ints.ROW_STEP``)."""
    shape = tuple(ints.extents[s] for s in spaces)
    ds = h5.create_dataset(_dataset_name(tensor, spaces), shape=shape, dtype=np.float64)
    row_bytes = 8 * int(np.prod(shape[1:], dtype=np.int64))
    step = getattr(ints, "ROW_STEP", 1)
    rows = max(step, int(slab_bytes // max(1, row_bytes)) // step * step)
    for start in range(0, shape[0], rows):
        stop = min(shape[0], start + rows)
        slab = ints.block_rows(tensor, spaces, start, stop)
        if slab.shape != (stop - start,) + shape[1:]:
            raise SequantEvalError(f"block_rows of {tensor}{spaces} rows {start}:{stop} "
                                   f"returned shape {slab.shape}")
        ds[start:stop] = slab
        del slab


class AmplitudeFile:
    """The doubles amplitudes of a lean (out-of-core) solve in an HDF5 file, updated in place.

    ``t2`` (and, for the exchange-folded closed-shell equations, ``u2 = 2 t2 - t2~``) are
    datasets the evaluator reads per batch and the solver updates slab by slab
    (``slab_elements`` at a time), so no doubles-sized array is held between residuals:
    the iteration then holds ``t1`` and a slab or two besides the residual. The file is
    scratch: :meth:`close` removes it.
    """

    def __init__(self, path: str | os.PathLike, t2_shape: tuple[int, ...],
                 slab_elements: int, exchange: bool = False) -> None:
        import h5py

        self.path = Path(path)
        self.slab = int(slab_elements)
        try:
            self._h5 = h5py.File(self.path, "w")
        except OSError as err:
            raise storage_error("amplitudes on disk", self.path, err) from err
        self.t2 = self._h5.create_dataset("t2", shape=t2_shape, dtype=np.float64)
        self.u2 = self._h5.create_dataset("u2", shape=t2_shape, dtype=np.float64) \
            if exchange else None

    def mp2_guess(self, ints: Any, d: OrbitalDenominators) -> dict[str, Any]:
        """``t1 = 0`` and ``t2 = g{a,a;i,i} / D2`` written slab by slab (the amplitudes
        :func:`~sequant_eval.chem.solver.mp2_guess` makes in memory, bitwise)."""
        shape = tuple(self.t2.shape)
        for lo, hi in slabs(shape, self.slab):
            part = np.asarray(ints.eri(("a", "a", "i", "i"),
                                       [(lo, hi)] + [(0, n) for n in shape[1:]]),
                              dtype=np.float64)
            d.divide("t2", part, start=lo)
            self.t2[lo:hi] = part
        return {"t1": np.zeros(d.shapes["t1"]), "t2": self.t2}

    def refresh_exchange(self) -> None:
        """``u2 = 2 t2 - t2.transpose(0, 1, 3, 2)`` from the current ``t2``, slab by slab."""
        for lo, hi in slabs(tuple(self.t2.shape), self.slab):
            t2 = np.asarray(self.t2[lo:hi])
            u2 = np.multiply(t2, 2)
            u2 -= t2.transpose(0, 1, 3, 2)
            self.u2[lo:hi] = u2

    def close(self) -> None:
        """Close the file and remove it."""
        if self._h5.id.valid:
            self._h5.close()
        discard(self.path)
