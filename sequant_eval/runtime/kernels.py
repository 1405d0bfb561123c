"""Contraction plans: each binary contraction decided once as transpose/reshape + GEMM.

A plan says how to view each operand as a matrix (a free reshape, a reshape and ``.T`` that
BLAS takes as a transpose flag, or a transposing copy), the GEMM shape, and the final
reshape. The contracted modes are ordered to avoid copying the larger operand. Contractions
with Hadamard modes (a label on both operands and the result) fall back to opt_einsum.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from collections.abc import Sequence

import opt_einsum

from ..forest.values import Value

__all__ = ["MatrixView", "ContractPlan", "plan_contraction"]

RESHAPE, RESHAPE_T, COPY = 0, 1, 2


@dataclass(frozen=True)
class MatrixView:
    kind: int                       # RESHAPE, RESHAPE_T or COPY
    shape: tuple[int, int]          # the matrix shape as stored before any .T
    perm: tuple[int, ...] = ()      # COPY: transpose applied before the reshape

    def copied_elements(self) -> int:
        return self.shape[0] * self.shape[1] if self.kind == COPY else 0


@dataclass(frozen=True)
class ContractPlan:
    value: int
    left: MatrixView | None
    right: MatrixView | None
    out_shape: tuple[int, ...]
    gemm_shape: tuple[int, ...]        # the GEMM result as a tensor (left free, right free)
    out_perm: tuple[int, ...] | None   # transpose of the GEMM result, None when not needed
    einsum: str | None                 # fallback subscripts (Hadamard modes)
    flops: int                         # 2 · multiply-adds


def _view(modes: Sequence[int], rows: Sequence[int], cols: Sequence[int],
          extent: dict[int, int]) -> MatrixView:
    r = prod(extent[m] for m in rows)
    c = prod(extent[m] for m in cols)
    modes = tuple(modes)
    if modes == tuple(rows) + tuple(cols):
        return MatrixView(RESHAPE, (r, c))
    if modes == tuple(cols) + tuple(rows):
        return MatrixView(RESHAPE_T, (c, r))
    return MatrixView(COPY, (r, c), tuple(modes.index(m) for m in (*rows, *cols)))


def plan_contraction(value: Value, left: Value, right: Value,
                     extents: Sequence[int], left_extents: Sequence[int],
                     right_extents: Sequence[int]) -> ContractPlan:
    """Plan ``value = left · right`` given the extent of every mode of the three arrays."""
    a, b, r = value.left.modes, value.right.modes, value.result
    extent = dict(zip(a, left_extents)) | dict(zip(b, right_extents))
    flops = 2 * prod(extent.values())
    out_shape = tuple(extents)
    hadamard = set(a) & set(b) & set(r)
    if hadamard:
        sym = {m: opt_einsum.get_symbol(k) for k, m in enumerate(extent)}
        sub = (f"{''.join(sym[m] for m in a)},{''.join(sym[m] for m in b)}"
               f"->{''.join(sym[m] for m in r)}")
        return ContractPlan(value.id, None, None, out_shape, out_shape, None, sub, flops)
    free_a = [m for m in a if m in r]
    free_b = [m for m in b if m in r]
    best = None
    for k_order in ([m for m in a if m in b], [m for m in b if m in a]):
        lv = _view(a, free_a, k_order, extent)
        rv = _view(b, k_order, free_b, extent)
        cost = lv.copied_elements() + rv.copied_elements()
        if best is None or cost < best[0]:
            best = (cost, lv, rv)
    natural = tuple(free_a + free_b)
    out_perm = None if natural == tuple(r) else tuple(natural.index(m) for m in r)
    gemm_shape = tuple(extent[m] for m in natural)
    return ContractPlan(value.id, best[1], best[2], out_shape, gemm_shape, out_perm, None, flops)
