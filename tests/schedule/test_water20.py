"""Water-20 at full scale (dry runs only): composite sizes, both batch configurations.

Sizes follow data/water20/README.md: plain extents, composite modes by power means.
Oracles: the budget itself (forest peak ≤ budget), the dry-run meter (== the static
sweep, to the byte), and the reference-shape statements of the README.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import sequant_eval as se
from sequant_eval.plan import BatchPolicy
from sequant_eval.plan.regime import load_regime
from sequant_eval.schedule import FormKind, OutputKind
from sequant_eval.schedule.legality import Role, analyze_legality

DATA = Path(__file__).resolve().parents[2] / "data" / "water20"
FILES = ["csv_ccsd_energy_df.txt", "csv_ccsd_singles_residual_df.txt",
         "csv_ccsd_doubles_residual_df.txt"]
AUX = dict(contracted={"Κ"}, block={"Κ": 256})
AUX_OCC = dict(contracted={"Κ"}, external={"i"}, block={"Κ": 256, "i": 16})


@pytest.fixture(scope="module")
def regime():
    return load_regime(DATA / "regime.json")


def test_regime_sizes_composites_by_power_means(regime):
    """README: two PNO modes on one pair → n_i n_j M_2²; one OSV mode → M_1 (OSV)."""
    (eq,) = se.parse("t{a_1<i_1,i_2>,a_2<i_1,i_2>;i_1,i_2} * C{a_3<i_3>;μ̃_1}")
    t, c = eq.terms[0].factors
    pno, osv = regime.moments[2], regime.moments[1]
    assert regime.label_sizes(t.slots) == (pno[2], pno[2], 80, 80)
    assert regime.label_sizes(c.slots) == (osv[1], 896)


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("config", ["aux", "aux+occ"])
@pytest.mark.parametrize("budget", [1e11, 25e9])
def test_plans_within_budget_and_meter_equals_prediction(regime, name, config, budget):
    text = (DATA / name).read_text(encoding="utf-8")
    policy = BatchPolicy(budget=budget, **(AUX if config == "aux" else AUX_OCC))
    ev = se.Evaluator(text, regime, policy=policy)
    rep = ev.analyze()
    assert rep.peak_bytes <= budget
    _, meter = ev.batched.run("dryrun")
    assert meter.peak_bytes == rep.peak_bytes


def test_aux_only_reference_shapes(regime):
    """At a budget that forces Κ batching (5e9 B): a Κ-contraction result leaves the {Κ}
    block as an AccumulateSum; a consumer of it that does not carry Κ is a root BuildStep
    built exactly once; Κ-carrying values are LoopLocal inside {Κ}."""
    text = (DATA / "csv_ccsd_doubles_residual_df.txt").read_text(encoding="utf-8")
    ev = se.Evaluator(text, regime, policy=BatchPolicy(budget=5e9, **AUX))
    a = ev.batched.analysis
    kblocks = [b for b in a.ordered.root.blocks() if b.loop >= 0]
    assert kblocks and all(b.axis == "Κ" and b.kind.value == "C" for b in kblocks)
    sums = [o for b in kblocks for o in b.outputs if o.kind is OutputKind.ACCUMULATE_SUM]
    assert sums
    roles = analyze_legality(a.rich)
    root_builds = [s.form for s in a.ordered.root.steps if not hasattr(s, "loop")]
    consumers = [rd for o in sums for rd, _ in a.rich.readers[o.form]
                 if a.rich.forms[rd].kind is FormKind.CONTRACT]
    assert consumers and all(root_builds.count(c) == 1 for c in consumers)
    assert all(roles.cells[c].role(kblocks[0].loop) in (None, Role.LOOP_INVARIANT)
               and not a.rich.forms[c].scope for c in consumers)
    local = [c for c in roles.cells.values() if Role.LOOP_LOCAL in dict(c.per_axis).values()]
    assert any(a.forest.values[c.value].tensor == "g" for c in local)


def test_aux_occ_schedule_is_well_formed_and_dry_run_completes(regime):
    text = (DATA / "csv_ccsd_doubles_residual_df.txt").read_text(encoding="utf-8")
    ev = se.Evaluator(text, regime, policy=BatchPolicy(budget=5e9, **AUX_OCC))
    prog = ev.batched                    # build_ordered_schedule runs well_formed
    _, meter = prog.run("dryrun")
    assert meter.peak_bytes == prog.analysis.peak_bytes <= 5e9


def test_infeasible_budget_names_a_minimum_that_works(regime):
    text = (DATA / "csv_ccsd_energy_df.txt").read_text(encoding="utf-8")
    with pytest.raises(se.InfeasibleBudget) as info:
        se.analyze(text, regime, policy=BatchPolicy(budget=1e6, **AUX))
    rep = se.analyze(text, regime, policy=BatchPolicy(budget=info.value.minimum, **AUX))
    assert rep.peak_bytes <= info.value.minimum


def test_composite_tensors_are_not_evaluated_numerically(regime):
    text = (DATA / "csv_ccsd_energy_df.txt").read_text(encoding="utf-8")
    with pytest.raises(se.UnsupportedFeature, match="composite"):
        se.evaluate(text, {}, regime.extents)
