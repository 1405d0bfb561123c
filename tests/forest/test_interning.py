"""Interning: equal contractions are one value up to relabeling, operand order, result order."""
from __future__ import annotations

import sequant_eval as se
from sequant_eval.forest import ValueKind, build_forest

EXTENTS = {"i": 4, "a": 7}
TERM = "1/2 g{i_3,i_4;a_3,a_4} * t2{a_1,a_3;i_1,i_3} * t2{a_2,a_4;i_2,i_4}"


def _forest(*terms: str):
    text = "R2{a_1,a_2;i_1,i_2} = " + " + ".join(terms)
    return build_forest(se.parse(text), EXTENTS)


def _contractions(forest) -> int:
    return sum(v.kind is ValueKind.CONTRACT for v in forest.values)


def test_relabeled_swapped_transposed_copy_adds_no_value():
    """The copy renames every dummy, lists factors in another order and swaps a_1<->a_2,
    i_1<->i_2 (so its result is a transposed read of the same value)."""
    base = _forest(TERM)
    copy = "1/2 t2{a_1,a_6;i_1,i_6} * g{i_5,i_6;a_5,a_6} * t2{a_2,a_5;i_2,i_5}"
    transposed = "1/2 t2{a_2,a_7;i_2,i_7} * t2{a_1,a_8;i_1,i_8} * g{i_8,i_7;a_8,a_7}"
    both = _forest(TERM, copy, transposed)
    assert both.binary_contractions == 3 * base.binary_contractions
    assert _contractions(both) == _contractions(base) == 2
    root = both.values[both.roots[0].value]
    assert len({e.value for e in root.entries}) == 1   # one value, read through perms


def test_genuinely_different_term_adds_values():
    """Positive control: a contraction pattern that differs (t2 legs crossed) is new."""
    base = _forest(TERM)
    other = _forest(TERM, "1/2 g{i_3,i_4;a_3,a_4} * t2{a_1,a_2;i_3,i_4} * t2{a_3,a_4;i_1,i_2}")
    assert _contractions(other) > _contractions(base)


def test_shared_subterm_across_equations():
    text = ("X{a_1;i_1} = f{a_1;a_2} * t1{a_2;i_1}\n"
            "Y{i_1;a_1} = t1{a_5;i_1} * f{a_1;a_5}")
    forest = build_forest(se.parse(text), EXTENTS)
    assert forest.binary_contractions == 2 and _contractions(forest) == 1


def test_leaf_blocks_are_values_per_space_tuple():
    forest = build_forest(se.parse("E = f{i_1;a_1} * t1{a_1;i_1} + f{i_1;i_2} * f{i_2;i_1}"),
                          EXTENTS)
    leaves = sorted((v.tensor, v.spaces) for v in forest.values if v.kind is ValueKind.LEAF)
    assert leaves == [("f", ("i", "a")), ("f", ("i", "i")), ("t1", ("a", "i"))]


def test_dump_is_deterministic_and_readable():
    a = _forest(TERM).dump()
    b = _forest(TERM).dump()
    assert a == b
    assert "contract v" in a and "sum R2" in a and "root R2{a_1,a_2,i_1,i_2}" in a


def test_operator_terms_become_one_grouped_sum():
    forest = build_forest(se.parse(
        "R2{a_1,a_2;i_1,i_2} = A{a_1,a_2;i_1,i_2} * f{a_1;a_3} * t2{a_3,a_2;i_1,i_2}"
        " + A{a_1,a_2;i_1,i_2} * f{i_3;i_1} * t2{a_1,a_2;i_3,i_2}"), EXTENTS)
    sums = [v for v in forest.values if v.kind is ValueKind.SUM]
    assert len(sums) == 2          # the A-group and the root
    inner, root = sums
    assert len(inner.entries) == 2 and len(root.entries) == 4
