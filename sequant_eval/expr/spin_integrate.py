"""Spin integration: spin-orbital equations to unrestricted equations over α and β orbitals.

What: every spin-orbital index ``p`` is a spatial index ``P`` of one spin, ``α`` or ``β``
(an unrestricted, e.g. UHF, reference: each orbital has a pure spin and its own spatial
part).  A particle-conserving spin-orbital tensor that is antisymmetric in its bra and in
its ket and conserves spin (the Fock matrix, ``<pq||rs>``, every amplitude) is zero unless
its bra and its ket hold the same number of α indices, and by antisymmetry each nonzero
entry is, up to sign, an entry of the block with the α indices first in bra and in ket::

    X{p_1..p_n; r_1..r_n} = sgn(π) sgn(τ) X_{a..ab..b}{P_π(1)..P_π(n); R_τ(1)..R_τ(n)}

(``π``, ``τ``: the stable sorts of bra and ket by spin, α first).  The block keeps the
tensor's name followed by its particles' spins: ``f`` → ``fa``, ``fb``; ``t1`` → ``t1a``,
``t1b``; ``t2`` → ``t2aa``, ``t2ab``, ``t2bb`` (PySCF ``UCCSD``'s names); ``g`` → ``gaa``
(``<pq||rs>`` over α), ``gab`` (``<pα qβ|rα sβ>``, no exchange part), ``gbb``.  Indices
take their spin's space: by default α keeps ``i``/``a`` and β is the upper case ``I``/``A``
(PySCF's ``ovOV`` convention), ``spaces=`` names others.

How: each residual is split into its independent spin blocks, the ones with sorted spins
(``R1`` → ``R1a`` on ``(aα; iα)``, ``R1b`` on ``(Aβ; Iβ)``; ``R2`` → ``R2aa``, ``R2ab`` on
``(aα, Aβ; iα, Iβ)``, ``R2bb``; a scalar stays one equation); every other block of an
antisymmetric residual is one of these up to sign.  The result's indices are renumbered per
spin space in slot order (``R2ab{a_1,A_1;i_1,I_1}``).  In each block every summed index
takes both spins, a term for each assignment under which no factor vanishes, its sign the
product of the factors' sorting signs.  ``A`` and ``P`` operators are expanded first
(the expansion of :mod:`sequant_eval.expr.spintrace`).  Equal terms are folded: a term's
canonical form is the smallest spelling over renamings of its summed indices and the
symmetries of its blocks, with the sign that spelling carries — permutations of a block's
α slots and of its β slots (bra and ket apart, signed); for the real symmetric operators
named in ``real`` also the swap of bra and ket, and of the two indices of a column whose
spin no other column shares (the real Coulomb symmetry of ``gab``).  A tensor named in
``symmetric`` (an orbital-energy denominator ``D3{i,j,k;a,b,c}``) is symmetric, not
antisymmetric, in its bra and in its ket: sorting its slots carries no sign, and its block
``D3aab`` is the same function of the block's orbital energies.  A term that equals
minus itself under these, and terms that cancel, are dropped.  The output therefore does
not depend on term order, on dummy names or on whether mirror terms were spelled out.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Collection, Mapping, Sequence
from fractions import Fraction

from ..errors import ExpressionError
from .index import Index
from .spintrace import (ALPHA, BETA, _amplitude_count, _expand_operators, _factor_order,
                        dummy_targets)
from .terms import Equation, Product, Tensor, _parity

__all__ = ["SpinIntegrationError", "spin_integrate", "spin_integrate_equation",
           "spin_block_name", "spin_spaces", "canonical_spin_product", "DEFAULT_SPACES"]

#: Spin-orbital space → (α space, β space).
DEFAULT_SPACES: dict[str, tuple[str, str]] = {"i": ("i", "I"), "a": ("a", "A")}

#: A block factor in sortable form: (block name, bra, ket).
_Factor = tuple[str, tuple[Index, ...], tuple[Index, ...]]


class SpinIntegrationError(ExpressionError):
    """A spin-orbital equation that has no spin-integrated (unrestricted) form here."""


def spin_block_name(name: str, spins: Sequence[int]) -> str:
    """``name`` followed by ``a`` per α, ``b`` per β particle: ``t2``, (α, β) → ``t2ab``."""
    return name + "".join("ab"[s] for s in spins)


def spin_spaces(spaces: Collection[str],
                names: Mapping[str, tuple[str, str]] | None = None) -> dict[str, tuple[str, str]]:
    """The (α, β) space names of each spin-orbital space: ``names`` where given, else
    :data:`DEFAULT_SPACES`, else the space itself for α and its upper case for β.  Refuses
    a space with no distinct upper case and two spin spaces of one name."""
    table = dict(DEFAULT_SPACES)
    table.update(names or {})
    out: dict[str, tuple[str, str]] = {}
    for space in sorted(spaces):
        if space in table:
            pair = tuple(table[space])
        elif space.upper() != space:
            pair = (space, space.upper())
        else:
            raise SpinIntegrationError(
                f"index space {space!r} has no default β space (its upper case is itself); "
                f"name its α and β spaces with spaces={{{space!r}: (ALPHA_NAME, BETA_NAME)}}")
        if len(pair) != 2 or pair[0] == pair[1]:
            raise SpinIntegrationError(f"space {space!r}: give two distinct space names "
                                       f"(alpha, beta), got {pair!r}")
        out[space] = pair                                           # type: ignore[assignment]
    seen: dict[str, str] = {}
    for space, pair in out.items():
        for name in pair:
            if name in seen:
                raise SpinIntegrationError(
                    f"spin spaces collide: {name!r} would stand for a spin of both {seen[name]!r} "
                    f"and {space!r}; name them with spaces=")
            seen[name] = space
    return out


def spin_integrate(equations: Equation | Sequence[Equation], *,
                   real: Collection[str] = ("f", "g"), symmetric: Collection[str] = (),
                   spaces: Mapping[str, tuple[str, str]] | None = None) -> tuple[Equation, ...]:
    """Unrestricted (α/β spatial-orbital) equations from spin-orbital ones.

    Parameters
    ----------
    equations
        Spin-orbital equations (``se.parse`` of e.g. ``chem/data/ccsd_so.txt``): every tensor
        has as many bra as ket indices, is antisymmetric in its bra and in its ket and
        conserves spin; every result is antisymmetric (as CC residuals are), so its blocks
        with the α indices first are its independent ones.
    real
        Names of tensors from real symmetric operators (the Fock matrix and the integrals
        over real orbitals): bra and ket may be swapped, and so may the two indices of a
        column whose spin is its block's only one of that spin.
    symmetric
        Names of tensors symmetric under permutations of their bra and of their ket (the
        orbital-energy denominators of (T)); their bra and ket must hold the same spins
        in every term that does not vanish otherwise (refused if not).
    spaces
        Spin-orbital space → (α space, β space); default ``i`` → (``i``, ``I``), ``a`` →
        (``a``, ``A``), any other lower-case space → (itself, its upper case).

    Returns
    -------
    tuple[Equation, ...]
        Per input equation its spin blocks, in input order, the α-richest first (``E``,
        ``R1a``, ``R1b``, ``R2aa``, ``R2ab``, ``R2bb`` for CCSD); tensors named per block
        (:func:`spin_block_name`), no operators, equal terms folded, zeros dropped, terms in
        a deterministic order.
    """
    if isinstance(equations, Equation):
        equations = (equations,)
    out: list[Equation] = []
    for eq in equations:
        out += spin_integrate_equation(eq, real=real, symmetric=symmetric, spaces=spaces)
    return tuple(out)


def spin_integrate_equation(eq: Equation, *, real: Collection[str] = ("f", "g"),
                            symmetric: Collection[str] = (),
                            spaces: Mapping[str, tuple[str, str]] | None = None
                            ) -> tuple[Equation, ...]:
    """The spin blocks of one equation (see :func:`spin_integrate`)."""
    for product in eq.terms:
        for t in product.factors:
            _check_factor(t, f"{eq.name}, term '{product}'")
    table = spin_spaces(_spaces_of(eq), spaces)
    plain = [p for product in eq.terms for p in _expand_operators(product, eq.indices)]
    rules = (frozenset(real), frozenset(symmetric))
    out = []
    for label, result in _result_blocks(eq, table):
        externals = tuple(label.values())
        folded: dict[tuple[_Factor, ...], Fraction] = {}
        for product in plain:
            for coeff, factors in _integrated(product, label, table, rules[1], eq.name):
                key, sign = _canonical_signed(factors, externals, rules)
                if sign:
                    folded[key] = folded.get(key, Fraction(0)) + coeff * sign
        terms = [(key, c) for key, c in folded.items() if c != 0]
        terms.sort(key=lambda item: (_amplitude_count(item[0]), tuple(f[0] for f in item[0]),
                                     item[0], item[1]))
        name = result.name if result is not None else eq.name
        if not terms:
            raise SpinIntegrationError(f"{name}: every term vanishes after spin integration; "
                                       "there is no equation to write for this spin block")
        products = tuple(Product(c, tuple(Tensor(n, b, k) for n, b, k in key))
                         for key, c in terms)
        out.append(Equation(name, products, result, eq.bare))
    return tuple(out)


def canonical_spin_product(product: Product, externals: Sequence[Index] = (), *,
                           real: Collection[str] = ("f", "g"),
                           symmetric: Collection[str] = ()) -> Product | None:
    """The canonical spelling of an operator-free spin-integrated product (tensor names
    per block, :func:`spin_block_name`; the module doc's symmetries), its coefficient
    carrying the spelling's sign; None when the product is zero by those symmetries."""
    if product.operators:
        raise SpinIntegrationError(
            f"canonical_spin_product takes an operator-free product, got {product}")
    factors = [(t.name, t.bra, t.ket) for t in product.factors]
    key, sign = _canonical_signed(factors, tuple(externals),
                                  (frozenset(real), frozenset(symmetric)))
    if not sign:
        return None
    return Product(product.coefficient * sign, tuple(Tensor(n, b, k) for n, b, k in key))


# ------------------------------------------------------------------ blocks and spins
def _check_factor(t: Tensor, where: str) -> None:
    if t.aux or len(t.bra) != len(t.ket):
        raise SpinIntegrationError(
            f"{where}: tensor {t} is not particle-conserving (bra and ket of equal length, no "
            "aux indices); only such tensors are spin-integrated here")
    if any(ix.protos for ix in t.slots):
        raise SpinIntegrationError(f"{where}: tensor {t} has a composite index; spin "
                                   "integration needs plain indices")


def _spaces_of(eq: Equation) -> set[str]:
    out = {ix.space for p in eq.terms for t in p.factors for ix in t.slots}
    return out | {ix.space for ix in eq.indices}


def _result_blocks(eq: Equation, table: dict[str, tuple[str, str]]
                   ) -> list[tuple[dict[Index, Index], Tensor | None]]:
    """Per independent spin block of the result: each result index's spin-space label
    (renumbered per spin space in slot order) and the block's result tensor."""
    if eq.result is None:
        if eq.bare and eq.indices:
            raise SpinIntegrationError(
                f"{eq.name}: a bare expression with free indices {list(map(str, eq.indices))} "
                "has no bra/ket to split into spin blocks; write it as R{bra;ket} = ...")
        return [({}, None)]
    res = eq.result
    if res.aux or len(res.bra) != len(res.ket):
        raise SpinIntegrationError(
            f"{eq.name}: result {res} needs as many bra as ket indices and no aux indices to "
            "be split into spin blocks")
    n = len(res.bra)
    out = []
    for n_alpha in range(n, -1, -1):
        spins = (ALPHA,) * n_alpha + (BETA,) * (n - n_alpha)
        counts: dict[str, int] = {}
        label: dict[Index, Index] = {}
        for ix, spin in zip(res.bra + res.ket, spins + spins):
            space = table[ix.space][spin]
            counts[space] = counts.get(space, 0) + 1
            label[ix] = Index(space, counts[space])
        result = Tensor(spin_block_name(res.name, spins), tuple(label[x] for x in res.bra),
                        tuple(label[x] for x in res.ket))
        out.append((label, result))
    return out


def _integrated(product: Product, externals: dict[Index, Index],
                table: dict[str, tuple[str, str]], symmetric: frozenset[str] = frozenset(),
                where: str = "") -> list[tuple[Fraction, list[_Factor]]]:
    """Block terms of one operator-free product with its result indices at ``externals``
    (each summed index over both spins; assignments under which a factor vanishes left out;
    sorting a ``symmetric`` tensor's slots carries no sign)."""
    labels = sorted({ix for t in product.factors for ix in t.slots} - set(externals))
    # summed labels are renumbered above every external one, so no two labels collide
    offset = 1 + max([ix.number or 0 for ix in labels] + [ix.number or 0 for ix in externals]
                     + [ix.number or 0 for ix in externals.values()])
    spin_of = {ix: _spin_of_label(ix, table) for ix in externals.values()}
    out = []
    for spins in itertools.product((ALPHA, BETA), repeat=len(labels)):
        name = dict(externals)
        for ix, spin in zip(labels, spins):
            lab = Index(table[ix.space][spin], offset + (ix.number or 0))
            name[ix] = lab
            spin_of[lab] = spin
        sign, factors, unbalanced = 1, [], None
        for t in product.factors:
            bra, ket = tuple(name[x] for x in t.bra), tuple(name[x] for x in t.ket)
            sb, sk = [spin_of[x] for x in bra], [spin_of[x] for x in ket]
            if sorted(sb) != sorted(sk):
                if t.name not in symmetric:
                    break                                 # spin not conserved: zero
                unbalanced = t
            pb = sorted(range(len(bra)), key=lambda c: sb[c])
            pk = sorted(range(len(ket)), key=lambda c: sk[c])
            if t.name not in symmetric:
                sign *= _parity(tuple(pb)) * _parity(tuple(pk))
            factors.append((spin_block_name(t.name, sorted(sb)), tuple(bra[c] for c in pb),
                            tuple(ket[c] for c in pk)))
        else:
            if unbalanced is not None:
                raise SpinIntegrationError(
                    f"{where}, term '{product}': the symmetric tensor {unbalanced} would hold "
                    "different spins in its bra and its ket, which has no block here; only "
                    "tensors whose other factors balance their spins are spin-integrated")
            out.append((product.coefficient * sign, factors))
    return out


def _spin_of_label(ix: Index, table: dict[str, tuple[str, str]]) -> int:
    for pair in table.values():
        if ix.space in pair:
            return pair.index(ix.space)
    raise AssertionError(ix)


# ------------------------------------------------------------------ canonical form
def _block_of(name: str, n: int) -> tuple[str, int]:
    """(base name, number of α particles) of a block name with ``n`` particles."""
    base, tail = name[:len(name) - n], name[len(name) - n:]
    return base, tail.count("a")


def _signed_spellings(f: _Factor, rules: tuple[frozenset[str], frozenset[str]]
                      ) -> dict[_Factor, set[int]]:
    """Every spelling of a block factor that denotes the same array entry, with the signs it
    carries (two signs: the entry is zero)."""
    name, bra, ket = f
    n = len(bra)
    real, symmetric = rules
    base, n_alpha = _block_of(name, n)
    swap_sign = 1 if base in symmetric else -1
    groups = [list(range(n_alpha)), list(range(n_alpha, n))]
    moves = []                                         # generators: (apply, sign)
    for group in groups:
        for c, d in zip(group, group[1:]):
            moves.append((lambda b, k, c=c, d=d: (_swap(b, c, d), k), swap_sign))
            moves.append((lambda b, k, c=c, d=d: (b, _swap(k, c, d)), swap_sign))
    if base in real:
        moves.append((lambda b, k: (k, b), 1))
        for group in groups:
            if len(group) == 1:
                c = group[0]
                moves.append((lambda b, k, c=c: (b[:c] + (k[c],) + b[c + 1:],
                                                 k[:c] + (b[c],) + k[c + 1:]), 1))
    seen: dict[_Factor, set[int]] = {f: {1}}
    todo = [(bra, ket, 1)]
    while todo:
        b, k, s = todo.pop()
        for move, sign in moves:
            nb, nk = move(b, k)
            g = (name, nb, nk)
            signs = seen.setdefault(g, set())
            if s * sign not in signs:
                signs.add(s * sign)
                todo.append((nb, nk, s * sign))
    return seen


@functools.lru_cache(maxsize=1 << 16)
def _lowest_spelling(f: _Factor, rules: tuple[frozenset[str], frozenset[str]]
                     ) -> tuple[_Factor, int]:
    """The smallest spelling of ``f`` and its sign (0: the entry is zero); remembered, as
    one canonicalization meets the same factor under many renamings."""
    spellings = _signed_spellings(f, rules)
    low = min(spellings, key=_factor_order)
    signs = spellings[low]
    return low, (next(iter(signs)) if len(signs) == 1 else 0)


def _swap(t: tuple[Index, ...], c: int, d: int) -> tuple[Index, ...]:
    out = list(t)
    out[c], out[d] = out[d], out[c]
    return tuple(out)


def _canonical_signed(factors: Sequence[_Factor], externals: tuple[Index, ...],
                      rules: tuple[frozenset[str], frozenset[str]]
                      ) -> tuple[tuple[_Factor, ...], int]:
    """Smallest spelling over renamings of summed indices and block symmetries, and the sign
    it carries (0: the term is zero by those symmetries)."""
    dummies, targets, spaces = dummy_targets(factors, externals)
    best: tuple[_Factor, ...] | None = None
    best_order: list | None = None
    best_signs: set[int] = set()
    for perms in itertools.product(*(itertools.permutations(targets[s]) for s in spaces)):
        rename = {x: y for s, perm in zip(spaces, perms) for x, y in zip(dummies[s], perm)}
        spelled, sign = [], 1
        for name, bra, ket in factors:
            f = (name, tuple(rename.get(x, x) for x in bra), tuple(rename.get(x, x) for x in ket))
            low, s = _lowest_spelling(f, rules)
            if not s:
                return tuple(sorted((f for f in factors), key=_factor_order)), 0
            spelled.append(low)
            sign *= s
        key = tuple(sorted(spelled, key=_factor_order))
        order = [_factor_order(f) for f in key]
        if best_order is None or order < best_order:
            best, best_order, best_signs = key, order, {sign}
        elif order == best_order:
            best_signs.add(sign)
    assert best is not None
    return best, (best_signs.pop() if len(best_signs) == 1 else 0)
