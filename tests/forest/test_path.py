"""The term's contraction path and flop count, asked of opt_einsum's path optimizers directly.

Oracle: ``opt_einsum.contract_path`` itself, on the same einsum written as a string with
explicit shapes: the path and the optimized flop count must be the same, for terms of 2
to 7 factors (up to ``_OPTIMAL_UP_TO`` the exhaustive search, beyond it the dynamic
program), with summed, free, repeated-across-factors and size-1 labels.
"""
from __future__ import annotations

import opt_einsum
from hypothesis import given, settings, strategies as st

from sequant_eval.forest.build import _OPTIMAL_UP_TO, _path
from sequant_eval.forest.values import Occurrence

LABELS = "pqrstuvwxy"


class _Sizes:
    """What ``_path`` asks of the interner: a label's size."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes

    def size(self, label: str, where: str) -> int:
        return self.sizes[label]


@st.composite
def terms(draw):
    """Every drawn term has at least 2 factors, so every example exercises a path: about
    half the draws have more than ``_OPTIMAL_UP_TO`` - 2 factors (up to 7)."""
    n = draw(st.integers(2, 7))
    factors = [tuple(draw(st.lists(st.sampled_from(LABELS), min_size=1, max_size=4,
                                   unique=True))) for _ in range(n)]
    used = sorted({ix for f in factors for ix in f})
    result = tuple(draw(st.lists(st.sampled_from(used), max_size=3, unique=True)))
    sizes = {ix: draw(st.sampled_from([1, 2, 3, 5, 8, 13])) for ix in used}
    return factors, result, sizes


@settings(max_examples=150, deadline=None)
@given(terms())
def test_the_path_and_flops_are_contract_paths(term):
    factors, result, sizes = term
    labels = tuple(sorted(sizes))
    occs = [Occurrence(k, f) for k, f in enumerate(factors)]
    path, flops = _path(_Sizes(sizes), occs, labels, result, "test")

    symbol = {ix: opt_einsum.get_symbol(k) for k, ix in enumerate(labels)}
    text = (",".join("".join(symbol[ix] for ix in f) for f in factors) + "->"
            + "".join(symbol[ix] for ix in result))
    shapes = [tuple(sizes[ix] for ix in f) for f in factors]
    want, info = opt_einsum.contract_path(
        text, *shapes, shapes=True,
        optimize="optimal" if len(factors) <= _OPTIMAL_UP_TO else "dp")
    assert [tuple(step) for step in path] == [tuple(step) for step in want]
    assert flops == int(info.opt_cost)
