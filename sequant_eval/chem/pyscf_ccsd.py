"""A PySCF-shaped CCSD front end: ``CCSD(mf).run()`` on the fused-forest evaluator.

    from pyscf import gto, scf
    import sequant_eval.chem as sc
    mf = scf.RHF(gto.M(atom="O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469",
                       basis="cc-pvdz")).run()
    mycc = sc.CCSD(mf, frozen=1).run()
    print(mycc.e_corr, mycc.e_tot, mycc.summary())

A closed-shell RHF reference runs the closed-shell equations (``data/ccsd_cs.txt``, spin
traced in-package) on spatial integrals; ``spin_orbital=True`` runs the spin-orbital
equations (``data/ccsd_so.txt``) instead, and any other reference (UHF, GHF, ROHF) takes the
spin-orbital path on its generalized spin orbitals.  Amplitudes are stored in PySCF's
layouts (``t1[i, a]``, ``t2[i, j, a, b]``), closed-shell ``t2`` being the αβ amplitude as
in ``pyscf.cc.CCSD``, spin-orbital ones as in ``pyscf.cc.GCCSD``.  Every residual is one
evaluation of one compiled program, under ``budget`` when given; ``report`` is the dry
run's prediction and ``meter`` what the last NumPy run accounted.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..api import Evaluator, Report
from ..plan import BatchPolicy
from ..errors import SequantEvalError, UnsupportedFeature
from ..report.text import format_bytes, format_flops
from .ccsd import residual_function
from .closed_shell import ClosedShellIntegrals
from .equations import ccsd_equations, closed_shell_equations
from ..expr.exchange import fold_exchange
from .solver import CCResult, IterationRecord, denominators, mp2_guess, solve_cc

__all__ = ["CCSD", "resolve_budget", "EXCHANGE_FOLDS"]

#: The closed-shell path folds ``2 X{p,q;r,s} - X{p,q;s,r}`` of these tensors.
EXCHANGE_FOLDS = {"t2": "u2", "g": "L"}


def resolve_budget(equations, extents: dict[str, int], budget: Any) -> Any:
    """A budget for :class:`~sequant_eval.Evaluator`: ``"25%"`` becomes that share of the
    unbatched dry-run peak in bytes; bytes and texts such as ``"25MB"`` pass unchanged."""
    if isinstance(budget, str) and budget.strip().endswith("%"):
        text = budget.strip()[:-1]
        try:
            share = float(text) / 100
        except ValueError:
            raise SequantEvalError(f"budget {budget!r}: a share is a number followed by %, "
                                   "e.g. '25%'") from None
        if not 0 < share:
            raise SequantEvalError(f"budget {budget!r}: a share must be above 0%")
        return Evaluator(equations, extents).analyze().peak_bytes * share
    return budget


def _is_closed_shell_rhf(mf: Any) -> bool:
    istype = getattr(mf, "istype", None)
    return (istype is not None and istype("RHF") and not istype("ROHF")
            and getattr(mf.mol, "spin", 0) == 0)


class CCSD:
    """Coupled-cluster singles and doubles on a converged PySCF mean field.

    Parameters
    ----------
    mf
        A converged PySCF SCF object (RHF for the closed-shell path).
    frozen
        Number of lowest orbitals left uncorrelated (PySCF's ``frozen=N``).
    budget
        ``None`` (unbatched), bytes, a text (``"25MB"``) or a share of the unbatched peak
        (``"25%"``): every residual then runs batched within it.
    backend
        Evaluator backend, ``"numpy"`` by default.
    spin_orbital
        ``True`` forces the spin-orbital equations; ``None`` picks closed-shell for a
        closed-shell RHF and spin-orbital otherwise.
    conv_tol, conv_tol_normt, max_cycle
        Converged when ``|ΔE| < conv_tol`` and the residual norm ``< conv_tol_normt``
        (PySCF measures the amplitude change instead), after at most ``max_cycle``
        residual evaluations.
    callback
        ``callback(record, seconds, peak_bytes)`` after every iteration (the CLI prints).
    """

    def __init__(self, mf: Any, frozen: int = 0, budget: Any = None, backend: str = "numpy",
                 spin_orbital: bool | None = None, conv_tol: float = 1e-7,
                 conv_tol_normt: float = 1e-5, max_cycle: int = 50, diis_space: int = 8,
                 callback: Callable[[IterationRecord, float, int], Any] | None = None) -> None:
        self.mf = mf
        self.frozen = frozen
        self.budget = budget
        self.backend = backend
        closed = _is_closed_shell_rhf(mf)
        if spin_orbital is False and not closed:
            raise UnsupportedFeature(
                f"closed-shell CCSD needs a closed-shell RHF reference, got "
                f"{type(mf).__name__} (spin={mf.mol.spin}); use spin_orbital=True")
        self.spin_orbital = bool(spin_orbital) or not closed
        self.conv_tol = conv_tol
        self.conv_tol_normt = conv_tol_normt
        self.max_cycle = max_cycle
        self.diis_space = diis_space
        self.callback = callback
        self.e_corr: float | None = None
        self.t1: np.ndarray | None = None
        self.t2: np.ndarray | None = None
        self.converged = False
        self.iterations = 0
        self.result: CCResult | None = None
        self.report: Report | None = None
        self.meter = None
        self.seconds_per_iteration = float("nan")
        self.integrals = self._integrals()
        if self.spin_orbital:
            self.equations = ccsd_equations()
        else:       # Coulomb/exchange pairs folded into L = 2g - g~ and u2 = 2t2 - t2~
            self.equations = fold_exchange(closed_shell_equations(), EXCHANGE_FOLDS)

    def _integrals(self):
        if not self.spin_orbital:
            return ClosedShellIntegrals.from_scf(self.mf, self.frozen)
        from .spin_orbital import spin_orbital_integrals

        return spin_orbital_integrals(self.mf, self.frozen)

    # ------------------------------------------------------------------ results
    @property
    def e_hf(self) -> float:
        """The reference energy (``mf.e_tot``)."""
        return self.integrals.e_hf

    @property
    def e_tot(self) -> float:
        """``e_hf + e_corr`` (Hartree)."""
        if self.e_corr is None:
            raise SequantEvalError("CCSD has not run yet: call .run() first")
        return self.e_hf + self.e_corr

    @property
    def nocc(self) -> int:
        return self.integrals.nocc

    @property
    def nvir(self) -> int:
        return self.integrals.nvir

    def evaluator(self) -> Evaluator:
        """The compiled residual program (planned under the budget on first use)."""
        if getattr(self, "_evaluator", None) is None:
            ext = self.integrals.extents
            budget = resolve_budget(self.equations, ext, self.budget)
            # the amplitudes change every iteration, u2 with them: nothing read from them
            # may be kept from one evaluation to the next
            policy = None if budget is None else BatchPolicy.everything(
                budget, ext, volatile=("t1", "t2", "u2"))
            self._evaluator = Evaluator(self.equations, ext, policy=policy,
                                        persist=budget is not None)
        return self._evaluator

    def residual(self, t1: np.ndarray, t2: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(E, R1, R2)`` at amplitudes in PySCF layout; the residuals in PySCF layout too
        (``R1[i, a]``, ``R2[i, j, a, b]``)."""
        e, r = self._residual_function()(
            {"t1": np.ascontiguousarray(t1.T), "t2": np.ascontiguousarray(t2.transpose(2, 3, 0, 1))})
        return e, r["t1"].T, r["t2"].transpose(2, 3, 0, 1)

    def _residual_function(self, meters: list | None = None):
        """``residual(t) -> (E, {"t1": R1, "t2": R2})`` in the solver's layouts."""
        ev, ints = self.evaluator(), self.integrals
        if self.spin_orbital:
            return residual_function(ints, ev, self.backend, meters)
        base = ints.tensors()

        def residual(t):
            t2 = t["t2"]
            u2 = 2 * t2 - t2.transpose(0, 1, 3, 2)
            tensors = dict(base, t1={("a", "i"): t["t1"]}, t2={("a", "a", "i", "i"): t2},
                           u2={("a", "a", "i", "i"): u2})
            out, meter = ev.evaluate(tensors, backend=self.backend, return_meter=True)
            if meters is not None:
                meters.append(meter)
            return float(out["E"]), {"t1": np.asarray(out["R1"]), "t2": np.asarray(out["R2"])}

        return residual

    # ------------------------------------------------------------------ solver
    def run(self) -> "CCSD":
        """Solve the CCSD equations (Jacobi + DIIS from the MP2 guess); returns ``self``."""
        ev = self.evaluator()
        ints = self.integrals
        meters: list = []
        last = [time.perf_counter()]

        def on_iteration(record: IterationRecord, _t) -> None:
            now = time.perf_counter()
            if self.callback is not None:
                self.callback(record, now - last[0], meters[-1].peak_bytes if meters else 0)
            last[0] = now

        start = time.perf_counter()
        result = solve_cc(self._residual_function(meters), mp2_guess(ints),
                          denominators(ints), conv_energy=self.conv_tol,
                          conv_residual=self.conv_tol_normt, max_iter=self.max_cycle,
                          diis_space=self.diis_space, callback=on_iteration)
        elapsed = time.perf_counter() - start
        self.result = result
        self.e_corr = result.e_corr
        self.t1 = result.t["t1"].T.copy()
        self.t2 = result.t["t2"].transpose(2, 3, 0, 1).copy()
        self.converged = result.converged
        self.iterations = result.iterations
        self.meter = meters[-1] if meters else None
        self.report = ev.analyze()
        self.seconds_per_iteration = elapsed / max(1, result.iterations)
        return self

    def kernel(self) -> tuple[float, np.ndarray, np.ndarray]:
        """PySCF's ``kernel()``: runs and returns ``(e_corr, t1, t2)``."""
        self.run()
        return self.e_corr, self.t1, self.t2

    # ------------------------------------------------------------------ reporting
    def memory(self, title: str = ""):
        """The peak-memory report object (text/JSON/plot) of the residual program; needs a
        budget (the planned schedule)."""
        return self.evaluator().analyze().memory(title)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: energies, convergence, iteration history, memory."""
        hist = self.result.history if self.result else ()
        rep, m = self.report, self.meter
        return {
            "method": "CCSD", "reference": type(self.mf).__name__,
            "equations": "spin-orbital" if self.spin_orbital else "closed-shell",
            "basis": str(self.mf.mol.basis), "frozen": self.frozen,
            "nocc": self.nocc, "nvir": self.nvir,
            "e_hf": self.e_hf, "e_corr": self.e_corr,
            "e_tot": None if self.e_corr is None else self.e_tot,
            "converged": self.converged, "iterations": self.iterations,
            "seconds_per_iteration": self.seconds_per_iteration,
            "history": [{"iteration": r.iteration, "e_corr": r.e_corr,
                         "delta_e": None if r.delta_e == float("inf") else r.delta_e,
                         "residual_norm": r.residual_norm} for r in hist],
            "memory": None if rep is None else {
                "budget_bytes": self._budget_bytes(),
                "predicted_peak_bytes": rep.peak_bytes,
                "measured_peak_bytes": None if m is None else m.peak_bytes,
                "flops_per_iteration": rep.flops, "loops": len(rep.loops)},
        }

    def _budget_bytes(self) -> float | None:
        policy = self.evaluator().policy
        return None if policy is None else policy.budget_bytes

    def summary(self) -> str:
        """Energies, convergence and the memory report (prediction vs measurement)."""
        if self.result is None:
            raise SequantEvalError("CCSD has not run yet: call .run() first")
        p, m = self.report, self.meter
        kind = "spin-orbitals" if self.spin_orbital else "spatial orbitals (closed shell)"
        match = "equal" if m is not None and p.peak_bytes == m.peak_bytes else "DIFFER"
        budget = self._budget_bytes()
        lines = [
            f"CCSD on {self.mf.mol.natm} atoms / {self.mf.mol.basis}: {self.nocc} occupied, "
            f"{self.nvir} virtual {kind}" + (f", {self.frozen} frozen" if self.frozen else ""),
            f"  E(HF)        = {self.e_hf:.10f} Eh",
            f"  E(corr)      = {self.e_corr:.10f} Eh",
            f"  E(total)     = {self.e_tot:.10f} Eh",
            f"  iterations   = {self.iterations} "
            f"({'converged' if self.converged else 'NOT converged'}), "
            f"{self.seconds_per_iteration * 1e3:.1f} ms per residual",
            "memory report (one residual evaluation"
            + (f", budget {format_bytes(budget)}):" if budget else "):"),
            f"  predicted peak  {format_bytes(p.peak_bytes)} ({p.peak_bytes} B, dry run)",
        ]
        if m is not None:
            lines += [f"  measured peak   {format_bytes(m.peak_bytes)} ({m.peak_bytes} B, "
                      f"{self.backend} accounted) -> {match}",
                      f"  flops/iteration {format_flops(m.flops)}"
                      + (f" (recompute overhead {p.recompute_overhead:.3f}x, "
                         f"{len(p.loops)} loops)" if p.loops else "")]
        lines.append(f"  forest: {p.forest.binary_contractions} binary contractions -> "
                     f"{p.forest.distinct_contractions} distinct values")
        return "\n".join(lines)
