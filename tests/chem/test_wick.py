"""The direct connected-Wick engine (sequant_eval.chem.wick).

Oracle for the engine as a whole: the sympy-derived CCSD file (``ccsd_so.txt``, itself
checked against Stanton-Gauss and a Fock-space brute force in test_derive.py), which the
engine must reproduce byte for byte; the CCSDT file is checked against wickd and ebcc in
test_ccsdt_equations.py.
"""
from __future__ import annotations

from fractions import Fraction

import pytest

from sequant_eval.chem import derive, wick
from sequant_eval.errors import SequantEvalError
from sequant_eval.expr import Equation, Index, Product, Tensor


def test_reproduces_sympy_ccsd_file():
    """E, R1, R2 from T1 + T2, spelled out, dummies from 3: the packaged text exactly."""
    eqs = []
    for name, result, level in derive._EQUATIONS:
        terms = sorted(wick.project(level, (1, 2), first_dummy=3).items(), key=derive._sort_key)
        eqs.append(Equation(name, tuple(Product(c, tuple(Tensor(*f) for f in key))
                                        for key, c in terms), result))
    assert derive._equations_text(derive._HEADER, eqs) == \
        derive.DATA_PATH.read_text(encoding="utf-8")


def test_single_contraction_sign():
    """<0| i+ a  a'+ i' |0> = +δ_aa' δ_ii' (nested lines, no crossing): R1 gets +f{a_1;i_1}
    and the t1 singles term f{a_1;a_2} t1{a_2;i_1} with coefficient +1."""
    terms = wick.project(1, (1,))
    i1, a1, a2 = Index("i", 1), Index("a", 1), Index("a", 2)
    assert terms[(("f", (a1,), (i1,)),)] == 1
    assert terms[(("f", (a1,), (a2,)), ("t1", (a2,), (i1,)))] == 1


def test_antisymmetrized_doubles_match_spelled_out():
    """The orbit form of R2: an orbit's coefficient is the signed sum over its spelled-out
    members. The f_vv term -f{a_1;a_3} t2{a_2,a_3} + f{a_2;a_3} t2{a_1,a_3} is one orbit of
    two members: -2 A{a_1,a_2;i_1,i_2} f{a_1;a_3} t2{a_2,a_3;i_1,i_2}."""
    anti = wick.project(2, (1, 2), antisymmetrize=True)
    spelled = wick.project(2, (1, 2))
    a1, a2, a3, i1, i2 = (Index("a", 1), Index("a", 2), Index("a", 3), Index("i", 1),
                          Index("i", 2))
    key = (("f", (a1,), (a3,)), ("t2", (a2, a3), (i1, i2)))
    assert spelled[key] == -1
    assert anti[key] == -2
    assert len(anti) < len(spelled)


def test_cluster_products():
    """At most four operators, excitation ranks within the projection level ± 2."""
    products = set(wick.cluster_products(3, (1, 2, 3)))
    assert (2, 3) in products and (1, 1, 1, 2) in products
    assert (3, 3) not in products and (1, 1, 1, 1, 1) not in products
    assert all(len(p) <= 4 and 1 <= sum(p) <= 5 for p in products)


def test_bad_request_is_a_typed_error():
    with pytest.raises(SequantEvalError, match="level is 0..4"):
        wick.project(5, (1, 2))
    with pytest.raises(SequantEvalError, match="number the summed indices from 3"):
        wick.project(2, (1, 2), first_dummy=2)


def test_coefficients_are_exact():
    terms = wick.project(3, (3,))
    assert all(isinstance(c, Fraction) for c in terms.values())
