"""The stable text form of an ordered schedule: the snapshot format under ``schedules/``."""
from __future__ import annotations

from ..forest.values import Forest
from .forms import Form, FormKind
from .ordered import OrderedSchedule, walk_blocks

__all__ = ["dump_schedule", "dump_analysis"]


def _form(f: Form, forest: Forest | None) -> str:
    spaces = list(forest.values[f.value].spaces) if forest else ["?"] * (
        max((p for p, _ in f.sliced), default=-1) + 1)
    for pos, lid in f.sliced:
        spaces[pos] = f"{spaces[pos]}/L{lid}"
    v = forest.values[f.value] if forest else None
    what = {FormKind.LEAF: f"leaf {v.tensor if v else ''}".rstrip(), FormKind.CONTRACT: "contract",
            FormKind.SUM: f"sum {v.name if v else ''}".rstrip(),
            FormKind.ASSEMBLE: "assemble"}[f.kind]
    extra = f" partial[{','.join(f'L{l}' for l in f.partial)}]" if f.partial else ""
    if f.kind is FormKind.CONTRACT:
        extra += f" <- {' '.join(f'f{o}' for o in f.operands)}"
    if f.also:
        extra += f" joint[{','.join(f'L{l}' for l in f.span)}]"
    return f"f{f.id} v{f.value}({','.join(spaces)}) {what}{extra}"


def dump_schedule(sched: OrderedSchedule, forest: Forest | None = None,
                  header: tuple[str, ...] = ()) -> str:
    """Loops with batch counts, then the block tree: steps and outputs in order."""
    lines = list(header)
    for lid in sorted(sched.loops):
        lp = sched.loops[lid]
        lines.append(f"loop L{lid} {{{lp.space}:{lp.kind.value}}} block {lp.block} x "
                     f"{lp.nbatches} over {lp.extent}")

    for event, path, item in walk_blocks(sched.root):
        indent = "  " * len(path)
        if event == "enter" and not path:
            lines.append("root")
        elif event == "enter":
            lines.append(f"{indent}block L{item.loop} {{{item.axis}:{item.kind.value}}} "
                         f"pass {item.pass_} level {item.level}")
        elif event == "step":
            entry = f" entry {item.entry}" if item.entry >= 0 else ""
            lines.append(f"{indent}  build{entry} {_form(sched.forms[item.form], forest)}")
        elif event == "escape":
            lines.append(f"{indent}  output {item.kind.value} "
                         f"{_form(sched.forms[item.form], forest)}")
    return "\n".join(lines) + "\n"


def dump_analysis(a, title: str = "") -> str:
    """An analyzed schedule with its predicted peak and flops in the header."""
    header = ([f"# {title}"] if title else []) + [
        f"predicted peak {a.profile.peak_bytes} B at point {a.profile.binding_point}; "
        f"flops {a.flops}"]
    return dump_schedule(a.ordered, a.forest, tuple(header))
