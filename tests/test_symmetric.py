"""Sums over ordered block tuples (api/symmetric.py).

Oracles: ``np.einsum`` over the full ranges, written in the test; hand-counted orbits and
tuple counts; the tracemalloc peak of the process for the memory figures."""
from __future__ import annotations

from math import comb

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.api.symmetric import SymmetricSum, orbit_size, ordered_tuples
from tests.oracles.spin_orbital import traced_peak

V, O = 7, 3


def _symmetric(rng, shape_v: int, extra: int) -> np.ndarray:
    """A random T[a, b, c, i] symmetric in a, b, c."""
    t = rng.standard_normal((shape_v,) * 3 + (extra,))
    return sum(t.transpose(p + (3,)) for p in
               [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)])


def _inputs(seed: int = 0, v: int = V, o: int = O):
    rng = np.random.default_rng(seed)
    return {"T": _symmetric(rng, v, o), "u": rng.standard_normal((v, o)),
            "h": rng.standard_normal((o, o))}


# R_i = Σ_abc T_abci u_ai u_bi u_ci: the summand is symmetric in a, b, c for each i
ONE = "R{i_1} = T{a_1,a_2,a_3,i_1} * u{a_1;i_1} * u{a_2;i_1} * u{a_3;i_1}"
# a symmetric Y as an intermediate read in a second stage, with another index (i_2)
# summed over its whole range
STAGED = """
Y{a_1,a_2,a_3;i_1} = T{a_1,a_2,a_3,i_1} * u{a_1;i_1} * u{a_2;i_1}
    + T{a_2,a_3,a_1,i_1} * u{a_2;i_1} * u{a_3;i_1}
    + T{a_3,a_1,a_2,i_1} * u{a_3;i_1} * u{a_1;i_1}
E = Y{a_1,a_2,a_3;i_1} * h{i_1;i_2} * T{a_1,a_2,a_3,i_2}
"""


def _oracle(x) -> dict[str, np.ndarray]:
    r = np.einsum("abci,ai,bi,ci->i", x["T"], x["u"], x["u"], x["u"])
    y = (np.einsum("abci,ai,bi->abci", x["T"], x["u"], x["u"])
         + np.einsum("bcai,bi,ci->abci", x["T"], x["u"], x["u"])
         + np.einsum("cabi,ci,ai->abci", x["T"], x["u"], x["u"]))
    e = np.einsum("abci,ij,abcj->", y, x["h"], x["T"])
    return {"R": r, "E": e}


def test_ordered_tuples_and_their_orbits_cover_every_tuple_once():
    """Hand count: C(n + 2, 3) non-increasing triples of n blocks, and their orbit sizes
    (6 distinct, 3 with a pair, 1 all equal) add up to the n³ tuples."""
    for n in range(1, 7):
        tuples = ordered_tuples(n, 3)
        assert len(tuples) == comb(n + 2, 3)
        assert all(t[0] >= t[1] >= t[2] for t in tuples)
        assert sum(orbit_size(t) for t in tuples) == n ** 3
    assert [orbit_size(t) for t in [(2, 1, 0), (1, 1, 0), (1, 0, 0), (0, 0, 0)]] == [6, 3, 3, 1]


@pytest.mark.parametrize("block", range(1, V + 1))
def test_every_block_size_gives_the_full_sum(block):
    """Ordered tuples with orbit weights equal the einsum over every a, b, c (1e-12
    relative), a final result carrying an index outside the group (R_i), and an energy
    read from an intermediate in a later stage."""
    x, want = _inputs(), _oracle(_inputs())
    got = SymmetricSum(ONE, {"i": O, "a": V}, ("a_1", "a_2", "a_3"), block=block).evaluate(x)
    np.testing.assert_allclose(got["R"], want["R"], rtol=1e-12, atol=0)
    staged = SymmetricSum(STAGED, {"i": O, "a": V}, ("a_1", "a_2", "a_3"), block=block)
    e = staged.evaluate(x)["E"]
    assert abs(e - want["E"]) <= 1e-12 * abs(want["E"])
    report = staged.analyze()
    assert report.tuples == comb(report.blocks + 2, 3)


def test_a_summand_not_symmetric_gives_another_sum():
    """The symmetry is the caller's declaration: with T not symmetric, the ordered tuples
    miss the other orderings (the check above could fail)."""
    x = _inputs()
    x["T"] = np.random.default_rng(5).standard_normal((V, V, V, O))
    got = SymmetricSum(ONE, {"i": O, "a": V}, ("a_1", "a_2", "a_3"), block=2).evaluate(x)
    want = np.einsum("abci,ai,bi,ci->i", x["T"], x["u"], x["u"], x["u"])
    assert not np.allclose(got["R"], want, rtol=1e-6)


def test_budgeted_sum_is_as_predicted_and_within_budget():
    """Under a budget the blocks shrink; metered = predicted <= budget, what the process
    allocates in a first evaluation (programs built) stays within the budget, and the
    result is the unbudgeted one to 1e-12 (extents at which the arrays, not the
    programs, set the peak)."""
    x = _inputs(1, v=24, o=8)
    ext = {"i": 8, "a": 24}
    whole = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"))
    ref = whole.evaluate(x)["E"]
    budget = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), block=6,
                          budget=1e9).analyze().total_bytes
    small = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=budget)
    report = small.analyze()
    assert 6 <= small.block < whole.block and report.total_bytes <= budget
    (got, meter), traced = traced_peak(lambda: small.evaluate(x, return_meter=True))
    assert meter.peak_bytes == report.peak_bytes
    assert traced <= budget, (traced, budget)
    assert abs(got["E"] - ref) <= 1e-12 * abs(ref)


def test_a_budget_below_blocks_of_one_is_refused_with_a_minimum_that_fits():
    ext = {"i": O, "a": V}
    with pytest.raises(se.InfeasibleBudget, match="smallest that works") as refused:
        SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=2000).analyze()
    least = refused.value.minimum
    fits = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=least)
    assert fits.analyze().total_bytes <= least
    with pytest.raises(se.InfeasibleBudget) as again:
        SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=least - 8).analyze()
    assert again.value.minimum == least


@pytest.mark.parametrize("text, group, error, match", [
    (ONE, ("a_1",), se.UsageError, "two or more"),
    (ONE, ("a_1", "a_9"), se.ExpressionError, "a_9 is not in"),
    (ONE, ("a_1", "i_1"), se.ExpressionError, "one space"),
    ("R{a_1} = T{a_1,a_2,a_3,i_1} * u{a_2;i_1} * u{a_3;i_1}", ("a_1", "a_2"),
     se.ExpressionError, "carries a group index"),
    ("Y{a_1,a_2;i_1} = u{a_1;i_1} * u{a_2;i_1}\nE = Y{a_2,a_1;i_1} * T{a_1,a_2,a_2,i_1}",
     ("a_1", "a_2"), se.ExpressionError, "other slots"),
], ids=["one index", "unknown", "two spaces", "result carries it", "permuted read"])
def test_refusals_name_the_culprit(text, group, error, match):
    with pytest.raises(error, match=match):
        SymmetricSum(text, {"i": O, "a": V}, group)


def test_a_bad_block_or_tensor_is_refused():
    with pytest.raises(se.UsageError, match="block must be"):
        SymmetricSum(ONE, {"i": O, "a": V}, ("a_1", "a_2", "a_3"), block=V + 1)
    with pytest.raises(se.InputTypeError, match="tensor 'u'"):
        SymmetricSum(ONE, {"i": O, "a": V}, ("a_1", "a_2", "a_3")).evaluate(
            {**_inputs(), "u": 3})


def test_two_workers_give_the_sum_the_same_bits_every_time_within_the_budget():
    """Two threads, each evaluating every other tuple with its own evaluators: the sum is
    the one-worker sum to 1e-12 and the same bits on every run (summed in worker order);
    the peak counts both workers' tuples (metered = predicted), and what the process
    allocates stays within the budget."""
    x = _inputs(2, v=24, o=8)
    ext = {"i": 8, "a": 24}
    one = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), block=6)
    two = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), block=6, workers=2)
    ref = one.evaluate(x)["E"]
    first, second = two.evaluate(x)["E"], two.evaluate(x)["E"]
    assert abs(first - ref) <= 1e-12 * abs(ref) and first == second
    solo = one.analyze().peak_bytes
    assert two.analyze().peak_bytes == 2 * solo
    budget = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), block=6, workers=2,
                          budget=1e9).analyze().total_bytes
    fit = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), block=6, budget=budget, workers=2)
    report = fit.analyze()
    assert fit.workers == 2 and report.total_bytes <= budget
    # with the block left to choose, two workers are kept while their blocks are at
    # least half of what one worker would take alone
    chosen = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=budget, workers=2)
    alone = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=budget).block
    shared = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=budget / 2).block
    assert (chosen.workers == 2) == (2 * shared >= alone and shared > 1)
    assert chosen.block == (shared if chosen.workers == 2 else alone)
    (got, meter), traced = traced_peak(lambda: fit.evaluate(x, return_meter=True))
    assert meter.peak_bytes == report.peak_bytes and traced <= budget, (traced, budget)
    assert abs(got["E"] - ref) <= 1e-12 * abs(ref)


def test_a_budget_too_small_for_every_worker_uses_fewer():
    """Where a worker's share would not hold blocks of one element whole, fewer workers
    run; the smallest budget is the one-worker minimum, whatever was asked."""
    ext = {"i": O, "a": V}
    with pytest.raises(se.InfeasibleBudget) as refused:
        SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=2000, workers=4).analyze()
    least = refused.value.minimum
    fit = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), budget=least, workers=4)
    assert fit.workers == 1 and fit.analyze().total_bytes <= least
    with pytest.raises(se.UsageError, match="workers must be"):
        SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), workers=0)


def test_inputs_as_block_mappings_and_providers_give_the_same_sum():
    """The tensors as mappings from spaces to blocks, and as providers with and without
    ranges, give the arrays' sum; an array whose axis spans two spaces is refused (its
    offsets could not be shifted)."""
    x = _inputs(4)
    ext = {"i": O, "a": V}
    s = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"), block=3)
    want = s.evaluate(x)["E"]
    mapped = {"T": {("a", "a", "a", "i"): x["T"]}, "u": {("a", "i"): x["u"]},
              "h": {("i", "i"): x["h"]}}
    ranged = {"T": lambda sp, r: x["T"][tuple(slice(*q) for q in r)],
              "u": lambda sp, r: x["u"][tuple(slice(*q) for q in r)], "h": x["h"]}
    whole = {"T": lambda sp: x["T"], "u": lambda sp: x["u"], "h": x["h"]}
    for given in (mapped, ranged, whole):
        assert s.evaluate(given)["E"] == want
    both = np.zeros((O + V, O + V))
    with pytest.raises(se.InputTypeError, match="tensor 'h'.*one space"):
        s.evaluate({**x, "h": both})


def test_an_operator_over_group_indices_is_refused_and_its_terms_written_out_are_exact():
    """``P{a_1,a_2}`` over group indices cannot act on two block spaces (the probe found
    0.0 against 178.9): refused; the same written out as two terms equals its einsum at
    every block size."""
    n = np.random.default_rng(7).standard_normal((V, V, O))
    with pytest.raises(se.UnsupportedFeature, match="write the operator's permuted terms"):
        SymmetricSum("Y{a_1,a_2;i_1} = P{a_1,a_2} * N{a_1,a_2;i_1}\n"
                     "E = Y{a_1,a_2;i_1} * Y{a_1,a_2;i_1}", {"i": O, "a": V}, ("a_1", "a_2"))
    text = ("Y{a_1,a_2;i_1} = N{a_1,a_2;i_1} - N{a_2,a_1;i_1}\n"
            "E = Y{a_1,a_2;i_1} * Y{a_1,a_2;i_1}")
    y = n - n.transpose(1, 0, 2)
    want = np.einsum("abi,abi->", y, y)
    for block in (1, 2, 3, V):
        got = SymmetricSum(text, {"i": O, "a": V}, ("a_1", "a_2"), block=block).evaluate(
            {"N": n})["E"]
        assert abs(got - want) <= 1e-12 * abs(want)


@pytest.mark.parametrize("text", [
    "E = T{a_1,a_2,a_3,i_1} * u{a_1;i_1} * u{a_2;i_1} * u{a_3;i_1}\nF = u{a_1;i_1} * u{a_1;i_1}",
    "E = T{a_1,a_2,a_3,i_1} * u{a_1;i_1} * u{a_2;i_1} * u{a_3;i_1} + h{i_1;i_1}",
], ids=["an output without the group", "a term without the group"])
def test_a_result_term_that_does_not_sum_over_the_group_is_refused(text):
    """Such a term would be counted once per tuple (the probe found F = 1230.8 at blocks of
    one against its einsum's 19.9): refused, naming the term."""
    with pytest.raises(se.ExpressionError, match="does not sum over group index"):
        SymmetricSum(text, {"i": O, "a": V}, ("a_1", "a_2", "a_3"))


def test_hostile_arguments_are_typed_refusals():
    ext = {"i": O, "a": V}
    with pytest.raises(se.UnknownSpace, match="'i'"):
        SymmetricSum(ONE, {"a": V}, ("a_1", "a_2", "a_3"))
    with pytest.raises(se.UnknownSpace):
        SymmetricSum(ONE, {"a": V, "i": "3"}, ("a_1", "a_2", "a_3"))
    with pytest.raises(se.UsageError, match="sequence of index labels"):
        SymmetricSum(ONE, ext, "a_1")
    with pytest.raises(se.UsageError, match="sequence of index labels"):
        SymmetricSum(ONE, ext, None)
    s = SymmetricSum(ONE, ext, ("a_1", "a_2", "a_3"), block=3)
    with pytest.raises(se.InputTypeError, match="tensors must map"):
        s.evaluate(None)
    with pytest.raises(se.UnsupportedFeature, match="analyze"):
        s.evaluate(_inputs(), backend="dryrun")
    with pytest.raises(se.UnsupportedFeature, match="complex"):
        s.evaluate({**_inputs(), "T": _inputs()["T"] * 1j})
    with pytest.raises(se.InfeasibleBudget) as tiny:       # below the results' own bytes
        SymmetricSum(ONE, ext, ("a_1", "a_2", "a_3"), budget=16).analyze()
    assert SymmetricSum(ONE, ext, ("a_1", "a_2", "a_3"),
                        budget=tiny.value.minimum).analyze().total_bytes <= tiny.value.minimum
    assert SymmetricSum(ONE, ext, ("a_1", "a_2", "a_3"), block=3,
                        workers=1000).workers == comb(3 + 2, 3)     # 3 blocks: 10 tuples


def test_a_whole_share_of_the_peak_is_one_block():
    """``"100%"`` is the one-block evaluation's peak with its program on top: one block,
    within the budget, as an Evaluator's 100 % is unbatched."""
    s = SymmetricSum(STAGED, {"i": O, "a": V}, ("a_1", "a_2", "a_3"), budget="100%")
    report = s.analyze()
    assert s.block == V and report.total_bytes <= report.budget_bytes


def test_one_block_only_where_its_peak_is_within_the_whole_bytes(monkeypatch):
    """Unbudgeted, one block is taken whole only while its peak is within WHOLE_BYTES;
    past it the blocks are cut so that a distinct tuple's peak is within TUPLE_BYTES."""
    import sequant_eval.api.symmetric as symmetric

    ext = {"i": 8, "a": 24}
    whole = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"))
    assert whole.block == 24
    peak = whole.analyze().peak_bytes
    monkeypatch.setattr(symmetric, "TUPLE_BYTES", peak // 8)
    assert SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3")).block == 24     # still whole
    monkeypatch.setattr(symmetric, "WHOLE_BYTES", whole._whole().analyze().peak_bytes - 1)
    cut = SymmetricSum(STAGED, ext, ("a_1", "a_2", "a_3"))
    assert 1 < cut.block < 24 and cut._distinct_peak(cut.block) <= peak // 8
    assert cut._distinct_peak(cut.block + 1) > peak // 8


def test_a_result_with_other_indices_is_summed_in_place_within_the_prediction():
    """R_i over 24 virtuals at blocks of 6 under a budget, two workers (the weighted sums
    made in place): what the process allocates (tracemalloc, a first evaluation) stays
    within the budget and R equals its einsum to 1e-12."""
    x = _inputs(8, v=24, o=8)
    ext = {"i": 8, "a": 24}
    budget = SymmetricSum(ONE, ext, ("a_1", "a_2", "a_3"), block=6, workers=2,
                          budget=1e9).analyze().total_bytes
    s = SymmetricSum(ONE, ext, ("a_1", "a_2", "a_3"), block=6, workers=2, budget=budget)
    s.analyze()
    got, traced = traced_peak(lambda: s.evaluate(x))
    assert traced <= budget, (traced, budget)
    want = np.einsum("abci,ai,bi,ci->i", x["T"], x["u"], x["u"], x["u"])
    np.testing.assert_allclose(got["R"], want, rtol=1e-12, atol=0)
