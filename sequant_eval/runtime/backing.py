"""File-backed inputs, checked rather than trusted: an h5py dataset or a ``np.memmap`` given
as a tensor is tied to the file it was opened from.

When a ``TensorSource`` is made (every evaluation) the file at the input's path must still
be the one that is open — else ``StaleInput``: the handle would read the replaced file's
old content — and then, and before every read, the file must still be long enough for the
data — else ``TruncatedInput``: HDF5 reads zeros past the end of a truncated file, and a
memory map read there kills the process. ``file_backing(x)`` gives the check for an input
(None for anything not backed by a file).
"""
from __future__ import annotations

import hashlib
import mmap
import os
import sys
import weakref

import numpy as np

from ..errors import StaleInput, TruncatedInput

__all__ = ["FileBacking", "HDF5Backing", "MemmapBacking", "file_backing"]


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:               # gone (or unreadable): nothing at the path to compare
        return None


class FileBacking:
    """Where the bytes of a file-backed array lie, and the checks that they still do."""

    kind = "file"

    def __init__(self, path: str) -> None:
        self.path = path

    def verify(self, tensor: str, replaced: bool = True) -> None:
        """Raise ``TruncatedInput`` when the file no longer holds the array's data and,
        with ``replaced``, ``StaleInput`` when the file at the path is no longer the one
        the array reads. (Before each read only the first: a file replaced during an
        evaluation leaves the open one whole, so that evaluation reads one version.)"""

    def identity(self) -> tuple:
        """What names this version of the file: path, device, inode, size, mtime."""
        st = _stat(self.path)
        return (self.path,) + ((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                               if st is not None else ("missing",))

    def _replaced(self, tensor: str, what: str, open_ino, path_st, way: str) -> StaleInput:
        return StaleInput(
            f"tensor {tensor!r} is {what} of {self.path}, but that file was replaced on "
            f"disk after it was opened (it reads inode {open_ino[1]}, the path now names "
            f"inode {path_st.st_ino}): it would read the old file's content; {way}")


#: Per file open for writing (device, inode, HDF5 file id): the largest size seen on disk.
_SEEN_SIZES: dict[tuple[int, int, int], int] = {}


class HDF5Backing(FileBacking):
    """An h5py dataset in a file on disk (the sec2 or stdio driver).

    Truncated: for a file open read-only, the file on disk is shorter than HDF5 found it
    at open (``H5Fget_filesize``: nothing in this process writes it); for a file open for
    writing (whose disk size lags what the library buffers), the file is shorter than it
    was seen to be while open *and* than the dataset's stored data reaches (its contiguous
    extent, or its last chunk's end). Replaced: the open file's inode (``fstat`` of its
    descriptor) is not the one the path names. A file that is gone from its path is not
    replaced: the open file is all there is to read. Cost: one ``fstat`` per read, and a
    ``stat`` of the path per evaluation."""

    kind = "HDF5 dataset"

    def __init__(self, dset) -> None:
        f = dset.file
        super().__init__(os.path.abspath(f.filename))
        self.dset, self.fid, self.name = dset, f.id, str(dset.name)
        self.writable = f.mode != "r"
        self.fd = f.id.get_vfd_handle() if f.driver == "sec2" else None
        self.on_disk = f.driver in ("sec2", "stdio")
        # read-only: the size HDF5 found at open (max of end of file and of allocation)
        self.at_open = None if self.writable else int(f.id.get_filesize())

    def _open_stat(self) -> os.stat_result | None:
        if self.fd is not None:
            try:
                return os.fstat(self.fd)
            except OSError:
                return None
        return _stat(self.path)

    def verify(self, tensor: str, replaced: bool = True) -> None:
        if not self.on_disk or not self.fid.valid:     # a closed file: the read says so
            return
        st = self._open_stat()
        if st is None:
            return
        now = _stat(self.path) if replaced else None
        if now is not None and (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise self._replaced(tensor, f"HDF5 dataset {self.name}", (st.st_dev, st.st_ino),
                                 now, "open the new file (h5py.File(path, 'r')) and pass "
                                 "its dataset")
        size = st.st_size
        if not self.writable:
            need = self.at_open
        else:
            key = (st.st_dev, st.st_ino, int(self.fid.id))
            seen = _SEEN_SIZES[key] = max(_SEEN_SIZES.get(key, 0), size)
            need = self._stored_end() if size < seen else 0
        if size < need:
            raise TruncatedInput(
                f"tensor {tensor!r} is HDF5 dataset {self.name} of {self.path}, which is "
                f"{size} B on disk but needs {need} B: the file was truncated after it was "
                f"opened, and HDF5 would read zeros past its end; write the file again (or "
                f"restore it) and open it anew")

    def _stored_end(self) -> int:
        """The file offset where the dataset's stored data ends (0: in the header, or
        not stored in this file)."""
        import h5py

        did = self.dset.id
        layout = did.get_create_plist().get_layout()
        if layout == h5py.h5d.CONTIGUOUS:
            offset = did.get_offset()
            return 0 if offset is None else int(offset) + int(did.get_storage_size())
        if layout == h5py.h5d.CHUNKED:
            ends = [0]
            if hasattr(did, "chunk_iter"):
                did.chunk_iter(lambda c: ends.append(int(c.byte_offset) + int(c.size)))
            else:
                for k in range(did.get_num_chunks()):
                    c = did.get_chunk_info(k)
                    ends.append(int(c.byte_offset) + int(c.size))
            return max(ends)
        return 0

    def identity(self) -> tuple:
        st = self._open_stat() if self.on_disk and self.fid.valid else None
        attrs = hashlib.blake2b(digest_size=16)
        for key in sorted(self.dset.attrs):          # a stored checksum or version, if any
            value = np.asarray(self.dset.attrs[key])
            attrs.update(key.encode() + value.dtype.str.encode() + repr(value.shape).encode())
            attrs.update(value.tobytes() if value.dtype.kind != "O" else repr(value).encode())
        stat = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else ()
        return (self.path, self.name) + stat + (attrs.digest(),)


#: Per memory map (the ``mmap`` object): (device, inode) of its file when first seen.
_MAPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class MemmapBacking(FileBacking):
    """A ``np.memmap`` (or a view of one).

    Truncated: the mapped file (``mmap.size()``, an ``fstat`` of the map's own descriptor)
    is shorter than the region mapped. Replaced: the path names another inode than it did
    when this map was first seen here (a map does not say which inode it maps).
    Cost: one ``fstat`` per read, and a ``stat`` of the path per evaluation."""

    kind = "memory map"

    def __init__(self, array: np.memmap) -> None:
        super().__init__(os.path.abspath(array.filename) if array.filename else "")
        self.map = array._mmap
        start = array.offset - array.offset % mmap.ALLOCATIONGRANULARITY
        self.end = start + len(self.map)
        self.offset = (array.ctypes.data - np.frombuffer(self.map, np.uint8).ctypes.data
                       + start)
        if self.path and self.map not in _MAPPED:
            st = _stat(self.path)
            if st is not None:
                _MAPPED[self.map] = (st.st_dev, st.st_ino)

    def short(self) -> int | None:
        """The file's size when it no longer covers the map, else None."""
        try:
            size = self.map.size()
        except (OSError, ValueError):
            return None
        return size if size < self.end else None

    def verify(self, tensor: str, replaced: bool = True) -> None:
        size = self.short()
        if size is not None:
            raise TruncatedInput(
                f"tensor {tensor!r} is a memory map of {self.path} ({self.end} B mapped), "
                f"but the file is now {size} B: it was truncated after it was mapped, and "
                f"reading the map past its end would kill the process; write the file "
                f"again (or restore it) and map it anew")
        if not replaced or not self.path:
            return
        mapped, now = _MAPPED.get(self.map), _stat(self.path)
        if mapped is not None and now is not None and (now.st_dev, now.st_ino) != mapped:
            raise self._replaced(tensor, "a memory map", mapped, now,
                                 "map the new file (np.memmap or np.load(path, "
                                 "mmap_mode='r')) and pass that")

    def identity(self) -> tuple:
        return super().identity() + (self.offset,)


def file_backing(x) -> FileBacking | None:
    """The file behind ``x`` when it is an h5py dataset or a ``np.memmap`` on a file."""
    if isinstance(x, np.memmap):
        if getattr(x, "_mmap", None) is not None:
            return MemmapBacking(x)
        return None
    h5py = sys.modules.get("h5py")
    if h5py is not None and isinstance(x, h5py.Dataset) and x.id.valid:
        return HDF5Backing(x)               # (a closed one: its read fails, typed)
    return None
