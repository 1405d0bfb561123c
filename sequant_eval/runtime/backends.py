"""Array backends the executor drives: NumPy (real data) and dry run (shapes only).

Both receive exactly the same calls from the same walk; the dry run's arrays are shapes, so
its memory meter and flop count are those of the real run by construction.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
import opt_einsum

from .kernels import COPY, RESHAPE, RESHAPE_T, ContractPlan, MatrixView

__all__ = ["NumpyBackend", "DryRunBackend", "DryArray", "get_backend"]


def _matrix(x, view: MatrixView):
    if view.kind == RESHAPE:
        return x.reshape(view.shape)
    if view.kind == RESHAPE_T:
        return x.reshape(view.shape).T
    return x.transpose(view.perm).reshape(view.shape)


class NumpyBackend:
    name = "numpy"

    def fetch(self, source, vid: int):
        return source.fetch(vid)

    def contract(self, plan: ContractPlan, a, b):
        if plan.einsum is not None:
            return np.ascontiguousarray(opt_einsum.contract(plan.einsum, a, b))
        c = _matrix(a, plan.left) @ _matrix(b, plan.right)
        if plan.out_perm is None:
            return c.reshape(plan.out_shape)
        return np.ascontiguousarray(c.reshape(plan.gemm_shape).transpose(plan.out_perm))

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

    def nbytes(self, x) -> int:
        return int(x.nbytes)


@dataclass(frozen=True)
class DryArray:
    """A stand-in array: a shape and an element size, no data."""

    shape: tuple[int, ...]
    itemsize: int = 8

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.itemsize


class DryRunBackend:
    name = "dryrun"

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

    def nbytes(self, x: DryArray) -> int:
        return x.nbytes


def get_backend(name: str):
    from ..errors import SequantEvalError

    if name == "numpy":
        return NumpyBackend()
    if name == "dryrun":
        return DryRunBackend()
    raise SequantEvalError(f"unknown backend {name!r}; choose 'numpy' or 'dryrun'")
