"""Random einsum expressions with hyperedges, traces and diagonals, unbatched and batched.

Oracle: ``numpy.einsum`` on the same arrays (``tests/oracles/einsum.py``: the einsum string
written in the package's text, values to 1e-12 of the largest entry; batched, the NumPy
meter and the dry run equal the prediction to the byte, within the budget).

An expression has 1 to 4 operands of rank 0 to 4 over at most 4 letters of extent 1 to 4
(few letters, so they repeat: inside an operand that is a diagonal where the letter is kept,
a trace where it is summed; across three operands a hyperedge), and an explicit output (an
ordered subset of the letters, those repeated inside an operand drawn first) or, one time in
five, NumPy's implicit one. Each example runs unbatched and at a budget drawn between the
smallest the planner meets (blocks of one element) and 90 % of the way to the unbatched
peak. Measured over three runs of 400 examples: 37-41 % take a diagonal, 43-51 % a trace,
9-16 % sum an index that is in one operand once, 39-51 % have a hyperedge, 73-76 % run
batched (the rest fit without a loop: one operand streamed whole, or scalars), and 66-72 %
run batched with a diagonal or a trace. ``MIN_SHARE`` is checked at the end of each run:
below it the property fails rather than pass without exercising what it is for. The
default run takes 120 examples (about 5 s), the slow one 1500.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.oracles.einsum import check_batched, check_unbatched, features

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: The smallest share of examples that must exercise each feature (see the docstring).
MIN_SHARE = {"diagonal": 0.25, "trace": 0.25, "single": 0.02, "hyperedge": 0.25,
             "batched": 0.5, "batched diagonal or trace": 0.3}


@st.composite
def einsum_cases(draw):
    """(subscripts, sizes): a random einsum string NumPy accepts and an extent per letter."""
    letters = "abcd"[:draw(st.integers(1, 4))]
    sizes = {c: draw(st.sampled_from((1, 2, 2, 3, 3, 4))) for c in letters}
    n = draw(st.sampled_from((1, 2, 3, 3, 4, 4)))
    factors = [draw(st.text(letters, min_size=k, max_size=k))
               for k in draw(st.lists(st.sampled_from((0, 1, 2, 2, 3, 3, 4)), min_size=n,
                                      max_size=n))]
    used = sorted(set("".join(factors)))
    if draw(st.integers(0, 4)) == 0:
        return ",".join(factors), sizes                 # implicit output
    # letters repeated inside an operand first: kept, they are diagonals
    repeated = [c for c in used if any(f.count(c) > 1 for f in factors)]
    order = draw(st.permutations(repeated)) + draw(st.permutations(
        [c for c in used if c not in repeated]))
    keep = max(draw(st.integers(0, len(order))), draw(st.integers(0, len(order))))
    output = draw(st.permutations(order[:keep]))
    return ",".join(factors) + "->" + "".join(output), sizes


def _property(max_examples: int, derandomize: bool = False) -> dict[str, int]:
    seen = {"examples": 0, "batched": 0, "diagonal": 0, "trace": 0, "single": 0,
            "hyperedge": 0, "batched diagonal or trace": 0}

    @settings(max_examples=max_examples, derandomize=derandomize, database=None, **SETTINGS)
    @given(einsum_cases(), st.floats(0.0, 0.9), st.integers(0, 2**16))
    def check(case, position, seed):
        subscripts, sizes = case
        check_unbatched(subscripts, sizes, seed)
        batched = check_batched(subscripts, sizes, seed, position)
        seen["examples"] += 1
        seen["batched"] += batched
        feats = features(subscripts)
        for f in feats & set(seen):
            seen[f] += 1
            event(f)
        seen["batched diagonal or trace"] += batched and bool(feats & {"diagonal", "trace"})
        event("batched" if batched else "fits without a loop")

    check()
    return seen


def _assert_exercised(seen: dict[str, int]) -> None:
    n = seen["examples"]
    assert n > 0
    for what, share in MIN_SHARE.items():
        assert seen[what] >= share * n, (
            f"only {seen[what]} of {n} examples exercised {what} (< {share:.0%}): {seen}")


def test_einsum_expressions_equal_numpy():
    """120 examples, drawn the same way every run: with random draws a share of about a
    quarter sometimes fell short of its floor at this size (25 of 120 diagonals)."""
    _assert_exercised(_property(120, derandomize=True))


@pytest.mark.slow
def test_einsum_expressions_equal_numpy_long():
    _assert_exercised(_property(1500))
