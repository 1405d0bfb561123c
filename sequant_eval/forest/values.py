"""The eval forest IR: interned values and the roots that read them.

A value is one array the evaluation may compute: a leaf block of an input tensor (or its
diagonal, ``T{a,a,b}``, or the reserved all-ones vector ``ONES`` that turns an index summed
inside one factor into a contraction), a binary contraction of two values, or a weighted sum
of (transposed) values. Values are interned by a
canonical structural key, so the same contraction written with other dummy labels, with its
operands swapped or its result modes in another order is one value. Every value has one
canonical mode layout; a use of it (an :class:`Occurrence`) names the labels that land on
those modes, which is how a transposed read is expressed.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from fractions import Fraction

from ..expr.index import Index

__all__ = ["ONES", "ValueKind", "Operand", "SumEntry", "Value", "Occurrence", "TermNode", "TermTree", "Root",
           "Forest"]


#: Name of the reserved all-ones leaf (no text can name it: a tensor name starts with a
#: letter). ``T{a,b}`` summed over ``b`` is the contraction ``T{a,b} * 1{b}``.
ONES = "1"


class ValueKind(enum.Enum):
    """What a value is: a leaf tensor block, a binary contraction, or an equation's sum."""

    LEAF = "leaf"
    CONTRACT = "contract"
    SUM = "sum"


@dataclass(frozen=True)
class Operand:
    """One side of a contraction: a value and the canonical label number on each of its modes."""

    value: int
    modes: tuple[int, ...]


@dataclass(frozen=True)
class SumEntry:
    """``coefficient · value`` read through ``perm``: output mode k reads mode ``perm[k]``."""

    coefficient: Fraction
    value: int
    perm: tuple[int, ...]


@dataclass(frozen=True)
class Value:
    """One interned value of the forest: its kind, modes (canonical layout) and operands or
    entries."""

    id: int
    kind: ValueKind
    spaces: tuple[str, ...]                 # space of each canonical mode (sizes the array)
    tensor: str | None = None               # LEAF: the input tensor's name
    left: Operand | None = None             # CONTRACT
    right: Operand | None = None            # CONTRACT
    result: tuple[int, ...] = ()            # CONTRACT: label numbers of the result modes
    entries: tuple[SumEntry, ...] = ()      # SUM
    name: str = ""                          # SUM: the equation (or operator group) it builds
    groups: tuple[int, ...] = ()            # per mode: composite proto-set id, -1 plain
    diagonal: tuple[int, ...] = ()          # LEAF: per tensor slot, the mode it reads
                                            # (a diagonal, ``T{a,a,b}``: (0, 0, 1)); () one each

    @property
    def rank(self) -> int:
        """Number of modes (axes) of the value."""
        return len(self.spaces)

    @property
    def slot_spaces(self) -> tuple[str, ...]:
        """LEAF: the space of each slot of the tensor read (a diagonal reads one mode at
        several slots); the modes' spaces for any other value."""
        if not self.diagonal:
            return self.spaces
        return tuple(self.spaces[m] for m in self.diagonal)

    @property
    def children(self) -> tuple[int, ...]:
        """Values this one is computed from: both operands of a contraction, every
        entry of a sum, none for a leaf."""
        if self.kind is ValueKind.CONTRACT:
            return (self.left.value, self.right.value)
        if self.kind is ValueKind.SUM:
            return tuple(e.value for e in self.entries)
        return ()

    def describe(self) -> str:
        """One line: ``v7 contract(v2[0,1,2,3] v5[2,3,4,5] -> [0,1,4,5])``."""
        shape = ",".join(self.spaces)
        if self.kind is ValueKind.LEAF:
            body = f"leaf {self.tensor}" + (
                f" diagonal[{','.join(map(str, self.diagonal))}]" if self.diagonal else "")
        elif self.kind is ValueKind.CONTRACT:
            def side(op: Operand) -> str:
                return f"v{op.value}[{','.join(map(str, op.modes))}]"
            body = (f"contract {side(self.left)} {side(self.right)} -> "
                    f"[{','.join(map(str, self.result))}]")
        else:
            parts = [f"{e.coefficient}·v{e.value}" + (
                "" if e.perm == tuple(range(len(e.perm))) else f"^({','.join(map(str, e.perm))})")
                for e in self.entries]
            body = f"sum {self.name} = " + " + ".join(parts)
        return f"v{self.id} ({shape}) {body}"


@dataclass(frozen=True)
class Occurrence:
    """A use of ``value`` in a term, with the user's labels on its canonical modes."""

    value: int
    labels: tuple[Index, ...]


@dataclass(frozen=True)
class TermNode:
    """One node of a term's binary tree: a use of ``value`` with the term's labels."""

    value: int
    labels: tuple[Index, ...]
    children: tuple[int, ...] = ()          # node indices within the tree (none for a leaf)

    @property
    def occurrence(self) -> Occurrence:
        """This node's value with the labels it carries in the term."""
        return Occurrence(self.value, self.labels)


@dataclass(frozen=True)
class TermTree:
    """The binarized tree of one term; nodes are listed children before parents."""

    where: str                              # "term 3 of R2", for messages
    nodes: tuple[TermNode, ...]
    root: int

    @property
    def root_occurrence(self) -> Occurrence:
        """The occurrence of the term's result (its root node)."""
        return self.nodes[self.root].occurrence


@dataclass(frozen=True)
class Root:
    """An equation's result: ``value`` holds it, axes in ``indices`` order (slot order)."""

    name: str
    value: int
    indices: tuple[Index, ...]


@dataclass(frozen=True)
class Forest:
    """All equations as one DAG of interned values: the values, the equation roots and each
    term's binary tree."""

    values: tuple[Value, ...]               # children always precede parents; id == position
    roots: tuple[Root, ...]
    binary_contractions: int                # contraction nodes before interning (all terms)
    leaf_users: dict[int, str] = field(default_factory=dict, compare=False)
    trees: dict[int, TermTree] = field(default_factory=dict, compare=False)  # term-root value → tree

    @property
    def distinct_contractions(self) -> int:
        """Contraction values after interning: each distinct contraction once."""
        return sum(1 for v in self.values if v.kind is ValueKind.CONTRACT)

    def dump(self) -> str:
        """Stable text: counts, every value, then every root and the value it is."""
        lines = [f"forest: {len(self.values)} values, {len(self.roots)} roots, "
                 f"{self.binary_contractions} binary contractions -> "
                 f"{self.distinct_contractions} distinct"]
        lines += [v.describe() for v in self.values]
        for r in self.roots:
            lines.append(f"root {r.name}{{{','.join(map(str, r.indices))}}} = v{r.value}")
        return "\n".join(lines) + "\n"
