"""Exchange folding: closed-shell terms ``c·R·X{p,q;r,s} − c/2·R·X{p,q;s,r}`` as one term.

Spin-traced closed-shell equations are full of Coulomb/exchange pairs: two terms equal but
for one two-body factor whose ket indices are swapped, with coefficients ``c`` and
``−c/2``.  Their sum is ``c/2·R·U{p,q;r,s}`` with the derived tensor

    U{p,q;r,s} = 2 X{p,q;r,s} − X{p,q;s,r}

(``u2`` from ``t2``, the closed-shell "theta" amplitude; ``L`` from ``g``,
``2<pq|rs> − <pq|sr>``).  Each fold removes one contraction chain from the equations; the
caller supplies ``U`` beside ``X``.  Folding repeats until no pair is left, so a term with
two such factors (``g·t2·t2``) folds twice.  ``U`` keeps the particle symmetry of ``X``
and, when ``X`` is one of the real symmetric tensors, its bra/ket swap symmetry
(``U{r,s;p,q} = U{p,q;r,s}``), not the per-column one.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from fractions import Fraction

from ..memo import remembered
from .printer import to_text
from .spintrace import SpinTraceError, _amplitude_count, _canonical_factors, _factor_order
from .terms import Equation, Product, Tensor

__all__ = ["fold_exchange"]


def fold_exchange(equations: Equation | Sequence[Equation], folds: Mapping[str, str], *,
                  real: Collection[str] = ("f", "g")) -> tuple[Equation, ...]:
    """Equations with Coulomb/exchange pairs of the tensors in ``folds`` folded.

    Parameters
    ----------
    equations
        Operator-free spatial-orbital equations, e.g. from
        :func:`~sequant_eval.expr.spintrace.spin_trace`.
    folds
        ``{X: U}``: fold pairs of two-body ``X`` into ``U{p,q;r,s} = 2 X{p,q;r,s} −
        X{p,q;s,r}``, e.g. ``{"t2": "u2", "g": "L"}``.
    real
        Tensors with the per-column bra/ket symmetry of real orbitals (as in spin tracing).
    """
    if isinstance(equations, Equation):
        equations = (equations,)
    for x, u in folds.items():
        if u == x or u in folds or u in real:
            raise SpinTraceError(f"exchange fold {x} -> {u}: the folded tensor needs a new "
                                 "name, distinct from every tensor it is folded from")
    real_set = frozenset(real)
    hermitian = frozenset(u for x, u in folds.items() if x in real_set)
    key = (to_text(equations), tuple(sorted(folds.items())), tuple(sorted(real_set)))
    return remembered("fold_exchange", key, lambda: tuple(
        _fold_equation(eq, dict(folds), real_set, hermitian) for eq in equations))


def _fold_equation(eq: Equation, folds: dict[str, str], real: frozenset[str],
                   hermitian: frozenset[str]) -> Equation:
    externals = tuple(eq.indices)

    def canonical(factors):
        return _canonical_factors(factors, externals, real, hermitian)

    terms: dict[tuple, Fraction] = {}
    for p in eq.terms:
        if p.operators:
            raise SpinTraceError(f"{eq.name}: fold_exchange takes operator-free equations; "
                                 f"expand '{p}' first (spin_trace does)")
        key = canonical([(t.name, t.bra, t.ket) for t in p.factors])
        terms[key] = terms.get(key, Fraction(0)) + p.coefficient
    changed = True
    while changed:
        changed = False
        for key in sorted(terms, key=lambda k: [_factor_order(f) for f in k]):
            if key in terms and _fold_once(key, terms, folds, canonical):
                changed = True
    kept = sorted(((k, c) for k, c in terms.items() if c != 0),
                  key=lambda item: (_amplitude_count(item[0]), tuple(f[0] for f in item[0]),
                                    [_factor_order(f) for f in item[0]], item[1]))
    return Equation(eq.name, tuple(Product(c, tuple(Tensor(n, b, k) for n, b, k in key))
                                   for key, c in kept), eq.result, eq.bare)


def _fold_once(key: tuple, terms: dict, folds: dict[str, str], canonical) -> bool:
    """Fold ``key`` with its exchange partner on the first factor that has one."""
    c = terms[key]
    for k, (name, bra, ket) in enumerate(key):
        if name not in folds or len(ket) != 2:
            continue
        partner = canonical(key[:k] + ((name, bra, ket[::-1]),) + key[k + 1:])
        if partner == key or terms.get(partner) != -c / 2:
            continue
        del terms[key], terms[partner]
        folded = canonical(key[:k] + ((folds[name], bra, ket),) + key[k + 1:])
        terms[folded] = terms.get(folded, Fraction(0)) + c / 2
        return True
    return False
