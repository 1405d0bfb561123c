"""Contraction kernel plans: each binary contraction decided once as one strided ``np.matmul``.

The planning layer owns this model (the NumPy backend executes it) because the schedule's
peak prediction charges what a kernel allocates beside its result.

A plan sees the two operands and the result as (possibly batched) matrices by *strided views*
of their contiguous storage: modes of one role that sit next to each other in memory merge
into one matrix dimension (rows ``M``, columns ``N``, contracted ``K``); every other result
mode becomes a batch dimension that ``np.matmul`` loops over. BLAS takes either storage order
of a matrix (a transpose flag), and ``matmul`` writes the result through the view straight
into the value's layout, so most contractions need no copy at all. Where no view works, the
operand is copied once into a layout that does (or the result is computed into a temporary
and transposed into place), or some contracted modes are *split* off as batch modes of a
temporary of partial products that is summed afterwards (cheaper than copying a big operand
for a small matrix-vector product).

Which modes merge, which are batched and what is copied is chosen by a small cost model
(BLAS efficiency as a function of the GEMM shape, a per-call overhead, a per-element copy
cost): among the candidate groupings, the one with the lowest predicted time wins, ties going
to the first candidate so that planning is deterministic. The model only ranks layouts; it
never changes what is computed, so results are exact whichever plan wins.

Contractions without a contracted mode (outer and Hadamard products) are one broadcasting
``np.multiply``; repeated labels within one operand, and arrays without a plain memory buffer
(object dtype), fall back to opt_einsum.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from collections.abc import Sequence

import opt_einsum

from ..forest.values import Value

__all__ = ["ArrayView", "ContractPlan", "plan_contraction", "GEMM", "MULTIPLY", "EINSUM",
           "ZEROS", "COPY_FLOPS", "PERMUTED_ADD_US"]

GEMM, MULTIPLY, EINSUM, ZEROS = "gemm", "multiply", "einsum", "zeros"

# Cost model (microseconds), calibrated on a 2-core AMD EPYC with OpenBLAS; it only ranks.
_CALL_US = 1.0                # one BLAS call inside matmul's batch loop
_GEMM_FLOPS_PER_US = 120e3    # large dgemm
_GEMV_FLOPS_PER_US = 25e3     # matrix-vector (memory bound)
_HALF_RATE_EXTENT = 20.0      # a GEMM side this long runs at about half the large rate
_STORE_US = 1e-4              # per result element written by a GEMM call
_COPY_US = 1.5e-3             # per element of a transposing copy (allocation included)
_REDUCE_US = 1.0e-3           # per element of a partial-product temporary (write, then sum)
_STRIDED_US = 4e-3            # per element of a vector read with a non-unit stride (a cache line)
#: What an add through a permutation with no contiguous inner run costs per element beyond
#: one whose innermost axis lines up (measured on o³v³ blocks of the (T) energy: 1-3 ns
#: against 0.6 ns an element).
PERMUTED_ADD_US = 1.0e-3
#: One copied entry in flops of a large dgemm (``_COPY_US`` at ``_GEMM_FLOPS_PER_US``).
COPY_FLOPS = round(_COPY_US * _GEMM_FLOPS_PER_US)


@dataclass(frozen=True, slots=True)
class ArrayView:
    """An array as ``np.matmul`` sees it: a shape and element strides over a contiguous buffer.

    For an operand the buffer is the operand itself, or, when ``perm`` is set, the contiguous
    copy ``operand.transpose(perm)``. For the result the buffer is the result, or, when
    ``buffer_shape`` is set, a temporary of that shape, afterwards either copied into the
    result as ``temporary.transpose(perm)`` or (split contractions) summed over its leading
    axes.
    """

    shape: tuple[int, ...]
    strides: tuple[int, ...]                 # in elements
    perm: tuple[int, ...] | None = None
    buffer_shape: tuple[int, ...] = ()

    @property
    def copies(self) -> bool:
        """Whether the array goes through a transposing copy (``perm`` is set)."""
        return self.perm is not None


@dataclass(frozen=True, slots=True)
class ContractPlan:
    """How one contraction value is computed; built once, executed every evaluation."""

    value: int
    kind: str                          # GEMM, MULTIPLY, EINSUM or ZEROS
    left: ArrayView | None
    right: ArrayView | None
    out: ArrayView | None              # GEMM: the result view (MULTIPLY: None, writes in place)
    out_shape: tuple[int, ...]
    einsum: str                        # the contraction as einsum subscripts (EINSUM runs it)
    flops: int                         # 2 · multiply-adds
    gemm: tuple[int, int, int, int] = (0, 0, 0, 0)   # GEMM: batch, m, n, k
    cost_us: float = 0.0               # the model's estimate for the chosen plan
    reduce: int = 0                    # GEMM: leading axes of ``out``'s temporary summed away
    grouping: tuple = ()               # GEMM: the (rows, cols, contracted) modes chosen

    @property
    def scratch_elements(self) -> int:
        """Elements of the temporaries the plan allocates beside its result while it runs:
        transposing copies of the operands and the result's temporary. The peak prediction
        charges them at the contraction's build point."""
        if self.kind != GEMM:
            return 0
        total = 0
        for view in (self.left, self.right, self.out):
            if view is not None and view.buffer_shape:
                total += prod(view.buffer_shape)
        return total

    def dump(self) -> str:
        """One line: kind, GEMM shape and which arrays are copied."""
        if self.kind != GEMM:
            return f"v{self.value} {self.kind} -> {self.out_shape}"
        b, m, n, k = self.gemm
        copied = [name for name, v in (("left", self.left), ("right", self.right),
                                       ("out", self.out)) if v.copies]
        split = f" split {self.reduce}" if self.reduce else ""
        return (f"v{self.value} gemm {b}x({m}x{k})·({k}x{n}) copy "
                f"{','.join(copied) or 'none'}{split} ~{self.cost_us:.0f}us")


def gemm_time_us(m: int, n: int, k: int) -> float:
    """Model time of one ``(m×k)·(k×n)`` BLAS call."""
    flops = 2.0 * m * n * k
    if m == 1 or n == 1:
        return _CALL_US + flops / _GEMV_FLOPS_PER_US
    h = _HALF_RATE_EXTENT
    eff = (m / (m + h)) * (n / (n + h)) * (k / (k + 1.0))
    return _CALL_US + flops / (_GEMM_FLOPS_PER_US * eff) + _STORE_US * m * n


class _Layout:
    """A contiguous array's modes: element stride of each, and the non-trivial modes in order."""

    def __init__(self, modes: Sequence[int], extent: dict[int, int]) -> None:
        self.modes = tuple(modes)
        self.stride: dict[int, int] = {}
        acc = 1
        for m in reversed(self.modes):
            self.stride[m] = acc
            acc *= extent[m]
        self.size = acc
        self.order = tuple(m for m in self.modes if extent[m] > 1)   # extent-1 modes vanish
        self.at = {m: i for i, m in enumerate(self.order)}

    def runs(self, members: set[int]) -> list[tuple[int, ...]]:
        """Every run of consecutive non-trivial modes, all in ``members`` (mergeable groups)."""
        out = []
        for i in range(len(self.order)):
            for j in range(i + 1, len(self.order) + 1):
                if self.order[j - 1] not in members:
                    break
                out.append(self.order[i:j])
        return out

    def merged(self, group: tuple[int, ...]) -> int | None:
        """Stride of ``group`` as one dimension, None if not consecutive in this order."""
        if not group:
            return 0
        at = self.at
        first = at.get(group[0])
        if first is None:
            return None
        for k, m in enumerate(group):
            if at.get(m) != first + k:
                return None
        return self.stride[group[-1]]


def _core(d1: int, s1: int, d2: int, s2: int) -> tuple[int, int] | None:
    """Strides of a ``d1×d2`` matrix that BLAS can take, or None (needs a copy).

    A vector (one side 1) takes any stride; a matrix needs one unit stride and a leading
    stride at least the other extent. An empty group (extent 1) gets a stride that makes the
    matrix blasable either way.
    """
    if d1 == 1:
        s1 = d2 if s2 == 1 else 1
    if d2 == 1:
        s2 = d1 if s1 == 1 else 1
    if d1 == 1 or d2 == 1:
        return s1, s2
    if (s2 == 1 and s1 >= d2) or (s1 == 1 and s2 >= d1):
        return s1, s2
    return None


def _matrix_view(layout: _Layout, batch: Sequence[int], rows: tuple[int, ...],
                 cols: tuple[int, ...], extent: dict[int, int], d1: int, d2: int
                 ) -> ArrayView | None:
    """View of ``layout`` as ``batch × (rows × cols)`` (``d1``, ``d2``: the extents of
    ``rows`` and ``cols``); None when no strided view exists."""
    r, c = layout.merged(rows), layout.merged(cols)
    if r is None or c is None:
        return None
    core = _core(d1, r, d2, c)
    if core is None:
        return None
    shape = tuple(extent[m] if m in layout.stride else 1 for m in batch) + (d1, d2)
    strides = tuple(layout.stride.get(m, 0) for m in batch) + core
    return ArrayView(shape, strides)


def _copied_view(layout: _Layout, batch: Sequence[int], rows: tuple[int, ...],
                 cols: tuple[int, ...], extent: dict[int, int], d1: int, d2: int,
                 result: bool) -> ArrayView:
    """The view after copying into the contiguous layout (own batch modes, rows, cols)."""
    own = [m for m in batch if m in layout.stride]
    copy_modes = (*own, *rows, *cols)
    rest = [m for m in layout.modes if m not in copy_modes]          # extent-1 modes
    copy_modes = (*rest, *copy_modes)
    copy_layout = _Layout(copy_modes, extent)
    view = _matrix_view(copy_layout, batch, rows, cols, extent, d1, d2)
    buffer_shape = tuple(extent[m] for m in copy_modes)
    if result:   # temporary in copy order → result order
        perm = tuple(copy_modes.index(m) for m in layout.modes)
    else:        # operand storage → copy order
        perm = tuple(layout.modes.index(m) for m in copy_modes)
    return ArrayView(view.shape, view.strides, perm, buffer_shape)


def _orders(layouts: Sequence[_Layout], members: set[int]) -> list[tuple[int, ...]]:
    """Candidate orders of one group: mergeable runs in any layout, the whole group, none."""
    seen: dict[tuple[int, ...], None] = {(): None}
    for lay in layouts:
        whole = tuple(m for m in lay.order if m in members)
        if whole:
            seen.setdefault(whole, None)
        for run in lay.runs(members):
            seen.setdefault(run, None)
    return list(seen)


def _subscripts(value: Value, extent: dict[int, int]) -> str:
    a, b, r = value.left.modes, value.right.modes, value.result
    sym = {m: opt_einsum.get_symbol(k) for k, m in enumerate(extent)}
    return (f"{''.join(sym[m] for m in a)},{''.join(sym[m] for m in b)}"
            f"->{''.join(sym[m] for m in r)}")


def _multiply_plan(value: Value, extent: dict[int, int], out_shape, flops,
                   subscripts: str) -> ContractPlan:
    """No contracted mode: each operand broadcast to the result's shape (stride 0 where absent)."""
    r = value.result
    views = []
    for modes in (value.left.modes, value.right.modes):
        lay = _Layout(modes, extent)
        views.append(ArrayView(tuple(out_shape), tuple(lay.stride.get(m, 0) for m in r)))
    return ContractPlan(value.id, MULTIPLY, views[0], views[1], None, out_shape, subscripts,
                        flops, cost_us=_COPY_US * prod(out_shape))


def plan_contraction(value: Value, left: Value, right: Value,
                     extents: Sequence[int], left_extents: Sequence[int],
                     right_extents: Sequence[int], like: ContractPlan | None = None
                     ) -> ContractPlan:
    """Plan ``value = left · right`` given the extent of every mode of the three arrays.

    Remembered by what decides it (the pattern of mode labels across the three arrays and
    their shapes, not which labels or which value): the schedule stage asks again for every
    schedule it analyses, and many contractions of a forest share a pattern and shapes.

    ``like``: a plan of the same contraction at other extents (a full batch, when this is
    a short one). Its grouping is taken when it still applies — no search, nothing
    remembered, and no more scratch than it had — else the plan is searched as usual."""
    if like is not None and like.kind == GEMM:
        found = _planned_like(value, like, extents, left_extents, right_extents)
        if found is not None:
            return found
    a, b, r = value.left.modes, value.right.modes, value.result
    canon: dict[int, int] = {}
    for m in (*a, *b, *r):
        canon.setdefault(m, len(canon))
    key = (tuple(canon[m] for m in a), tuple(canon[m] for m in b), tuple(canon[m] for m in r),
           tuple(extents), tuple(left_extents), tuple(right_extents))
    got = _PLANS.get(key)
    if got is None:
        if len(_PLANS) >= _REMEMBERED:
            _PLANS.clear()
        plan = _plan_contraction(value, extents, left_extents, right_extents)
        _PLANS[key] = (plan, tuple(tuple(canon[m] for m in g) for g in plan.grouping))
        return plan
    plan, grouping = got
    labels = _relabel(grouping, canon)
    if plan.value == value.id and plan.grouping == labels:
        return plan
    # the plan is position-based (views, shapes, subscripts); only the value and the
    # grouping's mode labels name this contraction
    return replace(plan, value=value.id, grouping=labels)


def _relabel(grouping: tuple, canon: dict[int, int]) -> tuple:
    """A grouping in canonical mode numbers spelled in the labels ``canon`` numbers."""
    label = list(canon)
    return tuple(tuple(label[c] for c in g) for g in grouping)


#: How many kernel plans are remembered (a plan is a few hundred bytes).
_REMEMBERED = 8192
_PLANS: dict[tuple, tuple[ContractPlan, tuple]] = {}


def _planned_like(value: Value, like: ContractPlan, extents: Sequence[int],
                  left_extents: Sequence[int], right_extents: Sequence[int]
                  ) -> ContractPlan | None:
    """``like``'s grouping at these extents, or None where it does not apply (a mode it
    groups has become trivial, or no strided view exists)."""
    a, b, r = value.left.modes, value.right.modes, value.result
    extent = dict(zip(a, left_extents)) | dict(zip(b, right_extents))
    big = {m for m, e in extent.items() if e > 1}
    rows, cols, ks = like.grouping
    contracted = (set(a) & set(b) & big) - set(r)
    if not set(rows + cols + ks) <= big or not set(ks) <= contracted:
        return None
    la, lb, lr = _Layout(a, extent), _Layout(b, extent), _Layout(r, extent)
    found = _gemm_candidate(la, lb, lr, rows, cols, ks, contracted, extent)
    if found is None:
        return None
    cost, xa, xb, xz, shape, reduce = found
    return ContractPlan(value.id, GEMM, xa, xb, xz, tuple(extents), _subscripts(value, extent),
                        2 * prod(extent.values()), shape, cost, reduce, like.grouping)


def _plan_contraction(value: Value, extents: Sequence[int], left_extents: Sequence[int],
                      right_extents: Sequence[int]) -> ContractPlan:
    a, b, r = value.left.modes, value.right.modes, value.result
    extent = dict(zip(a, left_extents)) | dict(zip(b, right_extents))
    flops = 2 * prod(extent.values())
    out_shape = tuple(extents)
    sub = _subscripts(value, extent)
    if len(set(a)) < len(a) or len(set(b)) < len(b) or not (set(a) | set(b)) >= set(r) \
            or (set(a) ^ set(b)) - set(r):
        return ContractPlan(value.id, EINSUM, None, None, None, out_shape, sub, flops)
    if 0 in extent.values():
        return ContractPlan(value.id, ZEROS, None, None, None, out_shape, sub, 0)
    big = {m for m, e in extent.items() if e > 1}
    contracted = (set(a) & set(b) & big) - set(r)
    if not contracted:
        return _multiply_plan(value, extent, out_shape, flops, sub)
    la, lb, lr = _Layout(a, extent), _Layout(b, extent), _Layout(r, extent)
    free_a = (set(a) - set(b)) & big
    free_b = (set(b) - set(a)) & big
    # The cheapest grouping, ties to the first in this enumeration order. Its BLAS calls
    # alone bound a grouping's cost from below, so groupings are costed in order of that
    # bound and the search stops at the first whose bound exceeds the best cost found.
    orders = (_orders((la, lr), free_a), _orders((lb, lr), free_b),
              [ks for ks in _orders((la, lb), contracted) if ks])
    size = {g: prod(extent[m] for m in g) for o in orders for g in o}
    whole_r, whole_k = prod(extent[m] for m in lr.order), prod(extent[m] for m in contracted)
    groupings = []
    for rows in orders[0]:
        for cols in orders[1]:
            batch = whole_r // (size[rows] * size[cols])     # the result's other modes
            for ks in orders[2]:        # contracted modes outside ks: split into batches
                bound = batch * (whole_k // size[ks]) * gemm_time_us(size[rows], size[cols],
                                                                     size[ks])
                groupings.append((bound, len(groupings), (rows, cols, ks)))
    groupings.sort()                        # by bound, then enumeration order (unique)
    best, grouping = None, ()
    for bound, k, (rows, cols, ks) in groupings:
        if best is not None and bound > best[0][0]:
            break
        found = _gemm_candidate(la, lb, lr, rows, cols, ks, contracted, extent)
        if found is not None and (best is None or (found[0], k) < (best[0][0], best[1])):
            best, grouping = (found, k), (rows, cols, ks)
    cost, xa, xb, xz, shape, reduce = best[0]
    return ContractPlan(value.id, GEMM, xa, xb, xz, out_shape, sub, flops, shape, cost, reduce,
                        grouping)


def _gemm_candidate(la: _Layout, lb: _Layout, lr: _Layout, rows: tuple[int, ...],
                    cols: tuple[int, ...], ks: tuple[int, ...], contracted: set[int],
                    extent: dict[int, int], beat: float | None = None):
    """Cost and views of one grouping; None if it is not allowed, or (``beat`` given) if
    its BLAS calls alone cost no less than ``beat`` (copies only add to that).

    Contracted modes outside ``ks`` are *split*: they become batch modes of a temporary
    that holds one partial product per value of theirs and is then summed. That replaces a
    copy of a big operand whose contracted modes are not adjacent (a matrix-vector product
    with a small tensor, typically) by more, smaller BLAS calls.
    """
    split = tuple(m for m in la.order if m in contracted and m not in ks)
    batch = [*split, *(m for m in lr.order if m not in rows and m not in cols)]
    nbatch = prod(extent[m] for m in batch)
    m_, n_, k_ = (prod(extent[x] for x in g) for g in (rows, cols, ks))
    cost = nbatch * gemm_time_us(m_, n_, k_)
    if beat is not None and cost >= beat:
        return None
    xa = _matrix_view(la, batch, rows, ks, extent, m_, k_)
    if xa is None:
        xa = _copied_view(la, batch, rows, ks, extent, m_, k_, False)
        cost += _COPY_US * la.size
    xb = _matrix_view(lb, batch, ks, cols, extent, k_, n_)
    if xb is None:
        xb = _copied_view(lb, batch, ks, cols, extent, k_, n_, False)
        cost += _COPY_US * lb.size
    if m_ == 1 and xa.strides[-1] != 1:   # a vector operand read across cache lines
        cost += nbatch * k_ * _STRIDED_US
    if n_ == 1 and xb.strides[-2] != 1:
        cost += nbatch * k_ * _STRIDED_US
    if split:  # the temporary: split modes first, then the result's layout
        partial = _Layout((*split, *lr.modes), extent)
        xz = _matrix_view(partial, batch, rows, cols, extent, m_, n_)
        if xz is None:
            return None
        xz = ArrayView(xz.shape, xz.strides, None, tuple(extent[m] for m in partial.modes))
        cost += _REDUCE_US * partial.size
    else:
        xz = _matrix_view(lr, batch, rows, cols, extent, m_, n_)
        if xz is None:
            xz = _copied_view(lr, batch, rows, cols, extent, m_, n_, True)
            cost += _COPY_US * lr.size
    return cost, xa, xb, xz, (nbatch, m_, n_, k_), len(split)
