"""Inputs read from files: checked, not trusted (issue 22, items 1 and 5).

An h5py dataset changed in place, a memory map rewritten, a file truncated or replaced
between two evaluations, persisted (``Evaluator(persist=True)``, whose kept ``g·g`` must be
rebuilt) or not: each evaluation gives the new result or a typed error, never the old
result or zeros. Integers of every width are computed in float64.

Oracle: ``np.einsum`` in float64 on the values the file holds at that evaluation.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.errors import TruncatedInput
from sequant_eval.forest.values import ValueKind
from sequant_eval.runtime import fingerprint as fingerprints, sources

h5py = pytest.importorskip("h5py")

TEXT = "R{i_1;i_2} = g{i_1;i_3} * g{i_3;i_4} * t{i_4;i_2}"
N = 6
EXT = {"i": N}


def _oracle(g, t):
    return np.einsum("ij,jk,kl->il", g, g, t)


class _Run:
    """Evaluations of TEXT, all through one persisted Evaluator (its kept ``g·g``
    rebuilt when ``g`` changed), or each by a plain ``se.evaluate``."""

    def __init__(self, persisted: bool) -> None:
        self.ev = se.Evaluator(TEXT, EXT, persist=True, volatile=("t",)) if persisted \
            else None

    def __call__(self, g, t):
        tensors = {"g": g, "t": t}
        out = self.ev.evaluate(tensors) if self.ev is not None else \
            se.evaluate(TEXT, tensors, EXT)
        return out["R"]


@pytest.fixture(params=["persisted", "plain"])
def run(request):
    return _Run(request.param == "persisted")


@pytest.fixture
def values():
    rng = np.random.default_rng(22)
    return rng.standard_normal((N, N)), rng.standard_normal((N, N))


def _h5(path, g):
    with h5py.File(path, "w") as f:
        f["g"] = g


def test_an_h5py_dataset_changed_in_place_through_the_same_object(run, values, tmp_path):
    """The issue's reproduction: ``dset[...] = 3 * g`` through the open dataset (no flush,
    nothing new on disk) — 9x the result, not the kept one; then one element."""
    g, t = values
    _h5(tmp_path / "g.h5", g)
    with h5py.File(tmp_path / "g.h5", "r+") as f:
        dset = f["g"]
        np.testing.assert_allclose(run(dset, t), _oracle(g, t), rtol=1e-12)
        dset[...] = 3 * g
        np.testing.assert_allclose(run(dset, t), _oracle(3 * g, t), rtol=1e-12)
        changed = 3 * g
        changed[2, 4] += 10.0
        dset[2, 4] = changed[2, 4]
        np.testing.assert_allclose(run(dset, t), _oracle(changed, t), rtol=1e-12)


def test_a_memmap_rewritten_in_place(run, values, tmp_path):
    """The mapped file written again, through another map and then by ``np.save`` (same
    inode, same size): the map sees the new bytes, and so does the result."""
    g, t = values
    path = tmp_path / "g.npy"
    np.save(path, g)
    mm = np.load(path, mmap_mode="r")
    np.testing.assert_allclose(run(mm, t), _oracle(g, t), rtol=1e-12)
    other = np.load(path, mmap_mode="r+")
    other[...] = 2 * g
    other.flush()
    del other
    np.testing.assert_allclose(run(mm, t), _oracle(2 * g, t), rtol=1e-12)
    np.save(path, -g)
    np.testing.assert_allclose(run(mm, t), _oracle(-g, t), rtol=1e-12)


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_truncated_hdf5_file_is_a_typed_error_not_zeros(run, values, tmp_path, mode):
    """Cut to half between two evaluations while open (read-only, or for writing): HDF5
    would read zeros past the end; the error names the tensor and the file."""
    g, t = values
    path = tmp_path / "g.h5"
    _h5(path, g)
    with h5py.File(path, mode) as f:
        np.testing.assert_allclose(run(f["g"], t), _oracle(g, t), rtol=1e-12)
        os.truncate(path, os.stat(path).st_size // 2)
        with pytest.raises(TruncatedInput, match=r"tensor 'g'.*g\.h5.*truncated") as info:
            run(f["g"], t)
        assert isinstance(info.value, se.MissingTensor)


def test_a_truncated_memmap_is_a_typed_error_not_a_crash(tmp_path):
    """Reading a map past the end of its truncated file kills the process (SIGBUS), so
    this runs in a child process: it must print the typed error and exit normally, for
    a persisted evaluator and a plain evaluation."""
    script = textwrap.dedent(f"""
        import os, numpy as np, sequant_eval as se
        from sequant_eval.errors import TruncatedInput
        text, ext = {TEXT!r}, {EXT!r}
        rng = np.random.default_rng(1)
        # 4096 elements per row: the cut leaves whole pages unmapped
        g, t = rng.standard_normal(({N}, {N})), rng.standard_normal(({N}, {N}))
        for persisted in (True, False):
            path = {str(tmp_path)!r} + f"/g{{persisted}}.bin"
            big = np.zeros(({N}, 4096)); big[:, :{N}] = g
            big.tofile(path)
            mm = np.memmap(path, np.float64, "r", shape=({N}, 4096))[:, :{N}]
            ev = se.Evaluator(text, ext, persist=True, volatile=("t",))
            go = (lambda: ev.evaluate({{"g": mm, "t": t}})) if persisted else \\
                (lambda: se.evaluate(text, {{"g": mm, "t": t}}, ext))
            assert np.allclose(go()["R"], g @ g @ t, rtol=1e-12)
            os.truncate(path, 4096)
            try:
                go()
            except TruncatedInput as err:
                assert "tensor 'g'" in str(err) and path in str(err), err
                print("typed", persisted)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=os.getcwd())
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.split() == ["typed", "True", "typed", "False"], proc.stdout


@pytest.mark.parametrize("kind", ["h5py", "memmap"])
def test_a_file_truncated_during_an_evaluation_fails_the_next_read(kind, values, tmp_path):
    """Each read checks the file's length (one fstat): a leaf reader made before the cut
    refuses to read after it (a memory map is refused before its pages are touched)."""
    g, t = values
    forest = se.Evaluator(TEXT, EXT).forest
    vid = next(v.id for v in forest.values if v.kind is ValueKind.LEAF and v.tensor == "g")
    if kind == "h5py":
        path = tmp_path / "g.h5"
        _h5(path, g)
        handle = h5py.File(path, "r")
        array = handle["g"]
    else:
        path = tmp_path / "g.bin"
        np.tile(g, (1, 1024)).tofile(path)          # rows of 48 KiB: the cut unmaps pages
        array = np.memmap(path, np.float64, "r", shape=(N, 1024 * N))[:, :N]
    source = sources.TensorSource(forest, {"g": array, "t": t}, EXT)
    reader = source.reader(vid)
    np.testing.assert_array_equal(np.asarray(reader.read([(0, 2), None])), g[:2])
    os.truncate(path, os.stat(path).st_size // 4)
    with pytest.raises(TruncatedInput, match=r"tensor 'g'.*truncated"):
        reader.read([(N - 2, N), None])
    if kind == "h5py":
        handle.close()


def _replace(path, write):
    """A new file at ``path``: written beside it, then renamed over it (a new inode)."""
    tmp = str(path) + ".new"
    write(tmp)
    os.replace(tmp, path)


def test_a_replaced_hdf5_file_is_stale_for_its_open_dataset(run, values, tmp_path):
    """The open dataset would go on reading the old (unlinked) file: ``StaleInput``
    naming the tensor and the file; the dataset of the new file gives the new result."""
    g, t = values
    path = tmp_path / "g.h5"
    _h5(path, g)
    with h5py.File(path, "r") as f:
        np.testing.assert_allclose(run(f["g"], t), _oracle(g, t), rtol=1e-12)
        _replace(path, lambda p: _h5(p, 5 * g))
        with pytest.raises(se.StaleInput, match=r"tensor 'g'.*g\.h5.*replaced"):
            run(f["g"], t)
    with h5py.File(path, "r") as f:
        np.testing.assert_allclose(run(f["g"], t), _oracle(5 * g, t), rtol=1e-12)


def _save(path, array):
    with open(path, "wb") as fh:              # (np.save would add ".npy" to the name)
        np.save(fh, array)


def test_a_replaced_memmap_file_is_stale_for_its_map(run, values, tmp_path):
    g, t = values
    path = tmp_path / "g.npy"
    np.save(path, g)
    mm = np.load(path, mmap_mode="r")
    np.testing.assert_allclose(run(mm, t), _oracle(g, t), rtol=1e-12)
    _replace(path, lambda p: _save(p, 5 * g))
    with pytest.raises(se.StaleInput, match=r"tensor 'g'.*g\.npy.*replaced"):
        run(mm, t)
    np.testing.assert_allclose(run(np.load(path, mmap_mode="r"), t), _oracle(5 * g, t),
                               rtol=1e-12)


def test_an_unchanged_file_keeps_its_fingerprint_and_a_change_does_not(values, tmp_path):
    """Two openings of the same unchanged file print alike (a persisted evaluator keeps
    its intermediates when the caller reopens the file every iteration); a write through
    the object, or a new attribute (a stored checksum), changes the print."""
    g, _ = values
    path = tmp_path / "g.h5"
    _h5(path, g)
    with h5py.File(path, "r") as a, h5py.File(path, "r") as b:
        assert fingerprints.fingerprint(a["g"]) == fingerprints.fingerprint(b["g"])
    with h5py.File(path, "r+") as f:
        before = fingerprints.fingerprint(f["g"])
        f["g"].attrs["checksum"] = "abc"
        assert fingerprints.fingerprint(f["g"]) != before
        before = fingerprints.fingerprint(f["g"])
        f["g"][0, 0] = g[0, 0] + 1
        assert fingerprints.fingerprint(f["g"]) != before


def test_a_large_input_is_fingerprinted_by_samples(monkeypatch, values, tmp_path):
    """Over ``EXACT_DIGEST_BYTES`` (lowered here) the content is sampled: a whole-array
    change (scaled by 1.01) is seen, and the sample holds the first and last slabs."""
    monkeypatch.setattr(fingerprints, "EXACT_DIGEST_BYTES", 64)
    monkeypatch.setattr(fingerprints, "SAMPLE_SLAB_BYTES", 16)
    monkeypatch.setattr(fingerprints, "SAMPLE_SLABS", 3)
    g, t = values
    path = tmp_path / "g.h5"
    _h5(path, g)
    run = _Run(True)
    with h5py.File(path, "r+") as f:
        dset = f["g"]
        np.testing.assert_allclose(run(dset, t), _oracle(g, t), rtol=1e-12)
        dset[...] = 1.01 * g
        np.testing.assert_allclose(run(dset, t), _oracle(1.01 * g, t), rtol=1e-12)
        before = fingerprints.fingerprint(dset)
        dset[N - 1, N - 1] = 7.0                    # in the last slab
        assert fingerprints.fingerprint(dset) != before


def test_slabs_cover_the_array_once_in_order():
    """The digest's pieces: rectangular, at most the limit, the whole array, C order."""
    shape = (3, 5, 7)
    a = np.arange(np.prod(shape)).reshape(shape)
    for limit in (8, 40, 56, 8 * 35, 8 * 105, 10**6):
        slabs = fingerprints._Slabs(shape, 8, limit)
        parts = [a[slabs.index(k)].reshape(-1) for k in range(slabs.count)]
        assert all(p.size * 8 <= max(limit, 8) for p in parts), limit
        np.testing.assert_array_equal(np.concatenate(parts), a.reshape(-1))


class _Chunked:
    """A zarr-like array-like (shape, dtype, slicing) whose content can change in place."""

    def __init__(self, data):
        self.data = data
        self.shape, self.dtype = data.shape, data.dtype

    def __getitem__(self, index):
        return np.array(self.data[index])


def test_another_array_like_changed_in_place_is_rebuilt(values):
    g, t = values
    z = _Chunked(g.copy())
    run = _Run(True)
    np.testing.assert_allclose(run(z, t), _oracle(g, t), rtol=1e-12)
    z.data *= 3
    np.testing.assert_allclose(run(z, t), _oracle(3 * g, t), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_integers_of_every_width_are_computed_in_float64(dtype, tmp_path):
    """Sums past 2**24 that float32 would round (the issue: 81956384 for 81956388); the
    values are exact in float64, so the result must equal the float64 einsum exactly —
    given as arrays, with a float32 tensor beside them, and as an h5py dataset."""
    info = np.iinfo(dtype)
    hi = min(int(info.max), 100)
    rng = np.random.default_rng(5)
    m = rng.integers(0, hi, (64, 64)).astype(dtype)
    n = rng.integers(0, hi, (64, 64)).astype(dtype)
    y = rng.integers(0, hi, 64).astype(dtype)
    text = "R{i_1} = M{i_1,i_2} * N{i_2,i_3} * y{i_3}"
    ref = np.einsum("ij,jk,k->i", m.astype(np.float64), n.astype(np.float64),
                    y.astype(np.float64))
    in32 = np.einsum("ij,jk,k->i", m.astype(np.float32), n.astype(np.float32),
                     y.astype(np.float32))
    assert not np.array_equal(in32, ref)             # the case float32 gets wrong
    out = se.evaluate(text, {"M": m, "N": n, "y": y}, {"i": 64})["R"]
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, ref)
    out = se.evaluate(text, {"M": m, "N": n.astype(np.float32), "y": y}, {"i": 64})["R"]
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, ref)
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f["M"] = m
        out = se.evaluate(text, {"M": f["M"], "N": n, "y": y}, {"i": 64})["R"]
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, ref)
