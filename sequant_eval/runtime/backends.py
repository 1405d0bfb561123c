"""Array backends behind the one executor: NumPy, any array-API namespace, and the dry run
(``dryrun.py``); CuPy, the array-API path on a GPU, is the GPU layer's (``gpu/backend.py``).

Every backend implements the same small set of operations the op graph uses. NumPy runs
contractions as planned strided GEMMs (``kernels.py``); the array-API backend uses only
standard functions (``permute_dims``, ``reshape``, ``matmul``, slicing), which is what lets
``array_api_strict`` prove the executor relies on nothing NumPy-specific and what CuPy
runs on the GPU. The dry run carries shapes only (sizes may be composite means).
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from math import prod

import numpy as np
import opt_einsum

from ..errors import SequantEvalError
from ..forest.values import Value
from ..schedule.peak import STREAM_BYTES, sink_piece
from .dryrun import DryArray, DryRunBackend
from .graph import Backend
from .sources import LeafReader
from ..plan.kernels import EINSUM, MULTIPLY, ZEROS, ArrayView, ContractPlan, plan_contraction

__all__ = ["NumpyBackend", "ArrayApiBackend", "DryRunBackend", "DryArray", "get_backend",
           "add_scaled", "index_slices"]


def index_slices(index, ndim: int) -> tuple:
    """A batch index (per axis ``(start, stop)`` or ``None`` for the whole axis) as slices."""
    return tuple(slice(None) if r is None else slice(r[0], r[1]) for r in index) if index \
        else (slice(None),) * ndim


# -- NumPy ---------------------------------------------------------------------------------


def add_scaled(target: np.ndarray, src, alpha: float) -> None:
    """``target += alpha * src`` in place; with ``alpha`` ±1 no scaled copy of ``src``.

    Otherwise ``src`` is scaled piece by piece (pieces of ``target`` of at most
    ``STREAM_BYTES``, as a sink is written) into one small buffer that stays in cache, and
    each piece added from there: the same two roundings per element as one scaled copy,
    without an addend-sized temporary to fault in and stream through memory twice (a
    transposed addend of an o³v³ sum ran at a quarter of the unscaled add's rate)."""
    if alpha == 1.0:
        target += src
    elif alpha == -1.0:
        target -= src
    else:
        if target.nbytes <= STREAM_BYTES or np.may_share_memory(target, src):
            target += alpha * src                 # one piece, or it reads what it writes
            return
        axis, rows = sink_piece(target.shape, target.itemsize)
        src = np.broadcast_to(src, target.shape)
        buf = np.empty(rows * prod(target.shape[axis + 1:]), np.result_type(src, alpha))
        for head in itertools.product(*(range(n) for n in target.shape[:axis])):
            for lo in range(0, target.shape[axis], rows):
                at = head + (slice(lo, lo + rows),)
                piece = target[at]
                scaled = buf[: piece.size].reshape(piece.shape)
                np.multiply(src[at], alpha, out=scaled)
                np.add(piece, scaled, out=piece)


def _strided(x: np.ndarray, view: ArrayView) -> np.ndarray:
    size = x.itemsize
    return np.ndarray(view.shape, x.dtype, x, 0, tuple(s * size for s in view.strides))


def _operand(x: np.ndarray, view: ArrayView) -> np.ndarray:
    if view.perm is not None:
        x = np.asarray(x.transpose(view.perm), order="C")
    elif not x.flags.c_contiguous:
        x = np.asarray(x, order="C")
    return _strided(x, view)


class NumpyBackend(Backend):
    """NumPy on the CPU: contractions as planned strided GEMMs (``plan/kernels.py``), the
    plans cached per shape, starting from the schedule's own (``know``)."""

    name = "numpy"
    symbolic = False

    def __init__(self) -> None:
        self.plans: dict[tuple, ContractPlan] = {}
        self.plan_cap: int | None = None       # most plans kept (least recently used go)
        self.first: dict[tuple, ContractPlan] = {}   # (value, layout) → its first plan
        self.dtype = np.dtype(np.float64)      # of destinations: the evaluation's dtype

    def asarray(self, x):
        return np.asarray(x, order="C")

    def take(self, block, index, shape):
        """A batch of ``block``. Read from a source it is what the source gives — a view of
        a caller's array, not copied here: a kernel that needs it contiguous copies it once
        (with its transpose), and the prediction counts the batch as a buffer of its own,
        so the process holds no more than predicted. Nothing writes into it in place."""
        if isinstance(block, LeafReader):
            return np.asarray(block.read(index))
        return np.asarray(block[index_slices(index, block.ndim)], order="C")

    def zeros(self, shape):
        return np.zeros(shape, self.dtype)

    def know(self, plans, cap: int) -> None:
        """Start from kernel plans made already (the schedule's, at full batches):
        ``(vid, left shape, right shape, result shape, layout) → plan``, as many as ``cap``
        allows beside those held. A contraction's first plan is still the one its first run
        uses; keys never asked for cost nothing."""
        for key, plan in itertools.islice(plans.items(), max(0, cap - len(self.plans))):
            self.plans.setdefault(key, plan)

    def contract(self, values, vid: int, a, b, out_shape, layout=None):
        """``values[vid]`` of ``a`` and ``b``; ``layout`` (a permutation of the value's modes)
        asks for the result written in that order instead of the value's own."""
        key = (vid, a.shape, b.shape, tuple(out_shape), layout)
        plan = self.plans.pop(key, None)
        if plan is None:
            v = values[vid]
            if layout is not None:
                v = replace(v, result=tuple(v.result[p] for p in layout))
            # a contraction's first shape is its full batch: a later (short) batch takes
            # that plan's grouping instead of a search, and no more scratch than it had
            like = self.first.get((vid, layout))
            plan = plan_contraction(v, values[v.left.value], values[v.right.value],
                                    tuple(out_shape), a.shape, b.shape, like)
            while self.plans and self.plan_cap is not None and len(self.plans) >= self.plan_cap:
                del self.plans[next(iter(self.plans))]       # the least recently used
        self.first.setdefault((vid, layout), plan)
        self.plans[key] = plan                                 # now the most recent
        return self._run(plan, a, b)

    @staticmethod
    def _run(plan: ContractPlan, a, b):
        kind = plan.kind
        if kind == EINSUM or a.dtype.hasobject or b.dtype.hasobject:
            return np.asarray(opt_einsum.contract(plan.einsum, a, b), order="C")
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
        if plan.reduce:
            np.sum(tmp.reshape(-1, out.size), axis=0, out=out.reshape(-1))
        else:
            np.copyto(out, tmp.transpose(z.perm))
        return out

    def scale_(self, x, alpha: float):
        if alpha != 1.0:
            x *= alpha
        return x

    def permute(self, x, perm):
        return x.transpose(perm)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def accumulate_(self, target, src, alpha: float):
        add_scaled(target, src, alpha)
        return target

    def scatter_(self, target, src, index):
        target[index_slices(index, target.ndim)] = src
        return target

    def add_into_(self, target, src, index, perm, alpha: float):
        view = target[index_slices(index, target.ndim)] if any(r is not None for r in index) \
            else target                        # (a 0-d array indexed by () is a copy)
        self.accumulate_(view, src.transpose(perm), alpha)
        return target

    def init(self, src, alpha: float):
        out = np.empty(src.shape, dtype=src.dtype)
        np.multiply(src, alpha, out=out)
        return out

    def to_host(self, x):
        return x

    def from_host(self, x):
        return x

    def nbytes(self, x) -> int:
        return int(x.nbytes)


# -- array API (array_api_strict, CuPy) ------------------------------------------------------


class ArrayApiBackend(Backend):
    """Only array-API standard calls; contractions as permute_dims/reshape/matmul."""

    symbolic = False

    def __init__(self, xp, name: str = "array_api") -> None:
        self.xp = xp
        self.name = name
        self.dtype = np.dtype(np.float64)

    def asarray(self, x):
        return self.xp.asarray(x)

    def take(self, block, index, shape):
        if isinstance(block, LeafReader):
            return self.xp.asarray(np.asarray(block.read(index), order="C"), copy=True)
        part = block[index_slices(index, len(block.shape))]
        return self.xp.asarray(part, copy=True)

    def zeros(self, shape):
        return self.xp.zeros(tuple(shape), dtype=getattr(self.xp, self.dtype.name))

    def contract(self, values, vid: int, a, b, out_shape, layout=None):
        xp = self.xp
        v: Value = values[vid]
        lm, rm, res = v.left.modes, v.right.modes, v.result
        ext = dict(zip(lm, a.shape)) | dict(zip(rm, b.shape))
        batch = [m for m in res if m in lm and m in rm]
        summed = [m for m in lm if m in rm and m not in res]
        fa = [m for m in lm if m not in rm]
        fb = [m for m in rm if m not in lm]
        x = xp.permute_dims(a, tuple(lm.index(m) for m in batch + fa + summed))
        y = xp.permute_dims(b, tuple(rm.index(m) for m in batch + summed + fb))
        nb, nfa, nk, nfb = (prod(ext[m] for m in g) for g in (batch, fa, summed, fb))
        z = xp.matmul(xp.reshape(x, (nb, nfa, nk)), xp.reshape(y, (nb, nk, nfb)))
        natural = batch + fa + fb
        z = xp.reshape(z, tuple(ext[m] for m in natural))
        if layout is not None:
            res = tuple(res[p] for p in layout)
        z = xp.permute_dims(z, tuple(natural.index(m) for m in res))
        return xp.reshape(z, tuple(out_shape))

    def scale_(self, x, alpha: float):
        if alpha != 1.0:
            x *= alpha
        return x

    def permute(self, x, perm):
        return self.xp.permute_dims(x, tuple(perm))

    def reshape(self, x, shape):
        return self.xp.reshape(x, tuple(shape))

    def accumulate_(self, target, src, alpha: float):
        if alpha == 1.0:
            target += src
        else:
            target += alpha * src
        return target

    def scatter_(self, target, src, index):
        target[index_slices(index, len(target.shape))] = src
        return target

    def add_into_(self, target, src, index, perm, alpha: float):
        add = alpha * self.xp.permute_dims(src, tuple(perm))
        if not any(r is not None for r in index):
            target += add
            return target
        at = index_slices(index, len(target.shape))
        target[at] = target[at] + add
        return target

    def init(self, src, alpha: float):
        return alpha * src

    def to_host(self, x):
        return np.asarray(x)

    def from_host(self, x):
        return self.xp.asarray(x)

    def nbytes(self, x) -> int:
        return prod(x.shape) * self.dtype.itemsize


def get_backend(name: str):
    """A CPU backend by name: numpy, dryrun or array_api_strict (cupy and auto are the GPU
    layer's: ``gpu.backend.gpu_backends``)."""
    if name == "numpy":
        return NumpyBackend()
    if name == "dryrun":
        return DryRunBackend()
    if name == "array_api_strict":
        import array_api_strict

        return ArrayApiBackend(array_api_strict, "array_api_strict")
    raise SequantEvalError(f"unknown backend {name!r}; choose numpy, cupy, auto, dryrun or "
                           f"array_api_strict")
