"""The block spaces of a symmetric sum (``api/symmetric.py``): its group checked against
the equations, the equations with each group index renamed to a space of its own, and the
caller's tensors read through those spaces at one tuple's block offsets."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..errors import ExpressionError, InputTypeError, UnsupportedFeature, UsageError
from ..expr import Equation, Index, Operator, Product, Tensor
from ..runtime.sources import takes_ranges

__all__ = ["Shifted", "check_inputs", "group_indices", "respaced"]


class Shifted:
    """A tensor read through the block spaces of one tuple: a slot in space ``a#k`` is
    the parent space's slot at that block's offset (a provider ``(spaces, ranges)``). The
    tensor is a mapping from spaces to blocks, a provider (taking ranges or not), or one
    array whose every axis spans exactly one space (an axis spanning several spaces
    concatenated cannot be shifted: such an array is refused)."""

    takes_ranges = True

    def __init__(self, name: str, value: object, parent: str, shifts: Mapping[str, int],
                 extents: Mapping[str, int]) -> None:
        self.name, self.value, self.parent = name, value, parent
        self.shifts, self.extents = dict(shifts), extents
        self._ranged = callable(value) and takes_ranges(value)

    def __call__(self, spaces: tuple[str, ...], ranges):
        plain = tuple(self.parent if s in self.shifts else s for s in spaces)
        at = tuple(slice(lo + self.shifts.get(s, 0), hi + self.shifts.get(s, 0))
                   for s, (lo, hi) in zip(spaces, ranges))
        value = self.value
        if isinstance(value, Mapping):
            if plain not in value:
                raise InputTypeError(f"tensor {self.name!r}: no block {plain} among the "
                                     f"blocks given ({', '.join(map(str, value))})")
            block = value[plain]
            if block is None:
                raise InputTypeError(f"tensor {self.name!r}: block {plain} is None; give an "
                                     f"array")
            return np.asarray(block[at])
        if callable(value):
            if self._ranged:
                return np.asarray(value(plain, tuple((x.start, x.stop) for x in at)))
            return np.asarray(value(plain)[at])
        shape = tuple(self.extents[s] for s in plain)
        if tuple(np.shape(value)) != shape:
            raise InputTypeError(
                f"tensor {self.name!r}: a symmetric sum reads one array only when each axis "
                f"spans one space (shape {shape} for {plain}), got {np.shape(value)}; give a "
                f"mapping from spaces to blocks, e.g. {{{plain!r}: block}}, or a provider")
        return np.asarray(value[at])


def group_indices(eqs: Sequence[Equation], group: Sequence[str]) -> tuple[Index, ...]:
    if isinstance(group, (str, bytes)) or not isinstance(group, Sequence) or not all(
            isinstance(x, (str, Index)) for x in group):
        raise UsageError(f"group must be a sequence of index labels, e.g. ('a_1', 'a_2', "
                         f"'a_3'); got {group!r}")
    labels = [x.label if isinstance(x, Index) else x for x in group]
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise UsageError(f"group must name two or more distinct indices, e.g. "
                         f"('a_1', 'a_2', 'a_3'); got {tuple(group)!r}")
    seen = {ix.label: ix for eq in eqs for p in eq.terms for t in p.factors for ix in t.slots}
    missing = [x for x in labels if x not in seen]
    if missing:
        raise ExpressionError(f"group index {missing[0]} is not in the equations")
    indices = tuple(seen[x] for x in labels)
    if len({ix.space for ix in indices}) != 1 or any(ix.protos for ix in indices):
        raise ExpressionError(f"the group {tuple(labels)} must be plain indices of one space")
    names = {eq.name: eq for eq in eqs}
    read = {t.name for eq in eqs for p in eq.terms for t in p.factors}
    for eq in eqs:
        if eq.name not in read and set(indices) & set(eq.indices):
            raise ExpressionError(f"result {eq.name} carries a group index; a symmetric sum "
                                  f"sums the group away (its results must not carry it)")
        if eq.name not in read:
            for p in eq.terms:
                lacking = [ix.label for ix in indices
                           if not any(ix in t.slots for t in p.factors)]
                if lacking:
                    raise ExpressionError(
                        f"term '{p}' of result {eq.name} does not sum over group index "
                        f"{lacking[0]}; every term of a result must sum over the whole group "
                        f"(a term without it would be counted once per tuple): evaluate it "
                        f"apart, with an Evaluator")
        for p in eq.terms:
            for op in p.operators:
                if set(op.indices) & set(indices):
                    raise UnsupportedFeature(
                        f"operator {op} in {eq.name} acts on group indices; each group index "
                        f"gets a block space of its own, which a permutation cannot swap: "
                        f"write the operator's permuted terms out")
            for t in p.factors:
                source = names.get(t.name)
                if source is None:
                    continue
                defined = [k for k, ix in enumerate(source.indices) if ix in indices]
                used = [k for k, ix in enumerate(t.slots) if ix in indices]
                if defined != used or any(source.indices[k] != t.slots[k] for k in used):
                    raise ExpressionError(
                        f"{eq.name} reads intermediate {t} with the group indices in other "
                        f"slots than {source.name} defines them; a symmetric sum needs "
                        f"every intermediate read as defined at the group's slots")
    return indices


def respaced(eq: Equation, rename: Mapping[Index, str]) -> Equation:
    def ix(i: Index) -> Index:
        return replace(i, space=rename[i]) if i in rename else i

    def tensor(t: Tensor) -> Tensor:
        return replace(t, bra=tuple(map(ix, t.bra)), ket=tuple(map(ix, t.ket)),
                       aux=tuple(map(ix, t.aux)))

    def operator(o: Operator) -> Operator:
        return replace(o, bra=tuple(map(ix, o.bra)), ket=tuple(map(ix, o.ket)))

    terms = tuple(Product(p.coefficient, tuple(map(tensor, p.factors)),
                          tuple(map(operator, p.operators))) for p in eq.terms)
    result = tensor(eq.result) if eq.result is not None else None
    return replace(eq, terms=terms, result=result)


def check_inputs(tensors: object, eqs: Sequence[Equation],
                 extents: Mapping[str, int]) -> None:
    """The caller's tensors refused before any work where ``Shifted`` cannot read them: not
    a mapping, a tensor of another type, a complex one (a symmetric sum is evaluated in
    float64, its tensors read through providers), or one array with an axis that does not
    span exactly the one space read at that slot."""
    if not isinstance(tensors, Mapping):
        raise InputTypeError(f"tensors must map tensor names to arrays, block mappings or "
                             f"providers, got {type(tensors).__name__}")
    reads: dict[str, set] = {}
    for eq in eqs:
        for p in eq.terms:
            for t in p.factors:
                reads.setdefault(t.name, set()).add(tuple(ix.space for ix in t.slots))
    for name, value in tensors.items():
        if not (isinstance(value, Mapping) or callable(value) or hasattr(value, "shape")):
            raise InputTypeError(f"tensor {name!r}: give an array, a mapping from spaces "
                                 f"to blocks or a provider, got {type(value).__name__}")
        arrays = value.values() if isinstance(value, Mapping) else (
            () if callable(value) else (value,))
        if any(np.iscomplexobj(np.empty(0, getattr(a, "dtype", float))) for a in arrays):
            raise UnsupportedFeature(f"tensor {name!r} is complex; a symmetric sum is "
                                     f"evaluated in float64 (its tensors read through "
                                     f"providers): evaluate complex tensors with an "
                                     f"Evaluator over every tuple")
        if isinstance(value, Mapping) or callable(value):
            continue
        for spaces in sorted(reads.get(name, ())):
            shape = tuple(extents[x] for x in spaces)
            if tuple(np.shape(value)) != shape:
                raise InputTypeError(
                    f"tensor {name!r}: a symmetric sum reads one array only when each axis "
                    f"spans one space (shape {shape} for {spaces}), got {np.shape(value)}; "
                    f"give a mapping from spaces to blocks, e.g. {{{spaces!r}: block}}, or "
                    f"a provider")
