"""Orbital-energy denominators as a tensor provider: made per batch, never whole.

``D{i_1,..;a_1,..} = 1 / (e_i1 + .. − e_a1 − ..)`` is a leaf like any other for the
planner (its block at the batch's extents is a buffer in the prediction), but its elements
are computed from the orbital energies when a batch asks for them: the provider receives
the block's spaces and ranges (``runtime/sources.py``) and returns exactly that
sub-block, so a six-index (T) denominator costs what one batch of it holds.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ..errors import MissingTensor, ShapeMismatch

__all__ = ["OrbitalDenominator"]


class OrbitalDenominator:
    """``provider(spaces, ranges)`` of ``1 / (Σ_occupied e − Σ_others e)`` over the slots.

    ``energies`` maps each index space to its orbital energies (``{"i": e_occ, "a":
    e_vir}``); a slot in a space of ``occupied`` adds its energy, any other subtracts it.
    """

    def __init__(self, energies: Mapping[str, Sequence[float]],
                 occupied: Iterable[str] = ("i",)) -> None:
        self.energies = {s: np.asarray(e, dtype=np.float64).ravel()
                         for s, e in energies.items()}
        self.occupied = frozenset(occupied)

    def __call__(self, spaces: tuple[str, ...], ranges=None) -> np.ndarray:
        missing = [s for s in spaces if s not in self.energies]
        if missing:
            raise MissingTensor(f"the orbital-energy denominator has no energies for space "
                                f"{missing[0]!r} (it has {sorted(self.energies)}); give them "
                                f"in OrbitalDenominator(energies=...)")
        if ranges is None:
            ranges = [(0, self.energies[s].size) for s in spaces]
        if len(ranges) != len(spaces):
            raise ShapeMismatch(f"denominator block {spaces}: {len(ranges)} ranges for "
                                f"{len(spaces)} slots")
        total = np.zeros((), dtype=np.float64)
        for k, (s, (lo, hi)) in enumerate(zip(spaces, ranges)):
            e = self.energies[s][lo:hi]
            shape = [1] * len(spaces)
            shape[k] = e.size
            total = total + (e if s in self.occupied else -e).reshape(shape)
        return np.divide(1.0, total, out=total)     # in place: one block held, not two
