"""What the package remembers between runs (``memo.py``): a fitted schedule, an exchange fold
and a common-factor search are made once per key, in memory and in a cache folder; a changed
key (equations, extents, budget) is planned again, and a cache file that does not match its
key, is damaged or comes from other code is made again — the result always the one a fresh
planning gives (the unbatched evaluation of the same equations is the oracle)."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval import memo
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.expr.exchange import fold_exchange
from sequant_eval.expr.factor import factor_common
from sequant_eval.chem.equations import closed_shell_equations
from sequant_eval.chem.rccsd import CLOSED_SHELL_SYMMETRIES, EXCHANGE_FOLDS

EXT = {"i": 4, "a": 6}


def _fitted(eqs, ext, share: float):
    ev = se.Evaluator(eqs, ext, budget=f"{round(100 * share)}%")
    return ev, ev.batched.program().dump()


def _arrays(ext) -> dict[str, np.ndarray]:
    """Random spin-orbital f, g, t1, t2 (each axis over all orbitals, occupied first)."""
    rng = np.random.default_rng(3)
    n, o, v = ext["i"] + ext["a"], ext["i"], ext["a"]
    return {"f": rng.standard_normal((n, n)), "g": rng.standard_normal((n,) * 4),
            "t1": 0.1 * rng.standard_normal((v, o)),
            "t2": 0.1 * rng.standard_normal((v, v, o, o))}


def _exact(ev, eqs, ext) -> None:
    """The evaluator's batched results equal the unbatched evaluation of ``eqs``."""
    arrays = _arrays(ext)
    got = ev.evaluate(arrays)
    ref = se.evaluate(eqs, arrays, ext)
    for name, want in ref.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-12, atol=1e-14)


def test_a_fit_is_made_once_and_again_when_equations_extents_or_budget_change():
    eqs = ccsd_equations()
    ev, dump = _fitted(eqs, EXT, 0.3)
    made = memo.stats("fit")["made"]
    again, dump_again = _fitted(eqs, EXT, 0.3)
    assert memo.stats("fit")["made"] == made and memo.stats("fit")["memory"] >= 1
    assert dump_again == dump
    _exact(again, eqs, EXT)
    fewer = eqs[:1] + (se.Equation(eqs[1].name, eqs[1].terms[:-3], eqs[1].result),) + eqs[2:]
    changes = [(eqs, EXT, 0.4), (eqs, {"i": 4, "a": 7}, 0.3), (fewer, EXT, 0.3)]
    for k, (e, x, share) in enumerate(changes, 1):
        ev_k, dump_k = _fitted(e, x, share)
        assert memo.stats("fit")["made"] >= made + k, (k, memo.stats("fit"))
        assert dump_k != dump
        _exact(ev_k, e, x)


def test_the_unbatched_schedule_is_made_once_per_forest(monkeypatch):
    """An unbatched evaluator's schedule is also what the program reserve is measured on,
    and a budget at or above the unbatched peak is met by that schedule: neither plans the
    forest again. Oracle: calls of ``fit_forest`` counted, and the schedules compared."""
    from sequant_eval.api import evaluator as api

    calls = []
    real = api.fit_forest
    monkeypatch.setattr(api, "fit_forest", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    memo.clear()                                # no fit remembered from another test
    eqs = ccsd_equations()[1:]
    ev = se.Evaluator(eqs, {"i": 3, "a": 5})
    top = ev.analyze()
    ev.program_reserve()
    assert len(calls) == 1 and not calls[0].finite
    generous = se.Evaluator(eqs, {"i": 3, "a": 5},
                            budget=top.peak_bytes + ev.program_reserve() + 1)
    rep = generous.analyze()
    assert not any(c.finite for c in calls)         # the reserve's schedule, no fit
    assert rep.peak_bytes == top.peak_bytes and rep.loops == ()
    assert generous.batched.program().dump() == ev.batched.program().dump()


def test_a_cache_folder_gives_the_same_schedule_and_rejects_a_damaged_file(tmp_path):
    memo.set_folder(tmp_path)
    eqs = ccsd_equations()
    _, dump = _fitted(eqs, EXT, 0.3)
    files = sorted(tmp_path.glob("fit-*.pickle"))
    assert files and not list(tmp_path.glob(".partial-*"))
    memo.clear()
    ev, from_disk = _fitted(eqs, EXT, 0.3)
    assert memo.stats("fit")["disk"] >= 1 and from_disk == dump
    _exact(ev, eqs, EXT)
    # damage every file: a flipped byte in the stored value, then a file of another key
    for f in files:
        head = pickle.loads(f.read_bytes())
        value = bytearray(head["value"])
        value[len(value) // 2] ^= 0xFF
        head["value"] = bytes(value)
        f.write_bytes(pickle.dumps(head))
    memo.clear()
    ev, remade = _fitted(eqs, EXT, 0.3)
    assert memo.stats("fit")["rejected"] >= 1 and memo.stats("fit")["disk"] == 0
    assert remade == dump
    other = tmp_path / "other"
    memo.set_folder(other)
    _fitted(eqs, {"i": 3, "a": 5}, 0.3)
    for f, g in zip(sorted(other.glob("fit-*.pickle")), files):
        g.write_bytes(f.read_bytes())             # the right name, another key inside
    memo.set_folder(tmp_path)
    memo.clear()
    ev, remade = _fitted(eqs, EXT, 0.3)
    assert memo.stats("fit")["rejected"] >= 1 and remade == dump
    _exact(ev, eqs, EXT)


def test_a_schedule_read_from_the_folder_runs_without_planning_a_kernel(tmp_path,
                                                                           monkeypatch):
    """A fit read back from the cache folder carries its kernel plans: the first
    evaluation in a process that planned nothing searches no kernel plan (each a few
    tenths of a millisecond; 20-30 ms of a cold H2O CCSD run), and the plans it starts
    from are the ones a backend makes fresh for the same operand shapes (the oracle: a new
    NumPy backend asked for each). The results equal the unbatched evaluation (1e-12)."""
    from sequant_eval.plan import kernels
    from sequant_eval.runtime.backends import get_backend

    memo.set_folder(tmp_path)
    eqs = ccsd_equations()
    _fitted(eqs, EXT, 0.3)
    memo.clear()
    kernels._PLANS.clear()
    searched = []
    real = kernels._plan_contraction
    monkeypatch.setattr(kernels, "_plan_contraction",
                        lambda *a: searched.append(a) or real(*a))
    ev, _ = _fitted(eqs, EXT, 0.3)
    assert memo.stats("fit")["disk"] >= 1
    ev.evaluate(_arrays(EXT))
    assert searched == []
    _exact(ev, eqs, EXT)
    program = ev.batched
    seeded = program._kernel_plans()
    assert len(seeded) > 50 and len(program.program().graph.nodes) > len(seeded)
    monkeypatch.setattr(kernels, "_plan_contraction", real)
    kernels._PLANS.clear()
    for (vid, a, b, out, layout), plan in seeded.items():
        fresh = get_backend("numpy")               # its first plan of the contraction
        fresh.contract(program.forest.values, vid, np.zeros(a), np.zeros(b), out, layout)
        assert fresh.plans[(vid, a, b, out, layout)] == plan


def test_a_file_from_other_code_is_made_again(tmp_path):
    memo.set_folder(tmp_path)
    key = ("x", 1)
    assert memo.remembered("probe", key, lambda: [1, 2]) == [1, 2]
    (path,) = tmp_path.glob("probe-*.pickle")
    head = pickle.loads(path.read_bytes())
    head["code"] = "0" * 32
    path.write_bytes(pickle.dumps(head))
    memo.clear()
    assert memo.remembered("probe", key, lambda: [3]) == [3]
    assert memo.stats("probe") == {"made": 1, "memory": 0, "disk": 0, "rejected": 1}
    for junk in (b"", b"not a pickle", pickle.dumps([1, 2, 3])):
        path.write_bytes(junk)
        memo.clear()
        assert memo.remembered("probe", key, lambda: "fresh") == "fresh"
        assert memo.stats("probe")["rejected"] == 1


def test_the_code_hash_changes_with_any_source_or_data_file(tmp_path, monkeypatch):
    """A cache file carries the hash of the package's code; it follows every ``.py`` and
    ``.txt`` file (an edit, a newer modification time, a new file), not bytecode caches.
    Checked on a package of three files made here (the hash is made once per process: its
    store is emptied before each reading)."""
    pkg = tmp_path / "pkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "memo.py").write_text("x = 1\n")
    (pkg / "data" / "eqs.txt").write_text("R = f\n")
    monkeypatch.setattr(memo, "__file__", str(pkg / "memo.py"))

    def code() -> str:
        monkeypatch.setattr(memo, "_code", [])
        return memo._code_hash()

    first = code()
    assert code() == first
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "memo.cpython-311.py").write_text("stale")
    assert code() == first
    (pkg / "data" / "eqs.txt").write_text("R = g\n")          # same size, newer time
    os.utime(pkg / "data" / "eqs.txt", ns=(1, 10**18))
    second = code()
    assert second != first
    (pkg / "memo.py").write_text("x = 12\n")
    third = code()
    assert third not in (first, second)
    (pkg / "new.py").write_text("")
    assert code() not in (first, second, third)


def test_a_cache_folder_that_cannot_be_written_is_left_alone(tmp_path, caplog):
    """A cache "folder" that is a file (as a read-only mount, writing fails): the run goes
    on, planned in memory, with a warning (the read-only case itself needs a non-root
    user; a file in the way fails the same write)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    memo.set_folder(blocker)
    eqs = ccsd_equations()
    ev, _ = _fitted(eqs, EXT, 0.3)
    _exact(ev, eqs, EXT)
    assert blocker.read_text() == "x"
    assert "not written" in caplog.text


def test_a_bad_folder_is_a_typed_error():
    with pytest.raises(se.InputTypeError, match="cache folder"):
        memo.set_folder(3)


def test_the_equation_transforms_are_remembered_and_equal_a_fresh_derivation():
    """The exchange fold and the common-factor search of closed-shell CCSD: a second call
    is a memory hit returning the same equations; with memory cleared, made again equal."""
    traced = closed_shell_equations()
    folded = fold_exchange(traced, EXCHANGE_FOLDS)
    assert fold_exchange(traced, EXCHANGE_FOLDS) is folded
    assert memo.stats("fold_exchange") == {"made": 1, "memory": 1, "disk": 0, "rejected": 0}
    ext = {"i": 5, "a": 19}
    factored = factor_common(folded, ext, beam=1, **CLOSED_SHELL_SYMMETRIES)
    assert factor_common(folded, ext, beam=1, **CLOSED_SHELL_SYMMETRIES) is factored
    assert factor_common(folded, {"i": 5, "a": 20}, beam=1,
                         **CLOSED_SHELL_SYMMETRIES) is not factored
    assert memo.stats("factor_common")["made"] == 2
    memo.clear()
    assert se.to_text(fold_exchange(traced, EXCHANGE_FOLDS)) == se.to_text(folded)
    assert se.to_text(factor_common(folded, ext, beam=1, **CLOSED_SHELL_SYMMETRIES)) \
        == se.to_text(factored)


def test_a_packaged_equation_file_is_parsed_once_per_cache_folder(tmp_path, monkeypatch):
    """The packaged closed-shell equations read back from the cache folder, in a process
    that has parsed nothing (memory and the function's own cache cleared), are not parsed
    again and equal a fresh parse of the file's text (the oracle: ``parse`` itself)."""
    from importlib import resources

    from sequant_eval.chem import equations as packaged
    from sequant_eval.expr import parse

    memo.set_folder(tmp_path)
    packaged.closed_shell_equations.cache_clear()
    first = packaged.closed_shell_equations()
    assert memo.stats("equations")["made"] == 1
    memo.clear()
    packaged.closed_shell_equations.cache_clear()
    monkeypatch.setattr(packaged, "parse", lambda text: pytest.fail("parsed again"))
    again = packaged.closed_shell_equations()
    assert memo.stats("equations") == {"made": 0, "memory": 0, "disk": 1, "rejected": 0}
    text = resources.files("sequant_eval.chem").joinpath("data/ccsd_cs.txt").read_text("utf-8")
    assert again == first == tuple(parse(text)) and again is not first
    packaged.closed_shell_equations.cache_clear()     # later tests parse as they did


def test_another_process_reads_the_fit_a_first_one_wrote(tmp_path):
    """Keys are the same in every process (sets in a policy sorted, not in hash order):
    a second interpreter, with another hash seed, plans nothing."""
    script = textwrap.dedent("""
        import sys
        import sequant_eval as se
        from sequant_eval import memo
        from sequant_eval.chem.equations import ccsd_equations
        eqs = ccsd_equations()
        ext = {"i": 4, "a": 6}
        top = se.analyze(eqs, ext).peak_bytes
        policy = se.BatchPolicy(budget=0.3 * top, contracted={"i", "a"}, external={"a", "i"},
                                program=False)
        ev = se.Evaluator(eqs, ext, policy=policy)
        print(ev.batched.program().dump().count("loop"), memo.stats("fit")["made"])
    """)
    env = dict(os.environ, SEQUANT_EVAL_CACHE=str(tmp_path))
    root = Path(__file__).resolve().parents[1]
    runs = [subprocess.run([sys.executable, "-c", script], env=env | {"PYTHONHASHSEED": s},
                           cwd=root, capture_output=True, text=True, check=True).stdout.split()
            for s in ("1", "2")]
    assert runs[0][0] == runs[1][0] != "0"
    assert runs[0][1] != "0" and runs[1][1] == "0"          # made by the first, not the second
