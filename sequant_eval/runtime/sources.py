"""Where leaf blocks come from: the user's ``tensors`` mapping, checked before any work.

A tensor may be given as one array whose every axis spans all spaces (concatenated in
``extents`` order; a block is sliced out per slot space), as a mapping from a tuple of space
names to the block, or as a callable taking that tuple and returning the block.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..errors import MissingTensor, ShapeMismatch, UnsupportedFeature
from ..forest.values import Forest, ValueKind

__all__ = ["TensorSource"]


class TensorSource:
    """Resolves leaf values of a forest to arrays, with errors that name the culprit."""

    def __init__(self, forest: Forest, tensors: Mapping[str, object],
                 extents: Mapping[str, int]) -> None:
        self.forest = forest
        self.tensors = tensors
        self.extents = dict(extents)
        self.offsets: dict[str, int] = {}
        total = 0
        for name, n in self.extents.items():
            self.offsets[name] = total
            total += n
        self.total = total
        self.check()

    def _where(self, vid: int) -> str:
        return self.forest.leaf_users.get(vid, "the forest")

    def check(self) -> None:
        """Refuse composite indices, missing tensors and wrong shapes before any work."""
        leaves = [v for v in self.forest.values if v.kind is ValueKind.LEAF]
        for v in leaves:
            if any("<" in s for s in v.spaces):
                raise UnsupportedFeature(
                    f"tensor {v.tensor!r} ({self._where(v.id)}) has a composite index "
                    f"({', '.join(v.spaces)}): numerical evaluation of composite (PNO/OSV) "
                    f"indices is not supported; use sequant_eval.analyze for a dry run")
        for v in leaves:
            if v.tensor not in self.tensors:
                raise MissingTensor(
                    f"tensor {v.tensor!r} (block {','.join(v.spaces)}) is needed by "
                    f"{self._where(v.id)} but was not supplied; supplied: "
                    f"{', '.join(sorted(self.tensors)) or 'nothing'}")
            given = self.tensors[v.tensor]
            if callable(given):
                continue
            if isinstance(given, Mapping):
                if v.spaces not in given:
                    raise MissingTensor(
                        f"tensor {v.tensor!r} has no block {v.spaces} (needed by "
                        f"{self._where(v.id)}); it has {sorted(given)}")
                self._check_shape(v.tensor, v.spaces, given[v.spaces])
            else:
                self._check_full(v.tensor, given, len(v.spaces))

    def _check_full(self, name: str, array: object, rank: int) -> None:
        shape = tuple(getattr(array, "shape", ()))
        want = (self.total,) * rank
        if shape != want:
            raise ShapeMismatch(
                f"tensor {name!r} given as one array must have shape {want} (every axis spans "
                f"all spaces {dict(self.extents)}), got {shape}")

    def _check_shape(self, name: str, spaces: tuple[str, ...], array: object) -> None:
        shape = tuple(getattr(array, "shape", ()))
        want = tuple(self.extents[s] for s in spaces)
        if shape != want:
            bad = next((k for k, (g, w) in enumerate(zip(shape, want)) if g != w), len(want))
            raise ShapeMismatch(
                f"block {spaces} of tensor {name!r} must have shape {want}, got {shape} "
                f"(first mismatch at slot {bad})")

    def fetch(self, vid: int, asarray: Callable = np.ascontiguousarray):
        v = self.forest.values[vid]
        given = self.tensors[v.tensor]
        if isinstance(given, Mapping):
            block = given[v.spaces]
        elif callable(given):
            block = given(v.spaces)
            self._check_shape(v.tensor, v.spaces, block)
        else:
            index = tuple(slice(self.offsets[s], self.offsets[s] + self.extents[s])
                          for s in v.spaces)
            block = given[index]
        return asarray(block)
