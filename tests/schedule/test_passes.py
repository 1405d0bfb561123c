"""Pass splits (reference Ex. 5 in-loop case, Ex. 6) on hand-built schedules.

Oracle: the worked examples' hand derivation — a reader inside loop L of a value that is
complete only after L (scattered or summed out of L) must run in a second pass over L.
"""
from __future__ import annotations

import pytest

from sequant_eval.errors import ScheduleError
from sequant_eval.expr import Index
from sequant_eval.plan import Loop, LoopKind
from sequant_eval.schedule import Form, FormKind, ScopeBlock, build_ordered_schedule
from sequant_eval.schedule.ordered import form_paths

from .helpers import rich_by_hand


def _loop(kind: LoopKind) -> Loop:
    return Loop(0, "i", kind, 2, 8, 4, (0, 0), Index("i", 1))


def F(fid, kind, value, scope=(), sliced=(), partial=(), operands=(), source=-1, via=-1):
    return Form(fid, kind, value, 0, tuple(sliced), tuple(partial), tuple(scope),
                tuple(operands), source, via)


def _ex5():
    """C(i,j) = A(i,k) B(k,j) built per i-batch and scattered; E(j,i) reads C through its
    other index inside the same i loop."""
    L = FormKind
    return [
        F(0, L.LEAF, 0, scope=(0,), sliced=[(0, 0)]),                    # A[i_b, :]
        F(1, L.LEAF, 1),                                                  # B
        F(2, L.CONTRACT, 2, scope=(0,), sliced=[(0, 0)], operands=(0, 1)),  # C[i_b, :]
        F(3, L.ASSEMBLE, 2, source=2, via=0),                             # C, whole
        F(4, L.SUM, 5, operands=(3,)),
        F(5, L.LEAF, 3, scope=(0,), sliced=[(0, 0)]),                     # D[i_b, :]
        F(6, L.CONTRACT, 4, scope=(0,), sliced=[(0, 0)], operands=(3, 5)),  # E[i_b, :] needs C
        F(7, L.ASSEMBLE, 4, source=6, via=0),
        F(8, L.SUM, 6, operands=(7,)),
    ]


def test_ex5_reader_of_scattered_value_runs_in_second_pass():
    sched = build_ordered_schedule(rich_by_hand(_ex5(), [_loop(LoopKind.EXTERNAL)]))
    passes = [s for s in sched.root.steps if isinstance(s, ScopeBlock)]
    assert [(b.loop, b.pass_) for b in passes] == [(0, 0), (0, 1)]
    assert [o.form for o in passes[0].outputs] == [3]
    assert 6 in [s.form for s in passes[1].steps]
    assert [o.kind.value for b in passes for o in b.outputs] == ["scatter", "scatter"]


def test_ex6_reduction_reader_is_bumped_to_a_later_pass():
    """V = Σ_K X(K) Y(K) is a Reduction over K; W = Σ_K V Z(K) reads V inside the K loop, so
    it must run in pass 1, after the {K} block of pass 0 completed the sum."""
    L = FormKind
    forms = [
        F(0, L.LEAF, 0, scope=(0,), sliced=[(0, 0)]),
        F(1, L.LEAF, 1, scope=(0,), sliced=[(0, 0)]),
        F(2, L.CONTRACT, 2, scope=(0,), partial=(0,), operands=(0, 1)),     # V partial
        F(3, L.ASSEMBLE, 2, source=2, via=0),                               # V complete
        F(4, L.LEAF, 3, scope=(0,), sliced=[(0, 0)]),
        F(5, L.CONTRACT, 4, scope=(0,), partial=(0,), operands=(3, 4)),     # W reads V
        F(6, L.ASSEMBLE, 4, source=5, via=0),
        F(7, L.SUM, 5, operands=(6,)),
    ]
    paths = form_paths(rich_by_hand(forms, [_loop(LoopKind.CONTRACTED)]))
    assert paths[2] == ((0, 0),) and paths[5] == ((0, 1),)
    sched = build_ordered_schedule(rich_by_hand(forms, [_loop(LoopKind.CONTRACTED)]))
    first, second = [s for s in sched.root.steps if isinstance(s, ScopeBlock)]
    assert [o.kind.value for o in first.outputs] == ["sum"]


def test_later_pass_reader_of_a_per_batch_form_is_refused():
    """E in pass 1 cannot read A[i_b], which exists only during pass 0 (tripwire)."""
    forms = _ex5()
    forms[6] = F(6, FormKind.CONTRACT, 4, scope=(0,), sliced=[(0, 0)], operands=(3, 0))
    with pytest.raises(ScheduleError, match="materialized whole"):
        form_paths(rich_by_hand(forms, [_loop(LoopKind.EXTERNAL)]))
