"""The peak-memory report: what the schedule will hold, where, and what batching costs.

Built from a ScheduleAnalysis (no arrays): the predicted peak and the point where it is
reached, the forms live there with their sizes, the flops and the recompute overhead
against the unbatched evaluation, the batch count of every loop, the ten largest forms,
and the live bytes at every static point (for the plot).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..schedule.analysis import ScheduleAnalysis
from ..schedule.forms import FormKind
from ..schedule.peak import live_bytes
from ..units import format_bytes, format_flops

__all__ = ["LiveForm", "MemoryReport", "memory_report"]


@dataclass(frozen=True)
class LiveForm:
    """One form in a report: ids, what it is, its modes (sliced ones marked) and bytes."""

    form: int
    value: int
    what: str            # "leaf g", "contract", "sum R2", "assemble"
    modes: str           # spaces, sliced ones marked /L<loop>
    bytes: int


@dataclass(frozen=True)
class MemoryReport:
    """The peak-memory report of a planned dry run; ``to_text`` and ``to_json`` print it."""

    title: str
    budget_bytes: float | None
    peak_bytes: int
    binding_point: int
    binding_step: str
    live_at_binding: tuple[LiveForm, ...]
    flops: float
    unbatched_flops: float
    loops: tuple[dict, ...]
    largest: tuple[LiveForm, ...]
    live_bytes: tuple[int, ...]            # per static point
    program_bytes: int = 0                 # the budget's share charged to the program

    @property
    def recompute_overhead(self) -> float:
        """Flops of the batched plan over the unbatched ones (1.0: nothing recomputed)."""
        return self.flops / self.unbatched_flops if self.unbatched_flops else 1.0

    def to_json(self) -> str:
        """The report as JSON, with the derived overhead and binding point included."""
        data = asdict(self)
        data["recompute_overhead"] = self.recompute_overhead
        data["binding_point"] = self.binding_point
        return json.dumps(data, indent=1, ensure_ascii=False)

    def to_text(self) -> str:
        """The report as aligned, human-readable lines."""
        budget = (f"{format_bytes(self.budget_bytes)} ({self.budget_bytes:.0f} B)"
                  if self.budget_bytes else "none")
        lines = [f"memory report: {self.title}",
                 f"  budget            {budget}",
                 f"  predicted peak    {format_bytes(self.peak_bytes)} ({self.peak_bytes} B)",
                 *([f"  program reserve   {format_bytes(self.program_bytes)} "
                    f"({self.program_bytes} B; charged to the budget before the arrays)"]
                   if self.program_bytes else []),
                 f"  reached at        point {self.binding_point}: {self.binding_step}",
                 f"  flops             {format_flops(self.flops)} ({self.flops:.6g}); "
                 f"unbatched {format_flops(self.unbatched_flops)}; recompute overhead "
                 f"{self.recompute_overhead:.4f}x",
                 f"  loops             {len(self.loops)}"]
        for lp in self.loops:
            lines.append(f"    L{lp['id']} {{{lp['space']}:{lp['kind']}}} {lp['nbatches']} "
                         f"batches of {lp['block']} over {lp['extent']}")
        lines.append(f"  live at the peak  ({len(self.live_at_binding)} forms)")
        for f in self.live_at_binding:
            lines.append(f"    {format_bytes(f.bytes):>12}  f{f.form} v{f.value} {f.what} "
                         f"({f.modes})")
        lines.append("  largest forms")
        for f in self.largest:
            lines.append(f"    {format_bytes(f.bytes):>12}  f{f.form} v{f.value} {f.what} "
                         f"({f.modes})")
        return "\n".join(lines) + "\n"


def _live_form(a: ScheduleAnalysis, fid: int, size: int) -> LiveForm:
    f = a.rich.forms[fid]
    v = a.forest.values[f.value]
    spaces = list(v.spaces)
    for pos, lid in f.sliced:
        spaces[pos] = f"{spaces[pos]}/L{lid}"
    what = {FormKind.LEAF: f"leaf {v.tensor}", FormKind.CONTRACT: "contract",
            FormKind.SUM: f"sum {v.name}", FormKind.ASSEMBLE: "assemble"}[f.kind]
    return LiveForm(fid, f.value, what, ",".join(spaces), size)


def memory_report(a: ScheduleAnalysis, unbatched_flops: float, title: str = "",
                  budget: float | None = None, program_bytes: int = 0) -> MemoryReport:
    """The report of an analyzed schedule (``unbatched_flops``: the oracle's flops;
    ``program_bytes``: the part of ``budget`` charged to the program)."""
    size = {c.form: c.footprint for c in a.cells}
    live = live_bytes(a.cells, len(a.points))           # the schedule's own sweep
    if a.profile.binding_point < len(a.points):
        point = a.points[a.profile.binding_point]
        path = "".join(f"[L{l}.{p}]" for l, p in point.path) or "root"
        step = f"{point.kind} {path}"
        if point.form >= 0:
            step += f" f{point.form} ({_live_form(a, point.form, 0).what})"
    else:
        step = "the end, where the results whose terms all cancel are made (zeros)"
    loops = tuple({"id": l.id, "space": l.space, "kind": l.kind.value, "block": l.block,
                   "extent": l.extent, "nbatches": l.nbatches}
                  for l in (a.rich.loops[k] for k in sorted(a.rich.loops)))
    at = tuple(sorted((_live_form(a, f, size[f]) for f in a.profile.live_at_binding),
                      key=lambda x: (-x.bytes, x.form)))
    largest = tuple(sorted((_live_form(a, c.form, c.footprint) for c in a.cells),
                           key=lambda x: (-x.bytes, x.form))[:10])
    return MemoryReport(title, budget, a.peak_bytes, a.profile.binding_point, step, at,
                        a.flops, unbatched_flops, loops, largest, tuple(live), program_bytes)
