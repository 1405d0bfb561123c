"""Named schedule configurations whose dumps are kept under ``schedules/`` as snapshots.

Any change to planning or sequencing shows up as a diff of these files. Regenerate them
deliberately with ``sequant-eval snapshots --update`` and review the diff.

A development tool of the source checkout, not part of the library: the stored dumps
(``schedules/``) and the water-20 inputs (``data/water20/``) live here, beside it. The
``sequant-eval snapshots`` command loads this file from the checkout
(``sequant_eval.checkout``); outside a checkout the command says so.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sequant_eval.errors import UsageError
from sequant_eval.expr import Index, parse
from sequant_eval.forest import build_forest
from sequant_eval.plan import (BatchPlan, BatchPolicy, Loop, LoopKind, Open, plan_forest,
                               stamp_plan)
from sequant_eval.schedule.analysis import analyze_schedule, term_peak
from sequant_eval.schedule.dump import dump_analysis

__all__ = ["CONFIGS", "render", "check", "update", "source_root"]


def source_root() -> Path:
    """The checkout this file belongs to (``schedules/``, ``data/water20/``)."""
    return Path(__file__).resolve().parents[1]


def _planned(text: str, extents: dict, policy: BatchPolicy):
    forest = build_forest(parse(text), extents)
    plan = plan_forest(forest, extents, policy,
                       exact=term_peak(forest, BatchPlan(policy, extents, (), ())))
    return analyze_schedule(forest, plan)


def _stamped(text: str, extents: dict, policy: BatchPolicy, spec: dict):
    forest = build_forest(parse(text), extents)
    values = sorted(forest.trees)
    stamps = {}
    for k, opens in spec.items():
        tree = forest.trees[values[k]]
        labels = {str(ix): ix for node in tree.nodes for ix in node.labels}
        stamps[values[k]] = {tree.root: (tuple(Open(labels[n], LoopKind(c)) for n, c in opens), 0)}
    return analyze_schedule(forest, stamp_plan(forest, extents, policy, stamps))


def _fraction(text: str, extents: dict, fraction: float):
    from sequant_eval.api import analyze

    top = analyze(text, extents).peak_bytes
    return _planned(text, extents, BatchPolicy.everything(top * fraction, extents))


def _half(text: str, extents: dict, **policy):
    from sequant_eval.api import analyze

    top = analyze(text, extents).peak_bytes
    return _planned(text, extents, BatchPolicy(budget=top // 2, **policy))


def _water20(policy: BatchPolicy):
    from sequant_eval.plan.regime import load_regime

    root = source_root() / "data/water20"
    regime = load_regime(root / "regime.json")
    text = (root / "csv_ccsd_doubles_residual_df.txt").read_text(encoding="utf-8")
    forest = build_forest(parse(text), regime)
    from sequant_eval.schedule.budget import fit_forest

    return fit_forest(forest, regime, policy)


def _ccsd(fraction: float):
    from sequant_eval.chem.equations import ccsd_text

    return _fraction(ccsd_text(), {"i": 10, "a": 38}, fraction)


def _smallest(text: str, extents: dict, **policy):
    """Planned at the smallest budget the planner can meet (named by InfeasibleBudget)."""
    from sequant_eval.errors import InfeasibleBudget

    try:
        return _planned(text, extents, BatchPolicy(budget=1, **policy))
    except InfeasibleBudget as err:
        return _planned(text, extents, BatchPolicy(budget=err.minimum, **policy))


def _water20_energy():
    text = source_root() / "data/water20/csv_ccsd_energy_df.txt"
    return _smallest(text.read_text(encoding="utf-8"), {"i": 8, "a": 12, "Κ": 160, "μ̃": 40},
                     contracted={"Κ"}, block={"Κ": 16})


def _hand(kind: LoopKind, rows: list[tuple]) -> str:
    """A hand-built schedule (loop identity pinned), dumped without a forest."""
    from sequant_eval.schedule.rich import rich_from_forms
    from sequant_eval.schedule.dump import dump_schedule
    from sequant_eval.schedule.forms import Form, FormKind
    from sequant_eval.schedule.ordered import build_ordered_schedule

    forms = [Form(k, FormKind(kd), v, 0, tuple(sl), tuple(pa), tuple(sc), tuple(ops), src, via)
             for k, (kd, v, sl, pa, sc, ops, src, via) in enumerate(rows)]
    loop = Loop(0, "i", kind, 2, 8, 4, (0, 0), Index("i", 1))
    return dump_schedule(build_ordered_schedule(rich_from_forms(forms, [loop])))


_EX5_INLOOP = [  # C(i,j)=A(i,k)B(k,j) scattered per i-batch; E(j,i) reads C inside the loop
    ("leaf", 0, [(0, 0)], (), (0,), (), -1, -1), ("leaf", 1, (), (), (), (), -1, -1),
    ("contract", 2, [(0, 0)], (), (0,), (0, 1), -1, -1), ("assemble", 2, (), (), (), (), 2, 0),
    ("sum", 5, (), (), (), (3,), -1, -1), ("leaf", 3, [(0, 0)], (), (0,), (), -1, -1),
    ("contract", 4, [(0, 0)], (), (0,), (3, 5), -1, -1), ("assemble", 4, (), (), (), (), 6, 0),
    ("sum", 6, (), (), (), (7,), -1, -1)]
_EX6_REDUCTION_READER = [  # V = Σ_K X·Y (Reduction); W = Σ_K V·Z reads V inside K
    ("leaf", 0, [(0, 0)], (), (0,), (), -1, -1), ("leaf", 1, [(0, 0)], (), (0,), (), -1, -1),
    ("contract", 2, (), (0,), (0,), (0, 1), -1, -1), ("assemble", 2, (), (), (), (), 2, 0),
    ("leaf", 3, [(0, 0)], (), (0,), (), -1, -1),
    ("contract", 4, (), (0,), (0,), (3, 4), -1, -1), ("assemble", 4, (), (), (), (), 5, 0),
    ("sum", 5, (), (), (), (6,), -1, -1)]


CONFIGS: dict[str, Callable] = {
    "ex1_contracted": lambda: _fraction("R{a_1;i_1} = X{a_1;k_1} * Y{k_1;i_1}",
                                       {"a": 4, "i": 4, "k": 64}, 0.5),
    "ex2_hoisted_invariant": lambda: _half(
        "R{a_1;i_1} = X{a_1;k_1,p_1} * U{p_1;p_2} * Q{p_2;p_3} * Z{k_1,p_3;i_1}",
        {"a": 2, "i": 8, "k": 32, "p": 6}, contracted={"k"}, block={"k": 4}),
    "ex3_external": lambda: _half(
        "R{a_1;i_1} = X{a_1;k_1,p_1} * Z{k_1,p_1;i_1}", {"a": 4, "i": 64, "k": 4, "p": 4},
        external={"i"}, block={"i": 8}),
    "ex4_mixed_open": lambda: _stamped(
        "R{i_1;i_2} = M{i_1;i_3} * N{i_3;i_2}", {"i": 8}, BatchPolicy(block={"i": 4}),
        {0: [("i_1", "E"), ("i_3", "C"), ("i_2", "E")]}),
    "ex5_cross_iteration": lambda: _stamped(
        "A{;i_3} * A{;i_4}", {"i": 8}, BatchPolicy(block={"i": 2}),
        {0: [("i_3", "E"), ("i_4", "E")]}),
    "ex7_water20_aux_only_scaled": _water20_energy,
    "ex8_shared_subterm": lambda: _stamped(
        "R{i_1,i_2;i_3,i_4} = g{a_2;i_1;x_1} * h{i_3;a_2} * p{a_3;i_2;x_1} * q{i_4;a_3}"
        " + g{a_2;i_1;x_1} * h{i_3;a_2} * r{a_3;i_2;x_1} * w{i_4;a_3}",
        {"i": 4, "a": 6, "x": 12}, BatchPolicy(block={"x": 4}),
        {0: [("x_1", "C")], 1: [("x_1", "C")]}),
    "water20_doubles_aux_only_5e9": lambda: _water20(
        BatchPolicy(budget=5e9, contracted={"Κ"}, block={"Κ": 256})),
    "water20_doubles_aux_occ_5e9": lambda: _water20(
        BatchPolicy(budget=5e9, contracted={"Κ"}, external={"i"}, block={"Κ": 256, "i": 16})),
    "ccsd_water_100pct": lambda: _ccsd(1.0),
    "ccsd_water_50pct": lambda: _ccsd(0.5),
    "ccsd_water_25pct": lambda: _ccsd(0.25),
}


HAND_BUILT: dict[str, Callable[[], str]] = {
    "ex5_inloop_passes": lambda: _hand(LoopKind.EXTERNAL, _EX5_INLOOP),
    "ex6_reduction_reader": lambda: _hand(LoopKind.CONTRACTED, _EX6_REDUCTION_READER),
}


def render(name: str) -> str:
    if name in HAND_BUILT:
        return f"# {name} (hand-built forms)\n" + HAND_BUILT[name]()
    return dump_analysis(CONFIGS[name](), name)


def names() -> list[str]:
    return sorted(CONFIGS) + sorted(HAND_BUILT)


def _dir(directory: str | Path | None) -> Path:
    return Path(directory) if directory else source_root() / "schedules"


def check(directory: str | Path | None = None) -> list[str]:
    """Names whose stored dump differs from a fresh one (missing files count)."""
    d = _dir(directory)
    if not d.is_dir():
        raise UsageError(f"snapshot folder {d} does not exist; create it with "
                         f"sequant-eval snapshots --update --dir {d}")
    stale = []
    for name in names():
        path = d / f"{name}.txt"
        if not path.exists() or path.read_text(encoding="utf-8") != render(name):
            stale.append(name)
    return stale


def update(directory: str | Path | None = None) -> list[Path]:
    d = _dir(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names():
        path = d / f"{name}.txt"
        path.write_text(render(name), encoding="utf-8")
        out.append(path)
    return out
