"""Tensors, operators, products and equations: the expression IR.

A product is an exact rational coefficient, zero or more permutation operators (``A`` the
normalized antisymmetrizer, ``P`` the pair transposition) and tensor factors. An equation
names its result (``R2{a_1,a_2;i_1,i_2} = ...``, a scalar ``E = ...``) or is a bare
expression whose result indices are its free ones.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from math import factorial

from collections.abc import Iterable

from ..errors import ExpressionError
from .index import Index

__all__ = ["Tensor", "Operator", "Product", "Equation", "free_indices", "operator_terms",
           "check_unique_results"]


@dataclass(frozen=True)
class Tensor:
    """``Name{bra;ket;aux}`` with an optional symmetry tag such as ``A-C-S``."""

    name: str
    bra: tuple[Index, ...] = ()
    ket: tuple[Index, ...] = ()
    aux: tuple[Index, ...] = ()
    symmetry: str | None = None

    @property
    def slots(self) -> tuple[Index, ...]:
        """Indices in slot order: bra, then ket, then aux."""
        return self.bra + self.ket + self.aux

    def __str__(self) -> str:
        from .printer import format_tensor

        return format_tensor(self)


@dataclass(frozen=True)
class Operator:
    """A permutation operator acting on the result of the product it appears in.

    ``kind == "A"``: SeQuant's normalized antisymmetrizer over ``bra`` positions and over
    ``ket`` positions, 1/(n!·m!) Σ sgn(σ)·sgn(τ) σ·τ.  ``kind == "P"``: ``bra`` holds two
    indices x, y and the operator is X − X with x↔y.
    """

    kind: str
    bra: tuple[Index, ...] = ()
    ket: tuple[Index, ...] = ()

    @property
    def indices(self) -> tuple[Index, ...]:
        """The indices the operator permutes: bra, then ket."""
        return self.bra + self.ket

    def __str__(self) -> str:
        from .printer import format_operator

        return format_operator(self)


@dataclass(frozen=True)
class Product:
    """A product of tensors (and operators) with an exact rational coefficient."""

    coefficient: Fraction
    factors: tuple[Tensor, ...]
    operators: tuple[Operator, ...] = ()

    def __str__(self) -> str:
        from .printer import format_product

        return format_product(self)


@dataclass(frozen=True)
class Equation:
    """``name = Σ terms``; ``result`` is the left-hand tensor (None for a scalar or bare form)."""

    name: str
    terms: tuple[Product, ...]
    result: Tensor | None = None
    bare: bool = False

    @property
    def indices(self) -> tuple[Index, ...]:
        """Result indices in output axis order."""
        if self.result is not None:
            return self.result.slots
        if self.bare and self.terms:
            return free_indices(self.terms[0])
        return ()

    def __str__(self) -> str:
        from .printer import format_equation

        return format_equation(self)


def check_unique_results(eqs: Iterable[Equation],
                         origins: Iterable[str] | None = None) -> None:
    """Refuse two equations with one result name (one would silently replace the other).

    ``origins`` (one per equation, e.g. the file it came from) is named in the message."""
    eqs = list(eqs)
    where = list(origins) if origins is not None else [f"equation {k + 1}"
                                                         for k in range(len(eqs))]
    seen: dict[str, str] = {}
    for eq, origin in zip(eqs, where):
        if eq.name in seen:
            raise ExpressionError(
                f"two equations define result {eq.name} ({seen[eq.name]} and {origin}); merge "
                f"their terms into one equation or rename one result")
        seen[eq.name] = origin


def index_counts(product: Product) -> Counter[Index]:
    """How often each index labels a slot of a tensor factor (protos do not count)."""
    return Counter(ix for t in product.factors for ix in t.slots)


def free_indices(product: Product) -> tuple[Index, ...]:
    """Indices that label exactly one slot, sorted by space, then number, then protos."""
    counts = index_counts(product)
    return tuple(sorted(ix for ix, n in counts.items() if n == 1))


def operator_terms(
    operators: tuple[Operator, ...], result: tuple[Index, ...]
) -> list[tuple[Fraction, tuple[int, ...]]]:
    """Expand operators into weighted permutations of the result modes.

    Each entry ``(w, perm)`` contributes ``w · X`` with mode ``k`` of the output reading mode
    ``perm[k]`` of X. Equal permutations are merged; zero weights are dropped.
    """
    terms: dict[tuple[int, ...], Fraction] = {tuple(range(len(result))): Fraction(1)}
    pos = {ix: k for k, ix in enumerate(result)}
    for op in operators:
        factor = _operator_perms(op, pos, len(result))
        merged: dict[tuple[int, ...], Fraction] = {}
        for perm, w in terms.items():
            for sub, v in factor:
                # (σ ∘ X)[k] = X[σ(k)]; composing: out[k] reads prev[sub[k]] reads X[perm[sub[k]]]
                composed = tuple(perm[sub[k]] for k in range(len(result)))
                merged[composed] = merged.get(composed, Fraction(0)) + w * v
        terms = {p: w for p, w in merged.items() if w != 0}
    return sorted(((w, p) for p, w in terms.items()), key=lambda e: e[1])


def _operator_perms(
    op: Operator, pos: dict[Index, int], rank: int
) -> list[tuple[tuple[int, ...], Fraction]]:
    if op.kind == "P":
        x, y = (pos[ix] for ix in op.bra)
        swap = list(range(rank))
        swap[x], swap[y] = y, x
        return [(tuple(range(rank)), Fraction(1)), (tuple(swap), Fraction(-1))]
    groups = [[pos[ix] for ix in op.bra], [pos[ix] for ix in op.ket]]
    norm = Fraction(1, factorial(len(groups[0])) * factorial(len(groups[1])))
    out = []
    for pb in itertools.permutations(range(len(groups[0]))):
        for pk in itertools.permutations(range(len(groups[1]))):
            perm = list(range(rank))
            for slots, p in ((groups[0], pb), (groups[1], pk)):
                for k, src in enumerate(p):
                    perm[slots[k]] = slots[src]
            out.append((tuple(perm), norm * _parity(pb) * _parity(pk)))
    return out


def _parity(p: tuple[int, ...]) -> int:
    sign, seen = 1, [False] * len(p)
    for start in range(len(p)):
        if seen[start]:
            continue
        length, k = 0, start
        while not seen[k]:
            seen[k] = True
            k = p[k]
            length += 1
        if length % 2 == 0:
            sign = -sign
    return sign
