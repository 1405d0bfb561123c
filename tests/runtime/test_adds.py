"""``add_scaled``: a scaled, permuted addend added in cache-sized pieces gives, bit for bit,
what one whole scaled copy gives.

Oracle: ``target += alpha * src`` written out in the test (one addend-sized temporary),
on a copy of the same target. The pieces make the same two roundings per element, so the
comparison is exact (``array_equal``), not to a tolerance.
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import event, given, settings, strategies as st

from sequant_eval.runtime.backends import add_scaled
from sequant_eval.schedule.peak import STREAM_BYTES


@st.composite
def adds(draw):
    """A target (or a sliced view of one), an addend in a permuted layout and a scale.
    Eight draws in ten are scaled (not ±1) and larger than one piece (``STREAM_BYTES``),
    so they go through the piecewise path (the test's statistics show it); one in ten is
    scaled by ±1 and one is small, 0-d or 1-d (both taken whole)."""
    kind = draw(st.integers(0, 9))
    rank = draw(st.integers(0, 1)) if kind == 0 else draw(st.integers(2, 6))
    shape = [draw(st.integers(1, 7)) for _ in range(rank)]
    if kind > 0:      # grow one axis until the target outgrows a piece
        elements = STREAM_BYTES // 8 + 1
        k = draw(st.integers(0, rank - 1))
        rest = math.prod(shape[:k] + shape[k + 1:])
        shape[k] = max(shape[k], -(-elements // rest))
    perm = draw(st.permutations(range(rank)))
    alpha = draw(st.sampled_from([1.0, -1.0])) if kind == 1 else \
        draw(st.sampled_from([0.25, -1 / 3, 3.0, -0.5]))
    sliced = rank >= 1 and draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return tuple(shape), tuple(perm), alpha, sliced, seed, kind > 1


@settings(max_examples=60, deadline=None)
@given(adds())
def test_pieces_add_what_one_scaled_copy_adds(case):
    shape, perm, alpha, sliced, seed, big = case
    rng = np.random.default_rng(seed)
    whole = rng.standard_normal((shape[0] + 2,) + shape[1:] if sliced else shape)
    target = whole[1:-1] if sliced else whole         # a view, as an entry's region is
    src = rng.standard_normal(tuple(shape[p] for p in np.argsort(perm))).transpose(perm) \
        if shape else rng.standard_normal(())
    expected = np.array(target, copy=True)
    expected += alpha * src
    add_scaled(target, src, alpha)
    event("pieces" if big else "whole")
    assert np.array_equal(target, expected)


def test_an_addend_that_is_the_target_read_whole_first():
    """``target += alpha * target.T`` must read the addend before writing: pieces would
    read entries already written (a 2×2 hand example, then a large one)."""
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    add_scaled(x, x.T, 0.5)
    assert np.array_equal(x, [[1.5, 3.5], [4.0, 6.0]])
    n = 256                                  # 512 KiB: larger than one piece
    y = np.random.default_rng(1).standard_normal((n, n))
    want = y + 0.5 * y.T
    add_scaled(y, y.T, 0.5)
    assert np.array_equal(y, want)
