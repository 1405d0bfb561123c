"""How an antisymmetrized group's terms are turned before their inner sum is sliced.

Oracle: costs worked by hand from the module's rule (flops made again inside the tied
loop, plus each input block read whole again per batch at ``COPY_FLOPS`` an entry)."""
from __future__ import annotations

import sequant_eval as se
from sequant_eval.forest import build_forest
from sequant_eval.plan import BatchPolicy, slicing

TEXT = "R2{a_1,a_2;i_1,i_2} = A{a_1,a_2;i_1,i_2} * f{a_1;a_3} * t2{a_3,a_2;i_1,i_2}"
EXTENTS = {"i": 3, "a": 8}


def _entries(copy_flops: float, monkeypatch):
    monkeypatch.setattr(slicing, "COPY_FLOPS", copy_flops)
    forest = build_forest(se.parse(TEXT), EXTENTS)
    policy = BatchPolicy.everything(None, EXTENTS)
    (sid,) = slicing.sliceable_sums(forest, policy)
    turned = slicing.orient_sums(forest, policy, EXTENTS)
    return forest.values[sid].entries, turned.values[sid].entries


def test_the_term_is_turned_so_the_tied_loop_slices_its_large_block(monkeypatch):
    """R2:A1 = f·t2 is sliced on its first virtual and first occupied modes (a: 4
    batches of 2; i: 3 of 1). As written those are a_1 (f's) and i_1 (t2's): t2 (8·8·3·3
    = 576 entries) is read whole again in 3 of a's 4 batches and f (64) in 2 of i's 3,
    180·(576·3 + 64·2) = 334,080 flops' worth, plus the contraction's 8·8·8·3·3 = 4,608
    once: 338,688. Turned by the antisymmetrizer's swap of a_1 and a_2 (weight negated)
    both tied labels are t2's and only f is read again, in 11 of the 12 batches:
    180·64·11 + 4,608 = 131,328, the cheaper. Without the copy price (0) both cost the
    same 4,608 and the term stays as written."""
    (before,), (after,) = _entries(180, monkeypatch)
    assert after.perm == (before.perm[1], before.perm[0]) + before.perm[2:]
    assert after.coefficient == -before.coefficient
    (before,), (kept,) = _entries(0, monkeypatch)
    assert kept == before
