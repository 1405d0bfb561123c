"""``sequant_eval.budget.Budget``: every spelling read once, every bad value one typed error.

Oracles: the byte counts as written (decimal and binary units), the share as a fraction."""
from __future__ import annotations

import math

import pytest

import sequant_eval as se
from sequant_eval.budget import Budget
from sequant_eval.errors import BudgetError, PolicyError


@pytest.mark.parametrize("given, fixed", [
    (25e9, 25e9), (1000, 1000.0), ("25GB", 25e9), ("4GiB", 4 * 2**30), ("25e6", 25e6),
    (" 2 kb ", 2000.0), ("1.5MiB", 1.5 * 2**20), ("7", 7.0)])
def test_byte_counts(given, fixed):
    b = Budget.parse(given)
    assert b.fixed == fixed and b.share is None and not b.unlimited
    assert b.bytes_for(1e12, reserve=5) == fixed          # a fixed budget covers everything


@pytest.mark.parametrize("given", [None, math.inf, "inf"])
def test_no_budget(given):
    b = Budget.parse(given)
    assert b.unlimited and b.bytes_for(123) == math.inf and str(b) == "no budget"


def test_share_of_the_unbatched_peak_plus_the_reserve():
    b = Budget.parse("25%")
    assert b.share == 0.25 and b.fixed is None and str(b) == "25%"
    assert b.bytes_for(1000, reserve=10) == 260
    assert Budget.parse("150 %").share == 1.5


def test_parse_is_idempotent_and_max_memory_is_megabytes():
    b = Budget.parse("5MB")
    assert Budget.parse(b) is b
    assert Budget.megabytes(4000).fixed == 4e9 and Budget.megabytes(None).unlimited
    assert "5MB" in str(b) and "4.77 MiB" in str(b)


BAD = [True, 0, -1, float("nan"), "lots", "1.2.3", ".", "0%", "-5%", "5 parsecs", "1e999",
       [1], "-3MB"]


@pytest.mark.parametrize("bad", BAD)
def test_bad_values_are_one_typed_error(bad):
    with pytest.raises(BudgetError) as info:
        Budget.parse(bad)
    err = info.value
    assert isinstance(err, PolicyError) and err.value is bad or err.value == bad
    text = str(err)
    assert text.startswith(f"budget {bad!r} ") and "'25GB'" in text and "'25%'" in text


def test_numbers_past_a_float_are_refused_not_taken_as_no_budget():
    """An integer too large for a float raised OverflowError; a text whose bytes overflow
    only after its unit (1e300 TB) or a max_memory whose bytes do (1e305 MB) read as no
    budget. Each is a BudgetError now, naming the overflow (and a huge integer shortly)."""
    for bad in (10 ** 400, "1e300 TB", "1e400"):
        with pytest.raises(BudgetError, match="overflows a float") as info:
            Budget.parse(bad)
        assert len(str(info.value)) < 300
    for bad in (10 ** 400, 1e305):
        with pytest.raises(BudgetError, match="overflows a float"):
            Budget.megabytes(bad)
    with pytest.raises(BudgetError, match="overflows a float"):
        se.analyze("R{a_1;i_1} = f{a_1;a_2} * t{a_2;i_1}", {"i": 4, "a": 6}, budget=10 ** 400)
    assert Budget.parse("inf").unlimited and Budget.megabytes(math.inf).unlimited


def test_bad_max_memory():
    with pytest.raises(BudgetError, match="megabytes"):
        Budget.megabytes(-1)
