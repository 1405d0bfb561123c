"""Array backends the executor drives: NumPy (real data) and dry run (shapes only).

Both receive exactly the same calls from the same walk; the dry run's arrays are shapes, so
its memory meter and flop count are those of the real run by construction.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
import opt_einsum

from .kernels import EINSUM, MULTIPLY, ZEROS, ArrayView, ContractPlan

__all__ = ["NumpyBackend", "DryRunBackend", "DryArray", "get_backend"]


def _strided(x: np.ndarray, view: ArrayView) -> np.ndarray:
    """The contiguous array ``x`` seen through the plan's shape and element strides."""
    size = x.itemsize
    return np.ndarray(view.shape, x.dtype, x, 0, tuple(s * size for s in view.strides))


def _operand(x: np.ndarray, view: ArrayView) -> np.ndarray:
    """An operand (or its planned transposed copy) as the plan's strided view."""
    if view.perm is not None:
        x = np.ascontiguousarray(x.transpose(view.perm))
    elif not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return _strided(x, view)


class NumpyBackend:
    name = "numpy"

    def fetch(self, source, vid: int):
        return source.fetch(vid)

    def contract(self, plan: ContractPlan, a, b):
        kind = plan.kind
        if kind == EINSUM or a.dtype.hasobject or b.dtype.hasobject:
            return np.ascontiguousarray(opt_einsum.contract(plan.einsum, a, b))
        dtype = np.result_type(a, b)
        if kind == ZEROS:
            return np.zeros(plan.out_shape, dtype)
        if a.dtype != dtype or b.dtype != dtype:
            a, b = a.astype(dtype), b.astype(dtype)
        out = np.empty(plan.out_shape, dtype)
        if kind == MULTIPLY:
            np.multiply(_operand(a, plan.left), _operand(b, plan.right), out=out)
            return out
        x, y, z = _operand(a, plan.left), _operand(b, plan.right), plan.out
        if z.perm is None and not plan.reduce:
            np.matmul(x, y, out=_strided(out, z))
            return out
        tmp = np.empty(z.buffer_shape, dtype)
        np.matmul(x, y, out=_strided(tmp, z))
        if plan.reduce:  # partial products over the split contracted modes
            np.sum(tmp.reshape(-1, out.size), axis=0, out=out.reshape(-1))
        else:            # computed in the planned order, transposed into place
            np.copyto(out, tmp.transpose(z.perm))
        return out

    def accumulate(self, target, src, coeff: float, perm: tuple[int, ...], move: bool):
        if move:  # the sum takes over src's buffer
            if coeff != 1.0:
                src *= coeff
            return src
        view = src if perm == tuple(range(len(perm))) else src.transpose(perm)
        if target is None:
            out = np.empty(view.shape, dtype=view.dtype)
            np.multiply(view, coeff, out=out)
            return out
        if coeff == 1.0:
            target += view
        elif coeff == -1.0:
            target -= view
        else:
            target += coeff * view
        return target

    def zeros(self, shape: tuple[int, ...]):
        return np.zeros(shape)

    def take(self, block, index: tuple[slice, ...], shape: tuple[int, ...]):
        """One batch of a leaf block, as its own contiguous array."""
        return np.ascontiguousarray(block[index])

    def add_into(self, acc, part) -> None:
        acc += part

    def write_into(self, dest, index: tuple[slice, ...], part) -> None:
        dest[index] = part

    def nbytes(self, x) -> int:
        return int(x.nbytes)


@dataclass(frozen=True)
class DryArray:
    """A stand-in array: a shape and an element size, no data."""

    shape: tuple[int, ...]
    itemsize: int = 8

    @property
    def nbytes(self) -> int:
        from ..plan.regime import footprint_bytes

        return footprint_bytes(self.shape, self.itemsize)


class DryRunBackend:
    name = "dryrun"
    symbolic = True          # shapes may be mean sizes of composite modes (not integers)

    def __init__(self, itemsize: int = 8) -> None:
        self.itemsize = itemsize

    def fetch(self, source, vid: int) -> DryArray:
        return DryArray(source.shape(vid), self.itemsize)

    def contract(self, plan: ContractPlan, a: DryArray, b: DryArray) -> DryArray:
        return DryArray(plan.out_shape, self.itemsize)

    def accumulate(self, target, src: DryArray, coeff, perm, move) -> DryArray:
        if move or target is None:
            return DryArray(tuple(src.shape[p] for p in perm), self.itemsize)
        return target

    def zeros(self, shape: tuple[int, ...]) -> DryArray:
        return DryArray(shape, self.itemsize)

    def take(self, block, index, shape: tuple[int, ...]) -> DryArray:
        return DryArray(shape, self.itemsize)

    def add_into(self, acc, part) -> None:
        if acc.shape != part.shape:
            raise ValueError(f"dry run: adding {part.shape} into {acc.shape}")

    def write_into(self, dest, index, part) -> None:
        want = tuple((s.stop - s.start) if s.start is not None else n
                     for s, n in zip(index, dest.shape))
        if want != part.shape:
            raise ValueError(f"dry run: writing {part.shape} into a {want} window")

    def nbytes(self, x: DryArray) -> int:
        return x.nbytes


def get_backend(name: str):
    from ..errors import SequantEvalError

    if name == "numpy":
        return NumpyBackend()
    if name == "dryrun":
        return DryRunBackend()
    raise SequantEvalError(f"unknown backend {name!r}; choose 'numpy' or 'dryrun'")
