"""Where a CC method keeps its integrals and amplitudes: a strategy object, not a mode flag.

``InMemory()`` (the default) keeps everything in memory. ``OnDisk(directory)`` writes the
integral blocks the equations read to an HDF5 file there once (in slabs,
:mod:`sequant_eval.chem.on_disk`) and reads them per batch; while a solve runs, the
doubles amplitudes (``t2``, and ``u2 = 2 t2 - t2~`` for the exchange-folded closed shell)
and the DIIS vectors live in HDF5 files beside it and are updated slab by slab, so the
iteration holds ``t1`` and two slab buffers (:meth:`OnDisk.held_bytes`) besides one residual
evaluation; the budget then bounds the whole iteration. The integral file is reused by
later runs of the same system after its header and checksums verify; the amplitude and
DIIS files are scratch, removed when the solve ends however it ends, and those a killed
run left are removed when the next run starts in the folder (:mod:`~sequant_eval.chem.scratch`).

A strategy answers four questions for the method: its integrals (:meth:`integrals`), what
the solver holds beside each residual (:meth:`held_bytes`), and, per solve, a *session*
(:meth:`session`): the starting amplitudes, the denominators, the DIIS store, the exchange
amplitude ``u2`` the closed-shell residual reads, the amplitudes restored from a checkpoint,
and the converged amplitudes in memory at the end.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputTypeError, UsageError
from .diis import DIIS, HDF5DIIS, slabs
from .solver import SPIN_ORBITAL_SPACES, denominators, mp2_guess, orbital_denominators

__all__ = ["InMemory", "OnDisk", "Storage"]

log = logging.getLogger("sequant_eval.chem")


def _exchange(t2: np.ndarray) -> np.ndarray:
    """``u2 = 2 t2 - t2.transpose(0, 1, 3, 2)`` with one t2-sized array."""
    u2 = np.multiply(t2, 2)
    u2 -= t2.transpose(0, 1, 3, 2)
    return u2


def _shapes(ints: Any, layout: Any) -> dict[str, tuple[int, ...]]:
    """The amplitude blocks' shapes: ``layout``'s (an
    :class:`~sequant_eval.chem.solver.AmplitudeLayout`), else ``t1``, ``t2`` over ``i``/``a``."""
    spaces = SPIN_ORBITAL_SPACES if layout is None else layout.spaces
    return {k: tuple(ints.extents[s] for s in sp) for k, sp in spaces.items()}


class _MemorySession:
    """One in-memory solve: amplitudes, denominators and DIIS vectors as arrays."""

    options: dict[str, Any] = {}

    def __init__(self, ints: Any, diis_space: int, triples: bool, layout: Any = None) -> None:
        self.ints, self.triples, self.layout = ints, triples, layout
        self.diis = DIIS(diis_space) if diis_space >= 2 else None

    def guess(self) -> dict[str, Any]:
        if self.layout is not None:
            return self.layout.mp2_guess(self.ints)
        return mp2_guess(self.ints, triples=self.triples)

    def denominators(self) -> Any:
        if self.layout is not None:
            return self.layout.denominators(self.ints)
        return denominators(self.ints, triples=self.triples)

    def restore(self, amplitudes: Mapping[str, Any], phases: Any = None) -> dict[str, Any]:
        """Amplitudes (solver layout) from a checkpoint group or a dict, as arrays; with
        ``phases`` (a checkpoint's :class:`~sequant_eval.chem.checkpoint.Phases`) their
        orbitals' sign flips applied."""
        out = {k: np.array(v[()] if hasattr(v, "id") else v, dtype=np.float64)
               for k, v in amplitudes.items()}
        if phases is not None:
            for k, x in out.items():
                phases.named(k, x)
        return out

    exchange = staticmethod(_exchange)

    @staticmethod
    def adopt(x: np.ndarray, name: str | None = None) -> np.ndarray:
        """Given amplitudes as the solve works on them (in memory: themselves)."""
        return x

    def finish(self, t: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return dict(t)

    def close(self) -> None:
        pass


class InMemory:
    """Integrals, amplitudes and DIIS vectors in memory (the default storage)."""

    out_of_core = False

    def integrals(self, ints: Any, equations, names, total: float | None) -> Any:
        """The integral object the residual reads: ``ints`` itself."""
        return ints

    def held_bytes(self, ints: Any, layout: Any = None) -> int:
        """Bytes charged to the budget besides the residual: none (the amplitudes and DIIS
        vectors held between residuals are outside the budget)."""
        return 0

    def session(self, ints: Any, diis_space: int, triples: bool = False,
                exchange: bool = False, layout: Any = None) -> _MemorySession:
        """The storage of one solve (``layout``: the method's
        :class:`~sequant_eval.chem.solver.AmplitudeLayout`, None for ``t1``, ``t2``)."""
        return _MemorySession(ints, diis_space, triples, layout)

    def describe(self, ints: Any) -> str | None:
        """A line for the summary (None: nothing to say)."""
        return None

    def __repr__(self) -> str:
        return "InMemory()"


def diis_chunk(ints: Any, layout: Any = None) -> int:
    """Elements per DIIS chunk on disk: an eighth of the amplitudes, within 1 Ki .. 128 Ki."""
    n = sum(int(np.prod(s)) for s in _shapes(ints, layout).values())
    return int(min(1 << 17, max(1 << 10, n // 8)))


class _DiskSession:
    """One lean solve: ``t2`` (and ``u2``) and the DIIS vectors in HDF5 scratch files
    (``amplitudes-PID-TOKEN.h5``, ``diis-PID-TOKEN.h5``), under this process's lock in the
    folder; :meth:`close` removes them, and so does a failure while they are made."""

    def __init__(self, folder: Path, ints: Any, diis_space: int, exchange: bool,
                 layout: Any = None) -> None:
        from .files import storage_error
        from .on_disk import AmplitudeFile
        from .scratch import acquire, token

        self.ints, self.folder, self.diis, self._open = ints, folder, None, True
        self.layout = layout
        acquire(folder)
        try:
            scratch = str(folder / f"{{}}-{os.getpid()}-{token()}.h5")
            made_from = Path(getattr(ints, "path", "")).stem.partition("-")[2]
            self.chunk = diis_chunk(ints, layout)
            shapes = _shapes(ints, layout)
            doubles = {"t2": shapes["t2"]} if layout is None else \
                {k: shapes[k] for k in layout.doubles()}
            self.amplitudes = AmplitudeFile(scratch.format("amplitudes"), doubles, self.chunk,
                                            exchange=exchange, made_from=made_from)
            try:
                if diis_space >= 2:
                    self.diis = HDF5DIIS(scratch.format("diis"), diis_space, self.chunk,
                                         made_from=made_from)
            except OSError as err:
                raise storage_error("DIIS vectors on disk", scratch.format("diis"),
                                    err) from err
        except BaseException:
            self.close()
            raise
        self.options = {"in_place": True, "slab_elements": self.chunk}

    def guess(self) -> dict[str, Any]:
        if self.layout is None:
            return self.amplitudes.mp2_guess(self.ints, orbital_denominators(self.ints))
        d = self.layout.denominators(self.ints)
        on_disk = self.amplitudes.mp2_guess(self.ints, d, self.layout.guess)
        return {k: on_disk[k] if k in on_disk else np.zeros(shape)
                for k, shape in d.shapes.items()}

    def denominators(self) -> Any:
        if self.layout is None:
            return orbital_denominators(self.ints)
        return self.layout.denominators(self.ints)

    def restore(self, amplitudes: Mapping[str, Any], phases: Any = None) -> dict[str, Any]:
        """The singles in memory, the doubles copied slab by slab into the amplitude file
        (with ``phases``' sign flips applied)."""
        out = {}
        for name, source in amplitudes.items():
            block = self.amplitudes.blocks.get(name)
            if block is None:
                x = np.array(source[()] if hasattr(source, "id") else source,
                             dtype=np.float64)
                out[name] = x if phases is None else phases.named(name, x)
                continue
            for lo, hi in slabs(tuple(block.shape), self.chunk):
                slab = np.array(source[lo:hi], dtype=np.float64)
                block[lo:hi] = slab if phases is None else phases.named(name, slab, lo)
            out[name] = block
        return out

    def exchange(self, t2: Any) -> Any:
        self.amplitudes.refresh_exchange()
        return self.amplitudes.u2

    def adopt(self, x: np.ndarray, name: str | None = None) -> np.ndarray:
        """Given amplitudes (the run's orbitals) in the integral file's orbitals."""
        if not hasattr(self.ints, "flip"):
            return np.array(x)
        spaces = None if self.layout is None or name is None else self.layout.spaces[name]
        return self.ints.flip(x, spaces)

    def finish(self, t: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The converged amplitudes, read into memory (in the run's orbitals)."""
        return {k: self.adopt(v[()], k) for k, v in t.items()}

    def close(self) -> None:
        """Remove the scratch files (each even when another fails) and release the lock."""
        from .scratch import release

        if not self._open:
            return
        self._open = False
        try:
            if self.diis is not None:
                self.diis.close()
        finally:
            try:
                if getattr(self, "amplitudes", None) is not None:
                    self.amplitudes.close()
            finally:
                release(self.folder)


class OnDisk:
    """Integral blocks in an HDF5 file in ``directory`` (written once, read per batch; a
    file of the same reference and blocks is reused), the doubles amplitudes and DIIS
    vectors in HDF5 files beside it during a solve. ``slab_bytes``: the writer's slab
    (default 32 MiB, at most a quarter of the budget)."""

    out_of_core = True

    def __init__(self, directory: str | os.PathLike, slab_bytes: float | None = None) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise InputTypeError(f"OnDisk(directory): give a folder path (str or "
                                 f"pathlib.Path), got {type(directory).__name__} {directory!r}")
        self.directory = Path(directory)
        self.slab_bytes = slab_bytes

    def integrals(self, ints: Any, equations, names, total: float | None) -> Any:
        """Write the blocks of ``names`` the equations read to the file (or reuse it) and
        return the :class:`~sequant_eval.chem.on_disk.IntegralFile`; ``total`` is the
        iteration budget in bytes (None: none), which sizes the slabs."""
        from .on_disk import DEFAULT_SLAB_BYTES, IntegralFile, integral_blocks
        from .process_memory import map_large_allocations
        from .scratch import clean

        if self.directory.exists() and not self.directory.is_dir():
            raise UsageError(f"integrals on disk: {self.directory} is a file, not a folder; "
                             "name a folder (the integral file is written inside it)")
        if not self.directory.is_dir():
            raise UsageError(f"integrals on disk: folder {self.directory} does not exist; "
                             "create it first")
        map_large_allocations()     # freed slabs and batches leave the resident set at once
        slab = self.slab_bytes
        if slab is None:
            slab = DEFAULT_SLAB_BYTES if total is None else min(DEFAULT_SLAB_BYTES, total / 4)
        blocks = integral_blocks(equations, ints.extents, names)
        removed = [r for r in clean(self.directory, scratch_only=True, strict=False)
                   if not r.kept]
        for item in removed:
            log.info("removed %s (%s)", item.path, item.why)
        disk = IntegralFile.write(ints, self.directory, blocks, slab_bytes=slab)
        disk.removed = removed
        return disk

    def held_bytes(self, ints: Any, layout: Any = None) -> int:
        """The singles and two slabs (DIIS chunks, or rows of the doubles on disk)."""
        shapes = _shapes(ints, layout).values()
        singles = sum(int(np.prod(s)) for s in shapes if len(s) == 2)
        row = max(int(np.prod(s[1:])) for s in shapes if len(s) == 4)
        return 8 * singles + 16 * max(diis_chunk(ints, layout), row)

    def session(self, ints: Any, diis_space: int, triples: bool = False,
                exchange: bool = False, layout: Any = None) -> _DiskSession:
        """The storage of one solve (scratch files removed by ``close()``)."""
        return _DiskSession(self.directory, ints, diis_space, exchange, layout)

    def describe(self, ints: Any) -> str:
        """``integrals on disk: PATH (SIZE, reused, verified | written | rewritten (why))``,
        the orbitals whose signs were aligned to the file's, the stale scratch files of
        runs that are gone removed before."""
        from ..units import format_bytes

        line = f"integrals on disk: {ints.path} ({format_bytes(ints.written_bytes)}, " \
               f"{ints.status})"
        if ints.signs is not None:
            flipped = sum(int(np.count_nonzero(v < 0)) for v in ints.signs.values())
            line += f", {flipped} orbitals' signs aligned to the file's"
        if ints.removed:
            size = format_bytes(sum(r.size for r in ints.removed))
            line += f"; removed {len(ints.removed)} stale scratch files ({size}) of runs " \
                    "that are gone"
        return line

    def __repr__(self) -> str:
        return f"OnDisk({str(self.directory)!r})"


#: Either strategy.
Storage = InMemory | OnDisk
