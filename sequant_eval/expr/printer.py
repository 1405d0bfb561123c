"""Print the expression IR back as SeQuant text; ``parse(print(x))`` gives ``x`` again."""
from __future__ import annotations

from fractions import Fraction
from collections.abc import Iterable

__all__ = ["format_tensor", "format_operator", "format_product", "format_equation", "to_text"]


def _indices(indices: Iterable[object]) -> str:
    return ",".join(str(ix) for ix in indices)


def format_tensor(t) -> str:
    """``Name{bra;ket[;aux]}[:symmetry]``, as the parser reads it."""
    body = f"{_indices(t.bra)};{_indices(t.ket)}"
    if t.aux:
        body += f";{_indices(t.aux)}"
    tag = f":{t.symmetry}" if t.symmetry else ""
    return f"{t.name}{{{body}}}{tag}"


def format_operator(op) -> str:
    """``P{x,y}`` (pair transposition) or ``A{bra;ket}`` (antisymmetrizer)."""
    if op.kind == "P":
        return f"P{{{_indices(op.bra)}}}"
    return f"A{{{_indices(op.bra)};{_indices(op.ket)}}}"


def format_coefficient(c: Fraction) -> str:
    """An exact rational as ``n`` or ``n/d`` (sign printed by the caller)."""
    return str(c.numerator) if c.denominator == 1 else f"{c.numerator}/{c.denominator}"


def format_product(p, *, leading: bool = True) -> str:
    """A product with its sign; ``leading`` prints ``-`` attached, else as `` - ``."""
    factors = [format_operator(o) for o in p.operators] + [format_tensor(t) for t in p.factors]
    magnitude = abs(p.coefficient)
    body = " * ".join(factors)
    if magnitude != 1 or not factors:
        body = f"{format_coefficient(magnitude)} {body}".rstrip()
    if p.coefficient < 0:
        return f"-{body}" if leading else f"- {body}"
    return body if leading else f"+ {body}"


def format_expression(terms, *, sep: str = " ") -> str:
    """A sum of products, terms joined by ``sep`` with their signs; ``0`` when empty."""
    if not terms:
        return "0"
    out = [format_product(terms[0])]
    out += [format_product(t, leading=False) for t in terms[1:]]
    return sep.join(out)


def format_equation(eq, *, one_term_per_line: bool = False, indent: str = "  ") -> str:
    """``lhs = rhs``; with ``one_term_per_line`` each further term starts a line after
    ``indent``."""
    sep = "\n" + indent if one_term_per_line else " "
    rhs = format_expression(eq.terms, sep=sep)
    if eq.bare:
        return rhs
    lhs = format_tensor(eq.result) if eq.result is not None else eq.name
    return f"{lhs} = {rhs}"


def to_text(equations, *, one_term_per_line: bool = False, indent: str = "  ") -> str:
    """Several equations, one per logical line (continuation lines start with + or -)."""
    return "\n".join(format_equation(e, one_term_per_line=one_term_per_line, indent=indent)
                     for e in equations) + "\n"
