"""Result layouts of contractions read by sums (schedule/layouts.py), hand-worked.

The oracle: what the add of each layout reads, worked out by hand from the permutations,
and an einsum of the whole sum written in the test."""
from __future__ import annotations

import numpy as np

import sequant_eval as se
from sequant_eval.forest.values import Operand, Value, ValueKind
from sequant_eval.schedule.layouts import _nearest_gemm_order, _run


def _contraction(left: tuple[int, ...], right: tuple[int, ...], result: tuple[int, ...]):
    return Value(0, ValueKind.CONTRACT, ("x",) * len(result),
                 left=Operand(1, left), right=Operand(2, right), result=result)


def test_the_inner_run_of_an_add_through_a_permutation():
    """A sum reading the contraction's axes (0, 2, 1): written as is, its last axis reads
    axis 1 (no run); written in that order, all three line up."""
    assert _run((0, 1, 2), (0, 2, 1)) == 0
    assert _run((0, 2, 1), (0, 2, 1)) == 3
    assert _run((2, 0, 1), (0, 2, 1)) == 1     # reads (1, 0, 2): the last axis in place
    assert _run((0, 1, 2), (1, 0, 2)) == 1


def test_the_gemm_order_nearest_a_sum_lines_up_its_last_axes():
    """``W{i,j,a,b} = g{i,f;a} t{b,f;j}`` kept as (i, a, b, j) (labels 0..3 = i, a, b, j)
    and read by a sum as (i, j, a, b): a GEMM writes g's free modes then t's, or t's then
    g's; (i, a | j, b) ends with b as the sum does."""
    i, a, b, j, f = range(5)
    v = _contraction((i, f, a), (b, f, j), (i, a, b, j))
    perm = (0, 3, 1, 2)                       # the sum's axes read (i, j, a, b)
    near = _nearest_gemm_order(v, perm)
    assert near == (0, 1, 3, 2)               # (i, a, j, b)
    assert _run(near, perm) == 1 and _run((0, 1, 2, 3), perm) == 0
    # a sum that reads the modes of one operand last lines all of them up
    assert _run(_nearest_gemm_order(v, (3, 2, 0, 1)), (3, 2, 0, 1)) == 4


def test_a_sum_of_permuted_contractions_is_unchanged():
    """The sum of three permuted GEMM products equals its einsum to 1e-12."""
    rng = np.random.default_rng(3)
    g, t = rng.standard_normal((4, 6, 5)), rng.standard_normal((5, 6, 4))
    text = ("W{i_1,i_2;a_1,a_2} = g{i_1,f_1;a_1} * t{a_2,f_1;i_2} "
            "+ g{i_2,f_1;a_2} * t{a_1,f_1;i_1} - g{i_1,f_1;a_2} * t{a_1,f_1;i_2}")
    got = se.evaluate(text, {"g": g, "t": t}, {"i": 4, "a": 5, "f": 6})["W"]
    want = (np.einsum("ifa,bfj->ijab", g, t) + np.einsum("jfb,afi->ijab", g, t)
            - np.einsum("ifb,afj->ijab", g, t))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
