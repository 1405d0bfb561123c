"""Run a compiled program on a backend and meter every live array.

The meter adds an array's bytes when a step creates it and subtracts them when the walk
releases it; the peak is taken after each step's allocation, before its releases (operands
and result are live together). Transient temporaries inside one step (transposing copies for
a GEMM, a scaled term) are not values and are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..forest.values import ValueKind
from .program import Program
from .walk import StepKind

__all__ = ["Meter", "execute"]


@dataclass(frozen=True)
class Meter:
    backend: str
    peak_bytes: int
    peak_step: int
    live_at_peak: tuple[int, ...]         # value ids live at the peak
    flops: int
    builds: dict[int, int] = field(compare=False)   # value id → times produced

    def dump(self) -> str:
        live = ",".join(f"v{v}" for v in self.live_at_peak)
        return (f"meter[{self.backend}]: peak {self.peak_bytes} B at step {self.peak_step} "
                f"(live {live}); flops {self.flops}\n")


class _Shapes:
    """Dry-run leaf source: only the shape of each leaf block."""

    def __init__(self, program: Program) -> None:
        self.program = program

    def shape(self, vid: int) -> tuple[int, ...]:
        return self.program.shapes[vid]


def execute(program: Program, backend, source=None):
    """Walk ``program`` on ``backend``; returns ``(results by equation name, Meter)``."""
    values = program.forest.values
    source = source if source is not None else _Shapes(program)
    store: dict[int, object] = {}
    sizes: dict[int, int] = {}
    live = peak = peak_step = flops = 0
    live_at_peak: tuple[int, ...] = ()
    builds: dict[int, int] = {}
    for s, step in enumerate(program.walk.steps):
        v = step.value
        if step.kind is StepKind.FETCH:
            store[v] = backend.fetch(source, v)
        elif step.kind is StepKind.CONTRACT:
            val = values[v]
            plan = program.plans[v]
            store[v] = backend.contract(plan, store[val.left.value], store[val.right.value])
            flops += plan.flops
        elif step.kind is StepKind.ZEROS:
            store[v] = backend.zeros(program.shapes[v])
        else:
            entry = values[v].entries[step.entry]
            src = store[entry.value]
            target = None if step.first else store[v]
            store[v] = backend.accumulate(target, src, float(entry.coefficient), entry.perm,
                                          step.move)
            flops += 2 * prod(program.shapes[entry.value])
            if step.move:
                live -= sizes.pop(entry.value)
                del store[entry.value]
        if v not in sizes:
            sizes[v] = backend.nbytes(store[v])
            live += sizes[v]
            if step.kind is not StepKind.ACCUMULATE or step.first:
                builds[v] = builds.get(v, 0) + 1
        if live > peak:
            peak, peak_step, live_at_peak = live, s, tuple(sorted(sizes))
        for r in step.frees:
            live -= sizes.pop(r)
            del store[r]
    results = {root.name: store[root.value] for root in program.forest.roots}
    return results, Meter(backend.name, peak, peak_step, live_at_peak, flops, builds)
