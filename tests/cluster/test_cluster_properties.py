"""Random forests × random budgets on a Dask cluster: equal to the single-process run.

Oracle: the single-process evaluation of the same inputs under the same fitted schedule
(``se.Evaluator.evaluate`` without a client), to 1e-12 relative; the cluster's metered task
peaks must equal their dry-run predictions, and the predicted per-worker peak must be
within the budget.

Forests and budgets come from the single-process property (``tests/properties``): budgets
between the forest-level minimum and 90 % of the way up to the loop-free peak. Every
example that ran in three probes of 30 (90 of 90) had outer-loop batches, i.e. more than
one Dask task (a budget below the loop-free peak always opens a loop, and an outer loop
has at least two batches); an example without one would run wholly on the client.
``MIN_DISTRIBUTED`` is checked at the end so the property cannot pass without exercising
the cluster.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import sequant_eval as se

from tests.properties.forests import equation_sets
from tests.properties.test_batched_properties import (_policy, _tensors, forest_minimum,
                                                      loop_free_peak)

#: The smallest fraction of examples that must run more than one task on the cluster.
MIN_DISTRIBUTED = 0.6


# The Dask client's threads draw from ``random`` while Hypothesis generates an example;
# Hypothesis takes that for the strategy's doing (the strategy alone raises no warning).
@pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning")
def test_cluster_equals_single_process(client):
    seen = {"examples": 0, "distributed": 0}

    @settings(max_examples=30, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.function_scoped_fixture])
    @given(equation_sets(max_terms=6, max_factors=5), st.floats(0.0, 0.9), st.integers(1, 4),
           st.integers(0, 2**16))
    def check(case, position, block, seed):
        text, extents = case
        top = loop_free_peak(text, extents)
        low = forest_minimum(text, extents, block)
        assume(low < top)
        budget = low + position * (top - low)
        ev = se.Evaluator(text, extents, policy=_policy(extents, block, budget))
        tensors = _tensors(ev.forest, extents, seed)
        reference = ev.evaluate(tensors)
        out, meter = ev.evaluate(tensors, client=client, return_meter=True)
        assert set(out) == set(reference)
        for name, ref in reference.items():
            scale = max(1.0, float(np.abs(ref).max()))
            assert np.abs(np.asarray(out[name]) - ref).max() <= 1e-12 * scale, name
        assert meter.plan.worker_peak_bytes <= budget
        assert [t.peak_bytes for t in sorted(meter.tasks, key=lambda t: (t.block, t.batch))
                ] == list(meter.plan.task_peaks)
        seen["examples"] += 1
        seen["distributed"] += len(meter.tasks) > 1

    check()
    assert seen["examples"] > 0
    assert seen["distributed"] >= MIN_DISTRIBUTED * seen["examples"], seen



def test_kernel_plans_are_not_shared_between_programs(client):
    """Two forests whose contraction has the same value id and operand shapes but another
    index pattern (``X·Y`` and ``X·Yᵀ``), one after the other on the same workers: each
    equals its single-process run (a worker that reused the first program's kernel plan
    would compute ``X·Y`` twice)."""
    extents = {"i": 6, "a": 2}                      # batches of i are 2 long: Y's blocks
    for text in ("R{i_1,i_2} = X{i_1,a_1} * Y{a_1,i_2}",     # (a, i) and (i, a) are both 2x2
                 "R{i_1,i_2} = X{i_1,a_1} * Y{i_2,a_1}"):
        low = forest_minimum(text, extents, 2)
        ev = se.Evaluator(text, extents, policy=_policy(extents, 2, low))
        tensors = _tensors(ev.forest, extents, 1)
        ref = ev.evaluate(tensors)
        out, meter = ev.evaluate(tensors, client=client, return_meter=True)
        assert len(meter.tasks) > 1, "the contraction must run in tasks for this to mean anything"
        np.testing.assert_allclose(out["R"], ref["R"], rtol=1e-12, atol=1e-12)
