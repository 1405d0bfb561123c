"""Sums over ordered block tuples (api/symmetric.py) against einsum over every tuple.

Each example draws the extents, the block, the number of workers and whether the sum goes
through an intermediate; the summand is made symmetric by construction (a random tensor
summed over the permutations of its group axes), so the oracle is ``np.einsum`` of the
same equations over the full ranges. Blocks are drawn below the extent in about 85 % of
the examples (several tuples, coinciding and distinct blocks, a short last block in most),
the rest take one block; two or three workers in two thirds."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sequant_eval.api.symmetric import SymmetricSum

GROUPS = {2: ("a_1", "a_2"), 3: ("a_1", "a_2", "a_3")}
TEXTS = {
    (2, False): "R{i_1} = S{a_1,a_2,i_1} * u{a_1;i_1} * u{a_2;i_1}",
    (3, False): "R{i_1} = S{a_1,a_2,a_3,i_1} * u{a_1;i_1} * u{a_2;i_1} * u{a_3;i_1}",
    (2, True): "Y{a_1,a_2;i_1} = S{a_1,a_2,i_1} * u{a_1;i_1}\n"
               "R{i_1} = Y{a_1,a_2;i_1} * u{a_2;i_1}",
    (3, True): "Y{a_1,a_2,a_3;i_1} = S{a_1,a_2,a_3,i_1} * u{a_1;i_1} * u{a_2;i_1}\n"
               "R{i_1} = Y{a_1,a_2,a_3;i_1} * u{a_3;i_1}",
}


@st.composite
def cases(draw):
    m = draw(st.sampled_from([2, 3]))
    v = draw(st.integers(2, 9 if m == 2 else 7))
    o = draw(st.integers(1, 3))
    block = draw(st.one_of(st.integers(1, v - 1), st.just(v)) if v > 1 else st.just(1))
    return m, v, o, block, draw(st.integers(1, 3)), draw(st.booleans()), draw(
        st.integers(0, 2**31 - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_ordered_tuples_with_orbit_weights_equal_the_full_sum(case):
    m, v, o, block, workers, staged, seed = case
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((v,) * m + (o,))
    s = sum(raw.transpose(p + (m,)) for p in itertools.permutations(range(m)))
    u = rng.standard_normal((v, o))
    letters = "abc"[:m]
    want = np.einsum(f"{letters}i," + ",".join(f"{x}i" for x in letters) + "->i", s,
                     *([u] * m))
    got = SymmetricSum(TEXTS[(m, staged)], {"i": o, "a": v}, GROUPS[m], block=block,
                       workers=workers).evaluate({"S": s, "u": u})["R"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
