"""Budgets and batch policies: every malformed knob is a typed PolicyError naming it.

Oracle for the accepted forms: the byte counts as written (units: SI and binary)."""
from __future__ import annotations

import math

import pytest

import sequant_eval as se
from sequant_eval.errors import PolicyError
from sequant_eval.plan import BatchPolicy
from sequant_eval.budget import Budget
from sequant_eval.plan.policy import parse_bytes


@pytest.mark.parametrize("value,bytes_", [
    ("4GiB", 4 * 2**30), ("25GB", 25e9), (" 5 MB ", 5e6), (".5kB", 500), ("25e9", 25e9),
    (25e9, 25e9), (7, 7.0), ("inf", math.inf), (None, math.inf)])
def test_budgets_read_as_bytes(value, bytes_):
    assert parse_bytes(value) == bytes_


@pytest.mark.parametrize("value,words", [
    ("1.2.3", "'1.2.3' is not a byte count"), (".", "'.' is not a byte count"),
    ("", "'' is not a byte count"),
    (True, "bool"), (False, "bool"), ([3], "list"), ("-3", "positive"), ("0", "positive"),
    (0, "positive"), (float("nan"), "positive"), ("12 parsecs", "is not a byte count"),
    ("1e400", "overflows"), ("25%", "share of the unbatched peak")])
def test_malformed_budgets_are_policy_errors(value, words):
    with pytest.raises(PolicyError) as info:
        parse_bytes(value)
    assert words in str(info.value)
    assert isinstance(info.value, se.SequantEvalError) and isinstance(info.value, ValueError)
    with pytest.raises(PolicyError):
        BatchPolicy(budget=value)


def test_a_share_is_a_marker_the_caller_resolves():
    """Oracle: 25 % of a stated unbatched peak (plus a stated reserve)."""
    share = Budget.parse(" 25 % ")
    assert share.share == 0.25 and share.fixed is None
    assert share.bytes_for(1000) == 250.0 and share.bytes_for(1000, 7) == 257.0
    assert Budget.parse("5MB").bytes_for(1000) == 5e6       # bytes pass through
    for bad in ("0%", "-5%", "x%", "%"):
        with pytest.raises(PolicyError):
            Budget.parse(bad)


@pytest.mark.parametrize("size", [None, float("nan"), "abc", "16", math.inf, 0, -4, 2.5, True])
def test_block_sizes_must_be_positive_integers(size):
    with pytest.raises(PolicyError, match=r"block size of space 'i'"):
        BatchPolicy(block={"i": size})


def test_integral_floats_are_block_sizes():
    assert BatchPolicy(block={"i": 16.0}).block == {"i": 16}


@pytest.mark.parametrize("kw,words", [
    (dict(itemsize=0), "itemsize"), (dict(itemsize=-8), "itemsize"),
    (dict(itemsize=True), "itemsize"), (dict(itemsize=8.5), "itemsize"),
    (dict(contracted="μ̃"), "the string 'μ̃'"), (dict(external="i"), "external"),
    (dict(volatile="t2"), "tensor names"), (dict(contracted=[1]), "not a space name"),
    (dict(contracted={"i": 3}), "collection"), (dict(block=[("i", 3)]), "block must map"),
    (dict(block={3: 4}), "key 3"), (dict(accumulation_factor=float("nan")), "accumulation"),
    (dict(accumulation_factor=-1), "accumulation"), (dict(max_loops=-1), "max_loops")])
def test_malformed_policy_knobs_are_refused(kw, words):
    with pytest.raises(PolicyError) as info:
        BatchPolicy(**kw)
    assert words in str(info.value)


def test_check_refuses_spaces_the_extents_do_not_know():
    extents = {"i": 10, "a": 38}
    BatchPolicy(contracted={"i"}, external={"a"}, block={"a": 8}).check(extents)   # control
    for kw, role in ((dict(contracted={"μ̃"}), "contracted"), (dict(external={"x"}), "external"),
                     (dict(block={"K": 4}), "block")):
        with pytest.raises(PolicyError, match=f"{role} names space") as info:
            BatchPolicy(**kw).check(extents)
        assert "known: i, a" in str(info.value)


def test_check_takes_a_regime():
    from sequant_eval.plan.regime import Regime

    regime = Regime({"i": 8, "Κ": 100})
    BatchPolicy(contracted={"Κ"}).check(regime)
    with pytest.raises(PolicyError, match="'K'"):           # Latin K, not Greek Κ
        BatchPolicy(contracted={"K"}).check(regime)


def test_sinks_given_as_names_are_refused_naming_the_mapping():
    """``sinks=["R2"]`` was read as pairs of letters: "sink of 'R' has kind '2'" (a
    hostile-input probe, 2026-12-07). Now every non-mapping of names is refused with the
    way to write it; the pairs and the mapping are read alike."""
    for bad in (["R2"], ("R2",), ["R2", "E"], "R2", 5):
        with pytest.raises(PolicyError, match=r"sinks must map result names .* "
                                              r"sinks=\{'R2': 'accumulate'\}"):
            BatchPolicy(sinks=bad)
    assert BatchPolicy(sinks=[("R2", "once")]).sinks == BatchPolicy(sinks={"R2": "once"}).sinks
