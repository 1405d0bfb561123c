"""Equations that read other equations' results, evaluated stage by stage.

:func:`~sequant_eval.expr.factor.factor_common` writes closed-shell CCSD as intermediates
(``W1 = f + L·t1``, ...) and residuals that read them by name. One fused program cannot
read a value it has not finished, so the equations are cut into stages: an equation is in
the stage after the last one it reads. Each stage is one :class:`~sequant_eval.Evaluator`
(one fused forest, planned and batched on its own); the results a later stage reads are
held between stages and handed to it as inputs, and dropped after their last reader.

The memory figure is the whole evaluation's: at every stage, what the stage's program
holds (its own predicted or metered peak) plus what is held for later stages. A budget
bounds that sum: each stage is planned under the budget less the bytes held across it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from math import prod

from ..errors import ExpressionError, InfeasibleBudget, InputTypeError
from ..expr import Equation, check_extents
from ..expr.stages import as_equations, equation_stages
from ..expr.index import mode_space
from ..forest.build import mode_extent
from ..plan import BatchPolicy
from ..budget import Budget
from ..report.memory import LiveForm, MemoryReport
from ..runtime import Meter
from ..units import format_bytes

__all__ = ["StagedEvaluator", "StagedReport", "equation_stages"]


@dataclass(frozen=True)
class StagedReport:
    """The dry run of every stage, and the whole evaluation's figures."""

    stages: tuple                      # per stage, its Report
    held_bytes: tuple[int, ...]        # per stage: results held across it for later stages
    names: tuple[tuple[str, ...], ...]  # per stage: the equations it evaluates
    held: tuple[tuple[tuple[str, int], ...], ...]  # per stage: (result, bytes) held across it
    budget_bytes: float | None

    @property
    def peak_bytes(self) -> int:
        """Largest over the stages of the stage's peak plus the bytes held across it."""
        return max(r.peak_bytes + h for r, h in zip(self.stages, self.held_bytes))

    @property
    def program_bytes(self) -> int:
        """The stages' program reserves, all charged to a budget at once (0 unbudgeted)."""
        return sum(r.program_bytes for r in self.stages)

    @property
    def total_bytes(self) -> int:
        """What the budget bounds: the peak plus every stage's program reserve."""
        return self.peak_bytes + self.program_bytes

    @property
    def binding_stage(self) -> int:
        """The stage where :attr:`peak_bytes` is reached (the first, on a tie)."""
        totals = [r.peak_bytes + h for r, h in zip(self.stages, self.held_bytes)]
        return totals.index(max(totals))

    @property
    def flops(self) -> int:
        """Flops of all stages."""
        return sum(r.flops for r in self.stages)

    @property
    def unbatched_flops(self) -> int:
        """Flops of all stages evaluated unbatched."""
        return sum(r.unbatched_flops for r in self.stages)

    @property
    def recompute_overhead(self) -> float:
        """Flops relative to the unbatched evaluation (1.0 = no recompute)."""
        return self.flops / self.unbatched_flops if self.unbatched_flops else 1.0

    @property
    def loops(self) -> tuple:
        """Every stage's batch loops, stage by stage."""
        return tuple(lp for r in self.stages for lp in r.loops)

    @property
    def binary_contractions(self) -> int:
        """Binary contractions of all stages' terms, before interning."""
        return sum(r.forest.binary_contractions for r in self.stages)

    @property
    def distinct_contractions(self) -> int:
        """Distinct contraction values of all stages."""
        return sum(r.forest.distinct_contractions for r in self.stages)

    def memory(self, title: str = "") -> MemoryReport:
        """One peak-memory report for the whole evaluation: the binding stage's report with
        the results held across it listed beside its live forms, flops and loops of all
        stages, and the live bytes of every stage (plus what it holds) in stage order."""
        s = self.binding_stage
        parts = [r.memory() for r in self.stages]
        own = parts[s]
        held = tuple(LiveForm(-1, -1, f"held {name} (stage {s + 1} input)", "", size)
                     for name, size in self.held[s])
        largest = sorted((f for p in parts for f in p.largest), key=lambda f: -f.bytes)[:10]
        live = tuple(b + h for p, h in zip(parts, self.held_bytes) for b in p.live_bytes)
        offset = sum(len(p.live_bytes) for p in parts[:s])
        return MemoryReport(
            title, self.budget_bytes, self.peak_bytes, offset + own.binding_point,
            f"stage {s + 1} of {len(parts)} ({', '.join(self.names[s])}): "
            f"{own.binding_step}", tuple(sorted(own.live_at_binding + held,
                                                key=lambda f: -f.bytes)),
            self.flops, self.unbatched_flops, tuple(lp for p in parts for lp in p.loops),
            tuple(largest), live)

    def dump(self) -> str:
        """Stable text: the whole figures, then each stage's own dump."""
        lines = [f"staged: {len(self.stages)} stages, peak {self.peak_bytes} B at stage "
                 f"{self.binding_stage + 1}, flops {self.flops}"]
        for k, (r, h) in enumerate(zip(self.stages, self.held_bytes)):
            lines.append(f"stage {k + 1} ({', '.join(self.names[k])}), {h} B held across:")
            lines.append(r.dump().rstrip("\n"))
        return "\n".join(lines) + "\n"


class StagedEvaluator:
    """Equations that read each other's results, compiled stage by stage; evaluate many
    times. ``evaluate`` returns the results no other equation reads (the ones asked for).

    Parameters are those of :class:`~sequant_eval.Evaluator` (``extents`` a plain space →
    extent mapping: a Regime is not supported); ``budget`` (bytes, text, or a
    share of the whole evaluation's unbatched peak) bounds every stage's peak plus what is
    held across it. With ``persist=True`` the intermediates are volatile like the tensors
    named in ``volatile`` (they are remade every evaluation). ``stage`` makes the
    evaluator of one stage (``sequant_eval.Evaluator``, which hands equations read in
    stages to this class: ``se.Evaluator(factored, ...)`` is the way in)."""

    def __init__(self, eqs: str | Equation | Sequence[Equation], extents: Mapping[str, int],
                 budget=None, policy: BatchPolicy | None = None, persist: bool = False,
                 volatile: Sequence[str] | None = None, *, stage) -> None:
        self._make = stage
        self.equations = as_equations(eqs)
        self.extents = check_extents(extents)
        self.stage_equations = equation_stages(self.equations)
        names = {eq.name for eq in self.equations}
        read = {t.name for eq in self.equations for p in eq.terms for t in p.factors}
        self.outputs = tuple(eq.name for eq in self.equations if eq.name not in read)
        self.intermediates = tuple(eq.name for eq in self.equations if eq.name in read)
        last: dict[str, int] = {}
        for s, stage in enumerate(self.stage_equations):
            for eq in stage:
                for p in eq.terms:
                    for t in p.factors:
                        if t.name in names:
                            last[t.name] = s
        self._last_reader = last
        self._held = [self._held_names(s) for s in range(len(self.stage_equations))]
        base = policy.volatile if policy is not None and policy.volatile else (volatile or ())
        self._volatile = tuple(base) + self.intermediates if (persist or base) else None
        self._persist = persist
        self._policy = policy
        self._reserve_list: list[int] | None = None
        self._itemsize = (policy or BatchPolicy()).itemsize
        given = Budget.parse(budget)
        parsed = given.fixed
        if policy is not None and given.unlimited and policy.finite:
            parsed = policy.budget_bytes
        if given.share is not None:               # of the arrays; the programs on top
            parsed = given.bytes_for(self._unbatched_peak(), self._program_bytes())
        self.budget_bytes = None if parsed is None else float(parsed)
        self._evaluators: list | None = None

    # ----------------------------------------------------------------- memory
    def result_bytes(self, name: str) -> int:
        """Bytes of equation ``name``'s result at the policy's element size."""
        eq = next(e for e in self.equations if e.name == name)
        return self._itemsize * prod(mode_extent(mode_space(ix), self.extents)
                                     for ix in eq.indices)

    def held_across(self, stage: int) -> tuple[tuple[str, int], ...]:
        """Results made before ``stage`` that are still needed then or later (the
        intermediates it or a later stage reads, and the outputs made so far), with
        their bytes."""
        return tuple((name, self.result_bytes(name)) for name in self._held[stage])

    def _held_names(self, stage: int) -> tuple[str, ...]:
        return tuple(eq.name for s in range(stage) for eq in self.stage_equations[s]
                     if eq.name in self.outputs or self._last_reader.get(eq.name, -1) >= stage)

    def _reserves(self) -> list[int]:
        """Each stage's program reserve (all the stages' programs are held at once),
        worked out once."""
        if self._policy is not None and not self._policy.program:
            return [0] * len(self.stage_equations)
        if self._reserve_list is None:
            self._reserve_list = [self._make(stage, self.extents).program_reserve()
                                  for stage in self.stage_equations]
        return list(self._reserve_list)

    def _program_bytes(self) -> int:
        """The programs of all the stages: charged to a finite budget before any array."""
        return sum(self._reserves())

    def program_reserve(self) -> int:
        """What a finite budget charges for the stages' programs (all held at once), as
        :meth:`Evaluator.program_reserve` does for one program."""
        return self._program_bytes()

    def _unbatched_peak(self) -> int:
        totals = []
        for s, stage in enumerate(self.stage_equations):
            peak = self._make(stage, self.extents).analyze().peak_bytes
            totals.append(peak + sum(b for _, b in self.held_across(s)))
        return max(totals)

    @property
    def evaluators(self) -> list:
        """One Evaluator per stage, each planned under the budget less what is held across
        it (InfeasibleBudget, naming the stage, before any array is touched)."""
        if self._evaluators is None:
            evs = []
            reserves = self._reserves() if self.budget_bytes is not None else None
            for s, stage in enumerate(self.stage_equations):
                held = sum(b for _, b in self.held_across(s))
                budget = None
                if self.budget_bytes is not None:     # less the other stages' programs:
                    budget = self.budget_bytes - held - (sum(reserves) - reserves[s])
                    if budget <= 0:
                        raise self._infeasible(s, held)
                policy = self._policy
                if policy is not None and budget is not None:
                    policy = replace(policy, budget=budget)
                ev = self._make(stage, self.extents, None if policy is not None else budget,
                               policy, persist=self._persist, volatile=self._volatile)
                try:
                    ev.batched                      # plan now: refuse before any work
                except InfeasibleBudget as err:
                    raise self._infeasible(s, held) from err
                evs.append(ev)
            self._evaluators = evs
        return self._evaluators

    def _infeasible(self, stage: int, held: int):
        names = ", ".join(eq.name for eq in self.stage_equations[stage])
        least = self.min_budget                     # every stage's need, searched when read
        return InfeasibleBudget(
            f"budget {format_bytes(self.budget_bytes)} for the staged evaluation: stage "
            f"{stage + 1} of {len(self.stage_equations)} ({names}) gets "
            f"{format_bytes(max(self.budget_bytes - held, 0))} once the "
            f"{format_bytes(held)} of results held across it for later stages (and the "
            f"stages' programs) are charged; "
            f"raise the budget (InfeasibleBudget.minimum is the smallest that works), or "
            f"evaluate the equations without intermediates", self.budget_bytes, least)

    def min_budget(self) -> int:
        """The smallest budget (bytes) under which every stage fits beside what it holds."""
        policy = self._policy or BatchPolicy.everything(None, self.extents)
        reserves = self._reserves()            # min_budget charges each stage's own
        return max(self._make(stage, self.extents, policy=replace(policy, budget=None))
                   .min_budget()
                   + sum(b for _, b in self.held_across(s)) + sum(reserves) - reserves[s]
                   for s, stage in enumerate(self.stage_equations))

    # ----------------------------------------------------------------- running
    def evaluate(self, tensors: Mapping[str, object], backend: str = "numpy",
                 return_meter: bool = False):
        """``{output: array}``, the stages run in order; with ``return_meter`` also the
        whole evaluation's meter (peak: a stage's metered peak plus what was held across
        it; flops: all stages')."""
        if not isinstance(tensors, Mapping):
            raise InputTypeError(
                f"tensors must be a mapping from tensor name to an array, a mapping of "
                f"blocks or a provider, got {type(tensors).__name__}")
        for eq in self.equations:
            if eq.name in tensors:
                raise ExpressionError(
                    f"tensor {eq.name!r} is given as an input and is also the result of an "
                    f"equation; rename the equation or drop the input")
        evaluators = self.evaluators
        given = dict(tensors)
        results: dict[str, object] = {}
        meters = []
        for s, (ev, stage) in enumerate(zip(evaluators, self.stage_equations)):
            out, meter = ev.evaluate(given, backend, return_meter=True)
            held = sum(self._nbytes(results[n]) for n in self._held[s])
            meters.append((meter, held))
            for eq in stage:
                results[eq.name] = out[eq.name]
                if eq.name in self._last_reader:
                    given[eq.name] = {tuple(mode_space(ix) for ix in eq.indices): out[eq.name]}
            for name in [n for n in given if n in self._last_reader
                         and self._last_reader[n] <= s]:
                del given[name]
                if name not in self.outputs:
                    del results[name]
        final = {name: results[name] for name in self.outputs}
        if not return_meter:
            return final
        return final, _combined(meters)

    @staticmethod
    def _nbytes(array) -> int:
        return int(getattr(array, "nbytes", 0))

    def analyze(self) -> StagedReport:
        """The dry run of every stage and the whole evaluation's peak."""
        evs = self.evaluators
        return StagedReport(tuple(ev.analyze() for ev in evs),
                            tuple(sum(b for _, b in self.held_across(s))
                                  for s in range(len(evs))),
                            tuple(tuple(eq.name for eq in st) for st in self.stage_equations),
                            tuple(self.held_across(s) for s in range(len(evs))),
                            self.budget_bytes)


def _combined(meters: list[tuple[Meter, int]]) -> Meter:
    """One meter for the stages: the largest of (stage peak + held), all flops."""
    totals = [m.peak_bytes + h for m, h in meters]
    s = totals.index(max(totals))
    m = meters[s][0]
    return replace(m, peak_bytes=totals[s], flops=sum(x.flops for x, _ in meters),
                   builds={}, device_peaks={})
