"""Batched execution: validator rules, joint scatter, persistence across evaluations."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.forest import build_forest
from sequant_eval.plan import BatchPolicy, LoopKind, Open, stamp_plan
from sequant_eval.runtime import Compiled, TensorSource
from sequant_eval.runtime.cells import validate
from sequant_eval.schedule import analyze_schedule


def _stamped_program(text, extents, block, spec, **kw):
    forest = build_forest(se.parse(text), extents)
    value = sorted(forest.trees)[0]
    tree = forest.trees[value]
    labels = {str(ix): ix for node in tree.nodes for ix in node.labels}
    opens = tuple(Open(labels[n], LoopKind(k)) for n, k in spec)
    plan = stamp_plan(forest, extents, BatchPolicy(block=block),
                      {value: {tree.root: (opens, 0)}})
    return Compiled(analyze_schedule(forest, plan), **kw)


@pytest.fixture(scope="module")
def mixed():
    """Ex. 4's nest (scatter → sum → scatter): exercises every kind of cell."""
    return _stamped_program("R{i_1;i_2} = M{i_1;i_3} * N{i_3;i_2}", {"i": 8}, {"i": 3},
                            [("i_1", "E"), ("i_3", "C"), ("i_2", "E")])


def _violations(prog, table):
    return validate(table, prog.sched, prog.forest)


def test_valid_table_has_no_violation(mixed):
    assert _violations(mixed, mixed.table) == []


def test_rule_visibility(mixed):
    t = mixed.table
    read = next(r for r in t.reads if mixed.cells[r.consumer].production == "build")
    order = dict(t.order) | {read.source: t.order[read.consumer] + 1}
    assert {v.rule for v in _violations(mixed, replace(t, order=order))} == {"visibility"}


def test_rule_form(mixed):
    t = mixed.table
    k, read = next((k, r) for k, r in enumerate(t.reads) if r.invariant_on)
    bad = replace(t, reads=t.reads[:k] + (replace(read, invariant_on=()),) + t.reads[k + 1:])
    assert "form" in {v.rule for v in _violations(mixed, bad)}


def test_rule_chain(mixed):
    """The source of an AccumulateSum no longer partial over the loop it sums."""
    t = mixed.table
    summed = next(c.source for c in t.cells if c.production == "assemble-sum")
    k = next(k for k, c in enumerate(t.cells) if c.form == summed)
    bad = replace(t, cells=t.cells[:k] + (replace(t.cells[k], partial=()),) + t.cells[k + 1:])
    assert "chain" in {v.rule for v in _violations(mixed, bad)}


def test_rule_life(mixed):
    t = mixed.table
    bad = replace(t, cells=(replace(t.cells[0], life=t.cells[0].life + 1),) + t.cells[1:])
    assert {v.rule for v in _violations(mixed, bad)} == {"life"}


def test_rule_uniqueness(mixed):
    t = mixed.table
    dup = t.cells[0]
    bad = replace(t, cells=t.cells + (dup,))
    assert "uniqueness" in {v.rule for v in _violations(mixed, bad)}


def test_executor_refuses_an_invalid_table(mixed, monkeypatch):
    """The executor runs the real validator on the table it builds. The table builder is
    made to return the corruption of test_rule_life (the first cell's life off by one),
    which the validator flags; the validator itself is untouched. Negative control: the
    same analysis compiles with the real builder."""
    import sequant_eval.runtime.compiled as c

    Compiled(mixed.analysis)                                  # control: a valid table
    real = c.build_cell_table

    def corrupted(*args, **kw):
        t = real(*args, **kw)
        return replace(t, cells=(replace(t.cells[0], life=t.cells[0].life + 1),) + t.cells[1:])

    monkeypatch.setattr(c, "build_cell_table", corrupted)
    assert c.validate is validate                             # the validator under test
    with pytest.raises(se.ScheduleError, match=r"invalid cell table: .*life"):
        Compiled(mixed.analysis)


def test_joint_sub_block_scatter():
    """B(i3,i4) = A(i3) A(i4) with both indices batched at one node: one destination, each
    batch written into its (i3, i4) window at once. Oracle: np.outer."""
    prog = _stamped_program("B{;i_3,i_4} = A{;i_3} * A{;i_4}", {"i": 7}, {"i": 3},
                            [("i_3", "E"), ("i_4", "E")])
    joint = [f for f in prog.sched.forms if len(f.span) == 2]
    assert len(joint) == 1
    a = np.random.default_rng(0).standard_normal(7)
    src = TensorSource(prog.forest, {"A": {("i",): a}}, {"i": 7})
    out, meter = prog.run("numpy", src)
    np.testing.assert_allclose(out["B"], np.outer(a, a), rtol=0, atol=0)
    assert meter.peak_bytes == prog.analysis.peak_bytes


DF = "R{i_1,a_1;i_2} = X{i_1;k_1} * Y{k_1;i_3} * t{i_3,a_1;i_2}"
DF_EXT = {"i": 3, "a": 4, "k": 50}


def test_persistent_intermediates_are_built_once():
    """W = X·Y depends on no volatile tensor: with persistence it is built by the first
    evaluation only; the second, with new amplitudes, rebuilds nothing but W·t.
    Oracle: the unbatched evaluation at each amplitude set."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((3, 50)), rng.standard_normal((50, 3))
    ev = se.Evaluator(DF, DF_EXT, persist=True, volatile=("t",))
    prog = ev.batched
    (w,) = [c.form for c in prog.table.cells if c.persistent]
    for it in range(3):
        t = rng.standard_normal((3, 4, 3))
        tensors = {"X": {("i", "k"): x}, "Y": {("k", "i"): y}, "t": {("i", "a", "i"): t}}
        out, meter = ev.evaluate(tensors, return_meter=True)
        ref = se.evaluate(DF, tensors, DF_EXT)
        np.testing.assert_allclose(out["R"], ref["R"], rtol=1e-12, atol=1e-14)
        assert meter.builds.get(w, 0) == (1 if it == 0 else 0)
        assert meter.peak_bytes == prog.predicted_peak(warm=it > 0)


def test_dry_run_meter_matches_prediction_under_budget():
    text = "R{a_1;i_1} = X{a_1;k_1,p_1} * U{p_1;p_2} * Q{p_2;p_3} * Z{k_1,p_3;i_1}"
    ext = {"a": 2, "i": 8, "k": 32, "p": 6}
    top = se.analyze(text, ext).peak_bytes
    ev = se.Evaluator(text, ext, policy=BatchPolicy(budget=top // 2, contracted={"k"},
                                                    block={"k": 5}, program=False))
    prog = ev.batched
    _, dry = prog.run("dryrun")
    assert dry.peak_bytes == prog.analysis.peak_bytes <= top // 2
    assert dry.flops == prog.analysis.flops
