"""Roles: how each built form relates to each loop around it or around its readers.

- LoopLocal: built inside the loop, sliced on its mode, read in the same batch.
- Reduction: the form sums the loop's mode away; its batches accumulate (AccumulateSum).
- LoopCarried: the form carries the mode but must exist whole after the loop; its batches
  scatter (AccumulateScatter).
- LoopInvariant: the form does not depend on the loop: built outside and read by every
  batch (hoisted), or rebuilt in every batch of an outer loop it does not carry.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..plan.loops import LoopKind
from .rich import RichSchedule
from .forms import FormKind

__all__ = ["Role", "FormLegality", "LegalitySchedule", "analyze_legality"]


class Role(enum.Enum):
    """How a built form relates to one loop around it or its readers."""

    LOOP_LOCAL = "LL"
    REDUCTION = "R"
    LOOP_CARRIED = "LC"
    LOOP_INVARIANT = "LI"


@dataclass(frozen=True)
class FormLegality:
    """The roles of one built form per loop, its home floor and forced split axes."""

    form: int                                  # a built form (contraction, leaf or sum)
    value: int
    per_axis: tuple[tuple[int, Role], ...]     # (loop id, role), loops in id order
    home_floor: tuple[int, ...]                # LoopLocal loops: where it lives per batch
    forced_split_axes: tuple[int, ...]         # LoopCarried loops: materialized whole
    escapes: tuple[int, ...]                   # the assembled forms of its escape chain

    def role(self, loop: int) -> Role | None:
        """This form's role on ``loop`` (None where it has none)."""
        return dict(self.per_axis).get(loop)


@dataclass(frozen=True)
class LegalitySchedule:
    """Legality of every built form (form id → FormLegality)."""

    cells: dict[int, FormLegality]             # built form id → legality

    def dump(self) -> str:
        """Stable text: each form's role per loop, in form order."""
        lines = []
        for fid in sorted(self.cells):
            c = self.cells[fid]
            roles = " ".join(f"L{l}:{r.value}" for l, r in c.per_axis) or "-"
            lines.append(f"f{fid} v{c.value}: {roles}")
        return "\n".join(lines) + "\n"


def analyze_legality(rich: RichSchedule) -> LegalitySchedule:
    """Per (built form, loop) role — LoopLocal, Reduction, LoopCarried, LoopInvariant — with
    home floors."""
    forms = rich.forms
    chain_of: dict[int, list[int]] = {}
    for f in forms:
        if f.kind is FormKind.ASSEMBLE:
            base = f.source
            while forms[base].kind is FormKind.ASSEMBLE:
                base = forms[base].source
            chain_of.setdefault(base, []).append(f.id)
    cells = {}
    for f in forms:
        if f.kind is FormKind.ASSEMBLE:
            continue
        chain = sorted(chain_of.get(f.id, []), key=lambda a: len(forms[a].scope), reverse=True)
        escapes = {loop: a for a in chain for loop in forms[a].span}
        sliced = {l for _, l in f.sliced}
        roles: dict[int, Role] = {}
        for loop in f.scope:
            if loop in escapes:
                roles[loop] = (Role.REDUCTION if rich.loops[loop].kind is LoopKind.CONTRACTED
                               else Role.LOOP_CARRIED)
            elif loop in sliced:
                roles[loop] = Role.LOOP_LOCAL
            else:
                roles[loop] = Role.LOOP_INVARIANT
        final = chain[-1] if chain else f.id
        for reader, _ in rich.readers.get(final, ()):
            for loop in forms[reader].scope:
                if loop not in forms[final].scope:
                    roles.setdefault(loop, Role.LOOP_INVARIANT)
        per_axis = tuple(sorted(roles.items()))
        cells[f.id] = FormLegality(
            f.id, f.value, per_axis,
            tuple(l for l, r in per_axis if r is Role.LOOP_LOCAL),
            tuple(l for l, r in per_axis if r is Role.LOOP_CARRIED), tuple(chain))
    return LegalitySchedule(cells)
