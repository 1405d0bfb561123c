"""The (T) energy of CCSD(T) evaluated: closed-shell, spin-orbital and unrestricted.

The formulas and the packaged equation files are ``chem/triples_text.py``'s. Here they
are evaluated under the method's budget (or ``max_memory``, PySCF's rule):

- closed shell and spin orbitals, by default, the forms symmetric in the three virtuals
  over the ordered tuples of virtual blocks only
  (:class:`~sequant_eval.api.symmetric.SymmetricSum`, PySCF's a ≥ b ≥ c on blocks);
- on request (``form``), or for the unrestricted energy, the factored form (the triples
  made whole once, in stages) where it fits, else the products with their sub-products
  shared (``Evaluator(share_subproducts=True)``), batched so that no o³v³ value is whole.

The denominator is read per batch from
:class:`~sequant_eval.chem.denominators.OrbitalDenominator`, never made whole.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..api import Evaluator
from ..api.staged import StagedReport
from ..api.symmetric import SymmetricReport, SymmetricSum
from ..budget import Budget
from ..errors import InfeasibleBudget, ShapeMismatch, UnsupportedFeature, UsageError
from ..units import format_bytes
from .denominators import OrbitalDenominator
from .solver import real_amplitude
from .triples_text import (FACTORED_FILES, STACKED, SYMMETRIC_FILES, SYMMETRIC_GROUP,
                           TRIPLES_FILES, checked_kind, factored_equations, factored_text,
                           stacked_extents, symmetric_equations, symmetric_text,
                           triples_equations, triples_text)

__all__ = ["triples_text", "triples_equations", "triples_evaluator", "triples_tensors",
           "ccsd_t_energy", "TriplesResult", "TRIPLES_FILES", "FACTORED_FILES",
           "factored_text", "factored_equations", "SYMMETRIC_FILES", "SYMMETRIC_GROUP",
           "symmetric_text", "symmetric_equations", "FORMS"]

@dataclass(frozen=True)
class TriplesResult:
    """The (T) energy and what its evaluation held: ``report`` the dry run (predicted
    peak), ``meter`` the run's (metered peak), ``budget_bytes`` the budget it was planned
    under (program reserve included; None: unbatched)."""

    e_t: float
    report: Any
    meter: Any
    budget_bytes: float | None


#: The forms of the (T) energy ``triples_evaluator`` can be asked for (None: chosen).
FORMS = ("symmetric", "factored", "products")


def triples_evaluator(ints: Any, budget: Any = None, max_memory: float | None = None,
                      kind: str = "closed-shell", form: str | None = None):
    """The (T) energy's evaluator at the extents of ``ints``, under ``budget`` (bytes, text
    or a share of the form's unbatched peak) or, without one, ``max_memory`` (MB,
    PySCF's).

    Closed shell and spin orbitals (by default, or ``form="symmetric"``): the symmetric
    form (:func:`symmetric_text`), summed over the ordered tuples of virtual blocks only
    (:class:`~sequant_eval.api.symmetric.SymmetricSum`, PySCF's a ≥ b ≥ c on blocks), its
    blocks as large as the budget (or ``max_memory``) and
    :data:`~sequant_eval.api.symmetric.TUPLE_BYTES` allow, one tuple per CPU at a time
    (the budget shared out between them); a share is of its one-block peak.
    Unrestricted, or ``form=None`` for a kind without a symmetric form: where the
    factored form (:func:`factored_text`: the triples made whole once, then one product)
    fits, that is evaluated, unbudgeted (or within ``max_memory``) whole, under a budget
    with its stages batched as far as they need; otherwise the products
    (:func:`triples_text`), batched so the o³v³ values are never whole, a share being of
    the products' unbatched peak. ``form`` (``FORMS``) asks for one."""
    if form is not None and form not in FORMS:
        raise UsageError(f"form {form!r} is not a form of the (T) energy; give one of "
                         f"{', '.join(FORMS)}, or None to have it chosen")
    if form == "factored" and kind not in FACTORED_FILES:
        raise UnsupportedFeature(f"no factored (T) energy for {kind!r} orbitals; the kinds "
                                 f"with one are {', '.join(FACTORED_FILES)}")
    if form == "symmetric" and kind not in SYMMETRIC_FILES:
        raise UnsupportedFeature(f"no symmetric (T) energy for {kind!r} orbitals; the kinds "
                                 f"with one are {', '.join(SYMMETRIC_FILES)}")
    extents = dict(ints.extents)
    chosen = Budget.parse(budget)
    if _symmetric(kind, form):
        if chosen.unlimited and max_memory is not None:
            chosen = Budget.megabytes(max_memory)
        return _symmetric_sum(kind, tuple(stacked_extents(extents).items()), chosen,
                              _cores())
    eqs = triples_equations(kind)

    def products(limit: Budget) -> Evaluator:
        return Evaluator(eqs, extents, budget=limit, share_subproducts=True)

    if form == "factored":
        room = products(chosen).policy.budget_bytes if chosen.share is not None else chosen
        return Evaluator(factored_equations(kind), extents, budget=room)
    if form is None and kind in FACTORED_FILES:
        return _chosen_form(kind, extents, chosen, max_memory, products)
    ev = products(chosen)
    if chosen.unlimited and max_memory is not None:
        cap = Budget.megabytes(max_memory)
        if not cap.unlimited and ev.analyze().peak_bytes > cap.fixed:
            return products(cap)                    # over max_memory: batched within it
    return ev


def _symmetric(kind: str, form: str | None) -> bool:
    """Whether ``form`` (None: chosen) of the (T) energy of ``kind`` is the symmetric one."""
    return form == "symmetric" or (form is None and kind in SYMMETRIC_FILES)


@lru_cache(maxsize=8)
def _symmetric_sum(kind: str, extents: tuple, budget: Budget, workers: int) -> SymmetricSum:
    """The symmetric form's evaluator, made once per extents, budget and workers in a
    process (its block search, kinds and programs; a second (T) step plans nothing)."""
    return SymmetricSum(symmetric_equations(kind), dict(extents), SYMMETRIC_GROUP,
                        budget=budget, workers=workers)


def _cores() -> int:
    """The CPUs this process may run on (the symmetric form's tuple workers)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                          # not on Linux
        return max(1, os.cpu_count() or 1)


def _chosen_form(kind: str, extents: dict, chosen: Budget, max_memory, products):
    """The factored form where it fits (whole when unbudgeted), else the products under
    the same budget; a budget neither fits is refused naming the smaller minimum."""
    batched = None
    if chosen.unlimited:
        whole = Evaluator(factored_equations(kind), extents)
        cap = Budget.megabytes(max_memory) if max_memory is not None else chosen
        if cap.unlimited or whole.analyze().peak_bytes <= cap.fixed:
            return whole
        chosen = cap                                # over max_memory: batched within it
    elif chosen.share is not None:                  # a share of the products' peak
        batched = products(chosen)
    room = batched.policy.budget_bytes if batched is not None else chosen.fixed
    try:
        staged = Evaluator(factored_equations(kind), extents, budget=room)
        staged.analyze()                            # every stage planned: it fits
        return staged
    except InfeasibleBudget as err:                 # what its stages hold does not fit
        factored = err
    batched = batched if batched is not None else products(chosen)
    try:
        batched.analyze()                           # planned now: refused before any work
    except InfeasibleBudget as err:
        refused, floor = err, batched.program_reserve()     # no products plan is less

        def least() -> float:
            got = factored.minimum
            return got if got <= floor else min(got, refused.minimum)
        raise InfeasibleBudget(
            f"budget {format_bytes(room)} ({int(room)} B) fits neither form of the (T) "
            f"energy: the factored one (the triples whole, in stages) nor the batched "
            f"products ({err}); the smallest feasible budget of the two is "
            f"InfeasibleBudget.minimum (searched when read)", room, least) from err
    return batched


#: The amplitude blocks of each kind: name and the spaces of PySCF's layout
#: (``t2ab[i, J, a, B]``); the evaluator reads each transposed, virtuals first.
_AMPLITUDES = {
    "closed-shell": (("t1", "ia"), ("t2", "iiaa")),
    "spin-orbital": (("t1", "ia"), ("t2", "iiaa")),
    "unrestricted": (("t1a", "ia"), ("t1b", "IA"), ("t2aa", "iiaa"), ("t2ab", "iIaA"),
                     ("t2bb", "IIAA")),
}
_VIRTUALS_FIRST = {2: (1, 0), 4: (2, 3, 0, 1)}


def triples_tensors(ints: Any, t1: Any, t2: Any, kind: str = "closed-shell",
                    form: str | None = None) -> dict[str, Any]:
    """What the (T) energy reads: the integral blocks of ``ints``, the denominator made
    from the Fock diagonal (canonical orbitals) and the amplitudes in PySCF's layouts as
    blocks: ``t1[i, a]``, ``t2[i, j, a, b]``, unrestricted ``t1 = (t1a, t1b)``, ``t2 =
    (t2aa, t2ab, t2bb)`` with ``t2ab[i, J, a, B]`` (PySCF ``UCCSD``'s); for the symmetric
    ``form`` (the default of the kinds that have one), its stacked operands too
    (:data:`~sequant_eval.chem.triples_text.STACKED`, made here, before any evaluation)."""
    blocks = _AMPLITUDES[checked_kind(kind)]
    takes = ("the unrestricted (T) takes t1 = (t1a, t1b) and t2 = (t2aa, t2ab, t2bb), PySCF "
             "UCCSD's tuples; got ")
    if kind == "unrestricted" and not all(isinstance(t, (tuple, list)) for t in (t1, t2)):
        raise ShapeMismatch(takes + "arrays")
    given = (tuple(t1) + tuple(t2)) if kind == "unrestricted" else (t1, t2)
    if len(given) != len(blocks):
        raise ShapeMismatch(takes + f"{len(given)} arrays")
    out = dict(ints.tensors())
    spaces = sorted({s for _, layout in blocks for s in layout})
    for (name, layout), value in zip(blocks, given):
        real_amplitude(f"(T) amplitude {name}", value)
        shape = tuple(ints.extents[s] for s in layout)
        if np.shape(value) != shape:
            raise ShapeMismatch(f"(T) needs {name} of shape {shape} (PySCF's layout, "
                                f"{name}[{', '.join(layout)}]); got {np.shape(value)}")
        axes = _VIRTUALS_FIRST[len(layout)]
        out[name] = {tuple(layout[k] for k in axes):
                     np.ascontiguousarray(np.asarray(value).transpose(axes))}
    energies = {s: np.diag(np.asarray(ints.fock((s, s)))) if hasattr(ints, "fock")
                else ints.fock_diagonal(s) for s in spaces}
    denominator = OrbitalDenominator(energies, occupied=[s for s in spaces if s in "iI"])
    names = {"D3"} if kind != "unrestricted" else {   # one per spin block
        t.name for p in triples_equations(kind)[0].terms for t in p.factors
        if t.name.startswith("D3")}
    for name in names:
        out[name] = denominator
    if _symmetric(kind, form) and kind in STACKED:
        out.update(_stacked(out, STACKED[kind]))
    return out


def _stacked(tensors: dict[str, Any], spec: dict) -> dict[str, Any]:
    """The stacked operands ``spec`` describes (``STACKED``), made from ``tensors``: each
    part its tensor's block transposed and signed, the parts concatenated along ``x`` or
    stacked as the slices of ``y``."""
    out = {}
    for name, (spaces, parts) in spec.items():
        pieces = []
        for tensor, block, subscripts, sign in parts:
            source = tensors[tensor]
            read = source[block] if isinstance(source, dict) else source(block)
            piece = np.einsum(subscripts, np.asarray(read))
            pieces.append(-piece if sign < 0 else piece)
        if "x" in spaces:
            value = np.concatenate(pieces, axis=spaces.index("x"))
        else:
            value = np.stack(pieces, axis=spaces.index("y"))
        out[name] = {spaces: np.ascontiguousarray(value)}
    return out


def ccsd_t_energy(ints: Any, t1: Any, t2: Any, budget: Any = None,
                  max_memory: float | None = None, backend: str = "numpy",
                  kind: str = "closed-shell", form: str | None = None) -> TriplesResult:
    """E(T) of CCSD amplitudes ``t1``, ``t2`` in PySCF's layouts (:func:`triples_tensors`)
    with the integral blocks ``ints`` of ``kind``: a
    :class:`~sequant_eval.chem.closed_shell.ClosedShellIntegrals`, spin-orbital ones
    (``g = <pq||rs>``) or :class:`~sequant_eval.chem.unrestricted_integrals.
    UnrestrictedIntegrals`; canonical orbitals, under ``budget`` or ``max_memory``, in
    the ``form`` asked for or chosen (:func:`triples_evaluator`)."""
    tensors = triples_tensors(ints, t1, t2, kind, form)
    try:
        ev = triples_evaluator(ints, budget, max_memory, kind, form)
        report = ev.analyze()
    except InfeasibleBudget as err:
        if not Budget.parse(budget).unlimited or max_memory is None:
            raise
        need = err.minimum                  # the way out names a max_memory that is enough
        raise InfeasibleBudget(
            f"max_memory {max_memory:g} MB (no budget given) is too small for the (T) "
            f"energy: {err} Raise max_memory to at least {-(-need // 1e4) / 100:g} MB, or "
            f"give a budget", err.budget, need) from err
    out, meter = ev.evaluate(tensors, backend=backend, return_meter=True)
    if isinstance(report, (StagedReport, SymmetricReport)):   # in stages, or by tuples
        budget_bytes = report.budget_bytes
    else:
        budget_bytes = None if ev.policy is None else ev.policy.budget
    return TriplesResult(float(out["ET"]), report, meter, budget_bytes)
