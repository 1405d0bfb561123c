"""The particle–particle ladder of spin-orbital CCSD over packed pairs of virtuals.

In R2 the ladder is ``1/2 Σ_cd <ab||cd> t_ij^cd + Σ_cd <ab||cd> t_i^c t_j^d``. With
``<ab||cd>`` antisymmetric in ``(a, b)`` and in ``(c, d)`` it is

    X_ij^ab = Σ_{c<d} <ab||cd> τ_ij^cd,   τ_ij^cd = t_ij^cd + t_i^c t_j^d − t_i^d t_j^c,

antisymmetric in ``a, b``, so only ``a < b`` need be made. Over the pairs ``p = (a < b)``
of virtuals, a space of its own (``p``, extent v(v−1)/2, in row order: ``(0,1), (0,2), …,
(1,2), …``), that is one contraction of a quarter of the ladder's multiply-adds,

    L{p_1;i_1,i_2} = gP{p_1;p_2} * tauP{p_2;i_1,i_2},

evaluated, planned and budgeted like any other equation; ``R2`` then gets ``L`` at
``(a, b)`` and ``−L`` at ``(b, a)`` (:meth:`PackedLadder.unpack`). ``gP`` (the integrals
over both pairs) is packed once per set of integrals, ``tauP`` at every residual. This is
PySCF's ``a < b`` restriction of the ladder, made in the equations: the forest and the
planner see an ordinary product over one more space.
"""
from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import UnsupportedFeature
from ..expr import Equation, parse

__all__ = ["PAIR_SPACE", "PackedLadder", "packed_ladder_equations"]

#: The space of the packed pairs of virtuals.
PAIR_SPACE = "p"

#: The ladder's terms in the spin-orbital R2 (``data/ccsd_so.txt``) and what replaces them.
_LADDER = ("R2{a_1,a_2;i_1,i_2} = 1/2 g{a_1,a_2;a_3,a_4} * t2{a_3,a_4;i_1,i_2}"
           " + g{a_1,a_2;a_3,a_4} * t1{a_3;i_1} * t1{a_4;i_2}")
_PACKED = "L{p_1;i_1,i_2} = gP{p_1;p_2} * tauP{p_2;i_1,i_2}"


def packed_ladder_equations(equations) -> tuple[Equation, ...]:
    """``equations`` with R2's two ladder terms taken out and ``L`` (the ladder over
    packed pairs) added; refused where R2 does not hold them as the spin-orbital CCSD
    text writes them."""
    (ladder,) = parse(_LADDER)
    out = []
    for eq in equations:
        if eq.name == "R2":
            kept = tuple(t for t in eq.terms if t not in ladder.terms)
            if len(eq.terms) - len(kept) != len(ladder.terms):
                raise UnsupportedFeature(
                    "the packed ladder needs R2's ladder written as the spin-orbital CCSD "
                    f"text writes it ({_LADDER.split('= ')[1]}); these equations hold "
                    "another: evaluate them without packed pairs")
            eq = replace(eq, terms=kept)
        out.append(eq)
    if not any(eq.name == "R2" for eq in equations):
        raise UnsupportedFeature("the packed ladder needs an R2 equation")
    return tuple(out) + tuple(parse(_PACKED))


class PackedLadder:
    """What the packed ladder reads and how its result joins R2, for spin-orbital
    integrals ``ints`` (``f``, ``g = <pq||rs>`` over ``i``, ``a``)."""

    def __init__(self, ints: Any) -> None:
        self.ints = ints
        self.nvir = int(ints.extents["a"])
        self.starts = np.concatenate([[0], np.cumsum(np.arange(self.nvir - 1, 0, -1))])

    @property
    def npair(self) -> int:
        """v(v−1)/2, the extent of the pair space."""
        return self.nvir * (self.nvir - 1) // 2

    def equations(self, plain) -> tuple[Equation, ...]:
        """The residual's equations with the ladder packed."""
        return packed_ladder_equations(plain)

    def extents(self, extents) -> dict[str, int]:
        """``extents`` with the pair space."""
        return {**extents, PAIR_SPACE: self.npair}

    def _rows(self, a: int) -> slice:
        """The pairs ``(a, b > a)``: contiguous in the packed order."""
        return slice(int(self.starts[a]), int(self.starts[a]) + self.nvir - 1 - a)

    @cached_property
    def integrals(self) -> np.ndarray:
        """``gP[p, q] = <ab||cd>`` for ``p = (a < b)``, ``q = (c < d)``, read-only."""
        v = self.nvir
        full = self.ints.eri(("a",) * 4)
        rows, cols = np.triu_indices(v, 1)
        flat = rows * v + cols
        out = np.empty((self.npair, self.npair))
        for a in range(v - 1):
            np.take(full[a, a + 1:].reshape(v - 1 - a, v * v), flat, axis=1,
                    out=out[self._rows(a)])
        out.setflags(write=False)
        return out

    def base_tensors(self) -> dict[str, Any]:
        """The packed integrals, as the residual reads them."""
        return {"gP": {(PAIR_SPACE, PAIR_SPACE): self.integrals}}

    def amplitude_tensors(self, t: dict[str, np.ndarray]) -> dict[str, Any]:
        """``tauP[p, i, j] = τ_ij^ab`` for ``p = (a < b)`` from ``t1[a, i]``,
        ``t2[a, b, i, j]`` (the solver's layouts), made row ``a`` by row."""
        t1, t2 = t["t1"], t["t2"]
        o = t1.shape[1]
        tau = np.empty((self.npair, o, o))
        for a in range(self.nvir - 1):
            at = tau[self._rows(a)]
            np.copyto(at, t2[a, a + 1:])
            at += t1[a][None, :, None] * t1[a + 1:, None, :]
            at -= t1[a + 1:, :, None] * t1[a][None, None, :]
        return {"tauP": {(PAIR_SPACE, "i", "i"): tau}}

    def unpack(self, r2: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """``r2[a, b] += L[p]`` and ``r2[b, a] −= L[p]`` for ``p = (a < b)``, in place,
        row by row (views: no temporary of the ladder's size)."""
        for a in range(self.nvir - 1):
            part = packed[self._rows(a)]
            r2[a, a + 1:] += part
            r2[a + 1:, a] -= part
        return r2
