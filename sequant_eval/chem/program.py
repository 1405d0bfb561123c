"""A CC method's residual as one compiled program under the method's memory limit.

The program is the evaluator of the method's equations: staged with intermediates
(:class:`~sequant_eval.api.staged.StagedEvaluator`, when the method has factored equations) or
plain (one :class:`~sequant_eval.Evaluator`). What bounds it (:class:`MemoryLimit`): the
method's ``budget`` when one is given; otherwise PySCF's ``max_memory``, and only when the
unbatched residual does not fit in it (then it is batched within it). Out of core, what
the solver holds beside each residual (``held``) is charged first and the residual is
planned under the rest.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..api import Evaluator, Report, min_budget
from ..budget import Budget
from ..errors import InfeasibleBudget, UsageError
from ..plan import BatchPolicy
from ..api.staged import StagedEvaluator
from ..units import format_bytes

__all__ = ["MemoryLimit", "ResidualProgram", "VOLATILE"]

#: The amplitudes (and ``u2 = 2 t2 - t2~``) change every iteration: nothing read from them
#: may be kept from one evaluation to the next.
VOLATILE = ("t1", "t2", "t3", "u2")


@dataclass(frozen=True)
class MemoryLimit:
    """What bounds one iteration: ``budget``, else ``max_memory`` (both
    :class:`~sequant_eval.budget.Budget`) once the unbatched residual exceeds it; ``held``
    bytes the solver keeps beside each residual (out of core), charged first."""

    budget: Budget = field(default_factory=Budget)
    max_memory: Budget = field(default_factory=Budget)
    held: int = 0

    def iteration_bytes(self, equations, extents: Mapping[str, int]) -> float | None:
        """The budget in bytes (a share of the plain equations' unbatched peak, plus their
        program's reserve); None when no budget is given."""
        if self.budget.unlimited:
            return None
        if self.budget.fixed is not None:
            return self.budget.fixed
        probe = Evaluator(equations, extents)
        return self.budget.bytes_for(probe.analyze().peak_bytes, probe.program_reserve())


class ResidualProgram:
    """The compiled residual of ``plain`` equations (or of ``factored``, the same with
    intermediates, unless ``intermediates`` is False or the limit cannot hold them; with
    ``intermediates=True`` that is refused) at ``extents`` under ``limit``."""

    def __init__(self, plain: Sequence, factored: Sequence | None, extents: Mapping[str, int],
                 limit: MemoryLimit, intermediates: bool | None = None) -> None:
        self.plain, self.factored = tuple(plain), factored
        self.extents, self.limit, self.intermediates = dict(extents), limit, intermediates
        self.equations = self.factored if self.factored is not None else self.plain
        self.budget = limit.budget           # what the program is planned under, in the end
        self.evaluator = self._build()
        self._report: Report | None = None
        self._energy: list = []             # the energy's evaluator (None: cannot be had)

    @property
    def staged(self) -> bool:
        """Whether the residual runs with intermediates (two or more stages)."""
        return isinstance(self.evaluator, StagedEvaluator)

    def report(self):
        """The dry run of the program (the prediction), computed once."""
        if self._report is None:
            self._report = self.evaluator.analyze()
        return self._report

    def evaluate(self, tensors: Mapping[str, Any], backend: str):
        """``(results, meter)`` of one residual evaluation."""
        return self.evaluator.evaluate(tensors, backend=backend, return_meter=True)

    def has_energy(self) -> bool:
        """Whether ``E`` can be evaluated alone: the equations have one and it fits the
        residual's budget (else the solver tests the residual instead)."""
        if not self._energy:
            self._energy.append(self._energy_evaluator())
        return self._energy[0] is not None

    def energy(self, tensors: Mapping[str, Any], backend: str) -> float:
        """The plain ``E`` alone at ``tensors`` (PySCF's convergence test reads it after
        every step), planned once under the residual's budget when it has one."""
        if not self.has_energy():
            raise UsageError("these equations give no energy alone (has_energy() is False)")
        return float(self._energy[0].evaluate(tensors, backend=backend)["E"])

    def _energy_evaluator(self) -> Evaluator | None:
        eqs = [eq for eq in self.plain if eq.name == "E"]
        if not eqs:
            return None
        try:
            ev = Evaluator(eqs, self.extents, budget=self.budget_bytes)
            ev.batched if self.budget_bytes is not None else None   # refused now, not later
            return ev
        except InfeasibleBudget:
            return None

    @property
    def budget_bytes(self) -> float | None:
        """The bytes the residual is planned under (None: unbatched)."""
        ev = self.evaluator
        if isinstance(ev, StagedEvaluator):
            return ev.budget_bytes
        return None if ev.policy is None else ev.policy.budget_bytes

    # ------------------------------------------------------------------ building
    def _build(self):
        limit = self.limit
        if limit.budget.unlimited:
            ev = self._unbatched()
            cap = limit.max_memory
            # the program itself counts as under a budget (runtime/program.py: its reserve),
            # so a max_memory below the smallest one named when refused never runs
            if cap.unlimited or (self.report_of(ev).peak_bytes + ev.program_reserve()
                                 + limit.held <= cap.fixed):
                return ev
            self.budget = cap                       # over max_memory: batched within it
        try:
            return self._fitted(self.budget)
        except InfeasibleBudget as err:
            if self.budget is limit.budget:
                raise
            need = err.minimum                      # searched now: the way out names it
            raise InfeasibleBudget(
                f"max_memory {self.budget} (no budget given) is too small: {err}. Raise "
                f"max_memory to at least {math.ceil(need / 1e4) / 100} MB, or give a budget",
                err.budget, need) from err

    def report_of(self, ev):
        """``ev``'s dry run, kept when ``ev`` becomes the program."""
        self._report = ev.analyze()
        return self._report

    def _unbatched(self):
        if self.factored is not None and self.intermediates is not False:
            return StagedEvaluator(self.factored, self.extents, None, volatile=VOLATILE,
                                   stage=Evaluator)
        self.equations = self.plain
        return Evaluator(self.plain, self.extents)

    def _fitted(self, budget: Budget):
        self._report = None
        if self.factored is not None and self.intermediates is not False:
            try:
                ev = StagedEvaluator(self.factored, self.extents, budget,
                                     volatile=VOLATILE, persist=True, stage=Evaluator)
                ev.evaluators                 # plan now: refuse before the first residual
                self.equations = self.factored
                return ev
            except InfeasibleBudget:
                if self.intermediates:
                    raise
        self.equations = self.plain           # the plain equations need less memory
        return self._plain(budget)

    def _plain(self, budget: Budget) -> Evaluator:
        limit = MemoryLimit(budget, self.limit.max_memory, self.limit.held)
        total = limit.iteration_bytes(self.plain, self.extents)
        rest = total - limit.held
        if limit.held and rest <= 0:
            raise self._infeasible(total, 0.0)
        policy = BatchPolicy.everything(rest, self.extents, volatile=VOLATILE)
        ev = Evaluator(self.plain, self.extents, policy=policy, persist=True)
        try:                                      # plan now: refuse before the first residual
            ev.batched
        except InfeasibleBudget as err:
            if limit.held:
                raise self._infeasible(total, rest, err) from err
            raise
        return ev

    def _infeasible(self, total: float, rest: float, err: InfeasibleBudget | None = None):
        """InfeasibleBudget for the whole out-of-core iteration; its ``minimum`` (searched
        when read) is the residual's smallest feasible budget plus the held bytes."""
        return infeasible_iteration(self.plain, self.extents, total, rest, self.limit.held, err)


def infeasible_iteration(equations, extents, total: float, rest: float, held: int,
                         err: InfeasibleBudget | None = None) -> InfeasibleBudget:
    """The refusal of an out-of-core iteration budget ``total`` that leaves ``rest`` for the
    residual once ``held`` bytes are charged."""
    policy = BatchPolicy.everything(None, extents, volatile=VOLATILE)
    least = (lambda: err.minimum + held) if err is not None else (
        lambda: min_budget(equations, extents, policy) + held)      # read on demand
    return InfeasibleBudget(
        f"budget {format_bytes(total)} ({int(total)} B) for the out-of-core CCSD "
        f"iteration leaves {format_bytes(max(rest, 0))} for the residual once the "
        f"amplitudes and DIIS buffers the solver holds ({format_bytes(held)}) are "
        f"charged; the smallest that works is the residual's smallest feasible budget "
        f"(se.min_budget) plus {held} B (InfeasibleBudget.minimum)", total, least)
