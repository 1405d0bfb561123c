"""Parser and printer: the water-20 inputs round-trip, malformed text is located exactly."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

import sequant_eval as se
from sequant_eval.expr import Index, free_indices, operator_terms

ROOT = Path(__file__).resolve().parents[2]
WATER20 = sorted((ROOT / "data" / "water20").glob("*.txt"))


@pytest.mark.parametrize("path", WATER20, ids=lambda p: p.name)
def test_water20_files_round_trip(path):
    """parse → print → parse gives the same structure, for every line of the data files."""
    text = path.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines
    for line in lines:
        eqs = se.parse(line)
        assert se.parse(se.to_text(eqs)) == eqs


def test_water20_term_counts_and_free_indices():
    """Term counts stated in data/water20/README.md; results are the sorted free indices."""
    counts = {"csv_ccsd_doubles_residual_df.txt": 55, "csv_ccsd_singles_residual_df.txt": 26,
              "csv_ccsd_energy_df.txt": 5}
    for path in WATER20:
        (eq,) = se.parse(path.read_text())
        assert len(eq.terms) == counts[path.name]
        assert eq.bare
    (r2,) = se.parse((ROOT / "data/water20/csv_ccsd_doubles_residual_df.txt").read_text())
    assert [str(ix) for ix in r2.indices] == ["a_1<i_1,i_2>", "a_2<i_1,i_2>", "i_1", "i_2"]


def test_generated_ccsd_equations_round_trip():
    from sequant_eval.chem.equations import ccsd_text

    eqs = se.parse(ccsd_text())
    assert [e.name for e in eqs] == ["E", "R1", "R2"]
    assert se.parse(se.to_text(eqs)) == eqs
    assert se.parse(se.to_text(eqs, one_term_per_line=True)) == eqs


def test_index_forms():
    (eq,) = se.parse("R{a1;i_1,i_2} = 2 f{a1;Κ3} * h{Κ_3;μ̃_12;i1} * C{μ̃12;a_3<i_1,i_2>}"
                     " * t{a_3<i_1,i_2>;i_2}")
    f, h, c, t = eq.terms[0].factors
    assert f.bra == (Index("a", 1),) and f.ket == (Index("Κ", 3),)
    assert h.ket == (Index("μ̃", 12),) and h.aux == (Index("i", 1),)
    assert c.ket[0] == Index("a", 3, (Index("i", 1), Index("i", 2)))
    assert str(c.ket[0]) == "a_3<i_1,i_2>"


def test_coefficients_are_exact_rationals():
    (eq,) = se.parse("E = 1/4 g{i_1;a_1} t{a_1;i_1} - 0.5 g{i_1;a_1} * t{a_1;i_1} "
                     "+ 3 * 2/6 f{i_1;a_1} t{a_1;i_1} - f{i_1;a_1} * t{a_1;i_1}")
    assert [p.coefficient for p in eq.terms] == [Fraction(1, 4), Fraction(-1, 2), Fraction(1),
                                                 Fraction(-1)]


def test_symmetry_tags_and_aux_slots():
    (eq,) = se.parse("X{i_1;i_2} = g{i_1;i_3;Κ_1}:N-S-S * g{i_3;i_2;Κ_1}:A-C-S")
    assert [t.symmetry for t in eq.terms[0].factors] == ["N-S-S", "A-C-S"]
    assert eq.terms[0].factors[0].aux == (Index("Κ", 1),)


def test_continuation_lines_and_comments():
    eqs = se.parse("# a comment\nR{a_1;i_1} = f{a_1;i_1}  # trailing\n\n"
                   "  - f{a_1;a_2} * t{a_2;i_1}\n  + f{i_2;i_1} * t{a_1;i_2}\nE = f{i_1;a_1} t{a_1;i_1}\n")
    assert [e.name for e in eqs] == ["R", "E"]
    assert len(eqs[0].terms) == 3


def test_free_indices_are_sorted():
    (eq,) = se.parse("g{i_2;a_1} * t{a_3;i_1} * s{a_1;a_3} * u{a_7;a_2}")
    assert free_indices(eq.terms[0]) == (Index("a", 2), Index("a", 7), Index("i", 1),
                                         Index("i", 2))
    assert eq.indices == free_indices(eq.terms[0])


def test_antisymmetrizer_expansion_is_normalized():
    """A{a_1,a_2;i_1,i_2}: 1/(2!·2!) Σ sgn, four signed permutations of weight 1/4."""
    res = (Index("a", 1), Index("a", 2), Index("i", 1), Index("i", 2))
    (eq,) = se.parse("R{a_1,a_2;i_1,i_2} = A{a_1,a_2;i_1,i_2} * X{a_1,a_2;i_1,i_2}")
    terms = dict((p, w) for w, p in operator_terms(eq.terms[0].operators, res))
    assert terms == {(0, 1, 2, 3): Fraction(1, 4), (1, 0, 2, 3): Fraction(-1, 4),
                     (0, 1, 3, 2): Fraction(-1, 4), (1, 0, 3, 2): Fraction(1, 4)}


def test_pair_permutations_compose():
    """P{a_1,a_2} P{i_1,i_2} = (1 - P_ab)(1 - P_ij): four terms with signs +,-,-,+."""
    res = (Index("a", 1), Index("a", 2), Index("i", 1), Index("i", 2))
    (eq,) = se.parse("R{a_1,a_2;i_1,i_2} = P{a_1,a_2} * P{i_1,i_2} * X{a_1,a_2;i_1,i_2}")
    terms = dict((p, w) for w, p in operator_terms(eq.terms[0].operators, res))
    assert terms == {(0, 1, 2, 3): 1, (1, 0, 2, 3): -1, (0, 1, 3, 2): -1, (1, 0, 3, 2): 1}


MALFORMED = [
    # (text, line, column)
    ("R{a_1;i_1} = f{a_1;i_1", 1, 23),                 # unterminated tensor
    ("R{a_1;i_1} = f{a_1;i_1} $ t{a_1;i_1}", 1, 25),    # stray character
    ("R{a_1;i_1} = f{a_1,;i_1}", 1, 20),               # empty index
    ("R{a_1;i_1} = f{a_1;i_1} +", 1, 26),              # dangling sign
    ("R{a_1;i_1} = f{a_1;i_1} + + f{a_1;i_1}", 1, 27),  # doubled sign
    ("R{a_1;i_1} = 1/0 f{a_1;i_1}", 1, 16),            # division by zero
    ("R{a_1;i_1} =", 1, 13),                           # empty right-hand side
    ("R{a_1;i_1} = f{a_1;i_1}:X-C-S", 1, 25),          # bad symmetry letter
    ("R{a_1;i_1} = f{_1;i_1}", 1, 16),                 # index without a space name
    ("R{a_1;i_1} = f{a_1<i_1;i_1}", 1, 23),            # unterminated proto list
    ("R{a_1;i_1} = f{a_1;i_1;Κ_1;x_1}", 1, 27),        # four index groups
    ("R{a_1;i_1} = A{a_1;i_1;x_1} * f{a_1;i_1}", 1, 14),  # A takes no aux group
    ("R{a_1,a_2;i_1} = P{a_1,a_2,i_1} * f{a_1,a_2;i_1}", 1, 18),  # P with three indices
    ("R{a_1;i_1} = f{a_1;i_2}", 1, 14),                # free index not on the left
    ("R{a_1;i_1} = f{a_1;a_2}", 1, 14),                # result index missing
    ("R{a_1;i_1} = f{a_1;i_1} * * t{a_1;i_1}", 1, 27),  # doubled star
    ("R{a_1;i_1} = f{a_1;i_1} = g{a_1;i_1}", 1, 25),   # second equals
    ("R{a_1,a_1;i_1} = f{a_1;i_1}", 1, 1),             # result index repeated
    ("R{a_1;i_1} = f{a_1;i_1}\n  - g{a_1;i_1\n", 2, 14),  # error on a continuation line
    ("E = f{i_1;a_1} t{a_1;i_1}\nR{a_1;i_1} = }", 2, 14),  # error on the second equation
    ("R{a_1;i_1} = f{a_1<i_1<i_2>>;i_1}", 1, 23),      # nested protos
    ("R{a_1;i_1} = f{a_1;i_1}:A-C", 1, 25),            # truncated symmetry tag
    ("R{a_1;i_1} = 2.5.3 f{a_1;i_1}", 1, 17),          # malformed number
    ("R{a_1,a_2;i_1,i_2} = A{a_1,a_3;i_1,i_2} * X{a_1,a_2;i_1,i_2}", 1, 22),  # A on non-result
    ("R{a_1;i_1} = f{a_1;i_1} *", 1, 26),             # trailing star
]


@pytest.mark.parametrize("text,line,column", MALFORMED)
def test_malformed_input_is_located(text, line, column):
    with pytest.raises(se.ParseError) as info:
        se.parse(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert f"line {line}, column {column}" in str(info.value)


def test_error_message_shows_the_offending_text():
    with pytest.raises(se.ParseError) as info:
        se.parse("R{a_1;i_1} = f{a_1;i_1} $ t{a_1;i_1}")
    assert "'$'" in str(info.value) and "^" in str(info.value)


# -- hostile input (issue 11): typed errors, located, quick ---------------------------------

T = "g{i_1;a_1} t{a_1;i_1}"
HOSTILE = [
    # (text, line, column, words the message must contain)
    ("R{a_1;i_1} = f{a_1;i²}", 1, 21, ["SUPERSCRIPT TWO", "ASCII digits"]),
    ("R{a_1;i_1} = ² f{a_1;i_1}", 1, 14, ["U+00B2"]),
    ("R{a_1;i_1} = f{a_1;i_1} ٣", 1, 25, ["ARABIC-INDIC DIGIT THREE"]),
    ("R{a_1;i_1} = f{a_1;i_1} → t{a_1;i_1}", 1, 25, ["RIGHTWARDS ARROW", "only letters"]),
    (f"E = 1e100000000 {T}", 1, 5, ["exponent", "±400"]),
    (f"E = 1e99999999999999999999 {T}", 1, 5, ["exponent"]),
    (f"E = 1e400 {T}", 1, 5, ["overflows float64", "1e+400"]),
    (f"E = 1e200 1e200 {T}", 1, 5, ["overflows"]),             # each fits, the product not
    (f"E = 1/1e-400 {T}", 1, 5, ["overflows"]),
    (f"E = -1e-400 {T}", 1, 6, ["underflows"]),
    ("E = " + "7" * 5000 + f" {T}", 1, 5, ["at most 1000 digits"]),
    ("R{a_1;i_" + "1" * 1200 + "} = f{a_1;i_1}", 1, 7, ["index number"]),
    (f"E = {T}\nE = 2 {T}", 2, 1, ["already defined", "line 1"]),  # duplicate result
    (f"{T}\nR = 2 {T}", 2, 1, ["result R"]),                   # bare R, then an explicit R
]


@pytest.mark.parametrize("text,line,column,words", HOSTILE)
def test_hostile_text_is_refused_with_a_located_parse_error(text, line, column, words):
    with pytest.raises(se.ParseError) as info:
        se.parse(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    for word in words:
        assert word in str(info.value)
    assert len(str(info.value)) < 600            # a long token is elided, not echoed whole


@pytest.mark.parametrize("value,hint", [(None, "NoneType"), (b"E = f{i_1;i_1}", "decode"),
                                        (42, "int"), (["E = x"], "list")])
def test_parse_refuses_non_text(value, hint):
    with pytest.raises(se.SequantEvalError) as info:
        se.parse(value)
    assert isinstance(info.value, TypeError) and hint in str(info.value)


def test_bounded_coefficients_still_parse_exactly_and_round_trip():
    """Oracle: exact rational arithmetic (Fraction) on the literals as written."""
    (eq,) = se.parse(f"E = 1e300 * 1e-300 * 3/1e5 {T} + 1e-300/3 {T}")
    assert [p.coefficient for p in eq.terms] == [Fraction(3, 10**5), Fraction(1, 3 * 10**300)]
    eqs = se.parse(se.to_text([eq]))
    assert eqs == [eq]


def test_duplicate_results_across_parses_are_refused():
    from sequant_eval.expr import check_unique_results

    a = se.parse(f"E = {T}")
    b = se.parse(f"E = 2 {T}")
    check_unique_results(a + se.parse(f"F = {T}"))              # negative control: distinct
    with pytest.raises(se.ExpressionError, match=r"result E \(a.txt and b.txt\)"):
        check_unique_results(a + b, ["a.txt", "b.txt"])


def test_random_text_raises_only_typed_errors_and_quickly():
    """Oracle: the contract that parse either returns equations or raises a SequantEvalError
    (never AttributeError/ValueError/...), on arbitrary text built from the grammar's tokens
    and stray characters. The clock is a hang guard (a number like 9e999 turned into an exact
    fraction would run for minutes), not a speed claim: a parse takes milliseconds, and the
    limit is generous so a loaded machine cannot trip it."""
    import time

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    pieces = st.sampled_from(
        ["R", "E", "=", "<-", "{", "}", ";", ",", "<", ">", "*", "+", "-", "/", ":", "A-C-S",
         "#", "\n", " ", "i_1", "a_2", "Κ_3", "μ̃_1", "1", "0", "1/2", "0.5", "1e5", "1e-9",
         "9e999", "e", ".", "²", "٣", "_", "A", "P", "f", "g{i_1;a_1}", "t{a_1;i_1}", "\t",
         "\u0303", "x" * 50, "9" * 70])

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(pieces, max_size=40).map("".join))
    def check(text):
        start = time.perf_counter()
        try:
            se.parse(text)
        except se.SequantEvalError:
            pass
        assert time.perf_counter() - start < 10.0

    check()
