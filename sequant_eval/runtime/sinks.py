"""Result sinks: an equation result written batch by batch to the caller's destination.

``se.evaluate(..., out={"R3": dest})`` hands the result ``R3`` to ``dest`` instead of
holding it: each write the schedule makes into the result's sum (a batch of a term
escaping its block, a whole term, a streamed input block) goes to ``dest`` as it is made,
so the result is never held whole and the prediction counts only what a write holds
(``schedule/peak.py: sink_write_bytes``). ``dest`` is

- an array written in place (a NumPy array, an ``np.memmap``): zeroed, then every write
  added into its region;
- a dataset (an h5py dataset, a zarr array: ``shape``, ``dtype`` and NumPy-style slicing,
  not an ndarray): zeroed, then every write read, added into and written back, piece by
  piece (``sink_piece``: at most 256 KiB a piece, whatever the batch);
- a callable ``sink(spaces, ranges, block)``: each slice of the result handed over once,
  finished — ``spaces`` the result's space names, ``ranges`` one ``(start, stop)`` per axis,
  ``block`` a contiguous array in the result's layout that the sink may keep. Only for a
  result written once per slice (one term, whole or batched over open loops only); else
  ``SinkError`` before any work (an array or dataset accumulates instead).
"""
from __future__ import annotations

import inspect
import itertools
import mmap
import os
from collections.abc import Callable, Mapping
import numpy as np

from ..errors import SequantEvalError, SinkError
from ..plan.loops import LoopKind
from ..schedule.analysis import ScheduleAnalysis
from ..schedule.forms import FormKind
from ..schedule.peak import folded_into, sink_piece, sink_piece_bytes, sink_write_bytes
from .backends import add_scaled
from .sources import closed_dataset

__all__ = ["Sink", "sink_kind", "make_sink", "make_sinks", "check_sinks"]


def sink_kind(name: str, dest: object) -> str:
    """``"accumulate"`` for an array or dataset, ``"once"`` for a callable (else refused)."""
    if closed_dataset(dest):
        raise SinkError(f"out[{name!r}] is an HDF5 dataset whose file is closed; keep the "
                        f"file open (h5py.File(path, 'r+')) until the evaluation returns")
    if isinstance(dest, type):
        pass                               # a class (np.ndarray itself): not a destination
    elif hasattr(dest, "shape") and hasattr(dest, "__setitem__"):
        return "accumulate"
    elif callable(dest):
        return "once"
    raise SinkError(f"out[{name!r}] is a {type(dest).__name__}; a sink is a NumPy array, an "
                    f"np.memmap, an h5py dataset or zarr array of the result's shape, or a "
                    f"callable sink(spaces, ranges, block)")


class Sink:
    """One result's destination: ``open`` zeroes it (accumulating sinks), ``add`` takes one
    write. Both return the bytes they held while running (the static rule's figure), and
    write only when ``write`` (a dry run meters without data)."""

    def __init__(self, name: str, dest, spaces: tuple[str, ...], shape: tuple[int, ...],
                 dtype: np.dtype) -> None:
        self.name, self.dest, self.spaces = name, dest, spaces
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.kind = sink_kind(name, dest)

    def open(self, write: bool = True, fill: bool | None = None) -> int:
        """Zero the destination, piece by piece: an accumulating sink always, a callable
        only when ``fill`` (a result whose terms all cancelled: zeros are its slices)."""
        if fill is None:
            fill = self.kind == "accumulate"
        if not fill:
            return 0
        if write:
            self._fill()
        return sink_piece_bytes(self.shape, self.itemsize)

    def add(self, at, perm, alpha: float, src, write: bool = True) -> int:
        """``dest[at] += alpha * src.transpose(perm)`` (``at``: per result axis a ``(start,
        stop)`` or ``None`` for the whole axis; ``perm`` ``None``: ``src`` is in the
        result's order)."""
        shape = tuple(src.shape) if perm is None else tuple(src.shape[q] for q in perm)
        if write:
            view = np.asarray(src) if perm is None else np.asarray(src).transpose(perm)
            offset = tuple(0 if at is None or at[k] is None else int(at[k][0])
                           for k in range(len(shape)))
            self._add(offset, view, float(alpha))
        return sink_write_bytes(self.kind, shape, alpha, self.itemsize)

    def _pieces(self, shape: tuple[int, ...]):
        """Index tuples (local to a region of ``shape``) of its pieces, in order."""
        j, rows = sink_piece(shape, self.itemsize)
        if j < 0:
            yield ()
            return
        for head in itertools.product(*(range(n) for n in shape[:j])):
            for lo in range(0, shape[j], rows):
                yield tuple(slice(h, h + 1) for h in head) + (
                    slice(lo, min(lo + rows, shape[j])),) + tuple(
                    slice(0, n) for n in shape[j + 1:])

    def _fill(self) -> None:
        raise NotImplementedError

    def _add(self, offset: tuple[int, ...], view, alpha: float) -> None:
        raise NotImplementedError


def _shift(local: tuple[slice, ...], offset: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(o + s.start, o + s.stop) for s, o in zip(local, offset))


class _ArraySink(Sink):
    """A NumPy array or memmap: added into in place (a scaled addend piece by piece)."""

    def _fill(self) -> None:
        self.dest[...] = 0

    def _add(self, offset, view, alpha) -> None:
        region = self.dest[_shift(tuple(slice(0, n) for n in view.shape), offset)] \
            if view.ndim else self.dest[...]
        add_scaled(region, view, alpha)           # a scaled addend piece by piece


class _DatasetSink(Sink):
    """An h5py dataset or zarr array: read, added into and written back piece by piece."""

    def _fill(self) -> None:
        zeros = None
        for local in self._pieces(self.shape):
            shape = tuple(s.stop - s.start for s in local)
            if zeros is None:                  # the first piece is the largest
                zeros = np.zeros(shape, self.dest.dtype)
            self.dest[local] = zeros[tuple(slice(0, n) for n in shape)]

    def _add(self, offset, view, alpha) -> None:
        for local in self._pieces(view.shape):
            where = _shift(local, offset)
            cur = np.asarray(self.dest[where])
            add_scaled(cur, view[local], alpha)
            self.dest[where] = cur


class _CallableSink(Sink):
    """A callable: each finished slice handed over once, as its own contiguous array."""

    def _fill(self) -> None:
        for local in self._pieces(self.shape):
            self._hand(tuple(s.start for s in local),
                       np.zeros(tuple(s.stop - s.start for s in local), self.dtype))

    def _add(self, offset, view, alpha) -> None:
        block = np.empty(view.shape, view.dtype)
        np.multiply(view, alpha, out=block)
        self._hand(offset, block)

    def _hand(self, offset, block) -> None:
        ranges = tuple((o, o + n) for o, n in zip(offset, block.shape))
        try:
            self.dest(self.spaces, ranges, block)
        except SequantEvalError:
            raise
        except Exception as err:            # the caller's own code: named, cause chained
            raise SinkError(f"the sink out[{self.name!r}] failed for the slice at ranges "
                            f"{list(ranges)} of {self.name}: {type(err).__name__}: {err}; "
                            f"the slices before it were handed over") from err


def make_sink(name: str, dest, spaces: tuple[str, ...], shape: tuple[int, ...],
              dtype: np.dtype) -> Sink:
    """The sink for result ``name`` (of ``spaces``, ``shape`` and element type ``dtype``),
    refusing a destination that cannot take it — before any work."""
    kind = sink_kind(name, dest)
    dtype = np.dtype(dtype)
    if kind == "once":
        if not _takes_three(dest):
            raise SinkError(f"out[{name!r}] is a callable that does not take (spaces, ranges, "
                            f"block); a callable sink is called sink(spaces, ranges, block)")
        return _CallableSink(name, dest, spaces, shape, dtype)
    got = tuple(int(n) for n in dest.shape)
    if got != tuple(shape):
        raise SinkError(f"out[{name!r}] has shape {got}; result {name} has shape "
                        f"{tuple(shape)} (spaces {','.join(spaces) or 'none'})")
    have = np.dtype(getattr(dest, "dtype", np.float64))
    if not np.can_cast(dtype, have, "safe"):
        raise SinkError(f"out[{name!r}] holds {have}, which cannot take result {name}'s "
                        f"{dtype} without loss; give a {dtype} destination")
    if isinstance(dest, np.ndarray):
        if not dest.flags.writeable:
            raise SinkError(f"out[{name!r}] is a read-only array; give a writeable one")
        _refuse_truncated_map(name, dest)
        return _ArraySink(name, dest, spaces, shape, dtype)
    mode = getattr(getattr(dest, "file", None), "mode", None)
    if mode == "r" or getattr(dest, "read_only", False):
        raise SinkError(f"out[{name!r}] is opened read-only; open its file for writing "
                        f"(h5py.File(path, 'r+') or 'a')")
    return _DatasetSink(name, dest, spaces, shape, dtype)


def _refuse_truncated_map(name: str, dest: np.ndarray) -> None:
    """A memory map whose file no longer reaches the bytes it maps (truncated after it was
    mapped): writing there kills the process (SIGBUS), so it is refused before any work."""
    span = _file_span(dest)
    if span is None:
        return
    try:
        size = dest._mmap.size()            # the mapped file's length now (fstat of its fd)
    except (OSError, ValueError):           # a closed map: NumPy refuses to write it anyway
        return
    if size < span[2]:
        raise SinkError(f"out[{name!r}] is a memory map of {span[0]} reaching byte {span[2]}, "
                        f"but the file is {size} B now: it was truncated after it was mapped, "
                        f"and writing past its end would kill the process (SIGBUS). Map the "
                        f"file again (np.memmap with mode 'w+' makes it the right size)")


def make_sinks(out, forest, extents: Mapping[str, int], dtype: np.dtype,
               tensors: Mapping | None = None) -> dict[str, Sink]:
    """``out`` (result name → destination) checked against the equations' results and made
    into sinks, before any work; a destination that shares memory with an input or with
    another destination is refused (the evaluation would read what it had written)."""
    if out is None:
        return {}
    if not isinstance(out, Mapping):
        raise SinkError(f"out must map result names to destinations, e.g. "
                        f"out={{'R2': array}}, got {type(out).__name__}")
    roots = {r.name: r for r in forest.roots}
    sinks = {}
    for name, dest in out.items():
        if name not in roots:
            raise SinkError(f"out names {name!r}, which is not a result of these "
                            f"equations (results: {', '.join(sorted(roots))})")
        v = forest.values[roots[name].value]
        shape = tuple(extents[s] for s in v.spaces)
        sinks[name] = make_sink(name, dest, v.spaces, shape, dtype)
    _refuse_aliasing(sinks, tensors or {})
    return sinks


def _refuse_aliasing(sinks: Mapping[str, Sink], tensors: Mapping) -> None:
    inputs = [(t, a) for t, given in tensors.items()
              for a in (given.values() if isinstance(given, Mapping) else (given,))]
    done: list[tuple[str, object]] = []
    for name, sink in sinks.items():
        if sink.kind == "once":
            continue
        clash = next((t for t, a in inputs if _overlap(sink.dest, a)), None)
        if clash is not None:
            raise SinkError(
                f"out[{name!r}] shares memory with input {clash!r}: the evaluation zeroes "
                f"and writes {name} there while it still reads {clash}, so later batches "
                f"would read what earlier ones wrote. Give {name} a destination of its own "
                f"(copy it over afterwards if it must end up there)")
        clash = next((n for n, d in done if _overlap(sink.dest, d)), None)
        if clash is not None:
            raise SinkError(
                f"out[{name!r}] shares memory with out[{clash!r}]: results {clash} and "
                f"{name} would be written over each other. Give each its own destination")
        done.append((name, sink.dest))


def _overlap(dest, other) -> bool:
    """Whether writing ``dest`` may change ``other``: NumPy arrays sharing memory, two
    memory maps of overlapping bytes of one file, or two handles on one dataset of one
    file (h5py: the same file and name)."""
    if isinstance(dest, np.ndarray) and isinstance(other, np.ndarray):
        if np.may_share_memory(dest, other):
            try:
                return bool(np.shares_memory(dest, other, max_work=10 ** 6))
            except _TOO_HARD:
                return True
        if getattr(dest, "mode", None) == "c":      # copy-on-write: the file is not written
            return False
        a, b = _file_span(dest), _file_span(other)
        return a is not None and b is not None and a[0] == b[0] and a[1] < b[2] \
            and b[1] < a[2]
    where = _dataset_where(dest)
    return where is not None and where == _dataset_where(other)


def _file_span(x) -> tuple[str, int, int] | None:
    """``(file, first byte, end byte)`` of the bytes an ``np.memmap`` (or a view of one)
    spans in its file (the real path), else None."""
    mm, name = getattr(x, "_mmap", None), getattr(x, "filename", None)
    if mm is None or not isinstance(name, (str, os.PathLike)) or x.size == 0:
        return None
    start = x.offset - x.offset % mmap.ALLOCATIONGRANULARITY      # the file byte of mm[0]
    base = np.frombuffer(mm, dtype=np.uint8).__array_interface__["data"][0]
    at = x.__array_interface__["data"][0] - base + start
    lo = at + sum(s * (n - 1) for s, n in zip(x.strides, x.shape) if s < 0)
    hi = at + sum(s * (n - 1) for s, n in zip(x.strides, x.shape) if s > 0) + x.itemsize
    return os.path.realpath(name), lo, hi


#: NumPy's "the overlap search gave up" (``np.exceptions`` from NumPy 1.25, top level before).
_TOO_HARD = getattr(np, "exceptions", np).TooHardError


def _dataset_where(x) -> tuple[str, str] | None:
    """``(file, dataset name)`` of an h5py dataset (the file's real path), else None."""
    name, filename = getattr(x, "name", None), getattr(getattr(x, "file", None), "filename",
                                                       None)
    if not isinstance(name, str) or not isinstance(filename, (str, os.PathLike)):
        return None
    return os.path.realpath(filename), name


def _takes_three(fn: Callable) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True                            # a builtin: let the first call tell
    params = [p for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()) or len(params) >= 3


def check_sinks(analysis: ScheduleAnalysis, sinks: Mapping[str, Sink]) -> None:
    """Refuse a write-once (callable) sink for a result the schedule writes more than once
    per slice: a sum of several terms, or a term summed over batches of a contracted loop."""
    sched = analysis.ordered
    forms = sched.forms
    folded = folded_into(sched)
    by_value = {r.value: r.name for r in analysis.forest.roots}
    for f in forms:
        name = by_value.get(f.value) if f.kind is FormKind.SUM else None
        if name is None or name not in sinks or sinks[name].kind != "once":
            continue
        why = None
        if len(f.operands) > 1:
            why = f"it is a sum of {len(f.operands)} terms, each added in"
        elif f.operands and f.operands[0] in folded:
            src = forms[f.operands[0]]
            over = [sched.loops[l] for l in src.span]
            summed = [l for l in over if l.kind is LoopKind.CONTRACTED]
            if summed or src.partial or len(analysis.rich.readers[src.id]) > 1:
                why = (f"its term is summed over the batches of loop L{summed[0].id} over "
                       f"{summed[0].space!r}" if summed else "its term is added in more than "
                       "once")
        if why:
            raise SinkError(f"out[{name!r}] is a callable, which takes each slice of the "
                            f"result once, but {name} is written several times: {why}. Give "
                            f"an array, np.memmap or h5py dataset (accumulated in place), or "
                            f"leave {name} without a sink")
