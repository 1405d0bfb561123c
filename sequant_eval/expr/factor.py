"""Common-factor extraction: ``Σ_k c_k·X_k·B = (Σ_k c_k·X_k)·B`` with ``W = Σ_k c_k·X_k`` named.

The forest shares equal contractions, but it cannot merge *different* contractions that end
in the same factor read the same way. Closed-shell CCSD is full of them: ten ring terms of
``R2`` end in ``t2`` or ``u2`` contracted over one (virtual, occupied) pair, each an
o³v³ contraction. Summing what multiplies the common factor first (``W``, an o²v² array)
and contracting once is what hand-written codes call the ring, ladder and Fock
intermediates; here they are found from the equations.

For each term and each factor ``B`` the rest of the product is ``X``; terms whose ``B`` has
the same name and whose slots are read the same way (each slot either the same result
index or summed against ``X``) form a group. ``W``'s indices are ``X``'s result indices (in
result order) and then ``B``'s summed indices (in slot order). A group is merged when
the flops of its terms, each contracted in its best order, exceed those of building
``W`` plus the one contraction ``W·B``. Which merges, in which order: a beam search over
merge sequences (each kept plan extended by its best few merges, the cheapest few plans
kept; a greedy "largest saving first" can hand a term to one group that another needed
more), then the same greedily inside each ``W``. A ``W`` bigger than the equation's
result is never made (it would be held between stages). A ``W`` equal to an earlier one
but for the order of its indices (a mirror term's group) is that one, read transposed, so
the forest still shares the contraction.

Symmetries are the caller's to declare (``symmetric``, ``real``, ``hermitian``: which
spellings of a tensor are one entry; ``mirrored``: which equations equal their mirror
image); nothing is assumed, so an undeclared symmetry only costs merges, while a wrongly
declared one gives wrong equations.

The result is the intermediate equations, each before its first reader, then the given
equations rewritten; equations read earlier results by name (see :mod:`sequant_eval.api.staged`).
"""
from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import prod

import opt_einsum

from .index import Index, check_extents, mode_space
from .merge_search import HOLDER, plan_terms, search
from ..errors import InputTypeError, PolicyError, UnknownSpace
from ..memo import remembered
from .printer import to_text
from .spintrace import _canonical_factors, _symmetric_spellings
from .terms import Equation, Product, Tensor, index_counts

__all__ = ["factor_common"]

_OPTIMAL_UP_TO = 5


@dataclass(frozen=True)
class _Candidate:
    """Term number ``term`` read as ``coefficient · X · B``."""

    term: int
    b: Tensor                       # B, in the spelling the key was taken from
    rest: tuple[Tensor, ...]        # X
    interface: tuple[Index, ...]    # W's indices as this term labels them
    own: int = 0                    # flops of the whole term in its best order
    build: int = 0                  # flops of X in its best order (into W's layout)


def _beam_width(beam: object) -> int:
    """``beam`` checked: an integer >= 1 (InputTypeError for another type, PolicyError for
    0 or less)."""
    if isinstance(beam, bool) or not hasattr(beam, "__index__"):
        raise InputTypeError(f"factor_common: beam must be an integer >= 1 (the search "
                             f"width; 1 is greedy), got {type(beam).__name__} {beam!r}")
    if beam.__index__() < 1:
        raise PolicyError(f"factor_common: beam={beam} must be >= 1 (the search width; 1 is "
                          "greedy, 8 the default)")
    return beam.__index__()


def factor_common(equations: str | Equation | Sequence[Equation], extents: Mapping[str, int], *,
                  prefix: str = "W", symmetric: Collection[str] = (),
                  real: Collection[str] = (), hermitian: Collection[str] = (),
                  mirrored: Collection[str] = (), beam: int = 8) -> tuple[Equation, ...]:
    """Equations with common factors pulled out into named intermediates.

    Parameters
    ----------
    equations
        Equations (text, an Equation or a sequence of them) over plain indices, e.g.
        spin-traced or spin-orbital; equations with operators, aux or composite indices
        are returned as they are.
    extents
        Space → extent; the flop counts that decide each merge use them.
    prefix
        Intermediates are named ``<prefix>1``, ``<prefix>2``, ... (skipping any name a
        tensor or equation already has).
    symmetric
        Tensors with particle symmetry (bra and ket columns permuted together give the
        same entry, ``t2{a,b;i,j} = t2{b,a;j,i}``); two such spellings of a factor are then
        read as one. Other tensors are taken as written.
    real, hermitian
        Of those, the ones that also have the per-column (``real``: ``g`` of real
        orbitals) or the whole (``hermitian``: ``L``) bra/ket swap symmetry.
    mirrored
        Equations known to equal their mirror image (result columns swapped), e.g.
        closed-shell ``R2`` after an exchange fold, whose terms no longer show it.
    beam
        Width of the search over merge orders for the given equations (1: greedy); the
        intermediates' own equations are factored greedily.

    Returns
    -------
    The intermediates (each before the first equation that reads it), then ``equations``
    in their order, rewritten.
    """
    beam = _beam_width(beam)
    equations = _equations(equations)
    extents = check_extents(extents)
    for eq in equations:
        for p in eq.terms:
            for t in p.factors:
                for ix in t.slots:
                    if mode_space(ix) not in extents:
                        raise UnknownSpace(
                            f"{eq.name}: index {ix} of {t.name} is in space "
                            f"{mode_space(ix)!r}, which has no extent (known: "
                            f"{', '.join(extents) or 'none'}); the merge decisions need one")
    key = (to_text(equations), tuple(sorted(extents.items())), prefix,
           *(tuple(sorted(s)) for s in (symmetric, real, hermitian, mirrored)), beam)
    return remembered("factor_common", key, lambda: _factor(
        equations, extents, prefix, symmetric, real, hermitian, mirrored, beam))


def _factor(equations, extents, prefix, symmetric, real, hermitian, mirrored, beam):
    taken = {eq.name for eq in equations} | {
        t.name for eq in equations for p in eq.terms for t in p.factors}
    state = _State(extents, prefix, taken, frozenset(symmetric) | frozenset(real) |
                   frozenset(hermitian), frozenset(real), frozenset(hermitian),
                   frozenset(mirrored), beam)
    rewritten = [state.factor(eq) for eq in equations]
    return tuple(state.ordered()) + tuple(rewritten)


class _State:
    def __init__(self, extents, prefix, taken, symmetric, real, hermitian, mirrored,
                 beam: int = 1) -> None:
        self.mirrored = mirrored
        self.beam = beam
        self.inputs = frozenset(taken)          # every tensor that is not an intermediate
        self.extents = extents
        self.prefix = prefix
        self.taken = set(taken)
        self.real, self.hermitian = real, hermitian
        self.symmetric = symmetric             # tensors with particle symmetry
        self.defined: list[Equation] = []      # intermediates, creation order
        self.contents: dict[tuple, str] = {}   # canonical content → intermediate name
        self.counter = 0
        self.costs: dict[tuple, int] = {}      # (factors, output) → flops, searched once
        self.readings: dict[tuple, tuple] = {}  # (term, externals) → its X·B readings
        self.spelled: dict[tuple, tuple] = {}   # (X, W's indices) → X's canonical spelling

    # ----------------------------------------------------------------- costs
    def size(self, ix: Index) -> int:
        return self.extents[mode_space(ix)]

    def cost(self, factors: Sequence[Tensor], output: Sequence[Index]) -> int:
        """Flops (2 per multiply-add) of the best binary order of ``factors`` → ``output``."""
        if len(factors) < 2:
            return 0
        key = (tuple(factors), tuple(output))
        if key not in self.costs:
            self.costs[key] = self._path_cost(factors, output)
        return self.costs[key]

    def _path_cost(self, factors: Sequence[Tensor], output: Sequence[Index]) -> int:
        labels = sorted({ix for t in factors for ix in t.slots})
        sym = {ix: opt_einsum.get_symbol(k) for k, ix in enumerate(labels)}
        spec = (",".join("".join(sym[ix] for ix in t.slots) for t in factors) + "->"
                + "".join(sym[ix] for ix in output))
        shapes = [tuple(self.size(ix) for ix in t.slots) for t in factors]
        strategy = "optimal" if len(factors) <= _OPTIMAL_UP_TO else "dp"
        _, info = opt_einsum.contract_path(spec, *shapes, shapes=True, optimize=strategy)
        return int(info.opt_cost)

    # ----------------------------------------------------------------- grouping
    def candidates(self, k: int, p: Product, externals: tuple[Index, ...]):
        """Every way of reading term ``k`` as ``X · B``: (key, candidate)."""
        memo = (p, externals)
        if memo not in self.readings:
            self.readings[memo] = tuple(self._readings(p, externals))
        for key, b, rest, iface, own, build in self.readings[memo]:
            yield key, _Candidate(k, b, rest, iface, own, build)

    def _readings(self, p: Product, externals: tuple[Index, ...]):
        if p.operators or len(p.factors) < 2:
            return
        counts = index_counts(p)
        if any(ix.protos for ix in counts) or any(
                counts[ix] != 1 for ix in externals if ix in counts):
            return
        if any(n != 2 for ix, n in counts.items() if ix not in externals):
            return
        seen = set()
        for pos, b in enumerate(p.factors):
            rest = p.factors[:pos] + p.factors[pos + 1:]
            if any(t.name not in self.inputs for t in rest):
                continue                        # W is made of input tensors only
            best = self.key_of(b, externals)
            if best is None:
                continue
            key, spelled, summed = best
            if key in seen:                     # t1·t1: one reading per distinct key
                continue
            seen.add(key)
            iface = tuple(ix for ix in externals if ix not in spelled.slots) + summed
            yield (key, spelled, rest, iface, self.cost(p.factors, externals),
                   self.cost(rest, iface))

    def key_of(self, b: Tensor, externals: tuple[Index, ...]):
        """``(key, spelling, summed indices)`` of factor ``b``: the smallest over its
        symmetric spellings of how each slot is read (a result position, or the n-th
        summed index); None for a trace inside ``b``."""
        xpos = {ix: n for n, ix in enumerate(externals)}
        best = None
        for name, bra, ket in self.spellings(b):
            spelled = Tensor(name, bra, ket)
            summed: list[Index] = []
            sig: list[int] | None = []
            for ix in spelled.slots:
                if ix in xpos:
                    sig.append(xpos[ix])
                elif ix in summed:
                    sig = None
                    break
                else:
                    summed.append(ix)
                    sig.append(-1 - summed.index(ix))
            if sig is None:
                continue
            key = (name, len(bra), len(ket), tuple(sig))
            if best is None or key < best[0]:
                best = (key, spelled, tuple(summed))
        return best

    def spellings(self, t: Tensor):
        """Every spelling of ``t`` that denotes the same entry (just ``t`` unless it is
        named symmetric)."""
        return self.spell((t.name, t.bra, t.ket)) if not t.aux else [(t.name, t.bra, t.ket)]

    def spell(self, f):
        name, bra, ket = f
        if name not in self.symmetric or len(bra) != len(ket):
            return [f]
        return _symmetric_spellings(f, name in self.real, name in self.hermitian)

    def factor(self, eq: Equation, width: int | None = None) -> Equation:
        """``eq`` with every profitable group merged; intermediates recorded.

        When ``eq`` is its own mirror image (its terms map onto themselves when its result
        columns are swapped, as ``R2`` is) every term is kept beside its image, and a group
        merges together with its mirror group, each member's image in the other: the second
        ``W`` is the first read transposed, so the terms stay mirror pairs and the forest
        keeps sharing each pair's contraction."""
        if any(p.operators or any(t.aux or any(ix.protos for ix in t.slots) for t in p.factors)
               for p in eq.terms):
            return eq       # operators, aux and composite indices: left as they are
        externals = eq.indices
        limit = prod(self.size(ix) for ix in externals) if externals else 1
        mirror = self.mirror_of(eq)
        terms = list(eq.terms)
        partner: list[int] | None = None
        if mirror is not None:
            terms, partner = self.symmetrized(terms, externals, mirror)
        plan = search(self, terms, partner, externals, mirror, limit,
                      self.beam if width is None else width)
        terms = plan_terms(self, plan)
        return Equation(eq.name, tuple(self.combined(terms, externals)), eq.result, eq.bare)

    def combined(self, terms: list[Product], externals: tuple[Index, ...]) -> list[Product]:
        """Equal terms as one (the halves of a self-image term that joined no group), in
        first-appearance order and spelling; terms that cancel are dropped."""
        order: list[tuple] = []
        first: dict[tuple, Product] = {}
        total: dict[tuple, Fraction] = {}
        for p in terms:
            factors = [(t.name, t.bra, t.ket) for t in p.factors]
            key = _canonical_factors(factors, externals, self.real, self.hermitian, self.spell)
            if key not in first:
                order.append(key)
                first[key] = p
                total[key] = Fraction(0)
            total[key] += p.coefficient
        return [Product(total[k], first[k].factors) for k in order if total[k] != 0]

    def gain(self, terms, members, externals, made: bool = False) -> int:
        """Flops saved by merging ``members`` (``made``: their ``W`` exists already)."""
        before = sum(c.own for c in members)
        build = 0 if made else sum(c.build for c in members)
        final = self.cost((Tensor("W", members[0].interface), members[0].b), externals)
        return before - build - final

    def mirror_of(self, eq: Equation) -> dict[Index, Index] | None:
        """The relabeling that swaps the result's two columns, if ``eq`` is named as
        mirror-symmetric or its terms map onto themselves under it; else None."""
        res = eq.result
        if res is None or len(res.bra) != 2 or len(res.ket) != 2 or res.aux or any(
                p.operators for p in eq.terms):
            return None
        if any(t.name not in self.inputs for p in eq.terms for t in p.factors):
            return None
        swap = {res.bra[0]: res.bra[1], res.bra[1]: res.bra[0],
                res.ket[0]: res.ket[1], res.ket[1]: res.ket[0]}
        if eq.name in self.mirrored:
            return swap
        plain = self.canonical(list(eq.terms), eq.indices, {})
        return swap if self.canonical(list(eq.terms), eq.indices, swap) == plain else None

    def symmetrized(self, terms: list[Product], externals: tuple[Index, ...],
                    mirror: dict[Index, Index]) -> tuple[list[Product], list[int]]:
        """The terms as mirror pairs, and each term's partner (its image).

        A term whose image is its own (``g·t2`` ladder) is split into two halves, so that
        each half can join a different group; so is one whose image is missing (an
        exchange fold can pair terms across the mirror): itself and its image, each with
        half the coefficient. Exact for a result equal to its mirror image."""
        def key(p: Product, relabel) -> tuple:
            return self.canonical([Product(Fraction(1), p.factors)], externals, relabel)

        def image(p: Product) -> Product:
            return Product(p.coefficient, tuple(
                Tensor(t.name, tuple(mirror.get(x, x) for x in t.bra),
                       tuple(mirror.get(x, x) for x in t.ket)) for t in p.factors))

        index = {key(p, {}): k for k, p in enumerate(terms)}
        out: list[Product] = []
        partner: list[int] = []
        done: set[int] = set()
        for k, p in enumerate(terms):
            if k in done:
                continue
            j = index.get(key(p, mirror))
            done.add(k)
            if j is not None and j != k and j not in done and terms[j].coefficient == p.coefficient:
                done.add(j)
                out += [p, terms[j]]
            else:
                half = Product(p.coefficient / 2, p.factors)
                out += [half, image(half)]
            partner += [len(out) - 1, len(out) - 2]
        return out, partner

    def mirror_key(self, cand: _Candidate, mirror: dict[Index, Index],
                   externals: tuple[Index, ...]) -> tuple:
        """The key the mirror image of ``cand``'s term is grouped under."""
        b = cand.b
        swapped = Tensor(b.name, tuple(mirror.get(x, x) for x in b.bra),
                         tuple(mirror.get(x, x) for x in b.ket))
        return self.key_of(swapped, externals)[0]

    def merge(self, terms: list[Product], partner, members: list[_Candidate],
              twin: list[_Candidate] | None, pending: tuple):
        """Replace the group's terms (and its twin's) by ``c · W · B`` with ``W`` a
        placeholder recorded in ``pending`` (interned when the search is done). The two
        new terms are partners; a self-mirror group's is its own."""
        made, pending = self.merged(terms, members, pending, build=True)
        made = [made]
        if twin:
            second, pending = self.merged(terms, twin, pending, build=False)
            made.append(second)
        made = [p for p in made if p is not None]     # a W whose terms cancel: all gone
        dropped = {c.term for c in members} | {c.term for c in (twin or ())}
        kept = [k for k in range(len(terms)) if k not in dropped]
        out = [terms[k] for k in kept] + made
        if partner is None:
            return out, None, pending
        new = {old: n for n, old in enumerate(kept)}
        pairs = [new.get(partner[k], -1) for k in kept]
        n = len(kept)
        pairs += {0: [], 1: [n], 2: [n + 1, n]}[len(made)]
        if (twin and len(made) == 1) or any(x < 0 for x in pairs):
            return out, None, pending           # a partner merged away alone: stop pairing
        return out, pairs, pending

    def merged(self, terms: list[Product], members: list[_Candidate], pending: tuple,
               build: bool):
        """``(c · W{...} · B, pending + W)`` for one group, ``W`` a placeholder over its
        content; ``(None, pending)`` when the members' cofactors cancel. ``build``: the
        W's flops count (a twin's W is the first one read transposed)."""
        lead = members[0]
        scale = terms[lead.term].coefficient
        iface = _fresh_labels(tuple(ix.space for ix in lead.interface))
        content: dict[tuple, Fraction] = {}
        cost = 0
        for c in members:
            memo = (c.rest, c.interface)
            if memo not in self.spelled:
                rename = _renaming(c.rest, c.interface, iface)
                factors = [(t.name, tuple(rename[x] for x in t.bra),
                            tuple(rename[x] for x in t.ket)) for t in c.rest]
                self.spelled[memo] = _canonical_factors(factors, iface, self.real,
                                                        self.hermitian, self.spell)
            k = self.spelled[memo]
            content[k] = content.get(k, Fraction(0)) + terms[c.term].coefficient / scale
            cost += self.cost(c.rest, c.interface) if build else 0
        products = tuple(Product(c, tuple(Tensor(n, b, k) for n, b, k in key))
                         for key, c in content.items() if c != 0)
        if not products:
            return None, pending
        holder = f"{HOLDER}{len(pending)}"
        w = Tensor(holder, tuple(lead.interface))
        return Product(scale, (w, lead.b)), pending + ((holder, products, iface, cost),)

    def intern(self, content: list[Product], iface: tuple[Index, ...]):
        """The intermediate whose terms are ``content`` (free indices ``iface``), made if
        new; and ``order``: the reader puts its interface index ``order[m]`` on slot m."""
        spaces = tuple(ix.space for ix in iface)
        for sigma in _space_permutations(spaces):
            relabel = {iface[k]: iface[sigma[k]] for k in range(len(iface))}
            key = (spaces, self.canonical(content, iface, relabel))
            name = self.contents.get(key)
            if name is not None:
                inverse = [0] * len(sigma)
                for k, s in enumerate(sigma):
                    inverse[s] = k
                return name, tuple(inverse)
        name = self.new_name()
        self.contents[(spaces, self.canonical(content, iface, {}))] = name
        body = Equation(name, tuple(content), Tensor(name, iface))
        self.defined.append(self.factor(body, width=1))     # W's are small: greedy
        return name, tuple(range(len(iface)))

    def canonical(self, content: list[Product], iface, relabel) -> tuple:
        terms: dict[tuple, Fraction] = {}
        for p in content:
            factors = [(t.name, tuple(relabel.get(x, x) for x in t.bra),
                        tuple(relabel.get(x, x) for x in t.ket)) for t in p.factors]
            key = _canonical_factors(factors, tuple(iface), self.real, self.hermitian,
                                     self.spell)
            terms[key] = terms.get(key, Fraction(0)) + p.coefficient
        return tuple(sorted((k, c) for k, c in terms.items() if c != 0))

    def new_name(self) -> str:
        while True:
            self.counter += 1
            name = f"{self.prefix}{self.counter}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def ordered(self) -> list[Equation]:
        """Intermediates with each after every intermediate it reads."""
        by_name = {eq.name: eq for eq in self.defined}
        out: list[Equation] = []
        done: set[str] = set()

        def visit(eq: Equation) -> None:
            if eq.name in done:
                return
            done.add(eq.name)
            for p in eq.terms:
                for t in p.factors:
                    if t.name in by_name:
                        visit(by_name[t.name])
            out.append(eq)

        for eq in self.defined:
            visit(eq)
        return out


def _equations(given) -> tuple[Equation, ...]:
    """Text, one Equation or a sequence of them, as a tuple (anything else: typed)."""
    if isinstance(given, str):
        from .parser import parse

        return tuple(parse(given))
    if isinstance(given, Equation):
        return (given,)
    items = tuple(given) if isinstance(given, (list, tuple)) else None
    if items is None or not all(isinstance(e, Equation) for e in items):
        raise InputTypeError(f"factor_common takes equation text, an Equation or a sequence "
                             f"of them (from se.parse), got {type(given).__name__}")
    return items


def _fresh_labels(spaces: Sequence[str]) -> tuple[Index, ...]:
    counts: dict[str, int] = {}
    out = []
    for s in spaces:
        counts[s] = counts.get(s, 0) + 1
        out.append(Index(s, counts[s]))
    return tuple(out)


def _renaming(factors: Sequence[Tensor], interface: Sequence[Index],
              iface: Sequence[Index]) -> dict[Index, Index]:
    """Interface labels → ``iface``; every other label to a number no ``iface`` uses."""
    rename = dict(zip(interface, iface))
    top = {s: max((ix.number or 0) for ix in iface if ix.space == s) for s in
           {ix.space for ix in iface}}
    for ix in sorted({x for t in factors for x in t.slots}):
        if ix not in rename:
            top[ix.space] = top.get(ix.space, 0) + 1
            rename[ix] = Index(ix.space, top[ix.space])
    return rename


def _space_permutations(spaces: tuple[str, ...]):
    """Permutations of positions that map every position to one of the same space
    (identity first)."""
    by_space: dict[str, list[int]] = {}
    for k, s in enumerate(spaces):
        by_space.setdefault(s, []).append(k)
    names = sorted(by_space)
    for choice in itertools.product(*(itertools.permutations(by_space[s]) for s in names)):
        sigma = list(range(len(spaces)))
        for s, perm in zip(names, choice):
            for src, dst in zip(by_space[s], perm):
                sigma[src] = dst
        yield tuple(sigma)
