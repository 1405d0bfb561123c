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

The file is named after what the integrals are made of — a canonical description
(:mod:`~sequant_eval.chem.provenance`: molecule, geometry, basis, charge and spin, the
reference, the frozen orbitals, the blocks), with no bit-exact float of the SCF in it — so
two runs of one system, each with its own SCF, name one file. Its header holds the format
version, that description, the orbitals it was written with and a checksum per block. A
second run reuses it only after checking all of these (the orbitals to 1e-8 with each
orbital's sign aligned: an SCF may return an orbital with the other sign, and the solve
then works in the file's orbitals, :meth:`IntegralFile.flip`); a file that does not
verify (changed after it was written, of another system or format, unreadable) is never
used but written afresh, and the run summary says which happened ("reused, verified",
"written", "rewritten (why)"). It is written under a temporary name and renamed when
complete, so a half-written file is never read; the temporary is removed on any failure,
and one left by a killed run is removed by the next (:mod:`~sequant_eval.chem.scratch`).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from sequant_eval.errors import FileMismatch, MissingTensor, SequantEvalError, UsageError

from .files import discard, storage_error
from .integrals import _sub_block
from .provenance import (FORMAT, Checksum, dataset_checksum, description, description_key,
                         differing_parts, orbital_signs, rows_per_slab)
from .scratch import owned, scratch_header, token
from .process_memory import release_free_memory
from .diis import slabs
from .solver import OrbitalDenominators

__all__ = ["IntegralFile", "AmplitudeFile", "integral_blocks", "DEFAULT_SLAB_BYTES"]

#: The writer's slab: at most this many bytes of one block are computed at a time.
DEFAULT_SLAB_BYTES = 32 << 20

log = logging.getLogger("sequant_eval.chem")


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


def _block_label(tensor: str, spaces: tuple[str, ...]) -> str:
    return f"{tensor}{{{','.join(spaces)}}}"


class IntegralFile:
    """Integral blocks of one reference in an HDF5 file, read per batch by the evaluator.

    Build with :meth:`write`. It stands in for the in-memory integral classes wherever the
    solver needs them: ``nocc``, ``nvir``, ``frozen``, ``nfrozen``, ``e_hf``, ``extents``, ``scf``,
    ``fock(spaces, ranges)``, ``eri(spaces, ranges)`` (read from disk, never cached) and
    :meth:`tensors` for the evaluator. ``path`` is the file, ``written_bytes`` the bytes of
    the blocks in it; ``status`` says where it came from: ``"written"``, ``"reused,
    verified"`` (an existing file whose header and checksums matched) or ``"rewritten
    (why)"`` (an existing file that did not verify); ``reused`` is whether it was reused.

    ``signs``: None, or per space (``"i"``, ``"a"``) the sign (±1 per orbital) of the
    file's orbitals relative to the run's, when the SCF returned some orbitals with the
    other sign. The file's orbitals are then the ones the solve works in: :meth:`fock`
    and :meth:`orbitals` are given in them, and :meth:`flip` takes amplitudes from one
    to the other (the method applies it to the amplitudes it is given and returns).
    """

    def __init__(self, path: Path, ints: Any, h5: Any, status: str,
                 signs: dict[str, np.ndarray] | None = None) -> None:
        self.path = path
        self.nocc, self.nvir = ints.nocc, ints.nvir
        self.frozen, self.nfrozen = tuple(ints.frozen), ints.nfrozen
        self.e_hf = ints.e_hf
        self.extents = dict(ints.extents)
        self.scf = ints.scf
        self.kind = type(ints).__name__
        self.status, self.reused, self.signs = status, status.startswith("reused"), signs
        self.removed: list = []                   # stale scratch removed before (OnDisk)
        one = {s: np.ones(n) for s, n in self.extents.items()}
        sign = signs or one
        self._orbitals = {s: np.array(c) * sign[s] for s, c in ints.orbitals().items()}
        self._focks: dict[str, dict[tuple[str, ...], np.ndarray]] = {}
        for tensor, spaces in getattr(ints, "FOCK", {"f": ("i", "a")}).items():
            read = ints.fock if tensor == "f" else partial(ints.block, tensor)
            for sp in itertools.product(spaces, repeat=2):
                block = np.array(read(sp)) * np.outer(sign[sp[0]], sign[sp[1]])
                block.setflags(write=False)
                self._focks.setdefault(tensor, {})[sp] = block
        self._fock = self._focks.get("f", {})
        self._h5 = h5
        self._data: dict[str, dict[tuple[str, ...], Any]] = {}
        for tensor, spaces in _stored_blocks(h5):
            self._data.setdefault(tensor, {})[spaces] = h5[_dataset_name(tensor, spaces)]
        self.written_bytes = sum(ds.size * ds.dtype.itemsize
                                 for blocks in self._data.values() for ds in blocks.values())

    # ------------------------------------------------------------------ construction
    @classmethod
    def write(cls, ints: Any, directory: str | os.PathLike,
              blocks: Iterable[tuple[str, tuple[str, ...]]], *,
              slab_bytes: float = DEFAULT_SLAB_BYTES, reuse: bool = True) -> "IntegralFile":
        """Write ``blocks`` (``(tensor, spaces)`` pairs) of ``ints`` to an HDF5 file in
        ``directory`` and open it for reading — or reuse the file there of the same
        reference, after verifying it.

        The file is named after the canonical description of what the integrals depend
        on (:func:`~sequant_eval.chem.provenance.description`), so two SCF runs of one
        system name one file. An existing file is reused only when its header (format,
        description, orbitals to :data:`~sequant_eval.chem.provenance.ORBITAL_TOLERANCE`
        with the signs aligned) and the checksum of every block match; otherwise it is
        rewritten (``status`` says why). ``ints`` is an in-memory integral object with
        ``block_rows``; nothing it caches is filled. Each block is computed and written in
        slabs of at most ``slab_bytes`` (at least one row step), so the writer's peak is
        one slab plus the spatial integrals under it: within two slabs and a fixed
        ~128 KiB (h5py objects, NumPy's ufunc buffers; ``tests/chem/test_out_of_core.py``);
        verifying reads one slab at a time. ``g{a,a;i,i}`` is always included (the MP2
        guess reads it; the unrestricted integrals name theirs, ``GUESS_BLOCKS``). The file is written under a temporary name
        (``integrals-KEY.PID.TOKEN.partial``, removed on any failure) and renamed when
        complete.

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
        guess = getattr(ints, "GUESS_BLOCKS", (("g", ("a", "a", "i", "i")),))
        blocks = tuple(sorted(set(blocks) | set(guess)))
        desc = description(ints, blocks)
        path = folder / f"integrals-{description_key(desc)}.h5"
        status = "written"
        if reuse and path.is_file():
            try:
                h5, signs = _open_verified(path, desc, ints, blocks, slab_bytes)
                return cls(path, ints, h5, "reused, verified", signs)
            except FileMismatch as err:
                status = f"rewritten ({'; '.join(err.reasons)})"
                log.warning("integrals on disk: %s does not verify (%s); writing it afresh",
                            path, "; ".join(err.reasons))
        _write_file(path, ints, desc, blocks, slab_bytes)
        return cls(path, ints, h5py.File(path, "r"), status)

    # ------------------------------------------------------------------ providers
    def tensors(self) -> dict[str, Any]:
        """``{"f": {spaces: array}, "g": {spaces: h5py dataset}, ...}`` for the evaluator
        (the unrestricted ``fa``, ``fb``, ``gaa``, ``gab``, ``gbb`` likewise)."""
        return {**{t: dict(b) for t, b in self._focks.items()},
                **{t: dict(b) for t, b in self._data.items()}}

    def fock(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Fock block for ``(space_p, space_q)`` (in memory, read-only)."""
        return _sub_block(self._fock[tuple(spaces)], ranges)

    def block(self, tensor: str, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Block ``spaces`` of any tensor in the file or of a Fock matrix (in memory)."""
        fock = self._focks.get(tensor)
        if fock is not None:
            return _sub_block(fock[tuple(spaces)], ranges)
        return self._read(tensor, spaces, ranges)

    def fock_diagonal(self, space: str) -> np.ndarray:
        """The Fock diagonal over ``space`` (of whichever Fock matrix holds it)."""
        for blocks in self._focks.values():
            if (space, space) in blocks:
                return np.ascontiguousarray(np.diagonal(blocks[(space, space)]))
        raise MissingTensor(f"{self.path} has no Fock block over space {space!r}")

    def eri(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Block ``spaces`` of ``g`` (or its sub-block at ``ranges``), read from the file."""
        return self._read("g", spaces, ranges)

    def exchange(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        """Block ``spaces`` of ``L`` (closed shell), read from the file."""
        return self._read("L", spaces, ranges)

    def orbitals(self) -> dict[str, np.ndarray]:
        """The orbitals of the integrals in the file (the run's, with :attr:`signs`)."""
        return self._orbitals

    def flip(self, x: np.ndarray, spaces: tuple[str, ...] | None = None) -> np.ndarray:
        """Amplitudes (one block, solver layout: virtual axes first; ``spaces`` its axes'
        spaces, by default ``a..a i..i``) taken between the run's orbitals and the file's
        (:attr:`signs`; its own inverse); a new array."""
        x = np.array(x, dtype=np.float64)
        if self.signs is None:
            return x
        n = x.ndim // 2
        for axis, space in enumerate(spaces or "a" * n + "i" * n):
            x *= self.signs[space].reshape((-1,) + (1,) * (x.ndim - axis - 1))
        return x

    def verify(self) -> None:
        """Recompute the checksum of every block; a block that differs from the one
        written (the file was changed since) is a :class:`FileMismatch`."""
        blocks = [(t, s) for t, b in self._data.items() for s in b]
        reasons = _check_blocks(self._h5, blocks, self.extents, DEFAULT_SLAB_BYTES)
        if reasons:
            raise FileMismatch(f"{self.path} does not verify: {'; '.join(reasons)}",
                               self.path, tuple(reasons))

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
                f"nvir={self.nvir}, {self.written_bytes / 2**30:.2f} GiB, {self.status})")


def _stored_blocks(h5: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The ``(tensor, spaces)`` blocks a file holds (its header's list)."""
    out = []
    for label in json.loads(h5.attrs["description"])["blocks"]:
        tensor, _, spaces = label.partition("{")
        out.append((tensor, tuple(spaces.rstrip("}").split(","))))
    return out


# ---------------------------------------------------------------------- writing
def _write_file(path: Path, ints: Any, desc: dict, blocks, slab_bytes: float) -> None:
    """The whole file, through a ``.partial`` beside it (removed on any failure), under
    this process's lock in the folder (:mod:`~sequant_eval.chem.scratch`)."""
    import h5py

    partial = path.with_name(f"{path.stem}.{os.getpid()}.{token()}.partial")
    with owned(path.parent):
        try:
            with h5py.File(partial, "w") as h5:
                h5.attrs["format"], h5.attrs["writer"] = FORMAT, "sequant-eval"
                h5.attrs["kind"], h5.attrs["integrals"] = "integrals", type(ints).__name__
                h5.attrs["description"] = json.dumps(desc, sort_keys=True)
                for space, coeff in ints.orbitals().items():
                    h5.create_dataset(f"header/orbitals/{space}",
                                      data=np.asarray(coeff, dtype=np.float64))
                for tensor, spaces in blocks:
                    _write_block(h5, ints, tensor, spaces, slab_bytes)
                h5.attrs["complete"] = True
            os.replace(partial, path)
        except OSError as err:
            discard(partial)
            raise storage_error("integrals on disk", partial, err) from err
        except BaseException:
            discard(partial)
            raise
    release_free_memory()


def _write_block(h5: Any, ints: Any, tensor: str, spaces: tuple[str, ...],
                 slab_bytes: float) -> None:
    """One dataset, written in slabs of whole rows (a multiple of ``ints.ROW_STEP``), and
    its checksum (attribute ``checksum``) over the slabs as written."""
    shape = tuple(ints.extents[s] for s in spaces)
    ds = h5.create_dataset(_dataset_name(tensor, spaces), shape=shape, dtype=np.float64)
    step = getattr(ints, "ROW_STEP", 1)
    rows = max(step, rows_per_slab(shape, slab_bytes) // step * step)
    checksum = Checksum()
    for start in range(0, shape[0], rows):
        stop = min(shape[0], start + rows)
        slab = ints.block_rows(tensor, spaces, start, stop)
        if slab.shape != (stop - start,) + shape[1:]:
            raise SequantEvalError(f"block_rows of {tensor}{spaces} rows {start}:{stop} "
                                   f"returned shape {slab.shape}")
        ds[start:stop] = slab
        checksum.update(slab)
        del slab
    ds.attrs["checksum"] = checksum.text()


# ---------------------------------------------------------------------- verifying
def _open_verified(path: Path, desc: dict, ints: Any, blocks, slab_bytes: float):
    """``(h5, signs)``: the file at ``path`` open for reading, its header and every
    block's checksum matching this run's; else a FileMismatch naming what differs."""
    import h5py

    try:
        h5 = h5py.File(path, "r")
    except OSError as err:
        reason = f"unreadable ({str(err).splitlines()[0]})"
        raise FileMismatch(f"{path} does not verify: {reason}", path, (reason,)) from err
    try:
        reasons, signs = _check_header(h5, desc, ints)
        if not reasons:
            reasons = _check_blocks(h5, blocks, ints.extents, slab_bytes)
    except BaseException:
        h5.close()
        raise
    if reasons:
        h5.close()
        raise FileMismatch(f"{path} does not verify: {'; '.join(reasons)}", path,
                           tuple(reasons))
    return h5, signs


def _check_header(h5: Any, desc: dict, ints: Any):
    """``(reasons, signs)``: what in the header differs from this run's (format,
    completeness, description, orbitals), and the orbitals' signs when nothing does."""
    fmt = h5.attrs.get("format")
    if fmt != FORMAT:
        return [f"format {fmt} (this version writes {FORMAT})"], None
    if not h5.attrs.get("complete", False) or "description" not in h5.attrs:
        return ["incomplete"], None
    stored = json.loads(h5.attrs["description"])
    parts = differing_parts(stored, desc)
    if parts:
        return [f"made from another system (differs in: {', '.join(parts)})"], None
    group = h5.get("header/orbitals")
    orbitals = {s: np.asarray(d[()]) for s, d in group.items()} if group is not None else {}
    signs, reason = orbital_signs(orbitals, {s: np.asarray(c, dtype=np.float64)
                                             for s, c in ints.orbitals().items()})
    if reason is not None:
        return [reason], None
    if all(np.all(v > 0) for v in signs.values()):
        signs = None
    return [], signs


def _check_blocks(h5: Any, blocks, extents, slab_bytes: float) -> list[str]:
    """What is wrong with the blocks: missing, another shape, no checksum, or a checksum
    that differs from the one written."""
    out = []
    for tensor, spaces in blocks:
        label = _block_label(tensor, spaces)
        ds = h5.get(_dataset_name(tensor, spaces))
        shape = tuple(extents[s] for s in spaces)
        if ds is None or tuple(ds.shape) != shape or ds.dtype != np.float64:
            out.append(f"block {label} is missing or has another shape")
            continue
        stored = ds.attrs.get("checksum")
        try:
            ok = stored is not None and dataset_checksum(ds, slab_bytes) == str(stored)
        except OSError as err:
            out.append(f"block {label} cannot be read ({str(err).splitlines()[0]})")
            continue
        if not ok:
            out.append(f"block {label} checksum differs (the file was changed after it was "
                       "written)")
    return out


class AmplitudeFile:
    """The doubles amplitudes of a lean (out-of-core) solve in an HDF5 file, updated in place.

    ``t2`` (and, for the exchange-folded closed-shell equations, ``u2 = 2 t2 - t2~``; or
    the doubles blocks named in ``t2_shape``, a mapping name -> shape: the unrestricted
    ``t2aa``, ``t2ab``, ``t2bb``, in :attr:`blocks`) are datasets the evaluator reads per
    batch and the solver updates slab by slab
    (``slab_elements`` at a time), so no doubles-sized array is held between residuals:
    the iteration then holds ``t1`` and a slab or two besides the residual. The file is
    scratch: :meth:`close` removes it (and a failure while it is made); its header says
    what it is and whose (:func:`scratch_header`), and it is never reused: one a killed
    run left is removed by the next run (:mod:`~sequant_eval.chem.scratch`).
    """

    def __init__(self, path: str | os.PathLike,
                 t2_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]],
                 slab_elements: int, exchange: bool = False, made_from: str = "") -> None:
        import h5py

        self.path = Path(path)
        self.slab = int(slab_elements)
        shapes = dict(t2_shape) if isinstance(t2_shape, Mapping) else {"t2": t2_shape}
        self.blocks: dict[str, Any] = {}
        self.t2 = self.u2 = None
        try:
            self._h5 = h5py.File(self.path, "w")
            scratch_header(self._h5, "amplitudes", made_from)
            for name, shape in shapes.items():
                self.blocks[name] = self._h5.create_dataset(name, shape=shape,
                                                            dtype=np.float64)
            self.t2 = self.blocks.get("t2")
            self.u2 = self._h5.create_dataset("u2", shape=shapes["t2"], dtype=np.float64) \
                if exchange else None
        except BaseException as err:
            self.close()
            if isinstance(err, OSError):
                raise storage_error("amplitudes on disk", self.path, err) from err
            raise

    def mp2_guess(self, ints: Any, d: OrbitalDenominators,
                  numerators: Mapping[str, tuple[str, tuple[str, ...]]] | None = None
                  ) -> dict[str, Any]:
        """``t1 = 0`` and ``t2 = g{a,a;i,i} / D2`` written slab by slab (the amplitudes
        :func:`~sequant_eval.chem.solver.mp2_guess` makes in memory, bitwise); with
        ``numerators`` (block name -> ``(tensor, spaces)``), each of those blocks so, and
        no singles."""
        if numerators is None:
            self._guess(ints.eri, "t2", ("a", "a", "i", "i"), d)
            return {"t1": np.zeros(d.shapes["t1"]), "t2": self.t2}
        for name, (tensor, spaces) in numerators.items():
            self._guess(partial(ints.block, tensor), name, spaces, d)
        return dict(self.blocks)

    def _guess(self, read, name: str, spaces: tuple[str, ...], d: OrbitalDenominators):
        block = self.blocks[name]
        shape = tuple(block.shape)
        for lo, hi in slabs(shape, self.slab):
            part = np.asarray(read(spaces, [(lo, hi)] + [(0, n) for n in shape[1:]]),
                              dtype=np.float64)
            d.divide(name, part, start=lo)
            block[lo:hi] = part

    def refresh_exchange(self) -> None:
        """``u2 = 2 t2 - t2.transpose(0, 1, 3, 2)`` from the current ``t2``, slab by slab."""
        for lo, hi in slabs(tuple(self.t2.shape), self.slab):
            t2 = np.asarray(self.t2[lo:hi])
            u2 = np.multiply(t2, 2)
            u2 -= t2.transpose(0, 1, 3, 2)
            self.u2[lo:hi] = u2

    def close(self) -> None:
        """Close the file and remove it."""
        h5 = getattr(self, "_h5", None)
        try:
            if h5 is not None and h5.id.valid:
                h5.close()
        finally:
            discard(self.path)

