"""What identifies an input between evaluations of a persisted evaluator (``fingerprint``):
a NumPy array by a digest of its bytes, a file-backed one by its file's identity, its
attributes and a digest of its content (whole, or sampled slabs beyond a size)."""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from math import prod

import numpy as np

from .backing import MemmapBacking, file_backing

__all__ = ["fingerprint", "EXACT_DIGEST_BYTES", "SAMPLE_SLABS", "SAMPLE_SLAB_BYTES"]

#: A file-backed or other array-like input up to this many bytes is fingerprinted by a
#: digest of all of its content (read ``READ_SLAB_BYTES`` at a time) ...
EXACT_DIGEST_BYTES = 16 << 20
#: ... a larger one by ``SAMPLE_SLABS`` slabs of at most ``SAMPLE_SLAB_BYTES``, spread
#: evenly over it (the first and the last included).
SAMPLE_SLABS = 64
SAMPLE_SLAB_BYTES = 16 << 10
READ_SLAB_BYTES = 256 << 10


def fingerprint(given) -> tuple:
    """What identifies a non-volatile input between evaluations of a persisted evaluator
    (equal prints: its kept intermediates still hold; any difference: they are rebuilt).

    - an in-memory NumPy array: a digest of all its bytes (any change is seen);
    - a provider: never equal (what it returns is unknown, so nothing read from it is
      kept);
    - an h5py dataset: its file (path, device, inode, size, mtime), its name, shape and
      dtype, a digest of its attributes (a checksum or version stored there counts), and
      of its content (below); a ``np.memmap``: the same with its byte offset in the file;
    - another array-like (a zarr array): its identity, shape and dtype, and its content.

    The content of an array-like up to ``EXACT_DIGEST_BYTES`` is digested whole, read
    through the object itself (so a write through the same open h5py file, buffered and
    not yet on disk, is seen); a larger one by ``SAMPLE_SLABS`` slabs spread over it.
    Cost per evaluation and input: two ``stat`` calls, the attributes, and reading the
    content (at most 16 MiB, 256 KiB at a time) or the samples (1 MiB). Not seen: a change
    to an input over 16 MiB that keeps the file's size and mtime (written within one tick
    of the file clock, or through an open h5py file without a flush) and touches no
    sampled slab; name such a tensor volatile."""
    if isinstance(given, Mapping):
        return tuple((k, fingerprint(v)) for k, v in sorted(given.items(), key=repr))
    backing = file_backing(given)
    if backing is not None:
        shape, dtype = tuple(given.shape), str(given.dtype)
        if isinstance(backing, MemmapBacking) and backing.short() is not None:
            return (backing.kind, "truncated", object())   # never read: equal to nothing
        return (backing.kind, backing.identity(), shape, dtype, _content_digest(given))
    if isinstance(given, np.ndarray):
        data = np.ascontiguousarray(given)
        return ("array", given.shape, str(given.dtype),
                hashlib.blake2b(data.view(np.uint8).reshape(-1), digest_size=16).digest())
    if callable(given) and not hasattr(given, "shape"):
        return ("provider", object())             # equal to nothing: always rebuilt
    return ("array-like", type(given).__qualname__, id(given),
            tuple(getattr(given, "shape", ())), str(getattr(given, "dtype", "")),
            _content_digest(given))


class _Slabs:
    """Rectangular pieces that cover an array in C order, each of at most ``limit`` bytes
    (one element at least): the trailing axes that fit whole, runs along the next one,
    every index of the leading ones."""

    def __init__(self, shape: tuple[int, ...], itemsize: int, limit: int) -> None:
        inner, d = itemsize, len(shape)
        while d > 0 and inner * shape[d - 1] <= limit:
            inner *= shape[d - 1]
            d -= 1
        self.shape, self.cut = shape, d            # axis d-1 is cut into runs
        self.run = max(1, limit // inner) if d else 0
        self.runs = -(-shape[d - 1] // self.run) if d else 1
        self.count = prod(shape[:d - 1]) * self.runs if d else 1

    def index(self, k: int) -> tuple:
        """The ``k``-th piece as an index tuple."""
        if not self.cut:
            return (Ellipsis,)
        outer, r = divmod(k, self.runs)
        lead = tuple(int(i) for i in np.unravel_index(outer, self.shape[:self.cut - 1])) \
            if self.cut > 1 else ()
        lo = r * self.run
        return lead + (slice(lo, min(lo + self.run, self.shape[self.cut - 1])),)


def _content_digest(x) -> bytes:
    """A digest of an array-like's content, read through it: all of it up to
    ``EXACT_DIGEST_BYTES``, else ``SAMPLE_SLABS`` slabs evenly spread (first and last
    included). Never holds more than ``READ_SLAB_BYTES`` of it at once."""
    shape = tuple(int(n) for n in x.shape)
    dt = np.dtype(getattr(x, "dtype", np.float64))
    h = hashlib.blake2b(digest_size=16)
    total = prod(shape) * dt.itemsize
    if total == 0 or dt.kind not in "biufc":
        return h.digest()
    exact = total <= EXACT_DIGEST_BYTES
    slabs = _Slabs(shape, dt.itemsize, READ_SLAB_BYTES if exact else SAMPLE_SLAB_BYTES)
    if exact or slabs.count <= SAMPLE_SLABS:
        picks = range(slabs.count)
    else:
        last = slabs.count - 1
        picks = sorted({round(j * last / (SAMPLE_SLABS - 1)) for j in range(SAMPLE_SLABS)})
    for k in picks:
        part = np.ascontiguousarray(np.asarray(x[slabs.index(k)], dtype=dt))
        h.update(k.to_bytes(8, "little"))
        h.update(part.reshape(-1).view(np.uint8))
    return h.digest()
