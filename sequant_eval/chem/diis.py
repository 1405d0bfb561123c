"""Pulay DIIS for the amplitude solver, in memory or with its vectors in an HDF5 file.

``DIIS`` keeps the trial and error vectors as flat arrays; ``HDF5DIIS`` keeps them in a
file and holds two chunks in memory, reading and writing amplitude blocks (in-memory
arrays or on-disk datasets) in ``slabs`` of rows. Both extrapolate with
``pulay_coefficients``.
"""
from __future__ import annotations

import os
from functools import partial
from math import prod
from pathlib import Path
from typing import Any, Mapping

import numpy as np

__all__ = ["DIIS", "HDF5DIIS", "pulay_coefficients", "slabs"]


class DIIS:
    """Pulay's direct inversion in the iterative subspace, on flattened vectors.

    ``push(vector, error)`` stores one trial vector and its error vector (dropping the
    oldest beyond ``space``); ``extrapolate()`` returns ``sum_k c_k vector_k`` with the
    coefficients minimising ``|sum_k c_k error_k|`` subject to ``sum_k c_k = 1``.
    """

    def __init__(self, space: int) -> None:
        self.space = int(space)
        self._vectors: list[np.ndarray] = []
        self._errors: list[np.ndarray] = []
        self._overlap = np.zeros((0, 0))

    def __len__(self) -> int:
        return len(self._vectors)

    def push(self, vector: np.ndarray, error: np.ndarray) -> None:
        """Store a trial vector and its error vector (dropping the oldest beyond ``space``) and
        extend the error overlap matrix."""
        if len(self._vectors) == self.space:
            self._vectors.pop(0)
            self._errors.pop(0)
            self._overlap = self._overlap[1:, 1:]
        self._vectors.append(vector)
        self._errors.append(error)
        row = np.array([float(np.dot(e, error)) for e in self._errors])
        self._overlap = _bordered(self._overlap, row)

    def coefficients(self) -> np.ndarray:
        """Pulay coefficients of the stored vectors (summing to 1)."""
        return pulay_coefficients(self._overlap)

    def extrapolate(self) -> np.ndarray:
        """``sum_k c_k vector_k`` over the stored vectors."""
        c = self.coefficients()
        out = np.zeros_like(self._vectors[-1])
        for ck, vk in zip(c, self._vectors):
            out += ck * vk
        return out

    def push_blocks(self, vector: Mapping[str, np.ndarray],
                    error: Mapping[str, np.ndarray]) -> None:
        """:meth:`push` of blocks (flattened in their order)."""
        self.push(_flat(vector), _flat(error))

    def extrapolate_into(self, blocks: Mapping[str, np.ndarray]) -> None:
        """:meth:`extrapolate`, written into ``blocks`` (flattened in their order)."""
        flat, off = self.extrapolate(), 0
        for b in blocks.values():
            b.reshape(-1)[...] = flat[off:off + b.size]
            off += b.size

    def export(self, group: Any) -> None:
        """Write the store into an HDF5 group (a checkpoint): ``vectors`` and ``errors``
        (one row per stored vector, oldest first) and their ``overlap``."""
        n = self._vectors[0].size if self._vectors else 0
        group.create_dataset("vectors", data=np.reshape(self._vectors, (len(self), n)))
        group.create_dataset("errors", data=np.reshape(self._errors, (len(self), n)))
        group.create_dataset("overlap", data=self._overlap)

    def restore(self, group: Any, adjust=None) -> None:
        """Replace the store by what :meth:`export` wrote (bitwise); ``adjust(values, lo)``,
        when given, changes each row in place as it is read (elements ``lo:`` of it)."""
        vectors, errors = np.asarray(group["vectors"]), np.asarray(group["errors"])
        k = min(len(vectors), self.space)
        rows = range(len(vectors) - k, len(vectors))
        self._vectors = [_adjusted(vectors[j].copy(), adjust) for j in rows]
        self._errors = [_adjusted(errors[j].copy(), adjust) for j in rows]
        self._overlap = np.asarray(group["overlap"], dtype=np.float64)[-k:, -k:] if k else \
            np.zeros((0, 0))


def _adjusted(row: np.ndarray, adjust, lo: int = 0) -> np.ndarray:
    return row if adjust is None else adjust(row, lo)


def _flat(blocks: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(b) for b in blocks.values()]) if blocks else np.zeros(0)


def pulay_coefficients(overlap: np.ndarray) -> np.ndarray:
    """DIIS coefficients from the error overlap matrix ``B``: minimise ``c^T B c`` subject to
    ``sum c = 1`` (the newest vector alone when the subspace is degenerate)."""
    n = overlap.shape[0]
    b = overlap
    scale = float(np.max(np.abs(np.diag(b)))) or 1.0
    lhs = np.zeros((n + 1, n + 1))
    lhs[:n, :n] = b / scale
    lhs[:n, n] = lhs[n, :n] = -1.0
    rhs = np.zeros(n + 1)
    rhs[n] = -1.0
    sol, *_ = np.linalg.lstsq(lhs, rhs, rcond=1e-14)
    c = sol[:n]
    total = float(np.sum(c))
    if not np.all(np.isfinite(c)) or abs(total) < 1e-12:
        c = np.zeros(n)
        c[-1] = 1.0  # degenerate subspace: fall back to the newest vector
    else:
        c = c / total
    return c


class HDF5DIIS:
    """:class:`DIIS` with its vectors in an HDF5 file: memory holds two chunks, not
    ``2 * space`` amplitude vectors.

    ``push_blocks(vector, error)`` writes both to the file (the oldest slot is reused
    beyond ``space``) and adds the overlap row, reading the stored errors one chunk of
    ``chunk_elements`` at a time; ``extrapolate_into(blocks)`` writes
    ``sum_k c_k vector_k`` into ``blocks`` chunk by chunk (the same sums, in the same
    order, as :class:`DIIS`). ``close()`` closes and removes the file.
    """

    def __init__(self, path: str | os.PathLike, space: int,
                 chunk_elements: int = 1 << 17, made_from: str = "") -> None:
        import h5py

        from .scratch import scratch_header

        self.space = int(space)
        self.path = Path(path)
        self.chunk = int(chunk_elements)
        self._slots: list[int] = []                 # file rows, oldest first
        self._overlap = np.zeros((0, 0))
        try:
            self._file = h5py.File(self.path, "w")
            scratch_header(self._file, "diis", made_from)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self._slots)

    def _datasets(self, n: int):
        if "vectors" not in self._file:
            for name in ("vectors", "errors"):
                self._file.create_dataset(name, shape=(self.space, n), dtype=np.float64)
        return self._file["vectors"], self._file["errors"]

    def _chunks(self, blocks: Mapping[str, Any]):
        """``(chunk, global offset, end, store)`` in order: a flat view of an in-memory
        block, or a slab of rows read from an on-disk one (``store(values)`` writes a
        chunk back)."""
        off = 0
        for b in blocks.values():
            if isinstance(b, np.ndarray):
                flat = b.reshape(-1)
                for lo in range(0, flat.size, self.chunk):
                    hi = min(flat.size, lo + self.chunk)
                    part = flat[lo:hi]
                    yield part, off + lo, off + hi, partial(part.__setitem__, Ellipsis)
                off += flat.size
                continue
            for lo, hi in slabs(tuple(b.shape), self.chunk):
                row = prod(b.shape[1:])
                part = np.asarray(b[lo:hi]).reshape(-1)
                yield part, off + lo * row, off + hi * row, partial(_store_rows, b, lo, hi)
            off += prod(b.shape)

    def push_blocks(self, vector: Mapping[str, np.ndarray],
                    error: Mapping[str, np.ndarray]) -> None:
        """:meth:`DIIS.push_blocks` into the file's next slot; the overlap row is summed one
        chunk at a time."""
        n = sum(b.size for b in vector.values())
        vecs, errs = self._datasets(n)
        if len(self._slots) == self.space:
            slot = self._slots.pop(0)
            self._overlap = self._overlap[1:, 1:]
        else:
            slot = len(self._slots)
        for part, lo, hi, _ in self._chunks(vector):
            vecs[slot, lo:hi] = part
        row = np.zeros(len(self._slots) + 1)
        for part, lo, hi, _ in self._chunks(error):
            errs[slot, lo:hi] = part
            for k, other in enumerate(self._slots):
                row[k] += float(np.dot(errs[other, lo:hi], part))
            row[-1] += float(np.dot(part, part))
        self._slots.append(slot)
        self._overlap = _bordered(self._overlap, row)

    def coefficients(self) -> np.ndarray:
        """Pulay coefficients of the stored vectors (summing to 1)."""
        return pulay_coefficients(self._overlap)

    def extrapolate_into(self, blocks: Mapping[str, np.ndarray]) -> None:
        """:meth:`DIIS.extrapolate_into` chunk by chunk, in :class:`DIIS`'s order (two chunks
        in memory at a time)."""
        c = self.coefficients()
        vecs = self._file["vectors"]
        for _, lo, hi, store in self._chunks(blocks):
            acc = np.zeros(hi - lo)
            for ck, slot in zip(c, self._slots):
                buf = vecs[slot, lo:hi]
                buf *= ck
                acc += buf
            store(acc)

    def export(self, group: Any) -> None:
        """:meth:`DIIS.export`, copied one chunk at a time."""
        k = len(self._slots)
        n = self._file["vectors"].shape[1] if "vectors" in self._file else 0
        for name in ("vectors", "errors"):
            out = group.create_dataset(name, shape=(k, n), dtype=np.float64)
            for row, slot in enumerate(self._slots):
                for lo in range(0, n, self.chunk):
                    out[row, lo:lo + self.chunk] = self._file[name][slot, lo:lo + self.chunk]
        group.create_dataset("overlap", data=self._overlap)

    def restore(self, group: Any, adjust=None) -> None:
        """:meth:`DIIS.restore`, copied one chunk at a time."""
        vectors, errors = group["vectors"], group["errors"]
        k, n = min(vectors.shape[0], self.space), vectors.shape[1]
        first = vectors.shape[0] - k
        if k:
            mine = self._datasets(n)
            for slot in range(k):
                for lo in range(0, n, self.chunk):
                    for src, dst in zip((vectors, errors), mine):
                        dst[slot, lo:lo + self.chunk] = _adjusted(
                            np.asarray(src[first + slot, lo:lo + self.chunk]), adjust, lo)
        self._slots = list(range(k))
        self._overlap = np.asarray(group["overlap"], dtype=np.float64)[first:, first:]

    def close(self) -> None:
        """Close the file and remove it (the vectors are scratch; never reused)."""
        from .files import discard

        h5 = getattr(self, "_file", None)
        try:
            if h5 is not None and h5.id.valid:
                h5.close()
        finally:
            discard(self.path)


def slabs(shape: tuple[int, ...], elements: int):
    """``(start, stop)`` row ranges of an array of ``shape``, each at most ``elements``
    elements (at least one row)."""
    if not shape:
        yield 0, 1
        return
    rows = max(1, int(elements) // max(1, prod(shape[1:])))
    for lo in range(0, shape[0], rows):
        yield lo, min(shape[0], lo + rows)


def _store_rows(block: Any, lo: int, hi: int, values: np.ndarray) -> None:
    block[lo:hi] = np.reshape(values, (hi - lo,) + tuple(block.shape[1:]))


def _bordered(overlap: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The symmetric error-overlap matrix grown by one vector: ``row`` (its overlaps with
    the stored errors, itself last) as the new last row and column."""
    n = len(row)
    out = np.empty((n, n))
    out[: n - 1, : n - 1] = overlap
    out[n - 1, :] = row
    out[:, n - 1] = row
    return out
