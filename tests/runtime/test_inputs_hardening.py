"""Inputs that used to be silently wrong or raise untyped errors (issue 11 items 2, 3, 6).

Oracles: ``np.einsum`` written in the test, the unbatched evaluation, and the dry-run
meter (which must equal the NumPy meter to the byte for every dtype).
"""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se

TEXT = """R{a_1,a_2;i_1,i_2} = 1/2 g{a_1,a_2;a_3,a_4} * t{a_3,a_4;i_1,i_2}
  + f{a_1;a_3} * t{a_3,a_2;i_1,i_2} - 1/4 g{i_3,i_4;a_3,a_4} * t{a_3,a_4;i_1,i_2} * t{a_1,a_2;i_3,i_4}
E = 1/4 g{i_1,i_2;a_1,a_2} * t{a_1,a_2;i_1,i_2}"""
EXT = {"i": 4, "a": 7}


def _tensors(dtype, seed=0):
    rng = np.random.default_rng(seed)
    n = 11

    def draw(*shape):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)

    return {"f": draw(n, n), "g": draw(n, n, n, n), "t": {("a", "a", "i", "i"): draw(7, 7, 4, 4)}}


def _einsum(t):
    f, g, a = t["f"], t["g"], t["t"][("a", "a", "i", "i")]
    o, v = slice(0, 4), slice(4, 11)
    r = (0.5 * np.einsum("abcd,cdij->abij", g[v, v, v, v], a)
         + np.einsum("ac,cbij->abij", f[v, v], a)
         - 0.25 * np.einsum("klcd,cdij,abkl->abij", g[o, o, v, v], a, a))
    e = 0.25 * np.einsum("ijab,abij->", g[o, o, v, v], a)
    return r, e


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_dtypes_batched_equal_unbatched_equal_einsum(dtype):
    t = _tensors(dtype)
    r, e = _einsum(t)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    whole = se.evaluate(TEXT, t, EXT)
    top = se.analyze(TEXT, EXT).peak_bytes
    ev = se.Evaluator(TEXT, EXT, budget="50%")
    part, meter = ev.evaluate(t, return_meter=True)
    for out in (whole, part):
        assert out["R"].dtype == np.result_type(dtype, np.float32)
        assert np.abs(out["R"] - r).max() <= tol * np.abs(r).max()
        assert abs(out["E"] - e) <= tol * abs(e)
    assert np.abs(part["R"] - whole["R"]).max() <= tol * np.abs(whole["R"]).max()
    _, dry = ev.batched.run("dryrun")
    assert meter.peak_bytes == dry.peak_bytes == ev.analyze().peak_bytes
    share = np.dtype(dtype).itemsize / 8          # the unbatched peak scales with it
    assert ev.analyze().peak_bytes <= 0.5 * top * share


def test_float32_is_planned_with_four_byte_elements():
    t = _tensors(np.float32)
    ev = se.Evaluator(TEXT, EXT)
    _, meter = ev.evaluate(t, return_meter=True)
    assert ev.batched.analysis.plan.policy.itemsize == 4
    assert meter.peak_bytes == ev.analyze().peak_bytes


@pytest.mark.parametrize("bad", [np.full((11, 11), "x"), np.zeros((11, 11), dtype=bool),
                                 np.zeros((11, 11), dtype=object)])
def test_non_numeric_arrays_are_refused(bad):
    t = _tensors(np.float64)
    with pytest.raises(se.InputTypeError, match="'f'"):
        se.evaluate(TEXT, dict(t, f=bad), EXT)


def test_tensors_given_as_a_list_are_refused():
    with pytest.raises(se.InputTypeError, match="mapping"):
        se.evaluate(TEXT, [1, 2], EXT)


def test_duplicate_result_names_are_refused():
    eqs = se.parse("X{i_1;i_2} = f{i_1;i_2}") + se.parse("X{i_1;i_2} = g{i_1;i_2}")
    with pytest.raises(se.ExpressionError, match="X"):
        se.Evaluator(eqs, {"i": 3})


def test_persist_needs_the_volatile_tensors_named():
    with pytest.raises(se.PolicyError, match="volatile"):
        se.Evaluator(TEXT, EXT, persist=True)


def test_a_changed_non_volatile_input_is_never_served_stale():
    """Persisted intermediates of g·g are rebuilt when g is replaced by 3·g (in place)."""
    text = "R{i_1;i_2} = g{i_1;i_3} * g{i_3;i_4} * t{i_4;i_2}"
    rng = np.random.default_rng(3)
    g, t = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    ev = se.Evaluator(text, {"i": 5}, persist=True, volatile=("t",))
    first = ev.evaluate({"g": g, "t": t})["R"]
    np.testing.assert_allclose(first, g @ g @ t, rtol=1e-12)
    g *= 3.0                                   # same object, new values
    again = ev.evaluate({"g": g, "t": t})["R"]
    np.testing.assert_allclose(again, g @ g @ t, rtol=1e-12)
    other = 2.0 * g                             # another object
    np.testing.assert_allclose(ev.evaluate({"g": other, "t": t})["R"], other @ other @ t,
                               rtol=1e-12)


def test_the_meter_is_reachable_without_changing_the_return_type():
    t = _tensors(np.float64)
    ev = se.Evaluator(TEXT, EXT)
    out = ev.evaluate(t)
    assert set(out) == {"R", "E"}
    assert ev.last_meter.peak_bytes == ev.analyze().peak_bytes
    out, meter = se.evaluate(TEXT, t, EXT, return_meter=True)
    assert meter.peak_bytes > 0


def test_a_one_element_change_or_a_provider_is_never_served_stale():
    """Probe cases: a change between sample points, and a provider whose values change."""
    text = "R{i_1;i_2} = g{i_1;i_3} * g{i_3;i_4} * t{i_4;i_2}"
    rng = np.random.default_rng(4)
    g, t = rng.standard_normal((40, 40)), rng.standard_normal((40, 40))
    ev = se.Evaluator(text, {"i": 40}, persist=True, volatile=("t",))
    ev.evaluate({"g": g, "t": t})
    g[1, 1] += 1000.0
    np.testing.assert_allclose(ev.evaluate({"g": g, "t": t})["R"], g @ g @ t, rtol=1e-12)
    scale = {"k": 1.0}
    prov = lambda spaces, r: scale["k"] * g[r[0][0]:r[0][1], r[1][0]:r[1][1]]
    ev.evaluate({"g": prov, "t": t})
    scale["k"] = 3.0
    np.testing.assert_allclose(ev.evaluate({"g": prov, "t": t})["R"], 9 * g @ g @ t,
                               rtol=1e-12)


@pytest.mark.parametrize("returned", ["complex", "text", "wrong shape", "raises"])
def test_what_a_source_returns_is_checked(returned):
    text = "R{i_1;i_2} = f{i_1;a_1} * t1{a_1;i_2}"
    ext = {"i": 8, "a": 8}
    rng = np.random.default_rng(5)
    f, t1 = rng.standard_normal((8, 8)), rng.standard_normal((8, 8))

    def prov(spaces, r):
        part = f[r[0][0]:r[0][1], r[1][0]:r[1][1]]
        if returned == "complex":
            return part + 1j
        if returned == "text":
            return np.full(part.shape, "x")
        if returned == "wrong shape":
            return np.zeros((part.shape[0] + 1, part.shape[1]))
        raise OSError("bad sector")

    errors = {"complex": se.InputTypeError, "text": se.InputTypeError,
              "wrong shape": se.ShapeMismatch, "raises": se.MissingTensor}
    budget = se.min_budget(text, ext)
    with pytest.raises(errors[returned], match="'f'"):
        se.evaluate(text, {"f": prov, "t1": {("a", "i"): t1}}, ext, budget=budget)


@pytest.mark.parametrize("extents", [[3, 4], "i=3", None, {"i": float("inf")}, {"i": True}])
def test_bad_extents_are_refused(extents):
    with pytest.raises(se.UnknownSpace):
        se.analyze("E = f{i_1;i_2} * g{i_2;i_1}", extents)


def test_non_string_tensor_names_are_refused():
    with pytest.raises(se.InputTypeError, match="tensor names"):
        se.evaluate("E = f{i_1;i_2} * g{i_2;i_1}", {1: np.ones((3, 3)), "f": np.ones((3, 3)),
                                                     "g": np.ones((3, 3))}, {"i": 3})


def test_inputs_a_probe_found_raising_untyped_errors(tmp_path):
    """Each of these raised a raw RuntimeError, TypeError, ValueError or KeyError (a hostile-
    input probe, 2026-12-07): a closed HDF5 dataset, a block mapping whose keys mix
    strings and tuples with the needed block missing, the class np.ndarray itself, a
    provider handing back an array-like without ``__array__`` (it evaluates now: oracle
    np.einsum), tensors not a mapping for equations run in stages, and equations as bytes."""
    import h5py

    text, ext = "R{a_1;i_1} = f{a_1;a_2} * t{a_2;i_1}", {"a": 6, "i": 4}
    rng = np.random.default_rng(1)
    f, t = rng.random((6, 6)), rng.random((6, 4))
    with h5py.File(tmp_path / "f.h5", "w") as h:
        h.create_dataset("f", data=f)
    h = h5py.File(tmp_path / "f.h5", "r")
    closed = h["f"]
    h.close()
    with pytest.raises(se.MissingTensor, match="'f' is an HDF5 dataset whose file is closed"):
        se.evaluate(text, {"f": closed, "t": t}, ext)
    with pytest.raises(se.MissingTensor, match=r"has no block \('a', 'i'\)"):
        se.evaluate(text, {"f": f, "t": {("i", "a"): t.T, "ai": t}}, ext)
    with pytest.raises(se.InputTypeError, match="'f' is a type"):
        se.evaluate(text, {"f": np.ndarray, "t": t}, ext)

    class Lazy:                         # a shape, a dtype and slicing; no __array__
        def __init__(self, a):
            self.a, self.shape, self.dtype = a, a.shape, a.dtype

        def __getitem__(self, key):
            return self.a[key]

    def provider(spaces, ranges):
        return Lazy(f[tuple(slice(lo, hi) for lo, hi in ranges)])

    got = se.evaluate(text, {"f": provider, "t": t}, ext, budget="60%")
    assert np.allclose(got["R"], np.einsum("ab,bi->ai", f, t), rtol=1e-12, atol=0)
    staged = "X{a_1;i_1} = 2 t{a_1;i_1}\nR{a_1;i_1} = 3 X{a_1;i_1}"
    for bad in (None, [1, 2], "abc"):
        with pytest.raises(se.InputTypeError, match="tensors must be a mapping"):
            se.evaluate(staged, bad, ext)
    with pytest.raises(se.InputTypeError, match="bytes; decode them"):
        se.evaluate(text.encode(), {"f": f, "t": t}, ext)
