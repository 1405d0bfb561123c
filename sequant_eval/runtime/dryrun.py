"""The dry-run backend: shapes only (sizes may be composite power means), sizes and flops
metered exactly as a real run, no data; strict about the shapes it adds. Its source,
``ShapeSource``, knows each leaf's shape and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import SequantEvalError
from .graph import Backend

__all__ = ["DryArray", "DryRunBackend", "ShapeSource"]


class ShapeSource:
    """The inputs of a dry run: every value's shape (``ScheduleAnalysis.shapes``), no data."""

    def __init__(self, shapes) -> None:
        self.shapes = shapes

    def shape(self, vid: int):
        return self.shapes[vid]


@dataclass(frozen=True)
class DryArray:
    """A stand-in array: a shape (sizes may be power means) and an element size."""

    shape: tuple
    itemsize: int = 8

    @property
    def nbytes(self) -> int:
        """Bytes the array would hold (the meter's count)."""
        from ..plan.regime import footprint_bytes

        return footprint_bytes(self.shape, self.itemsize)


class DryRunBackend(Backend):
    """Shapes only: every op returns a DryArray of its result's shape; adds check shapes."""

    name = "dryrun"
    symbolic = True

    def __init__(self, itemsize: int = 8) -> None:
        self.itemsize = itemsize

    def asarray(self, x):
        return x

    def take(self, block, index, shape):
        return DryArray(tuple(shape), self.itemsize)

    def zeros(self, shape):
        return DryArray(tuple(shape), self.itemsize)

    def contract(self, values, vid, a, b, out_shape, layout=None):
        return DryArray(tuple(out_shape), self.itemsize)

    def scale_(self, x, alpha):
        return x

    def permute(self, x, perm):
        return DryArray(tuple(x.shape[p] for p in perm), self.itemsize)

    def reshape(self, x, shape):
        return DryArray(tuple(shape), self.itemsize)

    def accumulate_(self, target, src, alpha):
        if tuple(target.shape) != tuple(src.shape):
            raise SequantEvalError(f"dry run: adding {src.shape} into {target.shape}")
        return target

    def scatter_(self, target, src, index):
        return target

    def add_into_(self, target, src, index, perm, alpha):
        return target

    def init(self, src, alpha):
        return DryArray(tuple(src.shape), self.itemsize)

    def to_host(self, x):
        return x

    def from_host(self, x):
        return x

    def nbytes(self, x) -> int:
        return x.nbytes
