"""The worked examples of the reference digest (§2), as block structures and roles.

Each fixture states its oracle: the structure the reference's worked example derives by hand.
Where the example needs a particular loop choice it is hand-stamped (as the reference's own
fixtures are); otherwise the DP chooses under a budget.
"""
from __future__ import annotations

import pytest

from sequant_eval.plan import BatchPolicy
from sequant_eval.schedule import FormKind, OutputKind
from sequant_eval.schedule.legality import Role
from sequant_eval.schedule.peak import peak_profile_replay

from .helpers import blocks, forms_of, planned, roles, shape, stamped


def test_ex1_plain_contracted_batching():
    """R(a,i) = Σ_k X(a,k) Y(k,i), k contracted-batchable under a tight budget: one {k:C}
    block, R leaves it as an AccumulateSum, X and Y are read sliced (LoopLocal)."""
    ext = {"a": 4, "i": 4, "k": 64}
    text = "R{a_1;i_1} = X{a_1;k_1} * Y{k_1;i_1}"
    unbatched = planned(text, ext, BatchPolicy()).peak_bytes
    a = planned(text, ext, BatchPolicy(budget=unbatched // 2, contracted={"k"}, block={"k": 8}))
    assert a.peak_bytes < unbatched
    (blk,) = blocks(a)
    assert shape(blk) == ("k:C", [], ["sum"])
    r = roles(a)
    (rform,) = forms_of(a, FormKind.CONTRACT)
    assert r.cells[rform.id].role(blk.loop) is Role.REDUCTION
    for leaf in forms_of(a, FormKind.LEAF):
        assert r.cells[leaf.id].role(blk.loop) is Role.LOOP_LOCAL


def test_ex2_intermediate_inside_and_invariant_hoisted():
    """R = Σ_{k,p} W(a,k,p) Z(k,p,i) with W = X·V and V = U·Q: W is built per batch inside
    {k:C} (LoopLocal), U does not carry k and is built once at the root (LoopInvariant)."""
    ext = {"a": 2, "i": 8, "k": 32, "p": 6}
    text = "R{a_1;i_1} = X{a_1;k_1,p_1} * U{p_1;p_2} * Q{p_2;p_3} * Z{k_1,p_3;i_1}"
    unbatched = planned(text, ext, BatchPolicy()).peak_bytes
    a = planned(text, ext, BatchPolicy(budget=unbatched // 2, contracted={"k"}, block={"k": 4}))
    (blk,) = blocks(a)
    assert shape(blk) == ("k:C", [], ["sum"])
    r = roles(a)
    values = a.forest.values
    u = next(f for f in forms_of(a, FormKind.CONTRACT)
             if {values[o].tensor for o in values[f.value].children} == {"U", "Q"})
    assert u.scope == ()
    assert r.cells[u.id].role(blk.loop) is Role.LOOP_INVARIANT
    root_steps = [s for s in a.ordered.root.steps if not hasattr(s, "loop")]
    assert sum(1 for s in root_steps if s.form == u.id) == 1       # built exactly once
    assert a.ordered.root.steps.index(blk) > [getattr(s, "form", None)
                                              for s in a.ordered.root.steps].index(u.id)
    w = next(f for f in forms_of(a, FormKind.CONTRACT) if f.operands and u.id in f.operands)
    assert w.scope == (blk.loop,) and r.cells[w.id].role(blk.loop) is Role.LOOP_LOCAL


def test_ex3_external_batching_scatters():
    """R(a,i) = Σ X(a,k,p) Z(k,p,i), i external-batchable: R is LoopCarried and scatters out
    of {i:E}; Z is read sliced (LoopLocal); X is read whole by every batch (LoopInvariant)."""
    ext = {"a": 4, "i": 64, "k": 4, "p": 4}
    text = "R{a_1;i_1} = X{a_1;k_1,p_1} * Z{k_1,p_1;i_1}"
    unbatched = planned(text, ext, BatchPolicy()).peak_bytes
    a = planned(text, ext, BatchPolicy(budget=unbatched // 2, external={"i"}, block={"i": 8}))
    (blk,) = blocks(a)
    assert shape(blk) == ("i:E", [], ["scatter"])
    r = roles(a)
    (rform,) = forms_of(a, FormKind.CONTRACT)
    assert r.cells[rform.id].role(blk.loop) is Role.LOOP_CARRIED
    assert r.cells[rform.id].forced_split_axes == (blk.loop,)
    (z,) = forms_of(a, FormKind.LEAF, "Z")
    (x,) = forms_of(a, FormKind.LEAF, "X")
    assert r.cells[z.id].role(blk.loop) is Role.LOOP_LOCAL
    assert x.scope == () and r.cells[x.id].role(blk.loop) is Role.LOOP_INVARIANT


def test_ex4_mixed_open_escape_chain():
    """R(i,j) = Σ_k M(i,k) N(k,j) with i, j external and k contracted opened at one node in
    the order external > contracted > external: R is built in the innermost block and its
    escape chain is scatter (j) → sum (k) → scatter (i)."""
    ext = {"i": 8}
    text = "R{i_1;i_2} = M{i_1;i_3} * N{i_3;i_2}"
    policy = BatchPolicy(block={"i": 4})
    a = stamped(text, ext, policy, {0: [("i_1", "E"), ("i_3", "C"), ("i_2", "E")]})
    (outer,) = [b for b in a.ordered.root.steps if hasattr(b, "loop")]
    assert shape(outer) == ("i:E", [("i:C", [("i:E", [], ["scatter"])], ["sum"])], ["scatter"])
    inner = outer.steps[-1].steps[-1]
    (rform,) = forms_of(a, FormKind.CONTRACT)
    assert any(getattr(s, "form", None) == rform.id for s in inner.steps)
    r = roles(a)
    loops = [outer.loop, outer.steps[-1].loop, inner.loop]
    assert [r.cells[rform.id].role(l) for l in loops] == [
        Role.LOOP_CARRIED, Role.REDUCTION, Role.LOOP_CARRIED]
    assert len(forms_of(a, FormKind.ASSEMBLE)) == 3   # produced once, forwarded twice


def test_ex5_loop_carried_outer_product():
    """B(i3,i4) = V(i3) V(i4), both indices external and batched: B is LoopCarried on both
    loops and both land in forced_split_axes; V is read as two differently sliced forms."""
    ext = {"i": 8}
    a = stamped("B{i_3;i_4} = V{i_3} * V{i_4}", ext, BatchPolicy(block={"i": 2}),
                {0: [("i_3", "E"), ("i_4", "E")]})
    r = roles(a)
    (bform,) = forms_of(a, FormKind.CONTRACT)
    assert len(r.cells[bform.id].forced_split_axes) == 2
    assert len(forms_of(a, FormKind.LEAF, "V")) == 2


def test_ex7_aux_contraction_reduction_shape():
    """Water-20 shapes with plain sizing: with Κ contracted-batchable, a Κ-contraction result
    leaves the {Κ} block as an AccumulateSum (Reduction), Κ-carrying values are LoopLocal
    inside {Κ}, and a consumer of the reduction that does not carry Κ is built once outside."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "data/water20/csv_ccsd_energy_df.txt").read_text()
    import sequant_eval as se

    ext = {"i": 8, "a": 12, "Κ": 160, "μ̃": 40}    # water-20's shape, scaled down
    policy = BatchPolicy(budget=1, contracted={"Κ"}, block={"Κ": 16})
    with pytest.raises(se.InfeasibleBudget) as info:
        planned(text, ext, policy)
    a = planned(text, ext, BatchPolicy(budget=info.value.minimum, contracted={"Κ"},
                                       block={"Κ": 16}))
    r = roles(a)
    kblocks = [b for b in blocks(a) if b.axis == "Κ"]
    assert kblocks and all(b.kind.value == "C" for b in kblocks)
    assert any(o.kind is OutputKind.ACCUMULATE_SUM for b in kblocks for o in b.outputs)
    reductions = [c for c in r.cells.values() if Role.REDUCTION in dict(c.per_axis).values()]
    assert reductions
    local = [c for c in r.cells.values() if Role.LOOP_LOCAL in dict(c.per_axis).values()]
    assert any(a.forest.values[c.value].tensor == "g" for c in local)
    readers = {rd for c in reductions for rd, _ in a.rich.readers[c.escapes[-1]]}
    assert any(not a.rich.forms[rd].scope for rd in readers)
    assert a.peak_bytes == peak_profile_replay(a.ordered, a.forest, a.shapes, scratch=a.scratch).peak_bytes


def _ex8():
    """Ex. 8's forest: two terms sharing g·h, each stamped Contracted on x at its root."""
    ext = {"i": 4, "a": 6, "x": 12}
    text = ("R{i_1,i_2;i_3,i_4} = g{a_2;i_1;x_1} * h{i_3;a_2} * p{a_3;i_2;x_1} * q{i_4;a_3}"
            " + g{a_2;i_1;x_1} * h{i_3;a_2} * r{a_3;i_2;x_1} * w{i_4;a_3}")
    return stamped(text, ext, BatchPolicy(block={"x": 4}),
                   {0: [("x_1", "C")], 1: [("x_1", "C")]})


def test_ex8_a_block_both_fused_terms_read_whole_is_fetched_once(monkeypatch):
    """Hand-worked: ex. 8 with w = q, whole blocks fetched per term (as the fitter plans):
    q (i·a = 4·6·8 = 192 B) is read whole inside the one fused {x} block by both terms'
    q-products. One fetch serves both, and the peak is exactly one q below that of the
    same schedule with a fetch per term (the per-term copies both held through the
    block); the replay oracle agrees with the static sweep."""
    from sequant_eval.schedule import boulevard

    ext = {"i": 4, "a": 6, "x": 12}
    text = ("R{i_1,i_2;i_3,i_4} = g{a_2;i_1;x_1} * h{i_3;a_2} * p{a_3;i_2;x_1} * q{i_4;a_3}"
            " + g{a_2;i_1;x_1} * h{i_3;a_2} * r{a_3;i_2;x_1} * q{i_4;a_3}")

    def analysis():
        return stamped(text, ext, BatchPolicy(block={"x": 4}),
                       {0: [("x_1", "C")], 1: [("x_1", "C")]}, share_leaves=False)

    a = analysis()
    (blk,) = blocks(a)
    (q,) = forms_of(a, FormKind.LEAF, "q")
    readers = [f for f in a.rich.forms if q.id in f.operands]
    assert q.scope == () and len(readers) == 2
    assert all(f.scope == (blk.loop,) for f in readers)
    assert peak_profile_replay(a.ordered, a.forest, a.shapes,
                               scratch=a.scratch).peak_bytes == a.peak_bytes

    monkeypatch.setattr(boulevard._SharedFetches, "reads", lambda self, form, key, ops: ops)
    copies = analysis()
    assert len(forms_of(copies, FormKind.LEAF, "q")) == 2
    assert copies.peak_bytes - a.peak_bytes == 4 * 6 * 8


def test_ex8_shared_subterm_fuses_loops():
    """t1 = (g·h)·(p·q), t2 = (g·h)·(r·w), x stamped Contracted at each root: the shared g·h
    folds, so both roots' reductions are one {x} block, g·h is built once per batch inside,
    and all outputs are AccumulateSum."""
    a = _ex8()
    (blk,) = blocks(a)
    assert blk.kind.value == "C" and len(blk.outputs) == 2
    assert all(o.kind is OutputKind.ACCUMULATE_SUM for o in blk.outputs)
    values = a.forest.values
    gh = [f for f in forms_of(a, FormKind.CONTRACT)
          if {values[o].tensor for o in values[f.value].children} == {"g", "h"}]
    assert len(gh) == 1 and gh[0].scope == (blk.loop,)
    assert len(a.rich.loops) == 1 and len(a.plan.loops) == 2     # two planned, one physical


def test_ex8_each_batch_escapes_before_the_next_terms_partial_is_built():
    """Hand-worked: the two fused terms' per-batch partials (i,i,i,i: 4⁴·8 = 2048 B each)
    are independent, so the first term's batch can leave the block (accumulated into its
    destination) before the second term's partial is built; the two partials are then never
    live together, and the peak is one partial below that of escaping both at the block's
    end (measured by the replay oracle on the same schedule with the outputs moved last)."""
    from dataclasses import replace

    from sequant_eval.schedule.ordered import BuildStep, Output

    a = _ex8()
    (blk,) = blocks(a)
    partials = {a.ordered.forms[o.form].source for o in blk.outputs}
    body = [("out", s.form) if isinstance(s, Output) else ("build", s.form)
            for s in blk.body() if isinstance(s, (Output, BuildStep))]
    kinds = [k for k, f in body if f in partials or k == "out"]
    assert kinds == ["build", "out", "build", "out"]

    late = replace(blk, escapes=())                      # every output after the last step
    root = a.ordered.root
    late_root = replace(root, steps=tuple(late if s is blk else s for s in root.steps))
    late_sched = replace(a.ordered, root=late_root)
    early = peak_profile_replay(a.ordered, a.forest, a.shapes, scratch=a.scratch).peak_bytes
    held = peak_profile_replay(late_sched, a.forest, a.shapes, scratch=a.scratch).peak_bytes
    assert early == a.peak_bytes
    assert held - early == 4 ** 4 * 8


def test_ex9_a_slice_two_fused_terms_share_is_not_held_through_a_third(monkeypatch):
    """Hand-worked: three terms contracted over x (block 4), fused into one {x} block:
    A = g·p, B = h·p, C = g·r, every slice i·a·x = 4·6·4·8 = 768 B, every partial
    i·i = 128 B. In rank order (A, B, C) the g slice waits through B for C: g, p, h and
    B's partial live at once, 3·768 + 128 = 2432 B. Ordered by memory the block runs
    p, h, B (its batch escapes), g, A (escapes), r, C (escapes): at most two slices and
    one partial, 2·768 + 128 = 1664 B. The rest of the schedule is the same, so the whole
    peak is one slice (768 B) lower; the replay oracle agrees with the static sweep for
    both orders (the rank order is what the sequencer gives a schedule without form
    sizes)."""
    from sequant_eval.schedule import boulevard
    from sequant_eval.schedule.ordered import BuildStep

    ext = {"i": 4, "a": 6, "x": 12}
    text = ("R{i_1;i_2} = g{i_1;a_1;x_1} * p{a_1;i_2;x_1} + h{i_1;a_1;x_1} * p{a_1;i_2;x_1}"
            " + g{i_1;a_1;x_1} * r{a_1;i_2;x_1}")

    def analysis():
        return stamped(text, ext, BatchPolicy(block={"x": 4}),
                       {k: [("x_1", "C")] for k in range(3)})

    def body(a):
        (blk,) = blocks(a)
        values = a.forest.values
        return [values[a.rich.forms[s.form].value].tensor or "·"
                if isinstance(s, BuildStep) else "out" for s in blk.body()]

    lean = analysis()
    assert body(lean) == ["p", "h", "·", "out", "g", "·", "out", "r", "·", "out"]
    monkeypatch.setattr(boulevard, "FormBytes", lambda forest, plan: None)
    by_rank = analysis()
    assert body(by_rank) == ["g", "p", "·", "out", "h", "·", "out", "r", "·", "out"]
    for a in (lean, by_rank):
        assert peak_profile_replay(a.ordered, a.forest, a.shapes,
                                   scratch=a.scratch).peak_bytes == a.peak_bytes
    assert by_rank.peak_bytes - lean.peak_bytes == 2432 - 1664
