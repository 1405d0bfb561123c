"""Where leaf blocks come from: the caller's ``tensors``, read per batch, checked before work.

A tensor may be given as

- one array (NumPy, or any array-like with ``shape`` and NumPy-style slicing: ``h5py``
  datasets, ``np.memmap``, ``zarr`` arrays) whose axis at each slot spans, in ``extents``
  order, the spaces the equations use at that slot (a Fock matrix read as ``f{i;a}`` and
  ``f{a;a}`` spans ``i,a`` on both axes; one that is also read with an auxiliary index does
  not); an axis spanning every space in ``extents`` is accepted too;
- a mapping from a tuple of space names to that block (an array or array-like);
- a provider ``provider(spaces, ranges)`` returning exactly the sub-block
  ``block[r0[0]:r0[1], r1[0]:r1[1], ...]`` of the block ``spaces`` (``ranges`` holds one
  ``(start, stop)`` pair of element offsets per slot). A provider taking only ``spaces``
  returns the whole block; it is accepted while no plan reads that block in batches.

Nothing is read before the engine needs it: a leaf read inside batch loops asks its source
for exactly that batch's sub-block (``LeafReader.read``), so an array-like on disk is
never read whole. A leaf that is a tensor's diagonal (``T{a,a,b}``) is read through
``Diagonal`` (a strided view copied, or in pieces of at most a sixteenth of the batch or
one diagonal entry's slab); the all-ones leaf of an index summed inside one factor is made here, never asked for.

Integers of every width are read as float64 (``TensorSource.dtype``).

A file-backed input (an h5py dataset, a ``np.memmap``) is checked, not trusted, against the
file it was opened from (``backing.py``: ``StaleInput``, ``TruncatedInput``); ``fingerprint.py``
identifies the inputs between evaluations of a persisted evaluator (see its docstring for
what it checks and what that costs).
"""
from __future__ import annotations

import inspect
import itertools
import weakref
from collections.abc import Callable, Mapping, Sequence
from math import prod

import numpy as np

from ..errors import (InputTypeError, MissingTensor, SequantEvalError, ShapeMismatch,
                      UnsupportedFeature)
from ..forest.values import ONES, Forest, ValueKind
from .backing import FileBacking, file_backing

__all__ = ["TensorSource", "LeafReader", "Diagonal", "takes_ranges"]

Ranges = tuple[tuple[int, int], ...]


def _is_arraylike(x: object) -> bool:
    """An array or an array-like (h5py, zarr): a shape and indexing; not a class (the type
    ``np.ndarray`` itself has a ``shape`` attribute) and not a mapping of blocks."""
    return (not isinstance(x, type) and hasattr(x, "shape") and hasattr(x, "__getitem__")
            and not isinstance(x, Mapping))


def closed_dataset(x: object) -> bool:
    """Whether ``x`` is an h5py dataset whose file is closed (anything read of it, even its
    shape, raises h5py's own RuntimeError)."""
    if not getattr(type(x), "__module__", "").startswith("h5py"):
        return False
    ident = getattr(x, "id", None)              # h5py's ids are false when closed: no bool()
    return ident is not None and not getattr(ident, "valid", True)


def takes_ranges(fn: Callable) -> bool:
    """Whether a provider accepts ``(spaces, ranges)`` (else only ``spaces``); a provider
    may say so itself (a boolean attribute ``takes_ranges``: no signature inspected). The
    answer for a function, for the methods of one function, or for the instances of a
    class with ``__call__``, is remembered."""
    declared = getattr(fn, "takes_ranges", None)
    if isinstance(declared, bool):
        return declared
    bound = not inspect.isfunction(fn)           # a method, or an instance: self bound
    key = fn.__func__ if inspect.ismethod(fn) else fn if not bound else getattr(
        type(fn), "__call__", None)
    known = _SIGNATURES[bound]
    if inspect.isfunction(key) and key in known:
        return known[key]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = [p for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    got = star or len(params) >= 2
    if inspect.isfunction(key):                   # remembered while the function lives
        known[key] = got
    return got


#: takes_ranges' answers: [for functions, for methods and callable instances (by
#: their function)].
_SIGNATURES = (weakref.WeakKeyDictionary(), weakref.WeakKeyDictionary())


#: A diagonal read from anything but a NumPy array goes in pieces, each at most this share
#: of the batch (or one diagonal entry's slab, where that is larger).
DIAGONAL_PIECE_SHARE = 1 / 16


class Diagonal:
    """How a leaf that is a tensor's diagonal is read: ``T{a,a,b}`` holds ``T[x, x, y]``.

    ``slots`` holds, per slot of the tensor, the leaf mode it reads (``(0, 0, 1)``). A batch
    (one range per mode) asks for the block of the tensor at those ranges per slot and keeps
    its diagonal. From a NumPy array (or a memory map) that block is a view and its diagonal
    a strided view of it, copied: the read holds the batch's size, like any copied block.
    Any other source (an h5py dataset, a zarr array, a provider) returns what it reads, so
    the block is read in pieces: tiles of the diagonal modes, each piece a block of the
    tensor of at most ``DIAGONAL_PIECE_SHARE`` of the batch's elements (or one diagonal
    entry's slab, where that is larger), its diagonal copied into the batch. The batch is
    charged in the prediction; the one piece held beside it is not."""

    def __init__(self, slots: tuple[int, ...], dtype: np.dtype, strided: bool) -> None:
        self.slots = slots
        self.rank = max(slots) + 1
        self.dtype = dtype
        self.strided = strided
        self.repeated = tuple(m for m in range(self.rank) if slots.count(m) > 1)

    def shape(self, slot_shape: Sequence[int]) -> tuple[int, ...]:
        """The leaf's shape (per mode) from the tensor block's (per slot)."""
        out = [0] * self.rank
        for k, m in enumerate(self.slots):
            out[m] = slot_shape[k]
        return tuple(out)

    def view(self, block) -> np.ndarray:
        """The diagonal of ``block`` (axes per slot) as a strided view, axes per mode."""
        block = np.asarray(block)
        shape, strides = [0] * self.rank, [0] * self.rank
        for k, m in enumerate(self.slots):
            shape[m] = block.shape[k]
            strides[m] += block.strides[k]
        return np.lib.stride_tricks.as_strided(block, tuple(shape), tuple(strides),
                                               writeable=False)

    def pieces(self, ranges: Ranges) -> list[Ranges]:
        """Tiles of ``ranges`` (per mode) along the repeated modes, each tile's block of the
        tensor within the piece bound."""
        widths = [hi - lo for lo, hi in ranges]
        batch = prod(widths)
        tile = [1 if m in self.repeated else w for m, w in enumerate(widths)]

        def elements(t: Sequence[int]) -> int:
            return prod(t[m] for m in self.slots)

        bound = max(batch * DIAGONAL_PIECE_SHARE, elements(tile))
        for m in self.repeated:
            while tile[m] < widths[m]:
                wider = list(tile)
                wider[m] = min(2 * tile[m], widths[m])
                if elements(wider) > bound:
                    break
                tile = wider
        starts = [range(lo, hi, t) for (lo, hi), t in zip(ranges, tile)]
        return [tuple((s, min(s + t, hi)) for s, t, (_, hi) in zip(corner, tile, ranges))
                for corner in itertools.product(*starts)]

    def read(self, block: Callable[[Ranges], object], ranges: Ranges) -> np.ndarray:
        """The batch at ``ranges`` (per mode); ``block(slot_ranges)`` reads the tensor."""
        def per_slot(r: Ranges) -> Ranges:
            return tuple(r[m] for m in self.slots)

        if self.strided:
            return np.array(self.view(block(per_slot(ranges))), dtype=self.dtype)
        out = np.empty(tuple(hi - lo for lo, hi in ranges), self.dtype)
        for piece in self.pieces(ranges):
            at = tuple(slice(lo - r0, hi - r0) for (lo, hi), (r0, _) in zip(piece, ranges))
            out[at] = self.view(block(per_slot(piece)))
        return out


class LeafReader:
    """One leaf block of one tensor, readable by sub-block; holds no data itself."""

    def __init__(self, name: str, spaces: tuple[str, ...], shape: tuple[int, ...],
                 read: Callable[[Ranges], object]) -> None:
        self.name = name
        self.spaces = spaces
        self.shape = shape
        self._read = read

    def read(self, ranges: Sequence[tuple[int, int] | None] | None = None):
        """The sub-block at ``ranges`` (``None`` for a whole axis) as a NumPy-readable array."""
        full = tuple((0, n) if r is None else (int(r[0]), int(r[1]))
                     for r, n in zip(ranges or (None,) * len(self.shape), self.shape))
        return self._read(full)


class TensorSource:
    """Resolves leaf values of a forest to readers, with errors that name the culprit."""

    def __init__(self, forest: Forest, tensors: Mapping[str, object],
                 extents: Mapping[str, int]) -> None:
        if not isinstance(tensors, Mapping):
            raise InputTypeError(
                f"tensors must be a mapping from tensor name to an array, a mapping of "
                f"blocks or a provider, got {type(tensors).__name__}")
        bad = [k for k in tensors if not isinstance(k, str)]
        if bad:
            raise InputTypeError(f"tensor names must be strings, got {bad[0]!r} "
                                 f"({type(bad[0]).__name__})")
        self.forest = forest
        self.tensors = tensors
        self.extents = dict(extents)
        self._readers: dict[int, LeafReader] = {}
        self._layouts: dict[str, list[tuple[int, dict[str, int]]]] = {}
        self._backings: dict[int, tuple[object, FileBacking | None]] = {}
        self.check()

    def _where(self, vid: int) -> str:
        return self.forest.leaf_users.get(vid, "the forest")

    def _leaves(self):
        """The leaves read from the caller's tensors (the all-ones factor is made here)."""
        return [v for v in self.forest.values if v.kind is ValueKind.LEAF and v.tensor != ONES]

    def check(self) -> None:
        """Refuse composite indices, missing tensors and wrong shapes before any work."""
        leaves = self._leaves()
        for v in leaves:
            if any("<" in s for s in v.spaces):
                raise UnsupportedFeature(
                    f"tensor {v.tensor!r} ({self._where(v.id)}) has a composite index "
                    f"({', '.join(v.spaces)}): numerical evaluation of composite (PNO/OSV) "
                    f"indices is not supported; use sequant_eval.analyze for a dry run")
        for v in leaves:
            slots = v.slot_spaces
            if v.tensor not in self.tensors:
                raise MissingTensor(
                    f"tensor {v.tensor!r} (block {','.join(slots)}) is needed by "
                    f"{self._where(v.id)} but was not supplied; supplied: "
                    f"{', '.join(sorted(self.tensors)) or 'nothing'}")
            given = self.tensors[v.tensor]
            blocks = given.values() if isinstance(given, Mapping) else (given,)
            if any(closed_dataset(b) for b in blocks):
                raise MissingTensor(
                    f"tensor {v.tensor!r} is an HDF5 dataset whose file is closed; keep the "
                    f"file open until the evaluation returns (evaluate inside the "
                    f"`with h5py.File(path) as f:` block)")
            if isinstance(given, Mapping):
                if slots not in given:
                    raise MissingTensor(
                        f"tensor {v.tensor!r} has no block {slots} (needed by "
                        f"{self._where(v.id)}); it has {sorted(given, key=repr)}")
                self._check_shape(v.tensor, slots, given[slots], "block")
            elif _is_arraylike(given):
                self._layout(v.tensor, given, len(slots))
            elif isinstance(given, type) or not callable(given):     # a class: np.ndarray
                raise InputTypeError(
                    f"tensor {v.tensor!r} is a {type(given).__name__}; give an array (or an "
                    f"array-like such as an h5py dataset), a mapping from space tuples to "
                    f"blocks, or a provider(spaces, ranges)")
            elif v.diagonal and not takes_ranges(given):
                raise InputTypeError(
                    f"the provider of tensor {v.tensor!r} takes only the block's spaces, but "
                    f"{self._where(v.id)} reads the diagonal of block {slots}, which is read "
                    f"in pieces; give it a second parameter `ranges` (one (start, stop) per "
                    f"slot) and return that sub-block, or pass the block as an array")
        self.verify_files()

    def _backing(self, array: object) -> FileBacking | None:
        """The file behind ``array`` (found once per source)."""
        if id(array) not in self._backings:
            self._backings[id(array)] = (array, file_backing(array))
        return self._backings[id(array)][1]

    def verify_files(self) -> None:
        """Every file-backed input still the file it was opened as, and long enough
        (``StaleInput``, ``TruncatedInput`` naming the tensor and the file)."""
        for name, given in sorted(self.tensors.items()):
            blocks = given.values() if isinstance(given, Mapping) else (given,)
            for block in blocks:
                if _is_arraylike(block):
                    backing = self._backing(block)
                    if backing is not None:
                        backing.verify(name)

    def _slot_spaces(self, name: str, rank: int) -> list[list[str]]:
        """Per slot, the spaces the forest reads tensor ``name`` with, in extents order."""
        used: list[set[str]] = [set() for _ in range(rank)]
        for v in self._leaves():
            if v.tensor == name and len(v.slot_spaces) == rank:
                for k, s in enumerate(v.slot_spaces):
                    used[k].add(s)
        return [[s for s in self.extents if s in u] for u in used]

    def _layout(self, name: str, array: object, rank: int) -> list[tuple[int, dict[str, int]]]:
        """Per axis of a one-array tensor: its length and the offset of each space in it."""
        if name in self._layouts:
            return self._layouts[name]
        shape = tuple(getattr(array, "shape", ()))
        per_slot = self._slot_spaces(name, rank)
        used = tuple(sum(self.extents[s] for s in slot) for slot in per_slot)
        every = (sum(self.extents.values()),) * rank
        if shape == used:
            spans = per_slot
        elif shape == every:
            spans = [list(self.extents)] * rank
        else:
            raise ShapeMismatch(
                f"tensor {name!r} given as one array has shape {shape}; expected {used} (each "
                f"axis spanning the spaces read at that slot: "
                f"{'; '.join(','.join(s) for s in per_slot)}) or {every} (every axis spanning "
                f"all spaces {dict(self.extents)})")
        layout = []
        for slot in spans:
            offsets, total = {}, 0
            for s in slot:
                offsets[s] = total
                total += self.extents[s]
            layout.append((total, offsets))
        self._layouts[name] = layout
        return layout

    def _check_shape(self, name: str, spaces: tuple[str, ...], array: object,
                     what: str, want: tuple[int, ...] | None = None,
                     request: str = "") -> None:
        if not _is_arraylike(array):
            raise InputTypeError(
                f"{what} {spaces} of tensor {name!r}{request} is a {type(array).__name__}, "
                f"not an array")
        shape = tuple(array.shape)
        want = tuple(self.extents[s] for s in spaces) if want is None else want
        if shape != want:
            bad = next((k for k, (g, w) in enumerate(zip(shape, want)) if g != w), len(want))
            raise ShapeMismatch(
                f"{what} {spaces} of tensor {name!r}{request} must have shape {want}, got "
                f"{shape} (first mismatch at slot {bad})")

    def release(self) -> None:
        """Drop the readers (each holds a closure over this source: a reference cycle that
        would keep the given arrays alive until the garbage collector runs)."""
        self._readers.clear()
        self._backings.clear()

    def reader(self, vid: int) -> LeafReader:
        """The reader of leaf value ``vid`` (made once per source)."""
        if vid in self._readers:
            return self._readers[vid]
        v = self.forest.values[vid]
        name, spaces = v.tensor, v.slot_spaces
        shape = tuple(self.extents[s] for s in spaces)
        if name == ONES:
            read = lambda r: np.ones(tuple(hi - lo for lo, hi in r), self.dtype())
            self._readers[vid] = LeafReader(name, v.spaces, shape, read)
            return self._readers[vid]
        given = self.tensors[name]
        backing, array = None, None
        if isinstance(given, Mapping):
            block = array = given[spaces]
            backing = self._backing(block)
            read = lambda r, b=block: b[tuple(slice(lo, hi) for lo, hi in r)]
        elif _is_arraylike(given):
            layout = self._layout(name, given, len(spaces))
            base = [offsets[s] for (_, offsets), s in zip(layout, spaces)]
            backing, array = self._backing(given), given
            read = lambda r, a=given, o=base: a[tuple(slice(b + lo, b + hi)
                                                      for b, (lo, hi) in zip(o, r))]
        else:
            read = self._provider(name, spaces, shape, given)
        checked = self._checked(name, spaces, read, backing, cast=not v.diagonal)
        if v.diagonal:
            diagonal = Diagonal(v.diagonal, self.dtype(), isinstance(array, np.ndarray))
            self._readers[vid] = LeafReader(name, v.spaces, diagonal.shape(shape),
                                            lambda r: diagonal.read(checked, r))
        else:
            self._readers[vid] = LeafReader(name, spaces, shape, checked)
        return self._readers[vid]

    def _checked(self, name: str, spaces: tuple[str, ...], read: Callable[[Ranges], object],
                 backing: FileBacking | None = None,
                 cast: bool = True) -> Callable[[Ranges], object]:
        """Every read, whatever the source: a file behind it checked first (still the
        file it was opened as, still long enough), failures typed (the original chained),
        the shape of what came back checked against the request, an array-like read into
        an array (a provider may hand back an h5py dataset or a lazy view), its elements
        numeric and cast to the evaluation's dtype where that loses nothing (with ``cast``
        False only checked: a diagonal casts what it keeps, not the block it is taken
        from)."""
        def checked(r: Ranges):
            request = f" (asked for ranges {list(r)})"
            if backing is not None:
                backing.verify(name, replaced=False)
            try:
                out = read(r)
            except SequantEvalError:
                raise
            except Exception as err:
                raise MissingTensor(
                    f"reading block {spaces} of tensor {name!r} failed{request}: "
                    f"{type(err).__name__}: {err}") from err
            self._check_shape(name, spaces, out, "block", tuple(hi - lo for lo, hi in r),
                              f" as read{request}")
            if not isinstance(out, np.ndarray):   # a provider's h5py dataset, lazy view: read
                try:
                    out = np.asarray(out[...])
                except Exception as err:
                    raise MissingTensor(
                        f"block {spaces} of tensor {name!r} came back as a "
                        f"{type(out).__name__}{request}, and reading it (block[...]) failed: "
                        f"{type(err).__name__}: {err}") from err
            dt = np.dtype(getattr(out, "dtype", np.float64))
            want = self.dtype()
            if dt == want:
                return out
            if not cast and dt.kind in "iufc" and np.can_cast(dt, want, "same_kind"):
                return out
            if dt.kind not in "iufc" or not np.can_cast(dt, want, "same_kind"):
                raise InputTypeError(
                    f"block {spaces} of tensor {name!r} came back as {dt}, but the evaluation "
                    f"runs in {want} (the type of the arrays given); give that tensor's blocks "
                    f"as {want} — or, for complex data, give at least one tensor as a complex "
                    f"array")
            return np.asarray(out, dtype=want)

        return checked

    def _provider(self, name: str, spaces: tuple[str, ...], shape: tuple[int, ...],
                  fn: Callable) -> Callable[[Ranges], object]:
        ranged = takes_ranges(fn)

        def read(r: Ranges):
            whole = all(lo == 0 and hi == n for (lo, hi), n in zip(r, shape))
            request = f" (asked for ranges {list(r)})"
            if not ranged and not whole:
                raise InputTypeError(
                    f"the provider of tensor {name!r} takes only the block's spaces, but the "
                    f"plan reads block {spaces} in batches{request}; give it a second "
                    f"parameter `ranges` and return that sub-block")
            try:
                return fn(spaces, r) if ranged else fn(spaces)
            except Exception as err:
                raise MissingTensor(
                    f"the provider of tensor {name!r} failed for block {spaces}{request}: "
                    f"{type(err).__name__}: {err}") from err

        return read

    def dtype(self) -> np.dtype:
        """The evaluation's element type: the NumPy result type of every array given, each
        integer array (any width, signed or not) counted as float64, at least float32.
        Providers are not asked in advance: with providers only it is float64. Object,
        string and boolean arrays are refused."""
        if getattr(self, "_dtype", None) is None:
            self._dtype = self._result_dtype()
        return self._dtype

    def _result_dtype(self) -> np.dtype:
        kinds = []
        for name, given in sorted(self.tensors.items(), key=lambda kv: str(kv[0])):
            arrays = list(given.values()) if isinstance(given, Mapping) else (
                [given] if _is_arraylike(given) else [])
            for a in arrays:
                dt = np.dtype(getattr(a, "dtype", np.float64))
                if dt.kind not in "iufc":
                    raise InputTypeError(
                        f"tensor {name!r} has elements of type {dt} ({dt.kind!r}); give "
                        f"floating-point or complex arrays (integers are read as float64)")
                # an integer is read as float64 whatever its width: NumPy would promote
                # int8/uint8/int16/uint16 with float32 to float32 (exact only to 2**24)
                kinds.append(np.dtype(np.float64) if dt.kind in "iu" else dt)
        if not kinds:
            return np.dtype(np.float64)
        return np.dtype(np.result_type(*kinds, np.float32))

    def check_batched(self, vids: Sequence[int]) -> None:
        """Refuse, before any work, a provider taking only spaces for a block read in batches."""
        for vid in sorted(vids):
            v = self.forest.values[vid]
            given = self.tensors.get(v.tensor)
            if callable(given) and not _is_arraylike(given) and not takes_ranges(given):
                raise InputTypeError(
                    f"the provider of tensor {v.tensor!r} takes only the block's spaces, but "
                    f"the plan reads block {v.spaces} in batches ({self._where(vid)}); give it "
                    f"a second parameter `ranges` (one (start, stop) per slot) and return "
                    f"that sub-block, or pass the block as an array")

    def fetch(self, vid: int):
        """The whole block of leaf ``vid`` as a NumPy array (oracles and small inputs)."""
        return np.asarray(self.reader(vid).read())

    def shape(self, vid: int) -> tuple[int, ...]:
        """Full shape of leaf value ``vid``: its spaces at the source's extents."""
        v = self.forest.values[vid]
        return tuple(self.extents[s] for s in v.spaces)
