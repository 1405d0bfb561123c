"""Spin-orbital CCSD driven by the fused-forest evaluator, with a memory report.

The residual of every iteration is one evaluation of the packaged E, R1, R2 equations; the
same compiled program runs each time. The report compares the dry-run prediction of the
peak with the peak the NumPy run accounted.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..api import Evaluator, Report
from ..runtime import Meter
from ..report.text import format_bytes, format_flops
from .equations import ccsd_equations
from .integrals import SpinOrbitalIntegrals
from .solver import CCResult, denominators, mp2_guess, solve_cc

__all__ = ["CCSDRun", "amplitude_spaces", "residual_function", "run_ccsd"]


@dataclass(frozen=True)
class CCSDRun:
    """One CCSD run: the molecule, HF and CC results, and the predicted (dry-run) and
    measured (NumPy) memory of its residual evaluation."""

    molecule: str
    basis: str
    e_hf: float
    result: CCResult
    predicted: Report
    measured: Meter
    seconds_per_iteration: float
    nocc: int
    nvir: int
    budget: float | None = None

    @property
    def e_corr(self) -> float:
        """The converged correlation energy, Eh."""
        return self.result.e_corr

    def summary(self) -> str:
        """Energies, iterations and predicted vs measured peak as printable lines."""
        p, m = self.predicted, self.measured
        match = "equal" if p.peak_bytes == m.peak_bytes else "DIFFER"
        return "\n".join([
            f"CCSD on {self.molecule}/{self.basis}: {self.nocc} occupied, {self.nvir} virtual "
            f"spin-orbitals",
            f"  E(HF)        = {self.e_hf:.10f} Eh",
            f"  E(corr)      = {self.result.e_corr:.10f} Eh",
            f"  E(total)     = {self.e_hf + self.result.e_corr:.10f} Eh",
            f"  iterations   = {self.result.iterations} "
            f"({'converged' if self.result.converged else 'NOT converged'}), "
            f"{self.seconds_per_iteration * 1e3:.1f} ms per residual",
            "memory report (one residual evaluation"
            + (f", budget {format_bytes(self.budget)}):" if self.budget else "):"),
            f"  predicted peak  {format_bytes(p.peak_bytes)} ({p.peak_bytes} B, dry run)",
            f"  measured peak   {format_bytes(m.peak_bytes)} ({m.peak_bytes} B, NumPy "
            f"accounted) -> {match}",
            f"  flops/iteration {format_flops(m.flops)}"
            + (f" (recompute overhead {p.recompute_overhead:.3f}x, {len(p.loops)} loops)"
               if p.loops else ""),
            f"  forest: {p.forest.binary_contractions} binary contractions -> "
            f"{p.forest.distinct_contractions} distinct values",
        ])


def residual_function(ints: SpinOrbitalIntegrals, evaluator: Evaluator | None = None,
                      backend: str = "numpy", meters: list | None = None):
    """``residual(t) -> (E, {"t1": R1, "t2": R2, ...})`` for :func:`solve_cc`: every
    amplitude ``tN`` given (virtual slots first) goes in, its residual ``RN`` comes out
    (``t3`` and ``R3`` for the CCSDT equations)."""
    ev = evaluator or Evaluator(ccsd_equations(), ints.extents)
    base = ints.tensors()

    def residual(t):
        tensors = dict(base, **{k: {amplitude_spaces(k): v} for k, v in t.items()})
        out, meter = ev.evaluate(tensors, backend=backend, return_meter=True)
        if meters is not None:
            meters.append(meter)
        return float(out["E"]), {k: np.asarray(out["R" + k[1:]]) for k in t}

    return residual


def amplitude_spaces(name: str) -> tuple[str, ...]:
    """The block of amplitude ``tN``: N virtual slots, then N occupied ones."""
    rank = int(name[1:])
    return ("a",) * rank + ("i",) * rank


def run_ccsd(molecule: str = "water", basis: str = "cc-pvdz", backend: str = "numpy",
             conv_energy: float = 1e-10, conv_residual: float = 1e-8,
             max_iter: int = 100, budget=None) -> CCSDRun:
    """Solve CCSD; with a ``budget`` (bytes, "25MB", or a fraction such as "25%" of the
    unbatched peak) every residual runs batched within it."""
    ints = SpinOrbitalIntegrals.from_molecule(molecule, basis)
    if isinstance(budget, str) and budget.strip().endswith("%"):
        top = Evaluator(ccsd_equations(), ints.extents).analyze().peak_bytes
        budget = top * float(budget.strip()[:-1]) / 100
    ev = Evaluator(ccsd_equations(), ints.extents, budget=budget, persist=budget is not None,
                   volatile=("t1", "t2"))
    meters: list[Meter] = []
    residual = residual_function(ints, ev, backend, meters)
    start = time.perf_counter()
    result = solve_cc(residual, mp2_guess(ints), denominators(ints), conv_energy=conv_energy,
                      conv_residual=conv_residual, max_iter=max_iter)
    elapsed = time.perf_counter() - start
    return CCSDRun(molecule, basis, ints.e_hf, result, ev.analyze(), meters[-1],
                   elapsed / max(1, result.iterations), ints.nocc, ints.nvir,
                   ev.policy.budget_bytes if ev.policy else None)
