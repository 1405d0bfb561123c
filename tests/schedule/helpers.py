"""Shared builders for schedule tests: forests from text, planned or hand-stamped."""
from __future__ import annotations

from dataclasses import replace

import sequant_eval as se
from sequant_eval.forest import build_forest
from sequant_eval.plan import BatchPlan, BatchPolicy, LoopKind, Open, plan_forest, stamp_plan
from sequant_eval.schedule import FormKind, ScopeBlock, analyze_schedule
from sequant_eval.schedule.analysis import term_peak
from sequant_eval.schedule.legality import analyze_legality


def forest_of(text: str, extents: dict):
    return build_forest(se.parse(text), extents)


def planned(text: str, extents: dict, policy: BatchPolicy):
    forest = forest_of(text, extents)
    plan = plan_forest(forest, extents, policy,
                       exact=term_peak(forest, BatchPlan(policy, extents, (), ())))
    return analyze_schedule(forest, plan)


def stamped(text: str, extents: dict, policy: BatchPolicy, opens_at_root: dict,
            share_leaves: bool = True):
    """Stamp loops at the root node of the terms named by their index (0-based, in forest
    order): ``{0: [("i_1", "E"), ("k_1", "C")]}``; ``share_leaves=False``: whole input
    blocks fetched per term, as the fitter plans them."""
    forest = forest_of(text, extents)
    values = sorted(forest.trees)
    stamps = {}
    for k, spec in opens_at_root.items():
        tree = forest.trees[values[k]]
        labels = {str(ix): ix for node in tree.nodes for ix in node.labels}
        opens = tuple(Open(labels[name], LoopKind(kind)) for name, kind in spec)
        stamps[values[k]] = {tree.root: (opens, 0)}
    plan = stamp_plan(forest, extents, policy, stamps)
    return analyze_schedule(forest, replace(plan, share_leaves=share_leaves))


def blocks(analysis) -> list[ScopeBlock]:
    return [b for b in analysis.ordered.root.blocks() if b.loop >= 0]


def shape(block: ScopeBlock) -> tuple:
    """(space:kind, [child shapes], [output kinds]) — the nest without the steps."""
    kids = [shape(s) for s in block.steps if isinstance(s, ScopeBlock)]
    return (f"{block.axis}:{block.kind.value}", kids, [o.kind.value for o in block.outputs])


def roles(analysis):
    return analyze_legality(analysis.rich)


def forms_of(analysis, kind: FormKind, tensor: str | None = None):
    out = []
    for f in analysis.rich.forms:
        if f.kind is kind and (tensor is None or analysis.forest.values[f.value].tensor == tensor):
            out.append(f)
    return out


def rich_by_hand(forms, loops):
    from sequant_eval.schedule.rich import rich_from_forms

    return rich_from_forms(forms, loops)
