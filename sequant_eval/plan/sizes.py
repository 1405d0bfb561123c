"""Footprints of arrays whose modes may be sliced to a batch block."""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from ..expr.index import Index, mode_space
from .policy import BatchPolicy
from .regime import Regime, footprint_bytes

__all__ = ["Sizer"]


class Sizer:
    """Extents and block sizes of labels; ``bytes(labels, sliced)`` is an array's footprint."""

    def __init__(self, extents: Mapping[str, int] | Regime, policy: BatchPolicy) -> None:
        self.regime = extents if isinstance(extents, Regime) else Regime.from_extents(extents)
        self.policy = policy
        self.itemsize = policy.itemsize

    def extent(self, ix: Index) -> int:
        """Extent of a plain index (the only kind a loop runs over)."""
        return self.regime.plain(mode_space(ix))

    def block(self, ix: Index) -> int:
        """Elements per batch of a loop over ``ix`` under the policy."""
        return self.policy.block_of(ix.space, self.extent(ix))

    def nbatches(self, ix: Index) -> int:
        """Batches of a loop over ``ix`` under the policy."""
        return self.policy.nbatches(ix.space, self.extent(ix))

    def sizes(self, labels: Iterable[Index], sliced: Collection[Index] = ()) -> list[float]:
        """Per-label sizes: sliced labels at block extent, composites by power means."""
        labels = list(labels)
        full = self.regime.label_sizes(labels)
        return [self.block(ix) if ix in sliced else s for ix, s in zip(labels, full)]

    def bytes(self, labels: Iterable[Index], sliced: Collection[Index] = ()) -> int:
        """Footprint of an array with these labels, ``sliced`` ones at block extent."""
        return footprint_bytes(self.sizes(labels, sliced), self.itemsize)
