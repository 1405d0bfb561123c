"""Exact memory profile of one term's subtree under nested batch loops.

The schedule runs a subtree in *levels*: level d is inside the first d loops of its
enclosing chain. All of a level's steps run (first child's, then second child's) before
the next deeper block opens; a value made at level d and read deeper stays live until the
block at level d+1 closes. A node that opens loops O allocates, at the open of each of its
blocks, the accumulator that the block's batches sum or scatter into; while its contraction
runs, its kernel's scratch (a transposing copy, a temporary result) is live beside it. These
rules are the sequencer's (schedule/ordered.py) and the sweep's (schedule/peak.py); so the
peak computed here (with the kernels' scratch) is the peak the static sweep finds for a term
scheduled alone, except where the schedule shares or streams what a tree cannot show: an
input read twice (fetched once, live between the reads), or a bare leaf added to its sum in
chunks (``plan.menu.peak_rule`` says when the planner measures instead).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Profile", "leaf_profile", "node_profile", "held_upto", "combine_held"]


@dataclass(frozen=True)
class Profile:
    """Bytes of one subtree over the levels 0..L of its enclosing chain (L = len(hold))."""

    pk: tuple[int, ...]      # peak during the subtree's level-d steps (its own live bytes)
    hold: tuple[int, ...]    # made at level d < L and live through all deeper levels
    res: int                 # the subtree's result, made at level L
    flops: int

    @property
    def depth(self) -> int:
        """L: the enclosing loop levels the profile spans."""
        return len(self.hold)

    @property
    def peak(self) -> int:
        """The subtree's peak over all levels."""
        return max(self.pk)

    def held(self, d: int) -> int:
        """Bytes of this subtree live once its steps at levels <= d are done."""
        if d < 0:
            return 0
        if d >= self.depth:
            return sum(self.hold) + self.res
        return sum(self.hold[: d + 1])

    def held_at(self, d: int) -> int:
        """What this subtree leaves live *from* level d (its result counts at its own level)."""
        if d < self.depth:
            return self.hold[d]
        return self.res if d == self.depth else 0

    def peak_at(self, d: int) -> int:
        """Peak during the level-d steps; 0 beyond the profile's levels."""
        return self.pk[d] if d < len(self.pk) else 0

    def dominates(self, other: Profile) -> bool:
        """No worse than ``other`` in flops, result and every level's peak and hold (the DP's
        pruning test)."""
        return (self.flops <= other.flops and self.res <= other.res
                and all(a <= b for a, b in zip(self.pk, other.pk))
                and all(a <= b for a, b in zip(self.hold, other.hold)))


def leaf_profile(depth: int, size: int) -> Profile:
    """A leaf fetched at level ``depth`` (the innermost enclosing loop that slices it)."""
    return Profile((0,) * depth + (size,), (0,) * depth, size, 0)


def _cumulative(p: Profile, upto: int) -> list[int]:
    """``[p.held(d) for d in range(upto + 1)]`` in one pass."""
    out, run, hold, depth = [], 0, p.hold, len(p.hold)
    for d in range(upto + 1):
        if d < depth:
            run += hold[d]
            out.append(run)
        else:
            out.append(run + p.res)
    return out


def node_profile(first: Profile, second: Profile, depth: int, accumulators: tuple[int, ...],
                 part: int, flops: int, scratch: int = 0) -> Profile:
    """Combine two children at a node whose result lands at level ``depth``.

    ``accumulators[j]`` is the node's form after its (j+1)-th own loop closes, allocated at
    that block's open (``accumulators[0]`` is the node's result); ``part`` is the per-batch
    result of the innermost block (the result itself when the node opens no loop);
    ``scratch``: the bytes its contraction kernel allocates beside ``part`` while it runs
    (``plan/kernels.py``), live at that step only.
    """
    inner = depth + len(accumulators)
    return combine_held(first, _cumulative(first, inner), second, _cumulative(second, inner),
                        depth, accumulators, part, flops, scratch)


def held_upto(p: Profile, upto: int) -> list[int]:
    """``[p.held(d) for d in range(upto + 1)]`` (what ``combine_held`` takes per child)."""
    return _cumulative(p, upto)


def combine_held(first: Profile, fh: list[int], second: Profile, sh: list[int], depth: int,
                 accumulators: tuple[int, ...], part: int, flops: int,
                 scratch: int = 0) -> Profile:
    """``node_profile`` with each child's ``held_upto(child, depth + len(accumulators))``
    given (the DP reuses them over every pairing of the children's realizations)."""
    inner = depth + len(accumulators)
    fpk, spk = first.pk, second.pk
    nf, ns = len(fpk), len(spk)
    pk = []
    for d in range(depth):
        a = (fpk[d] if d < nf else 0) + (sh[d - 1] if d else 0)
        b = fh[d] + (spk[d] if d < ns else 0)
        pk.append(a if a > b else b)
    top, acc = 0, 0
    for d in range(depth, inner + 1):
        if d > depth:
            acc += accumulators[d - depth - 1]
        a = (fpk[d] if d < nf else 0) + (sh[d - 1] if d else 0) + acc
        b = fh[d] + (spk[d] if d < ns else 0) + acc
        top = max(top, a, b)
    top = max(top, fh[inner] + sh[inner] + part + scratch + sum(accumulators))
    pk.append(top)
    fhold, shold = first.hold, second.hold
    nfh, nsh = len(fhold), len(shold)
    hold = tuple((fhold[d] if d < nfh else (first.res if d == nfh else 0))
                 + (shold[d] if d < nsh else (second.res if d == nsh else 0))
                 for d in range(depth))
    res = accumulators[0] if accumulators else part
    return Profile(tuple(pk), hold, res, first.flops + second.flops + flops)
