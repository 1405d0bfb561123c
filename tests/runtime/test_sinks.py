"""Result sinks (``out=``): a result written batch by batch to the caller's destination.

Oracles: the unbatched evaluation without a sink (ground truth for every batched one), an
einsum written here, and a callable sink that records every slice it is handed (no slice
twice, none missing). Memory: the meter equals the prediction and both are within the
budget; tracemalloc sees the process stay within 5 % of the prediction.
"""
from __future__ import annotations

import gc
import tracemalloc

import h5py
import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsdt_equations
from tests.chem.ccsdt_oracles import random_inputs
from tests.oracles.spin_orbital import refill_tuple_cache

TEXT = ("R2{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2} + 1/4 g{i3,i4;i1,i2} "
        "t{a1,a2;i3,i4} - 3 f{i3;i1} t{a1,a2;i3,i2} + g{a1,a2;i1,i2}")
O, V = 8, 24
EXT = {"i": O, "a": V}


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(1)
    tensors = {"g": {("a", "a", "a", "a"): rng.random((V,) * 4),
                     ("i", "i", "i", "i"): rng.random((O,) * 4),
                     ("a", "a", "i", "i"): rng.random((V, V, O, O))},
               "t": rng.random((V, V, O, O)), "f": {("i", "i"): rng.random((O, O))}}
    return tensors, se.evaluate(TEXT, tensors, EXT)["R2"]


def _close(got, want) -> bool:
    return np.abs(np.asarray(got) - want).max() <= 1e-12 * np.abs(want).max()


@pytest.mark.parametrize("kind", ["array", "memmap", "h5py"])
def test_a_sum_accumulated_in_the_sink_equals_the_unbatched_result(case, kind, tmp_path):
    """Four terms and a streamed input block, batched at 30 %, accumulated into an array,
    a memory map and an HDF5 dataset that start full of junk (the sink is zeroed first):
    the result equals the unbatched one and the destination itself is returned."""
    tensors, want = case
    if kind == "array":
        dest = np.full(want.shape, 7.0)
    elif kind == "memmap":
        dest = np.memmap(tmp_path / "r2.dat", dtype="f8", mode="w+", shape=want.shape)
        dest[...] = 7.0
    else:
        f = h5py.File(tmp_path / "r2.h5", "w")
        dest = f.create_dataset("R2", want.shape, "f8", data=np.full(want.shape, 7.0))
    ev = se.Evaluator(TEXT, EXT, budget="30%")
    out, meter = ev.evaluate(tensors, out={"R2": dest}, return_meter=True)
    assert out["R2"] is dest
    assert _close(dest[...], want)
    sunk = ev._compiled((("R2", "accumulate"),))
    assert any(any(t.opens) for t in sunk.analysis.plan.terms)          # it batched
    assert meter.peak_bytes == sunk.predicted_peak() <= ev._budgets[8]


def test_a_sunk_result_is_not_held(case):
    """The same equations with the result sunk predict less than without (the sum is not
    held), at the smallest budget each can meet; a sunk evaluation fits the smaller one.""" 
    tensors, want = case
    policy = se.BatchPolicy.everything(None, EXT, program=False)
    held = se.min_budget(TEXT, EXT, policy=policy)
    sunk = se.min_budget(TEXT, EXT, policy=se.BatchPolicy.everything(
        None, EXT, program=False, sinks={"R2": "accumulate"}))
    assert sunk < held
    dest = np.zeros(want.shape)
    out, meter = se.evaluate(TEXT, tensors, EXT, policy=se.BatchPolicy.everything(
        sunk, EXT, program=False), out={"R2": dest}, return_meter=True)
    assert _close(dest, want)
    assert meter.peak_bytes <= sunk


def test_a_callable_sink_gets_every_slice_once(case):
    """One term batched over open loops only: a callable receives each slice of the
    result exactly once (counted per element), and the slices add up to an einsum."""
    tensors, _ = case
    text = "R2{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
    want = 0.5 * np.einsum("abcd,cdij->abij", tensors["g"][("a", "a", "a", "a")],
                           tensors["t"])
    got = np.zeros_like(want)
    seen = np.zeros(want.shape, int)
    calls = []

    def sink(spaces, ranges, block):
        assert spaces == ("a", "a", "i", "i") and block.flags.c_contiguous
        where = tuple(slice(lo, hi) for lo, hi in ranges)
        got[where] += block
        seen[where] += 1
        calls.append(ranges)

    policy = se.BatchPolicy(budget=None, external={"a", "i"}, program=False)
    budget = 0.3 * se.analyze(text, EXT, policy=policy).peak_bytes
    se.evaluate(text, tensors, EXT, policy=se.BatchPolicy(
        budget=budget, external={"a", "i"}, program=False), out={"R2": sink})
    assert len(calls) > 1                        # batched
    assert seen.min() == 1 and seen.max() == 1   # none missing, none twice
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()


def _untouched(dest) -> bool:
    return bool(np.all(np.asarray(dest[...]) == 7.0))


def test_refusals_come_before_any_work(case, tmp_path):
    """A destination that cannot take its result is refused with SinkError naming it,
    and nothing is written."""
    tensors, want = case
    bad = {
        "unknown result": {"R9": np.full(want.shape, 7.0)},
        "wrong shape": {"R2": np.full(want.shape[:3], 7.0)},
        "lossy dtype": {"R2": np.full(want.shape, 7.0, dtype="f4")},
        "not a destination": {"R2": "R2.h5"},
    }
    for why, out in bad.items():
        with pytest.raises(se.SinkError, match="R9|R2") as err:
            se.evaluate(TEXT, tensors, EXT, budget="30%", out=out)
        dest = next(iter(out.values()))
        assert isinstance(dest, str) or _untouched(dest), why
        assert "out" in str(err.value), why
    frozen = np.full(want.shape, 7.0)
    frozen.flags.writeable = False
    with pytest.raises(se.SinkError, match="read-only"):
        se.evaluate(TEXT, tensors, EXT, out={"R2": frozen})
    with h5py.File(tmp_path / "r.h5", "w") as f:
        f.create_dataset("R2", want.shape, "f8", data=np.full(want.shape, 7.0))
    with h5py.File(tmp_path / "r.h5", "r") as f:
        with pytest.raises(se.SinkError, match="read-only"):
            se.evaluate(TEXT, tensors, EXT, out={"R2": f["R2"]})
        assert _untouched(f["R2"])
    # a sum of terms accumulates: a callable (write-once) sink is refused, nothing called
    called = []
    with pytest.raises(se.SinkError, match="written several times"):
        se.evaluate(TEXT, tensors, EXT, budget="30%",
                    out={"R2": lambda spaces, ranges, block: called.append(ranges)})
    assert not called


def test_a_memory_map_over_a_truncated_file_is_refused(tmp_path):
    """An ``np.memmap`` destination whose file was cut short after it was mapped is refused
    with SinkError before any work. Before the check, a file cut to nothing killed the
    process (SIGBUS: the whole page past the end), and one cut to 64 bytes ran and lost
    the rest of the result silently (written into the page past the file's end). Run in a
    child process, so that a regression fails this test instead of killing the run."""
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent(f"""
        import os, numpy as np, sequant_eval as se
        path = {str(tmp_path / "dest.dat")!r}
        for left in (0, 64):
            dest = np.memmap(path, dtype=float, mode="w+", shape=(6, 4))
            dest[:] = 7.0
            dest.flush()
            os.truncate(path, left)
            try:
                se.evaluate("R{{a;i}} = 2 g{{a;i}}", {{"g": np.ones((6, 4))}},
                            {{"a": 6, "i": 4}}, out={{"R": dest}})
            except se.SinkError as e:
                print("refused:", e)
    """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.count("refused: out['R'] is a memory map") == 2, run.stdout
    assert "is 0 B now" in run.stdout and "is 64 B now" in run.stdout


def test_a_destination_sharing_memory_with_what_is_read_is_refused(case, tmp_path):
    """A sink is zeroed and then added into while the inputs are still read, so a
    destination that is an input (``out={"R2": t}``, a view of it, an input block,
    another memory map of its bytes, the same HDF5 dataset) or another result's
    destination would be read after it was written: refused with SinkError naming both,
    the input untouched. Before this check ``out={"R2": t}`` ran and returned R2 wrong by
    1e4. Disjoint parts of one buffer or one raw file, and another dataset of the same
    HDF5 file, are taken, and give the unbatched result."""
    tensors, want = case
    t = tensors["t"].copy()
    buffer = np.zeros((2,) + want.shape)
    buffer[0] = t
    block = tensors["g"][("a", "a", "i", "i")].copy()
    g = dict(tensors["g"]) | {("a", "a", "i", "i"): block}
    refused = {"the input itself": (dict(tensors, t=t), t, "input 't'"),
               "a view of it": (dict(tensors, t=buffer[0]), buffer[0][...], "input 't'"),
               "an input block": (dict(tensors, g=g), block, "input 'g'")}
    for why, (given, dest, culprit) in refused.items():
        before = dest.copy()
        for budget in (None, "30%"):
            with pytest.raises(se.SinkError, match=f"shares memory with {culprit}"):
                se.evaluate(TEXT, given, EXT, budget=budget, out={"R2": dest})
            assert np.array_equal(dest, before), why
    two = TEXT + "\nS2{a1,a2;i1,i2} = t{a1,a2;i1,i2}"
    dest = np.zeros(want.shape)
    with pytest.raises(se.SinkError, match=r"shares memory with out\['R2'\]"):
        se.evaluate(two, tensors, EXT, out={"R2": dest, "S2": dest[...]})
    se.evaluate(TEXT, dict(tensors, t=buffer[0]), EXT, budget="30%",
                out={"R2": buffer[1]})                        # disjoint halves: taken
    assert _close(buffer[1], want) and np.array_equal(buffer[0], tensors["t"])
    path, n = tmp_path / "io.dat", want.size                  # t, then R2, in one raw file
    tensors["t"].tofile(path)
    t_map = np.memmap(path, "f8", "r", shape=want.shape)
    again = np.memmap(path, "f8", "r+", shape=want.shape)     # another mapping of t's bytes
    with pytest.raises(se.SinkError, match="shares memory with input 't'"):
        se.evaluate(TEXT, dict(tensors, t=t_map), EXT, out={"R2": again})
    del again
    with open(path, "ab") as f:                               # R2's bytes after t's
        f.write(bytes(8 * n))
    r2_map = np.memmap(path, "f8", "r+", offset=8 * n, shape=want.shape)
    se.evaluate(TEXT, dict(tensors, t=t_map), EXT, budget="30%", out={"R2": r2_map})
    assert _close(r2_map, want) and np.array_equal(t_map, tensors["t"])
    with h5py.File(tmp_path / "io.h5", "w") as f:
        f.create_dataset("t", data=tensors["t"])
        f.create_dataset("R2", want.shape, "f8")
        with pytest.raises(se.SinkError, match="shares memory with input 't'"):
            se.evaluate(TEXT, dict(tensors, t=f["t"]), EXT, out={"R2": f["t"]})
        assert np.array_equal(f["t"][...], tensors["t"])
        se.evaluate(TEXT, dict(tensors, t=f["t"]), EXT, budget="30%", out={"R2": f["R2"]})
        assert _close(f["R2"][...], want)


def test_a_scalar_result_read_straight_from_scalars_goes_to_its_sink():
    """``E = T{}``-like results: the sum's entries are scalar inputs streamed in (one
    chunk of one element each). Planning them with a sink indexed the scalar's first axis
    (IndexError before the fix). Oracle: the sum written out by hand, and the meter equal
    to the prediction."""
    scalars = {"T": np.array(2.5), "U": np.array(-4.0)}
    for text, want in (("E = T{}", 2.5), ("E = 3 T{}", 7.5), ("E = T{} - 1/2 U{}", 4.5)):
        dest = np.full((), np.nan)
        ev = se.Evaluator(text, {"i": 4})
        ev.evaluate(scalars, out={"E": dest})
        assert dest == want, text
        sunk = ev._compiled((("E", "accumulate"),))
        assert ev.last_meter.peak_bytes == sunk.predicted_peak(), text


@pytest.fixture(scope="module")
def triples():
    no, nv = 6, 8
    arrays = random_inputs(no, nv, seed=3, hermitian=True)
    ext = {"i": no, "a": nv}
    return arrays, ext, se.evaluate(ccsdt_equations(), arrays, ext)


def test_ccsdt_at_a_tenth_with_a_sink_equals_unbatched(triples, tmp_path):
    """CCSDT at 10 % of its unbatched peak (arrays planned alone: the program of 700
    nodes is larger than a tenth of these small arrays), R3 into an HDF5 dataset: every
    residual equals the unbatched one, predicted = metered <= budget, and the inner sum of
    the antisymmetrized terms is sliced (no R3-sized value is ever held)."""
    arrays, ext, want = triples
    eqs = ccsdt_equations()
    top = se.analyze(eqs, ext).peak_bytes
    policy = se.BatchPolicy.everything(0.1 * top, ext, program=False)
    ev = se.Evaluator(eqs, ext, policy=policy)
    f = h5py.File(tmp_path / "r3.h5", "w")
    dest = f.create_dataset("R3", want["R3"].shape, "f8")
    out, meter = ev.evaluate(arrays, out={"R3": dest}, return_meter=True)
    for name in want:
        assert _close(out[name][...], want[name]), name
    sunk = ev._compiled((("R3", "accumulate"),))
    assert meter.peak_bytes == sunk.predicted_peak() <= 0.1 * top
    assert sunk.analysis.plan.sliced                     # R3:A1 batch by batch
    r3 = want["R3"].nbytes
    assert max(c.footprint for c in sunk.analysis.cells) < r3


@pytest.mark.slow
def test_ccsdt_traced_within_the_prediction():
    """What the process allocates while evaluating CCSDT (o=8, v=12) at 10 % into an
    array sink (program built and plans made beforehand; the interpreter's tuple cache
    refilled, see ``refill_tuple_cache``) is within 5 % of the prediction. (At o=6, v=8
    the prediction is 0.37 MB and NumPy's ufunc buffers alone are a fifth of it.)"""
    no, nv = 8, 12
    arrays = random_inputs(no, nv, seed=3, hermitian=True)
    ext = {"i": no, "a": nv}
    eqs = ccsdt_equations()
    want = se.evaluate(eqs, arrays, ext)["R3"]
    top = se.analyze(eqs, ext).peak_bytes
    ev = se.Evaluator(eqs, ext, policy=se.BatchPolicy.everything(0.1 * top, ext,
                                                                 program=False))
    dest = np.zeros(want.shape)
    ev.evaluate(arrays, out={"R3": dest})               # program and kernel plans made
    gc.collect()
    refill_tuple_cache()
    tracemalloc.start()
    try:
        _, meter = ev.evaluate(arrays, out={"R3": dest}, return_meter=True)
        traced = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert _close(dest, want)
    assert meter.peak_bytes <= 0.1 * top
    assert traced <= 1.05 * meter.peak_bytes


def test_destinations_a_probe_found_raising_untyped_errors(tmp_path):
    """A closed HDF5 dataset and the class np.ndarray as destinations raised raw
    RuntimeError / TypeError (a hostile-input probe, 2026-12-07): SinkError now, before
    any work. A callable sink that raises is named with its slice (its error chained), and
    an error found once writing has begun says the destinations are partly written (a
    provider failing at its third read: the first batches are already added in)."""
    text, ext = "R{a_1;i_1} = 2 g{a_1;i_1}", {"a": 6, "i": 4}
    g = np.arange(24.0).reshape(6, 4)
    with h5py.File(tmp_path / "r.h5", "w") as f:
        f.create_dataset("R", (6, 4), "f8")
    f = h5py.File(tmp_path / "r.h5", "r+")
    closed = f["R"]
    f.close()
    with pytest.raises(se.SinkError, match="HDF5 dataset whose file is closed"):
        se.evaluate(text, {"g": g}, ext, out={"R": closed})
    with pytest.raises(se.SinkError, match="out\\['R'\\] is a type"):
        se.evaluate(text, {"g": g}, ext, out={"R": np.ndarray})

    def full(spaces, ranges, block):
        raise KeyError("no room")

    with pytest.raises(se.SinkError, match=r"sink out\['R'\] failed for the slice at ranges "
                       r"\[\(0, 6\), \(0, 4\)\] of R: KeyError: 'no room'") as info:
        se.evaluate(text, {"g": g}, ext, out={"R": full})
    assert isinstance(info.value.__cause__, KeyError)
    assert "partly written" in str(info.value)

    reads = []

    def flaky(spaces, ranges):
        reads.append(ranges)
        (lo, hi), cols = ranges[0], ranges[1]
        return g[lo:hi - (len(reads) == 3), cols[0]:cols[1]]

    t = "R{a_1;i_1} = f{a_1;a_2} * g{a_2;i_1}"
    dest = np.full((6, 4), 7.0)
    with pytest.raises(se.ShapeMismatch, match=r"partly written\]$"):
        se.evaluate(t, {"f": np.eye(6), "g": flaky}, ext, out={"R": dest},
                    budget=se.min_budget(t, ext))
    assert len(reads) == 3 and not np.all(dest == 7.0)       # it had begun
