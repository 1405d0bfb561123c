"""Footprints of arrays whose modes may be sliced to a batch block."""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from math import prod

from ..expr.index import Index, mode_space
from ..forest.build import mode_extent
from .policy import BatchPolicy

__all__ = ["Sizer"]


class Sizer:
    """Extents and block sizes of labels; ``bytes(labels, sliced)`` is an array's footprint."""

    def __init__(self, extents: Mapping[str, int], policy: BatchPolicy) -> None:
        self.extents = dict(extents)
        self.policy = policy
        self.itemsize = policy.itemsize

    def extent(self, ix: Index) -> int:
        return mode_extent(mode_space(ix), self.extents)

    def block(self, ix: Index) -> int:
        return self.policy.block_of(ix.space, self.extent(ix))

    def nbatches(self, ix: Index) -> int:
        return self.policy.nbatches(ix.space, self.extent(ix))

    def elements(self, labels: Iterable[Index], sliced: Collection[Index] = ()) -> int:
        return prod(self.block(ix) if ix in sliced else self.extent(ix) for ix in labels)

    def bytes(self, labels: Iterable[Index], sliced: Collection[Index] = ()) -> int:
        return self.elements(labels, sliced) * self.itemsize
