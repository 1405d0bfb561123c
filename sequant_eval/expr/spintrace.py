"""Spin tracing: spin-orbital equations to closed-shell spatial-orbital equations (RHF).

What: every spin-orbital index ``p`` is a spatial index ``P`` times a spin ``σ_p``.  For a
closed-shell (RHF, singlet) reference every particle-conserving tensor of the spin-orbital
equations is *antisymmetrized* from a spin-free spatial tensor of the same name::

    X{p_1..p_n; r_1..r_n} = Σ_π sgn(π) X{P_1..P_n; R_π(1)..R_π(n)} Π_k δ(σ_p_k, σ_r_π(k))

For ``n = 1`` this is ``f{p;q} = f{P;Q} δ(σ_p, σ_q)`` and ``t1{a;i} = t1{A;I} δ(σ_a, σ_i)``.
For ``n = 2`` it is ``g{p,q;r,s} = <PQ|RS> δδ − <PQ|SR> δδ`` (``<pq||rs>`` from the spatial
``<pq|rs>``) and ``t2{a,b;i,j} = T{A,B;I,J} δδ − T{A,B;J,I} δδ`` with the closed-shell
amplitude ``T{A,B;I,J} = t_{iα jβ}^{aα bβ}``, the αβ block.  The formula needs particle
symmetry of the spatial tensor (``T{A,B;I,J} = T{B,A;J,I}``), which every closed-shell
singlet amplitude and integral has.

How: each product is expanded over one permutation ``π`` per factor; the spin deltas join
the spin of every label to others, and the spins are summed in closed form: a connected
group of labels without an external label contributes 2, a group holding externals of
different projected spins makes the term vanish.  Residuals are projected on the αβ block:
result slot ``k`` of bra and ket gets spin α for even ``k`` and β for odd ``k`` (``R1`` on
``(aα; iα)``, ``R2{a,b;i,j}`` on ``(aα, bβ; iα, jβ)``), a scalar is summed over all spins.
Equal terms are folded: a term's canonical form is the smallest spelling over renamings of
its summed indices and the symmetries of its spatial factors (particle symmetry of every
factor; for the real symmetric operators named in ``real``, the swap of a bra with its ket
index in any column, i.e. the 8-fold symmetry of real ``<pq|rs>``).  Terms that cancel are
dropped.  Operators ``A`` and ``P`` are expanded first, so the output does not depend on
term order or on whether mirror terms were spelled out or folded.
"""
from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from fractions import Fraction

from ..errors import ExpressionError
from .index import Index
from .terms import Equation, Product, Tensor, _parity, operator_terms

__all__ = ["SpinTraceError", "spin_trace", "spin_trace_equation", "canonical_product",
           "ALPHA", "BETA"]

ALPHA, BETA = 0, 1

#: A spatial factor in sortable form: (name, bra, ket).
_Factor = tuple[str, tuple[Index, ...], tuple[Index, ...]]


class SpinTraceError(ExpressionError):
    """A spin-orbital equation that has no closed-shell spin-traced form here."""


def spin_trace(equations: Equation | Sequence[Equation], *,
               real: Collection[str] = ("f", "g")) -> tuple[Equation, ...]:
    """Closed-shell spatial-orbital equations from spin-orbital ones (RHF reference).

    Parameters
    ----------
    equations
        Spin-orbital equations (``se.parse`` of e.g. ``chem/data/ccsd_so.txt``): every tensor
        has as many bra as ket indices and is antisymmetric in its bra and in its ket.
    real
        Names of tensors from real symmetric operators (the Fock matrix and the integrals
        over real orbitals): their bra and ket index may be swapped column by column.

    Returns
    -------
    tuple[Equation, ...]
        One equation per input, same names and result indices, now spatial: tensors keep
        their names (``g`` is now ``<pq|rs>``, ``t2`` the αβ amplitude), no operators, equal
        terms folded, zeros dropped, terms in a deterministic order.
    """
    if isinstance(equations, Equation):
        equations = (equations,)
    return tuple(spin_trace_equation(eq, real=real) for eq in equations)


def spin_trace_equation(eq: Equation, *, real: Collection[str] = ("f", "g")) -> Equation:
    """One equation of :func:`spin_trace`."""
    spins = _projected_spins(eq)
    externals = tuple(spins)
    folded: dict[tuple[_Factor, ...], Fraction] = {}
    for product in eq.terms:
        for plain in _expand_operators(product, eq.indices):
            for coeff, factors in _spin_traced(plain, spins, eq.name):
                key = _canonical_factors(factors, externals, frozenset(real))
                folded[key] = folded.get(key, Fraction(0)) + coeff
    terms = [(key, c) for key, c in folded.items() if c != 0]
    terms.sort(key=lambda item: (_amplitude_count(item[0]), tuple(f[0] for f in item[0]),
                                 item[0], item[1]))
    products = tuple(Product(c, tuple(Tensor(n, b, k) for n, b, k in key)) for key, c in terms)
    if not products:
        raise SpinTraceError(f"{eq.name}: every term vanishes after spin integration; "
                             "there is no closed-shell equation to write")
    return Equation(eq.name, products, eq.result, eq.bare)


def canonical_product(product: Product, externals: Sequence[Index] = (), *,
                      real: Collection[str] = ("f", "g")) -> Product:
    """The canonical spelling of an operator-free spatial product (see the module doc)."""
    if product.operators:
        raise SpinTraceError(f"canonical_product takes an operator-free product, got {product}")
    factors = [(t.name, t.bra, t.ket) for t in product.factors]
    key = _canonical_factors(factors, tuple(externals), frozenset(real))
    return Product(product.coefficient, tuple(Tensor(n, b, k) for n, b, k in key))


# ------------------------------------------------------------------ projection and spins
def _projected_spins(eq: Equation) -> dict[Index, int]:
    """Spin of every result index: bra and ket slot ``k`` get α (even k) or β (odd k)."""
    if eq.result is None:
        if eq.bare and eq.indices:
            raise SpinTraceError(
                f"{eq.name}: a bare expression with free indices {list(map(str, eq.indices))} "
                "has no bra/ket to project; write it as R{bra;ket} = ...")
        return {}
    res = eq.result
    if res.aux or len(res.bra) != len(res.ket):
        raise SpinTraceError(
            f"{eq.name}: result {res} needs as many bra as ket indices and no aux indices to "
            "be projected on a closed-shell spin block")
    spins: dict[Index, int] = {}
    for k, (b, t) in enumerate(zip(res.bra, res.ket)):
        spins[b] = spins[t] = ALPHA if k % 2 == 0 else BETA
    return spins


def _expand_operators(product: Product, result: tuple[Index, ...]) -> list[Product]:
    """``A``/``P`` expanded into operator-free products with relabelled result indices."""
    if not product.operators:
        return [product]
    out = []
    for weight, perm in operator_terms(product.operators, result):
        # output mode k reads mode perm[k] of X: X's label result[perm[k]] becomes result[k]
        rename = {result[perm[k]]: result[k] for k in range(len(result))}
        factors = tuple(Tensor(t.name, tuple(rename.get(x, x) for x in t.bra),
                               tuple(rename.get(x, x) for x in t.ket), t.aux, t.symmetry)
                        for t in product.factors)
        out.append(Product(product.coefficient * weight, factors))
    return out


def _check_factor(t: Tensor, where: str) -> None:
    if t.aux or len(t.bra) != len(t.ket):
        raise SpinTraceError(
            f"{where}: tensor {t} is not particle-conserving (bra and ket of equal length, no "
            "aux indices); only such tensors have a closed-shell spin-free form")
    if any(ix.protos for ix in t.slots):
        raise SpinTraceError(f"{where}: tensor {t} has a composite index; spin tracing "
                             "needs plain indices")


def _spin_traced(product: Product, spins: dict[Index, int], where: str
                 ) -> list[tuple[Fraction, list[_Factor]]]:
    """Spatial terms of one operator-free product after the spin sum (zeros left out)."""
    for t in product.factors:
        _check_factor(t, f"{where}, term '{product}'")
    choices = [list(itertools.permutations(range(len(t.bra)))) for t in product.factors]
    out = []
    for perms in itertools.product(*choices):
        sign, pairs, factors = 1, [], []
        for t, perm in zip(product.factors, perms):
            sign *= _parity(perm)
            ket = tuple(t.ket[p] for p in perm)
            pairs += list(zip(t.bra, ket))
            factors.append((t.name, t.bra, ket))
        weight = _spin_sum(pairs, spins)
        if weight:
            out.append((product.coefficient * sign * weight, factors))
    return out


def _spin_sum(pairs: list[tuple[Index, Index]], spins: dict[Index, int]) -> int:
    """Σ over free spins of Π δ(σ_x, σ_y): 2 per free group, 0 on a clash of fixed spins."""
    parent: dict[Index, Index] = {}

    def root(x: Index) -> Index:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in pairs:
        parent[root(x)] = root(y)
    fixed: dict[Index, int] = {}
    for label, spin in spins.items():
        if label in parent and fixed.setdefault(root(label), spin) != spin:
            return 0
    groups = {root(x) for x in parent}
    return 2 ** (len(groups) - len(fixed))


# ------------------------------------------------------------------ canonical form
def _amplitude_count(key: tuple[_Factor, ...]) -> int:
    return sum(1 for name, _, _ in key if name.startswith("t"))


def _factor_order(f: _Factor) -> tuple:
    return (f[0].startswith("t"), f[0], f[1], f[2])


def _symmetric_spellings(f: _Factor, real: bool, hermitian: bool = False) -> list[_Factor]:
    """Every spelling of a spatial factor that denotes the same array entry: particle
    symmetry, plus per-column bra/ket swaps (``real``) or the whole bra/ket swap
    (``hermitian``)."""
    name, bra, ket = f
    n = len(bra)
    out = []
    for perm in itertools.permutations(range(n)):
        b, k = [bra[p] for p in perm], [ket[p] for p in perm]
        if real:
            flips = list(itertools.product((False, True), repeat=n))
        else:
            flips = [(False,) * n] + ([(True,) * n] if hermitian else [])
        for flip in flips:
            bb = tuple(k[c] if s else b[c] for c, s in enumerate(flip))
            kk = tuple(b[c] if s else k[c] for c, s in enumerate(flip))
            out.append((name, bb, kk))
    return out


def dummy_targets(factors: Sequence[_Factor], externals: tuple[Index, ...]
                  ) -> tuple[dict[str, list[Index]], dict[str, list[Index]], list[str]]:
    """The summed indices of a product per space, the canonical labels they may take (the
    lowest numbers no fixed index of that space uses) and the spaces in order: what a
    search over renamings of the dummies runs over."""
    counts: dict[Index, int] = {}
    for _, bra, ket in factors:
        for x in bra + ket:
            counts[x] = counts.get(x, 0) + 1
    fixed = set(externals) | {x for x, n in counts.items() if n == 1}
    dummies: dict[str, list[Index]] = {}
    for x in sorted(counts):
        if x not in fixed:
            dummies.setdefault(x.space, []).append(x)
    targets: dict[str, list[Index]] = {}
    for space, labels in dummies.items():
        used = {x.number for x in fixed if x.space == space}
        numbers = (n for n in itertools.count(1) if n not in used)
        targets[space] = [Index(space, next(numbers)) for _ in labels]
    spaces = sorted(dummies)
    return dummies, targets, spaces


def _canonical_factors(factors: Sequence[_Factor], externals: tuple[Index, ...],
                       real: frozenset[str], hermitian: frozenset[str] = frozenset(),
                       spell=None) -> tuple[_Factor, ...]:
    """Smallest spelling over renamings of summed indices and factor symmetries
    (``spell(factor)``: its equal spellings; default: particle symmetry plus ``real`` /
    ``hermitian`` swaps)."""
    dummies, targets, spaces = dummy_targets(factors, externals)
    best: tuple[_Factor, ...] | None = None
    for perms in itertools.product(*(itertools.permutations(targets[s]) for s in spaces)):
        rename = {x: y for s, perm in zip(spaces, perms) for x, y in zip(dummies[s], perm)}
        spelled = []
        for name, bra, ket in factors:
            f = (name, tuple(rename.get(x, x) for x in bra), tuple(rename.get(x, x) for x in ket))
            spelled.append(min(spell(f) if spell is not None else
                               _symmetric_spellings(f, name in real, name in hermitian),
                               key=_factor_order))
        key = tuple(sorted(spelled, key=_factor_order))
        if best is None or [_factor_order(f) for f in key] < [_factor_order(f) for f in best]:
            best = key
    assert best is not None
    return best
