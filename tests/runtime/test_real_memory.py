"""What the process really allocates stays within the prediction; inputs stream per batch.

Oracles: ``tracemalloc`` (NumPy registers its buffers with it) for memory, measured on the
second evaluation of a compiled program (the first builds the op graph and kernel plans);
the unbatched evaluation of the same equations for values (1e-12 relative).
"""
from __future__ import annotations

import random
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations, ccsd_text

from tests.oracles.spin_orbital import (EXT, block_mappings, random_arrays,  # noqa: E402
                                        refill_tuple_cache)


@pytest.fixture(scope="module")
def arrays():
    return random_arrays(11)


def _blocks(arrays):
    return block_mappings(arrays, se.Evaluator(ccsd_equations(), EXT).forest)


def _h5(arrays, tmp_path_factory):
    h5py = pytest.importorskip("h5py")
    path = tmp_path_factory.mktemp("h5") / "ints.h5"
    with h5py.File(path, "w") as f:
        for name, a in arrays.items():
            f[name] = a
    return h5py.File(path, "r")


@pytest.fixture(scope="module")
def sources(arrays, tmp_path_factory):
    h5 = _h5(arrays, tmp_path_factory)
    yield {"full arrays": dict(arrays), "block mappings": _blocks(arrays),
           "h5py datasets": {k: h5[k] for k in arrays}}
    h5.close()


@pytest.fixture(scope="module")
def reference(arrays):
    return se.evaluate(ccsd_equations(), _blocks(arrays), EXT)


def _traced(ev, tensors):
    ev.evaluate(tensors)                       # builds the graph and the kernel plans
    refill_tuple_cache()                       # the interpreter's cache, whatever ran before
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    out, meter = ev.evaluate(tensors, return_meter=True)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return out, meter, peak


@pytest.mark.parametrize("kind", ["full arrays", "block mappings", "h5py datasets"])
@pytest.mark.parametrize("share", [1.0, 0.5, 0.25, 0.1, "smallest"])
def test_traced_peak_is_within_the_prediction(sources, reference, kind, share):
    top = se.analyze(ccsd_equations(), EXT).peak_bytes
    budget = se.min_budget(ccsd_equations(), EXT) if share == "smallest" else share * top
    ev = se.Evaluator(ccsd_equations(), EXT, budget=budget)
    report = ev.analyze()
    predicted = report.total_bytes               # the arrays' peak and the program's reserve
    assert predicted <= budget
    out, meter, traced = _traced(ev, sources[kind])
    assert meter.peak_bytes == report.peak_bytes
    assert traced <= 1.05 * predicted, f"traced {traced} B vs predicted {predicted} B"
    for name, ref in reference.items():
        scale = max(1.0, float(np.abs(ref).max()))
        assert np.abs(out[name] - ref).max() <= 1e-12 * scale, name


def test_provider_is_asked_for_one_batch_at_a_time(arrays):
    """Under a finite budget no request is a whole block the plan slices, and no request
    is larger than the largest leaf batch in the schedule."""
    requests = []

    def provider(name):
        def read(spaces, ranges):
            requests.append((name, spaces, tuple(ranges)))
            return _blocks(arrays)[name][spaces][tuple(slice(lo, hi) for lo, hi in ranges)]
        return read

    budget = 0.25 * se.analyze(ccsd_equations(), EXT).peak_bytes
    ev = se.Evaluator(ccsd_equations(), EXT, budget=budget)
    tensors = {"f": provider("f"), "g": provider("g"), "t1": provider("t1"),
               "t2": provider("t2")}
    out = ev.evaluate(tensors)
    a = ev.batched.analysis
    leaves = [f for f in a.rich.forms if f.kind.value == "leaf"]
    sliced = {(ev.forest.values[f.value].tensor, ev.forest.values[f.value].spaces)
              for f in leaves if f.sliced}
    read_whole = {(ev.forest.values[f.value].tensor, ev.forest.values[f.value].spaces)
                  for f in leaves if not f.sliced}
    assert sliced - read_whole, "the plan must batch some input for this test to mean anything"
    largest = max(c.footprint for c in a.cells if a.rich.forms[c.form].kind.value == "leaf")
    for name, spaces, ranges in requests:
        elements = np.prod([hi - lo for lo, hi in ranges])
        assert 8 * elements <= largest
        whole = tuple((0, EXT[s]) for s in spaces)
        assert ranges != whole or (name, spaces) in read_whole, (name, spaces)
    ref = se.evaluate(ccsd_equations(), _blocks(arrays), EXT)
    assert abs(float(out["E"]) - float(ref["E"])) <= 1e-12 * abs(float(ref["E"]))


def test_tuple_only_provider_is_refused_before_work_when_batched(arrays):
    blocks = _blocks(arrays)
    calls = []

    def old_style(spaces):
        calls.append(spaces)
        return blocks["g"][spaces]

    ev = se.Evaluator(ccsd_equations(), EXT,
                      budget=0.25 * se.analyze(ccsd_equations(), EXT).peak_bytes)
    with pytest.raises(se.SequantEvalError, match="provider of tensor 'g'.*ranges"):
        ev.evaluate(dict(blocks, g=old_style))
    assert calls == []


def test_one_array_spans_the_spaces_used_at_each_slot():
    """f is read over i,a only; B also over an auxiliary space that f never uses."""
    text = "R{i_1;i_2} = f{i_1;a_1} * B{a_1,i_2;;K_1} * B{i_3,i_4;;K_1} * f{i_3;i_4}"
    ext = {"i": 3, "a": 4, "K": 5}
    rng = np.random.default_rng(2)
    f = rng.standard_normal((3, 7))                 # slot 0 reads i; slot 1 reads i,a
    b = rng.standard_normal((7, 3, 5))              # slot 0: i,a; slot 1: i; slot 2: K
    out = se.evaluate(text, {"f": f, "B": b}, ext)["R"]
    ref = np.einsum("ia,ajK,klK,kl->ij", f[:, 3:], b[3:], b[:3], f[:, :3])
    assert np.allclose(out, ref, rtol=1e-12, atol=0)
    with pytest.raises(se.ShapeMismatch, match=r"\(3, 7\).*\(12, 12\)"):
        se.evaluate(text, {"f": rng.standard_normal((4, 4)), "B": b}, ext)


def test_mirror_terms_far_apart_do_not_raise_the_floor():
    """The packaged CCSD with its terms shuffled (mirror terms far apart in the text)."""
    eqs = ccsd_equations()
    rng = random.Random(5)
    shuffled = []
    for eq in eqs:
        terms = list(eq.terms)
        rng.shuffle(terms)
        shuffled.append(replace(eq, terms=tuple(terms)))
    packaged = se.min_budget(eqs, EXT)
    other = se.min_budget(shuffled, EXT)
    assert other <= 1.10 * packaged
    assert ccsd_text()        # the packaged text is what the equations came from


FRESH = """
import gc, sys, tracemalloc
import numpy as np
import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
ext = {"i": 10, "a": 38}
rng = np.random.default_rng(11)
arrays = {"f": rng.standard_normal((48, 48)), "g": rng.standard_normal((48,) * 4),
          "t1": rng.standard_normal((38, 10)), "t2": rng.standard_normal((38, 38, 10, 10))}
ev = se.Evaluator(ccsd_equations(), ext, budget=float(sys.argv[1]))
predicted = ev.analyze().total_bytes      # the arrays' peak and the program's reserve


def traced(refill):
    gc.collect()                        # also empties CPython's object free lists
    if refill:                          # the interpreter's tuple cache, refilled
        cache = [[tuple(range(k)) for _ in range(2000)] for k in range(1, 20)]
        del cache
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ev.evaluate(arrays)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


ev.batched._programs.clear()              # planned above; the program is built again
first = traced(refill=True)               # in the trace, with the kernel plans
print(predicted, first, traced(refill=True), traced(refill=False))
"""


@pytest.mark.slow        # the in-process test above holds the same bound every run
def test_traced_peak_at_ten_percent_in_a_fresh_process():
    """Ten per cent of the unbatched peak (84 loops, ~15,000 ops run by a program of ~400
    nodes) in a new interpreter; predicted = the arrays' peak + the program's reserve.
    The first evaluation (the program built and the kernel plans made inside the trace,
    planning before it) and a repeated one are both within 1.05x.

    A full collection empties CPython's free lists (up to 2000 tuples of each length
    below 20); the evaluation's many small index tuples then refill them, which
    tracemalloc sees as ~0.3 MB allocated by the evaluation although it is the
    interpreter's cache, bounded whatever the data. So the evaluation is measured with the
    cache refilled (must be within 1.05x), and the run with the cache emptied must exceed
    the prediction by no more than that cache can hold (~4.6 MB at most; 0.5 MB asserted,
    far below the 2.9 MB predicted — a leak of data-sized buffers would fail it)."""
    import subprocess
    import sys

    budget = 0.1 * se.analyze(ccsd_equations(), EXT).peak_bytes
    out = subprocess.run([sys.executable, "-c", FRESH, str(budget)], capture_output=True,
                         text=True, check=True)
    predicted, first, refilled, emptied = map(int, out.stdout.split())
    assert predicted <= budget
    assert first <= 1.05 * predicted, (first, predicted)
    assert refilled <= 1.05 * predicted, (refilled, predicted)
    assert emptied - predicted <= 500_000, (emptied, predicted)


STREAMED = ("R{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2} + 1/2 g{a_2,a_1;i_1,i_2}"
            " + f{a_1;a_3} * t{a_3,a_2;i_1,i_2}")


def test_an_input_term_is_streamed_into_its_sum():
    """A term that is an input block (``R += g``, twice: once permuted and scaled) is read
    chunk by chunk into the sum, never whole. Worked by hand: the sum R, the block t, the
    term f*t and f are live at the contraction (3 blocks of 1.84 MB and 12.8 kB); the g
    terms add at most a chunk and its scaled copy (2 x 256 KiB), not a fourth block. The
    traced peak is within 1.05x of the prediction, no read asks for the whole block, and
    the values equal an einsum oracle (1e-12)."""
    ext = {"i": 12, "a": 40}
    rng = np.random.default_rng(4)
    g = rng.standard_normal((40, 40, 12, 12))
    f = rng.standard_normal((40, 40))
    t = rng.standard_normal((40, 40, 12, 12))
    requests = []

    def g_blocks(spaces, ranges):
        requests.append(tuple(ranges))
        return g[tuple(slice(lo, hi) for lo, hi in ranges)]

    tensors = {"g": g_blocks, "f": {("a", "a"): f}, "t": {("a", "a", "i", "i"): t}}
    ev = se.Evaluator(STREAMED, ext)
    predicted = ev.analyze().peak_bytes
    assert predicted <= 3 * g.nbytes + f.nbytes + 2 * 256 * 1024 < 4 * g.nbytes
    out, meter, traced = _traced(ev, tensors)
    assert meter.peak_bytes == predicted
    assert traced <= 1.05 * predicted, (traced, predicted)
    whole = ((0, 40), (0, 40), (0, 12), (0, 12))
    assert requests and whole not in requests
    ref = g + 0.5 * g.transpose(1, 0, 2, 3) + np.einsum("ac,cbij->abij", f, t)
    assert np.abs(out["R"] - ref).max() <= 1e-12 * np.abs(ref).max()
