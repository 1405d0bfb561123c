"""The caller's tensors as the workers of a cluster see them.

A worker reads its own batch slices (``TensorSource`` on the worker, the same readers as in
one process), so what travels is a way to read, not the data:

- an HDF5 dataset travels as its file and name (``H5Dataset``), reopened read-only on the
  worker (once per worker process, and again when the file at that path has changed since:
  another inode, size or mtime);
- a ``np.memmap`` of a whole file region travels as its file, dtype, shape, offset and
  order (``MemoryMap``), reopened read-only (a file now too short for it is a
  ``TruncatedInput``); a view into a map, or a copy-on-write map, is an in-memory array;
- a provider ``provider(spaces, ranges)`` travels as itself (cloudpickle) and is called on
  the worker with that worker's ranges; any other array-like (a zarr array) travels pickled,
  which for zarr is its store's address;
- an in-memory NumPy array is scattered once to every worker (``client.scatter``, broadcast)
  and read there by slice.
"""
from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ...errors import DistributedError, TruncatedInput

__all__ = ["H5Dataset", "MemoryMap", "ship_inputs", "open_inputs"]

#: Per worker process: HDF5 files opened read-only, with (inode, size, mtime) at opening.
_OPEN: dict[str, tuple[object, tuple]] = {}


def _version(path: str) -> tuple:
    """(device, inode, size, mtime) of the file at ``path``; () when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class H5Dataset:
    """An HDF5 dataset by file and name."""

    file: str
    name: str

    def open(self):
        """The dataset, its file opened read-only once per worker process and again when
        the file at the path is another version (a file left open would go on reading
        the replaced one; one still in use by another task closes when that is done)."""
        import h5py

        f, seen = _OPEN.get(self.file, (None, ()))
        now = _version(self.file)
        if f is None or not f.id.valid or seen != now:
            f = h5py.File(self.file, "r")
            _OPEN[self.file] = (f, now)
        return f[self.name]


@dataclass(frozen=True)
class MemoryMap:
    """A NumPy memory map by file, element type, shape, byte offset and order."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    order: str

    def open(self) -> np.memmap:
        """The map, reopened read-only; a file too short for it is refused."""
        need = self.offset + int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize
        version = _version(self.file)
        if version and version[2] < need:
            raise TruncatedInput(
                f"memory map of {self.file}: the file is {version[2]} B, the map needs "
                f"{need} B (offset {self.offset}, shape {self.shape}, {self.dtype}); it was "
                f"truncated after the evaluation began: write it again and rerun")
        return np.memmap(self.file, self.dtype, "r", self.offset, self.shape, self.order)


def _h5(x) -> H5Dataset | None:
    h5py = sys.modules.get("h5py")
    if h5py is None or not isinstance(x, h5py.Dataset):
        return None
    if x.file.mode != "r":              # HDF5 locks a file open for writing against readers
        raise DistributedError(
            f"HDF5 dataset {x.name} of {x.file.filename} is in a file opened for writing "
            f"(mode {x.file.mode!r}); workers cannot open it while this process holds it: "
            f"close it and pass datasets of h5py.File(path, 'r'), or evaluate without client=")
    return H5Dataset(os.path.abspath(x.file.filename), str(x.name))   # workers run elsewhere


def _memmap(x) -> MemoryMap | None:
    """A memmap that is the whole region it maps (not a view into it), else None."""
    if not isinstance(x, np.memmap) or x.filename is None or x.mode == "c":
        return None
    raw = getattr(x, "_mmap", None)
    if raw is None or not (x.flags.c_contiguous or x.flags.f_contiguous):
        return None
    start = x.offset - x.offset % mmap.ALLOCATIONGRANULARITY
    if x.ctypes.data != np.frombuffer(raw, np.uint8).ctypes.data + x.offset - start:
        return None
    if x.mode != "r":
        x.flush()
    return MemoryMap(str(x.filename), x.dtype.str, tuple(x.shape), int(x.offset),
                     "C" if x.flags.c_contiguous else "F")


def ship_inputs(tensors: Mapping[str, object], scatter: Callable[[list], list]) -> dict:
    """``tensors`` with every value replaced by what travels (see the module docstring);
    ``scatter(arrays) -> futures`` sends the in-memory arrays once to every worker."""
    arrays: list = []

    def one(x, name):
        handle = _h5(x) or _memmap(x)
        if handle is not None:
            return handle
        if isinstance(x, np.ndarray):
            arrays.append(np.asarray(x))
            return _Slot(len(arrays) - 1)
        _check_picklable(x, name)
        return x

    shipped = {name: ({k: one(v, name) for k, v in given.items()} if isinstance(given, Mapping)
                      else one(given, name)) for name, given in tensors.items()}
    futures = scatter(arrays) if arrays else []

    def fill(x):
        return futures[x.index] if isinstance(x, _Slot) else x

    return {name: ({k: fill(v) for k, v in given.items()} if isinstance(given, dict)
                   else fill(given)) for name, given in shipped.items()}


def _check_picklable(x, name: str) -> None:
    """A provider or array-like travels as itself: refuse, before any work, one that cannot."""
    try:
        import cloudpickle
    except ImportError:                 # distributed brings it; without it, Dask will say
        return
    try:
        cloudpickle.dumps(x)
    except Exception as err:
        raise DistributedError(
            f"tensor {name!r} ({type(x).__name__}) cannot be sent to the workers "
            f"({type(err).__name__}: {err}); give "
            f"a provider that pickles (no locks, open files or sockets in its closure), an "
            f"h5py dataset or np.memmap (sent by path), or evaluate without client=") from err


@dataclass(frozen=True)
class _Slot:
    index: int


def open_inputs(bundle: Mapping[str, object]) -> dict:
    """On a worker: the shipped tensors, handles reopened (scattered arrays arrive as arrays)."""
    def one(x):
        return x.open() if isinstance(x, (H5Dataset, MemoryMap)) else x

    return {name: ({k: one(v) for k, v in given.items()} if isinstance(given, Mapping)
                   else one(given)) for name, given in bundle.items()}
