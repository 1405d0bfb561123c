"""Derive spin-orbital CCSD equations with sympy and write them as SeQuant text.

What: the correlation energy ``E = <0|Hbar|0>`` and the residuals
``R1 = <Phi_i^a|Hbar|0>`` and ``R2 = <Phi_ij^ab|Hbar|0>`` of spin-orbital CCSD,
``Hbar = exp(-T) H_N exp(T)``, with the normal-ordered Hamiltonian
``H_N = f_pq {p+ q} + 1/4 <pq||rs> {p+ q+ s r}``, ``T1 = t_i^a {a+ i}`` and
``T2 = 1/4 t_ij^ab {a+ b+ j i}``.  The Fock matrix is not assumed diagonal.

Why: the evaluator is tested on real CC equations, and we want those equations
to be reproducible from first principles (Wick's theorem) rather than typed in.

How: because ``T`` contains only quasi-particle creators, the BCH series
collapses to its connected part, ``<P|Hbar|0> = <P|(H exp(T))_C|0>``.  For each
product ``T1^k T2^m / (k! m!)`` allowed by excitation rank we apply sympy's
``wicks`` to ``<P| H T1^k T2^m |0>`` and keep the terms in which every ``t``
shares a summed index with the Hamiltonian tensor.  Each term is then brought
to a canonical form (minimum over renamings of the dummy indices, with the
antisymmetric slot pairs of ``g`` and ``t2`` sorted), like terms are merged
with exact rational coefficients, and the result is built as expression IR
(``sequant_eval.expr``: Equation, Product, Tensor, Index) and printed deterministically
with the expression printer.

CCSDT (``data/ccsdt_so.txt``, :func:`derive_ccsdt_text`) is out of ``wicks``' reach and is
derived by the direct contraction engine of :mod:`sequant_eval.chem.wick` (which also
reproduces this module's CCSD text exactly), R2 and R3 as antisymmetrizer terms.

The closed-shell (``data/ccsd_cs.txt``, :func:`closed_shell_text`) and unrestricted
(``data/ccsd_u.txt``, :func:`unrestricted_text`) CCSD files are transforms of the
spin-orbital text: its spin trace (``expr/spintrace.py``) and its spin integration over α
and β orbitals (``expr/spin_integrate.py``).
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Sequence

import sympy
from sympy import Dummy, Mul, Pow, Rational, symbols
from sympy.physics.secondquant import (
    F,
    NO,
    AntiSymmetricTensor,
    Fd,
    evaluate_deltas,
    wicks,
)

from ..expr import Equation, Index, Operator, Product, Tensor, parse
from ..expr.exchange import fold_exchange
from ..expr.printer import format_equation
from ..expr.spin_integrate import spin_integrate
from ..expr.spintrace import spin_trace

__all__ = ["DATA_PATH", "CLOSED_SHELL_PATH", "FOLDED_PATH", "UNRESTRICTED_PATH", "CCSDT_PATH",
           "derive_ccsd_text", "derive_equations", "derive_ccsdt_equations",
           "derive_ccsdt_text", "closed_shell_text", "folded_text", "unrestricted_text",
           "regenerate",
           "regenerate_ccsdt", "main"]

DATA_PATH = Path(__file__).resolve().parent / "data" / "ccsd_so.txt"
CLOSED_SHELL_PATH = DATA_PATH.parent / "ccsd_cs.txt"
FOLDED_PATH = DATA_PATH.parent / "ccsd_cs_folded.txt"
UNRESTRICTED_PATH = DATA_PATH.parent / "ccsd_u.txt"
CCSDT_PATH = DATA_PATH.parent / "ccsdt_so.txt"

#: A factor is (name, bra indices, ket indices): a Tensor in sortable form. Indices are
#: space "i" (occupied) or "a" (virtual) and a number.
Factor = tuple[str, tuple[Index, ...], tuple[Index, ...]]
#: A canonical term: sorted factors.
TermKey = tuple[Factor, ...]

_RANK = {"f": 0, "g": 0, "t1": 1, "t2": 2}
_ANTISYMMETRIC = {"g", "t2"}
_FIRST_DUMMY = 3

# External (projection) indices: i, j -> i_1, i_2; a, b -> a_1, a_2.
_I, _J = symbols("i j", below_fermi=True)
_A, _B = symbols("a b", above_fermi=True)
_EXTERNAL: dict[sympy.Symbol, Index] = {
    _I: Index("i", 1), _J: Index("i", 2), _A: Index("a", 1), _B: Index("a", 2),
}

# (result, excitation level of the projection); None for the scalar E.
_EQUATIONS: tuple[tuple[str, Tensor | None, int], ...] = (
    ("E", None, 0),
    ("R1", Tensor("R1", (Index("a", 1),), (Index("i", 1),)), 1),
    ("R2", Tensor("R2", (Index("a", 1), Index("a", 2)), (Index("i", 1), Index("i", 2))), 2),
)


def _projector(level: int) -> sympy.Expr:
    """``<Phi|`` as the operator whose vacuum expectation gives the projection."""
    if level == 0:
        return sympy.S.One
    if level == 1:
        return Fd(_I) * F(_A)                      # <0| i+ a
    if level == 2:
        return Fd(_I) * Fd(_J) * F(_B) * F(_A)     # <0| i+ j+ b a
    raise ValueError(f"unsupported excitation level {level}")


def _hamiltonian() -> sympy.Expr:
    p, q, r, s = symbols("p q r s", cls=Dummy)
    fock = AntiSymmetricTensor("f", (p,), (q,)) * NO(Fd(p) * F(q))
    two = AntiSymmetricTensor("v", (p, q), (r, s)) * NO(Fd(p) * Fd(q) * F(s) * F(r))
    return fock + Rational(1, 4) * two


def _t1() -> sympy.Expr:
    a = Dummy("a", above_fermi=True)
    i = Dummy("i", below_fermi=True)
    return AntiSymmetricTensor("t", (a,), (i,)) * NO(Fd(a) * F(i))


def _t2() -> sympy.Expr:
    a, b = symbols("a b", above_fermi=True, cls=Dummy)
    i, j = symbols("i j", below_fermi=True, cls=Dummy)
    return Rational(1, 4) * AntiSymmetricTensor("t", (a, b), (i, j)) * NO(
        Fd(a) * Fd(b) * F(j) * F(i))


def _cluster_products(level: int) -> Iterable[tuple[int, int]]:
    """(k, m) for T1^k T2^m: H lowers the excitation level by at most 2."""
    for m in range(0, 3):
        for k in range(0, 5):
            if k + 2 * m <= level + 2:
                yield k, m


def _space(sym: sympy.Symbol) -> str:
    assumptions = sym.assumptions0
    if assumptions.get("below_fermi"):
        return "i"
    if assumptions.get("above_fermi"):
        return "a"
    raise ValueError(f"index {sym} has no occupied/virtual restriction")


def _split_term(term: sympy.Expr) -> tuple[Fraction, list[AntiSymmetricTensor]]:
    coeff = Fraction(1)
    tensors: list[AntiSymmetricTensor] = []
    for factor in Mul.make_args(term):
        if factor.is_Number:
            if not factor.is_Rational:
                raise ValueError(f"non-rational coefficient {factor}")
            coeff *= Fraction(int(factor.p), int(factor.q))
        elif isinstance(factor, AntiSymmetricTensor):
            tensors.append(factor)
        elif isinstance(factor, Pow) and isinstance(factor.base, AntiSymmetricTensor):
            tensors.extend([factor.base] * int(factor.exp))
        else:
            raise ValueError(f"unexpected factor {factor!r} in {term}")
    return coeff, tensors


def _connected(tensors: Sequence[AntiSymmetricTensor]) -> bool:
    """Every t must share a summed (non-external) index with the H tensor."""
    hams = [t for t in tensors if str(t.symbol) in ("f", "v")]
    if len(hams) != 1:
        raise ValueError("each term needs exactly one Hamiltonian tensor")
    h_idx = {x for x in hams[0].upper + hams[0].lower if x not in _EXTERNAL}
    for t in tensors:
        if str(t.symbol) == "t" and not h_idx.intersection(t.upper + t.lower):
            return False
    return True


def _tensor_name(t: AntiSymmetricTensor) -> str:
    sym = str(t.symbol)
    if sym == "f":
        return "f"
    if sym == "v":
        return "g"
    if sym == "t":
        return "t1" if len(t.upper) == 1 else "t2"
    raise ValueError(f"unknown tensor {sym}")


def _sort_pair(idx: tuple[Index, ...]) -> tuple[tuple[Index, ...], int]:
    if len(idx) == 2 and idx[1] < idx[0]:
        return (idx[1], idx[0]), -1
    if len(idx) == 2 and idx[0] == idx[1]:
        return idx, 0
    return idx, 1


def _canonical(coeff: Fraction, tensors: Sequence[AntiSymmetricTensor]
               ) -> tuple[TermKey, Fraction]:
    """Canonical key and coefficient: minimum over dummy renamings."""
    raw = [(_tensor_name(t), tuple(t.upper), tuple(t.lower)) for t in tensors]
    dummies: dict[str, list[sympy.Symbol]] = {"i": [], "a": []}
    for _, bra, ket in raw:
        for x in bra + ket:
            if x not in _EXTERNAL and x not in dummies[_space(x)]:
                dummies[_space(x)].append(x)
    best: TermKey | None = None
    best_signs: set[int] = set()
    occ, vir = dummies["i"], dummies["a"]
    for perm_o in itertools.permutations(range(len(occ))):
        for perm_v in itertools.permutations(range(len(vir))):
            names: dict[sympy.Symbol, Index] = dict(_EXTERNAL)
            names.update({s: Index("i", _FIRST_DUMMY + n) for s, n in zip(occ, perm_o)})
            names.update({s: Index("a", _FIRST_DUMMY + n) for s, n in zip(vir, perm_v)})
            sign = 1
            factors: list[tuple[int, Factor]] = []
            for name, bra, ket in raw:
                b = tuple(names[x] for x in bra)
                k = tuple(names[x] for x in ket)
                if name in _ANTISYMMETRIC:
                    b, sb = _sort_pair(b)
                    k, sk = _sort_pair(k)
                    sign *= sb * sk
                factors.append((_RANK[name], (name, b, k)))
            key = tuple(f for _, f in sorted(factors))
            if best is None or key < best:
                best, best_signs = key, {sign}
            elif key == best:
                best_signs.add(sign)
    assert best is not None
    if len(best_signs) != 1 or 0 in best_signs:   # symmetric zero
        return best, Fraction(0)
    return best, coeff * best_signs.pop()


def _project(level: int) -> dict[TermKey, Fraction]:
    """Merged canonical terms of ``<Phi_level|Hbar|0>``."""
    terms: dict[TermKey, Fraction] = {}
    for k, m in _cluster_products(level):
        expr = _projector(level) * _hamiltonian()
        for _ in range(k):
            expr = expr * _t1()
        for _ in range(m):
            expr = expr * _t2()
        expr = Rational(1, math.factorial(k) * math.factorial(m)) * expr
        result = wicks(expr, keep_only_fully_contracted=True)
        result = evaluate_deltas(sympy.expand(result))
        for term in sympy.Add.make_args(sympy.expand(result)):
            if term == 0:
                continue
            coeff, tensors = _split_term(term)
            if not _connected(tensors):
                continue
            key, c = _canonical(coeff, tensors)
            terms[key] = terms.get(key, Fraction(0)) + c
    return {key: c for key, c in terms.items() if c != 0}


def _sort_key(item: tuple[TermKey, Fraction]) -> tuple:
    key, c = item
    n_t = sum(1 for f in key if f[0].startswith("t"))
    names = tuple(f[0] for f in key)
    return (n_t, names, key, c)


def derive_equations() -> tuple[Equation, ...]:
    """E, R1 and R2 as expression IR, terms in the order they are printed: by number of
    amplitudes, then tensor names, then canonical indices."""
    out = []
    for name, result, level in _EQUATIONS:
        terms = sorted(_project(level).items(), key=_sort_key)
        out.append(Equation(name, tuple(Product(c, tuple(Tensor(*f) for f in key))
                                        for key, c in terms), result))
    return tuple(out)


def _equations_text(header: str, equations: Sequence[Equation]) -> str:
    """A packaged equation file: the header, then per equation a term-count comment and
    the equation one term a line (continuations indented four spaces)."""
    lines = [header.rstrip("\n")]
    for eq in equations:
        lhs = str(eq.result) if eq.result is not None else eq.name
        lines += ["", f"# {lhs}: {len(eq.terms)} terms",
                  format_equation(eq, one_term_per_line=True, indent="    ")]
    return "\n".join(lines) + "\n"


_HEADER = """\
# Spin-orbital CCSD equations (non-canonical: the Fock matrix need not be diagonal).
# GENERATED FILE - do not edit.  Regenerate with `sequant-eval regen-equations`,
# which derives them with sympy.physics.secondquant (sequant_eval/chem/derive.py).
#
# E  = <0|Hbar|0> (correlation energy), R1 = <Phi_i^a|Hbar|0>, R2 = <Phi_ij^ab|Hbar|0>,
# Hbar = exp(-T) H_N exp(T), H_N = f_pq {p+ q} + 1/4 <pq||rs> {p+ q+ s r},
# T1 = t_i^a {a+ i}, T2 = 1/4 t_ij^ab {a+ b+ j i}.  At convergence R1 = R2 = 0.
#
# Tensors are Name{bra;ket}:
#   f{p;q}               Fock matrix f_pq
#   g{p,q;r,s}           antisymmetrized integral <pq||rs> = <pq|rs> - <pq|sr>
#   t1{a;i}              t_i^a
#   t2{a_1,a_2;i_1,i_2}  t_ij^ab (antisymmetric in a_1,a_2 and in i_1,i_2)
# Indices i_N are occupied, a_N virtual; i_1,i_2,a_1,a_2 are external, all
# others are summed.  Every index permutation is written out as its own term.
"""


def derive_ccsd_text() -> str:
    """The full text of ``data/ccsd_so.txt`` (deterministic, byte for byte)."""
    return _equations_text(_HEADER, derive_equations())


_CLOSED_SHELL_HEADER = """\
# Closed-shell (RHF) CCSD equations over spatial orbitals, non-canonical Fock matrix.
# GENERATED FILE - do not edit.  Regenerate with `sequant-eval regen-equations`, which
# spin-traces ccsd_so.txt (sequant_eval.expr.spintrace.spin_trace, sequant_eval/chem/derive.py).
#
# E = <0|Hbar|0> summed over spins; R1{a_1;i_1} = R1 of ccsd_so.txt at (a_1 alpha; i_1 alpha),
# R2{a_1,a_2;i_1,i_2} = R2 of ccsd_so.txt at (a_1 alpha, a_2 beta; i_1 alpha, i_2 beta).
#
# Tensors are Name{bra;ket}, all indices spatial:
#   f{p;q}               Fock matrix f_pq (real symmetric)
#   g{p,q;r,s}           <pq|rs> = (pr|qs), NOT antisymmetrized (real orbitals, 8-fold symmetric)
#   t1{a;i}              t_i^a (the same for alpha and beta)
#   t2{a_1,a_2;i_1,i_2}  t_{i_1 alpha, i_2 beta}^{a_1 alpha, a_2 beta}, t2{a,b;i,j} = t2{b,a;j,i}
# Indices i_N are active occupied, a_N virtual; result indices are external, all others
# summed.  Equal terms are folded; mirror terms (a_1,i_1 <-> a_2,i_2) are written out.
"""


def closed_shell_text(spin_orbital_text: str | None = None) -> str:
    """The full text of ``data/ccsd_cs.txt``: the spin trace of ``spin_orbital_text``
    (default: the packaged ``ccsd_so.txt``), deterministic byte for byte."""
    if spin_orbital_text is None:
        spin_orbital_text = DATA_PATH.read_text(encoding="utf-8")
    return _equations_text(_CLOSED_SHELL_HEADER, spin_trace(parse(spin_orbital_text)))


_FOLDED_HEADER = """\
# Closed-shell CCSD equations with Coulomb/exchange pairs folded: what RCCSD evaluates.
# GENERATED FILE - do not edit.  Regenerate with `sequant-eval regen-equations`, which
# folds ccsd_cs.txt (sequant_eval.expr.exchange.fold_exchange with rccsd.EXCHANGE_FOLDS,
# sequant_eval/chem/derive.py); packaged so that a run need not search the folds.
#
# Tensors and indices as in ccsd_cs.txt, and:
#   L{p,q;r,s}           2 g{p,q;r,s} - g{p,q;s,r}
#   u2{a_1,a_2;i_1,i_2}  2 t2{a_1,a_2;i_1,i_2} - t2{a_1,a_2;i_2,i_1}
"""


def folded_text(closed_shell: str | None = None) -> str:
    """The full text of ``data/ccsd_cs_folded.txt``: the exchange fold of ``closed_shell``
    (default: the packaged ``ccsd_cs.txt``), deterministic byte for byte."""
    from .rccsd import EXCHANGE_FOLDS

    if closed_shell is None:
        closed_shell = CLOSED_SHELL_PATH.read_text(encoding="utf-8")
    return _equations_text(_FOLDED_HEADER, fold_exchange(parse(closed_shell), EXCHANGE_FOLDS))


_UNRESTRICTED_HEADER = """\
# Unrestricted (UHF) CCSD equations over alpha and beta spatial orbitals, non-canonical Fock.
# GENERATED FILE - do not edit.  Regenerate with `sequant-eval regen-equations`, which
# spin-integrates ccsd_so.txt (sequant_eval.expr.spin_integrate, sequant_eval/chem/derive.py).
#
# Index spaces: i_N alpha occupied, a_N alpha virtual, I_N beta occupied, A_N beta virtual.
# E = <0|Hbar|0> summed over spins.  The residuals are the spin blocks of ccsd_so.txt's:
#   R1a{a_1;i_1} = R1(a_1 alpha; i_1 alpha), R1b{A_1;I_1} = R1(A_1 beta; I_1 beta),
#   R2aa{a_1,a_2;i_1,i_2} = R2(alpha alpha; alpha alpha), R2bb{A_1,A_2;I_1,I_2} likewise beta,
#   R2ab{a_1,A_1;i_1,I_1} = R2(a_1 alpha, A_1 beta; i_1 alpha, I_1 beta); the other blocks of
#   R2 follow by antisymmetry.
#
# Tensors are Name{bra;ket}, named by the spins of their particles (PySCF UCCSD's t1a, t2ab):
#   fa{p;q}, fb{P;Q}         alpha and beta Fock matrices (real symmetric)
#   gaa{p,q;r,s}             <pq||rs> = <pq|rs> - <pq|sr> over alpha orbitals; gbb over beta
#   gab{p,Q;r,S}             <p Q|r S> = (pr|QS), p, r alpha, Q, S beta (no exchange part)
#   t1a{a;i}, t1b{A;I}       t_i^a of each spin
#   t2aa{a_1,a_2;i_1,i_2}    t_ij^ab, all alpha (antisymmetric in bra and in ket); t2bb beta
#   t2ab{a,A;i,I}            t_{i alpha, I beta}^{a alpha, A beta}
# Result indices are external, all others summed.  Equal terms are folded (antisymmetric
# slots of the same-spin blocks, real symmetries of f and g); mirror terms are written out.
"""


def unrestricted_text(spin_orbital_text: str | None = None) -> str:
    """The full text of ``data/ccsd_u.txt``: the spin integration of ``spin_orbital_text``
    (default: the packaged ``ccsd_so.txt``), deterministic byte for byte."""
    if spin_orbital_text is None:
        spin_orbital_text = DATA_PATH.read_text(encoding="utf-8")
    return _equations_text(_UNRESTRICTED_HEADER, spin_integrate(parse(spin_orbital_text)))


def regenerate(path: str | Path | None = None,
               closed_shell_path: str | Path | None = None,
               unrestricted_path: str | Path | None = None) -> str:
    """Derive the equations, write them to ``path`` (default: packaged data), their
    closed-shell spin trace to ``closed_shell_path`` (and its exchange fold beside it, the
    same stem with ``_folded``) and their unrestricted spin integration to
    ``unrestricted_path`` (defaults: beside the packaged data, or ``<path stem>_cs.txt``
    and ``<path stem>_u.txt`` beside an explicit ``path``)."""
    text = derive_ccsd_text()
    target = Path(path) if path is not None else DATA_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    stem = target.stem.removesuffix("_so")
    if closed_shell_path is None:
        closed_shell_path = (CLOSED_SHELL_PATH if path is None
                             else target.with_name(stem + "_cs.txt"))
    if unrestricted_path is None:
        unrestricted_path = (UNRESTRICTED_PATH if path is None
                             else target.with_name(stem + "_u.txt"))
    closed = closed_shell_text(text)
    Path(closed_shell_path).write_text(closed, encoding="utf-8")
    Path(closed_shell_path).with_name(Path(closed_shell_path).stem + "_folded.txt").write_text(
        folded_text(closed), encoding="utf-8")
    Path(unrestricted_path).write_text(unrestricted_text(text), encoding="utf-8")
    return text


_CCSDT_HEADER = """\
# Spin-orbital CCSDT equations (non-canonical: the Fock matrix need not be diagonal).
# GENERATED FILE - do not edit.  Regenerate with `sequant-eval regen-equations`, which
# enumerates the connected Wick contractions directly (sequant_eval/chem/wick.py; the same
# engine reproduces the sympy-derived ccsd_so.txt byte for byte).
#
# E = <0|Hbar|0> (correlation energy), R1 = <Phi_i^a|Hbar|0>, R2 = <Phi_ij^ab|Hbar|0>,
# R3 = <Phi_ijk^abc|Hbar|0>, Hbar = exp(-T) H_N exp(T),
# H_N = f_pq {p+ q} + 1/4 <pq||rs> {p+ q+ s r}, T = T1 + T2 + T3, T1 = t_i^a {a+ i},
# T2 = 1/4 t_ij^ab {a+ b+ j i}, T3 = 1/36 t_ijk^abc {a+ b+ c+ k j i}.  At convergence
# R1 = R2 = R3 = 0.
#
# Tensors are Name{bra;ket}:
#   f{p;q}                          Fock matrix f_pq
#   g{p,q;r,s}                      antisymmetrized integral <pq||rs> = <pq|rs> - <pq|sr>
#   t1{a;i}                         t_i^a
#   t2{a_1,a_2;i_1,i_2}             t_ij^ab (antisymmetric in its bra and in its ket)
#   t3{a_1,a_2,a_3;i_1,i_2,i_3}     t_ijk^abc (antisymmetric in its bra and in its ket)
# Indices i_N are occupied, a_N virtual; the result's indices are external, all others
# summed.  E and R1 are spelled out.  Every term of R2 and R3 carries the normalized
# antisymmetrizer A{a_1,..;i_1,..} = 1/(n!)^2 sum sgn(s) sgn(t) s t over the permutations s
# of the result's virtual and t of its occupied indices: each term stands for its orbit
# (R3 has 47 such terms where 393 are spelled out), its coefficient the orbit's sum.
"""

_CCSDT_EQUATIONS: tuple[tuple[str, Tensor | None, int], ...] = _EQUATIONS + (
    ("R3", Tensor("R3", tuple(Index("a", k) for k in (1, 2, 3)),
                  tuple(Index("i", k) for k in (1, 2, 3))), 3),
)


def derive_ccsdt_equations() -> tuple[Equation, ...]:
    """E, R1, R2, R3 of spin-orbital CCSDT (a few seconds, sequant_eval.chem.wick):
    R2 and R3 as antisymmetrizer terms, summed indices numbered from 4."""
    from .wick import project

    out = []
    for name, result, level in _CCSDT_EQUATIONS:
        anti = level >= 2
        ops = (Operator("A", result.bra, result.ket),) if anti else ()
        terms = sorted(project(level, (1, 2, 3), antisymmetrize=anti, first_dummy=4).items(),
                       key=_sort_key)
        out.append(Equation(name, tuple(Product(c, tuple(Tensor(*f) for f in key), ops)
                                        for key, c in terms), result))
    return tuple(out)


def derive_ccsdt_text() -> str:
    """The full text of ``data/ccsdt_so.txt`` (deterministic, byte for byte)."""
    return _equations_text(_CCSDT_HEADER, derive_ccsdt_equations())


def regenerate_ccsdt(path: str | Path | None = None) -> str:
    """Derive the CCSDT equations and write them to ``path`` (default: packaged data)."""
    text = derive_ccsdt_text()
    target = Path(path) if path is not None else CCSDT_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sequant_eval.chem.derive [path]``: regenerate the equation files (with a
    ``path``, only the CCSD file there and its closed-shell and unrestricted forms beside
    it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=None,
                        help=f"CCSD output file (default: {DATA_PATH}, and CCSDT to "
                             f"{CCSDT_PATH})")
    args = parser.parse_args(argv)
    regenerate(args.path)
    if args.path is None:
        regenerate_ccsdt()
        print(f"wrote {DATA_PATH}, its closed-shell and unrestricted forms and {CCSDT_PATH}")
    else:
        print(f"wrote {args.path} and its closed-shell and unrestricted forms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
