"""Connected Wick contractions of coupled-cluster projections, enumerated directly.

What: ``project(level, ranks)`` gives the terms of ``<Phi_level| Hbar |0>`` with
``Hbar = exp(-T) H_N exp(T)``, ``H_N = f_pq {p+ q} + 1/4 <pq||rs> {p+ q+ s r}`` and
``T = Σ_r T_r``, ``T_r = 1/(r!)² t{a_1..a_r;i_1..i_r} {a_1+ .. a_r+ i_r .. i_1}``, as
canonical terms with exact rational coefficients; spelled out (every permutation of the
projection indices its own term) or modulo the projection's antisymmetrizer (one term per
orbit, read as ``A{a_1..;i_1..} * term``).

Why: sympy.physics.secondquant's ``wicks`` (derive.py's CCSD route) tries every pairing of
every operator: CCSD takes half a minute and the triples strings (up to 20 operators) are
out of reach. Relative to the Fermi vacuum the projector holds only quasi-annihilators and
every ``T_r`` only quasi-creators, so the nonzero full contractions of
``<Phi| H T..T |0>`` are exactly the matchings of each quasi-creator with a
quasi-annihilator of its space to its left on another vertex (a contraction is then ``+δ``
and the sign of a full contraction is ``(-1)^crossings``). Enumerating only those is exact
and fast; the connected terms (every ``T`` shares a line with ``H``) are ``Hbar``'s, since
``T`` commutes with itself and the BCH series keeps exactly them. That the engine
reproduces the sympy CCSD text byte for byte is one of its tests.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

from ..errors import SequantEvalError
from ..expr import Index

__all__ = ["Factor", "TermKey", "Vertex", "cluster_products", "contractions", "project"]

#: A factor of a term: (tensor name, bra indices, ket indices).
Factor = tuple[str, tuple[Index, ...], tuple[Index, ...]]
#: A canonical term: its factors, sorted (Hamiltonian first, then amplitudes by rank).
TermKey = tuple[Factor, ...]

_SPACES = ("i", "a")         # occupied, virtual


@dataclass(frozen=True)
class Vertex:
    """A normal-ordered operator string with its tensor: ``name{bra;ket}`` over spaces.

    ``ops`` lists the string left to right as (slot, is_creator); slot ``k`` is position
    ``k`` of ``bra + ket``. The projector is the vertex named ``""``, its slots the
    projection's indices.
    """

    name: str
    bra: tuple[str, ...]
    ket: tuple[str, ...]
    ops: tuple[tuple[int, bool], ...]

    @property
    def spaces(self) -> tuple[str, ...]:
        return self.bra + self.ket


def _fock(sp: str, sq: str) -> Vertex:
    return Vertex("f", (sp,), (sq,), ((0, True), (1, False)))


def _two_body(p: str, q: str, r: str, s: str) -> Vertex:
    return Vertex("g", (p, q), (r, s), ((0, True), (1, True), (3, False), (2, False)))


def _cluster(rank: int) -> Vertex:
    """``T_rank``: ``a_1+ .. a_r+ i_r .. i_1``, slots ``t{a..;i..}``."""
    ops = tuple((k, True) for k in range(rank)) + tuple(
        (rank + k, False) for k in reversed(range(rank)))
    return Vertex(f"t{rank}", ("a",) * rank, ("i",) * rank, ops)


def _projector(level: int) -> Vertex:
    """``<Phi_{i_1..}^{a_1..}| = <0| i_1+ .. i_L+ a_L .. a_1``, slots ``{a_1..;i_1..}``."""
    ops = tuple((level + k, True) for k in range(level)) + tuple(
        (k, False) for k in reversed(range(level)))
    return Vertex("", ("a",) * level, ("i",) * level, ops)


def _hamiltonian() -> Iterator[tuple[Vertex, Fraction]]:
    """Every block of ``H_N`` with its prefactor."""
    for sp, sq in itertools.product(_SPACES, repeat=2):
        yield _fock(sp, sq), Fraction(1)
    for spaces in itertools.product(_SPACES, repeat=4):
        yield _two_body(*spaces), Fraction(1, 4)


def cluster_products(level: int, ranks: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Rank tuples (sorted) of the products ``T_r1 .. T_rk`` that reach ``<Phi_level|``:
    at most four (``H`` has four lines), their ranks within ``level ± 2``."""
    for k in range(5):
        for combo in itertools.combinations_with_replacement(sorted(ranks), k):
            if level - 2 <= sum(combo) <= level + 2:
                yield combo


def _quasi_annihilator(space: str, creator: bool) -> bool:
    """Relative to the Fermi vacuum: ``i+`` and ``a`` annihilate quasi-particles."""
    return creator == (space == "i")


def contractions(vertices: Sequence[Vertex]) -> Iterator[tuple[int, list[tuple[int, int]]]]:
    """Full contractions of the product of ``vertices`` (left to right): ``(sign, lines)``
    with each line ``(left op, right op)`` as positions in the concatenated string."""
    ops = [(v, vertex.spaces[slot], creator)
           for v, vertex in enumerate(vertices) for slot, creator in vertex.ops]
    creators = [k for k, (_, sp, cr) in enumerate(ops) if not _quasi_annihilator(sp, cr)]
    for space in _SPACES:
        n_ann = sum(1 for _, sp, cr in ops if sp == space and _quasi_annihilator(sp, cr))
        if n_ann != sum(1 for k in creators if ops[k][1] == space):
            return
    taken = [False] * len(ops)
    lines: list[tuple[int, int]] = []

    def match(n: int) -> Iterator[list[tuple[int, int]]]:
        if n == len(creators):
            yield lines
            return
        r = creators[n]
        vr, sp, _ = ops[r]
        for left in range(r):
            vl, sl, cl = ops[left]
            if taken[left] or vl == vr or sl != sp or not _quasi_annihilator(sl, cl):
                continue
            taken[left] = True
            lines.append((left, r))
            yield from match(n + 1)
            lines.pop()
            taken[left] = False

    for full in match(0):
        crossings = sum(1 for (l1, r1), (l2, r2) in itertools.combinations(full, 2)
                        if l1 < l2 < r1 < r2 or l2 < l1 < r2 < r1)
        yield (-1) ** crossings, list(full)


def _terms(level: int, product: tuple[int, ...]
           ) -> Iterator[tuple[Fraction, list[tuple[str, tuple, tuple]]]]:
    """Connected fully contracted terms of ``<Phi_level| H T_r1 .. T_rk |0> / Π m!``:
    (coefficient, factors) with external slots as Index, summed ones as ("d", space, n)."""
    weight = Fraction(1)
    for rank in set(product):
        weight /= math.factorial(product.count(rank))
    for rank in product:
        weight /= math.factorial(rank) ** 2
    proj = _projector(level)
    external = [Index("a", k + 1) for k in range(level)] + [
        Index("i", k + 1) for k in range(level)]
    for ham, prefactor in _hamiltonian():
        vertices = [proj, ham] + [_cluster(r) for r in product]
        where = [(v, slot) for v, vertex in enumerate(vertices) for slot, _ in vertex.ops]
        for sign, lines in contractions(vertices):
            label: dict[tuple[int, int], object] = {}
            touches_h = [False] * len(vertices)
            for n, (left, right) in enumerate(lines):
                (vl, sl), (vr, sr) = where[left], where[right]
                if vl == 0:
                    lab = external[sl]
                else:
                    lab = ("d", vertices[vl].spaces[sl], n)
                    if vl == 1:
                        touches_h[vr] = True
                label[(vl, sl)] = label[(vr, sr)] = lab
            if not all(touches_h[2:]):
                continue                                  # a disconnected cluster operator
            factors = []
            for v, vertex in enumerate(vertices[1:], start=1):
                slots = [label[(v, k)] for k in range(len(vertex.spaces))]
                factors.append((vertex.name, tuple(slots[:len(vertex.bra)]),
                                tuple(slots[len(vertex.bra):])))
            yield sign * prefactor * weight, factors


def _sorted_with_parity(labels: tuple, key=None) -> tuple[tuple, int]:
    """``labels`` sorted (by ``key``), and the parity of the sort (0 when a label repeats)."""
    order = sorted(range(len(labels)), key=(lambda k: labels[k]) if key is None
                   else (lambda k: key(labels[k])))
    out = tuple(labels[k] for k in order)
    if any(out[k] == out[k + 1] for k in range(len(out) - 1)):
        return out, 0
    inversions = sum(1 for x, y in itertools.combinations(order, 2) if x > y)
    return out, (-1) ** inversions


def _label_order(x) -> tuple:
    """Projection indices (Index) before summed ones (("d", space, n))."""
    return (1, x[1], x[2]) if isinstance(x, tuple) else (0, x.space, x.number)


def _rank(name: str) -> int:
    return int(name[1:]) if name.startswith("t") else 0


class _Canonicalizer:
    """Canonical form of a term: the least key over renamings of the summed indices
    (numbered from ``first_dummy``), every tensor but ``f`` antisymmetric in its bra and in
    its ket. Returns (key, sign) with term = sign * key, sign 0 when the term is its own
    negative (vanishes)."""

    def __init__(self, first_dummy: int) -> None:
        self.first_dummy = first_dummy
        self._memo: dict[tuple, tuple[TermKey, int]] = {}

    def __call__(self, factors: Sequence[tuple[str, tuple, tuple]]) -> tuple[TermKey, int]:
        memo_key, sign = self._prenormal(factors)
        if memo_key not in self._memo:
            self._memo[memo_key] = self._canonical(memo_key)
        key, canonical_sign = self._memo[memo_key]
        return key, sign * canonical_sign

    @staticmethod
    def _prenormal(factors) -> tuple[tuple, int]:
        """An equal rewriting of ``factors`` and its sign, shared by many contractions that
        differ only by line numbering and slot order: factors in a fixed order, the summed
        indices renamed by first appearance, then every antisymmetric slot group sorted."""
        order = sorted(factors, key=lambda f: (_rank(f[0]), f[0]))
        sign = 1
        for sort_slots in (False, True):
            names: dict[object, tuple] = {}
            out = []
            for name, bra, ket in order:
                row = []
                for x in bra + ket:
                    if isinstance(x, tuple):
                        x = names.setdefault(x, ("d", x[1], len(names)))
                    row.append(x)
                b, k = tuple(row[:len(bra)]), tuple(row[len(bra):])
                if sort_slots and name != "f":
                    b, sb = _sorted_with_parity(b, _label_order)
                    k, sk = _sorted_with_parity(k, _label_order)
                    sign *= sb * sk
                out.append((name, b, k))
            order = out
        return tuple(order), sign

    def _canonical(self, factors) -> tuple[TermKey, int]:
        dummies: dict[str, list] = {"i": [], "a": []}
        for _, bra, ket in factors:
            for x in bra + ket:
                if isinstance(x, tuple) and x not in dummies[x[1]]:
                    dummies[x[1]].append(x)
        best: TermKey | None = None
        signs: set[int] = set()
        occ, vir = dummies["i"], dummies["a"]
        for perm_o in itertools.permutations(range(len(occ))):
            for perm_v in itertools.permutations(range(len(vir))):
                names = {s: Index("i", self.first_dummy + n) for s, n in zip(occ, perm_o)}
                names.update({s: Index("a", self.first_dummy + n)
                              for s, n in zip(vir, perm_v)})
                sign = 1
                out = []
                for name, bra, ket in factors:
                    b = tuple(names.get(x, x) for x in bra)
                    k = tuple(names.get(x, x) for x in ket)
                    if name != "f":
                        b, sb = _sorted_with_parity(b)
                        k, sk = _sorted_with_parity(k)
                        sign *= sb * sk
                    out.append((_rank(name), (name, b, k)))
                key = tuple(f for _, f in sorted(out))
                if best is None or key < best:
                    best, signs = key, {sign}
                elif key == best:
                    signs.add(sign)
        assert best is not None
        if len(signs) != 1 or 0 in signs:
            return best, 0
        return best, signs.pop()


def _orbits(terms: dict[TermKey, Fraction], level: int, canonical: _Canonicalizer
            ) -> dict[TermKey, Fraction]:
    """Spelled-out terms of an antisymmetric result, one per orbit under permutations ``g``
    of its projection indices: with ``g·T = s_g m`` for each member ``m`` of ``T``'s orbit,
    ``A m = s_g sgn(g) A T``, so the orbit sums to ``(Σ_m c_m s_g sgn(g)) A T``; written on
    its least member. An orbit whose member is reached with both signs has ``A T = 0``."""
    virt = [Index("a", k + 1) for k in range(level)]
    occ = [Index("i", k + 1) for k in range(level)]
    maps = []
    for pv in itertools.permutations(range(level)):
        for po in itertools.permutations(range(level)):
            mapping = {virt[k]: virt[pv[k]] for k in range(level)}
            mapping.update({occ[k]: occ[po[k]] for k in range(level)})
            maps.append((mapping, _sorted_with_parity(pv)[1] * _sorted_with_parity(po)[1]))

    def relabel(key: TermKey, mapping: dict[Index, Index]) -> list[tuple[str, tuple, tuple]]:
        def one(x: Index):
            if x.number > level:                      # a summed index: free to rename
                return ("d", x.space, x.number)
            return mapping[x]
        return [(name, tuple(map(one, b)), tuple(map(one, k))) for name, b, k in key]

    out: dict[TermKey, Fraction] = {}
    done: set[TermKey] = set()
    for key in sorted(terms):
        if key in done:
            continue
        phase: dict[TermKey, int] = {}
        vanishes = False
        for mapping, parity in maps:
            member, s = canonical(relabel(key, mapping))
            p = s * parity
            if phase.setdefault(member, p) != p:
                vanishes = True
        done.update(phase)
        if vanishes:
            continue
        rep = min(phase)
        total = phase[rep] * sum((terms.get(m, Fraction(0)) * p for m, p in phase.items()),
                                 Fraction(0))
        if total:
            out[rep] = total
    return out


def project(level: int, ranks: Iterable[int], *, antisymmetrize: bool = False,
            first_dummy: int | None = None) -> dict[TermKey, Fraction]:
    """Merged canonical terms of ``<Phi_level| Hbar |0>`` for ``T = Σ_{r in ranks} T_r``.

    ``antisymmetrize``: one term per orbit under permutations of the projection's indices,
    its coefficient the orbit's sum, so that ``R = A{a_1..;i_1..} * Σ terms`` with ``A``
    the normalized antisymmetrizer. Summed indices are numbered from ``first_dummy``
    (default ``level + 1``).
    """
    ranks = tuple(sorted(set(ranks)))
    if not 0 <= level <= 4 or not ranks or any(r < 1 for r in ranks):
        raise SequantEvalError(
            f"project(level={level}, ranks={ranks}): the level is 0..4 and the cluster ranks "
            f"positive integers, e.g. project(3, (1, 2, 3)) for the CCSDT triples residual")
    first = level + 1 if first_dummy is None else first_dummy
    if first <= level:
        raise SequantEvalError(f"first_dummy={first_dummy} would reuse a projection index; "
                               f"number the summed indices from {level + 1} or above")
    canonical = _Canonicalizer(first)
    terms: dict[TermKey, Fraction] = {}
    for product in cluster_products(level, ranks):
        for coeff, factors in _terms(level, product):
            key, sign = canonical(factors)
            if sign:
                terms[key] = terms.get(key, Fraction(0)) + sign * coeff
    terms = {key: c for key, c in terms.items() if c != 0}
    return _orbits(terms, level, canonical) if antisymmetrize else terms
