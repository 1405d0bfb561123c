"""The public entry points: ``parse``, ``evaluate``, ``analyze`` and the reusable ``Evaluator``."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .errors import SequantEvalError, UnknownSpace
from .expr import Equation, check_extents, parse
from .forest import Forest, build_forest
from .runtime import Meter, Program, TensorSource, compile_program, execute, get_backend

__all__ = ["Evaluator", "Report", "evaluate", "analyze"]


def _as_equations(eqs: str | Equation | Sequence[Equation]) -> tuple[Equation, ...]:
    if isinstance(eqs, str):
        return tuple(parse(eqs))
    if isinstance(eqs, Equation):
        return (eqs,)
    out = tuple(eqs)
    for e in out:
        if not isinstance(e, Equation):
            raise SequantEvalError(f"expected Equation objects (from se.parse), got {type(e)}")
    return out


def _check_budget(budget) -> None:
    if budget is not None and budget != float("inf"):
        raise SequantEvalError(
            "batched evaluation under a finite budget is not available yet; pass budget=None")


@dataclass(frozen=True)
class Report:
    """What a dry run of the evaluation predicts: peak memory, where it is reached, flops."""

    peak_bytes: int
    flops: int
    meter: Meter
    program: Program

    @property
    def binding_point(self) -> int:
        return self.meter.peak_step

    @property
    def live_at_binding(self) -> tuple[int, ...]:
        return self.meter.live_at_peak

    def dump(self) -> str:
        from .report.text import format_bytes

        forest = self.program.forest
        live = ", ".join(
            f"v{v} ({','.join(forest.values[v].spaces)}) {format_bytes(self.program.value_bytes(v))}"
            for v in self.live_at_binding)
        return (f"peak {format_bytes(self.peak_bytes)} ({self.peak_bytes} B) at step "
                f"{self.binding_point}; live there: {live}\n"
                f"flops {self.flops:.4g}; {forest.binary_contractions} binary contractions, "
                f"{forest.distinct_contractions} distinct after interning\n")


class Evaluator:
    """Equations compiled once for given extents; evaluate many times (e.g. CC iterations)."""

    def __init__(self, eqs: str | Equation | Sequence[Equation], extents: Mapping[str, int],
                 budget: float | None = None) -> None:
        _check_budget(budget)
        self.equations = _as_equations(eqs)
        self.extents = check_extents(extents)
        self.program = _compile(self.equations, tuple(self.extents.items()))

    @property
    def forest(self) -> Forest:
        return self.program.forest

    def evaluate(self, tensors: Mapping[str, object], backend: str = "numpy",
                 return_meter: bool = False):
        be = get_backend(backend)
        source = TensorSource(self.forest, tensors, self.extents)
        results, meter = execute(self.program, be, source)
        return (results, meter) if return_meter else results

    def analyze(self, itemsize: int = 8) -> Report:
        from .runtime import DryRunBackend

        _, meter = execute(self.program, DryRunBackend(itemsize))
        return Report(meter.peak_bytes, meter.flops, meter, self.program)


@lru_cache(maxsize=16)
def _compile(equations: tuple[Equation, ...], extents: tuple[tuple[str, int], ...]) -> Program:
    return compile_program(build_forest(equations, dict(extents)), dict(extents))


def evaluate(eqs, tensors: Mapping[str, object], extents: Mapping[str, int],
             budget: float | None = None, backend: str = "numpy"):
    """Evaluate equations; returns ``{equation name: array}`` (axes in result slot order)."""
    return Evaluator(eqs, extents, budget).evaluate(tensors, backend)


def analyze(eqs, extents: Mapping[str, int], budget: float | None = None) -> Report:
    """Dry run: peak bytes, where it is reached and flops, without touching any array."""
    return Evaluator(eqs, extents, budget).analyze()
