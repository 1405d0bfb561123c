"""General contractions as NumPy's ``einsum`` computes them: rank-0 tensors, diagonals,
sums inside one factor, hyperedges; the refusals, typed.

Oracle: ``numpy.einsum`` on the same arrays (``tests/oracles/einsum.py`` writes an einsum
string in the package's text). The expressions are data: every distinct einsum string in
opt_einsum 3.4.0's test suite (https://github.com/dgasmith/opt_einsum, ``opt_einsum/tests/``)
that NumPy accepts, 122 of them, listed under the file each first appears in; 23 take a
diagonal or a trace and 15 more sum an index inside one factor (all 38 were refused at
parse time before).
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.expr.index import Index
from sequant_eval.expr.terms import Equation, Product, Tensor
from sequant_eval.forest import build_forest
from sequant_eval.forest.values import ONES, ValueKind
from sequant_eval.runtime.sources import DIAGONAL_PIECE_SHARE

from tests.oracles.einsum import (batched_evaluator, check_batched, check_unbatched,
                                  einsum_text, features)

OPT_EINSUM_EXPRESSIONS = (
    # tests/test_contract.py (the `tests` list, then the constant-operand cases)
    "a,->a", "ab,->ab", ",ab,->ab", ",,->", "a,ab,abc->abc", "a,b,ab->ab",
    "ea,fb,gc,hd,abcd->efgh", "ea,fb,abcd,gc,hd->efgh", "abcd,ea,fb,gc,hd->efgh",
    "acdf,jbje,gihb,hfac,gfac,gifabc,hfac", "cd,bdhe,aidb,hgca,gc,hgibcd,hgac",
    "abhe,hidj,jgba,hiab,gab", "bde,cdh,agdb,hica,ibd,hgicd,hiac",
    "chd,bde,agbc,hiad,hgc,hgi,hiad", "chd,bde,agbc,hiad,bdi,cgh,agdb",
    "bdhe,acad,hiab,agac,hibd", "ab,ab,c->", "ab,ab,c->c", "ab,ab,cd,cd->", "ab,ab,cd,cd->ac",
    "ab,ab,cd,cd->cd", "ab,ab,cd,cd,ef,ef->", "ab,cd,ef->abcdef", "ab,cd,ef->acdf",
    "ab,cd,de->abcde", "ab,cd,de->be", "ab,bcd,cd->abcd", "ab,bcd,cd->abd", "eb,cb,fb->cef",
    "dd,fb,be,cdb->cef", "bca,cdb,dbf,afc->", "dcc,fce,ea,dbf->ab", "fdf,cdd,ccd,afe->ae",
    "abcd,ad", "ed,fcd,ff,bcf->be", "baa,dcf,af,cde->be", "bd,db,eac->ace",
    "fff,fae,bef,def->abd", "efc,dbc,acf,fd->abe", "ab,ab", "ab,ba", "abc,abc", "abc,bac",
    "abc,cba", "ab,bc", "ab,cb", "ba,bc", "ba,cb", "abcd,cd", "abcd,ab", "abcd,cdef",
    "abcd,cdef->feba", "abcd,efdc", "aab,bc->ac", "ab,bcc->ac", "aab,bcc->ac", "baa,bcc->ac",
    "aab,ccb->ac", "aab,fa,df,ecc->bde", "ecb,fef,bad,ed->ac", "bcf,bbb,fbf,fc->",
    "bb,ff,be->e", "bcb,bb,fc,fff->", "fbb,dfd,fc,fc->", "afd,ba,cc,dc->bf",
    "adb,bc,fa,cfc->d", "bbd,bda,fc,db->acf", "dba,ead,cad->bce", "aef,fbc,dca->bde",
    "ij,jk,kl->il", "->", "hbc,bdef,cdkj,ji,ikeh,lfo", "bdef,cdkj,ji,ikeh,hbc,lfo",
    "ijab,acd,bce,df,ef->ji", "ab,cd,ad,cb", "ab,bc,cd",
    # tests/test_paths.py
    ",a,->a", ",,a,->a", "a,b,c", "abc,bdef,fghj,cem,mhk,ljk->adgl", "a,ac,ab,ad,cd,bd,bc->",
    "abc,cfd,dbe,efa", ",", "nlp,nlq,pl->n", "a,bcd,efg->", "a,b,abc->c", "ab,cd,ef,fg",
    # tests/test_edge_cases.py
    "ab,bc->ac", "ijk,kl,jl", "ijk,kl,jl,i->i", "abjk,kl,jl", "abjk,kl,jl,ab->ab",
    "ajk,kbl,jl,ab->ab", "obk,ijk->ioj", "ab,bc,bd->acd", "bc,ab->bca", "bca,bd->acd", "ab,->",
    # tests/test_sharing.py
    "ab,bc->ca", "abc,bcd,dea", "abc,def->fedcba", "abc,bcd,df->fa", "ijk,ikj", "i,j->ij",
    "ijk,k->ij", "AB,BC->CA", "ab,bc,cd->", "ab,bc,cd->a", "ab,bc,cd->b", "ab,bc,cd->c",
    "a,b->", "c,d->", "ab,bc,de->", "ij,jk,kl",
    # tests/test_backends.py
    "ij,jk,kl->li", "ij,jk,kl->",
    # tests/test_blas.py
    "ij,jk->ik",
    # tests/test_input.py
    "ii->i", "ij->ij", "a,b", "ij,ij->j",
    # tests/test_parser.py
    "da,ab",
)

#: Single-operand forms NumPy's einsum documents (traces, diagonals, sums, transposes).
SINGLE_OPERAND = ("ii->", "ii", "iij->j", "iji->ij", "iii->i", "iii->", "ij->", "ij->i",
                  "ij->j", "ij->ji", "i->", "ijk->kji", "iijj->", "iijj->ij", "ijij->ji")

#: Extent of each letter: 2..5, so that transposed reads of equal-length axes are told apart.
SIZES = {c: 2 + k % 4 for k, c in enumerate("abcdefghijklmnopqrstuvwxyzABC")}


def test_the_expressions_are_the_ones_described():
    """The docstring's counts: 122 distinct, 23 with a diagonal or trace, 15 more with an
    index summed inside one factor."""
    assert len(OPT_EINSUM_EXPRESSIONS) == len(set(OPT_EINSUM_EXPRESSIONS)) == 122
    feats = [features(s) for s in OPT_EINSUM_EXPRESSIONS]
    diagonal = [f for f in feats if f & {"diagonal", "trace"}]
    single = [f for f in feats if "single" in f and not f & {"diagonal", "trace"}]
    assert (len(diagonal), len(single)) == (23, 15)


#: Whether each expression ran batched in the test below (read by the one after it).
_BATCHED: dict[str, bool] = {}


@pytest.mark.parametrize("subscripts", OPT_EINSUM_EXPRESSIONS + SINGLE_OPERAND)
def test_opt_einsum_expressions_evaluate_exactly(subscripts):
    """Unbatched, and at the smallest budget the planner meets with one-element blocks
    (batched wherever that is below the unbatched peak). Oracle: numpy.einsum."""
    check_unbatched(subscripts, SIZES)
    _BATCHED[subscripts] = check_batched(subscripts, SIZES)


def test_most_expressions_run_batched():
    """The batched half of the test above is not vacuous: at the smallest budget, the
    plan of every expression with two operands or more that are not scalars has a batch
    loop (114 of the 122; a single operand without a sum is streamed into its result)."""
    batched = [s for s in OPT_EINSUM_EXPRESSIONS
               if _BATCHED.get(s, None) or (s not in _BATCHED and check_batched(s, SIZES))]
    unbatched = sorted(set(OPT_EINSUM_EXPRESSIONS) - set(batched))
    assert all(sum(1 for f in s.split("->")[0].split(",") if f) <= 1 for s in unbatched), \
        unbatched
    assert len(batched) >= 110 and "aab,bc->ac" in batched and "ab,ab,c->" in batched


@pytest.mark.parametrize("subscripts", ["aab,bc->ac", "baa,bcc->ac", "fff,fae,bef,def->abd",
                                        "ab,ab,c->", "iijj->ij"])
@pytest.mark.parametrize("position", [0.25, 0.5, 0.9])
def test_diagonals_and_sums_at_budgets_between_the_smallest_and_the_unbatched(subscripts,
                                                                              position):
    """Oracle: numpy.einsum; the meters equal the prediction (``check_batched``)."""
    check_batched(subscripts, SIZES, seed=3, position=position)


# -- rank 0 ------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["numpy", "array_api_strict"])
@pytest.mark.parametrize("text, expected", [
    ("E = T0{;}", 3.0),
    ("E = 2 T0{;}", 6.0),
    ("E = T0{;} - 1/2 T0{;}", 1.5),
    ("E = T0{;} * T1{;}", -6.0),
    ("E = T0{;} + T0{;} * T1{;}", -3.0),
])
def test_rank0_alone_in_a_term(text, expected, backend):
    """A rank-0 tensor alone in a term stays rank 0 (it used to become 1-D and fail in the
    sum's transpose). Oracle: the arithmetic written out."""
    if backend == "array_api_strict":
        pytest.importorskip("array_api_strict")
    out = se.evaluate(text, {"T0": np.array(3.0), "T1": np.array(-2.0)}, {}, backend=backend)
    assert np.asarray(out["E"]).shape == ()
    assert float(out["E"]) == pytest.approx(expected, rel=1e-15)


def test_rank0_times_a_vector():
    """Oracle: numpy.einsum(',a->a')."""
    x, y = np.array(1.5), np.arange(1.0, 4.0)
    out = se.evaluate("R{a} = T0{;} * T1{a} + T1{a}", {"T0": x, "T1": y}, {"a": 3})
    np.testing.assert_allclose(out["R"], np.einsum(",a->a", x, y) + y, rtol=1e-15)


# -- the text and the forest ---------------------------------------------------------------

def test_text_of_an_einsum_string():
    assert einsum_text("aab,bc->ac") == "E{a,c} = T0{a,a,b} * T1{b,c}"
    assert einsum_text("ab,ab,c->") == "E = T0{a,b} * T1{a,b} * T2{c}"
    assert einsum_text("ab,ba") == "T0{a,b} * T1{b,a}"
    assert einsum_text(",a->a") == "E{a} = T0{} * T1{a}"


def test_a_diagonal_is_one_leaf_value_at_the_diagonals_size():
    """``T{a_1,a_1,a_2}`` and ``T{a_3,a_3,a_2}`` (another dummy) are one value of two
    modes; ``T{a_1,a_2,a_2}`` is another; the whole ``T`` a third."""
    eqs = se.parse("R{a_2,a_4} = T{a_1,a_1,a_2} * U{a_1,a_4} + T{a_3,a_3,a_2} * U{a_3,a_4}\n"
                   "S{a_1,a_2} = T{a_1,a_2,a_2}\nQ{a_1,a_2,a_3} = T{a_1,a_2,a_3}")
    forest = build_forest(eqs, {"a": 3})
    leaves = [v for v in forest.values if v.kind is ValueKind.LEAF and v.tensor == "T"]
    assert sorted((v.spaces, v.diagonal) for v in leaves) == [
        (("a", "a"), (0, 0, 1)), (("a", "a"), (0, 1, 1)), (("a", "a", "a"), ())]
    assert "leaf T diagonal[0,0,1]" in forest.dump()
    # spaces of the tensor's slots, which the source reads
    assert {v.slot_spaces for v in leaves} == {("a", "a", "a")}


def test_a_sum_inside_one_factor_is_a_contraction_with_ones():
    """``R{a} = T{a,b}`` is ``T{a,b} * 1{b}``: a binary contraction the planner batches."""
    forest = build_forest(se.parse("R{a} = T{a,b}"), {"a": 4, "b": 5})
    ones = [v for v in forest.values if v.tensor == ONES]
    assert [v.spaces for v in ones] == [("b",)]
    assert forest.distinct_contractions == 1


def test_an_antisymmetrizer_naming_an_index_twice_is_a_tensor():
    """``A{a,a}`` is not an antisymmetrizer (it would act on one index twice) but a tensor
    named A read on its diagonal. Oracle: numpy.einsum('aa,ab->ab')."""
    (eq,) = se.parse("R{a,b} = A{a,a} * X{a,b}")
    assert not eq.terms[0].operators and [t.name for t in eq.terms[0].factors] == ["A", "X"]
    rng = np.random.default_rng(0)
    a, x = rng.standard_normal((3, 3)), rng.standard_normal((3, 4))
    out = se.evaluate("R{a,b} = A{a,a} * X{a,b}", {"A": a, "X": x}, {"a": 3, "b": 4})
    np.testing.assert_allclose(out["R"], np.einsum("aa,ab->ab", a, x), rtol=1e-14)


# -- diagonals from every kind of source -----------------------------------------------------

def _diagonal_case():
    text = "R{a,c} = T{a,a,b} * U{b,c} + V{c,a,a}"
    extents = {"a": 6, "b": 5, "c": 4}
    rng = np.random.default_rng(7)
    t, u, v = (rng.standard_normal(s) for s in ((6, 6, 5), (5, 4), (4, 6, 6)))
    ref = np.einsum("aab,bc->ac", t, u) + np.einsum("caa->ac", v)
    return text, extents, (t, u, v), ref


@pytest.mark.parametrize("kind", ["array", "block", "memmap", "h5py", "provider", "int32"])
@pytest.mark.parametrize("share", [None, 0.3])
def test_a_diagonal_reads_from_every_source(kind, share, tmp_path):
    """Oracle: numpy.einsum; each source kind at unbatched and batched budgets."""
    text, extents, (t, u, v), ref = _diagonal_case()
    if kind == "array":
        given = t
    elif kind == "int32":
        t = np.round(10 * t).astype(np.int32)
        ref = np.einsum("aab,bc->ac", t, u) + np.einsum("caa->ac", v)
        given = t
    elif kind == "block":
        given = {("a", "a", "b"): t}
    elif kind == "memmap":
        given = np.lib.format.open_memmap(tmp_path / "t.npy", "w+", t.dtype, t.shape)
        given[...] = t
    elif kind == "h5py":
        h5py = pytest.importorskip("h5py")
        f = h5py.File(tmp_path / "t.h5", "w")
        f["T"] = t
        given = f["T"]
    else:
        def given(spaces, ranges):
            return t[tuple(slice(lo, hi) for lo, hi in ranges)]
    ev = se.Evaluator(text, extents) if share is None else batched_evaluator(text, extents,
                                                                              share)
    out = ev.evaluate({"T": given, "U": u, "V": v})
    if share is not None:
        assert ev.batched.analysis.rich.loops
    np.testing.assert_allclose(out["R"], ref, rtol=1e-12, atol=1e-12)


def test_a_provider_is_asked_for_pieces_of_a_diagonal():
    """Every request for a diagonal's block is a piece: at most DIAGONAL_PIECE_SHARE of the
    batch's elements, or one diagonal entry's slab where that is larger — never the block
    the batch's ranges span (a² b elements for a batch of a b)."""
    extents = {"a": 64, "b": 3}
    rng = np.random.default_rng(0)
    t, u = rng.standard_normal((64, 64, 3)), rng.standard_normal(3)
    requests = []

    def provider(spaces, ranges):
        requests.append(ranges)
        return t[tuple(slice(lo, hi) for lo, hi in ranges)]

    out = se.evaluate("R{a} = T{a,a,b} * U{b}", {"T": provider, "U": u}, extents)
    np.testing.assert_allclose(out["R"], np.einsum("aab,b->a", t, u), rtol=1e-13)
    batch = 64 * 3
    for r in requests:
        (a0, a1), (b0, b1), (c0, c1) = r
        assert (a0, a1) == (b0, b1)                     # a diagonal block
        assert (a1 - a0) ** 2 * (c1 - c0) <= max(DIAGONAL_PIECE_SHARE * batch, c1 - c0)
    assert sum(a1 - a0 for (a0, a1), _, _ in requests) == 64


def test_a_diagonal_batch_costs_the_diagonal_not_the_block():
    """The traced peak (tracemalloc) of a batched evaluation reading the diagonal of a 32 MiB
    tensor stays within 1.05x the prediction (arrays and the program's reserve), which
    counts the diagonal's 1 MiB, not the block; values to 1e-12. Oracle: numpy.einsum."""
    text, extents = "R{c} = T{a,a,b} * U{b,c}", {"a": 32, "b": 4096, "c": 4}
    rng = np.random.default_rng(1)
    t, u = rng.standard_normal((32, 32, 4096)), rng.standard_normal((4096, 4))
    ref = np.einsum("aab,bc->c", t, u)
    for budget in (None, "25%"):
        ev = se.Evaluator(text, extents, budget=budget)
        report = ev.analyze()
        ev.evaluate({"T": t, "U": u})                 # builds the program and kernel plans
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        out, meter = ev.evaluate({"T": t, "U": u}, return_meter=True)
        traced = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        assert meter.peak_bytes == report.peak_bytes
        assert traced <= 1.05 * report.total_bytes, (budget, traced, report.total_bytes)
        assert traced < t.nbytes / 20
        np.testing.assert_allclose(out["R"], ref, rtol=1e-12)


# -- refusals, typed -------------------------------------------------------------------------

def test_a_result_naming_an_index_twice_is_a_parse_error():
    """NumPy refuses ``ij->ii`` too."""
    with pytest.raises(se.ParseError, match="labels two slots of result R"):
        se.parse("R{a,a} = T{a,b}")


def test_a_bare_expression_with_terms_of_other_free_indices_is_a_parse_error():
    with pytest.raises(se.ParseError, match="name the result"):
        se.parse("T{a} + U{a,b}")


def test_a_diagonal_over_a_composite_index_is_unsupported():
    eq = Equation("R", (Product(1, (Tensor("T", (Index("a", 1, (Index("i", 1),)),) * 2),)),),
                  None)
    with pytest.raises(se.UnsupportedFeature, match="composite index.*diagonal"):
        build_forest([eq], {"a": 3, "i": 2})


def test_the_reserved_ones_name_is_refused():
    eq = Equation("R", (Product(1, (Tensor(ONES, (Index("a", 1),)), Tensor("T", (Index(
        "a", 1),)))),), None)
    with pytest.raises(se.UnsupportedFeature, match="reserved"):
        build_forest([eq], {"a": 3})


def test_a_spaces_only_provider_of_a_diagonal_is_refused_before_work():
    calls = []

    def provider(spaces):
        calls.append(spaces)
        return np.ones((3, 3))

    with pytest.raises(se.InputTypeError, match="diagonal.*ranges"):
        se.evaluate("R{a} = T{a,a}", {"T": provider}, {"a": 3})
    assert calls == []


@pytest.mark.parametrize("shape", [(3, 4), (1, 3)])
def test_a_diagonal_of_a_non_square_array_is_a_shape_mismatch(shape):
    """NumPy refuses ``ii`` on a 3x4 array, and broadcasts a length-1 axis (1x3); the
    package sizes every axis by its space, so both are a ShapeMismatch naming the shape."""
    with pytest.raises(se.ShapeMismatch, match="expected \\(3, 3\\)"):
        se.evaluate("R{a} = T{a,a}", {"T": np.ones(shape)}, {"a": 3})


@pytest.mark.parametrize("given, error", [(np.ones(3, dtype=bool), se.InputTypeError),
                                          (np.array(["x"] * 3), se.InputTypeError)])
def test_operands_numpy_takes_that_the_package_does_not(given, error):
    """numpy.einsum takes boolean and other non-numeric arrays; refused, typed, naming it."""
    with pytest.raises(error, match="'T'"):
        se.evaluate("E = T{a} * U{a}", {"T": given, "U": np.ones(3)}, {"a": 3})


# -- the two-device path -----------------------------------------------------------------------

@pytest.mark.parametrize("budget", [None, 0.3])
def test_diagonals_and_sums_on_the_strict_device(budget):
    """The placed graph (GPU layer) on the strict device stand-in: diagonal and all-ones
    leaves are read on the host and copied over like any leaf batch. Oracle: numpy.einsum."""
    from sequant_eval.runtime import TensorSource
    from sequant_eval.runtime.engine import run_graph
    from sequant_eval.runtime.gpu.placed import Placed, RoutePicker
    from sequant_eval.runtime.gpu.placement import CostModel, Machine
    from sequant_eval.runtime.graph import Device

    from tests.runtime.strict_device import StrictDevice, StrictHost

    text, extents = "R{a,c} = T{a,a,b} * U{b,c} + V{c,a,a} + W{a,c,d}", {
        "a": 6, "b": 5, "c": 4, "d": 3}
    rng = np.random.default_rng(5)
    t, u, v, w = (rng.standard_normal(s) for s in ((6, 6, 5), (5, 4), (4, 6, 6), (6, 4, 3)))
    ref = (np.einsum("aab,bc->ac", t, u) + np.einsum("caa->ac", v)
           + np.einsum("acd->ac", w))
    ev = se.Evaluator(text, extents) if budget is None else batched_evaluator(text, extents,
                                                                              budget)
    base = CostModel()
    fast = CostModel(rate=base.rate | {Device.GPU: 1e15}, bandwidth=base.bandwidth,
                     launch={Device.CPU: 1e-6, Device.GPU: 1e-7}, link=1e12, latency=1e-7)
    low, roots = Placed(ev.batched).lowered(False, Machine(gpu=True, cost=fast))
    source = TensorSource(ev.forest, {"T": t, "U": u, "V": v, "W": w}, extents)
    device = StrictDevice()
    out, _ = run_graph(low.graph, roots, ev.forest, {Device.CPU: StrictHost(),
                                                     Device.GPU: device},
                       source, order=RoutePicker(low.graph, gpu=True).route)
    got = out[low.roots["R"]]
    assert type(got) is np.ndarray and device.buffers > 0
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
