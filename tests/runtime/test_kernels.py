"""Contraction plans (strided matmul, split, multiply, einsum fallback) against np.einsum."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import sequant_eval as se
from sequant_eval.forest.values import Operand, Value, ValueKind
from sequant_eval.runtime.backends import NumpyBackend
from sequant_eval.plan import kernels
from sequant_eval.plan.kernels import GEMM, plan_contraction


@st.composite
def contractions(draw):
    """Random binary contractions: any mode order, extents 0-5, Hadamard and outer modes."""
    n = draw(st.integers(1, 6))
    extent = {m: draw(st.sampled_from([1, 2, 3, 5] if draw(st.booleans()) else [0, 1, 2, 4]))
              for m in range(n)}
    where = [draw(st.sampled_from(["a", "b", "ab"])) for _ in range(n)]
    a = draw(st.permutations([m for m in range(n) if "a" in where[m]]))
    b = draw(st.permutations([m for m in range(n) if "b" in where[m]]))
    hadamard = [m for m in range(n) if where[m] == "ab" and draw(st.booleans())
                and draw(st.booleans())]
    r = draw(st.permutations([m for m in range(n) if where[m] != "ab"] + hadamard))
    return extent, tuple(a), tuple(b), tuple(r)


@settings(max_examples=300, deadline=None)
@given(contractions(), st.integers(0, 2**32 - 1))
def test_plan_equals_einsum(case, seed):
    """Oracle: np.einsum on the same operands; the result is C-contiguous in value layout."""
    extent, a, b, r = case
    value = Value(2, ValueKind.CONTRACT, ("x",) * len(r), left=Operand(0, a),
                  right=Operand(1, b), result=r)
    plan = plan_contraction(value, None, None, [extent[m] for m in r],
                            [extent[m] for m in a], [extent[m] for m in b])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal([extent[m] for m in a])
    y = rng.standard_normal([extent[m] for m in b])
    x.setflags(write=False)  # integral blocks arrive read-only
    sym = "abcdefgh"
    ref = np.einsum(f"{''.join(sym[m] for m in a)},{''.join(sym[m] for m in b)}"
                    f"->{''.join(sym[m] for m in r)}", x, y)
    got = NumpyBackend._run(plan, x, y)
    assert got.shape == ref.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(contractions(), st.permutations(range(6)), st.integers(3, 9))
def test_a_remembered_plan_serves_the_same_pattern_under_other_labels(case, relabel, vid):
    """A contraction whose modes are renamed (same pattern, same shapes) is served the
    remembered plan of the first, with its own value and labels; oracle: the plan searched
    from scratch for it (``_plan_contraction``, no cache). Every example exercises it."""
    extent, a, b, r = case
    shapes = ([extent[m] for m in r], [extent[m] for m in a], [extent[m] for m in b])
    first = Value(2, ValueKind.CONTRACT, ("x",) * len(r), left=Operand(0, a),
                  right=Operand(1, b), result=r)
    plan_contraction(first, None, None, *shapes)
    name = {m: 10 + relabel[m] for m in extent}
    other = Value(vid, ValueKind.CONTRACT, ("x",) * len(r), left=Operand(0, tuple(map(name.get, a))),
                  right=Operand(1, tuple(map(name.get, b))), result=tuple(map(name.get, r)))
    assert plan_contraction(other, None, None, *shapes) == kernels._plan_contraction(
        other, *shapes)


@settings(max_examples=300, deadline=None)
@given(contractions())
def test_the_plan_is_the_cheapest_grouping_of_all(case):
    """The search stops once the BLAS calls alone of the groupings left cost more than the
    best found; oracle: every grouping costed (``_gemm_candidate`` on each, written out
    here), the cheapest taken, ties to the first enumerated. Examples with a contracted
    mode of extent > 1 (about half) exercise the search; the rest are GEMM-free plans."""
    extent, a, b, r = case
    value = Value(2, ValueKind.CONTRACT, ("x",) * len(r), left=Operand(0, a),
                  right=Operand(1, b), result=r)
    plan = kernels._plan_contraction(value, [extent[m] for m in r], [extent[m] for m in a],
                                     [extent[m] for m in b])
    if plan.kind != GEMM:
        return
    big = {m for m, e in extent.items() if e > 1}
    la, lb, lr = (kernels._Layout(x, extent) for x in (a, b, r))
    contracted = (set(a) & set(b) & big) - set(r)
    costed = []
    for rows in kernels._orders((la, lr), (set(a) - set(b)) & big):
        for cols in kernels._orders((lb, lr), (set(b) - set(a)) & big):
            for ks in kernels._orders((la, lb), contracted):
                found = ks and kernels._gemm_candidate(la, lb, lr, rows, cols, ks,
                                                       contracted, extent)
                if found:
                    costed.append((found[0], len(costed), (rows, cols, ks)))
    cost, _, grouping = min(costed)
    assert (plan.cost_us, plan.grouping) == (cost, grouping)


def test_middle_mode_contraction_of_a_big_operand_is_not_copied():
    """t1 against the third slot of g{a,a;a,a}: batched GEMMs over strided views, no copy of g.

    Oracle for the value: np.einsum.
    """
    ext = {"i": 3, "a": 9}
    ev = se.Evaluator("R{i_1,a_1,a_2,a_3} = g{a_1,a_2;a_4,a_3} * t1{a_4;i_1}", ext)
    rng = np.random.default_rng(1)
    g, t1 = rng.standard_normal((9, 9, 9, 9)), rng.standard_normal((9, 3))
    out = ev.evaluate({"g": {("a", "a", "a", "a"): g}, "t1": {("a", "i"): t1}})["R"]
    plans = [p for p in ev.batched.contraction_plans() if p.kind == GEMM]
    assert len(plans) == 1
    big = plans[0].left if len(plans[0].left.shape) > 3 else plans[0].right
    assert not big.copies
    np.testing.assert_allclose(out, np.einsum("pqrs,ri->ipqs", g, t1), rtol=1e-12, atol=1e-12)


def test_object_arrays_fall_back_to_einsum():
    """Exact Fractions in object arrays: the strided-view path cannot take them; einsum does."""
    from fractions import Fraction

    value = Value(2, ValueKind.CONTRACT, ("x", "x"), left=Operand(0, (0, 1)),
                  right=Operand(1, (1, 2)), result=(0, 2))
    plan = plan_contraction(value, None, None, [2, 2], [2, 3], [3, 2])
    x = np.array([[Fraction(k, 3) for k in range(3)]] * 2, dtype=object)
    y = np.array([[Fraction(1, 2)] * 2] * 3, dtype=object)
    got = NumpyBackend._run(plan, x, y)
    assert got[0, 0] == Fraction(1, 2)
