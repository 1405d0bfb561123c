"""Parse SeQuant text into equations, reporting the line and column of every error.

Grammar (one equation per logical line; a physical line whose first non-blank character is
``+`` or ``-`` continues the previous one; ``#`` starts a comment)::

    equation := [ lhs ("=" | "<-") ] sum
    lhs      := tensor | NAME
    sum      := ["+" | "-"] product (("+" | "-") product)*
    product  := factor ("*"? factor)*
    factor   := number | tensor | "A{" indices ";" indices "}" | "P{" index "," index "}"
    tensor   := NAME "{" indices (";" indices){0,2} "}" [":" SYMMETRY]
    index    := SPACE ["_"] DIGITS ["<" index ("," index)* ">"]
    number   := DIGITS ["." DIGITS] [("e"|"E") ["+"|"-"] DIGITS] ["/" DIGITS]

A product means what NumPy's ``einsum`` means: an index named twice in one factor reads the
factor's diagonal (``T{a,a,b}``); with a named result, an index in no result slot is summed,
also where it labels one slot only (``R{a} = T{a,b}``); a result names each index once, and
``A``/``P`` naming an index twice is a tensor, not an operator.

Columns count Unicode code points from 1 (a combining tilde is its own code point).
Digits are ASCII ``0-9`` (``²`` or ``٣`` are refused, not read as numbers). A number has at
most ``MAX_DIGITS`` digits and a decimal exponent within ``±MAX_EXPONENT``, and every term's
coefficient must be a finite, non-underflowing float64: it is exact here but evaluated in
floating point.
"""
from __future__ import annotations

import re
import unicodedata
from fractions import Fraction
from typing import NamedTuple

from ..errors import InputTypeError, ParseError
from .index import Index
from .terms import Equation, Operator, Product, Tensor, free_indices, index_counts

__all__ = ["parse", "MAX_DIGITS", "MAX_EXPONENT"]

#: Longest digit string a number or an index number may have (the printer writes exact
#: rationals, so a float64-sized coefficient such as 1e-300 prints with about 300 digits).
MAX_DIGITS = 1000
#: Largest decimal exponent a number may carry (float64 spans about 1e-308 .. 1.8e308).
MAX_EXPONENT = 400

_ASCII_NAME = re.compile(r"[A-Za-z0-9_]*")
_NUMBER = re.compile(r"([0-9]+)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?")
_SYMMETRY = re.compile(r"([ASN])-([SCN])-([SN])")
_INDEX = re.compile(r"((?:[^\W\d_]|[\u0300-\u036f])+)_?([0-9]+)?$")
_PUNCT = {"{": "{", "}": "}", ";": ";", ",": ",", ">": ">", "*": "*", "+": "+",
          "-": "-", "/": "/", "=": "="}


class _Token(NamedTuple):
    """One token (a tuple: a text has thousands, made faster than a frozen dataclass)."""

    kind: str   # NAME, NUMBER, SYM, ARROW, NL, EOF, or a punctuation character
    text: str
    line: int
    column: int


def _is_ascii_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def _is_name_char(ch: str) -> bool:
    if ch.isascii():                # letters, digits and _: the common case, no table look-up
        return ch.isalnum() or ch == "_"
    return unicodedata.category(ch)[0] in "LM"


def _describe(ch: str) -> str:
    """``'²' (SUPERSCRIPT TWO, U+00B2)``: the character, its Unicode name and code point."""
    name = unicodedata.name(ch, "")
    return f"{ch!r} ({name + ', ' if name else ''}U+{ord(ch):04X})"


def _unexpected(ch: str) -> str:
    if ch.isdigit() or ch.isnumeric():
        return (f"unexpected character {_describe(ch)}: numbers and index numbers are ASCII "
                f"digits 0-9 (write i_2, not i²)")
    if not ch.isascii():
        return (f"unexpected character {_describe(ch)}: only letters (any script), combining "
                f"marks, ASCII digits and the punctuation {{ }} ; , < > * + - / = : # may appear")
    return f"unexpected character {ch!r}"


class _Lexer:
    def __init__(self, text: str) -> None:
        self.lines = text.splitlines() or [""]

    def tokens(self) -> list[_Token]:
        out: list[_Token] = []
        last = (1, 1)  # where the previous non-blank line ends
        for n, line in enumerate(self.lines, start=1):
            code = line.split("#", 1)[0]
            stripped = code.strip()
            if not stripped:
                continue
            if out and stripped[0] not in "+-":
                out.append(_Token("NL", "", *last))
            out.extend(self._line(line, n))
            last = (n, len(code.rstrip()) + 1)
        out.append(_Token("EOF", "", *last))
        return out

    def _line(self, line: str, n: int) -> list[_Token]:
        out, k = [], 0
        while k < len(line):
            ch = line[k]
            col = k + 1
            if ch == "#":
                break
            if ch.isspace():
                k += 1
            elif ch in _PUNCT:                        # not name characters: asked first
                out.append(_Token(ch, ch, n, col))
                k += 1
            elif _is_ascii_digit(ch):
                m = _NUMBER.match(line, k)
                out.append(_Token("NUMBER", m.group(), n, col))
                k = m.end()
            elif _is_name_char(ch):
                j = _ASCII_NAME.match(line, k).end()     # the common case, then the rest
                while j < len(line) and _is_name_char(line[j]):
                    j += 1
                out.append(_Token("NAME", line[k:j], n, col))
                k = j
            elif ch == ":":
                m = _SYMMETRY.match(line, k + 1)
                if not m:
                    raise ParseError("symmetry tag must be X-Y-Z with X in A,S,N; Y in S,C,N; "
                                     "Z in S,N", n, col + 1, line)
                out.append(_Token("SYM", m.group(), n, col))
                k = m.end()
            elif ch == "<":
                if line.startswith("<-", k):
                    out.append(_Token("ARROW", "<-", n, col))
                    k += 2
                else:
                    out.append(_Token("<", "<", n, col))
                    k += 1
            else:
                raise ParseError(_unexpected(ch), n, col, line)
        return out


class _Parser:
    def __init__(self, text: str, default_name: str) -> None:
        lexer = _Lexer(text)
        self.lines = lexer.lines
        self.toks = lexer.tokens()
        self.k = 0
        self.default_name = default_name

    # -- token helpers ---------------------------------------------------------------------
    @property
    def tok(self) -> _Token:
        return self.toks[self.k]

    def error(self, message: str, tok: _Token | None = None) -> ParseError:
        tok = tok or self.tok
        text = self.lines[tok.line - 1] if tok.line <= len(self.lines) else ""
        shown = tok.text if len(tok.text) <= 40 else tok.text[:37] + "..."
        what = "end of input" if tok.kind == "EOF" else (
            "end of line" if tok.kind == "NL" else repr(shown))
        return ParseError(f"{message}, found {what}", tok.line, tok.column, text)

    def take(self, kind: str, what: str) -> _Token:
        if self.tok.kind != kind:
            raise self.error(f"expected {what}")
        tok = self.tok
        self.k += 1
        return tok

    def accept(self, kind: str) -> bool:
        if self.tok.kind == kind:
            self.k += 1
            return True
        return False

    # -- grammar -----------------------------------------------------------------------------
    def equations(self) -> list[Equation]:
        out: list[Equation] = []
        seen: dict[str, int] = {}     # result name → line of its equation
        while self.tok.kind != "EOF":
            start = self.tok
            eq = self.equation(len(out))
            if eq.name in seen:
                raise ParseError(f"result {eq.name} is already defined by the equation on line "
                                 f"{seen[eq.name]}; write its terms into one equation (continue "
                                 f"a line with '+' or '-') or rename one result",
                                 start.line, start.column, self.lines[start.line - 1])
            seen[eq.name] = start.line
            out.append(eq)
            if self.tok.kind not in ("NL", "EOF"):
                raise self.error("expected '+', '-', '*' or a factor")
            self.accept("NL")
        return out

    def equation(self, ordinal: int) -> Equation:
        start = self.tok
        result, name = None, None
        if self._lhs_ahead():
            if self.toks[self.k + 1].kind == "{":
                tok = self.tok
                result = self._check_slots(tok, self.tensor())
                name = result.name
            else:
                name = self.take("NAME", "a result name").text
            self.k += 1  # '=' or '<-'
        terms = self.sum()
        if name is None:
            name = self.default_name if ordinal == 0 else f"{self.default_name}{ordinal + 1}"
            eq = Equation(name, terms, None, bare=True)
        else:
            eq = Equation(name, terms, result)
        self._check(eq, start)
        return eq

    def _lhs_ahead(self) -> bool:
        j = self.k
        if self.toks[j].kind != "NAME":
            return False
        j += 1
        if self.toks[j].kind == "{":
            depth = 0
            while self.toks[j].kind not in ("NL", "EOF"):
                depth += {"{": 1, "}": -1}.get(self.toks[j].kind, 0)
                j += 1
                if depth == 0:
                    break
            if self.toks[j].kind == "SYM":
                j += 1
        return self.toks[j].kind in ("=", "ARROW")

    def sum(self) -> tuple[Product, ...]:
        terms = []
        self.term_tokens: list[_Token] = []
        sign = -1 if self.tok.kind == "-" else 1
        self.accept("+") or self.accept("-")
        self.term_tokens.append(self.tok)
        terms.append(self.product(sign))
        while self.tok.kind in ("+", "-"):
            sign = -1 if self.take(self.tok.kind, "a sign").kind == "-" else 1
            self.term_tokens.append(self.tok)
            terms.append(self.product(sign))
        return tuple(terms)

    def product(self, sign: int) -> Product:
        coefficient = Fraction(sign)
        factors: list[Tensor] = []
        operators: list[Operator] = []
        candidates: list[tuple[_Token, Tensor]] = []   # A{..} / P{..}: operators or tensors
        first_number: _Token | None = None
        while True:
            if self.tok.kind == "NUMBER":
                first_number = first_number or self.tok
                coefficient *= self.number()
            elif self.tok.kind == "NAME":
                tok = self.tok
                item = self.tensor()
                if item.name in ("A", "P") and not item.symmetry and _distinct(item):
                    candidates.append((tok, item))
                else:
                    factors.append(item)
            else:
                raise self.error("expected a number or a tensor")
            if self.accept("*"):
                continue
            if self.tok.kind not in ("NUMBER", "NAME"):
                break
        # A and P are operators on a product of other tensors; alone they are tensors
        # (the fixture ``A{;i_3} * A{;i_4}`` multiplies two tensors named A)
        if factors:
            operators = [self._operator(tok, t) for tok, t in candidates]
        else:
            factors = [t for _, t in candidates]
        if first_number is not None:
            self._check_float(coefficient, first_number)
        product = Product(coefficient, tuple(factors), tuple(operators))
        return product

    def _check_float(self, value: Fraction, tok: _Token) -> None:
        """The exact coefficient is evaluated as float64: refuse overflow and underflow."""
        try:
            as_float = float(value)
        except OverflowError:
            as_float = float("inf")
        if as_float in (float("inf"), float("-inf")) or (value != 0 and as_float == 0.0):
            what = "overflows" if as_float else "underflows to 0 in"
            raise ParseError(f"coefficient {_magnitude(value)} {what} float64 (magnitude about "
                             f"1e-308 .. 1.8e308); rescale the tensors instead", tok.line,
                             tok.column, self.lines[tok.line - 1])

    def _exact(self, tok: _Token) -> Fraction:
        """A NUMBER token as an exact rational, refusing digit strings and exponents that
        would take unbounded time (``1e100000000`` is a 100-million-digit integer)."""
        m = _NUMBER.fullmatch(tok.text)
        whole, frac, exp = m.group(1), m.group(2) or "", m.group(3)
        if len(whole) + len(frac) > MAX_DIGITS:
            raise self.error(f"a number has at most {MAX_DIGITS} digits; write it with an "
                             f"exponent (1.5e70)", tok)
        if exp is not None and (len(exp.lstrip("+-")) > 6 or abs(int(exp)) > MAX_EXPONENT):
            raise self.error(f"exponent out of range: a coefficient's exponent must be within "
                             f"±{MAX_EXPONENT} (float64 spans about 1e-308 .. 1.8e308)", tok)
        return Fraction(tok.text)

    def number(self) -> Fraction:
        tok = self.take("NUMBER", "a number")
        value = self._exact(tok)
        if self.accept("/"):
            den_tok = self.take("NUMBER", "a denominator")
            den = self._exact(den_tok)
            if den == 0:
                raise self.error("division by zero", den_tok)
            value /= den
        return value

    def tensor(self) -> Tensor:
        name_tok = self.take("NAME", "a tensor name")
        if not (name_tok.text[0].isalpha()):
            raise self.error("a tensor name must start with a letter", name_tok)
        self.take("{", "'{' after the tensor name")
        groups: list[list[Index]] = [self.index_list()]
        while self.accept(";"):
            if len(groups) == 3:
                raise self.error("a tensor has at most three index groups (bra;ket;aux)",
                                 self.toks[self.k - 1])
            groups.append(self.index_list())
        self.take("}", "',', ';' or '}'")
        symmetry = self.tok.text if self.tok.kind == "SYM" else None
        if symmetry:
            self.k += 1
        groups += [[] for _ in range(3 - len(groups))]
        return Tensor(name_tok.text, *(tuple(g) for g in groups), symmetry)

    def _check_slots(self, tok: _Token, tensor: Tensor) -> Tensor:
        """A result tensor names each index once (a factor may repeat one: a diagonal)."""
        seen = set()
        for ix in tensor.slots:
            if ix in seen:
                raise self.error(f"index {ix} labels two slots of result {tensor.name} (a "
                                 f"result has one axis per index; a factor may repeat an "
                                 f"index, which reads its diagonal)", tok)
            seen.add(ix)
        return tensor

    def _operator(self, tok: _Token, t: Tensor) -> Operator:
        if t.name == "P":
            if len(t.bra) != 2 or t.ket or t.aux:
                raise self.error("P takes exactly two indices: P{x,y}", tok)
            return Operator("P", t.bra)
        if t.aux:
            raise self.error("A takes two index groups: A{bra;ket}", tok)
        return Operator("A", t.bra, t.ket)

    def index_list(self) -> list[Index]:
        if self.tok.kind in (";", "}"):
            return []
        out = [self.index()]
        while self.accept(","):
            out.append(self.index())
        return out

    def index(self, nested: bool = False) -> Index:
        tok = self.take("NAME", "an index such as i_1")
        m = _INDEX.match(tok.text)
        if not m:
            raise self.error("an index is a space name, optional '_', then digits", tok)
        protos: tuple[Index, ...] = ()
        if self.accept("<"):
            if nested:
                raise self.error("protos of a composite index must be plain indices",
                                 self.toks[self.k - 1])
            items = [self.index(nested=True)]
            while self.accept(","):
                items.append(self.index(nested=True))
            self.take(">", "',' or '>' closing the proto list")
            protos = tuple(items)
        if m.group(2) is not None and len(m.group(2)) > MAX_DIGITS:
            raise self.error(f"an index number has at most {MAX_DIGITS} digits", tok)
        number = int(m.group(2)) if m.group(2) is not None else None
        return Index(m.group(1), number, protos)

    # -- semantic checks ---------------------------------------------------------------------
    def _check(self, eq: Equation, start: _Token) -> None:
        expected = set(eq.indices)
        for p, tok in zip(eq.terms, self.term_tokens):
            if not p.factors:
                if expected:
                    raise self.error(f"a bare number cannot be a term of tensor result {eq.name}",
                                     tok)
                continue
            counts = index_counts(p)
            missing = expected - set(counts)
            if missing:
                raise self.error(f"term '{p}' of {eq.name} lacks result index "
                                 f"{min(missing)}", tok)
            # with a named result, an index not in it is summed, also where it labels one
            # slot only (a sum inside one factor, as in einsum's 'ij->i'); a bare
            # expression's result is its first term's free indices, and every term's
            free = set(free_indices(p))
            if eq.bare and free != expected:
                culprit = min(free ^ expected)
                raise self.error(f"term '{p}' of {eq.name} has free indices "
                                 f"{', '.join(map(str, sorted(free))) or 'none'}, the first "
                                 f"term {', '.join(map(str, sorted(expected))) or 'none'} "
                                 f"(differing in {culprit}); name the result "
                                 f"({eq.name}{{...}} = ...) to sum over an index", tok)
            for op in p.operators:
                for ix in op.indices:
                    if ix not in expected:
                        raise self.error(f"operator {op} acts on {ix}, which is not a result "
                                         f"index of {eq.name}", tok)


def _distinct(t: Tensor) -> bool:
    """No index twice: ``A{a_1,a_1}`` is not an antisymmetrizer but a tensor's diagonal."""
    return len(set(t.slots)) == len(t.slots)


def _magnitude(value: Fraction) -> str:
    """``about 1e+400``: the decimal order of an exact rational too large for a float."""
    if value == 0:
        return "0"
    digits = len(str(abs(value.numerator))) - len(str(value.denominator))
    return f"about {'-' if value < 0 else ''}1e{digits:+d}"


def parse(text: str, *, default_name: str = "R") -> list[Equation]:
    """Parse SeQuant text into equations.

    Bare expressions (no ``lhs =``) are named ``default_name``, ``default_name2``, ... and
    take their free indices, sorted, as result indices.
    """
    if not isinstance(text, str):
        hint = (" (decode it first: parse(data.decode('utf-8')))"
                if isinstance(text, (bytes, bytearray)) else "")
        raise InputTypeError(f"parse expects equation text as a str, got "
                             f"{type(text).__name__}{hint}")
    if not isinstance(default_name, str) or not default_name:
        raise InputTypeError(f"default_name must be a non-empty str, got {default_name!r}")
    return _Parser(text, default_name).equations()
