"""Random forests × random budgets, executed: the batched run equals the unbatched one.

Oracles: the unbatched walk of the same forest (values, to 1e-12 relative), the static
sweep (the dry-run meter and the NumPy accounted peak must equal it to the byte), and the
cell-table validator (no violation).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sequant_eval as se
from sequant_eval.runtime import TensorSource
from sequant_eval.runtime.cells import validate

from tests.oracles.direct import direct_evaluate

from .forests import equation_sets
from .test_schedule_properties import _budget_between

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.filter_too_much])


def _tensors(forest, extents, seed: int):
    """Random blocks, one fixed array per (tensor, spaces)."""
    rng = np.random.default_rng(seed)
    blocks = {}
    for v in forest.values:
        if v.tensor is not None and (v.tensor, v.spaces) not in blocks:
            blocks[(v.tensor, v.spaces)] = rng.standard_normal(
                tuple(extents[s] for s in v.spaces))
    names = {t for t, _ in blocks}
    return {n: {sp: arr for (t, sp), arr in blocks.items() if t == n} for n in names}


class _Shapes:
    def __init__(self, shapes) -> None:
        self.shapes = shapes

    def shape(self, vid: int):
        return self.shapes[vid]


def _run(text: str, extents: dict, position: float, block: int, seed: int) -> None:
    policy = _budget_between(text, extents, block, position, max_loops=2)
    ev = se.Evaluator(text, extents, policy=policy)
    try:
        program = ev.batched
    except se.InfeasibleBudget as err:
        assert position < 0 or err.minimum > policy.budget_bytes
        return
    a = program.analysis
    assert not validate(program.table, a.ordered, a.forest)
    tensors = _tensors(ev.forest, extents, seed)
    source = TensorSource(ev.forest, tensors, extents)
    reference = direct_evaluate(ev.forest, source)
    out, meter = program.run("numpy", source)
    _, dry = program.run("dryrun")
    assert meter.peak_bytes == dry.peak_bytes == a.peak_bytes
    assert meter.flops == dry.flops == a.flops
    assert a.peak_bytes <= policy.budget_bytes
    for name, ref in reference.items():
        scale = max(1.0, float(np.abs(ref).max()))
        assert np.abs(np.asarray(out[name]) - ref).max() <= 1e-12 * scale, name


@settings(max_examples=200, **SETTINGS)
@given(equation_sets(max_terms=6, max_factors=5), st.floats(-0.1, 1.0), st.integers(1, 4),
       st.integers(0, 2**16))
def test_batched_equals_unbatched(case, position, block, seed):
    text, extents = case
    _run(text, extents, position, block, seed)


@pytest.mark.slow
@settings(max_examples=1500, **SETTINGS)
@given(equation_sets(), st.floats(-0.1, 1.0), st.integers(1, 5), st.integers(0, 2**16))
def test_batched_equals_unbatched_long(case, position, block, seed):
    text, extents = case
    _run(text, extents, position, block, seed)
