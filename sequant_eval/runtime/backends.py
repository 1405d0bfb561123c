"""Array backends the executor drives: NumPy (real data) and dry run (shapes only).

Both receive exactly the same calls from the same walk; the dry run's arrays are shapes, so
its memory meter and flop count are those of the real run by construction.

The NumPy backend hands GEMMs to BLAS (which threads itself) and splits the memory-bound
element-wise work -- transposing copies, permuted accumulation, broadcast products -- into
slabs of the destination's first axis run on a small thread pool (NumPy releases the GIL in
these loops). Each element is computed by the same operation whatever the split, so results
do not depend on the number of threads.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from math import prod

import numpy as np
import opt_einsum

from .kernels import EINSUM, MULTIPLY, ZEROS, ArrayView, ContractPlan

__all__ = ["NumpyBackend", "DryRunBackend", "DryArray", "get_backend"]

_PARALLEL_MIN_ELEMENTS = 1 << 16     # below this, thread hand-off costs more than it saves
_pool: ThreadPoolExecutor | None = None


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _slabs(fn, out: np.ndarray, *args, threads: int) -> None:
    """``fn(out_part, *arg_parts)`` over slabs of axis 0 of ``out``, on ``threads`` threads.

    ``fn`` must be element-wise; array arguments have ``out``'s shape (broadcast views do).
    """
    n = min(threads, out.shape[0] if out.ndim else 1)
    if n < 2 or out.size < _PARALLEL_MIN_ELEMENTS:
        fn(out, *args)
        return
    global _pool
    if _pool is None or _pool._max_workers < n - 1:
        _pool = ThreadPoolExecutor(max_workers=n - 1, thread_name_prefix="sequant-eval")
    edges = [out.shape[0] * k // n for k in range(n + 1)]

    def part(k: int):
        sl = slice(edges[k], edges[k + 1])
        return fn(out[sl], *(a[sl] if isinstance(a, np.ndarray) else a for a in args))

    futures = [_pool.submit(part, k) for k in range(1, n)]
    part(0)
    for f in futures:
        f.result()


def _copy(dst, src) -> None:
    np.copyto(dst, src)


def _add(dst, src) -> None:
    np.add(dst, src, out=dst)


def _subtract(dst, src) -> None:
    np.subtract(dst, src, out=dst)


def _add_scaled(dst, src, coeff) -> None:
    dst += coeff * src      # the temporary is one slab, not the whole array


def _scale(dst, src, coeff) -> None:
    np.multiply(src, coeff, out=dst)


def _multiply(dst, a, b) -> None:
    np.multiply(a, b, out=dst)


class NumpyBackend:
    """Real arrays; ``threads`` (default: the cores this process may use) for element-wise work."""

    name = "numpy"

    def __init__(self, threads: int | None = None) -> None:
        self.threads = max(1, threads if threads is not None else _available_cores())

    def _transposed(self, x: np.ndarray, perm: tuple[int, ...]) -> np.ndarray:
        """A contiguous copy of ``x.transpose(perm)``."""
        view = x.transpose(perm)
        out = np.empty(view.shape, x.dtype)
        _slabs(_copy, out, view, threads=self.threads)
        return out

    def _view(self, x: np.ndarray, view: ArrayView) -> np.ndarray:
        """``x`` (or its planned transposed copy) seen through the plan's shape and strides."""
        if view.perm is not None:
            x = self._transposed(x, view.perm)
        elif not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        size = x.itemsize
        return np.ndarray(view.shape, x.dtype, x, 0, tuple(s * size for s in view.strides))

    def fetch(self, source, vid: int):
        return source.fetch(vid)

    def contract(self, plan: ContractPlan, a, b):
        kind = plan.kind
        if kind == EINSUM:
            return np.ascontiguousarray(opt_einsum.contract(plan.einsum, a, b))
        dtype = np.result_type(a, b)
        if kind == ZEROS:
            return np.zeros(plan.out_shape, dtype)
        if a.dtype != dtype or b.dtype != dtype:
            a, b = a.astype(dtype), b.astype(dtype)
        out = np.empty(plan.out_shape, dtype)
        if kind == MULTIPLY:
            _slabs(_multiply, out, self._view(a, plan.left), self._view(b, plan.right),
                   threads=self.threads)
            return out
        z = plan.out
        if z.perm is None:
            np.matmul(self._view(a, plan.left), self._view(b, plan.right),
                      out=self._view(out, z))
        else:  # computed in the planned order, transposed into place
            tmp = np.empty(z.buffer_shape, dtype)
            np.matmul(self._view(a, plan.left), self._view(b, plan.right),
                      out=np.ndarray(z.shape, dtype, tmp, 0,
                                     tuple(s * tmp.itemsize for s in z.strides)))
            _slabs(_copy, out, tmp.transpose(z.perm), threads=self.threads)
        return out

    def accumulate(self, target, src, coeff: float, perm: tuple[int, ...], move: bool):
        if move:  # the sum takes over src's buffer
            if coeff != 1.0:
                _slabs(_scale, src, src, coeff, threads=self.threads)
            return src
        view = src if perm == tuple(range(len(perm))) else src.transpose(perm)
        if target is None:
            out = np.empty(view.shape, dtype=view.dtype)
            _slabs(_scale, out, view, coeff, threads=self.threads)
            return out
        if coeff == 1.0:
            _slabs(_add, target, view, threads=self.threads)
        elif coeff == -1.0:
            _slabs(_subtract, target, view, threads=self.threads)
        else:
            _slabs(_add_scaled, target, view, coeff, threads=self.threads)
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
