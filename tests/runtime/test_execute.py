"""Unbatched execution against plain np.einsum, input forms, errors and the memory meter."""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se

O, V = 3, 5
EXTENTS = {"i": O, "a": V}
OS, VS = slice(0, O), slice(O, O + V)


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    n = O + V
    return {"f": rng.standard_normal((n, n)), "g": rng.standard_normal((n, n, n, n)),
            "t1": rng.standard_normal((V, O)), "t2": rng.standard_normal((V, V, O, O))}


def _tensors(d):
    return {"f": d["f"], "g": d["g"], "t1": {("a", "i"): d["t1"]},
            "t2": lambda spaces, ranges: d["t2"][tuple(slice(*r) for r in ranges)]}


TEXT = """R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2} + P{a_1,a_2} * f{a_1;a_3} * t2{a_3,a_2;i_1,i_2}
  - 1/2 g{i_3,i_4;a_3,a_4} * t2{a_1,a_3;i_1,i_3} * t2{a_2,a_4;i_4,i_2}
  + A{a_1,a_2;i_1,i_2} * g{a_1,i_3;i_1,a_3} * t2{a_3,a_2;i_3,i_2}
R1{a_1;i_1} = f{a_1;i_1} + 0.25 g{a_1,i_2;a_2,a_3} * t2{a_2,a_3;i_1,i_2} - f{i_2;a_2} t1{a_2;i_1} t1{a_1;i_2}
E = f{i_1;a_1} * t1{a_1;i_1} + 1/4 g{i_1,i_2;a_1,a_2} * t2{a_1,a_2;i_1,i_2}"""


def _reference(d):
    """The same equations written directly in np.einsum (independent of the package)."""
    f, g, t1, t2 = d["f"], d["g"], d["t1"], d["t2"]
    x = np.einsum("ac,cbij->abij", f[VS, VS], t2)
    y = np.einsum("akic,cbkj->abij", g[VS, OS, OS, VS], t2)
    asym = 0.25 * (y - y.transpose(1, 0, 2, 3) - y.transpose(0, 1, 3, 2) + y.transpose(1, 0, 3, 2))
    r2 = (g[VS, VS, OS, OS] + x - x.transpose(1, 0, 2, 3)
          - 0.5 * np.einsum("klcd,acik,bdlj->abij", g[OS, OS, VS, VS], t2, t2) + asym)
    r1 = (f[VS, OS] + 0.25 * np.einsum("akcd,cdik->ai", g[VS, OS, VS, VS], t2)
          - np.einsum("kc,ci,ak->ai", f[OS, VS], t1, t1))
    e = np.einsum("ia,ai", f[OS, VS], t1) + 0.25 * np.einsum("ijab,abij", g[OS, OS, VS, VS], t2)
    return r2, r1, e


def test_results_match_einsum(data):
    out = se.evaluate(TEXT, _tensors(data), EXTENTS)
    r2, r1, e = _reference(data)
    np.testing.assert_allclose(out["R2"], r2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["R1"], r1, rtol=1e-12, atol=1e-12)
    assert abs(float(out["E"]) - e) <= 1e-12 * max(1.0, abs(e))


def test_input_forms_agree(data):
    """A full array, a block mapping and a callable give identical results."""
    full = se.evaluate(TEXT, {k: data[k] for k in ("f", "g")} | {
        "t1": {("a", "i"): data["t1"]}, "t2": {("a", "a", "i", "i"): data["t2"]}}, EXTENTS)
    mixed = se.evaluate(TEXT, _tensors(data), EXTENTS)
    for name in full:
        np.testing.assert_array_equal(full[name], mixed[name])


def test_dry_run_peak_equals_numpy_accounted_peak(data):
    ev = se.Evaluator(TEXT, EXTENTS)
    _, meter = ev.evaluate(_tensors(data), return_meter=True)
    report = ev.analyze()
    _, dry = ev.batched.run("dryrun")
    assert report.peak_bytes == meter.peak_bytes == dry.peak_bytes
    assert report.flops == meter.flops == dry.flops


def test_meter_on_a_hand_worked_chain():
    """R{a_1;i_1} = X{a_1;a_2} Y{a_2;a_3} Z{a_3;i_1}: worked by hand, 8-byte elements.

    opt_einsum contracts Y·Z first (a·a·i = 75 < a·a·a = 125 multiply-adds), so the walk is
    fetch Y (25 el), fetch Z (15), W=Y·Z (15; peak candidate 55), free Y,Z; fetch X (25), X·W
    (15; live W+X+XW = 55), free; move into R. Peak 55 elements = 440 bytes.
    Flops: 2·75 + 2·75 for the two GEMMs, plus 2·15 for the scaled move into R.
    """
    rep = se.analyze("R{a_1;i_1} = 2 X{a_1;a_2} * Y{a_2;a_3} * Z{a_3;i_1}", EXTENTS)
    assert rep.peak_bytes == 55 * 8
    assert rep.flops == 2 * 75 + 2 * 75 + 2 * 15


def test_missing_tensor_names_tensor_and_term(data):
    tensors = _tensors(data)
    del tensors["t1"]
    with pytest.raises(se.MissingTensor, match=r"'t1'.*term 3 of R1"):
        se.evaluate(TEXT, tensors, EXTENTS)


def test_missing_block_in_mapping(data):
    tensors = _tensors(data) | {"t1": {("i", "a"): data["t1"].T}}
    with pytest.raises(se.MissingTensor, match=r"no block \('a', 'i'\)"):
        se.evaluate(TEXT, tensors, EXTENTS)


def test_wrong_shapes_are_refused(data):
    with pytest.raises(se.ShapeMismatch, match=r"'g'.*\(8, 8, 8, 8\)"):
        se.evaluate(TEXT, _tensors(data) | {"g": data["g"][:7]}, EXTENTS)
    bad = _tensors(data) | {"t2": lambda spaces: np.zeros((V, V, O, O + 1))}
    with pytest.raises(se.ShapeMismatch, match=r"block \('a', 'a', 'i', 'i'\) of tensor 't2'"):
        se.evaluate(TEXT, bad, EXTENTS)


def test_unknown_space_names_the_index():
    with pytest.raises(se.UnknownSpace, match=r"index Κ_1 in term 1 of X.*'Κ'"):
        se.analyze("X{i_1;i_2} = g{i_1;i_3;Κ_1} * g{i_3;i_2;Κ_1}", {"i": 3})


def test_composite_indices_are_refused_numerically_but_dry_run_works():
    text = "R{a_1<i_1>;i_1} = C{a_1<i_1>;μ̃_1} * f{μ̃_1;i_1}"
    ext = {"i": 3, "μ̃": 6, "a<1>": 4}
    assert se.analyze(text, ext).peak_bytes > 0
    with pytest.raises(se.UnsupportedFeature, match="composite"):
        se.evaluate(text, {"C": lambda s: None, "f": lambda s: None}, ext)


def test_finite_budget_runs_batched_and_exact(data):
    """Oracle: the unbatched evaluation of the same equations."""
    full = se.evaluate(TEXT, _tensors(data), EXTENTS)
    peak = se.analyze(TEXT, EXTENTS).peak_bytes
    ev = se.Evaluator(TEXT, EXTENTS, policy=se.BatchPolicy.everything(
        0.6 * peak, EXTENTS, program=False))         # a few kB: the arrays only
    out, meter = ev.evaluate(_tensors(data), return_meter=True)
    assert meter.peak_bytes == ev.analyze().peak_bytes <= 0.6 * peak
    for name in full:
        np.testing.assert_allclose(out[name], full[name], rtol=1e-12, atol=1e-13)


def test_cancelling_terms_give_zeros(data):
    out = se.evaluate("R1{a_1;i_1} = f{a_1;i_1} - f{a_1;i_1}", _tensors(data), EXTENTS)
    assert out["R1"].shape == (V, O) and not out["R1"].any()
