"""The particle–particle ladder of CCSD over packed pairs of virtuals (PySCF's a ≤ b).

**Spin orbitals.** In R2 the ladder is ``1/2 Σ_cd <ab||cd> t_ij^cd + Σ_cd <ab||cd> t_i^c
t_j^d``. With ``<ab||cd>`` antisymmetric in ``(a, b)`` and in ``(c, d)`` it is

    X_ij^ab = Σ_{c<d} <ab||cd> τ_ij^cd,   τ_ij^cd = t_ij^cd + t_i^c t_j^d − t_i^d t_j^c,

antisymmetric in ``a, b``, so only ``a < b`` need be made: over the pairs ``p = (a < b)``
(a space of its own, extent v(v−1)/2, in row order ``(0,1), (0,2), …, (1,2), …``) one
contraction of a quarter of the ladder's multiply-adds,
``L{p_1;i_1,i_2} = gP{p_1;p_2} * tauP{p_2;i_1,i_2}``; R2 gets ``L`` at ``(a, b)`` and
``−L`` at ``(b, a)``.

**Closed shell.** The ladder is ``Σ_cd g{a,b;c,d} τ{c,d;i,j}`` with ``g{a,b;c,d} =
(ac|bd)`` and ``τ = t2 + t1 t1`` (no antisymmetry). Split ``τ`` into its parts symmetric
and antisymmetric in ``c, d`` (``τ± = (τ ± τ∘(c↔d))/2``); then

    X = Σ_{c≤d} g+{a,b;c,d} τ+{c,d;i,j} + Σ_{c<d} g−{a,b;c,d} τ−{c,d;i,j},

``g± = g{a,b;c,d} ± g{a,b;d,c}`` (``g+`` at ``c = d``: ``g{a,b;c,c}``). The first part is
symmetric in ``a, b`` (real orbitals: ``g{b,a;c,d} = g{a,b;d,c}``), the second
antisymmetric, so they are made over ``q = (a ≤ b)`` (extent v(v+1)/2) and ``p = (a < b)``:
``Lq = gS * tauS``, ``Lp = gA * tauA``, half the ladder's multiply-adds; R2 gets
``Lq + Lp`` at ``(a, b)`` and ``Lq − Lp`` at ``(b, a)``.

Either way the packed products are equations like any other, planned, batched and
budgeted by the evaluator; the packed integrals are made once per set of integrals, the
packed amplitudes at every residual, and the results are added into R2 in place after
the evaluation (:meth:`Ladder.unpack`). This is the restriction PySCF's CCSD codes make
of the ladder, made in the equations: the forest and the planner see an ordinary product
over one more space.
"""
from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import ShapeMismatch, UnsupportedFeature
from ..expr import Equation, parse

__all__ = ["PAIRS", "PAIRS_WITH_DIAGONAL", "Ladder", "SpinOrbitalLadder",
           "ClosedShellLadder", "packed_ladder_equations"]

#: The space of the pairs a < b of virtuals, and of the pairs a ≤ b.
PAIRS, PAIRS_WITH_DIAGONAL = "p", "q"


def packed_ladder_equations(equations, ladder: str, packed: str) -> tuple[Equation, ...]:
    """``equations`` with R2's ladder terms (``ladder``, an R2 equation of them) taken out
    and the ``packed`` equations added; refused where R2 does not hold them as written."""
    (terms,) = parse(ladder)
    if not any(eq.name == "R2" for eq in equations):
        raise UnsupportedFeature("the packed ladder needs an R2 equation")
    out = []
    for eq in equations:
        if eq.name == "R2":
            kept = tuple(t for t in eq.terms if t not in terms.terms)
            if len(eq.terms) - len(kept) != len(terms.terms):
                raise UnsupportedFeature(
                    f"the packed ladder needs R2's ladder written as "
                    f"{ladder.split('= ')[1]}; these equations hold another: evaluate "
                    f"them without packed pairs")
            eq = replace(eq, terms=kept)
        out.append(eq)
    return tuple(out) + tuple(parse(packed))


class Ladder:
    """What a packed ladder reads and how its results join R2, for integrals ``ints``
    (``g`` over ``a``, ``i``); a subclass says which ladder (see the module docstring)."""

    #: R2's ladder terms, as an R2 equation, and the packed equations replacing them.
    ladder: str = ""
    packed: str = ""

    def __init__(self, ints: Any) -> None:
        self.ints = ints
        self.nvir = v = int(ints.extents["a"])
        self._after = np.concatenate([[0], np.cumsum(np.arange(v - 1, 0, -1))])   # a < b
        self._from = np.concatenate([[0], np.cumsum(np.arange(v, 0, -1))])        # a ≤ b

    @staticmethod
    def applies(ints: Any) -> bool:
        """Whether there are pairs ``a < b`` to pack (two virtuals or more; with one the
        ladder runs as the equations write it)."""
        return int(ints.extents["a"]) >= 2

    def rows(self, a: int, diagonal: bool = False) -> slice:
        """The pairs ``(a, b > a)`` (or ``b ≥ a``), contiguous in the packed order."""
        start = int((self._from if diagonal else self._after)[a])
        return slice(start, start + self.nvir - a - (0 if diagonal else 1))

    def equations(self, plain) -> tuple[Equation, ...]:
        """The residual's equations with the ladder packed."""
        return packed_ladder_equations(plain, self.ladder, self.packed)

    def extents(self, extents) -> dict[str, int]:
        """``extents`` with the pair spaces."""
        v = self.nvir
        return {**extents, PAIRS: v * (v - 1) // 2, PAIRS_WITH_DIAGONAL: v * (v + 1) // 2}

    def _amplitudes(self, t: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, type]:
        """``t1[a, i]``, ``t2[a, b, i, j]`` of ``t``, checked against the integrals'
        extents before anything is packed (as the evaluator checks every block it reads),
        and the packed arrays' element type."""
        t1, t2 = np.asarray(t["t1"]), np.asarray(t["t2"])
        v, o = self.nvir, int(self.ints.extents["i"])
        for name, x, spaces, want in (("t1", t1, ("a", "i"), (v, o)),
                                      ("t2", t2, ("a", "a", "i", "i"), (v, v, o, o))):
            if x.shape != want:
                raise ShapeMismatch(f"block {spaces} of tensor {name!r} must have shape "
                                    f"{want}, got {x.shape} (the ladder over packed pairs "
                                    f"reads it)")
        return t1, t2, np.result_type(t1, t2, np.float64)

    def _vvvv(self) -> np.ndarray:
        """The ``g`` block over four virtuals, taken out of the integrals' cache where it
        is there (``take_block``), else made afresh where the integrals can
        (``block_rows``): either way not kept by them, so it is freed once packed; else
        read."""
        take = getattr(self.ints, "take_block", None)
        block = take("g", ("a",) * 4) if take is not None else None
        if block is not None:
            return block
        if hasattr(self.ints, "block_rows"):
            return self.ints.block_rows("g", ("a",) * 4, 0, self.nvir)
        return self.ints.eri(("a",) * 4)

    def _packed(self, full: np.ndarray, sign: int, diagonal: bool) -> np.ndarray:
        """``g{a,b;c,d} + sign·g{a,b;d,c}`` (``sign`` 0: ``g`` alone) of ``full`` (the
        ``vvvv`` block) over the pairs ``a < b``, ``c < d`` (``diagonal``: ``a ≤ b``,
        ``c ≤ d``, at ``c = d`` ``g`` once), row ``a`` by row; read-only."""
        v, k = self.nvir, 0 if diagonal else 1
        rows, cols = np.triu_indices(v, k)
        flat = rows * v + cols
        n = len(rows)
        out = np.empty((n, n))
        for a in range(v - k):
            part = full[a, a + k:]
            if sign:
                part = part + sign * part.transpose(0, 2, 1)
            np.take(part.reshape(v - a - k, v * v), flat, axis=1,
                    out=out[self.rows(a, diagonal)])
        if diagonal and sign:
            out[:, self._from[:v]] *= 0.5            # c = d: g{a,b;c,c} once, not twice
        out.setflags(write=False)
        return out

    def base_tensors(self) -> dict[str, Any]:
        """The packed integrals, as the residual reads them."""
        raise NotImplementedError

    def amplitude_tensors(self, t: dict[str, np.ndarray]) -> dict[str, Any]:
        """The packed amplitudes of ``t`` (``t1[a, i]``, ``t2[a, b, i, j]``)."""
        raise NotImplementedError

    def unpack(self, r2: np.ndarray, out: dict[str, Any]) -> np.ndarray:
        """The packed results of ``out`` (popped) added into ``r2`` in place."""
        raise NotImplementedError


class SpinOrbitalLadder(Ladder):
    """The spin-orbital ladder over ``a < b`` (``<pq||rs>`` integrals)."""

    ladder = ("R2{a_1,a_2;i_1,i_2} = 1/2 g{a_1,a_2;a_3,a_4} * t2{a_3,a_4;i_1,i_2}"
              " + g{a_1,a_2;a_3,a_4} * t1{a_3;i_1} * t1{a_4;i_2}")
    packed = "L{p_1;i_1,i_2} = gP{p_1;p_2} * tauP{p_2;i_1,i_2}"

    @cached_property
    def integrals(self) -> np.ndarray:
        """``gP[p, q] = <ab||cd>`` for ``p = (a < b)``, ``q = (c < d)``."""
        return self._packed(self._vvvv(), 0, diagonal=False)

    def base_tensors(self) -> dict[str, Any]:
        return {"gP": {(PAIRS, PAIRS): self.integrals}}

    def amplitude_tensors(self, t: dict[str, np.ndarray]) -> dict[str, Any]:
        """``tauP[p, i, j] = τ_ij^ab`` for ``p = (a < b)``, made row ``a`` by row."""
        t1, t2, dtype = self._amplitudes(t)
        o = t1.shape[1]
        tau = np.empty((self.extents({})[PAIRS], o, o), dtype)
        for a in range(self.nvir - 1):
            at = tau[self.rows(a)]
            np.copyto(at, t2[a, a + 1:])
            at += t1[a][None, :, None] * t1[a + 1:, None, :]
            at -= t1[a + 1:, :, None] * t1[a][None, None, :]
        return {"tauP": {(PAIRS, "i", "i"): tau}}

    def unpack(self, r2: np.ndarray, out: dict[str, Any]) -> np.ndarray:
        """``r2[a, b] += L[p]``, ``r2[b, a] −= L[p]`` for ``p = (a < b)``, row by row."""
        packed = out.pop("L")
        for a in range(self.nvir - 1):
            part = packed[self.rows(a)]
            r2[a, a + 1:] += part
            r2[a + 1:, a] -= part
        return r2


class ClosedShellLadder(Ladder):
    """The closed-shell ladder over ``a ≤ b`` and ``a < b`` (``g{p,q;r,s} = (pr|qs)``)."""

    ladder = ("R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;a_3,a_4} * t2{a_3,a_4;i_1,i_2}"
              " + g{a_1,a_2;a_3,a_4} * t1{a_3;i_1} * t1{a_4;i_2}")
    packed = ("Lq{q_1;i_1,i_2} = gS{q_1;q_2} * tauS{q_2;i_1,i_2}\n"
              "Lp{p_1;i_1,i_2} = gA{p_1;p_2} * tauA{p_2;i_1,i_2}")

    @cached_property
    def integrals(self) -> tuple[np.ndarray, np.ndarray]:
        """``(g+, g−)`` over ``a ≤ b, c ≤ d`` and ``a < b, c < d``."""
        full = self._vvvv()
        return self._packed(full, 1, diagonal=True), self._packed(full, -1, diagonal=False)

    def base_tensors(self) -> dict[str, Any]:
        plus, minus = self.integrals
        return {"gS": {(PAIRS_WITH_DIAGONAL,) * 2: plus}, "gA": {(PAIRS,) * 2: minus}}

    def amplitude_tensors(self, t: dict[str, np.ndarray]) -> dict[str, Any]:
        """``τ±`` over ``c ≤ d`` and ``c < d``, ``τ = t2 + t1 t1``, row ``c`` by row."""
        t1, t2, dtype = self._amplitudes(t)
        o = t1.shape[1]
        sizes = self.extents({})
        plus = np.empty((sizes[PAIRS_WITH_DIAGONAL], o, o), dtype)
        minus = np.empty((sizes[PAIRS], o, o), dtype)
        for c in range(self.nvir):
            right = t2[c, c:] + t1[c][None, :, None] * t1[c:, None, :]      # τ{c,d≥c}
            left = t2[c:, c] + t1[c:, :, None] * t1[c][None, None, :]       # τ{d≥c,c}
            at = plus[self.rows(c, diagonal=True)]
            np.add(right, left, out=at)
            at *= 0.5
            if c < self.nvir - 1:
                at = minus[self.rows(c)]
                np.subtract(right[1:], left[1:], out=at)
                at *= 0.5
        return {"tauS": {(PAIRS_WITH_DIAGONAL, "i", "i"): plus},
                "tauA": {(PAIRS, "i", "i"): minus}}

    def unpack(self, r2: np.ndarray, out: dict[str, Any]) -> np.ndarray:
        """``r2[a, b] += Lq + Lp``, ``r2[b, a] += Lq − Lp`` (``a < b``), ``r2[a, a] +=
        Lq``, row by row."""
        plus, minus = out.pop("Lq"), out.pop("Lp")
        for a in range(self.nvir):
            sym = plus[self.rows(a, diagonal=True)]
            r2[a, a] += sym[0]
            if a < self.nvir - 1:
                anti = minus[self.rows(a)]
                r2[a, a + 1:] += sym[1:]
                r2[a, a + 1:] += anti
                r2[a + 1:, a] += sym[1:]
                r2[a + 1:, a] -= anti
        return r2
