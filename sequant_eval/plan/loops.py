"""Batch loops as explicit objects: opened by the planner, carried by identity afterwards."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..expr.index import Index

__all__ = ["LoopKind", "Open", "Loop"]


class LoopKind(enum.Enum):
    """Where a batch loop opens: over modes summed at a node (contracted) or open on the
    term's result (external)."""

    CONTRACTED = "C"   # the opener sums the mode: partial results accumulate (AccumulateSum)
    EXTERNAL = "E"     # the mode is open on the term's result: blocks scatter (AccumulateScatter)


@dataclass(frozen=True, order=True)
class Open:
    """A loop opened at a tree node, in the term's own labels (planner-internal)."""

    label: Index
    kind: LoopKind

    def __str__(self) -> str:
        return f"{self.label}:{self.kind.value}"


@dataclass(frozen=True)
class Loop:
    """One batch loop: ``nbatches`` blocks of ``block`` elements over ``extent`` (last short)."""

    id: int
    space: str
    kind: LoopKind
    block: int
    extent: int
    nbatches: int
    opener: tuple[int, int]     # (term-root value id, node index in that term's tree)
    label: Index                # the index it runs over, in the opener term's labels

    def ranges(self) -> list[tuple[int, int]]:
        """The exact element range of every batch."""
        return [(lo, min(lo + self.block, self.extent))
                for lo in range(0, self.extent, self.block)]

    def __str__(self) -> str:
        return (f"L{self.id} {{{self.space}:{self.kind.value}}} block {self.block} x "
                f"{self.nbatches} over {self.extent} (opened at v{self.opener[0]}"
                f"#{self.opener[1]} on {self.label})")
