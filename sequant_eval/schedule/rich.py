"""The schedule with static points and loop identity (``RichSchedule``), the IR between
loop fusion (``boulevard``) and the sequencer (``ordered``), which both import it.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..plan.loops import Loop
from .forms import Form, FormKind

__all__ = ["RichSchedule", "readers_and_order", "rich_from_forms"]


@dataclass(frozen=True)
class RichSchedule:
    """Forms with static points and loop identity: what the sequencer orders.

    ``rank`` is each form's static point of completion (a sum's: its first entry's),
    ``accumulate_rank`` each sum entry's; ``readers`` who reads a form (reader, leg);
    ``loop_order`` the (outer, inner) loop pairs of every nest; ``fused`` maps planned
    loop ids to the surviving ones; ``size`` gives a form's bytes, which the sequencer
    weighs the order inside a loop block by."""

    forms: tuple[Form, ...]                        # canonical forms, children before parents
    loops: dict[int, Loop]                         # surviving loop ids → loop
    rank: tuple[int, ...]                          # per form: static point of completion
    accumulate_rank: dict[tuple[int, int], int]    # (sum form, entry) → static point
    readers: dict[int, tuple[tuple[int, int], ...]] = field(compare=False)  # form → (reader, leg)
    loop_order: frozenset[tuple[int, int]] = frozenset()   # (outer, inner) pairs
    fused: dict[int, int] = field(default_factory=dict)    # planned loop id → surviving id
    term_results: dict[int, int] = field(default_factory=dict)  # term value → result form
    num_points: int = 0
    #: a form's bytes (``forms.FormBytes``); None (hand-made fixtures): blocks in rank order
    size: Callable[[Form], int] | None = field(default=None, compare=False, repr=False)

    def dump(self) -> str:
        """Stable text: the loops, then every form with its rank (first use)."""
        lines = [str(self.loops[l]) for l in sorted(self.loops)]
        lines += [f"{f.describe()} @{self.rank[f.id]}" for f in self.forms]
        return "\n".join(lines) + "\n"


def readers_and_order(forms: list[Form]) -> tuple[dict, frozenset]:
    """Who reads each form (reader, leg), and the (outer, inner) loop pairs of every nest."""
    readers: dict[int, list[tuple[int, int]]] = defaultdict(list)
    order: set[tuple[int, int]] = set()
    for f in forms:
        for leg, o in enumerate(f.operands):
            readers[o].append((f.id, leg))
        if f.source >= 0:
            readers[f.source].append((f.id, 0))
        nest = list(f.scope) + list(f.span)
        order.update(zip(nest, nest[1:]))
    return {k: tuple(v) for k, v in readers.items()}, frozenset(order)


def rich_from_forms(forms: list[Form], loops: list[Loop]) -> RichSchedule:
    """A RichSchedule from hand-written forms listed in a valid production order.

    For fixtures that pin loop identity by hand (as the reference's synthetic ones do).
    """
    rank: list[int] = []
    acc: dict[tuple[int, int], int] = {}
    counter = 0
    for f in forms:
        if f.kind is FormKind.SUM:
            for k in range(len(f.operands)):
                acc[(f.id, k)] = counter
                counter += 1
            rank.append(acc[(f.id, 0)])
        else:
            rank.append(counter)
            counter += 1
    readers, order = readers_and_order(forms)
    return RichSchedule(tuple(forms), {l.id: l for l in loops}, tuple(rank), acc, readers,
                        order, {}, {}, counter)
