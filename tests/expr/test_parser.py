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
    ("R{a_1;i_1} = f{a_1,a_1;i_1}", 1, 14),            # repeated slot label
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
