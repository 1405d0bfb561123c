"""What a CC run reports: the printable summary and the JSON-ready dictionary.

Both read a finished method object (:class:`~sequant_eval.chem.cc.CoupledCluster`): its
energies and iterations, the residual program's prediction (``report``, the dry run) and
what the last NumPy run accounted (``meter``).
"""
from __future__ import annotations

from typing import Any

from ..errors import SequantEvalError
from ..api.staged import StagedReport
from ..units import format_bytes, format_flops
from .molecules import chemical_formula

__all__ = ["summary_text", "summary_dict"]


def _title(cc: Any) -> str:
    mol = cc.mf.mol
    frozen = cc.integrals.nfrozen
    return (f"{cc.method} on {chemical_formula(mol)} / {mol.basis}: {cc.nocc} occupied, "
            f"{cc.nvir} virtual {cc.orbital_kind}" + (f", {frozen} frozen" if frozen else ""))


def _iterations(cc: Any) -> str:
    restarted = cc.iterations - cc.iterations_run
    again = f", {cc.iterations_run} after the restart" if restarted else ""
    return (f"  iterations   = {cc.iterations} "
            f"({'converged' if cc.converged else 'NOT converged'}{again}), "
            f"{cc.seconds_per_iteration * 1e3:.1f} ms per residual")


def _memory_lines(cc: Any) -> list[str]:
    p, m = cc.report, cc.meter
    budget = cc.budget_bytes
    lines = ["memory report (one residual evaluation"
             + (f", budget {format_bytes(budget)}):" if budget else "):"),
             f"  predicted peak  {format_bytes(p.peak_bytes)} ({p.peak_bytes} B, dry run)"]
    if m is not None:
        match = "equal" if p.peak_bytes == m.peak_bytes else "DIFFER"
        lines += [f"  measured peak   {format_bytes(m.peak_bytes)} ({m.peak_bytes} B, "
                  f"{cc.backend} accounted) -> {match}",
                  f"  flops/iteration {format_flops(m.flops)}"
                  + (f" (recompute overhead {p.recompute_overhead:.3f}x, "
                     f"{len(p.loops)} loops)" if p.loops else "")]
    if isinstance(p, StagedReport):
        lines.append(f"  staged: {len(p.stages)} stages, "
                     f"{len(cc.evaluator().intermediates)} intermediates (at most "
                     f"{format_bytes(max(p.held_bytes))} held between stages); "
                     f"{p.binary_contractions} binary contractions -> "
                     f"{p.distinct_contractions} distinct values")
    else:
        lines.append(f"  forest: {p.forest.binary_contractions} binary contractions -> "
                     f"{p.forest.distinct_contractions} distinct values")
    return lines


def _storage_line(cc: Any) -> str | None:
    line = cc.storage.describe(cc.integrals)
    total = cc.iteration_budget_bytes
    if line is not None and total is not None:
        line += (f"; iteration budget {format_bytes(total)} = residual "
                 f"{format_bytes(cc.budget_bytes)} + amplitudes and DIIS buffers "
                 f"{format_bytes(cc.held_bytes)}")
    return line


def summary_text(cc: Any) -> str:
    """Energies, convergence and the memory report (prediction vs measurement)."""
    if cc.result is None:
        raise SequantEvalError(f"{cc.method} has not run yet: call .run() first")
    lines = [_title(cc),
             f"  E(HF)        = {cc.e_hf:.10f} Eh",
             f"  E(corr)      = {cc.e_corr:.10f} Eh",
             f"  E(total)     = {cc.e_tot:.10f} Eh",
             _iterations(cc), *_memory_lines(cc)]
    disk = _storage_line(cc)
    if disk is not None:
        lines.append(f"  {disk}")
    return "\n".join(lines + _triples_lines(cc))


def _triples_lines(cc: Any) -> list[str]:
    """After ``ccsd_t()``: the three energies and the (T) step's memory figures."""
    tr = cc.triples_result
    if tr is None:
        return []
    return [f"E(CCSD) = {cc.e_tot:.10f}  E(T) = {tr.e_t:.10f}  E(CCSD(T)) = "
            f"{cc.e_tot + tr.e_t:.10f} Eh",
            f"  (T) step: predicted peak {format_bytes(tr.report.peak_bytes)}, metered "
            f"{format_bytes(tr.meter.peak_bytes)}, program "
            f"{format_bytes(tr.report.program_bytes)}"
            + (f", budget {format_bytes(tr.budget_bytes)}" if tr.budget_bytes else "")
            + _tuples_line(tr.report)]


def _tuples_line(report: Any) -> str:
    """How a (T) summed over ordered virtual block tuples ran (``api/symmetric.py``)."""
    if not hasattr(report, "tuples"):
        return ""
    return (f"\n  (T) over {report.tuples} ordered tuples of {report.blocks} virtual blocks "
            f"of {report.block}, {report.workers} at a time")


def _triples(cc: Any) -> dict[str, Any] | None:
    tr = cc.triples_result
    if tr is None:
        return None
    out = {"e_t": tr.e_t, "e_tot": cc.e_tot + tr.e_t,
           "predicted_peak_bytes": tr.report.peak_bytes,
           "metered_peak_bytes": tr.meter.peak_bytes, "budget_bytes": tr.budget_bytes}
    if hasattr(tr.report, "tuples"):
        out.update(tuples=tr.report.tuples, blocks=tr.report.blocks,
                   block=tr.report.block, workers=tr.report.workers)
    return out


def _history(cc: Any) -> list[dict[str, Any]]:
    hist = cc.result.history if cc.result else ()
    return [{"iteration": r.iteration, "e_corr": r.e_corr,
             "delta_e": None if r.delta_e == float("inf") else r.delta_e,
             "residual_norm": r.residual_norm} for r in hist]


def _memory(cc: Any) -> dict[str, Any] | None:
    rep, m = cc.report, cc.meter
    if rep is None:
        return None
    return {"budget_bytes": cc.budget_bytes,
            "iteration_budget_bytes": cc.iteration_budget_bytes,
            "held_bytes": cc.held_bytes if cc.out_of_core else None,
            "predicted_peak_bytes": rep.peak_bytes,
            "measured_peak_bytes": None if m is None else m.peak_bytes,
            "flops_per_iteration": rep.flops, "loops": len(rep.loops)}


def _integrals_file(cc: Any) -> dict[str, Any] | None:
    """Out of core: the integral file, whether it was written, reused (verified) or
    rewritten (and why), and the stale scratch files removed before the run."""
    if not cc.out_of_core:
        return None
    ints = cc.integrals
    return {"path": str(ints.path), "status": ints.status, "bytes": ints.written_bytes,
            "orbital_signs_aligned": 0 if ints.signs is None else
            sum(int((v < 0).sum()) for v in ints.signs.values()),
            "removed_stale": [str(r.path) for r in ints.removed]}


def summary_dict(cc: Any) -> dict[str, Any]:
    """A JSON-ready summary: energies, convergence, iteration history, memory."""
    mol = cc.mf.mol
    return {
        "method": cc.method, "reference": type(cc.mf).__name__, "equations": cc.label,
        "intermediates": cc.staged, "formula": chemical_formula(mol),
        "basis": str(mol.basis), "frozen": cc.frozen if isinstance(cc.frozen, int)
        else list(cc.frozen), "nocc": cc.nocc, "nvir": cc.nvir,
        "e_hf": cc.e_hf, "e_corr": cc.e_corr,
        "e_tot": None if cc.e_corr is None else cc.e_tot,
        "converged": cc.converged, "iterations": cc.iterations,
        "iterations_run": cc.iterations_run,
        "seconds_per_iteration": cc.seconds_per_iteration, "history": _history(cc),
        "chkfile": None if cc.chkfile is None else str(cc.chkfile),
        "integrals_on_disk": str(cc.integrals.path) if cc.out_of_core else None,
        "integrals_file": _integrals_file(cc),
        "max_memory_mb": cc.max_memory, "budget": str(cc.budget),
        "memory": _memory(cc), "triples": _triples(cc),
    }
