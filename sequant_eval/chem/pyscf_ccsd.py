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

The closed-shell residual is evaluated with intermediates
(:func:`~sequant_eval.expr.factor.factor_common`: terms ending in the same factor read the
same way are summed before that factor is contracted: at (H2O)3/cc-pVDZ extents 15
distinct o³v³ contractions become 8, 29.7 GFLOP 16.4): the intermediates are evaluated first and held, then the energy and
residuals read them (:class:`~sequant_eval.staged.StagedEvaluator`); the budget bounds both
stages with what is held. ``intermediates=False`` evaluates the plain equations in one
program; the default drops the intermediates when a budget cannot hold them, and out of
core (a few o²v² arrays held between stages would defeat the lean solver).

``CCSDT(mf)`` runs the spin-orbital CCSDT equations (``data/ccsdt_so.txt``) the same way,
on any reference (a closed-shell RHF through its spin orbitals): the triples amplitudes
``t3[i, j, k, a, b, c]`` start at zero beside the MP2 doubles, with the triples orbital
denominator; it keeps everything in memory (no ``integrals_on_disk``).

Out of core (``integrals_on_disk=DIR``): the integral blocks the equations read are
written once to an HDF5 file in ``DIR`` (in slabs, :mod:`sequant_eval.chem.on_disk`) and
read per batch; nothing of them is cached in memory. The solver then runs lean: the
doubles amplitudes (``t2``, and ``u2`` for the closed shell) live in an HDF5 file beside the
integrals, read per batch by the residual and updated slab by slab; the DIIS vectors are in
a second file; denominators are applied slab by slab. The budget bounds the whole
iteration: what the solver holds while a residual is evaluated (``held_bytes``: ``t1`` and
two slab buffers) is charged first, and the evaluator is planned under the rest.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..api import Evaluator, Report
from ..plan import BatchPolicy
from ..errors import InfeasibleBudget, SequantEvalError, UnsupportedFeature
from ..report.text import format_bytes, format_flops
from .ccsd import residual_function
from .closed_shell import ClosedShellIntegrals
from .equations import ccsd_equations, closed_shell_equations
from ..expr.exchange import fold_exchange
from ..expr.factor import factor_common
from ..staged import StagedEvaluator, StagedReport
from .process_memory import map_large_allocations, release_free_memory
from .diis import HDF5DIIS
from .solver import (CCResult, IterationRecord, denominators, mp2_guess,
                     orbital_denominators, solve_cc)

__all__ = ["CCSD", "resolve_budget", "EXCHANGE_FOLDS", "CLOSED_SHELL_SYMMETRIES"]

#: The amplitudes (and ``u2 = 2 t2 - t2~``) change every iteration: nothing read from them
#: may be kept from one evaluation to the next.
VOLATILE = ("t1", "t2", "t3", "u2")

#: The closed-shell path folds ``2 X{p,q;r,s} - X{p,q;s,r}`` of these tensors.
EXCHANGE_FOLDS = {"t2": "u2", "g": "L"}

#: What ``factor_common`` may use on the folded closed-shell equations: every tensor has
#: particle symmetry, ``f`` and ``g`` (real orbitals) the per-column bra/ket swap, ``L`` the
#: whole swap, and ``R2`` equals its mirror image (``t2`` does).
CLOSED_SHELL_SYMMETRIES = {"symmetric": ("f", "g", "L", "t1", "t2", "u2"),
                           "real": ("f", "g"), "hermitian": ("L",), "mirrored": ("R2",)}


def resolve_budget(equations, extents: dict[str, int], budget: Any) -> Any:
    """A budget for :class:`~sequant_eval.Evaluator`: ``"25%"`` becomes bytes as the
    Evaluator reads a share (that share of the unbatched arrays' peak, plus the program's
    reserve); bytes and texts such as ``"25MB"`` pass unchanged."""
    if isinstance(budget, str) and budget.strip().endswith("%"):
        text = budget.strip()[:-1]
        try:
            share = float(text) / 100
        except ValueError:
            raise SequantEvalError(f"budget {budget!r}: a share is a number followed by %, "
                                   "e.g. '25%'") from None
        if not 0 < share:
            raise SequantEvalError(f"budget {budget!r}: a share must be above 0%")
        return Evaluator(equations, extents, budget=f"{share * 100!r}%").policy.budget_bytes
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
    intermediates
        Closed shell: evaluate with common-factor intermediates (``True``), without
        (``False``), or with them unless out of core or the budget cannot hold them
        (``None``, the default).
    conv_tol, conv_tol_normt, max_cycle
        Converged when ``|ΔE| < conv_tol`` and the residual norm ``< conv_tol_normt``
        (PySCF measures the amplitude change instead), after at most ``max_cycle``
        residual evaluations.
    diis_space
        DIIS vectors kept (PySCF's default, 6: on the water clusters one iteration fewer
        than 8, whose extrapolation oscillates around ``|ΔE| = 1e-7`` a step longer).
    callback
        ``callback(record, seconds, peak_bytes)`` after every iteration (the CLI prints).
    integrals_on_disk
        A folder: write the integral blocks there once (HDF5) and read them per batch;
        the budget then bounds the whole iteration (see the module docstring).
    slab_bytes
        The writer's slab for ``integrals_on_disk`` (default: 32 MiB, at most a quarter
        of the budget).
    """

    #: The method's name in summaries and JSON.
    method = "CCSD"
    #: Whether the amplitudes include the triples ``t3`` (:class:`CCSDT`).
    triples = False

    def __init__(self, mf: Any, frozen: int = 0, budget: Any = None, backend: str = "numpy",
                 spin_orbital: bool | None = None, conv_tol: float = 1e-7,
                 conv_tol_normt: float = 1e-5, max_cycle: int = 50, diis_space: int = 6,
                 callback: Callable[[IterationRecord, float, int], Any] | None = None,
                 integrals_on_disk: str | os.PathLike | None = None,
                 slab_bytes: float | None = None, intermediates: bool | None = None) -> None:
        self.mf = mf
        self.integrals_on_disk = None if integrals_on_disk is None else Path(integrals_on_disk)
        self.slab_bytes = slab_bytes
        self.frozen = frozen
        self._amplitudes = None           # the doubles on disk while a lean run is on
        self._prefetched = False          # integral blocks transformed in one go (closed shell)
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
        self.report: Report | StagedReport | None = None
        self.meter = None
        self.seconds_per_iteration = float("nan")
        if self.spin_orbital:
            self.equations = self._spin_orbital_equations()
        else:       # Coulomb/exchange pairs folded into L = 2g - g~ and u2 = 2t2 - t2~
            self.equations = fold_exchange(closed_shell_equations(), EXCHANGE_FOLDS)
        if intermediates and (self.spin_orbital or self.integrals_on_disk is not None):
            raise UnsupportedFeature(
                "intermediates=True needs the closed-shell equations in memory; drop "
                "spin_orbital=True / integrals_on_disk, or leave intermediates unset")
        self.intermediates = intermediates
        self.integrals = self._integrals()
        self._plain = self.equations
        if intermediates is not False and not self.spin_orbital and not self.out_of_core:
            # R2 equals its mirror image (a_1,i_1 <-> a_2,i_2); the exchange fold hides it
            ext = self.integrals.extents
            # the merge search costs ~0.1 s and saves 2-3 % of every residual: worth it
            # from about (H2O)3/cc-pVDZ up (vvvv ladder 2 o^2 v^4 = 4.8 GFLOP there)
            beam = 8 if 2 * ext["i"] ** 2 * ext["a"] ** 4 > 3e9 else 1
            self.equations = factor_common(self._plain, ext, beam=beam,
                                           **CLOSED_SHELL_SYMMETRIES)

    @staticmethod
    def _spin_orbital_equations():
        return ccsd_equations()

    def _integrals(self):
        if not self.spin_orbital:
            ints = ClosedShellIntegrals.from_scf(self.mf, self.frozen)
        else:
            from .spin_orbital import spin_orbital_integrals

            ints = spin_orbital_integrals(self.mf, self.frozen)
        if self.integrals_on_disk is None:
            return ints
        from .on_disk import DEFAULT_SLAB_BYTES, IntegralFile, integral_blocks

        map_large_allocations()     # freed slabs and batches leave the resident set at once

        total, held = self._iteration_budget(ints.extents), self._held(ints)
        if total is not None and total <= held:         # refused before writing anything
            raise self._infeasible(total, 0.0, held=held, extents=ints.extents)
        slab = self.slab_bytes
        if slab is None:
            slab = DEFAULT_SLAB_BYTES if total is None else min(DEFAULT_SLAB_BYTES, total / 4)
        names = ("g",) if self.spin_orbital else ("g", "L")
        blocks = integral_blocks(self.equations, ints.extents, names)
        return IntegralFile.write(ints, self.integrals_on_disk, blocks, slab_bytes=slab)

    @property
    def out_of_core(self) -> bool:
        """Whether the integrals are read from disk (and the solver runs lean)."""
        return self.integrals_on_disk is not None

    def _iteration_budget(self, extents: dict[str, int]) -> float | None:
        """The budget in bytes (a share resolved against the unbatched peak)."""
        from ..plan.policy import parse_budget

        if not hasattr(self, "_total_budget"):
            budget = resolve_budget(self.equations, extents, self.budget)
            self._total_budget = None if budget is None else float(parse_budget(budget))
        return self._total_budget

    @property
    def held_bytes(self) -> int:
        """Bytes the lean solver holds beside one evaluation: ``t1`` and two slab buffers
        (DIIS chunks, or rows of the doubles amplitudes it updates on disk)."""
        return self._held(self.integrals)

    def _held(self, ints) -> int:
        """``t1`` and two slabs (DIIS chunks, or rows of the doubles on disk)."""
        no, nv = ints.nocc, ints.nvir
        return 8 * no * nv + 16 * max(self._diis_chunk(ints), nv * no * no)

    def _diis_chunk(self, ints=None) -> int:
        """Elements per DIIS chunk: an eighth of the amplitudes, within 1 Ki .. 128 Ki."""
        ints = ints or self.integrals
        n = ints.nocc * ints.nvir * (1 + ints.nocc * ints.nvir)
        return int(min(1 << 17, max(1 << 10, n // 8)))

    # ------------------------------------------------------------------ results
    @property
    def e_hf(self) -> float:
        """The reference energy (``mf.e_tot``)."""
        return self.integrals.e_hf

    @property
    def e_tot(self) -> float:
        """``e_hf + e_corr`` (Hartree)."""
        if self.e_corr is None:
            raise SequantEvalError(f"{self.method} has not run yet: call .run() first")
        return self.e_hf + self.e_corr

    @property
    def nocc(self) -> int:
        """Correlated occupied orbitals (spin orbitals with ``spin_orbital=True``; frozen core
        excluded)."""
        return self.integrals.nocc

    @property
    def nvir(self) -> int:
        """Virtual orbitals (spin orbitals with ``spin_orbital=True``)."""
        return self.integrals.nvir

    @property
    def staged(self) -> bool:
        """Whether the residual runs with intermediates (two or more stages)."""
        return self.equations is not self._plain

    def evaluator(self) -> Evaluator | StagedEvaluator:
        """The compiled residual program (planned under the budget on first use; out of
        core under the budget less :attr:`held_bytes`)."""
        if getattr(self, "_evaluator", None) is None and self.staged:
            ext = self.integrals.extents
            budget = self.budget
            try:
                ev = StagedEvaluator(self.equations, ext, budget, volatile=VOLATILE,
                                     persist=budget is not None)
                if budget is not None:
                    ev.evaluators             # plan now: refuse before the first residual
                self._evaluator = ev
            except InfeasibleBudget:
                if self.intermediates:
                    raise
                self.equations = self._plain  # the plain equations need less memory
        if getattr(self, "_evaluator", None) is None:
            ext = self.integrals.extents
            budget = resolve_budget(self.equations, ext, self.budget)
            if budget is not None and self.out_of_core:
                budget = self._evaluator_budget(ext)
            # the amplitudes change every iteration, u2 with them: nothing read from them
            # may be kept from one evaluation to the next
            policy = None if budget is None else BatchPolicy.everything(
                budget, ext, volatile=VOLATILE)
            self._evaluator = Evaluator(self.equations, ext, policy=policy,
                                        persist=budget is not None)
            if budget is not None and self.out_of_core:
                try:                      # plan now: refuse before the first residual
                    self._evaluator.batched
                except InfeasibleBudget as err:
                    self._evaluator = None
                    raise self._infeasible(self._iteration_budget(ext), budget, err) from err
        return self._evaluator

    def _evaluator_budget(self, ext: dict[str, int]) -> float:
        """The iteration budget less what the lean solver holds (InfeasibleBudget at once
        when nothing is left)."""
        total, held = self._iteration_budget(ext), self.held_bytes
        if total - held <= 0:
            raise self._infeasible(total, 0.0)
        return total - held

    def _infeasible(self, total: float, rest: float, err: InfeasibleBudget | None = None,
                    held: int | None = None, extents: dict[str, int] | None = None):
        """InfeasibleBudget for the whole out-of-core iteration; its ``minimum`` (searched
        when read) is the residual's smallest feasible budget plus :attr:`held_bytes`."""
        from ..api import min_budget
        from ..report.text import format_bytes

        held = self.held_bytes if held is None else held
        ext = self.integrals.extents if extents is None else extents
        policy = BatchPolicy.everything(None, ext, volatile=VOLATILE)
        least = (lambda: err.minimum + held) if err is not None else (
            lambda: min_budget(self.equations, ext, policy) + held)      # read on demand
        return InfeasibleBudget(
            f"budget {format_bytes(total)} ({int(total)} B) for the out-of-core CCSD "
            f"iteration leaves {format_bytes(max(rest, 0))} for the residual once the "
            f"amplitudes and DIIS buffers the solver holds ({format_bytes(held)}) are "
            f"charged; the smallest that works is the residual's smallest feasible budget "
            f"(se.min_budget) plus {held} B (InfeasibleBudget.minimum)", total, least)

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
        if not self.out_of_core and not self._prefetched:
            from .on_disk import integral_blocks      # every block from one transform

            ints.prefetch(integral_blocks(self.equations, ints.extents, ("g", "L")))
            self._prefetched = True
        base = ints.tensors()

        def residual(t):
            t2 = t["t2"]
            if self._amplitudes is not None:          # on disk: u2 beside t2, slab by slab
                self._amplitudes.refresh_exchange()
                u2 = self._amplitudes.u2
            else:
                u2 = np.multiply(t2, 2)               # 2 t2 - t2~ with one t2-sized array
                u2 -= t2.transpose(0, 1, 3, 2)
            tensors = dict(base, t1={("a", "i"): t["t1"]}, t2={("a", "a", "i", "i"): t2},
                           u2={("a", "a", "i", "i"): u2})
            out, meter = ev.evaluate(tensors, backend=self.backend, return_meter=True)
            if meters is not None:
                meters.append(meter)
            return float(out["E"]), {"t1": np.asarray(out["R1"]), "t2": np.asarray(out["R2"])}

        return residual

    # ------------------------------------------------------------------ solver
    def run(self) -> "CCSD":
        """Solve the CC equations (Jacobi + DIIS from the MP2 guess); returns ``self``."""
        ev = self.evaluator()
        ints = self.integrals
        meters: list = []
        last = [time.perf_counter()]

        def on_iteration(record: IterationRecord, _t) -> None:
            if self.out_of_core:            # the residual's freed batches back to the system
                release_free_memory()
            now = time.perf_counter()
            if self.callback is not None:
                self.callback(record, now - last[0], meters[-1].peak_bytes if meters else 0)
            last[0] = now

        start = time.perf_counter()
        lean: dict[str, Any] = {}
        guess = None
        self._amplitudes = None
        try:
            if self.out_of_core:    # steps in place, t2 and DIIS on disk, D2 never formed
                from .on_disk import AmplitudeFile

                scratch = self.integrals_on_disk / f"{{}}-{os.getpid()}-{id(self):x}.h5"
                chunk = self._diis_chunk()
                self._amplitudes = AmplitudeFile(
                    str(scratch).format("amplitudes"), (ints.nvir,) * 2 + (ints.nocc,) * 2,
                    chunk, exchange=not self.spin_orbital)
                guess = self._amplitudes.mp2_guess(ints, orbital_denominators(ints))
                lean = {"in_place": True, "slab_elements": chunk,
                        "diis": None if self.diis_space < 2 else HDF5DIIS(
                            str(scratch).format("diis"), self.diis_space, chunk)}
            result = solve_cc(self._residual_function(meters),
                              guess or mp2_guess(ints, triples=self.triples),
                              orbital_denominators(ints) if lean
                              else denominators(ints, triples=self.triples),
                              conv_energy=self.conv_tol, conv_residual=self.conv_tol_normt,
                              max_iter=self.max_cycle, diis_space=self.diis_space,
                              callback=on_iteration, **lean)
            if self._amplitudes is not None:      # the converged amplitudes, in memory
                result = replace(result, t={k: np.asarray(v[()]) for k, v in result.t.items()})
        finally:
            if lean.get("diis") is not None:
                lean["diis"].close()
            if self._amplitudes is not None:
                self._amplitudes.close()
                self._amplitudes = None
        elapsed = time.perf_counter() - start
        self.result = result
        self.e_corr = result.e_corr
        self.t1 = result.t["t1"].T.copy()
        self.t2 = result.t["t2"].transpose(2, 3, 0, 1).copy()
        if self.triples:
            self.t3 = result.t["t3"].transpose(3, 4, 5, 0, 1, 2).copy()
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
            "method": self.method, "reference": type(self.mf).__name__,
            "equations": "spin-orbital" if self.spin_orbital else "closed-shell",
            "intermediates": self.staged,
            "basis": str(self.mf.mol.basis), "frozen": self.frozen,
            "nocc": self.nocc, "nvir": self.nvir,
            "e_hf": self.e_hf, "e_corr": self.e_corr,
            "e_tot": None if self.e_corr is None else self.e_tot,
            "converged": self.converged, "iterations": self.iterations,
            "seconds_per_iteration": self.seconds_per_iteration,
            "history": [{"iteration": r.iteration, "e_corr": r.e_corr,
                         "delta_e": None if r.delta_e == float("inf") else r.delta_e,
                         "residual_norm": r.residual_norm} for r in hist],
            "integrals_on_disk": None if not self.out_of_core else str(self.integrals.path),
            "memory": None if rep is None else {
                "budget_bytes": self._budget_bytes(),
                "iteration_budget_bytes": (self._iteration_budget(self.integrals.extents)
                                           if self.out_of_core else None),
                "held_bytes": self.held_bytes if self.out_of_core else None,
                "predicted_peak_bytes": rep.peak_bytes,
                "measured_peak_bytes": None if m is None else m.peak_bytes,
                "flops_per_iteration": rep.flops, "loops": len(rep.loops)},
        }

    def _budget_bytes(self) -> float | None:
        ev = self.evaluator()
        if isinstance(ev, StagedEvaluator):
            return ev.budget_bytes
        policy = ev.policy
        return None if policy is None else policy.budget_bytes

    def summary(self) -> str:
        """Energies, convergence and the memory report (prediction vs measurement)."""
        if self.result is None:
            raise SequantEvalError(f"{self.method} has not run yet: call .run() first")
        p, m = self.report, self.meter
        kind = "spin-orbitals" if self.spin_orbital else "spatial orbitals (closed shell)"
        match = "equal" if m is not None and p.peak_bytes == m.peak_bytes else "DIFFER"
        budget = self._budget_bytes()
        if self.out_of_core:
            total = self._iteration_budget(self.integrals.extents)
            ints = self.integrals
            disk = (f"integrals on disk: {ints.path} ({format_bytes(ints.written_bytes)}"
                    f"{', reused' if ints.reused else ''})")
            if total is not None:
                disk += (f"; iteration budget {format_bytes(total)} = residual "
                         f"{format_bytes(budget)} + amplitudes and DIIS buffers "
                         f"{format_bytes(self.held_bytes)}")
        lines = [
            f"{self.method} on {self.mf.mol.natm} atoms / {self.mf.mol.basis}: "
            f"{self.nocc} occupied, "
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
        if isinstance(p, StagedReport):
            held = max(p.held_bytes)
            lines.append(f"  staged: {len(p.stages)} stages, "
                         f"{len(self.evaluator().intermediates)} "
                         f"intermediates (at most {format_bytes(held)} held between stages); "
                         f"{p.binary_contractions} binary contractions -> "
                         f"{p.distinct_contractions} distinct values")
        else:
            lines.append(f"  forest: {p.forest.binary_contractions} binary contractions -> "
                         f"{p.forest.distinct_contractions} distinct values")
        if self.out_of_core:
            lines.append(f"  {disk}")
        return "\n".join(lines)

    def close(self) -> None:
        """Close the integral file (out of core); the file stays for a later run."""
        if self.out_of_core:
            self.integrals.close()

