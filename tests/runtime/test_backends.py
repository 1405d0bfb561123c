"""The whole CCSD residual through the op graph on NumPy and on array_api_strict.

Oracle: tests/oracles/direct.py (every value by plain np.einsum from its definition).
array_api_strict accepts nothing beyond the array-API standard, so a run there shows the
executor uses nothing NumPy-specific — the property the CuPy path relies on.
"""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.runtime import Compiled, Device, NumpyBackend, TensorSource, run_graph
from sequant_eval.runtime.gpu import Machine, Placed
from sequant_eval.schedule.budget import fit_forest
from sequant_eval.plan import BatchPolicy

from tests.oracles.direct import direct_evaluate

pytest.importorskip("pyscf")
array_api_strict = pytest.importorskip("array_api_strict")


@pytest.fixture(scope="module")
def water():
    from sequant_eval.chem.integrals import SpinOrbitalIntegrals

    ints = SpinOrbitalIntegrals.from_molecule("water", "6-31g")
    rng = np.random.default_rng(5)
    o, v = ints.nocc, ints.nvir
    t2 = 0.1 * rng.standard_normal((v, v, o, o))
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    tensors = dict(ints.tensors(), t1={("a", "i"): 0.1 * rng.standard_normal((v, o))},
                   t2={("a", "a", "i", "i"): t2})
    return ints, tensors


@pytest.mark.parametrize("fraction", [None, 0.7])
@pytest.mark.parametrize("backend", ["numpy", "array_api_strict"])
def test_ccsd_through_the_graph_equals_direct_evaluation(water, backend, fraction):
    ints, tensors = water
    ev = se.Evaluator(ccsd_equations(), ints.extents)
    if fraction is not None:
        ev = se.Evaluator(ccsd_equations(), ints.extents,
                          budget=fraction * ev.analyze().peak_bytes)
    out, meter = ev.evaluate(tensors, backend=backend, return_meter=True)
    ref = direct_evaluate(ev.forest, TensorSource(ev.forest, tensors, ints.extents))
    for name, r in ref.items():
        got = np.asarray(out[name])
        assert np.abs(got - r).max() <= 1e-12 * max(1.0, np.abs(r).max()), name
    assert meter.peak_bytes == ev.analyze().peak_bytes
    _, dry = ev.batched.run("dryrun")
    assert dry.peak_bytes == meter.peak_bytes and dry.flops == meter.flops


def test_disabling_all_passes_gives_bitwise_identical_numpy_results(water):
    """The unrolled op graph (the GPU layer's, here placed on the host alone) run with and
    without its rewriting passes; oracle: each other, bit for bit."""
    ints, tensors = water
    ev = se.Evaluator(ccsd_equations(), ints.extents)
    top = ev.analyze().peak_bytes
    a = fit_forest(ev.forest, ev.regime, BatchPolicy.everything(0.7 * top, ints.extents))
    source = TensorSource(ev.forest, tensors, ints.extents)
    results = []
    for passes in (True, False):
        low, roots = Placed(Compiled(a), passes=passes).lowered(False, Machine())
        out, _ = run_graph(low.graph, roots, ev.forest, {Device.CPU: NumpyBackend()}, source)
        results.append({name: out[n] for name, n in low.roots.items()})
    with_passes, without = results
    for name in with_passes:
        assert np.array_equal(with_passes[name], without[name]), name


def test_cupy_backend_is_refused_clearly_without_a_gpu(water):
    from sequant_eval.runtime.gpu import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    ints, tensors = water
    with pytest.raises(se.SequantEvalError, match="GPU"):
        se.evaluate(ccsd_equations(), tensors, ints.extents, backend="cupy")
    out = se.evaluate(ccsd_equations(), tensors, ints.extents, backend="auto")
    assert set(out) == {"E", "R1", "R2"}
