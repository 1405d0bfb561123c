"""The cell table: every form the executor will hold, every read it will serve.

Derived from an OrderedSchedule, checked by five rules before anything runs:

1. visibility  — a read's source is produced before the reader and lives in an enclosing
   scope of the reader;
2. form        — every loop around the reader either slices the source (the batch the
   reader is in) or is recorded as read-invariant, and slicing agrees with the
   reader's own modes (a mode sliced on an operand is sliced, or summed, in the reader);
3. chain       — an assembled cell encloses its source directly, has its value, sums a
   loop the source is partial over / scatters loops that slice the source, and a
   partial cell is read by nothing but the assembly that completes it;
4. life        — a cell's life equals its reads weighted by the batches of the loops the
   reader sits in and the source does not;
5. uniqueness  — at most one cell per (value, scope, slicing).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..forest.values import Forest, ValueKind
from ..plan.loops import LoopKind
from ..schedule.forms import FormKind
from ..schedule.ordered import OrderedSchedule, form_paths, walk_blocks

__all__ = ["Cell", "Read", "CellTable", "Violation", "build_cell_table", "validate"]


@dataclass(frozen=True)
class Cell:
    """One form's cell: where it lives (block path), how it is sliced and produced, its life
    (weighted reads) and its volatility/persistence."""

    form: int
    value: int
    scope: tuple[tuple[int, int], ...]     # block path (loop, pass) it lives in
    sliced: tuple[tuple[int, int], ...]    # (mode position, loop)
    partial: tuple[int, ...]               # loops still being summed into it
    production: str                        # build | leaf | sum | assemble-sum | assemble-scatter
    source: int = -1                       # assembled cells: the per-batch cell
    life: int = 0                          # weighted reads (see module docstring)
    volatile: bool = False                 # depends on a volatile input (e.g. amplitudes)
    persistent: bool = False               # kept across evaluations when persistence is on


@dataclass(frozen=True)
class Read:
    """One read of a cell by a consumer leg, with the loops around the reader that do not
    slice it and their weight."""

    consumer: int                          # form reading (an assembled cell for escapes)
    leg: int                               # operand position / sum entry
    source: int
    invariant_on: tuple[int, ...]          # loops around the reader that do not slice it
    weight: int                            # batches of those loops (reads per source life)


@dataclass(frozen=True)
class Violation:
    """A broken cell-table rule, with the cell and a message."""

    rule: str
    cell: int
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] f{self.cell}: {self.message}"


@dataclass(frozen=True)
class CellTable:
    """The cells, their reads and the production order: validated before anything runs."""

    cells: tuple[Cell, ...]
    reads: tuple[Read, ...]
    order: dict[int, int]                  # form → first step that produces it
    entry_steps: dict[tuple[int, int], int] = None   # (sum form, entry) → its step

    def dump(self) -> str:
        """Stable text: one line per cell with its scope, slicing, partial loops, life
        and flags (V volatile, P persistent)."""
        lines = []
        for c in self.cells:
            sl = ",".join(f"{p}/L{l}" for p, l in c.sliced)
            flags = "".join(s for s, on in (("V", c.volatile), ("P", c.persistent)) if on)
            lines.append(f"f{c.form} v{c.value} {c.production} scope {list(c.scope)} "
                         f"[{sl}] partial {list(c.partial)} life {c.life} {flags}".rstrip())
        return "\n".join(lines) + "\n"


def _volatile_values(forest: Forest, volatile: frozenset[str]) -> list[bool]:
    out = []
    for v in forest.values:
        if v.kind is ValueKind.LEAF:
            out.append(v.tensor in volatile)
        else:
            out.append(any(out[c] for c in v.children))
    return out


def build_cell_table(sched: OrderedSchedule, forest: Forest,
                     volatile: frozenset[str] = frozenset()) -> CellTable:
    """The cell table of an ordered schedule (``volatile``: tensors that change between
    evaluations)."""
    forms = sched.forms
    loops = sched.loops
    paths = form_paths(sched.rich)
    vol = _volatile_values(forest, volatile)
    order: dict[int, int] = {}
    out_path: dict[int, tuple] = {}
    entry_at: dict[tuple[int, int], int] = {}
    k = 0                                   # steps in execution order, escapes included
    for event, path, item in walk_blocks(sched.root):
        if event == "step":
            order.setdefault(item.form, k)
            entry_at[(item.form, item.entry)] = k
            k += 1
        elif event == "escape":
            out_path[item.form] = path
            order.setdefault(item.form, k)
            k += 1
    reads: list[Read] = []
    for f in forms:
        if f.kind is FormKind.ASSEMBLE:
            where, legs = out_path.get(f.id, paths[f.source]), [f.source]
        else:
            where, legs = paths[f.id], list(f.operands)
        for leg, src in enumerate(legs):
            inside = [l for l, _ in where if l not in forms[src].scope]
            reads.append(Read(f.id, leg, src, tuple(inside),
                              prod(loops[l].nbatches for l in inside)))
    life = {f.id: 0 for f in forms}
    for r in reads:
        life[r.source] += r.weight
    consumers: dict[int, list[int]] = {}
    for r in reads:
        consumers.setdefault(r.source, []).append(r.consumer)
    cells = []
    for f in forms:
        if f.kind is FormKind.ASSEMBLE:
            kind = loops[f.via].kind
            production = "assemble-sum" if kind is LoopKind.CONTRACTED else "assemble-scatter"
        else:
            production = {FormKind.LEAF: "leaf", FormKind.CONTRACT: "build",
                          FormKind.SUM: "sum"}[f.kind]
        persistent = (f.kind in (FormKind.CONTRACT, FormKind.ASSEMBLE) and not vol[f.value]
                      and not f.scope and not f.sliced and not f.partial
                      and (not consumers.get(f.id)
                           or any(vol[forms[c].value] for c in consumers[f.id])))
        cells.append(Cell(f.id, f.value, paths[f.id], f.sliced, f.partial, production,
                          f.source, life[f.id], vol[f.value], persistent))
    return CellTable(tuple(cells), tuple(reads), order, entry_at)


def validate(table: CellTable, sched: OrderedSchedule, forest: Forest) -> list[Violation]:
    """Every violation of the five rules (empty when the table is sound)."""
    out: list[Violation] = []
    cells = {c.form: c for c in table.cells}
    forms = sched.forms
    weighted: dict[int, int] = {c.form: 0 for c in table.cells}
    for r in table.reads:
        src, dst = cells[r.source], cells[r.consumer]
        escape = dst.production.startswith("assemble")
        where = src.scope if escape else dst.scope     # an escape reads inside the block
        # 1 visibility
        at = (table.entry_steps.get((r.consumer, r.leg), -1) if dst.production == "sum"
              else table.order.get(r.consumer, -1))
        if not escape and table.order.get(r.source, 1 << 60) > at:
            out.append(Violation("visibility", r.consumer, f"reads f{r.source} before it exists"))
        if tuple(l for l, _ in where[: len(src.scope)]) != tuple(l for l, _ in src.scope):
            out.append(Violation("visibility", r.consumer,
                                 f"f{r.source} lives in {list(src.scope)}, not around the reader"))
        # 2 form
        home = {x for x, _ in src.scope}
        for l, _ in where:
            if l not in home and l not in r.invariant_on:
                out.append(Violation("form", r.consumer, f"f{r.source} is neither sliced by "
                                     f"L{l} nor read invariant on it"))
        if dst.production == "build":
            v = forest.values[dst.value]
            side = v.left if r.leg == 0 else v.right
            for pos, l in src.sliced:
                num = side.modes[pos]
                ok = (num in v.result and (v.result.index(num), l) in dst.sliced) or (
                    num not in v.result and l in dst.partial)
                if not ok:
                    out.append(Violation("form", r.consumer, f"operand f{r.source} is sliced by "
                                         f"L{l} on a mode the reader neither slices nor sums"))
        # 3 chain (partial cells feed only their assembly)
        if src.partial and not dst.production.startswith("assemble"):
            out.append(Violation("chain", r.consumer, f"reads the partial sum f{r.source}"))
        weighted[r.source] += r.weight
    for c in table.cells:
        f = forms[c.form]
        if c.production.startswith("assemble"):
            s = cells[c.source]
            span = list(f.span)
            if s.value != c.value or tuple(l for l, _ in s.scope) != tuple(
                    l for l, _ in c.scope) + tuple(span):
                out.append(Violation("chain", c.form, f"does not directly enclose f{c.source}"))
            if c.production == "assemble-sum" and f.via not in s.partial:
                out.append(Violation("chain", c.form, f"sums L{f.via} but f{c.source} is not "
                                     f"partial over it"))
            if c.production == "assemble-scatter":
                slicing = {l for _, l in s.sliced}
                missing = [l for l in span if l not in slicing]
                if missing:
                    out.append(Violation("chain", c.form, f"scatters L{missing[0]}, which does "
                                         f"not slice f{c.source}"))
        # 4 life
        if c.life != weighted[c.form]:
            out.append(Violation("life", c.form, f"life {c.life} but {weighted[c.form]} "
                                 f"weighted reads"))
    # 5 uniqueness
    seen: dict[tuple, int] = {}
    for c in table.cells:
        f = forms[c.form]
        key = (c.value, c.scope, c.sliced, c.partial, c.production, c.source, f.operands,
               f.owner, f.span)
        if key in seen:
            out.append(Violation("uniqueness", c.form, f"same form as f{seen[key]}"))
        seen.setdefault(key, c.form)
    return out
