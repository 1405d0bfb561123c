"""The unbatched walk: a fixed, demand-driven evaluation order of a forest.

Roots are visited in equation order; a value is produced right before its first use, and each
term is accumulated into its sum as soon as it exists, so term results do not pile up. After
every step the values read for the last time are released. The first accumulation into a sum
*moves* the term's buffer into the sum (scaled in place) when that is the term's last read and
needs no transpose, which saves one allocation per equation.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..forest.values import Forest, ValueKind

__all__ = ["StepKind", "Step", "Walk", "build_walk"]


class StepKind(enum.Enum):
    FETCH = "fetch"
    CONTRACT = "contract"
    ACCUMULATE = "accumulate"
    ZEROS = "zeros"             # a sum whose terms all cancelled


@dataclass(frozen=True)
class Step:
    kind: StepKind
    value: int                  # the value produced (or the sum accumulated into)
    entry: int = -1             # ACCUMULATE: which entry of the sum
    first: bool = False         # ACCUMULATE: allocates (or moves into) the sum
    move: bool = False          # ACCUMULATE: the sum takes over the entry's buffer
    frees: tuple[int, ...] = () # values released after this step


@dataclass(frozen=True)
class Walk:
    steps: tuple[Step, ...]

    def dump(self, forest: Forest) -> str:
        lines = []
        for k, s in enumerate(self.steps):
            if s.kind is StepKind.ACCUMULATE:
                e = forest.values[s.value].entries[s.entry]
                what = f"v{s.value} {'=' if s.first else '+='} {e.coefficient}·v{e.value}"
                what += " (move)" if s.move else ""
            else:
                what = f"v{s.value}"
            free = f"  free {','.join(f'v{v}' for v in s.frees)}" if s.frees else ""
            lines.append(f"{k:4d} {s.kind.value:10s} {what}{free}")
        return "\n".join(lines) + "\n"


def build_walk(forest: Forest) -> Walk:
    values = forest.values
    order: list[tuple[StepKind, int, int]] = []
    produced: set[int] = set()

    def need(v: int) -> None:
        if v in produced:
            return
        val = values[v]
        if val.kind is ValueKind.LEAF:
            order.append((StepKind.FETCH, v, -1))
        elif val.kind is ValueKind.CONTRACT:
            # Intermediates first, leaves last: a leaf is fetched just before it is read,
            # not held while the other operand's subtree is computed.
            for child in sorted(val.children, key=lambda c: values[c].kind is ValueKind.LEAF):
                need(child)
            order.append((StepKind.CONTRACT, v, -1))
        elif not val.entries:
            order.append((StepKind.ZEROS, v, -1))
        else:
            for k, entry in enumerate(val.entries):
                need(entry.value)
                order.append((StepKind.ACCUMULATE, v, k))
        produced.add(v)

    for root in forest.roots:
        need(root.value)

    def reads(kind: StepKind, v: int, k: int) -> tuple[int, ...]:
        if kind is StepKind.CONTRACT:
            return values[v].children
        if kind is StepKind.ACCUMULATE:
            return (values[v].entries[k].value,)
        return ()

    last: dict[int, int] = {}
    for s, (kind, v, k) in enumerate(order):
        for r in reads(kind, v, k):
            last[r] = s
    keep = {r.value for r in forest.roots}
    steps, started = [], set()
    for s, (kind, v, k) in enumerate(order):
        first = move = False
        frees = tuple(sorted({r for r in reads(kind, v, k) if last[r] == s and r not in keep}))
        if kind is StepKind.ACCUMULATE:
            first = v not in started
            started.add(v)
            entry = values[v].entries[k]
            move = (first and entry.value in frees
                    and values[entry.value].kind is not ValueKind.LEAF
                    and entry.perm == tuple(range(len(entry.perm))))
            if move:
                frees = tuple(r for r in frees if r != entry.value)
        steps.append(Step(kind, v, k, first, move, frees))
    return Walk(tuple(steps))
