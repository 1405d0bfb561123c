"""Equations that read other equations' results, cut into stages."""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import ExpressionError, InputTypeError
from .parser import parse
from .terms import Equation, check_unique_results

__all__ = ["equation_stages", "as_equations"]


def equation_stages(equations: Sequence[Equation]) -> tuple[tuple[Equation, ...], ...]:
    """The equations in stages: each after every equation whose result it reads (by
    tensor name), in the given order within a stage. A cycle is refused."""
    by_name = {eq.name: eq for eq in equations}
    reads = {eq.name: sorted({t.name for p in eq.terms for t in p.factors} & by_name.keys())
             for eq in equations}
    level: dict[str, int] = {}

    def depth(name: str, path: tuple[str, ...]) -> int:
        if name in path:
            cycle = " -> ".join(path[path.index(name):] + (name,))
            raise ExpressionError(f"equations read each other's results in a cycle ({cycle}); "
                                  f"an equation may read only results that do not read it")
        if name not in level:
            level[name] = 1 + max((depth(r, path + (name,)) for r in reads[name]), default=-1)
        return level[name]

    for eq in equations:
        depth(eq.name, ())
    count = 1 + max(level.values(), default=-1)
    return tuple(tuple(eq for eq in equations if level[eq.name] == s) for s in range(count))


def as_equations(eqs: str | Equation | Sequence[Equation]) -> tuple[Equation, ...]:
    """Equations from text, one Equation or a sequence of them (names checked unique)."""
    if isinstance(eqs, str):
        return tuple(parse(eqs))
    if isinstance(eqs, (bytes, bytearray)):
        raise InputTypeError("equations given as bytes; decode them to text first "
                             "(eqs.decode('utf-8')) or read the file in text mode")
    if isinstance(eqs, Equation):
        return (eqs,)
    if not isinstance(eqs, Sequence) and not hasattr(eqs, "__iter__"):
        raise InputTypeError(f"equations must be text, an Equation or a sequence of them, got "
                             f"{type(eqs).__name__}")
    out = tuple(eqs)
    for e in out:
        if not isinstance(e, Equation):
            raise InputTypeError(f"expected Equation objects (from se.parse), got "
                                 f"{type(e).__name__}")
    check_unique_results(out)
    return out
