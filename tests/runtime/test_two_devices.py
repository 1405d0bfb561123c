"""Two devices without a GPU: a stand-in "GPU" backend (the array-API code path over NumPy)
runs the placed graph, so copies, device seams, branches and the route picker execute.

Oracle: tests/oracles/direct.py. This is the CuPy path's logic run on the host; the CuPy
arrays themselves are exercised only on a GPU machine (benchmarks/gpu_check.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.runtime import ArrayApiBackend, NumpyBackend, TensorSource
from sequant_eval.runtime.compiled import RoutePicker
from sequant_eval.runtime.engine import run_graph
from sequant_eval.runtime.graph import Device, Op
from sequant_eval.runtime.placement import CostModel, Machine
from sequant_eval.runtime.runs import extract_runs

from tests.oracles.direct import direct_evaluate

pytest.importorskip("pyscf")


class HostGpu(ArrayApiBackend):
    """The array-API backend over NumPy, standing in for a device."""

    def __init__(self) -> None:
        super().__init__(np, "host-gpu")


def _fast_gpu() -> CostModel:
    base = CostModel()
    return CostModel(rate=base.rate | {Device.GPU: 1e15}, bandwidth=base.bandwidth,
                     launch={Device.CPU: 1e-6, Device.GPU: 1e-7}, link=1e12, latency=1e-7)


@pytest.mark.parametrize("tolerance_fork", [False, True])
def test_placed_ccsd_runs_on_two_devices(tolerance_fork):
    from sequant_eval.chem.integrals import SpinOrbitalIntegrals

    ints = SpinOrbitalIntegrals.from_molecule("water", "6-31g")
    rng = np.random.default_rng(2)
    o, v = ints.nocc, ints.nvir
    tensors = dict(ints.tensors(), t1={("a", "i"): 0.1 * rng.standard_normal((v, o))},
                   t2={("a", "a", "i", "i"): 0.1 * rng.standard_normal((v, v, o, o))})
    ev = se.Evaluator(ccsd_equations(), ints.extents)
    machine = Machine(gpu=True, cost=_fast_gpu())
    low, roots = ev.batched.lowered(False, machine)
    g = low.graph
    placed = {g.device.get(n) for n in g.order(roots) if g.nodes[n].op is Op.CONTRACT}
    assert Device.GPU in placed                                  # work went to the "GPU"
    copies = [n for n in g.order(roots) if g.nodes[n].op is Op.COPY]
    assert copies                                                # transfers are graph nodes
    assert any(r.device is Device.GPU for r in extract_runs(g, roots))
    source = TensorSource(ev.forest, tensors, ints.extents)
    backends = {Device.CPU: NumpyBackend(), Device.GPU: HostGpu()}
    picker = RoutePicker(g, gpu=not tolerance_fork)              # no GPU: every CPU arm
    out, meter = run_graph(g, roots, ev.forest, backends, source, resolve=picker)
    ref = direct_evaluate(ev.forest, source)
    for name, node in low.roots.items():
        got = np.asarray(out[node])
        assert np.abs(got - ref[name]).max() <= 1e-12 * max(1.0, np.abs(ref[name]).max())
    assert set(meter.device_peaks) >= {"cpu"}
