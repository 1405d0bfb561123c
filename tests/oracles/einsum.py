"""numpy.einsum strings as the package's text, and the checks that compare the two.

``einsum_text("aab,bc->ac")`` is ``E{a,c} = T0{a,a,b} * T1{b,c}``: every letter is an index
of its own space (named by the letter), factor ``k`` is tensor ``Tk``, an explicit output
names the result ``E`` (a scalar ``E`` for ``->``), and an implicit one (no ``->``) is a
bare expression, whose result is its free indices sorted, which is NumPy's implicit output.
The oracle is ``numpy.einsum`` on the same arrays.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

import sequant_eval as se
from sequant_eval.plan import BatchPolicy
from sequant_eval.runtime import TensorSource

__all__ = ["einsum_text", "einsum_arrays", "features", "check_unbatched", "batched_evaluator",
           "check_batched"]


def einsum_text(subscripts: str) -> str:
    """The package's text for an einsum string (ellipsis not supported)."""
    inputs, arrow, output = subscripts.partition("->")
    body = " * ".join(f"T{k}{{{','.join(f)}}}" for k, f in enumerate(inputs.split(",")))
    if not arrow:
        return body
    return (f"E{{{','.join(output)}}} = " if output else "E = ") + body


def einsum_arrays(subscripts: str, sizes: dict[str, int], seed: int = 0) -> dict:
    """Random operands ``T0, T1, ...`` for ``subscripts`` at ``sizes`` (one per letter)."""
    rng = np.random.default_rng(seed)
    inputs = subscripts.partition("->")[0].split(",")
    return {f"T{k}": rng.standard_normal(tuple(sizes[c] for c in f))
            for k, f in enumerate(inputs)}


def features(subscripts: str) -> set[str]:
    """What the expression exercises: ``diagonal`` (a letter twice in one operand, kept),
    ``trace`` (a letter twice in one operand, summed), ``single`` (a letter in one operand
    only, once, summed), ``hyperedge`` (a letter in three operands or more), ``batch`` (a
    letter in two operands or more and in the output)."""
    inputs, arrow, output = subscripts.partition("->")
    factors = inputs.split(",")
    if not arrow:
        counts = Counter("".join(factors))
        output = "".join(sorted(c for c, n in counts.items() if n == 1))
    per_factor = Counter(c for f in factors for c in set(f))
    out = set()
    for f in factors:
        for c, n in Counter(f).items():
            if n > 1:
                out.add("diagonal" if c in output else "trace")
    for c, n in per_factor.items():
        if n == 1 and c not in output and all(f.count(c) < 2 for f in factors):
            out.add("single")
        if n >= 3:
            out.add("hyperedge")
        if n >= 2 and c in output:
            out.add("batch")
    return out


def _close(got, ref) -> None:
    got = np.asarray(got)
    assert got.shape == np.shape(ref)
    scale = max(1.0, float(np.abs(ref).max()) if np.size(ref) else 1.0)
    assert float(np.abs(got - ref).max(initial=0.0)) <= 1e-12 * scale


def check_unbatched(subscripts: str, sizes: dict[str, int], seed: int = 0) -> None:
    """The package's unbatched result equals numpy.einsum's (1e-12 of the largest entry)."""
    arrays = einsum_arrays(subscripts, sizes, seed)
    ref = np.einsum(subscripts, *arrays.values())
    used = {c: sizes[c] for c in subscripts if c not in ",->"}
    (out,) = se.evaluate(einsum_text(subscripts), arrays, used).values()
    _close(out, ref)


def _policy(extents: dict, budget: float) -> BatchPolicy:
    # blocks of one element (forests of a few hundred bytes: the program is not charged)
    return BatchPolicy.everything(budget, extents, block={s: 1 for s in extents},
                                  program=False)


def batched_evaluator(text: str, extents: dict[str, int], position: float = 0.0):
    """An Evaluator at a budget ``position`` of the way from the smallest the planner meets
    (blocks of one element) to the unbatched peak, the program not charged."""
    try:
        se.Evaluator(text, extents, policy=_policy(extents, 1)).batched
        low = 1.0
    except se.InfeasibleBudget as err:
        low = err.minimum
    top = se.Evaluator(text, extents).analyze().peak_bytes
    budget = low + position * max(0.0, top - low)
    return se.Evaluator(text, extents, policy=_policy(extents, budget))


def check_batched(subscripts: str, sizes: dict[str, int], seed: int = 0,
                  position: float = 0.0) -> bool:
    """At a budget ``position`` of the way from the smallest the planner meets to the
    unbatched peak: the result equals numpy.einsum's, the NumPy meter and the dry run equal
    the prediction to the byte, within the budget. True when the plan has a batch loop
    (False: nothing to batch, the smallest plan is the unbatched one)."""
    extents = {c: sizes[c] for c in subscripts if c not in ",->"}
    if not extents:                 # scalars only: nothing to batch
        check_unbatched(subscripts, sizes, seed)
        return False
    arrays = einsum_arrays(subscripts, sizes, seed)
    ref = np.einsum(subscripts, *arrays.values())
    ev = batched_evaluator(einsum_text(subscripts), extents, position)
    budget = ev.policy.budget_bytes
    program = ev.batched
    a = program.analysis
    out, meter = program.run("numpy", TensorSource(ev.forest, arrays, extents))
    _, dry = program.run("dryrun")
    assert meter.peak_bytes == dry.peak_bytes == a.peak_bytes <= budget
    (got,) = out.values()
    _close(got, ref)
    return bool(a.rich.loops)
