"""The stable text form of an ordered schedule: the snapshot format under ``schedules/``."""
from __future__ import annotations

from .analysis import ScheduleAnalysis
from .forms import Form, FormKind
from .ordered import ScopeBlock

__all__ = ["dump_schedule"]


def _form(a: ScheduleAnalysis, f: Form) -> str:
    v = a.forest.values[f.value]
    spaces = list(v.spaces)
    for pos, lid in f.sliced:
        spaces[pos] = f"{spaces[pos]}/L{lid}"
    what = {FormKind.LEAF: f"leaf {v.tensor}", FormKind.CONTRACT: "contract",
            FormKind.SUM: f"sum {v.name}", FormKind.ASSEMBLE: "assemble"}[f.kind]
    extra = f" partial[{','.join(f'L{l}' for l in f.partial)}]" if f.partial else ""
    if f.kind is FormKind.CONTRACT:
        extra += f" <- {' '.join(f'f{o}' for o in f.operands)}"
    return f"f{f.id} v{f.value}({','.join(spaces)}) {what}{extra}"


def dump_schedule(a: ScheduleAnalysis, title: str = "") -> str:
    """Blocks, steps, outputs, loops with batch counts, and the predicted peak."""
    lines = [f"# {title}"] if title else []
    lines.append(f"peak {a.profile.peak_bytes} B at point {a.profile.binding_point}; "
                 f"flops {a.flops}")
    for lid in sorted(a.rich.loops):
        lp = a.rich.loops[lid]
        lines.append(f"loop L{lid} {{{lp.space}:{lp.kind.value}}} block {lp.block} x "
                     f"{lp.nbatches} over {lp.extent}")

    def walk(block: ScopeBlock, indent: str) -> None:
        for s in block.steps:
            if isinstance(s, ScopeBlock):
                lines.append(f"{indent}block L{s.loop} {{{s.axis}:{s.kind.value}}} "
                             f"pass {s.pass_} level {s.level}")
                walk(s, indent + "  ")
                for o in s.outputs:
                    lines.append(f"{indent}  output {o.kind.value} "
                                 f"{_form(a, a.rich.forms[o.form])}")
            else:
                f = a.rich.forms[s.form]
                entry = f" entry {s.entry}" if s.entry >= 0 else ""
                lines.append(f"{indent}build{entry} {_form(a, f)}")

    lines.append("root")
    walk(a.ordered.root, "  ")
    return "\n".join(lines) + "\n"
